#!/usr/bin/env bash
# Runs the confluent-kafka checks (checks.py) against BOOTSTRAP (default 127.0.0.1:9092).
# Prints the checks' PASS/FAIL lines and one "confluent-kafka: N passed, M failed" line.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BOOTSTRAP="${BOOTSTRAP:-127.0.0.1:9092}"
if [[ ! -x "$HERE/.venv/bin/python" ]]; then
  echo "run.sh: the venv is missing; run setup.sh first" >&2
  echo "confluent-kafka: 0 passed, 1 failed"
  exit 1
fi
# The checks take about a minute; five is a hang.
exec timeout -k 10 300 "$HERE/.venv/bin/python" "$HERE/checks.py" "$BOOTSTRAP"
