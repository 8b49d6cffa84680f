#!/usr/bin/env bash
# Usage: bench/run.sh CAIRN_BINARY [--quick]
#        BENCH_ONLY=kafka bench/run.sh [--quick]      (Apache Kafka only, no Cairn binary needed)
#
# Side-by-side benchmark of Apache Kafka 4.x (compat-tests/kafka-ref/start.sh,
# KRaft combined mode, default -Xmx1G -Xms1G) and Cairn, one after the other on
# the same port, each on a fresh data directory, with identical client settings.
# Per broker:
#   1. start -> first produce acknowledged: a one-record `kcat -P` (librdkafka,
#      acks=1, topic auto-created) is retried in a loop from the moment the broker
#      process is launched until one succeeds; reported in ms from launch
#   2. for each run: create a 16-partition topic (TopicCommand), then
#      ProducerPerformance (kafka-producer-perf-test) with 1 KiB records,
#      --throughput -1, acks=1 and separately acks=all, linger.ms=5,
#      batch.size=65536, compression.type=none; checks every record was
#      acknowledged (records sent == N, no exception) and stored (end offsets);
#      and transactional (--transactional-id, --transaction-duration-ms TXN_MS)
#   3. consume without a consumer group: bench/ByPartitionReader.java (assign()
#      all partitions, seekToBeginning, read exactly the known record count)
#      and, read_committed, the transactional topic (every record counted)
#   4. consume in consumer groups: kafka-consumer-perf-test (ConsumerPerformance, one
#      member; its rebalance.time.ms) and bench/GroupReader.java (3 members of one
#      group over the 16 partitions: subscribe -> every member's first record, MB/s)
#   5. broker RSS after startup (VmRSS) and peak (VmHWM at the end), broker
#      CPU-seconds per GiB moved (from /proc/PID/stat), client CPU (GNU time), and per
#      produce and consume-by-partition step the broker's context switches and page faults
#      per GiB (perf stat, bench/counters-lib.sh)
# Then medians over runs, a table with the Cairn/Kafka ratios, printed and
# written to bench/results/latest.md (raw per-run values: bench/results/raw.tsv,
# tool outputs: bench/results/logs/).
#
# Options / environment:
#   --quick              200,000 records and 1 run per case (default 1,000,000 and 3)
#   BENCH_ONLY           kafka | cairn | both (default both)
#   BENCH_PORT           client port (default 47092; Kafka also uses PORT+1)
#   BENCH_RECORDS        records per produce run (overrides the default above)
#   BENCH_RUNS           runs per case (overrides the default above)
#   BENCH_PARTITIONS     partitions per topic (default 16)
#   BENCH_TXN_MS         transaction duration of the transactional produce (default 100)
#   BENCH_WORKDIR        where broker data dirs go (default: a new /tmp/cairn-bench.XXXXXX)
#   BENCH_KEEP=1         keep the broker data dirs afterwards
#   BENCH_START_TIMEOUT  seconds to wait for the first produce (default 180)
#   BENCH_STEP_TIMEOUT   seconds allowed per perf-test / read pass (default 900)
#   BENCH_PROFILE=1      also profile each produce and consume-by-partition step (perf record;
#                        bench/counters-lib.sh): TAG.top.txt and TAG.svg in bench/results/logs/
# Run it niced on a shared machine: nice -n 10 bench/run.sh ...
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
JAVA_DIR="$ROOT/compat-tests/java"
KREF="$ROOT/compat-tests/kafka-ref"
KRUN="$JAVA_DIR/kafka-run.sh"
LIB="$JAVA_DIR/lib"
RESULTS="$HERE/results"
LOGS="$RESULTS/logs"

usage() { sed -n '2,3p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

QUICK=0
CAIRN=""
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    -h|--help) usage ;;
    -*) echo "run.sh: unknown option $a" >&2; usage ;;
    *) [[ -z "$CAIRN" ]] || usage; CAIRN="$a" ;;
  esac
done

ONLY="${BENCH_ONLY:-both}"
case "$ONLY" in kafka|cairn|both) ;; *) echo "run.sh: BENCH_ONLY must be kafka, cairn or both" >&2; exit 2 ;; esac
if [[ "$ONLY" != kafka ]]; then
  [[ -n "$CAIRN" ]] || { echo "run.sh: CAIRN_BINARY missing (or set BENCH_ONLY=kafka)" >&2; usage; }
  [[ -x "$CAIRN" ]] || { echo "run.sh: $CAIRN is not an executable file (build it: make build)" >&2; exit 1; }
  CAIRN="$(cd "$(dirname "$CAIRN")" && pwd)/$(basename "$CAIRN")"
fi

PORT="${BENCH_PORT:-47092}"
PARTS="${BENCH_PARTITIONS:-16}"
if (( QUICK )); then N="${BENCH_RECORDS:-200000}"; RUNS="${BENCH_RUNS:-1}"
else                 N="${BENCH_RECORDS:-1000000}"; RUNS="${BENCH_RUNS:-3}"; fi
START_TIMEOUT="${BENCH_START_TIMEOUT:-180}"
KREF_TIMEOUT="${KAFKA_REF_TIMEOUT:-$START_TIMEOUT}"
STEP_TIMEOUT="${BENCH_STEP_TIMEOUT:-900}"
RECORD_SIZE=1024
TXN_MS="${BENCH_TXN_MS:-100}"
BOOT="127.0.0.1:$PORT"

