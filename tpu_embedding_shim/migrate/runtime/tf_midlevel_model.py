"""The part of a TensorFlow mid-level `model.py` that the converter adds when a learning rate is a function of the step.

`tf_midlevel.code()` embeds this module's text from the marker line on; the
converter's own configs (`tf_midlevel.build()`) use the same class.
"""

# model.py's text from here on.


class _StepCounter:
    """A v2 learning rate (no argument) from a function of the step: called once per apply_gradients."""

    def __init__(self, function, start):
        self.function, self.step = function, start

    def __call__(self):
        value = self.function(self.step)
        self.step += 1
        return value
