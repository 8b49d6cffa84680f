#!/usr/bin/env bash
# Usage: bench/cluster.sh CAIRN_BINARY [--quick]
#
# RF=3, acks=all benchmark of three Cairn brokers against three Apache Kafka 4.x brokers
# (KRaft combined mode, jars from compat-tests/java/lib, -Xmx1G -Xms1G each) on this machine
# (or RF=1 on one broker of each, BENCH_NODES=1),
# with identical client settings. Each round starts a fresh three-node cluster of each system
# in turn (the order alternates between rounds), and per cluster:
#   1. waits until all three brokers are in the metadata (kcat -L), then a warm-up produce
#      (not counted) on its own topic
#   2. max throughput: a new 6-partition RF=3 topic (TopicCommand, min.insync.replicas=2,
#      every ISR full before producing), ProducerPerformance --throughput -1, acks=all,
#      enable.idempotence=true, 1 KiB records, linger.ms=5, batch.size=65536
#   3. fixed rate: the same on another new topic at --throughput BENCH_RATE records/s (with
#      BENCH_RATE=half-kafka: half the records/s of Kafka's max-throughput run of the same
#      round, Kafka's cluster then going first in every round)
#   4. every perf-test run must report all N records sent with no exception, and the topic's
#      end offsets (kcat -Q) must add up to N, else the run is not counted
#   5. sum of the three brokers' peak RSS (VmHWM before stopping) and their CPU-seconds per
#      GiB produced (utime+stime from /proc/PID/stat, during each measured run)
# Medians over rounds with the Cairn/Kafka ratio go to bench/results/cluster-latest.md (raw
# per-run values: bench/results/cluster-raw.tsv; logs: bench/results/cluster-logs/); with
# BENCH_NODES=1 to cluster1-latest.md, cluster1-raw.tsv and cluster1-logs/.
#
# Options / environment:
#   --quick               1 round, 100,000 records per run (default 3 rounds, 300,000)
#   BENCH_RECORDS         records per max-throughput run
#   BENCH_RATE            records/s of the fixed-rate run (default 5000: under both systems' maximum
#                         here), or half-kafka
#   BENCH_NODES           brokers per cluster, 3 (RF=3, min.insync.replicas=2; default) or 1 (RF=1);
#                         results of BENCH_NODES=1 go to cluster1-latest.md / cluster1-raw.tsv
#   BENCH_RATE_SECONDS    length of the fixed-rate run (default 30; --quick 10)
#   BENCH_WARMUP_RECORDS  warm-up records per cluster (default 100000; --quick 30000)
#   BENCH_RUNS            rounds
#   BENCH_PARTITIONS      partitions per topic (default 6)
#   BENCH_PORT            first client port (default 29092): clients PORT..PORT+2, controllers PORT+10..PORT+12
#   BENCH_ONLY            kafka | cairn | both (default both)
#   BENCH_WORKDIR, BENCH_KEEP=1, BENCH_START_TIMEOUT (s, 180), BENCH_STEP_TIMEOUT (s, 900)
#   BENCH_HARNESS_WAIT    s to wait for a running tests/faults/harness.py to finish (default 3600)
#   BENCH_RUSTC_WAIT      s to wait for a running rustc before a round (default 600; then it goes ahead)
#   BENCH_RETRIES         extra attempts of a round during which harness.py or rustc ran (default 3;
#                         such a round is discarded)
# Run it niced on a shared machine: nice -n 10 bench/cluster.sh ...
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
JAVA_DIR="$ROOT/compat-tests/java"
KRUN="$JAVA_DIR/kafka-run.sh"
LIB="$JAVA_DIR/lib"
RESULTS="$HERE/results"
NNODES="${BENCH_NODES:-3}"
case "$NNODES" in 1) TAG=cluster1 ;; 3) TAG=cluster ;; *) echo "cluster.sh: BENCH_NODES must be 1 or 3" >&2; exit 2 ;; esac
LOGS="$RESULTS/$TAG-logs"

usage() { sed -n '2p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
QUICK=0; CAIRN=""
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    -h|--help) usage ;;
    -*) echo "cluster.sh: unknown option $a" >&2; usage ;;
    *) [[ -z "$CAIRN" ]] || usage; CAIRN="$a" ;;
  esac
