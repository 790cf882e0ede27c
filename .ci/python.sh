#!/usr/bin/env bash
# Prints the path of a Python of the given version that has venv: pyenv's, or pythonX.Y on PATH.
# Usage: .ci/python.sh 3.12
set -euo pipefail
version=$1
for candidate in "$(pyenv root 2>/dev/null)"/versions/"$version".*/bin/python"$version" "$(command -v "python$version")"; do
    if [ -x "$candidate" ] && "$candidate" -c 'import venv' 2>/dev/null; then echo "$candidate" && exit 0; fi
done
echo "no Python $version on this machine (pyenv or python$version on PATH)" >&2
exit 1
