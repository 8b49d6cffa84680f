#!/usr/bin/env bash
# Usage: bench/acl-cost.sh CAIRN_BINARY [RUNS]
#
# What ACL checks cost Cairn: the same producer load (kafka-producer-perf-test 4.4.0,
# N x 1 KiB records, acks=1, 16 partitions) logged in as alice with SASL PLAIN, once on a
# broker without an authorizer and once with the StandardAuthorizer, alice allowed WRITE
# on the topic among ACLS other ACLs (prefixed and literal, other principals). Reports
# the median MB/s and broker CPU-seconds per GiB of 2 x RUNS runs each (default 3), and the
# ratios. Speed is measured, not asserted: nothing here fails on a number. ACLS=0 keeps
# only alice's own ACLs.
set -euo pipefail
CAIRN=${1:?usage: bench/acl-cost.sh CAIRN_BINARY [RUNS]}
RUNS=${2:-3}
N=${N:-400000}
ACLS=${ACLS:-1000}
here=$(cd "$(dirname "$0")" && pwd)
KRUN="$here/../compat-tests/java/kafka-run.sh"
export KAFKA_VERSION=4.4.0
work=$(mktemp -d /tmp/cairn-acl-bench.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { local s; s="$(cat "/proc/$1/stat")"; s="${s##*) }"; awk '{print $12 + $13}' <<<"$s"; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}'; }

cat >"$work/alice.properties" <<P
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";
P

# One configuration: "none" or "acls". Prints "MB/s cpu-s-per-GiB" per run.
measure() {
  local mode=$1 port sasl
  port=$(free_port); sasl=$(free_port)
  local extra=()
  [ "$mode" = acls ] && extra=(--override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
    --override super.users=User:ANONYMOUS)
  "$CAIRN" --override "listeners=PLAINTEXT://127.0.0.1:$port,SASL_PLAINTEXT://127.0.0.1:$sasl" \
    --override sasl.enabled.mechanisms=PLAIN \
    --override 'listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";' \
    --override "log.dirs=$(mktemp -d "$work/data-$mode.XXXX")" --override metrics.listener=none "${extra[@]}" \
    >"$work/cairn-$mode.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
  if [ "$mode" = acls ]; then
    # ACLS ACLs that do not grant alice anything, then alice's WRITE on the bench topics.
    local topics=()
    for i in $(seq 1 $((ACLS / 2))); do topics+=(--topic "other-$i"); done
    if [ "$ACLS" -gt 1 ]; then
      "$KRUN" org.apache.kafka.tools.AclCommand --bootstrap-server "127.0.0.1:$port" --add \
        --allow-principal User:bob --operation Write "${topics[@]}" >/dev/null
      "$KRUN" org.apache.kafka.tools.AclCommand --bootstrap-server "127.0.0.1:$port" --add \
        --deny-principal User:carol --operation Read --resource-pattern-type prefixed "${topics[@]}" >/dev/null
    fi
    "$KRUN" org.apache.kafka.tools.AclCommand --bootstrap-server "127.0.0.1:$port" --add \
      --allow-principal User:alice --operation Write --operation Create --operation Describe \
      --topic bench- --resource-pattern-type prefixed >/dev/null
    "$KRUN" org.apache.kafka.tools.AclCommand --bootstrap-server "127.0.0.1:$port" --add \
      --allow-principal User:alice --operation IdempotentWrite --cluster >/dev/null
  fi
  for run in $(seq 1 "$RUNS"); do
    local topic="bench-$mode-$run"
    "$KRUN" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
      --create --topic "$topic" --partitions 16 >/dev/null
    local before start end after
    before=$(cpu_ticks "$pid"); start=$(date +%s%N)
    "$KRUN" org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$N" \
      --record-size 1024 --throughput -1 --producer.config "$work/alice.properties" \
      --producer-props "bootstrap.servers=127.0.0.1:$sasl" acks=1 enable.idempotence=false \
      linger.ms=5 batch.size=65536 >"$work/perf-$mode-$run.log" 2>&1
    end=$(date +%s%N); after=$(cpu_ticks "$pid")
    grep -q "^$N records sent" "$work/perf-$mode-$run.log" || { echo "run failed: $(tail -3 "$work/perf-$mode-$run.log")" >&2; exit 1; }
    local mb gib
    mb=$(grep "^$N records sent" "$work/perf-$mode-$run.log" | sed -E 's/.*\(([0-9.]+) MB\/sec\).*/\1/')
    gib=$(awk -v n="$N" 'BEGIN {print n * 1024 / 1073741824}')
    echo "$mb $(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v g="$gib" 'BEGIN {printf "%.2f", t / hz / g}')"
  done
  kill -TERM "$pid"; wait "$pid" || true; pid=""
}

# Whichever broker runs second on this machine measures up to ~20% more CPU per GiB (page
# cache writeback of the first); so each runs first once and second once (A B B A), and
# the medians pool both.
measure none >"$work/none"; measure acls >"$work/acls"
measure acls >>"$work/acls"; measure none >>"$work/none"
mb_none=$(cut -d' ' -f1 "$work/none" | median); cpu_none=$(cut -d' ' -f2 "$work/none" | median)
mb_acls=$(cut -d' ' -f1 "$work/acls" | median); cpu_acls=$(cut -d' ' -f2 "$work/acls" | median)
echo "| Cairn, produce $N x 1 KiB, acks=1, 16 partitions, SASL PLAIN | MB/s | broker CPU-s per GiB |"
echo "|---|---:|---:|"
echo "| no authorizer | $mb_none | $cpu_none |"
echo "| StandardAuthorizer, $ACLS other ACLs | $mb_acls | $cpu_acls |"
echo "| ratio | $(awk -v a="$mb_acls" -v b="$mb_none" 'BEGIN {printf "%.2f", a / b}') | $(awk -v a="$cpu_acls" -v b="$cpu_none" 'BEGIN {printf "%.2f", a / b}') |"
echo "(median of $((2 * RUNS)) runs each, in the order none, acls, acls, none; per run: $(tr '\n' ';' <"$work/none") / $(tr '\n' ';' <"$work/acls"))"