done
ONLY="${BENCH_ONLY:-both}"
case "$ONLY" in kafka|cairn|both) ;; *) echo "cluster.sh: BENCH_ONLY must be kafka, cairn or both" >&2; exit 2 ;; esac
if [[ "$ONLY" != kafka ]]; then
  [[ -n "$CAIRN" && -x "$CAIRN" ]] || { echo "cluster.sh: CAIRN_BINARY missing or not executable" >&2; usage; }
  CAIRN="$(cd "$(dirname "$CAIRN")" && pwd)/$(basename "$CAIRN")"
fi

if (( QUICK )); then N="${BENCH_RECORDS:-100000}"; RUNS="${BENCH_RUNS:-1}"; RATE_S="${BENCH_RATE_SECONDS:-10}"; WARM="${BENCH_WARMUP_RECORDS:-30000}"
else                 N="${BENCH_RECORDS:-300000}"; RUNS="${BENCH_RUNS:-3}"; RATE_S="${BENCH_RATE_SECONDS:-30}"; WARM="${BENCH_WARMUP_RECORDS:-100000}"; fi
RATE="${BENCH_RATE:-5000}"
HALF_KAFKA=0
if [[ "$RATE" == half-kafka ]]; then
  HALF_KAFKA=1; RATE=""
  [[ "$ONLY" == both ]] || { echo "cluster.sh: BENCH_RATE=half-kafka needs both systems" >&2; exit 2; }
elif ! [[ "$RATE" =~ ^[1-9][0-9]*$ ]]; then
  echo "cluster.sh: BENCH_RATE must be a positive number of records/s or half-kafka" >&2; exit 2
fi
declare -A ROUND_RATE=()   # round -> records/s of its fixed-rate runs
PARTS="${BENCH_PARTITIONS:-6}"
PORT="${BENCH_PORT:-29092}"   # below the ephemeral range (32768+), where other tests pick ports
START_TIMEOUT="${BENCH_START_TIMEOUT:-180}"
STEP_TIMEOUT="${BENCH_STEP_TIMEOUT:-900}"
RECORD_SIZE=1024
NODES=($(seq "$NNODES"))
RF="$NNODES"
MIN_ISR=$(( RF > 1 ? 2 : 1 ))
cport() { echo $((PORT + $1 - 1)); }     # client port of node $1
qport() { echo $((PORT + 9 + $1)); }     # controller port of node $1
BOOT="$(for i in "${NODES[@]}"; do printf '127.0.0.1:%s,' "$(cport "$i")"; done)"; BOOT="${BOOT%,}"
VOTERS="$(for i in "${NODES[@]}"; do printf '%s@127.0.0.1:%s,' "$i" "$(qport "$i")"; done)"; VOTERS="${VOTERS%,}"

# Client settings: the same as bench/run.sh's acks=all case.
PRODUCER_COMMON=(acks=all enable.idempotence=true linger.ms=5 batch.size=65536 compression.type=none
                 max.in.flight.requests.per.connection=5 buffer.memory=33554432 client.id=bench-producer)
