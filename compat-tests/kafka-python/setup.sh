#!/usr/bin/env bash
# Prepare kafka-python's integration tests for Cairn (idempotent; fast once done).
#   - downloads the pinned kafka-python sdist from PyPI into .sdist/ and unpacks it
#   - adds the two small files the sdist lacks (shim/ -> <sdist>/test/)
#   - creates .venv/ with kafka-python (from that same sdist) and requirements.txt
# Everything it writes is gitignored; nothing third-party enters the repository.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KP_VERSION="3.0.12"
SDIST_DIR="$HERE/.sdist"
SRC="$SDIST_DIR/kafka_python-$KP_VERSION"
VENV="$HERE/.venv"
PY="${PYTHON:-python3}"
STAMP="$VENV/.cairn-setup-done"
STAMP_KEY="$KP_VERSION $(sha256sum "$HERE/requirements.txt" "$HERE/shim/service.py" "$HERE/shim/__init__.py" | sha256sum | cut -c1-16)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_KEY" && -d "$SRC/test/integration" ]]; then
    echo "kafka-python $KP_VERSION: already set up ($SRC, $VENV)"
    exit 0
fi

mkdir -p "$SDIST_DIR"
TARBALL="$SDIST_DIR/kafka_python-$KP_VERSION.tar.gz"
if [[ ! -f "$TARBALL" ]]; then
    echo "== downloading kafka-python $KP_VERSION sdist from PyPI"
    "$PY" -m pip download --quiet --no-binary :all: --no-deps \
        -d "$SDIST_DIR" "kafka-python==$KP_VERSION"
fi

if [[ ! -d "$SRC/test/integration" ]]; then
    echo "== unpacking $TARBALL"
    rm -rf "$SRC"
    tar -xzf "$TARBALL" -C "$SDIST_DIR"
fi
# The sdist ships test/integration/ but not test/__init__.py or test/service.py
# (imported by test/integration/fixtures.py); add Cairn's own stand-ins.
cp "$HERE/shim/__init__.py" "$SRC/test/__init__.py"
cp "$HERE/shim/service.py" "$SRC/test/service.py"
# fixtures.py insists that KAFKA_ROOT is a directory even for an external broker.
mkdir -p "$SRC/servers/external"

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "== creating venv $VENV"
    "$PY" -m venv "$VENV"
fi
echo "== installing kafka-python $KP_VERSION (from the sdist) and test requirements"
nice -n 10 "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "$TARBALL" -r "$HERE/requirements.txt"
"$VENV/bin/python" - <<EOF
import kafka, kafka.codec as c
assert kafka.__version__ == "$KP_VERSION", kafka.__version__
missing = [n for n in ('gzip', 'snappy', 'lz4', 'zstd') if not getattr(c, 'has_' + n)()]
assert not missing, 'compression codecs missing: %s' % missing
import py; py.path.local  # pytest's py shim, used by fixtures.py
print('kafka-python', kafka.__version__, 'ready; codecs: gzip snappy lz4 zstd')
EOF
echo "$STAMP_KEY" > "$STAMP"
