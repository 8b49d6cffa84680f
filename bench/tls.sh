#!/usr/bin/env bash
# Usage: bench/tls.sh CAIRN_BINARY [N]
#
# TLS produce and consume, Cairn against Apache Kafka (kafka-ref, the newest release from
# the Maven jars), on this machine in one run. Each broker serves an SSL listener with the
# same PKCS12 key (scripts/make-test-certs.sh; server authentication only, the JVM's and
# rustls' default TLS 1.3 suites). The Java perf tools of the same release, over TLS:
# kafka-producer-perf-test writes N x 1 KiB records (default 400,000), acks=1, 16
# partitions; then kafka-consumer-perf-test reads them all back from offset 0 in a group.
# The JVM clients encrypt slowly and share the two cores, so the same is done with kcat
# (librdkafka and OpenSSL, a far lighter client) into a second topic: N lines of 1 KiB
# produced from a file, then read back to the end (MB/s from the wall clock).
# Kafka loses its zero-copy sendfile under TLS, as Cairn has none to lose.
# Reports, per phase, MB/s (the perf tools' own figure; the consumer's fetch MB/s, which
# leaves out its group join) and broker CPU-seconds per GiB, the median (mean of the two)
# of two runs per broker, in the order Cairn, Kafka, Kafka, Cairn (the second broker on this machine pays
# the first one's page-cache writeback), and the ratios. Speed is measured, not asserted.
set -euo pipefail
CAIRN=${1:?usage: bench/tls.sh CAIRN_BINARY [N]}
N=${2:-400000}
here=$(cd "$(dirname "$0")" && pwd)
KRUN="$here/../compat-tests/java/kafka-run.sh"
source "$here/../compat-tests/kafka-ref/version.sh"
export KAFKA_VERSION=$KAFKA_REF_VERSION
work=$(mktemp -d /tmp/cairn-tls-bench.XXXXXX)
pid="" kdir=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  [ -n "$kdir" ] && "$here/../compat-tests/kafka-ref/stop.sh" "$kdir" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
"$here/../compat-tests/java/setup.sh" >/dev/null
"$here/../scripts/make-test-certs.sh" "$work/certs"
free_port() { "$here/../compat-tests/kafka-ref/port-pair.sh"; }
cpu_ticks() { local s; s="$(cat "/proc/$1/stat")"; s="${s##*) }"; awk '{print $12 + $13}' <<<"$s"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
mbps() { awk -v a="$1" -v b="$2" -v n="$N" 'BEGIN {printf "%.1f", n * 1024 / 1048576 / ((b - a) / 1e9)}'; }
per_gib() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v n="$N" 'BEGIN {printf "%.2f", t / hz / (n * 1024 / 1073741824)}'; }

cat >"$work/client.properties" <<P
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=$work/certs/ca.pem
P
tls_props() { # SSL_PORT: the broker's TLS settings, as server.properties lines
  cat <<P
ssl.keystore.type=PKCS12
ssl.keystore.location=$work/certs/broker.p12
ssl.keystore.password=broker-pass
ssl.client.auth=none
P
}

