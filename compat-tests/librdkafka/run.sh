#!/usr/bin/env bash
# Run the allow-listed part of librdkafka's own test suite against a broker.
#
# Every test number runs in its own test-runner process (a test that times out
# inside test-runner SIGKILLs the whole process, so one hung test must not take
# the other results with it). Up to $PARALLEL processes run at once.
#
# Env:
#   BOOTSTRAP            broker to test               (default 127.0.0.1:9092)
#   KAFKA_PATH           Kafka's bin/ for tests that run its tools (default kafka-path/,
#                        kafka-topics.sh over the Maven jars)
#   TESTS                comma/space list; subset of the allow list to run
#   PARALLEL             concurrent test processes    (default 1; 2 is faster but flakier on a loaded 2-core box)
#   TEST_KAFKA_VERSION   version the tests gate on    (default 3.9.0)
#   TIMEOUT_MULTIPLIER   test.timeout.multiplier      (default 2)
#   PER_TEST_TIMEOUT     hard wall-clock cap per test (default 300 s)
#   LIBRDKAFKA_RELEASE   the release setup.sh built   (default: Debian's)
#   LIBRDKAFKA_CACHE     where setup.sh built things  (default ~/.cache/cairn-librdkafka[-RELEASE])
#   ALLOW_LIST           the tests to run             (default allow-list.txt)
#   EXPECTED_FAILURES    their known failures         (default expected-failures.txt)
#   RUN_SLOW=1           also run the entries marked slow
#   TEST_CONF_EXTRA      lines added to test.conf (security.protocol, sasl.*, ssl.* for a
#                        secured broker)
#   SKIP_FAILS=1         a skipped test counts as failed (for suites whose every test must
#                        apply, such as the secured one)
#   RUN_DIR              where logs go                (default $LIBRDKAFKA_CACHE/runs/<timestamp>)
#   REEVALUATE=1         with RUN_DIR=<old run>: only re-parse that run's logs
#   RETRY_FAILED=0       no rerun of failed tests (by default each failure is rerun once, alone,
#                        and a pass then is reported as FLAKY)
#
# Output: one "PASS|FAIL|XFAIL|XPASS|SKIP <test> <secs>s <reason>" line per test,
# then an "librdkafka: ... xfail ..." line, then exactly one line
#   librdkafka: N passed, M failed
# (M counts unexpected failures only). Exit status is non-zero iff M > 0.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RELEASE="${LIBRDKAFKA_RELEASE:-}"
CACHE="${LIBRDKAFKA_CACHE:-$HOME/.cache/cairn-librdkafka${RELEASE:+-$RELEASE}}"
BOOTSTRAP="${BOOTSTRAP:-127.0.0.1:9092}"
PARALLEL="${PARALLEL:-1}"
export TEST_KAFKA_VERSION="${TEST_KAFKA_VERSION:-3.9.0}"
TIMEOUT_MULTIPLIER="${TIMEOUT_MULTIPLIER:-2}"
PER_TEST_TIMEOUT="${PER_TEST_TIMEOUT:-300}"

STAMP="$CACHE/.setup-done"
if [[ ! -f "$STAMP" ]]; then
    echo "librdkafka: not set up; run $HERE/setup.sh first" >&2
    echo "librdkafka: 0 passed, 1 failed"
    exit 2
fi
SRC="$(cat "$STAMP")"
TESTDIR="$SRC/tests"
RUNNER="$TESTDIR/test-runner"
[[ -x "$RUNNER" ]] || { echo "librdkafka: $RUNNER missing; rerun setup.sh" >&2; echo "librdkafka: 0 passed, 1 failed"; exit 2; }

RUN_DIR="${RUN_DIR:-$CACHE/runs/$(date +%Y%m%d-%H%M%S)-$$}"
mkdir -p "$RUN_DIR"

