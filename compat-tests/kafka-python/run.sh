#!/usr/bin/env bash
# Run kafka-python's integration tests against an already-running broker.
#
#   BOOTSTRAP=127.0.0.1:9092 compat-tests/kafka-python/run.sh [pytest args...]
#
# Env:
#   BOOTSTRAP      host:port of the broker (default 127.0.0.1:9092)
#   KAFKA_VERSION  broker version the tests assume (default 4.1.0); it caps the
#                  API versions kafka-python uses and gates tests
#   KP_TIMEOUT     per-test timeout in seconds (default 120)
#   KP_LOG_LEVEL   log level captured for failing tests (default INFO; DEBUG
#                  shows every request/response kafka-python sends)
# Extra arguments go to pytest (e.g. -k offsets, -x).
#
# Selected = producer, consumer (by assign and in groups) and admin tests, minus
# excluded.txt, and test_cairn_compacted.py (a compacted topic read after cleaning). Tests in expected-failures.txt run as non-strict xfail.
# The last line is `kafka-python: N passed, M failed`, where M counts
# unexpected failures, errors and skips (a selected test must run); the exit
# status is non-zero when M > 0 (including "no tests collected", pytest rc 5).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KP_VERSION="3.0.12"
SRC="$HERE/.sdist/kafka_python-$KP_VERSION"
VENV="$HERE/.venv"
RESULTS_DIR="$HERE/.results"

PYTEST_EXTRA=("$@")

fail_line() {  # harness failure before pytest could report anything
    echo "run.sh: $1" >&2
    echo "kafka-python: 0 passed, 1 failed"
    exit 1
}

"$HERE/setup.sh" >/dev/null || fail_line "setup.sh failed"

BOOTSTRAP="${BOOTSTRAP:-127.0.0.1:9092}"
export BOOTSTRAP KAFKA_URI="tcp://$BOOTSTRAP"
# KP_SECURED=1: kafka-python's SASL and SSL tests, which start their own broker, against
# Cairn's SASL_PLAINTEXT and SSL listeners instead (cairn_kp_secured.py; without
# KAFKA_URI, which those tests skip on).
TESTS=(test/integration/test_producer_integration.py
       test/integration/test_consumer_integration.py
       test/integration/test_admin_integration.py
       test/integration/test_cairn_compacted.py)
SECURED_PLUGIN=()
if [[ "${KP_SECURED:-0}" == 1 ]]; then
    : "${KP_SASL_BOOTSTRAP:?KP_SECURED=1 needs KP_SASL_BOOTSTRAP}" "${KP_SSL_BOOTSTRAP:?}" "${KP_SSL_DIR:?}"
    unset KAFKA_URI
    TESTS=(test/integration/test_sasl_integration.py test/integration/test_ssl_integration.py)
    SECURED_PLUGIN=(-p cairn_kp_secured)
fi
export KAFKA_VERSION="${KAFKA_VERSION:-4.1.0}"
# fixtures.py requires KAFKA_ROOT to be a directory, even for an external broker
export KAFKA_ROOT="$SRC/servers/external"

# Fail fast (instead of one connect timeout per test) if nothing listens.
"$VENV/bin/python" - "$BOOTSTRAP" 2>/dev/null <<'EOF' || fail_line "no broker reachable at $BOOTSTRAP"
import socket, sys
host, _, port = sys.argv[1].rpartition(':')
socket.create_connection((host.strip('[]'), int(port)), timeout=5).close()
EOF

mkdir -p "$RESULTS_DIR"
RESULTS="$RESULTS_DIR/results.json"
rm -f "$RESULTS"

DESELECT="$HERE/excluded.txt"

echo "kafka-python $KP_VERSION integration tests: BOOTSTRAP=$BOOTSTRAP KP_SECURED=${KP_SECURED:-0} KAFKA_VERSION=$KAFKA_VERSION"

cd "$SRC"
# Cairn's own test runs beside kafka-python's (its node id then reads like theirs).
cp "$HERE/test_cairn_compacted.py" test/integration/
pytest_run() {  # $1: results file; the rest: what to run
    local results="$1"; shift
    PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" \
    CAIRN_KP_DESELECT="$DESELECT" \
    CAIRN_KP_XFAIL="$HERE/expected-failures.txt" \
    CAIRN_KP_RESULTS="$results" \
    "$VENV/bin/python" -m pytest \
        -p cairn_kp_plugin "${SECURED_PLUGIN[@]}" -p no:cacheprovider \
        -v -rfEsxX -W ignore::DeprecationWarning \
        --timeout="${KP_TIMEOUT:-120}" --timeout-method=signal \
        -o log_level="${KP_LOG_LEVEL:-INFO}" \
        --junitxml="${results%.json}.xml" \
        "$@"
}
pytest_run "$RESULTS" "${TESTS[@]}" "${PYTEST_EXTRA[@]+"${PYTEST_EXTRA[@]}"}"
RC=$?

# A test that failed is run once more, alone (RETRY_FAILED=0: not). A pass then is
# reported as FLAKY and counted as passed, as librdkafka/run.sh does: kafka-python's
# group-less consumers lose a metadata update when they subscribe while the bootstrap
# Metadata request is in flight (see expected-failures.txt), whichever test hits it.
RERUN="$RESULTS_DIR/rerun.json"
rm -f "$RERUN"
mapfile -t FAILED_IDS < <("$VENV/bin/python" -c '
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(0)
for nodeid, outcome in sorted(r.get("outcomes", {}).items()):
    if outcome == "failed":
        print(nodeid)' "$RESULTS")
if [[ ${#FAILED_IDS[@]} -gt 0 && ${#FAILED_IDS[@]} -le 5 && "${RETRY_FAILED:-1}" == 1 ]]; then
    echo "kafka-python: running ${#FAILED_IDS[@]} failed test(s) once more, alone: ${FAILED_IDS[*]}"
    pytest_run "$RERUN" "${FAILED_IDS[@]}"
fi

"$VENV/bin/python" - "$RESULTS" "$RC" "$RERUN" <<'EOF'
import json, sys
path, rc, rerun = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    with open(path) as f:
        r = json.load(f)
    c = r['counts']
    n = c['passed'] + c['xpassed']
    m = c['failed'] + c['skipped']
    selected = r['selected']
except (OSError, ValueError, KeyError):
    n, m, selected = 0, 0, 0
try:
    with open(rerun) as f:
        again = json.load(f)['outcomes']
except (OSError, ValueError, KeyError):
    again = {}
flaky = [t for t, o in again.items() if o in ('passed', 'xpassed') and r['outcomes'].get(t) == 'failed']
for t in sorted(flaky):
    print('FLAKY %s (failed, then passed alone on its rerun)' % t)
n, m = n + len(flaky), m - len(flaky)
if flaky and m == 0:
    rc = 0
# pytest rc: 0 ok, 1 test failures, 2 interrupted, 3 internal error,
# 4 usage error, 5 no tests collected - anything but 0 must show up in M.
if (rc != 0 or selected == 0) and m == 0:
    m = 1
print('kafka-python: %d passed, %d failed' % (n, m))
sys.exit(1 if m else 0)
EOF