# One broker ("cairn" or "kafka"), started afresh: prints "produce MB/s CPU-s/GiB" and
# "consume MB/s CPU-s/GiB" lines.
measure() {
  local which=$1 port ssl broker
  port=$(free_port); ssl=$(free_port)
  if [ "$which" = cairn ]; then
    local overrides=()
    while IFS= read -r line; do overrides+=(--override "$line"); done < <(tls_props)
    "$CAIRN" --override "listeners=PLAINTEXT://127.0.0.1:$port,SSL://127.0.0.1:$ssl" \
      --override "log.dirs=$work/cairn-data-$RANDOM" --override metrics.listener=none \
      "${overrides[@]}" >"$work/cairn.log" 2>&1 &
    pid=$!; broker=$pid
    for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$ssl") 2>/dev/null && break; sleep 0.05; done
  else
    kdir="$work/kafka-$RANDOM"
    KAFKA_REF_EXTRA_PROPS="$(printf '%s\n' \
      "listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$((port + 1)),SSL://127.0.0.1:$ssl" \
      "advertised.listeners=PLAINTEXT://127.0.0.1:$port,SSL://127.0.0.1:$ssl" \
      "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL"; tls_props)" \
      "$here/../compat-tests/kafka-ref/start.sh" "$port" "$kdir" >/dev/null
    broker=$(cat "$kdir/kafka.pid")
  fi
  local topic="tls-bench" before after
  "$KRUN" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
    --create --topic "$topic" --partitions 16 --replication-factor 1 >/dev/null
  before=$(cpu_ticks "$broker")
  "$KRUN" org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$N" \
    --record-size 1024 --throughput -1 --producer.config "$work/client.properties" \
    --producer-props "bootstrap.servers=127.0.0.1:$ssl" acks=1 linger.ms=5 batch.size=65536 \
    >"$work/produce-$which.log" 2>&1
  after=$(cpu_ticks "$broker")
  grep -q "^$N records sent" "$work/produce-$which.log" || { echo "$which produce failed: $(tail -3 "$work/produce-$which.log")" >&2; exit 1; }
  echo "produce $(grep "^$N records sent" "$work/produce-$which.log" | sed -E 's/.*\(([0-9.]+) MB\/sec\).*/\1/') $(per_gib $((after - before)))"
  before=$(cpu_ticks "$broker")
  "$KRUN" org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "127.0.0.1:$ssl" \
    --consumer.config "$work/client.properties" --topic "$topic" --messages "$N" \
    --group "tls-bench-$RANDOM" --timeout 60000 >"$work/consume-$which.log" 2>&1
  after=$(cpu_ticks "$broker")
  # The data line: start, end, MB, MB/s, messages, msg/s, rebalance ms, fetch ms, fetch MB/s, ...
  local line
  line=$(grep -E '^[0-9]{4}-' "$work/consume-$which.log" | tail -1)
  [ "$(cut -d, -f5 <<<"$line" | tr -d ' ')" = "$N" ] || { echo "$which consume failed: $(tail -3 "$work/consume-$which.log")" >&2; exit 1; }
  echo "consume $(cut -d, -f9 <<<"$line" | tr -d ' ') $(per_gib $((after - before)))"
  local kcat_tls=(-X security.protocol=ssl -X "ssl.ca.location=$work/certs/ca.pem")
  "$KRUN" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
    --create --topic kcat-bench --partitions 16 --replication-factor 1 >/dev/null
  local t0 t1
  before=$(cpu_ticks "$broker"); t0=$(date +%s%N)
  kcat -b "127.0.0.1:$ssl" "${kcat_tls[@]}" -X linger.ms=5 -X acks=1 -P -t kcat-bench -l "$work/lines" \
    2>"$work/kcat-produce-$which.log"
  t1=$(date +%s%N); after=$(cpu_ticks "$broker")
  echo "kcat-produce $(mbps "$t0" "$t1") $(per_gib $((after - before)))"
  before=$(cpu_ticks "$broker"); t0=$(date +%s%N)
  kcat -b "127.0.0.1:$ssl" "${kcat_tls[@]}" -C -t kcat-bench -o beginning -e -q -f '%p\n' \
    2>"$work/kcat-consume-$which.log" | wc -l >"$work/kcat-count"
  t1=$(date +%s%N); after=$(cpu_ticks "$broker")
  [ "$(cat "$work/kcat-count")" = "$N" ] || { echo "$which kcat consume read $(cat "$work/kcat-count") of $N" >&2; exit 1; }
  echo "kcat-consume $(mbps "$t0" "$t1") $(per_gib $((after - before)))"
  if [ "$which" = cairn ]; then kill -TERM "$pid"; wait "$pid" || true; pid=""
  else "$here/../compat-tests/kafka-ref/stop.sh" "$kdir" >/dev/null; kdir=""; fi
}

python3 -c 'import base64, os, sys
with open(sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2])):
        f.write(base64.b64encode(os.urandom(765))[:1023] + b"\n")' "$work/lines" "$N"
[ "$(wc -l <"$work/lines")" = "$N" ] || { echo "could not make $N lines" >&2; exit 1; }
measure cairn >"$work/cairn"; measure kafka >"$work/kafka"
measure kafka >>"$work/kafka"; measure cairn >>"$work/cairn"
col() { grep "^$2 " "$work/$1" | cut -d' ' -f"$3" | median; }
echo "| over TLS, $N x 1 KiB, 16 partitions | Kafka $KAFKA_REF_VERSION | Cairn | Cairn/Kafka |"
echo "|---|---:|---:|---:|"
for phase in produce consume kcat-produce kcat-consume; do
  case $phase in
    produce) what="Java producer (acks=1)" ;; consume) what="Java consumer, from offset 0" ;;
    kcat-produce) what="kcat producer (acks=1)" ;; kcat-consume) what="kcat consumer, from offset 0" ;;
  esac
  for metric in "MB/s:2" "broker CPU-s per GiB:3"; do
    k=$(col kafka "$phase" "${metric#*:}"); c=$(col cairn "$phase" "${metric#*:}")
    echo "| $what, ${metric%:*} | $k | $c | $(awk -v a="$c" -v b="$k" 'BEGIN {printf "%.2f", a / b}')x |"
  done
done
echo "(median of 2 runs each, in the order Cairn, Kafka, Kafka, Cairn; per run: Cairn $(tr '\n' ';' <"$work/cairn") Kafka $(tr '\n' ';' <"$work/kafka"))"