# --- test.conf --------------------------------------------------------------------
# Written per run (pointed at by RDKAFKA_TEST_CONF) so that two runs against
# different brokers do not clobber each other; also copied to tests/test.conf
# for manual ./run-test.sh use.
CONF="$RUN_DIR/test.conf"
cat > "$CONF" <<EOF
bootstrap.servers=$BOOTSTRAP
broker.address.family=v4
test.topic.random=true
test.timeout.multiplier=$TIMEOUT_MULTIPLIER
EOF
[[ -z "${TEST_CONF_EXTRA:-}" ]] || printf '%s\n' "$TEST_CONF_EXTRA" >> "$CONF"
cp "$CONF" "$TESTDIR/test.conf"
export RDKAFKA_TEST_CONF="$CONF"
# Kafka's shell tools, for the tests that run them (kafka-path/bin/kafka-topics.sh).
export KAFKA_PATH="${KAFKA_PATH:-$HERE/kafka-path}" BROKERS="$BOOTSTRAP"
# Use the freshly built libraries, never a system librdkafka (as run-test.sh does).
export LD_LIBRARY_PATH="$SRC/src:$SRC/src-cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- allow list / expected failures -------------------------------------------------
# allow-list.txt:        <NNNN> [sockem] [sub=<SUBTESTS substring>] [conf=<key>=<value>...]   # comment
#   An entry with sub=X runs only the sub-tests whose name contains X (%20 for a
#   space); its id is NNNN/X. An entry with conf=k=v runs with that line added to test.conf
#   (later lines win); its id gets @v of its first conf= (0142@OAUTHBEARER).
#   Several entries may share a test number.
# expected-failures.txt: <id> <reason...>      (id = NNNN or NNNN/X)
# ALLOW_LIST: another list in the same format (cluster-allow-list.txt: tests that need
# several brokers, run by run-all.sh's librdkafka-cluster suite against three nodes).
ALLOW_LIST="${ALLOW_LIST:-$HERE/allow-list.txt}"
declare -a ORDER=() SLOW_LEFT=()
declare -A SOCKEM=() SUB=() NUM=() XFAIL=() TCONF=()
while read -r num rest; do
    [[ -z "$num" || "$num" == \#* ]] && continue
    opts="${rest%%#*}"
    id="$num"; sub=""; tconf=""; at=""
    # "slow": passes, but takes a minute or more; run only with RUN_SLOW=1 (CI's budget).
    if [[ " $opts " == *" slow "* && "${RUN_SLOW:-0}" != 1 ]]; then
        SLOW_LEFT+=("$num"); continue
    fi
    for o in $opts; do
        case "$o" in
            sockem | slow) ;;
            sub=*) sub="${o#sub=}"; id="$num/$sub" ;;
            conf=*=*) tconf+="${o#conf=}"$'\n'; at="${at:-@${o#conf=*=}}" ;;
            *) echo "librdkafka: allow-list.txt: unknown option '$o' for $num" >&2 ;;
        esac
    done
    id="$id$at"
    ORDER+=("$id"); NUM[$id]="$num"; SUB[$id]="$sub"; TCONF[$id]="$tconf"
    [[ " $opts " == *" sockem "* ]] && SOCKEM[$id]=1