CLIENT_HEAP="-Xmx512M"
CLIENT_JVM="-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
KAFKA_HEAP="-Xmx1G -Xms1G"
KAFKA_JVM="$CLIENT_JVM"   # the G1 flags of Kafka's bin/kafka-run-class.sh, as kafka-ref/start.sh uses
BROKER_LOG4J="-Dlog4j2.configurationFile=$ROOT/compat-tests/kafka-ref/log4j2-broker.xml"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }
now_ms() { date +%s%3N; }
port_open() { { : 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null; }
ERRORS=(); NOTES=()
err() { log "ERROR: $*"; ERRORS+=("$*"); }
note() { log "note: $*"; NOTES+=("$*"); }

for tool in java kcat jq awk timeout; do command -v "$tool" >/dev/null || die "$tool not found"; done
"$JAVA_DIR/setup.sh" || die "compat-tests/java/setup.sh failed (Kafka jars)"
# the brokers are the reference release (compat-tests/kafka-ref/version.sh), in their own lib
source "$ROOT/compat-tests/kafka-ref/version.sh"
KAFKA_VERSION="$KAFKA_REF_VERSION"
KAFKA_VERSION="$KAFKA_VERSION" "$JAVA_DIR/setup.sh" || die "compat-tests/java/setup.sh failed (Kafka $KAFKA_VERSION jars)"
BROKER_LIB="$(DIR="$JAVA_DIR" KAFKA_VERSION="$KAFKA_VERSION" bash -c 'source "$DIR/lib-dir.sh"; echo "$KAFKA_LIB"')"
for i in "${NODES[@]}"; do for p in "$(cport "$i")" "$(qport "$i")"; do
  port_open "$p" && die "127.0.0.1:$p is already in use (set BENCH_PORT)"
done; done

mkdir -p "$RESULTS"; rm -rf "$LOGS"; mkdir -p "$LOGS"
RAW="$RESULTS/$TAG-raw.tsv"
printf 'system\tmetric\trun\tvalue\n' > "$RAW"
ROUND_RAW="$RAW"   # a round's values go to a scratch file first, into RAW only if the round was not disturbed
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$ROUND_RAW"; }
if [[ -n "${BENCH_WORKDIR:-}" ]]; then WORK="$BENCH_WORKDIR"; mkdir -p "$WORK"
else WORK="$(mktemp -d "${TMPDIR:-/tmp}/cairn-cluster-bench.XXXXXX")"; fi

# ---------------------------------------------------------------- brokers
declare -A PIDS=()   # node -> pid of the running broker (only processes this script started)
stop_cluster() {  # SIGTERM to all three, SIGKILL after 30 s
  local i t
  for i in "${!PIDS[@]}"; do kill -TERM "${PIDS[$i]}" 2>/dev/null || true; done
  for t in $(seq 300); do
    local alive=0; for i in "${!PIDS[@]}"; do kill -0 "${PIDS[$i]}" 2>/dev/null && alive=1; done
    (( alive )) || break; sleep 0.1
  done
  for i in "${!PIDS[@]}"; do
    if kill -0 "${PIDS[$i]}" 2>/dev/null; then note "$SYS node $i still running 30 s after SIGTERM; killed"; kill -KILL "${PIDS[$i]}" 2>/dev/null || true; fi
    wait "${PIDS[$i]}" 2>/dev/null || true
  done
  PIDS=()
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  (( ${#PIDS[@]} )) && { log "cleanup: stopping the brokers (pids ${PIDS[*]})"; stop_cluster; }
  if [[ "${BENCH_KEEP:-0}" == 1 ]]; then log "data kept in $WORK"
  elif [[ -z "${BENCH_WORKDIR:-}" ]]; then rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

CLK_TCK="$(getconf CLK_TCK)"
cpu_ticks() { local s; s="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo 0; return; }; s="${s##*) }"; awk '{print $12 + $13}' <<<"$s"; }
cluster_ticks() { local i t=0; for i in "${!PIDS[@]}"; do t=$((t + $(cpu_ticks "${PIDS[$i]}"))); done; echo "$t"; }
cluster_hwm_mib() { local i k=0 v; for i in "${!PIDS[@]}"; do v="$(awk '$1 == "VmHWM:" {print $2}' "/proc/${PIDS[$i]}/status" 2>/dev/null)"; k=$((k + ${v:-0})); done; awk -v k="$k" 'BEGIN{printf "%.0f", k / 1024}'; }
all_alive() { local i; for i in "${!PIDS[@]}"; do kill -0 "${PIDS[$i]}" 2>/dev/null || return 1; done; }

node_props() {  # system node dir
  local s="$1" i="$2" d="$3"
  cat <<PROPS
node.id=$i
process.roles=broker,controller
controller.quorum.voters=$VOTERS
listeners=PLAINTEXT://127.0.0.1:$(cport "$i"),CONTROLLER://127.0.0.1:$(qport "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(cport "$i")
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$d/data
default.replication.factor=$RF
min.insync.replicas=$MIN_ISR
offsets.topic.replication.factor=$RF
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
PROPS
  if [[ "$s" == kafka ]]; then
    printf '%s\n' transaction.state.log.replication.factor=$RF transaction.state.log.min.isr=$MIN_ISR \
      share.coordinator.state.topic.replication.factor=$RF share.coordinator.state.topic.min.isr=$MIN_ISR \
      num.network.threads=3 num.io.threads=8 log.segment.bytes=1073741824
  else
    echo metrics.listener=none
  fi
}

# start_cluster system round: writes the configs, formats (Kafka), launches, waits for 3 brokers
start_cluster() {
  local s="$1" r="$2" base="$WORK/$1-r$2" i d
  rm -rf "$base"; mkdir -p "$base"
  for i in "${NODES[@]}"; do d="$base/n$i"; mkdir -p "$d"; node_props "$s" "$i" "$d" > "$d/server.properties"; done
  if [[ "$s" == kafka ]]; then
    local cid="-" fpids=()
    while [[ "$cid" == -* ]]; do cid="$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"; done
    for i in "${NODES[@]}"; do   # static controller.quorum.voters: no --standalone/--initial-controllers
      java -Xmx256M -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "$BROKER_LOG4J" -cp "$BROKER_LIB/*" kafka.tools.StorageTool format \
        --cluster-id "$cid" --config "$base/n$i/server.properties" > "$base/n$i/format.log" 2>&1 &
      fpids+=($!)
    done
    for i in "${!fpids[@]}"; do wait "${fpids[$i]}" || { cat "$base/n$((i + 1))/format.log" >&2; die "kafka: StorageTool format of node $((i + 1)) failed"; }; done
  fi
  local busy t
  for t in $(seq 60); do   # the previous cluster's ports may take a moment to be released
    busy=""
    for i in "${NODES[@]}"; do for p in "$(cport "$i")" "$(qport "$i")"; do port_open "$p" && busy="$p"; done; done
    [[ -z "$busy" ]] && break
    (( t == 1 )) && log "$s round $r: 127.0.0.1:$busy in use ($(ss -Hltnp "sport = :$busy" 2>/dev/null | awk '{print $NF}' | head -1)); waiting up to 60 s"
    sleep 1
  done
  [[ -z "$busy" ]] || { err "$s round $r: 127.0.0.1:$busy still in use after 60 s"; return 1; }
  local unset_env=() v p
  for v in $(compgen -e | grep '^KAFKA_' || true); do unset_env+=(-u "$v"); done
  LOADAVG_START["$s-$r"]="$(cut -d' ' -f1-3 /proc/loadavg)"
  local t0; t0="$(now_ms)"
  for i in "${NODES[@]}"; do
    d="$base/n$i"
    if [[ "$s" == kafka ]]; then
      # shellcheck disable=SC2086
      java $KAFKA_HEAP $KAFKA_JVM "$BROKER_LOG4J" -cp "$BROKER_LIB/*" kafka.Kafka "$d/server.properties" > "$d/broker.log" 2>&1 < /dev/null &
    else
      env "${unset_env[@]}" CAIRN_LOG="${CAIRN_LOG:-info,openraft=off}" "$CAIRN" "$d/server.properties" > "$d/broker.log" 2>&1 < /dev/null &
    fi
    PIDS[$i]=$!
  done
  log "$s round $r: started nodes (pids ${PIDS[*]}), data in $base"
  local deadline=$(( t0 + START_TIMEOUT * 1000 )) n=0
  while :; do
    if ! all_alive; then
      for i in "${NODES[@]}"; do cp "$base/n$i/broker.log" "$LOGS/$s-r$r-startup-failed-n$i-broker.log"; done
      err "$s round $r: a broker exited during startup: $(grep -h -m1 -E 'Exception|ERROR' "$base"/n*/broker.log | head -1 | cut -c1-250)"
      return 1
    fi
    n="$(timeout 10 kcat -L -J -b "$BOOT" -m 3 2>/dev/null | jq '.brokers | length' 2>/dev/null || echo 0)"
    [[ "$n" == "$NNODES" ]] && break
    (( $(now_ms) > deadline )) && { err "$s round $r: only ${n:-0} of $NNODES brokers in the metadata after ${START_TIMEOUT}s"; return 1; }
    sleep 0.2
  done
  record "$s" ready_ms "$r" "$(( $(now_ms) - t0 ))"
  log "$s round $r: $NNODES broker(s) in the metadata after $(( $(now_ms) - t0 )) ms"
}

create_topic() {  # system topic -> 0 once every partition has a leader and a full ISR
  local s="$1" t="$2" rc=0 deadline
  timeout "$STEP_TIMEOUT" "$KRUN" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --create --topic "$t" \
    --partitions "$PARTS" --replication-factor "$RF" --config min.insync.replicas="$MIN_ISR" > "$LOGS/$s-create-$t.out" 2>&1 || rc=$?
  (( rc == 0 )) || { err "$s: creating $t failed (exit $rc): $(tail -n 3 "$LOGS/$s-create-$t.out" | tr '\n' ' ')"; return 1; }
  deadline=$(( $(now_ms) + 60000 ))
  until timeout 10 kcat -L -J -b "$BOOT" -t "$t" -m 3 2>/dev/null | jq -e --arg t "$t" --argjson n "$PARTS" --argjson rf "$RF" \
      '[.topics[] | select(.topic == $t) | .partitions[] | select(.leader > 0 and (.isrs | length) == $rf)] | length == $n' >/dev/null 2>&1; do
    (( $(now_ms) > deadline )) && { err "$s: $t not fully in sync 60 s after creation"; return 1; }
    sleep 0.2
  done
}

end_offsets() {  # topic -> sum of end offsets (all topics are new, so beginning offsets are 0)
  local args=() p
  for p in $(seq 0 $((PARTS - 1))); do args+=(-t "$1:$p:-1"); done
  timeout 30 kcat -Q -b "$BOOT" "${args[@]}" 2>/dev/null | awk '$3 == "offset" {s += $4; n++} END {if (n) print s}'
}

# perf system round kind(max|rate|warmup) records throughput: one ProducerPerformance run on a new topic
perf() {
  local s="$1" r="$2" k="$3" n="$4" tp="$5" t="bench-$3-r$2" c0 c1 rc=0 line
  local tag="$s-$k-r$r" out="$LOGS/$s-$k-r$r.out" errf="$LOGS/$s-$k-r$r.err"
  create_topic "$s" "$t" || return 0
  log "$s round $r: ProducerPerformance $k: $n x $RECORD_SIZE B, --throughput $tp -> $t"
  check_disturbed "before the $k run"
  c0="$(cluster_ticks)"
  KAFKA_HEAP_OPTS="$CLIENT_HEAP" KAFKA_JVM_PERFORMANCE_OPTS="$CLIENT_JVM" \
    timeout "$STEP_TIMEOUT" "$KRUN" org.apache.kafka.tools.ProducerPerformance --topic "$t" --num-records "$n" \
      --record-size "$RECORD_SIZE" --throughput "$tp" --producer-props bootstrap.servers="$BOOT" "${PRODUCER_COMMON[@]}" \
      > "$out" 2> "$errf" || rc=$?
  c1="$(cluster_ticks)"
  check_disturbed "after the $k run"
  all_alive || { err "$s round $r: a broker died during the $k run"; return 0; }
  line="$(grep 'records sent' "$out" | tail -n 1 || true)"
  local re='^([0-9]+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\), ([0-9.]+) ms avg latency, ([0-9.]+) ms max latency, ([0-9]+) ms 50th, ([0-9]+) ms 95th, ([0-9]+) ms 99th, ([0-9]+) ms 99.9th'
  if (( rc != 0 )) || [[ ! "$line" =~ $re ]]; then
    err "$s round $r: $k run failed (exit $rc$( (( rc == 124 )) && echo ", timed out")): $(grep -m1 -E 'Exception|Error' "$errf" || tail -n 2 "$errf" | tr '\n' ' ')"
    return 0
  fi
  local sent="${BASH_REMATCH[1]}" nexc nwarn stored
  nexc="$(grep -c 'Exception' "$errf" || true)"; nwarn="$(grep -c 'WARN' "$errf" || true)"
  (( nwarn > 0 )) && note "$s round $r $k: $nwarn WARN line(s) from the producer (retries?), first: $(grep -m1 'WARN' "$errf" | cut -c1-200)"
  if [[ "$sent" != "$n" ]] || (( nexc > 0 )); then
    err "$s round $r: $k run: $sent of $n records acknowledged, $nexc exception line(s): $(grep -m1 'Exception' "$errf" || true)"; return 0
  fi
  stored="$(end_offsets "$t")"
  [[ "$stored" == "$n" ]] || { err "$s round $r: $k run acknowledged $n records but the end offsets of $t sum to '${stored:-?}'"; return 0; }
  log "$s round $r $k: $line"
  [[ "$k" == warmup ]] && return 0
  record "$s" "${k}_recs" "$r" "${BASH_REMATCH[2]}"
  if (( HALF_KAFKA )) && [[ "$s" == kafka && "$k" == max ]]; then
    ROUND_RATE[$r]="$(awk -v x="${BASH_REMATCH[2]}" 'BEGIN{printf "%d", x / 2}')"
    log "round $r: fixed rate set to ${ROUND_RATE[$r]} records/s, half of Kafka's max"
  fi
  [[ "$k" == rate ]] && record "$s" rate_target "$r" "$tp"
  record "$s" "${k}_mbs" "$r" "${BASH_REMATCH[3]}"
  record "$s" "${k}_avg" "$r" "${BASH_REMATCH[4]}"
  record "$s" "${k}_p50" "$r" "${BASH_REMATCH[6]}"
  record "$s" "${k}_p99" "$r" "${BASH_REMATCH[8]}"
  record "$s" "${k}_p999" "$r" "${BASH_REMATCH[9]}"
  record "$s" "${k}_bcpu" "$r" "$(awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v n="$n" -v b="$RECORD_SIZE" 'BEGIN{printf "%.2f", d / hz / (n * b / 1073741824)}')"
  if [[ "$k" == rate ]] && awk -v a="${BASH_REMATCH[2]}" -v w="$tp" 'BEGIN{exit !(a < 0.97 * w)}'; then
    note "$s round $r: the fixed-rate run reached only ${BASH_REMATCH[2]} records/s of $tp"
  fi
}

# The machine is shared: a fault-harness run (three JVMs) or a cargo build (rustc, not niced, so it
# takes the CPUs from this niced benchmark) disturbs a measurement badly. Before a round this waits
# until neither runs (rustc: at most BENCH_RUSTC_WAIT s); a round during which either was seen
# (sampled before and after each perf-test run) is discarded and run again.
wait_quiet() {  # what -> waits until no harness.py runs (required) and no rustc (at most BENCH_RUSTC_WAIT s)
  local t0 h=0 c=0 limit="${BENCH_HARNESS_WAIT:-3600}" rlimit="${BENCH_RUSTC_WAIT:-600}"
  t0="$(date +%s)"
  while :; do
    if pgrep -f harness.py >/dev/null; then
      (( h == 0 )) && log "tests/faults/harness.py is running; waiting for it to finish (up to ${limit}s)"
      (( h >= limit )) && die "harness.py still running after ${limit}s"
      h=$((h + 5))
    elif pgrep -x rustc >/dev/null && (( c < rlimit )); then
      (( c == 0 )) && log "rustc (a cargo build) is running; waiting for it (up to ${rlimit}s)"
      c=$((c + 5))
    else break; fi
    sleep 5
  done
  (( h + c > 0 )) && note "waited $(( $(date +%s) - t0 ))s before $1 (harness.py ${h}s, rustc ${c}s)$(pgrep -x rustc >/dev/null && echo '; rustc still running, went ahead')"
  return 0
}
DISTURBED=""
check_disturbed() {
  pgrep -f harness.py >/dev/null && DISTURBED="${DISTURBED:-harness.py running $1}"
  pgrep -x rustc >/dev/null && DISTURBED="${DISTURBED:-rustc (a cargo build, not niced) running $1}"
  return 0
}

declare -A LOADAVG_START=()
ROUND_OK=0
round() {  # system round attempt
  SYS="$1"
  local nerr=${#ERRORS[@]} i
  wait_quiet "$1 round $2"
  DISTURBED=""
  ROUND_RAW="$WORK/round.tsv"; : > "$ROUND_RAW"
  if start_cluster "$1" "$2"; then
    perf "$1" "$2" warmup "$WARM" -1
    (( HALF_KAFKA )) && [[ "$1" == kafka ]] && unset "ROUND_RATE[$2]"
    perf "$1" "$2" max "$N" -1
    local rate="${ROUND_RATE[$2]:-$RATE}"
    if [[ -n "$rate" ]]; then perf "$1" "$2" rate $((rate * RATE_S)) "$rate"
    else err "$1 round $2: no fixed-rate run, as Kafka's max-throughput run of this round did not count"; fi
    record "$1" rss_peak "$2" "$(cluster_hwm_mib)"
  else
    DISTURBED="${DISTURBED:-the cluster did not start}"
  fi
  for i in "${NODES[@]}"; do cp "$WORK/$1-r$2/n$i/broker.log" "$LOGS/$1-r$2-a$3-n$i-broker.log" 2>/dev/null || true; done
  stop_cluster
  rm -rf "$WORK/$1-r$2"
  if [[ -n "$DISTURBED" ]]; then
    note "$1 round $2 (attempt $3) discarded: $DISTURBED$( (( ${#ERRORS[@]} > nerr )) && echo "; its errors: ${ERRORS[*]:$nerr}")"
    ERRORS=("${ERRORS[@]:0:$nerr}")
    ROUND_OK=0
  else
    cat "$ROUND_RAW" >> "$RAW"
    ROUND_OK=1
  fi
  ROUND_RAW="$RAW"
}

T_BEGIN="$(date -Is)"
wait_quiet "the first round"
LOAD_BEGIN="$(cut -d' ' -f1-3 /proc/loadavg)"
log "cluster bench: $RUNS round(s); max: $N records; rate: ${RATE:-half-kafka} records/s for ${RATE_S}s; warm-up $WARM; $PARTS partitions RF=$RF; bootstrap $BOOT; load $LOAD_BEGIN"
ORDER=()
for r in $(seq "$RUNS"); do
  if [[ "$ONLY" == both ]]; then
    if (( r % 2 || HALF_KAFKA )); then ORDER+=("kafka $r" "cairn $r"); else ORDER+=("cairn $r" "kafka $r"); fi
  else ORDER+=("$ONLY $r"); fi
done
RETRIES="${BENCH_RETRIES:-3}"
for step in "${ORDER[@]}"; do
  for attempt in $(seq $((RETRIES + 1))); do
    round $step "$attempt"
    (( ROUND_OK )) && break
    (( attempt <= RETRIES )) || err "$step: disturbed in all $attempt attempts; not counted"
  done
done
LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------- report
median() {
  awk -F'\t' -v b="$1" -v m="$2" '$1 == b && $2 == m {print $4}' "$RAW" | sort -g |
    awk '{a[NR] = $1} END { if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
nruns() { awk -F'\t' -v b="$1" -v m="$2" '$1 == b && $2 == m' "$RAW" | wc -l; }
fmt() {  # value decimals, with thousands separators (as bench/run.sh)
  [[ -z "$1" ]] && { echo "—"; return; }
  awk -v v="$1" -v d="$2" 'BEGIN { s = sprintf("%." d "f", v); n = split(s, p, "."); i = p[1]
    o = ""; while (length(i) > 3) { o = "," substr(i, length(i) - 2) o; i = substr(i, 1, length(i) - 3) }
    o = i o; if (n > 1) o = o "." p[2]; print o }'
}
ratio() { [[ -z "$1" || -z "$2" ]] && { echo "—"; return; }
  awk -v c="$1" -v k="$2" 'BEGIN { if (k + 0 == 0) print "—"; else { r = c / k; printf (r < 0.1 ? "%.3f×" : "%.2f×"), r } }'; }
ROWS=(
  "max_mbs|Max throughput (--throughput -1): MB/s|1|higher"
  "max_recs|Max throughput: records/s|0|higher"
  "max_p50|Max throughput: p50 latency (ms)|0|lower"
  "max_p99|Max throughput: p99 latency (ms)|0|lower"
  "max_bcpu|Max throughput: broker CPU-s per GiB (sum of $NNODES)|2|lower"
  "rate_target|Fixed rate: records/s asked for|0|info"
  "rate_recs|Fixed rate: achieved records/s|0|info"
  "rate_avg|Fixed rate: avg latency (ms)|1|lower"
  "rate_p50|Fixed rate: p50 latency (ms)|0|lower"
  "rate_p99|Fixed rate: p99 latency (ms)|0|lower"
  "rate_p999|Fixed rate: p99.9 latency (ms)|0|lower"
  "rate_bcpu|Fixed rate: broker CPU-s per GiB (sum of $NNODES)|2|lower"
  "rss_peak|Peak RSS, sum of $NNODES broker(s) (MiB, VmHWM)|0|lower"
  "ready_ms|Launch → $NNODES broker(s) in the metadata (ms; Kafka after storage format)|0|info"
)
MD="$RESULTS/$TAG-latest.md"
{
  echo "# Cairn vs Apache Kafka, $NNODES broker(s), RF=$RF, acks=all — bench/cluster.sh$( (( QUICK )) && echo ' --quick')"
  echo
  echo "- Date: $T_BEGIN → $(date -Is)"
  echo "- Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r); shared with other work, so read the ratios rather than the absolute figures"
  echo "- Load average (1/5/15 min) at start: $LOAD_BEGIN; at the end: $LOAD_END; at each cluster start: $(for k in $(printf '%s\n' "${!LOADAVG_START[@]}" | sort -t- -k2n -k1); do printf '%s %s; ' "$k" "${LOADAVG_START[$k]}"; done)"
  echo "- Clients and all $((2 * NNODES)) brokers on the same machine, run under nice $(nice); each round starts a fresh cluster per system, $( (( HALF_KAFKA )) && echo 'Kafka first in every round (its max sets the fixed rate)' || echo 'order alternating (kafka first in odd rounds)')"
  echo "- Apache Kafka $KAFKA_VERSION: $NNODES node(s), KRaft combined mode (static controller.quorum.voters, kafka.tools.StorageTool format with a shared cluster id), $KAFKA_HEAP per broker on this $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) machine"
  [[ "$ONLY" != kafka ]] && echo "- Cairn: \`$CAIRN\` (sha256 $(sha256sum "$CAIRN" | cut -c1-12)), $NNODES node(s), combined mode, metrics.listener=none"
  echo "- Both: node.id 1-$NNODES, process.roles=broker,controller, PLAINTEXT + CONTROLLER listeners on 127.0.0.1 (direct connections), default.replication.factor=$RF, min.insync.replicas=$MIN_ISR"
  echo "- Workload: kafka-producer-perf-test (org.apache.kafka.tools.ProducerPerformance) to a new $PARTS-partition RF=$RF topic per run (TopicCommand, every ISR full before producing), ${PRODUCER_COMMON[*]}, $RECORD_SIZE B records, bootstrap to every broker; JVM $CLIENT_HEAP G1"
  echo "- Per cluster: warm-up $WARM records (not counted), then max throughput ($N records, --throughput -1), then fixed rate for ${RATE_S} s at $(if (( HALF_KAFKA )); then echo "half of Kafka's max records/s of the same round ($(for r in $(printf '%s\n' "${!ROUND_RATE[@]}" | sort -n); do printf 'round %s: %s/s; ' "$r" "${ROUND_RATE[$r]}"; done))"; else echo "$RATE records/s = $(awk -v r="$RATE" -v b="$RECORD_SIZE" 'BEGIN{printf "%.1f", r*b/1048576}') MB/s"; fi); every run checked: all records acknowledged, no exception, end offsets sum to the count"
  echo "- Medians over $RUNS round(s); CPU = utime+stime of the broker processes during the run, per GiB of record data"
  echo
  echo "| Metric | Kafka | Cairn | Cairn/Kafka | Ratio reads |"
  echo "|---|---:|---:|---:|---|"
  for row in "${ROWS[@]}"; do
    IFS='|' read -r key label dec better <<<"$row"
    k="$(median kafka "$key")"; c="$(median cairn "$key")"
    [[ -z "$k" && -z "$c" ]] && continue
    case "$better" in higher) reads="higher is better" ;; lower) reads="lower is better" ;; *) reads="informational" ;; esac
    printf '| %s | %s | %s | %s | %s |\n' "$label" "$(fmt "$k" "$dec")" "$(fmt "$c" "$dec")" "$(ratio "$c" "$k")" "$reads"
  done
  echo
  echo "Counted runs: $(for b in kafka cairn; do printf '%s %s/%s max, %s/%s rate. ' "$b" "$(nruns "$b" max_mbs)" "$RUNS" "$(nruns "$b" rate_mbs)" "$RUNS"; done)"
  if (( ${#NOTES[@]} )); then echo; echo "## Notes"; echo; for e in "${NOTES[@]}"; do echo "- $e"; done; fi
  if (( ${#ERRORS[@]} )); then echo; echo "## Errors"; echo; for e in "${ERRORS[@]}"; do echo "- $e"; done; fi
  echo
  echo "Raw per-run values: bench/results/$TAG-raw.tsv; tool and broker logs: bench/results/$TAG-logs/."
} > "$MD"
echo; cat "$MD"
(( ${#ERRORS[@]} == 0 )) || { log "${#ERRORS[@]} error(s); see $LOGS"; exit 1; }
