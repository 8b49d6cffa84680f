#!/usr/bin/env bash
# Check the harness itself against real Apache Kafka (4.1.1, one KRaft node):
# starts a fresh broker with ../kafka-ref/start.sh, runs run.sh on it (group
# tests included unless --no-groups), stops the broker, exits with run.sh's status.
#
#   compat-tests/kafka-python/validate-ref.sh [--no-groups] [pytest args...]
#
# Env: REF_PORT (default 39092; the controller uses REF_PORT+1),
#      REF_DIR  (default /tmp/cairn-kp-ref; wiped first).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REF="$HERE/../kafka-ref"
REF_PORT="${REF_PORT:-39092}"
REF_DIR="${REF_DIR:-/tmp/cairn-kp-ref}"

GROUPS_ARG=(--with-groups)
ARGS=()
for arg in "$@"; do
    if [[ "$arg" == --no-groups ]]; then GROUPS_ARG=(); else ARGS+=("$arg"); fi
done

# What kafka-python's own test fixture configures, and the suite relies on:
#  node.id=0                      test_create_partitions assigns new partitions to broker 0
#  num.partitions=4               auto-created topics need partition 1 (test_transactional_producer_offsets)
#  group.min.session.timeout.ms   test_group joins with session_timeout_ms=3000 (broker default min 6000)
# (Java Properties: these later lines override start.sh's node.id=1 / quorum voters.)
export KAFKA_REF_EXTRA_PROPS="node.id=0
controller.quorum.voters=0@127.0.0.1:$((REF_PORT + 1))
num.partitions=4
group.min.session.timeout.ms=1000"

"$REF/stop.sh" "$REF_DIR" >/dev/null 2>&1 || true
rm -rf "$REF_DIR"
nice -n 5 "$REF/start.sh" "$REF_PORT" "$REF_DIR" || { echo "validate-ref.sh: could not start Apache Kafka" >&2; exit 1; }

BOOTSTRAP="127.0.0.1:$REF_PORT" "$HERE/run.sh" "${GROUPS_ARG[@]+"${GROUPS_ARG[@]}"}" "${ARGS[@]+"${ARGS[@]}"}"
RC=$?
"$REF/stop.sh" "$REF_DIR" >&2
exit $RC
