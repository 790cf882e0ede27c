"""The `*_program.py` files are programs that tests launch (alone or under mpiexec), not test modules: some
import an optional extra (torch, TensorFlow) at the top, so pytest's --doctest-modules must not import them."""

collect_ignore_glob = ["*_program.py"]
