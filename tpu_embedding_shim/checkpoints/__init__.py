"""A TPUEstimator program's checkpoint, read as tables: below the runner, so that migrate and the command line
read one without running a program.

- `program_checkpoint.py`: the files of a model_dir (`model.ckpt-<N>` in
  TensorFlow's format, the `checkpoint` state file) and one checkpoint
  opened as named tensors (`open_program_checkpoint`), whoever wrote it: TensorFlow's
  TPUEstimator or the runner (with its JSON state tensor);
- `tf_names.py`: TensorFlow's names for a program's tables and slots, and
  the row order of a TPU job's `mod` layout;
- `restore.py`: which tensor of a checkpoint becomes which table, slot or
  dense value, for a resume or a warm start (`resume_plan`,
  `warm_start_plan`);
- `state.py`: the dense part's state (`DenseState`) and its encoding in
  the runner's state tensor;
- `sparsecore_layout.py`: how SparseCore stacks and shards tables
  (TensorFlow's layouts and stacker), rows moved between plain and stacked
  tables; `sparsecore.py`: a SparseCore checkpoint read as plain tables and
  slots, and written.

docs/architecture.md ("Checkpoint formats") lists every format the project
reads and writes, and the module for each.
"""
