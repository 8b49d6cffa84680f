#!/usr/bin/env bash
# Runs the kafkajs checks (checks.js) against BOOTSTRAP (default 127.0.0.1:9092).
# Prints the checks' PASS/FAIL lines and exactly one "kafkajs: N passed, M failed" line.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BOOTSTRAP="${BOOTSTRAP:-127.0.0.1:9092}"
if [[ ! -d "$HERE/node_modules/kafkajs" ]]; then
  echo "run.sh: kafkajs is not installed; run setup.sh first" >&2
  echo "kafkajs: 0 passed, 1 failed"
  exit 1
fi
# The whole suite takes about a minute; ten is a hang.
exec timeout -k 10 600 node "$HERE/checks.js" "$BOOTSTRAP"
