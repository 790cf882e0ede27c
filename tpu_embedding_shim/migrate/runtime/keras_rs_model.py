"""The part of a keras-rs `model.py` that is the same for every converted model: the SparseCore state.

`keras_rs.code()` appends this module's text from the marker line on; `STEP`
stands for the weights' global step, which the generated part defines.
"""

import numpy as np

STEP = 0

# model.py's text from here on.


def set_sparsecore_state(layer, weights):
    """On SparseCore: sets the tables' optimizer slots and the layer's step counter to the weights'.

    keras-rs 0.4.0 has no API for them: this uses the layer's private `_table_and_slot_variables` and
    `_iterations`, as its own `set_embedding_tables` does for the tables. On default_device there is
    nothing to set: the model's optimizer trains those tables and keeps its own state.
    """
    if "sparsecore" not in layer._placement_to_path_to_feature_config:
        return
    import jax
    from jax_tpu_embedding.sparsecore.lib.nn import embedding, table_stacking

    config = layer._config
    num_shards = config.mesh.devices.size * config.num_sc_per_device
    specs = embedding.get_table_specs(config.feature_specs)
    slots = {}
    for name, spec in specs.items():
        initializers = spec.optimizer.slot_variables_initializers()
        if initializers:
            arrays = (np.asarray(weights[f"{name}/{field}"]) for field in initializers._fields)
            slots[name] = type(initializers)(*arrays)
    stacked = table_stacking.stack_and_shard_tables({name: specs[name] for name in slots}, slots, num_shards)
    for stack, values in stacked.items():
        for variable, value in zip(layer._table_and_slot_variables[stack].slot, values):
            value = jax.device_put(value.reshape((-1, value.shape[-1])), layer._sparsecore_layout.backend_layout)
            variable.assign(value)
    layer._iterations.assign(float(STEP))
