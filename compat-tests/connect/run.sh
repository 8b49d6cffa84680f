#!/usr/bin/env bash
# Apache Kafka Connect 4.3.1 in distributed mode (jars from Maven Central: setup.sh, pom.xml)
# against the broker at BOOTSTRAP: two workers of one group keep their config, offset and
# status topics on it and run a FileStreamSource (file -> topic) and a FileStreamSink
# (topic -> file) through a worker's kill -9, a config topic compacted by the broker, and a
# restart of both workers. README.md says what each check proves.
#   BOOTSTRAP=127.0.0.1:9092 compat-tests/connect/run.sh
# Prints "PASS name" / "FAIL name: reason" per check, then exactly one line
#   connect: N passed, M failed
# and exits non-zero if M > 0.
# Environment:
#   BOOTSTRAP          broker to test (default 127.0.0.1:9092)
#   CONNECT_WAIT_S     seconds any one wait may take before its check gives up (default 120)
#   CONNECT_LOG_LEVEL  the workers' log level (default: WARN, and INFO for the herder)
#   KEEP_WORK=1        keep the work directory (worker logs, files) even if all pass
set -uo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BOOTSTRAP="${BOOTSTRAP:-127.0.0.1:9092}"
WAIT_S="${CONNECT_WAIT_S:-120}"
RUN_ID="$(date +%s)-$$"
T_START=$(date +%s)

PASSED=0
FAILED=0
pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); }

