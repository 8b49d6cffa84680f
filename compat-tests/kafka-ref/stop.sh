#!/usr/bin/env bash
# Usage: stop.sh DATA_DIR
# Stops the broker started by start.sh on DATA_DIR (pid in DATA_DIR/kafka.pid):
# SIGTERM (controlled shutdown), then SIGKILL after KAFKA_REF_STOP_TIMEOUT
# seconds (default 30). Waits until the process is gone. Data is kept.
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 DATA_DIR" >&2
  exit 2
fi
PIDFILE="$1/kafka.pid"
TIMEOUT="${KAFKA_REF_STOP_TIMEOUT:-30}"
if [[ ! -f "$PIDFILE" ]]; then
  echo "stop.sh: no $PIDFILE; nothing to stop" >&2
  exit 0
fi
PID="$(cat "$PIDFILE")"
# Only signal the pid if it is still our broker (guards against pid reuse).
if ! kill -0 "$PID" 2>/dev/null || ! tr '\0' ' ' < "/proc/$PID/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'; then
  echo "stop.sh: pid $PID is not running kafka.Kafka; removing stale $PIDFILE" >&2
  rm -f "$PIDFILE"
  exit 0
fi
t0=$(date +%s%3N)
kill -TERM "$PID"
end=$(( $(date +%s) + TIMEOUT ))
while kill -0 "$PID" 2>/dev/null; do
  if (( $(date +%s) >= end )); then
    echo "stop.sh: pid $PID still alive after ${TIMEOUT}s; sending SIGKILL" >&2
    kill -KILL "$PID" 2>/dev/null || true
    while kill -0 "$PID" 2>/dev/null; do sleep 0.1; done
    break
  fi
  sleep 0.1
done
rm -f "$PIDFILE"
echo "stop.sh: kafka (pid $PID) stopped in $(( $(date +%s%3N) - t0 )) ms"
