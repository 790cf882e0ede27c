"""`python -m tpu_embedding_shim.tensorflow program.py [args]`: runs an unmodified program in the drop-in mode.

The program runs as `__main__` with its own arguments (`sys.argv`), its
directory first on `sys.path`, as `python program.py [args]` would run it;
`-m module [args]` runs a module as `python -m module` would. TensorFlow's
TPU names are this project's for the whole run (`_mode.py`); one line on
stderr says so.
"""

from __future__ import annotations

import os
import runpy
import sys

from . import ACTIVE_MESSAGE, activate, replaced_names

USAGE = (
    "usage: python -m tpu_embedding_shim.tensorflow program.py [args ...]\n"
    "       python -m tpu_embedding_shim.tensorflow -m module [args ...]\n"
    "Runs the program unchanged, with TensorFlow's TPU-embedding names on the CPU engine (docs/run_unchanged.md)."
)


def _usage_error(message: str) -> None:
    print(f"{USAGE.splitlines()[0]}\npython -m tpu_embedding_shim.tensorflow: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str]) -> None:
    if not argv:
        _usage_error("give the program to run (a .py file, or -m module)")
    if argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    if argv[0] == "-m":
        if len(argv) < 2:
            _usage_error("argument -m: give the module to run")
        module, args = argv[1], argv[2:]
        activate()
        print(ACTIVE_MESSAGE.format(count=len(replaced_names())), file=sys.stderr)
        sys.argv = [module, *args]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    if argv[0].startswith("-"):
        _usage_error(f"unknown option {argv[0]!r}: options go after the program, which receives them")
    program, args = argv[0], argv[1:]
    if not os.path.isfile(program):
        _usage_error(f"can't open file {program!r}: no such file")
    activate()
    print(ACTIVE_MESSAGE.format(count=len(replaced_names())), file=sys.stderr)
    sys.argv = [program, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(program)))
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
