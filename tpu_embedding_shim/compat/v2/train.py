"""`tf.train`: Checkpoint, CheckpointManager (TensorFlow's object-based format); TensorFlow checkpoints read by name."""

from ...api.checkpoint_reader import latest_checkpoint, list_variables, load_checkpoint, load_variable  # noqa: F401
from ...api.train import Checkpoint, CheckpointLoadStatus, CheckpointManager  # noqa: F401
from .. import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