done < "$ALLOW_LIST"
EXPECTED_FAILURES="${EXPECTED_FAILURES:-$HERE/expected-failures.txt}"
if [[ -f "$EXPECTED_FAILURES" ]]; then
    while read -r id rest; do
        [[ -z "$id" || "$id" == \#* ]] && continue
        XFAIL[$id]="${rest:-expected failure}"
    done < "$EXPECTED_FAILURES"
fi

if [[ -n "${TESTS:-}" ]]; then
    declare -a SEL=()
    for t in ${TESTS//,/ }; do
        found=0
        # "0081" selects every 0081 entry, "0081/do_test_X" just that one
        for a in "${ORDER[@]}"; do
            if [[ "$a" == "$t" || "${NUM[$a]}" == "$t" ]]; then SEL+=("$a"); found=1; fi
        done
        [[ $found == 1 ]] || echo "librdkafka: $t is not in allow-list.txt, ignored" >&2
    done
    ORDER=("${SEL[@]}")
fi

echo "librdkafka: $(basename "$SRC") against $BOOTSTRAP, TEST_KAFKA_VERSION=$TEST_KAFKA_VERSION," \
     "${#ORDER[@]} tests, parallel $PARALLEL, logs in $RUN_DIR" >&2
if [[ ${#SLOW_LEFT[@]} -gt 0 ]]; then
    echo "librdkafka: not run (slow; RUN_SLOW=1 runs them): ${SLOW_LEFT[*]}"
fi

# --- preflight: partition count of auto-created topics --------------------------------
# librdkafka's suite is normally run on trivup clusters with num.partitions=4; some
# tests (0012 0015 0054 0057) produce to partitions 1..3 of auto-created topics.
KCAT_CONF=()
while IFS= read -r line; do [[ -n "$line" ]] && KCAT_CONF+=(-X "$line"); done <<<"${TEST_CONF_EXTRA:-}"
if [[ "${REEVALUATE:-0}" != 1 ]] && command -v kcat >/dev/null; then
    pf="rdkafkatest_preflight_$(date +%s)_$RANDOM"; parts=""
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        parts="$(timeout 15 kcat -b "$BOOTSTRAP" -X broker.address.family=v4 "${KCAT_CONF[@]}" -L -t "$pf" -m 5 2>/dev/null \
                 | sed -nE 's/^ *topic "[^"]*" with ([0-9]+) partitions:$/\1/p')"
        [[ -n "$parts" && "$parts" != 0 ]] && break
        sleep 1
    done
    if [[ "$parts" != 4 ]]; then
        echo "librdkafka: WARNING: auto-created topic $pf has '${parts:-?}' partitions; the suite" \
             "expects a broker with auto.create.topics.enable=true and num.partitions=4" >&2
    fi
fi

# --- run ------------------------------------------------------------------------------
unset TESTS SUBTESTS TESTS_SKIP TESTS_SKIP_BEFORE
logname() { echo "$RUN_DIR/${1//\//_}"; }
run_one() {
    # -Q (quick mode: less data) only for tests that do all their work in it: in quick mode
    # every plain SUB_TEST() (not SUB_TEST_QUICK()) returns at once while the test still
    # reports PASSED, and some tests skip themselves or their later parts (0081, 0082, 0094).
    local id="$1" flags=(-Q -L)
    if grep -qE 'SUB_TEST\(|due to quick mode' "$TESTDIR/${NUM[$id]}"-*.c \
        "$TESTDIR/${NUM[$id]}"-*.cpp 2>/dev/null; then
        flags=(-L)
    fi
    [[ -z "${SOCKEM[$id]:-}" ]] && flags+=(-E)
    local start end rc f conf="$CONF"
    f="$(logname "$id")"
    if [[ -n "${TCONF[$id]}" ]]; then
        conf="$f.conf"
        { cat "$CONF"; printf '%s' "${TCONF[$id]}"; } > "$conf"
    fi
    start=$EPOCHREALTIME
    (cd "$TESTDIR" && RDKAFKA_TEST_CONF="$conf" TESTS="${NUM[$id]}" SUBTESTS="${SUB[$id]//%20/ }" \
        timeout -k 10 "$PER_TEST_TIMEOUT" \
        ./test-runner "${flags[@]}" -p1 > "$f.log" 2>&1)
    rc=$?
    end=$EPOCHREALTIME
    printf '%s %s\n' "$rc" "$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}')" > "$f.rc"
}

# On Ctrl-C/TERM take the running test processes down too.
killtree() { local c; for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do killtree "$c"; done; kill "$1" 2>/dev/null; }
trap 'for j in $(jobs -p); do killtree "$j"; done; echo "librdkafka: interrupted" >&2; exit 130' INT TERM
suite_start=$(date +%s)
[[ "${REEVALUATE:-0}" == 1 ]] && ORDER_RUN=() || ORDER_RUN=("${ORDER[@]}")
for t in "${ORDER_RUN[@]}"; do
    while (( $(jobs -rp | wc -l) >= PARALLEL )); do wait -n 2>/dev/null || true; done
    echo "librdkafka: start $t" >&2
    run_one "$t" 2>/dev/null &   # (silences bash "Aborted" job notices)
done
wait

# --- evaluate -------------------------------------------------------------------------
strip() { sed -E 's/\x1b\[[0-9;]*m//g' "$1"; }
# evaluate <id>: sets state (PASSED, FAILED or SKIPPED), reason and secs from the test's log.
evaluate() {
    local t="$1" n="${NUM[$1]}" log rc wall rows n_pass n_fail n_skip
    log="$(logname "$t").log"
    read -r rc wall < "$(logname "$t").rc" 2>/dev/null || { rc=255; wall=0; }
    # Summary rows look like: "| 0001_multiobj   |     PASSED |   1.234s | reason"
    # (a timed-out test prints the summary twice; take the last row per name).
    rows="$(strip "$log" | grep -E "^\| *${n}_[A-Za-z0-9_]* *\| *(PASSED|FAILED|SKIPPED|RUNNING|DNS) *\|" \
            | awk -F'|' '{n=$2; gsub(/ /,"",n); last[n]=$0} END {for (k in last) print last[k]}')"
    n_pass=$(grep -c '| *PASSED *|' <<<"$rows")
    n_fail=$(grep -cE '\| *(FAILED|RUNNING) *\|' <<<"$rows")
    n_skip=$(grep -c '| *SKIPPED *|' <<<"$rows")
    reason=""
    if (( n_fail > 0 )); then
        reason="$(grep -E '\| *(FAILED|RUNNING) *\|' <<<"$rows" | head -n1 | cut -d'|' -f5- | sed -E 's/^ +//' | cut -c1-200)"
        state=FAILED
    elif (( n_pass > 0 )) && [[ "$rc" == 0 ]]; then
        state=PASSED
    elif (( n_pass > 0 )); then
        state=FAILED; reason="test-runner exit status $rc"
    elif (( n_skip > 0 )); then
        state=SKIPPED; reason="$(grep '| *SKIPPED *|' <<<"$rows" | head -n1 | cut -d'|' -f5- | sed -E 's/^ +//' | cut -c1-200)"
    elif grep -q "^### Test \"${n}_" < <(strip "$log"); then
        # A failing test makes test-runner abort before printing its summary.
        state=FAILED
        reason="$(strip "$log" | grep -m1 -A1 "^### Test \"${n}_" | tail -n1 | cut -c1-200)"
    elif [[ "$rc" == 124 || "$rc" == 137 ]]; then
        state=FAILED; reason="killed after ${PER_TEST_TIMEOUT}s (PER_TEST_TIMEOUT)"
    else
        state=FAILED; reason="no result row (test-runner exit status $rc): $(strip "$log" | tail -n1 | cut -c1-160)"
    fi
    [[ -z "$reason" && "$state" == FAILED ]] && \
        reason="$(strip "$log" | grep -m1 -E 'TEST FAILURE|FAIL' | cut -c1-200)"
    if [[ "$state" == PASSED && -n "${SUB[$t]}" ]] && \
       ! grep -qF "${SUB[$t]//%20/ }" < <(strip "$log" | grep -E "^\[.*\] \[ .*: PASS"); then
        state=FAILED; reason="no sub-test matching '${SUB[$t]}' ran"
    fi
    secs="$wall"
}

pass=0 fail=0 xfail=0 xpass=0 skip=0 flaky=()
for t in "${ORDER[@]}"; do
    evaluate "$t"
    log="$(logname "$t").log"
    # A failure gets one rerun, alone, since several of these tests race client timers
    # against the broker (0102's max.poll/session step is one, failing about 1 run in 4
    # under heavy load). A pass on the rerun is reported as FLAKY, with the first log kept.
    if [[ "$state" == FAILED && -z "${XFAIL[$t]:-}" && "${RETRY_FAILED:-1}" == 1 && "${REEVALUATE:-0}" != 1 ]]; then
        first_reason="$reason"
        mv "$log" "$(logname "$t").first.log"
        echo "librdkafka: rerun $t (first failure: $first_reason)" >&2
        run_one "$t" 2>/dev/null
        evaluate "$t"
        if [[ "$state" == PASSED ]]; then
            echo "FLAKY $t failed once, passed on its rerun; first failure: $first_reason (log: $(logname "$t").first.log)"
            flaky+=("$t")
        fi
    fi
    case "$state" in
        PASSED)
            if [[ -n "${XFAIL[$t]:-}" ]]; then
                echo "XPASS $t ${secs}s (listed in expected-failures.txt: ${XFAIL[$t]}; remove it)"
                xpass=$((xpass + 1))
            else
                echo "PASS  $t ${secs}s"
            fi
            pass=$((pass + 1)) ;;
        SKIPPED)
            if [[ "${SKIP_FAILS:-0}" == 1 ]]; then
                echo "FAIL  $t ${secs}s skipped, which this suite counts as a failure: $reason"
                fail=$((fail + 1))
            else
                echo "SKIP  $t ${secs}s $reason"; skip=$((skip + 1))
            fi ;;
        *)
            if [[ -n "${XFAIL[$t]:-}" ]]; then
                echo "XFAIL $t ${secs}s ${XFAIL[$t]} | $reason"; xfail=$((xfail + 1))
            else
                echo "FAIL  $t ${secs}s $reason  (log: $log)"; fail=$((fail + 1))
            fi ;;
    esac
done
echo "librdkafka: $xfail expected failures (XFAIL), $xpass unexpected passes (XPASS), $skip skipped, ${#flaky[@]} passed only on rerun (FLAKY${flaky[*]:+: ${flaky[*]}}); wall time $(( $(date +%s) - suite_start ))s; logs in $RUN_DIR"
echo "librdkafka: $pass passed, $fail failed"
(( fail == 0 ))