# Identical explicit client settings for both brokers.
PRODUCER_COMMON=(linger.ms=5 batch.size=65536 compression.type=none max.in.flight.requests.per.connection=5
                 buffer.memory=33554432 client.id=bench-producer)
# JVM flags of Kafka's kafka-run-class.sh / kafka-producer-perf-test.sh for the load generators
# (kafka-run.sh defaults to C1-only fast-start flags, which would throttle the client).
CLIENT_HEAP="-Xmx512M"
CLIENT_JVM="-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
QUICK_JVM="-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto"
LOG4J="-Dlog4j2.configurationFile=$JAVA_DIR/log4j2-quiet.xml"

now_ms() { date +%s%3N; }
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }
# no fork: the connect happens in this shell (cheap enough to poll every few ms)
port_open() { { : 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null; }
# fork-free sleep: read with a timeout on a pipe nobody writes to
exec {NAP_FD}<> <(:)
nap() { read -r -t "$1" -u "$NAP_FD" || true; }

ERRORS=()
err() { log "ERROR: $*"; ERRORS+=("$*"); }

for tool in java javac awk /usr/bin/time timeout; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
HAVE_KCAT=0
command -v kcat >/dev/null && HAVE_KCAT=1
(( HAVE_KCAT )) || log "kcat not installed: the start->first-produce metric will be n/a (apt-get install kcat)"

for p in "$PORT" "$((PORT + 1))"; do
  port_open "$p" && die "127.0.0.1:$p is already in use (set BENCH_PORT)"
done

"$JAVA_DIR/setup.sh" || die "compat-tests/java/setup.sh failed (Kafka jars)"
# the clients (perf tools, readers) are pom.xml's line; the broker is the reference release
CLIENT_VERSION="$(basename "$(ls "$LIB"/kafka-clients-*.jar | head -1)" .jar)"; CLIENT_VERSION="${CLIENT_VERSION#kafka-clients-}"
source "$ROOT/compat-tests/kafka-ref/version.sh"
KAFKA_VERSION="$KAFKA_REF_VERSION"

mkdir -p "$RESULTS"
rm -rf "$LOGS"; mkdir -p "$LOGS"
RAW="$RESULTS/raw.tsv"
printf 'broker\tmetric\trun\tvalue\n' > "$RAW"

if [[ -n "${BENCH_WORKDIR:-}" ]]; then WORK="$BENCH_WORKDIR"; mkdir -p "$WORK"
else WORK="$(mktemp -d "${TMPDIR:-/tmp}/cairn-bench.XXXXXX")"; fi
WORK="$(cd "$WORK" && pwd)"

# ---------------------------------------------------------------- cleanup
KAFKA_DIR=""     # set while Apache Kafka may be running
CAIRN_PID=""     # set while Cairn may be running
PROBE_BG=""      # background start.sh wrapper
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$PROBE_BG" ]] && kill -0 "$PROBE_BG" 2>/dev/null; then
    # the start.sh child of the wrapper subshell first, then the wrapper
    local c; for c in $(ps -o pid= --ppid "$PROBE_BG" 2>/dev/null); do kill "$c" 2>/dev/null || true; done
    kill "$PROBE_BG" 2>/dev/null || true
    sleep 0.5
  fi
  if [[ -n "$KAFKA_DIR" ]]; then
    log "cleanup: stopping Apache Kafka"
    "$KREF/stop.sh" "$KAFKA_DIR" >/dev/null 2>&1 || true
  fi
  if [[ -n "$CAIRN_PID" ]] && kill -0 "$CAIRN_PID" 2>/dev/null; then
    log "cleanup: stopping Cairn (pid $CAIRN_PID)"
    kill -TERM "$CAIRN_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$CAIRN_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$CAIRN_PID" 2>/dev/null || true
  fi
  if [[ "${BENCH_KEEP:-0}" == 1 ]]; then log "data kept in $WORK"
  elif [[ -z "${BENCH_WORKDIR:-}" ]]; then rm -rf "$WORK"
  else rm -rf "$WORK/kafka" "$WORK/cairn"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# ---------------------------------------------------------------- helpers
CLK_TCK="$(getconf CLK_TCK)"
# utime+stime of PID in clock ticks
cpu_ticks() { local s; s="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo 0; return; }; s="${s##*) }"; awk '{print $12 + $13}' <<<"$s"; }
# VmRSS / VmHWM in MiB
vm_mib() { awk -v k="$2:" '$1 == k {printf "%.0f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || true; }

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$RAW"; }

source "$HERE/counters-lib.sh"
# record_counters broker key run: the step's context switches and page faults per GiB moved.
record_counters() {
  local f="$LOGS/$4.perfstat" gib
  gib="$(awk -v n="$N" -v s="$RECORD_SIZE" 'BEGIN{print n*s/1073741824}')"
  local cs pf
  cs="$(per_gib "$(counter "$f" context-switches)" "$gib")"
  pf="$(per_gib "$(counter "$f" page-faults)" "$gib")"
  [[ "$cs" == n/a ]] || record "$1" "${2}_cs" "$3" "$cs"
  [[ "$pf" == n/a ]] || record "$1" "${2}_pf" "$3" "$pf"
}

# compiled once per source version into bench/results/.classes
CLASSES="$RESULTS/.classes"
SRC_SUM="$(cat "$HERE/ByPartitionReader.java" "$HERE/GroupReader.java" "$JAVA_DIR/pom.xml" | sha256sum | cut -c1-16)"
if [[ "$(cat "$CLASSES/.sum" 2>/dev/null)" != "$SRC_SUM" ]]; then
  log "compiling bench/ByPartitionReader.java bench/GroupReader.java"
  rm -rf "$CLASSES"; mkdir -p "$CLASSES"
  javac -nowarn -d "$CLASSES" -cp "$LIB/*" "$HERE/ByPartitionReader.java" "$HERE/GroupReader.java" 2> "$LOGS/javac.err" \
    || { cat "$LOGS/javac.err" >&2; die "javac of the bench readers failed"; }
  echo "$SRC_SUM" > "$CLASSES/.sum"
fi

reader() {  # reader JVM_FLAGS args...
  local jvm="$1"; shift
  # shellcheck disable=SC2086
  java $CLIENT_HEAP $jvm "$LOG4J" -cp "$CLASSES:$LIB/*" ByPartitionReader --bootstrap "$BOOT" "$@"
}

broker_alive() { kill -0 "$BPID" 2>/dev/null; }

# start->first produce: one-record kcat produce, retried until it is acknowledged.
# Sets FIRST_OK_MS (epoch ms of the first acknowledged produce) or returns 1.
# $1 = broker name, $2 = command that tells whether startup already failed.
probe_first_produce() {
  local b="$1" failed_check="$2" still_starting="${3:-false}" deadline tries=0
  FIRST_OK_MS=""
  deadline=$(( $(now_ms) + START_TIMEOUT * 1000 ))
  while :; do
    # while the launcher (kafka-ref/start.sh: storage format, then its own readiness timeout) is still
    # at work, the deadline does not run out
    if eval "$still_starting"; then deadline=$(( $(now_ms) + START_TIMEOUT * 1000 )); fi
    if port_open "$PORT"; then
      tries=$((tries + 1))
      if (( HAVE_KCAT )); then
        local krc=0
        printf 'probe\n' | timeout 30 kcat -P -b "$BOOT" -t bench-startup -p 0 \
          -X message.timeout.ms=10000 -X reconnect.backoff.ms=10 -X reconnect.backoff.max.ms=50 \
          -X retry.backoff.ms=10 -X topic.metadata.refresh.fast.interval.ms=10 \
          -X request.required.acks=1 > "$WORK/probe.out" 2>&1 || krc=$?
        cat "$WORK/probe.out" >> "$LOGS/$b-startup-probe.log"
        # success = exit 0 and no delivery error printed
        if (( krc == 0 )) && ! grep -q -i 'delivery failed' "$WORK/probe.out"; then
          FIRST_OK_MS="$(now_ms)"
          log "$b: first produce acknowledged after $tries kcat attempt(s)"
          return 0
        fi
      else
        FIRST_OK_MS="$(now_ms)"   # port open only; the metric is reported as n/a
        return 0
      fi
    fi
    if eval "$failed_check"; then return 1; fi
    if (( $(now_ms) > deadline )); then
      log "$b: no produce acknowledged within ${START_TIMEOUT}s ($tries attempts; see $LOGS/$b-startup-probe.log)"
      return 1
    fi
    nap 0.005
  done
}

create_topic() {  # broker topic
  local b="$1" t="$2" t0 rc=0
  t0=$(now_ms)
  timeout "$STEP_TIMEOUT" "$KRUN" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --create \
    --topic "$t" --partitions "$PARTS" --replication-factor 1 > "$LOGS/$b-create-$t.out" 2>&1 || rc=$?
  if (( rc != 0 )); then
    err "$b: creating topic $t ($PARTS partitions) failed (exit $rc$( (( rc == 124 )) && echo ", timed out after ${STEP_TIMEOUT}s")): $(tail -n 3 "$LOGS/$b-create-$t.out" | tr '\n' ' ')"
    return 1
  fi
  log "$b: created $t ($PARTS partitions) in $(( $(now_ms) - t0 )) ms (incl. JVM start of TopicCommand)"
}

# produce run: broker acks run
produce() {  # broker 1|all|txn run
  local b="$1" acks="$2" run="$3" t="bench-acks$2-r$3" idem=false out err c0 c1 rc=0 line txn=()
  local tag="$b-produce-acks$acks-r$run" k="p$2"
  if [[ "$2" == txn ]]; then
    # Transactions (acks=all, idempotent), one committed every TXN_MS.
    acks=all t="bench-txn-r$run" tag="$b-produce-txn-r$run"
    txn=(--transactional-id "bench-txn-$b-r$run" --transaction-duration-ms "$TXN_MS")
  fi
  [[ "$acks" == all ]] && idem=true
  out="$LOGS/$tag.out"; err="$LOGS/$tag.err"
  create_topic "$b" "$t" || return 0
  log "$b: ProducerPerformance ${txn[*]:-acks=$acks} run $run: $N x $RECORD_SIZE B -> $t"
  counters_begin "$BPID" "$LOGS/$tag.perfstat"
  c0=$(cpu_ticks "$BPID")
  KAFKA_HEAP_OPTS="$CLIENT_HEAP" KAFKA_JVM_PERFORMANCE_OPTS="$CLIENT_JVM" \
    /usr/bin/time -f '%U %S %e' -o "$LOGS/$tag.time" \
    timeout "$STEP_TIMEOUT" "$KRUN" org.apache.kafka.tools.ProducerPerformance \
      --topic "$t" --num-records "$N" --record-size "$RECORD_SIZE" --throughput -1 \
      --producer-props bootstrap.servers="$BOOT" acks="$acks" enable.idempotence="$idem" "${PRODUCER_COMMON[@]}" \
      "${txn[@]}" > "$out" 2> "$err" || rc=$?
  c1=$(cpu_ticks "$BPID")
  counters_end
  broker_alive || { err "$b: broker process died during produce acks=$acks run $run"; return 0; }
  (( rc == 124 )) && { err "$b: produce acks=$acks run $run timed out after ${STEP_TIMEOUT}s (see $out, $err)"; return 0; }
  line="$(grep 'records sent' "$out" | tail -n 1 || true)"
  # e.g. 200000 records sent, 51203.3 records/sec (50.00 MB/sec), 300.12 ms avg latency, 800.00 ms max latency, 290 ms 50th, 500 ms 95th, 600 ms 99th, 700 ms 99.9th.
  local re='^([0-9]+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\), ([0-9.]+) ms avg latency, ([0-9.]+) ms max latency, ([0-9]+) ms 50th, ([0-9]+) ms 95th, ([0-9]+) ms 99th, ([0-9]+) ms 99.9th'
  if (( rc != 0 )) || [[ ! "$line" =~ $re ]]; then
    err "$b: produce acks=$acks run $run failed (exit $rc): $(grep -m1 -E 'Exception|Error' "$err" || tail -n 2 "$err" | tr '\n' ' ')"
    return 0
  fi
  local sent="${BASH_REMATCH[1]}"
  local nexc; nexc="$(grep -c -E 'Exception' "$err" || true)"
  if [[ "$sent" != "$N" ]] || (( nexc > 0 )); then
    err "$b: produce acks=$acks run $run: only $sent of $N records acknowledged, $nexc exception line(s); first: $(grep -m1 -E 'Exception' "$err" || true)"
    return 0
  fi
  local stored="$N"
  # (A transactional topic's offsets include its markers: consume_committed counts its records.)
  [[ "$2" == txn ]] || stored="$(reader "$QUICK_JVM" --topic "$t" --offsets-only 2>>"$LOGS/$tag.offsets.err" | sed -n 's/^OFFSETS total=\([0-9]*\).*/\1/p')"
  if [[ "$stored" != "$N" ]]; then
    err "$b: produce acks=$acks run $run: perf test acknowledged $N records but end-beginning offsets of $t sum to '${stored:-?}'"
    [[ -n "$stored" ]] && (( stored < N )) && return 0
  fi
  record "$b" "${k}_recs" "$run" "${BASH_REMATCH[2]}"
  record "$b" "${k}_mbs" "$run" "${BASH_REMATCH[3]}"
  record "$b" "${k}_avg" "$run" "${BASH_REMATCH[4]}"
  record "$b" "${k}_max" "$run" "${BASH_REMATCH[5]}"
  record "$b" "${k}_p50" "$run" "${BASH_REMATCH[6]}"
  record "$b" "${k}_p95" "$run" "${BASH_REMATCH[7]}"
  record "$b" "${k}_p99" "$run" "${BASH_REMATCH[8]}"
  record "$b" "${k}_p999" "$run" "${BASH_REMATCH[9]}"
  local gib; gib="$(awk -v n="$N" -v s="$RECORD_SIZE" 'BEGIN{print n*s/1073741824}')"
  record "$b" "${k}_bcpu" "$run" "$(awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v g="$gib" 'BEGIN{printf "%.2f", d/hz/g}')"
  record "$b" "${k}_ccpu" "$run" "$(awk '{ if ($3 > 0) printf "%.2f", ($1 + $2) / $3 }' "$LOGS/$tag.time")"
  record_counters "$b" "$k" "$run" "$tag"
  log "$b: $line"
}

consume() {  # broker run [committed]: the acks=1 topic, or read_committed the transactional one
  local b="$1" run="$2" t="bench-acks1-r$2" tag="$1-consume-r$2" c0 c1 rc=0 line src=p1 k=c iso=()
  if [[ "${3:-}" == committed ]]; then
    t="bench-txn-r$run" tag="$b-consume-committed-r$run" src=ptxn k=ctx iso=(--read-committed)
  fi
  if ! grep -q -P "^$b\t${src}_mbs\t$run\t" "$RAW"; then
    err "$b: consume run $run skipped: topic $t was not fully produced"
    return 0
  fi
  log "$b: ByPartitionReader ${iso[*]} run $run: all $PARTS partitions of $t, no consumer group"
  counters_begin "$BPID" "$LOGS/$tag.perfstat"
  c0=$(cpu_ticks "$BPID")
  /usr/bin/time -f '%U %S %e' -o "$LOGS/$tag.time" \
    timeout "$STEP_TIMEOUT" java $CLIENT_HEAP $CLIENT_JVM "$LOG4J" -cp "$CLASSES:$LIB/*" ByPartitionReader \
      --bootstrap "$BOOT" --topic "$t" --expect "$N" "${iso[@]}" > "$LOGS/$tag.out" 2> "$LOGS/$tag.err" || rc=$?
  c1=$(cpu_ticks "$BPID")
  counters_end
  broker_alive || { err "$b: broker process died during consume run $run"; return 0; }
  line="$(grep '^RESULT' "$LOGS/$tag.out" | tail -n 1 || true)"
  if (( rc != 0 )) || [[ -z "$line" ]]; then
    err "$b: consume run $run failed (exit $rc): $(grep -m3 -E 'STALLED|Exception|WARNING|ERROR' "$LOGS/$tag.err" | tr '\n' ' ')"
    return 0
  fi
  local recs mbs rps gaps
  recs="$(sed -n 's/.* records=\([0-9]*\) .*/\1/p' <<<"$line")"
  mbs="$(sed -n 's/.* mb_per_s=\([0-9.]*\) .*/\1/p' <<<"$line")"
  rps="$(sed -n 's/.* rec_per_s=\([0-9.]*\) .*/\1/p' <<<"$line")"
  gaps="$(sed -n 's/.* gaps=\([0-9]*\).*/\1/p' <<<"$line")"
  [[ "$recs" == "$N" ]] || err "$b: consume run $run read $recs records, expected $N"
  # (Markers take offsets: a read_committed read of a transactional topic has gaps.)
  [[ "$gaps" == 0 || "$k" == ctx ]] || err "$b: consume run $run saw $gaps offset discontinuities"
  record "$b" "${k}_mbs" "$run" "$mbs"
  record "$b" "${k}_recs" "$run" "$rps"
  local gib; gib="$(awk -v n="$N" -v s="$RECORD_SIZE" 'BEGIN{print n*s/1073741824}')"
  record "$b" "${k}_bcpu" "$run" "$(awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v g="$gib" 'BEGIN{printf "%.2f", d/hz/g}')"
  record "$b" "${k}_ccpu" "$run" "$(awk '{ if ($3 > 0) printf "%.2f", ($1 + $2) / $3 }' "$LOGS/$tag.time")"
  record_counters "$b" "$k" "$run" "$tag"
  log "$b: $line"
}

# Consumer groups: kafka-consumer-perf-test (one member; its rebalance.time.ms is join to
# assignment) on the acks=1 topic, then bench/GroupReader.java (3 members, one group, 16
# partitions; join_ms is subscribe to every member's first record) on the acks=all topic.
consume_group() {  # broker run
  local b="$1" run="$2" t1="bench-acks1-r$2" tall="bench-acksall-r$2" rc=0 line tag
  if ! grep -q -P "^$b\tp1_mbs\t$run\t" "$RAW" || ! grep -q -P "^$b\tpall_mbs\t$run\t" "$RAW"; then
    err "$b: group consume run $run skipped: its topics were not fully produced"
    return 0
  fi
  tag="$b-consumer-perf-r$run"
  log "$b: ConsumerPerformance run $run: $t1 with group bench-cperf-r$run"
  KAFKA_HEAP_OPTS="$CLIENT_HEAP" KAFKA_JVM_PERFORMANCE_OPTS="$CLIENT_JVM" \
    timeout "$STEP_TIMEOUT" "$KRUN" org.apache.kafka.tools.ConsumerPerformance \
      --bootstrap-server "$BOOT" --topic "$t1" --messages "$N" --group "bench-cperf-r$run" --timeout 60000 \
      > "$LOGS/$tag.out" 2> "$LOGS/$tag.err" || rc=$?
  broker_alive || { err "$b: broker process died during ConsumerPerformance run $run"; return 0; }
  # header "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
  # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec", then one line of values
  line="$(grep -A1 '^start.time' "$LOGS/$tag.out" | tail -n 1 || true)"
  local nmsg mbs rebal
  nmsg="$(awk -F', *' '{print $5}' <<<"$line")"
  mbs="$(awk -F', *' '{print $4}' <<<"$line")"
  rebal="$(awk -F', *' '{print $7}' <<<"$line")"
  if (( rc != 0 )) || [[ "$nmsg" != "$N" ]]; then
    err "$b: ConsumerPerformance run $run failed (exit $rc, consumed ${nmsg:-?} of $N): $(grep -m2 -E 'Exception|ERROR|WARN' "$LOGS/$tag.err" | tr '\n' ' ')"
  else
    record "$b" cp_mbs "$run" "$mbs"
    record "$b" cp_rebal "$run" "$rebal"
    log "$b: ConsumerPerformance: $mbs MB/s, rebalance $rebal ms"
  fi

  tag="$b-group3-r$run"; rc=0
  log "$b: GroupReader run $run: 3 members of group bench-group3-r$run over $PARTS partitions of $tall"
  timeout "$STEP_TIMEOUT" java $CLIENT_HEAP $CLIENT_JVM "$LOG4J" -cp "$CLASSES:$LIB/*" GroupReader \
    --bootstrap "$BOOT" --topic "$tall" --group "bench-group3-r$run" --expect "$N" --members 3 \
    > "$LOGS/$tag.out" 2> "$LOGS/$tag.err" || rc=$?
  broker_alive || { err "$b: broker process died during GroupReader run $run"; return 0; }
  line="$(grep '^RESULT' "$LOGS/$tag.out" | tail -n 1 || true)"
  if (( rc != 0 )) || [[ -z "$line" ]]; then
    err "$b: GroupReader run $run failed (exit $rc): $(grep -m3 -E 'GroupReader|Exception' "$LOGS/$tag.err" | tr '\n' ' ')"
    return 0
  fi
  record "$b" g3_join "$run" "$(sed -n 's/.* join_ms=\([0-9.]*\) .*/\1/p' <<<"$line")"
  record "$b" g3_mbs "$run" "$(sed -n 's/.* mb_per_s=\([0-9.]*\) .*/\1/p' <<<"$line")"
  log "$b: $line"
}

workload() {  # broker
  local b="$1" r
  record "$b" rss_idle 1 "$(vm_mib "$BPID" VmRSS)"
  for r in $(seq "$RUNS"); do
    produce "$b" 1 "$r"
    broker_alive || return 0
    produce "$b" all "$r"
    broker_alive || return 0
    produce "$b" txn "$r"
    broker_alive || return 0
  done
  for r in $(seq "$RUNS"); do
    consume "$b" "$r"
    broker_alive || return 0
    consume "$b" "$r" committed
    broker_alive || return 0
  done
  for r in $(seq "$RUNS"); do
    consume_group "$b" "$r"
    broker_alive || return 0
  done
  record "$b" rss_peak 1 "$(vm_mib "$BPID" VmHWM)"
}

declare -A LOADAVG
# ---------------------------------------------------------------- Apache Kafka
run_kafka() {
  local b=kafka t_end rc ready
  KAFKA_DIR="$WORK/kafka"
  rm -rf "$KAFKA_DIR"; mkdir -p "$KAFKA_DIR"
  LOADAVG[$b]="$(cut -d' ' -f1-3 /proc/loadavg)"
  log "kafka: starting Apache Kafka $KAFKA_VERSION on $BOOT (data $KAFKA_DIR)"
  rm -f "$WORK/kafka-start.rc"
  ( rc=0; KAFKA_REF_TIMEOUT="$KREF_TIMEOUT" "$KREF/start.sh" "$PORT" "$KAFKA_DIR" > "$LOGS/kafka-start.out" 2>&1 || rc=$?
    echo "$rc $(now_ms)" > "$WORK/kafka-start.rc" ) &
  PROBE_BG=$!
  local ok=1
  probe_first_produce kafka '[[ -s "$WORK/kafka-start.rc" && "$(cut -d" " -f1 "$WORK/kafka-start.rc")" != 0 ]]' \
    '[[ ! -s "$WORK/kafka-start.rc" ]]' || ok=0
  wait "$PROBE_BG" || true
  PROBE_BG=""
  read -r rc t_end < "$WORK/kafka-start.rc" || rc=1
  if [[ "$rc" != 0 ]]; then
    cat "$LOGS/kafka-start.out" >&2
    die "Apache Kafka did not start (start.sh exit $rc; log $KAFKA_DIR/kafka.log)"
  fi
  (( ok )) || die "Apache Kafka started but no produce was acknowledged within ${START_TIMEOUT}s (see $LOGS/kafka-startup-probe.log)"
  ready="$(sed -n 's/.* in \([0-9]*\) ms from launch.*/\1/p' "$LOGS/kafka-start.out" | tail -n 1)"
  [[ -n "$ready" ]] || die "cannot parse start.sh output: $(cat "$LOGS/kafka-start.out")"
  local launch=$((t_end - ready))
  BPID="$(cat "$KAFKA_DIR/kafka.pid")"
  record kafka ready_ms 1 "$ready"
  (( HAVE_KCAT )) && record kafka startup_ms 1 "$(( FIRST_OK_MS - launch ))"
  log "kafka: pid $BPID; 'Kafka Server started' after $ready ms; first produce acknowledged $(( FIRST_OK_MS - launch )) ms after launch"
  workload kafka
  cp "$KAFKA_DIR/kafka.log" "$LOGS/kafka-broker.log" 2>/dev/null || true
  "$KREF/stop.sh" "$KAFKA_DIR" > "$LOGS/kafka-stop.out" 2>&1 || err "kafka: stop.sh failed: $(cat "$LOGS/kafka-stop.out")"
  KAFKA_DIR=""
  rm -rf "$WORK/kafka/data"
}

# ---------------------------------------------------------------- Cairn
run_cairn() {
  local b=cairn dir="$WORK/cairn" launch ok=1
  rm -rf "$dir"; mkdir -p "$dir"
  sync
  LOADAVG[$b]="$(cut -d' ' -f1-3 /proc/loadavg)"
  log "cairn: starting $CAIRN on $BOOT (data $dir)"
  # Cairn maps KAFKA_* environment variables to config keys (as the apache/kafka image does):
  # start it without the ones meant for the Java tools / reference broker.
  local unset_env=() v
  for v in $(compgen -e | grep '^KAFKA_' || true); do unset_env+=(-u "$v"); done
  launch="$(now_ms)"
  env "${unset_env[@]}" "$CAIRN" --override "listeners=PLAINTEXT://$BOOT" --override "log.dirs=$dir/data" \
    --override metrics.listener=none --override group.initial.rebalance.delay.ms=0 \
    > "$LOGS/cairn-broker.log" 2>&1 < /dev/null &
  CAIRN_PID=$!
  BPID="$CAIRN_PID"
  probe_first_produce cairn '! kill -0 "$CAIRN_PID" 2>/dev/null' || ok=0
  if ! kill -0 "$CAIRN_PID" 2>/dev/null; then
    local rc=0; wait "$CAIRN_PID" || rc=$?
    CAIRN_PID=""
    tail -n 30 "$LOGS/cairn-broker.log" >&2
    die "Cairn exited during startup (exit $rc; log $LOGS/cairn-broker.log)"
  fi
  (( ok )) || { tail -n 30 "$LOGS/cairn-broker.log" >&2
                die "Cairn is running but no produce was acknowledged within ${START_TIMEOUT}s (see $LOGS/cairn-startup-probe.log, $LOGS/cairn-broker.log)"; }
  local ready
  ready="$(sed 's/\x1b\[[0-9;]*m//g' "$LOGS/cairn-broker.log" | grep -m1 'cairn started' | grep -o -E 'startup_ms[=:" ]{1,3}[0-9]+' | grep -o -E '[0-9]+$' || true)"
  [[ -n "$ready" ]] && record cairn ready_ms 1 "$ready"
  (( HAVE_KCAT )) && record cairn startup_ms 1 "$(( FIRST_OK_MS - launch ))"
  log "cairn: pid $CAIRN_PID; reports startup_ms=${ready:-?}; first produce acknowledged $(( FIRST_OK_MS - launch )) ms after launch"
  workload cairn
  if kill -0 "$CAIRN_PID" 2>/dev/null; then
    kill -TERM "$CAIRN_PID"
    local i rc=0
    for i in $(seq 300); do kill -0 "$CAIRN_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$CAIRN_PID" 2>/dev/null; then
      err "cairn: still running 30 s after SIGTERM; killed"
      kill -KILL "$CAIRN_PID" 2>/dev/null || true
    fi
    wait "$CAIRN_PID" || rc=$?
    (( rc == 0 )) || err "cairn: exited with status $rc after SIGTERM (expected 0)"
  else
    local rc=0; wait "$CAIRN_PID" || rc=$?
    err "cairn: broker process exited on its own (status $rc); tail: $(tail -n 5 "$LOGS/cairn-broker.log" | tr '\n' ' ')"
  fi
  CAIRN_PID=""
  rm -rf "$dir/data"
}

T_BEGIN="$(date -Is)"
log "bench: N=$N records x $RECORD_SIZE B, $RUNS run(s) per case, $PARTS partitions, port $PORT, only=$ONLY"
[[ "$ONLY" != cairn ]] && run_kafka
[[ "$ONLY" != kafka ]] && run_cairn

# ---------------------------------------------------------------- report
median() {  # broker metric -> median of the recorded runs (empty if none)
  awk -F'\t' -v b="$1" -v m="$2" '$1 == b && $2 == m {print $4}' "$RAW" | sort -g |
    awk '{a[NR] = $1} END { if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
nruns() { awk -F'\t' -v b="$1" -v m="$2" '$1 == b && $2 == m' "$RAW" | wc -l; }
fmt() {  # value decimals
  [[ -z "$1" ]] && { echo "—"; return; }
  awk -v v="$1" -v d="$2" 'BEGIN { s = sprintf("%." d "f", v); n = split(s, p, "."); i = p[1]; neg = (i ~ /^-/); if (neg) i = substr(i, 2);
    o = ""; while (length(i) > 3) { o = "," substr(i, length(i) - 2) o; i = substr(i, 1, length(i) - 3) }
    o = (neg ? "-" : "") i o; if (n > 1) o = o "." p[2]; print o }'
}
ratio() {  # cairn kafka
  [[ -z "$1" || -z "$2" ]] && { echo "—"; return; }
  awk -v c="$1" -v k="$2" 'BEGIN { if (k + 0 == 0) print "—"; else { r = c / k; printf (r < 0.1 ? "%.3f×" : "%.2f×"), r } }'
}

# key | label | decimals | better
ROWS=(
  "startup_ms|Start → first produce acknowledged (ms, kcat loop)|0|lower"
  "ready_ms|Start → broker reports started (ms; Kafka: 'Kafka Server started', Cairn: startup_ms)|0|lower"
  "p1_mbs|Produce acks=1: MB/s|1|higher"
  "p1_recs|Produce acks=1: records/s|0|higher"
  "p1_avg|Produce acks=1: avg latency (ms)|1|lower"
  "p1_p50|Produce acks=1: p50 latency (ms)|0|lower"
  "p1_p95|Produce acks=1: p95 latency (ms)|0|lower"
  "p1_p99|Produce acks=1: p99 latency (ms)|0|lower"
  "p1_p999|Produce acks=1: p99.9 latency (ms)|0|lower"
  "p1_bcpu|Produce acks=1: broker CPU-s per GiB|2|lower"
  "p1_cs|Produce acks=1: broker context switches, thousands per GiB|1|lower"
  "p1_pf|Produce acks=1: broker page faults, thousands per GiB|1|lower"
  "p1_ccpu|Produce acks=1: client CPU (cores, info)|2|info"
  "pall_mbs|Produce acks=all: MB/s|1|higher"
  "pall_recs|Produce acks=all: records/s|0|higher"
  "pall_avg|Produce acks=all: avg latency (ms)|1|lower"
  "pall_p50|Produce acks=all: p50 latency (ms)|0|lower"
  "pall_p95|Produce acks=all: p95 latency (ms)|0|lower"
  "pall_p99|Produce acks=all: p99 latency (ms)|0|lower"
  "pall_p999|Produce acks=all: p99.9 latency (ms)|0|lower"
  "pall_bcpu|Produce acks=all: broker CPU-s per GiB|2|lower"
  "pall_cs|Produce acks=all: broker context switches, thousands per GiB|1|lower"
  "pall_pf|Produce acks=all: broker page faults, thousands per GiB|1|lower"
  "pall_ccpu|Produce acks=all: client CPU (cores, info)|2|info"
  "ptxn_mbs|Produce in transactions (every ${TXN_MS} ms): MB/s|1|higher"
  "ptxn_recs|Produce in transactions: records/s|0|higher"
  "ptxn_avg|Produce in transactions: avg latency (ms)|1|lower"
  "ptxn_p99|Produce in transactions: p99 latency (ms)|0|lower"
  "ptxn_bcpu|Produce in transactions: broker CPU-s per GiB|2|lower"
  "c_mbs|Consume by partition (no group): MB/s|1|higher"
  "c_recs|Consume by partition (no group): records/s|0|higher"
  "c_bcpu|Consume: broker CPU-s per GiB|2|lower"
  "c_cs|Consume: broker context switches, thousands per GiB|1|lower"
  "c_pf|Consume: broker page faults, thousands per GiB|1|lower"
  "c_ccpu|Consume: client CPU (cores, info)|2|info"
  "ctx_mbs|Consume read_committed, the transactional topic: MB/s|1|higher"
  "ctx_bcpu|Consume read_committed: broker CPU-s per GiB|2|lower"
  "cp_mbs|Consume in a group (kafka-consumer-perf-test, 1 member): MB/s|1|higher"
  "cp_rebal|kafka-consumer-perf-test rebalance time (ms, join to assignment)|0|lower"
  "g3_mbs|Consume in a group of 3 members (GroupReader, 16 partitions): MB/s|1|higher"
  "g3_join|Group of 3: subscribe → every member's first record (ms)|0|lower"
  "rss_idle|Broker RSS after startup (MiB, VmRSS)|0|lower"
  "rss_peak|Broker peak RSS (MiB, VmHWM at end)|0|lower"
)

MD="$RESULTS/latest.md"
{
  echo "# Cairn vs Apache Kafka — bench/run.sh$( (( QUICK )) && echo ' --quick')"
  echo
  echo "- Date: $T_BEGIN → $(date -Is)"
  echo "- Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), $( . /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "- Load average at broker start: kafka ${LOADAVG[kafka]:-—}; cairn ${LOADAVG[cairn]:-—} (the machine is shared; see ratios rather than absolute figures)"
  echo "- Apache Kafka $KAFKA_VERSION (KRaft combined, compat-tests/kafka-ref/start.sh, ${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}); clients and perf tools from Kafka $CLIENT_VERSION"
  [[ "$ONLY" != kafka ]] && echo "- Cairn: \`$CAIRN\` (built $(date -r "$CAIRN" -Is), sha256 $(sha256sum "$CAIRN" | cut -c1-12))"
  echo "- Workload: $N records × $RECORD_SIZE B per produce run, $RUNS run(s) per case (median shown), topic with $PARTS partitions, RF=1, a new topic per run"
  echo "- Producer (kafka-producer-perf-test = org.apache.kafka.tools.ProducerPerformance, --throughput -1): acks=1 (enable.idempotence=false) / acks=all (enable.idempotence=true), ${PRODUCER_COMMON[*]}; JVM $CLIENT_HEAP G1"
  echo "- Consumer: bench/ByPartitionReader.java, assign() all partitions + seekToBeginning, no group; fetch.max.bytes=50 MiB, max.partition.fetch.bytes=1 MiB, max.poll.records=2000; reads the acks=1 topics"
  echo "- Consumer groups: kafka-consumer-perf-test (org.apache.kafka.tools.ConsumerPerformance, defaults, one member) on the acks=1 topics; bench/GroupReader.java, 3 KafkaConsumers of one group (classic protocol, default assignors, auto-commit) on the acks=all topics; group.initial.rebalance.delay.ms=0 for both brokers (kafka-ref/start.sh sets it, as Kafka's shipped server.properties does)"
  echo "- Start time: $( (( HAVE_KCAT )) && echo "a one-record \`kcat -P\` (librdkafka $(kcat -V 2>/dev/null | grep -o 'librdkafka [0-9.]*' | head -1 | cut -d' ' -f2), acks=1, auto-created topic) retried every ~5 ms once the port accepts connections, measured from broker process launch" || echo "n/a (kcat not installed)")"
  echo "- Latencies are at saturation (--throughput -1), so they mostly measure queueing in the client"
  echo
  echo "| Metric | Kafka | Cairn | Cairn/Kafka | Ratio reads |"
  echo "|---|---:|---:|---:|---|"
  for row in "${ROWS[@]}"; do
    IFS='|' read -r key label dec better <<<"$row"
    k="$(median kafka "$key")"; c="$(median cairn "$key")"
    [[ -z "$k" && -z "$c" ]] && continue
    case "$better" in
      higher) reads="higher is better" ;;
      lower) reads="lower is better" ;;
      *) reads="informational" ;;
    esac
    printf '| %s | %s | %s | %s | %s |\n' "$label" "$(fmt "$k" "$dec")" "$(fmt "$c" "$dec")" "$(ratio "$c" "$k")" "$reads"
  done
  echo
  echo "Runs per cell (median of): $(for b in kafka cairn; do printf '%s: %s. ' "$b" "$(nruns "$b" p1_mbs)/$RUNS produce acks=1, $(nruns "$b" pall_mbs)/$RUNS acks=all, $(nruns "$b" ptxn_mbs)/$RUNS transactional, $(nruns "$b" c_mbs)/$RUNS consume, $(nruns "$b" ctx_mbs)/$RUNS read_committed, $(nruns "$b" cp_mbs)/$RUNS consumer-perf-test, $(nruns "$b" g3_mbs)/$RUNS group of 3"; done)"
  if (( ${#ERRORS[@]} )); then
    echo
    echo "## Errors"
    echo
    for e in "${ERRORS[@]}"; do echo "- $e"; done
  fi
  echo
  echo "Raw per-run values: bench/results/raw.tsv; tool outputs: bench/results/logs/."
} > "$MD"

echo
cat "$MD"
if (( ${#ERRORS[@]} )); then
  log "${#ERRORS[@]} error(s); see above and $LOGS"
  exit 1
fi
