"""CI's type check: mypy clean on spec/ (strict) and engine/; elsewhere no file above its baseline count.

The baseline (.ci/mypy_baseline.txt: `<count> <file>` lines) records the
errors each other module had when the check was introduced. It may only
shrink: a file with more errors than its line fails CI, a file with fewer
prints a reminder to lower its line (`--update` rewrites the file).

    python .ci/typecheck.py            # check
    python .ci/typecheck.py --update   # write the current counts as the baseline
"""

from __future__ import annotations

import collections
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
BASELINE = ROOT / ".ci" / "mypy_baseline.txt"
CLEAN = ("tpu_embedding_shim/spec/", "tpu_embedding_shim/engine/")


def error_counts() -> collections.Counter:
    """mypy's error count per file, run with pyproject.toml's [tool.mypy] settings."""
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    counts: collections.Counter = collections.Counter()
    for line in result.stdout.splitlines():
        match = re.match(r"^([^:]+\.py):\d+: error:", line)
        if match:
            counts[match.group(1)] += 1
    if result.returncode not in (0, 1) or (result.returncode == 1 and not counts):
        sys.exit(f"mypy did not run:\n{result.stdout}\n{result.stderr}")
    return counts


def read_baseline() -> dict:
    if not BASELINE.exists():
        return {}
    return {name: int(count) for count, name in (line.split() for line in BASELINE.read_text().splitlines() if line)}


def main() -> int:
    counts = error_counts()
    if "--update" in sys.argv:
        rest = {f: n for f, n in counts.items() if not f.startswith(CLEAN)}
        BASELINE.write_text("".join(f"{n} {f}\n" for f, n in sorted(rest.items())))
        print(f"baseline: {sum(rest.values())} errors in {len(rest)} files")
    baseline = read_baseline()
    failures = [f"{f}: {n} errors (must be 0)" for f, n in sorted(counts.items()) if f.startswith(CLEAN)]
    failures += [
        f"{f}: {n} errors, baseline {baseline.get(f, 0)}"
        for f, n in sorted(counts.items())
        if not f.startswith(CLEAN) and n > baseline.get(f, 0)
    ]
    lower = [f for f, n in baseline.items() if counts.get(f, 0) < n]
    for f in lower:
        print(f"{f}: {counts.get(f, 0)} errors, below its baseline {baseline[f]}: lower it (--update)")
    if failures:
        print("mypy: more errors than allowed:\n  " + "\n  ".join(failures))
        subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT)
        return 1
    print(
        f"mypy: spec/ and engine/ clean; {sum(counts.values())} errors elsewhere, none above the baseline "
        f"({sum(baseline.values())})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
