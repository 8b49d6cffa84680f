#!/usr/bin/env bash
# Prepare the confluent-kafka checks (idempotent; fast once done): a venv in .venv/ with
# confluent-kafka-python from PyPI (requirements.txt), whose wheel bundles the newest
# librdkafka: the KIP-848 consumer protocol and its regex subscriptions, which Debian's
# librdkafka 2.0.2 (the librdkafka/ suite) predates. Everything it writes is gitignored.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
PY="${PYTHON:-python3}"
STAMP="$VENV/.cairn-setup-done"
KEY="$(sha256sum "$HERE/requirements.txt" | cut -c1-16)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$KEY" ]]; then
  echo "confluent-kafka: already set up ($VENV)"
  exit 0
fi
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
nice -n 10 "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
"$VENV/bin/python" -c 'import confluent_kafka as c; print("confluent-kafka", c.version()[0], "with librdkafka", c.libversion()[0], "ready")'
echo "$KEY" > "$STAMP"