"$DIR/setup.sh" || { fail setup "setup.sh failed"; echo "connect: $PASSED passed, $FAILED failed"; exit 1; }
for c in java curl python3; do
  command -v "$c" >/dev/null || { fail setup "$c not found"; echo "connect: $PASSED passed, $FAILED failed"; exit 1; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/cairn-connect.XXXXXX")"
IN="$WORK/input.txt"
OUT="$WORK/output.txt"
CONFIG_TOPIC="cairn-connect-configs-$RUN_ID"
# Connector names are the run's own: a sink's consumer group is connect-NAME, whose
# committed offsets would otherwise carry over from an earlier run on the same broker.
SRC="file-source-$RUN_ID"
SINK="file-sink-$RUN_ID"
LINES_TOPIC="cairn-connect-lines-$RUN_ID"
H() { RUN_ID="$RUN_ID" python3 "$DIR/helpers.py" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s; }

echo "connect: Kafka Connect 4.3.1 (distributed), broker $BOOTSTRAP, run id $RUN_ID, work dir $WORK"

# ---------------------------------------------------------------- workers
# Worker i (1, 2) listens for REST on PORT[i]; its id, as the status API shows it, is
# ID[i]; PID[i] is its JVM (empty once stopped). Each run of a worker logs into its own file.
PORT=("" "$(free_port)" "$(free_port)")
while [[ "${PORT[2]}" == "${PORT[1]}" ]]; do PORT[2]=$(free_port); done
ID=("" "127.0.0.1:${PORT[1]}" "127.0.0.1:${PORT[2]}")
PID=("" "" "")
LOG=("" "" "")
RUNS=0
for i in 1 2; do
  # scheduled.rebalance.max.delay.ms=0: the work of a worker that left goes to the others
  # at the next rebalance rather than after 5 minutes (the default waits for it to come back).
  # session.timeout.ms=6000, the brokers' minimum by default, finds the killed one soon.
  # offset.flush.interval.ms=1000: the source's file position and the sink's consumer
  # offsets are committed every second rather than every minute.
  # config.storage.* (KIP-605): topic settings the worker creates its config topic with;
  # segment.ms rolls a segment at the first write a second after the previous roll, so
  # superseded connector configs leave the active segment for the broker's log cleaner.
  # plugin.discovery=service_load: the FileStream connectors are found by their
  # ServiceLoader manifests, without scanning the classpath (4 s less to start).
  cat > "$WORK/worker-$i.properties" <<EOF
bootstrap.servers=$BOOTSTRAP
group.id=cairn-connect-$RUN_ID
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
config.storage.topic=$CONFIG_TOPIC
offset.storage.topic=cairn-connect-offsets-$RUN_ID
status.storage.topic=cairn-connect-status-$RUN_ID
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
config.storage.segment.ms=1000
config.storage.min.cleanable.dirty.ratio=0.01
offset.flush.interval.ms=1000
scheduled.rebalance.max.delay.ms=0
session.timeout.ms=6000
heartbeat.interval.ms=2000
listeners=http://127.0.0.1:${PORT[$i]}
rest.advertised.host.name=127.0.0.1
rest.advertised.port=${PORT[$i]}
plugin.discovery=service_load
EOF
done

start_worker() { # $1: 1 or 2
  local i=$1
  RUNS=$((RUNS + 1))
  LOG[$i]="$WORK/worker-$i.run-$RUNS.log"
  java -Xms128M -Xmx512M -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$DIR/log4j2-worker.xml" -cp "$DIR/lib/*" \
    org.apache.kafka.connect.cli.ConnectDistributed "$WORK/worker-$i.properties" \
    >"${LOG[$i]}" 2>&1 </dev/null &
  PID[$i]=$!
}
# SIGTERM, then SIGKILL after 60 s; fails if it took the SIGKILL.
stop_worker() {
  local i=$1 pid=${PID[$1]} end=$(($(now) + 60))
  [[ -n "$pid" ]] || return 0
  PID[$i]=""
  kill -TERM "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null; do
    if (($(now) >= end)); then kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; return 1; fi
    sleep 0.2
  done
  wait "$pid" 2>/dev/null
  return 0
}
kill_worker() { # $1: 1 or 2: kill -9
  local pid=${PID[$1]}
  PID[$1]=""
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
cleanup() {
  local i
  for i in 1 2; do [[ -n "${PID[$i]}" ]] && kill -KILL "${PID[$i]}" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT

# rest I METHOD PATH [JSON_FILE]: a request to worker i's REST API; the body goes to
# $WORK/rest.out, the HTTP status to stdout (000 when it did not answer).
rest() {
  local i=$1 method=$2 path=$3 data=()
  [[ $# -ge 4 ]] && data=(-H 'Content-Type: application/json' --data-binary "@$4")
  curl -s -m 30 -o "$WORK/rest.out" -w '%{http_code}' -X "$method" "${data[@]}" \
    "http://127.0.0.1:${PORT[$i]}$path" 2>/dev/null
}
# rest_until I METHOD PATH JSON_FILE CODE: repeats a write while the worker answers 409 or
# 500 (Connect's answers during a rebalance: "rebalance in progress", RebalanceNeededException)
# or nothing, until it answers CODE or WAIT_S pass.
rest_until() {
  local code end=$(($(now) + WAIT_S))
  while :; do
    code=$(rest "$1" "$2" "$3" "$4")
    [[ "$code" == "$5" ]] && return 0
    if [[ "$code" != 409 && "$code" != 500 && "$code" != 000 ]] || (($(now) >= end)); then
      echo "$2 $3 answered $code: $(head -c 300 "$WORK/rest.out")"
      return 1
    fi
    sleep 0.5
  done
}
# configs_until I: waits until worker i lists both connectors (GET /connectors) and answers
# for each the config of generation 4 (GET /connectors/NAME/config, from the config topic
# as this worker read it). Connect answers nothing useful during a rebalance: every answer
# but the expected one is retried until WAIT_S pass; then the last one is echoed.
configs_until() {
  local end=$(($(now) + WAIT_S)) why c code names want
  want=$(printf '%s\n' "$SRC" "$SINK" | sort | paste -sd,)
  while :; do
    why=""
    code=$(rest "$1" GET /connectors)
    if [[ "$code" != 200 ]]; then
      why="GET /connectors answered $code: $(head -c 200 "$WORK/rest.out")"
    else
      names=$(python3 -c 'import json,sys; print(",".join(sorted(json.load(open(sys.argv[1])))))' "$WORK/rest.out")
      [[ "$names" == "$want" ]] || why="GET /connectors lists [$names]"
    fi
    for c in "$SRC:src" "$SINK:sink"; do
      [[ -n "$why" ]] && break
      code=$(rest "$1" GET "/connectors/${c%%:*}/config")
      if [[ "$code" != 200 ]]; then why="GET /connectors/${c%%:*}/config answered $code: $(head -c 200 "$WORK/rest.out")"; break; fi
      cp "$WORK/rest.out" "$WORK/config.json"
      why=$(H config "$WORK/config.json" "$WORK/${c##*:}-4.json") && why="" || why="${c%%:*}: $why"
    done
    [[ -z "$why" ]] && return 0
    (($(now) >= end)) && { echo "worker $1: $why"; return 1; }
    sleep 0.5
  done
}
# status_until I [WORKERS]: waits until worker i's status API shows both connectors and
# their tasks RUNNING (on exactly WORKERS, comma separated, if given). Leaves the last
# summary in $WORK/status.txt.
status_until() {
  local end=$(($(now) + WAIT_S))
  while :; do
    if [[ "$(rest "$1" GET "/connectors?expand=status")" == 200 ]]; then
      cp "$WORK/rest.out" "$WORK/status.json"
      H running "$WORK/status.json" "$SRC,$SINK" ${2:+"$2"} >"$WORK/status.txt" && return 0
    else
      echo "GET /connectors?expand=status answered $(cat "$WORK/rest.out" 2>/dev/null | head -c 200)" >"$WORK/status.txt"
    fi
    (($(now) >= end)) && return 1
    sleep 0.5
  done
}
# output_until: waits until the sink's file equals the source's (cmp); then, or after
# WAIT_S, $WORK/compare.txt says how they compare.
output_until() {
  local end=$(($(now) + WAIT_S))
  until cmp -s "$IN" "$OUT"; do
    (($(now) >= end)) && break
    sleep 0.5
  done
  [[ -f "$OUT" ]] || : >"$OUT"
  H compare "$IN" "$OUT" >"$WORK/compare.txt"
}
# committed_until I: waits until the offsets stored through the broker cover the whole input:
# the source's file position (offset topic) is the input's size and the sink's committed
# consumer offset is its line count (one record per line).
committed_until() {
  local end=$(($(now) + WAIT_S)) size lines pos off
  size=$(stat -c %s "$IN"); lines=$(wc -l <"$IN")
  while :; do
    pos=-2; off=-2
    [[ "$(rest "$1" GET "/connectors/$SRC/offsets")" == 200 ]] && pos=$(H offset "$WORK/rest.out")
    [[ "$(rest "$1" GET "/connectors/$SINK/offsets")" == 200 ]] && off=$(H offset "$WORK/rest.out")
    echo "source position $pos of $size bytes, sink offset $off of $lines records" >"$WORK/committed.txt"
    [[ "$pos" == "$size" && "$off" == "$lines" ]] && return 0
    (($(now) >= end)) && return 1
    sleep 0.5
  done
}
# append N: N more distinct lines at the end of the input, written at once.
NEXT_LINE=1
append() {
  local first=$NEXT_LINE last=$((NEXT_LINE + $1 - 1))
  seq -f "cairn-connect $RUN_ID line %07g" "$first" "$last" >"$WORK/chunk.txt"
  cat "$WORK/chunk.txt" >>"$IN"
  NEXT_LINE=$((last + 1))
}
# connector configs, generation G (written as cairn.generation, which check
# config-topic-compacted looks for)
src_config() {
  cat <<EOF
{"connector.class":"org.apache.kafka.connect.file.FileStreamSourceConnector","tasks.max":"1",
 "file":"$IN","topic":"$LINES_TOPIC","batch.size":"$((500 + $1))",
 "topic.creation.default.replication.factor":"1","topic.creation.default.partitions":"1",
 "cairn.generation":"$1"}
EOF
}
sink_config() {
  cat <<EOF
{"connector.class":"org.apache.kafka.connect.file.FileStreamSinkConnector","tasks.max":"1",
 "file":"$OUT","topics":"$LINES_TOPIC","cairn.generation":"$1"}
EOF
}
# Which check failed first, when the ones after it cannot run (they would only wait out
# their deadlines): they are reported as failed, not run.
BLOCKED=""
blocked() { # check names: the checks of one block
  [[ -n "$BLOCKED" ]] || return 1
  local c
  for c in "$@"; do fail "$c" "not run ($BLOCKED failed)"; done
}
# REST up on both workers: GET / answers with the version and the broker's cluster id.
both_up() {
  local end=$(($(now) + WAIT_S)) i up
  while :; do
    up=0
    for i in 1 2; do
      [[ "$(rest $i GET /)" == 200 ]] && cp "$WORK/rest.out" "$WORK/root-$i.json" && up=$((up + 1))
      kill -0 "${PID[$i]}" 2>/dev/null || { echo "worker $i exited"; return 1; }
    done
    [[ $up == 2 ]] && return 0
    (($(now) >= end)) && { echo "REST API not up after ${WAIT_S}s"; return 1; }
    sleep 0.3
  done
}

# ---------------------------------------------------------------- 1. two workers join
t0=$(now)
start_worker 1
start_worker 2
if why=$(both_up); then
  v1=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["version"], d["kafka_cluster_id"])' "$WORK/root-1.json")
  v2=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["version"], d["kafka_cluster_id"])' "$WORK/root-2.json")
  if [[ "$v1" == "$v2" && "$v1" == "4.3.1 "?* ]]; then
    pass "workers-start (both REST APIs up in $(($(now) - t0))s: Connect $v1)"
  else
    fail workers-start "GET / answered '$v1' and '$v2' (expected 4.3.1 and one cluster id)"
    BLOCKED=workers-start
  fi
else
  fail workers-start "$why (log: ${LOG[1]})"
  BLOCKED=workers-start
fi

append 3000
if ! blocked create-connectors; then
  src_config 1 >"$WORK/src-1.json"; sink_config 1 >"$WORK/sink-1.json"
  python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[1], "config": json.load(open(sys.argv[2]))}))' "$SRC" "$WORK/src-1.json" >"$WORK/create-src.json"
  python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[1], "config": json.load(open(sys.argv[2]))}))' "$SINK" "$WORK/sink-1.json" >"$WORK/create-sink.json"
  # the source through one worker, the sink through the other (a follower forwards it to
  # the leader)
  if why=$(rest_until 1 POST /connectors "$WORK/create-src.json" 201) &&
     why=$(rest_until 2 POST /connectors "$WORK/create-sink.json" 201); then
    pass create-connectors
  else
    fail create-connectors "$why (log: ${LOG[1]})"
    BLOCKED=create-connectors
  fi
fi

if ! blocked two-workers-running; then
  t0=$(now)
  if status_until 1 "${ID[1]},${ID[2]}"; then
    pass "two-workers-running (after $(($(now) - t0))s: $(cat "$WORK/status.txt"))"
  else
    fail two-workers-running "gave up after ${WAIT_S}s: $(cat "$WORK/status.txt") (log: ${LOG[1]})"
  fi
fi

# ---------------------------------------------------------------- 2. file -> topic -> file
if ! blocked pipeline-copies; then
  t0=$(now)
  if output_until; then
    pass "pipeline-copies (after $(($(now) - t0))s: $(cat "$WORK/compare.txt"))"
  else
    fail pipeline-copies "gave up after ${WAIT_S}s: $(cat "$WORK/compare.txt") (log: ${LOG[1]})"
    BLOCKED=pipeline-copies
  fi
fi

# Superseded records for the config topic: generations 2..4 of both configs, a segment.ms
# apart, alternately through each worker. Each PUT writes the connector's config, then its
# tasks' configs and their commit record.
if ! blocked config-updates; then
  why=""
  for g in 2 3 4; do
    sleep 1.5
    w=$((g % 2 + 1))
    src_config $g >"$WORK/src-$g.json"; sink_config $g >"$WORK/sink-$g.json"
    r=$(rest_until $w PUT "/connectors/$SRC/config" "$WORK/src-$g.json" 200) || { why="$r"; break; }
    r=$(rest_until $w PUT "/connectors/$SINK/config" "$WORK/sink-$g.json" 200) || { why="$r"; break; }
  done
  for i in 1 2; do
    [[ -n "$why" ]] && break
    why=$(configs_until $i) && why=""
  done
  if [[ -z "$why" ]]; then
    pass "config-updates (generations 2..4 of both configs put; both workers show the last)"
  else
    fail config-updates "$why (log: ${LOG[1]})"
  fi
fi

# ---------------------------------------------------------------- 3. kill -9 and take over
# Before the kill, the input's every line is copied and both offsets cover it: what Connect
# then guarantees is that the survivor resumes from those offsets, so not one line may be
# sent twice (nor lost): the output must be the input exactly. (Lines read after the last
# commit could legitimately be sent again; there are none.)
if ! blocked offsets-committed; then
  t0=$(now)
  if status_until 1 && output_until && committed_until 1; then
    pass "offsets-committed (after $(($(now) - t0))s: $(cat "$WORK/committed.txt"))"
  else
    fail offsets-committed "gave up after ${WAIT_S}s: $(cat "$WORK/status.txt"); $(cat "$WORK/compare.txt"); $(cat "$WORK/committed.txt") (log: ${LOG[1]})"
    BLOCKED=offsets-committed
  fi
fi

if ! blocked failover-takeover failover-resume-exact; then
  victim=1
  [[ "$(H task-worker "$WORK/status.json" "$SRC")" == "${ID[2]}" ]] && victim=2
  survivor=$((3 - victim))
  kill_worker $victim
  echo "connect: killed worker $victim (${ID[$victim]}, running the source's task) with SIGKILL; appending lines"
  t0=$(now)
  append 1000
  if status_until $survivor "${ID[$survivor]}"; then
    pass "failover-takeover (after $(($(now) - t0))s: $(cat "$WORK/status.txt"))"
  else
    fail failover-takeover "gave up after ${WAIT_S}s: $(cat "$WORK/status.txt") (log: ${LOG[$survivor]})"
  fi
  if output_until; then
    pass "failover-resume-exact (after $(($(now) - t0))s: $(cat "$WORK/compare.txt"))"
  else
    fail failover-resume-exact "gave up after ${WAIT_S}s: $(cat "$WORK/compare.txt") (log: ${LOG[$survivor]})"
    BLOCKED=failover-resume-exact
  fi
fi

# ---------------------------------------------------------------- 4. config topic compacted
if ! blocked workers-stop; then
  # the restart below starts from offsets that cover everything, as the kill did
  committed_until $survivor || true
  t0=$(now)
  if stop_worker $survivor; then
    pass "workers-stop (SIGTERM: worker $survivor exited in $(($(now) - t0))s; worker $victim was killed)"
  else
    fail workers-stop "worker $survivor still ran 60s after SIGTERM (log: ${LOG[$survivor]})"
  fi
fi
stop_worker 1; stop_worker 2

if ! blocked config-topic-compacted; then
  # The broker's cleaner runs every log.cleaner.backoff.ms (15 s by default) while it finds
  # nothing to clean: read the topic until generation 1 is gone.
  end=$(($(now) + WAIT_S))
  t0=$(now)
  while :; do
    KAFKA_VERSION=4.4.0 timeout -k 5 60 "$DIR/../java/kafka-run.sh" org.apache.kafka.tools.consumer.ConsoleConsumer \
      --bootstrap-server "$BOOTSTRAP" --topic "$CONFIG_TOPIC" --partition 0 --offset earliest \
      --timeout-ms 3000 --formatter-property print.offset=true --formatter-property print.key=true \
      >"$WORK/config-topic.out" 2>"$WORK/config-topic.err"
    H compacted "$WORK/config-topic.out" 1 4 >"$WORK/compacted.txt" && break
    (($(now) >= end)) && break
    sleep 2
  done
  if H compacted "$WORK/config-topic.out" 1 4 >/dev/null; then
    pass "config-topic-compacted (after $(($(now) - t0))s: $(cat "$WORK/compacted.txt"))"
  else
    fail config-topic-compacted "gave up after ${WAIT_S}s: $(cat "$WORK/compacted.txt") (console consumer: $WORK/config-topic.out, .err)"
  fi
fi

# ---------------------------------------------------------------- 5. both workers again
if ! blocked restart-configs; then
  t0=$(now)
  start_worker 1
  start_worker 2
  if ! why=$(both_up); then
    fail restart-configs "$why (log: ${LOG[1]})"
    BLOCKED=restart-configs
  else
    # both workers read the connectors' configs from the (compacted) config topic
    why=$(configs_until 1) && why=$(configs_until 2) && why=""
    if [[ -z "$why" ]]; then
      pass "restart-configs (after $(($(now) - t0))s both workers list both connectors with generation 4)"
    else
      fail restart-configs "gave up after ${WAIT_S}s: $why (log: ${LOG[1]})"
      BLOCKED=restart-configs
    fi
  fi
fi

if ! blocked restart-running restart-resume-exact; then
  t0=$(now)
  if status_until 1; then
    pass "restart-running (after $(($(now) - t0))s: $(cat "$WORK/status.txt"))"
  else
    fail restart-running "gave up after ${WAIT_S}s: $(cat "$WORK/status.txt") (log: ${LOG[1]})"
  fi
  t0=$(now)
  append 1000
  if output_until; then
    pass "restart-resume-exact (after $(($(now) - t0))s: $(cat "$WORK/compare.txt"))"
  else
    fail restart-resume-exact "gave up after ${WAIT_S}s: $(cat "$WORK/compare.txt") (log: ${LOG[1]})"
  fi
fi
stop_worker 1; stop_worker 2

if [[ $FAILED -gt 0 ]]; then
  for f in "$WORK"/worker-*.log; do
    echo "--- end of $f"
    grep -v '^\s*at \|^\s*\.\.\. [0-9]* more' "$f" | tail -n 15 | cut -c1-300
  done
fi
if [[ $FAILED -eq 0 && "${KEEP_WORK:-0}" != 1 ]]; then rm -rf "$WORK"; else echo "connect: work dir kept: $WORK"; fi
echo "connect: $(($(now) - T_START))s"
echo "connect: $PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
