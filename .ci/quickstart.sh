#!/usr/bin/env bash
# The README's quick start as a reader runs it: a fresh clone, ONE fresh virtual environment on the given Python,
# command 1 then command 2 (read from README.md, run as written) in the clone's root; then what a reader does next,
# from another directory: the command line, the package import, the checkpoint tools and the migrations of
# docs/migrate.md on the job's model.
# Usage: .ci/quickstart.sh 3.12 [TEST PATH ...]   (a Python version: pyenv's, or python3.12 on PATH)
# With test paths, command 2's `python -m pytest` runs those paths only (the same command, narrowed): CI runs the
# whole suite once with the commands exactly as written, and on the other Pythons the install, the job and a part.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
version=$1
shift
python=$("$repo/.ci/python.sh" "$version")

work=$(mktemp -d)
git clone -q "$repo" "$work/clone"
command_1=$(sed -n '/^# 1\. /{n;p;q}' "$repo/README.md")
command_2=$(sed -n '/^# 2\. /{n;p;q}' "$repo/README.md")
[ -n "$command_1" ] && [ -n "$command_2" ] || { echo "README.md's quick start has no '# 1.' / '# 2.' commands" >&2; exit 1; }
if [ $# -gt 0 ]; then
    case $command_2 in
        *"python -m pytest") command_2="$command_2 $*" ;;
        *) echo "README.md's command 2 does not end in 'python -m pytest': cannot narrow it to $*" >&2; exit 1 ;;
    esac
fi

"$python" -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
echo "-- Python $(python -c 'import sys; print(sys.version.split()[0])'), in $work/clone"
cd "$work/clone"
echo "-- \$ $command_1" && bash -euo pipefail -c "$command_1"
echo "-- \$ $command_2" && bash -euo pipefail -c "$command_2"

echo "-- the installed package and command line, from another directory"
mkdir "$work/elsewhere" && cd "$work/elsewhere"
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -e "$site/tpu_embedding_shim" ]; then
    echo "command 2 left $site/tpu_embedding_shim behind (it shadows the editable install):" >&2
    find "$site/tpu_embedding_shim" | head >&2
    exit 1
fi
tpu-embedding-shim --help >/dev/null
tpu-embedding-shim --version
tpu-embedding-shim demo >/dev/null
python -c 'import tpu_embedding_shim as tf; assert tf.compat.v1.estimator.tpu.TPUEstimator and tf.tpu.experimental'
model=$work/clone/movielens_output/model
tpu-embedding-shim checkpoint list "$model" >/dev/null

echo "-- the trained model migrated (docs/migrate.md): TF's mid-level API and TorchRec take it whole; keras-rs and"
echo "   jax-tpu-embedding pool every feature, so without --allow-lossy they refuse its sequence feature and write nothing"
ml=tpu_embedding_shim.movielens.job:embedding_config_spec
tpu-embedding-shim migrate --to tf-midlevel $ml --checkpoint "$model" --out migrated/tf-midlevel
tpu-embedding-shim migrate --to torchrec $ml --checkpoint "$model" --out migrated/torchrec
if tpu-embedding-shim migrate --to keras-rs $ml --checkpoint "$model" --out migrated/refused; then
    echo "a lossy migration without --allow-lossy succeeded" >&2 && exit 1
fi
test ! -e migrated/refused
tpu-embedding-shim migrate --to keras-rs $ml --checkpoint "$model" --out migrated/keras-rs --allow-lossy --batch-size 256
tpu-embedding-shim migrate --to jax $ml --checkpoint "$model" --out migrated/jax --allow-lossy --batch-size 256
grep -q "max_sequence_length" migrated/jax/report.md
deactivate
rm -rf "$work"
echo "-- the quick start on Python $version: passed"
