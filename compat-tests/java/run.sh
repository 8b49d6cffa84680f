#!/usr/bin/env bash
# Black-box checks of a Kafka-compatible broker with the real Apache Kafka 4.x
# command-line tools (jars from Maven Central, see setup.sh / pom.xml).
#   BOOTSTRAP=127.0.0.1:9092 ./run.sh
# Prints "PASS name (Ns)" / "FAIL name: reason (Ns)" per check, then exactly one line
#   java-tools: N passed, M failed
# and exits non-zero if M > 0.
# Environment:
#   BOOTSTRAP      broker to test (default 127.0.0.1:9092)
#   KAFKA_VERSION  the Kafka tools and client to run (default pom.xml's; see lib-dir.sh)
#   TOOL_TIMEOUT   seconds before a single tool run is killed (default 90)
#   KEEP_GOING=1   run the other checks even when kafka-broker-api-versions fails
#                  (by default they are skipped: they would only time out)
#   VP_MESSAGES    messages per VerifiableProducer run (default 3000)
#   KEEP_WORK=1    keep the work directory (tool outputs) even if all pass
#   ONLY="re"      run only the check groups whose name matches the regex
#                  (topics console get_offsets configs delete_records verifiable groups
#                  transactions share streams features);
#                  broker-api-versions always runs
set -uo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BOOTSTRAP="${BOOTSTRAP:-127.0.0.1:9092}"
TOOL_TIMEOUT="${TOOL_TIMEOUT:-90}"
VP_MESSAGES="${VP_MESSAGES:-3000}"
ONLY="${ONLY:-.}"
RUN_ID="$(date +%s)-$$"
T_START=$(date +%s%3N)

source "$DIR/lib-dir.sh"
# The helpers (*.java here) compiled against this Kafka line's jars.
BUILD="$DIR/.build-$KAFKA_VERSION"
"$DIR/setup.sh" || { echo "FAIL setup: setup.sh failed"; echo "java-tools: 0 passed, 1 failed"; exit 1; }
command -v python3 >/dev/null || { echo "FAIL setup: python3 not found"; echo "java-tools: 0 passed, 1 failed"; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/cairn-java-tools.XXXXXX")"
PASSED=0
FAILED=0
# each result line ends with the seconds since the one before (the check's time, roughly)
LAST_S=$SECONDS
took() { TOOK=$((SECONDS - LAST_S)); LAST_S=$SECONDS; }
pass() { took; echo "PASS $1 (${TOOK}s)"; PASSED=$((PASSED + 1)); }
fail() { took; echo "FAIL $1: $2 (${TOOK}s)"; FAILED=$((FAILED + 1)); }
# a check the client line in use cannot make (not a pass: listed apart, with the reason)
SKIPPED=0
skip() { echo "SKIP $1: $2"; SKIPPED=$((SKIPPED + 1)); }
# first lines of a file, flattened to one line, for FAIL reasons
snip() { tr '\n\t' '  ' < "$1" 2>/dev/null | sed 's/  */ /g' | cut -c1-"${2:-240}"; }
now_ms() { date +%s%3N; }

# tool OUTNAME CLASS args...   -> $WORK/OUTNAME.out / .err ; returns the tool's status
tool() {
  local name="$1"; shift
  timeout -k 5 "$TOOL_TIMEOUT" "$DIR/kafka-run.sh" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" </dev/null
}
# like tool, for a class of ours (*.java here, compiled by compile_reader into $BUILD)
helper() {
  local name="$1"; shift
  timeout -k 5 "$TOOL_TIMEOUT" java -Xmx256M -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$DIR/log4j2-quiet.xml" -cp "$KAFKA_LIB/*:$BUILD" \
    "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" </dev/null
}
# like tool, with stdin from a file
tool_in() {
  local name="$1" input="$2"; shift 2
  timeout -k 5 "$TOOL_TIMEOUT" "$DIR/kafka-run.sh" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" <"$input"
}
# the telling part of a stderr file: lines from the first error/exception on, else its tail
snip_err() {
  local f="$1" n
  n=$(grep -niE -m1 'error|exception' "$f" 2>/dev/null | cut -d: -f1)
  if [[ -n "$n" ]]; then tail -n +"$n" "$f" | head -n 4; else tail -n 3 "$f"; fi 2>/dev/null |
    tr '\n\t' '  ' | sed 's/  */ /g' | cut -c1-300
}
# why a tool run failed: exit status + stderr
why() {
  local rc="$1" name="$2"
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then echo "timed out after ${TOOL_TIMEOUT}s; stderr: $(snip_err "$WORK/$name.err")"
  else echo "exit $rc; stderr: $(snip_err "$WORK/$name.err")"; fi
}

TOPICS=org.apache.kafka.tools.TopicCommand
# Newer tools (KIP-1147; 4.4 here, not 4.1) renamed the console options and print a notice on
# stdout for the old names; use the names the tools in use know.
console_help=$("$DIR/kafka-run.sh" org.apache.kafka.tools.consumer.ConsoleConsumer --help 2>&1)
if [[ "$console_help" == *--formatter-property* ]]; then
  FORMATTER_PROP=--formatter-property READER_PROP=--reader-property
  CONSUMER_PROP=--command-property PRODUCER_PROP=--command-property
else
  FORMATTER_PROP=--property READER_PROP=--property
  CONSUMER_PROP=--consumer-property PRODUCER_PROP=--producer-property
fi
# Tools moved between Kafka lines (Scala `kafka.*` classes in the broker jar became
# `org.apache.kafka.tools.*`): use the class the jars in use have. JAR_CLASSES lists them.
JAR_CLASSES="$WORK/jar-classes.txt"
python3 -c 'import glob, sys, zipfile
for j in glob.glob(sys.argv[1] + "/kafka*.jar"):
    for n in zipfile.ZipFile(j).namelist():
        if n.endswith(".class") and "$" not in n:
            print(n[:-6].replace("/", "."))' "$KAFKA_LIB" > "$JAR_CLASSES"
have_class() { grep -qxF "$1" "$JAR_CLASSES"; }
# client_at_least 4.1: whether the Kafka line in use is that one or newer
client_at_least() { [[ "$(printf '%s\n' "$1" "$KAFKA_VERSION" | sort -V | head -1)" == "$1" ]]; }
# first_class A B...: the first of the classes the jars have (the last one otherwise)
first_class() { local c; for c in "$@"; do have_class "$c" && break; done; echo "$c"; }
# ConfigCommand: the broker jar's up to 4.1, a tool in 4.4. BrokerApiVersionsCommand and
# ConsoleProducer: the broker jar's up to 3.9.
CONFIGS=$(first_class org.apache.kafka.tools.ConfigCommand kafka.admin.ConfigCommand)
API_VERSIONS=$(first_class org.apache.kafka.tools.BrokerApiVersionsCommand kafka.admin.BrokerApiVersionsCommand)
PRODUCER=$(first_class org.apache.kafka.tools.ConsoleProducer kafka.tools.ConsoleProducer)
B=(--bootstrap-server "$BOOTSTRAP")

echo "java-tools: Kafka $KAFKA_VERSION tools and client, broker $BOOTSTRAP, run id $RUN_ID, work dir $WORK"

# Fail fast when nothing listens at BOOTSTRAP (the tools would otherwise each
# retry until their timeouts).
first="${BOOTSTRAP%%,*}"
if ! (exec 3<>"/dev/tcp/${first%:*}/${first##*:}") 2>/dev/null; then
  fail broker-reachable "no TCP listener at $first"
  rm -rf "$WORK"
  echo "java-tools: $PASSED passed, $FAILED failed, $SKIPPED not applicable to Kafka $KAFKA_VERSION's client"
  exit 1
fi

# ---------------------------------------------------------------- api versions
check_api_versions() {
  # the tool's own request timeout is 5 s; allow more on a loaded machine
  printf 'request.timeout.ms=30000\n' > "$WORK/apiv.properties"
  local rc; tool apiv $API_VERSIONS "${B[@]}" --command-config "$WORK/apiv.properties"; rc=$?
  if [[ $rc -ne 0 ]]; then
    fail broker-api-versions "$(why $rc apiv)"
    # a broker that cannot serve this tool (ApiVersions + Metadata) would make
    # every other tool run into its timeout too: stop here unless KEEP_GOING=1
    if [[ "${KEEP_GOING:-0}" != 1 ]]; then ABORT=1; fi
    return
  fi
  local o="$WORK/apiv.out" missing=""
  local nb; nb=$(grep -cE '^[^ ]+:[0-9]+ \(id: -?[0-9]+ rack: .*\) -> \($' "$o")
  [[ "$nb" -ge 1 ]] || missing+=" no-broker-line"
  for api in 'Produce\(0\)' 'Fetch\(1\)' 'ListOffsets\(2\)' 'Metadata\(3\)' 'ApiVersions\(18\)'; do
    grep -qE "^[[:space:]]+$api: [0-9]+ to [0-9]+ \[usable: [0-9]+\]" "$o" || missing+=" ${api//\\/}"
  done
  if [[ -z "$missing" ]]; then
    pass "broker-api-versions"
  else
    fail broker-api-versions "missing or unusable:$missing; output: $(snip "$o")"
  fi
}

# ---------------------------------------------------------------- kafka-topics
check_topics() {
  local t="cairn-jt-topics-$RUN_ID" rc
  tool tcreate $TOPICS "${B[@]}" --create --topic "$t" --partitions 3 --replication-factor 1 --config retention.ms=3600000; rc=$?
  if [[ $rc -eq 0 ]] && grep -qx "Created topic $t." "$WORK/tcreate.out"; then
    pass topics-create
  else
    fail topics-create "$(why $rc tcreate) stdout: $(snip "$WORK/tcreate.out")"
    return
  fi

  tool tlist $TOPICS "${B[@]}" --list; rc=$?
  if [[ $rc -eq 0 ]] && grep -qxF "$t" "$WORK/tlist.out"; then pass topics-list
  else fail topics-list "$t not listed ($(why $rc tlist)); stdout: $(snip "$WORK/tlist.out")"; fi

  # describe: header line with count + RF + the config, then one line per partition
  describe_ok() { # $1 = outname, $2 = partition count
    local o="$WORK/$1.out" n="$2" p
    grep -qE "^Topic: $t[[:space:]]+TopicId: [A-Za-z0-9_-]{22}[[:space:]]+PartitionCount: $n[[:space:]]+ReplicationFactor: 1[[:space:]]+Configs: .*retention\.ms=3600000" "$o" || return 1
    [[ $(grep -cE "^[[:space:]]+Topic: $t[[:space:]]+Partition: [0-9]+[[:space:]]+Leader: [0-9]+[[:space:]]+Replicas: [0-9]+[[:space:]]+Isr: [0-9]+" "$o") -eq "$n" ]] || return 1
    for ((p = 0; p < n; p++)); do grep -qE "^[[:space:]]+Topic: $t[[:space:]]+Partition: $p[[:space:]]" "$o" || return 1; done
  }
  tool tdesc $TOPICS "${B[@]}" --describe --topic "$t"; rc=$?
  if [[ $rc -eq 0 ]] && describe_ok tdesc 3; then pass topics-describe
  else fail topics-describe "expected 3 partitions with Leader/Replicas/Isr and retention.ms=3600000 ($(why $rc tdesc)); stdout: $(snip "$WORK/tdesc.out" 400)"; fi

  tool talter $TOPICS "${B[@]}" --alter --topic "$t" --partitions 5; rc=$?
  if [[ $rc -ne 0 ]]; then
    fail topics-alter-partitions "$(why $rc talter)"
  else
    tool tdesc5 $TOPICS "${B[@]}" --describe --topic "$t"; rc=$?
    if [[ $rc -eq 0 ]] && describe_ok tdesc5 5; then pass topics-alter-partitions
    else fail topics-alter-partitions "describe after --partitions 5 ($(why $rc tdesc5)); stdout: $(snip "$WORK/tdesc5.out" 400)"; fi
  fi

  tool tdel $TOPICS "${B[@]}" --delete --topic "$t"; rc=$?
  if [[ $rc -ne 0 ]]; then fail topics-delete "$(why $rc tdel)"; return; fi
  local i gone=0
  for i in 1 2 3 4; do   # deletion may be asynchronous
    tool tlist2 $TOPICS "${B[@]}" --list; rc=$?
    if [[ $rc -eq 0 ]] && ! grep -qxF "$t" "$WORK/tlist2.out"; then gone=1; break; fi
    sleep 1
  done
  if [[ $gone -eq 1 ]]; then pass topics-delete
  else fail topics-delete "$t still listed after --delete ($(why $rc tlist2))"; fi
}

# ------------------------------------- console producer / consumer (+ reused topic)
CT="cairn-jt-console-$RUN_ID"   # 2 partitions; also used by get-offsets, configs, delete-records
declare -A CT_COUNT              # partition -> number of records produced
check_console() {
  local rc p
  tool ccreate $TOPICS "${B[@]}" --create --topic "$CT" --partitions 2 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail console-producer "could not create $CT: $(why $rc ccreate)"; return; fi
  while read -r p n; do CT_COUNT[$p]=$n; done < <(python3 "$DIR/helpers.py" console-gen 2 "$WORK")
  local t0; t0=$(now_ms)
  tool_in cprod "$WORK/console.in" $PRODUCER "${B[@]}" --topic "$CT" \
    "$PRODUCER_PROP" acks=all \
    "$READER_PROP" parse.key=true "$READER_PROP" parse.headers=true "$READER_PROP" null.marker='<NULL>'; rc=$?
  local t1; t1=$(now_ms)
  # the producer logs send failures at ERROR (log4j2-quiet.xml pattern "[time] LEVEL ...")
  if [[ $rc -eq 0 ]] && ! grep -qE '^\[[^]]*\] ERROR |Exception' "$WORK/cprod.err"; then pass console-producer
  else fail console-producer "$(why $rc cprod)"; fi

  local bad=""
  for p in 0 1; do
    tool "ccons$p" org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$CT" \
      --partition "$p" --offset earliest --max-messages "${CT_COUNT[$p]}" --timeout-ms 20000 \
      "$FORMATTER_PROP" print.timestamp=true "$FORMATTER_PROP" print.partition=true "$FORMATTER_PROP" print.offset=true \
      "$FORMATTER_PROP" print.headers=true "$FORMATTER_PROP" print.key=true "$FORMATTER_PROP" null.literal='<NULL>'; rc=$?
    if [[ $rc -ne 0 ]]; then bad+="partition $p: $(why $rc "ccons$p"); "; continue; fi
    local r
    if ! r=$(python3 "$DIR/helpers.py" console-check "$WORK/expected.$p" "$WORK/ccons$p.out" "$((t0 - 5000))" "$((t1 + 5000))"); then
      bad+="partition $p: $r (stderr: $(snip "$WORK/ccons$p.err" 160)); "
    fi
  done
  if [[ -z "$bad" ]]; then pass console-consumer
  else fail console-consumer "$bad"; fi
}

# ---------------------------------------------------------------- get-offsets
# GetOffsetShell prints topic:partition:offset
check_get_offsets() {
  local rc
  tool gol org.apache.kafka.tools.GetOffsetShell "${B[@]}" --topic "$CT"; rc=$?
  local want; want=$(printf '%s:0:%s\n%s:1:%s\n' "$CT" "${CT_COUNT[0]:-?}" "$CT" "${CT_COUNT[1]:-?}")
  if [[ $rc -eq 0 ]] && [[ "$(sort "$WORK/gol.out")" == "$want" ]]; then pass get-offsets-latest
  else fail get-offsets-latest "want [$(echo $want)] got [$(snip "$WORK/gol.out")] ($(why $rc gol))"; fi

  tool goe org.apache.kafka.tools.GetOffsetShell "${B[@]}" --topic "$CT" --time -2; rc=$?
  want=$(printf '%s:0:0\n%s:1:0\n' "$CT" "$CT")
  if [[ $rc -eq 0 ]] && [[ "$(sort "$WORK/goe.out")" == "$want" ]]; then pass get-offsets-earliest
  else fail get-offsets-earliest "want [$(echo $want)] got [$(snip "$WORK/goe.out")] ($(why $rc goe))"; fi
}

# ---------------------------------------------------------------- kafka-configs
check_configs() {
  local rc CFG=$CONFIGS E=(--entity-type topics --entity-name "$CT")
  tool cfg0 $CFG "${B[@]}" "${E[@]}" --describe; rc=$?
  if [[ $rc -eq 0 ]] && grep -qx "Dynamic configs for topic $CT are:" "$WORK/cfg0.out" \
      && ! grep -qE '^  (retention\.ms|max\.message\.bytes)=' "$WORK/cfg0.out"; then
    pass configs-describe
  else
    fail configs-describe "expected a header and no retention.ms/max.message.bytes override ($(why $rc cfg0)); stdout: $(snip "$WORK/cfg0.out")"
  fi

  tool cfga $CFG "${B[@]}" "${E[@]}" --alter --add-config retention.ms=7654321,max.message.bytes=345678; rc=$?
  if [[ $rc -ne 0 ]] || ! grep -qx "Completed updating config for topic $CT." "$WORK/cfga.out"; then
    fail configs-alter "$(why $rc cfga) stdout: $(snip "$WORK/cfga.out")"
  else
    tool cfg1 $CFG "${B[@]}" "${E[@]}" --describe; rc=$?
    if [[ $rc -eq 0 ]] && grep -qE '^  retention\.ms=7654321 sensitive=false' "$WORK/cfg1.out" \
        && grep -qE '^  max\.message\.bytes=345678 sensitive=false' "$WORK/cfg1.out"; then
      pass configs-alter
    else
      fail configs-alter "describe does not show retention.ms=7654321 and max.message.bytes=345678 ($(why $rc cfg1)); stdout: $(snip "$WORK/cfg1.out" 400)"
    fi
  fi

  tool cfgd $CFG "${B[@]}" "${E[@]}" --alter --delete-config retention.ms; rc=$?
  if [[ $rc -ne 0 ]]; then fail configs-delete "$(why $rc cfgd)"; return; fi
  tool cfg2 $CFG "${B[@]}" "${E[@]}" --describe --all; rc=$?
  local o="$WORK/cfg2.out"
  if [[ $rc -eq 0 ]] && grep -qx "All configs for topic $CT are:" "$o" \
      && grep -qE '^  retention\.ms=[0-9-]+ ' "$o" && ! grep -qE '^  retention\.ms=7654321 ' "$o" \
      && ! grep -qE '^  retention\.ms=.*DYNAMIC_TOPIC_CONFIG' "$o" \
      && grep -qE '^  max\.message\.bytes=345678 ' "$o"; then
    pass configs-delete
  else
    fail configs-delete "after --delete-config retention.ms, --describe --all should show retention.ms back at its default (no dynamic synonym) and max.message.bytes=345678 kept ($(why $rc cfg2)); retention/max lines: $(grep -E '^  (retention\.ms|max\.message\.bytes)=' "$o" | tr '\n' ' ' | cut -c1-300)"
  fi
}

# kafka-configs --entity-type brokers: a cluster-wide dynamic default (the topics' default
# min.cleanable.dirty.ratio) is set, shown for the cluster and under the topic's config with
# its DYNAMIC_DEFAULT_BROKER_CONFIG synonym, and deleted; a static key is refused.
check_broker_configs() {
  local rc CFG=$CONFIGS E=(--entity-type brokers --entity-default) K=log.cleaner.min.cleanable.ratio
  tool bcfga $CFG "${B[@]}" "${E[@]}" --alter --add-config "$K=0.3"; rc=$?
  if [[ $rc -ne 0 ]] || ! grep -qx "Completed updating default config for brokers in the cluster." "$WORK/bcfga.out"; then
    fail configs-brokers "--entity-default --alter: $(why $rc bcfga) stdout: $(snip "$WORK/bcfga.out")"; return
  fi
  tool bcfg1 $CFG "${B[@]}" "${E[@]}" --describe; rc=$?
  tool bcfgt $CFG "${B[@]}" --entity-type topics --entity-name "$CT" --describe --all
  if [[ $rc -ne 0 ]] || ! grep -qF "  $K=0.3 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:$K=0.3}" "$WORK/bcfg1.out"; then
    fail configs-brokers "--entity-default --describe does not show $K=0.3 ($(why $rc bcfg1)); stdout: $(snip "$WORK/bcfg1.out" 400)"
  elif ! grep -qE "^  min\.cleanable\.dirty\.ratio=0\.3 sensitive=false synonyms=\{DYNAMIC_DEFAULT_BROKER_CONFIG:$K=0\.3" "$WORK/bcfgt.out"; then
    fail configs-brokers "topic $CT does not take the cluster's default: $(grep -E '^  min\.cleanable' "$WORK/bcfgt.out" | cut -c1-300)"
  else
    tool bcfgx $CFG "${B[@]}" "${E[@]}" --alter --add-config num.partitions=3; rc=$?
    if [[ $rc -eq 0 ]] || ! grep -q "Cannot update these configs dynamically" "$WORK/bcfgx.out" "$WORK/bcfgx.err" 2>/dev/null; then
      fail configs-brokers "num.partitions should be refused as static: $(why $rc bcfgx) $(snip "$WORK/bcfgx.err")"
    else
      tool bcfgd $CFG "${B[@]}" "${E[@]}" --alter --delete-config "$K"; rc=$?
      tool bcfg2 $CFG "${B[@]}" "${E[@]}" --describe
      if [[ $rc -eq 0 ]] && ! grep -qF "$K=" "$WORK/bcfg2.out"; then
        pass configs-brokers
      else
        fail configs-brokers "--delete-config $K: $(why $rc bcfgd); describe after: $(snip "$WORK/bcfg2.out")"
      fi
    fi
  fi
  # Never leave the default behind for the checks that follow.
  [[ -f "$WORK/bcfgd.out" ]] || tool bcfgd $CFG "${B[@]}" "${E[@]}" --alter --delete-config "$K"
}

# ---------------------------------------------------------------- configs-users
# SCRAM credentials (KIP-554): kafka-configs --entity-type users adds one per mechanism,
# describes them (mechanisms and iterations only, with DescribeClientQuotas beside), deletes
# one, and a second delete of it is refused as not found.
check_user_configs() {
  local rc CFG=$CONFIGS U="scram-user-$RUN_ID"
  local E=(--entity-type users --entity-name "$U")
  tool ucfg1 $CFG "${B[@]}" "${E[@]}" --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'; rc=$?
  [[ $rc -eq 0 ]] && { tool ucfg2 $CFG "${B[@]}" "${E[@]}" --alter --add-config 'SCRAM-SHA-512=[password=alice-secret]'; rc=$?; }
  if [[ $rc -ne 0 ]]; then
    fail configs-users "--add-config SCRAM: $(why $rc ucfg2) $(snip_err "$WORK/ucfg1.err")"; return
  fi
  tool ucfgd $CFG "${B[@]}" "${E[@]}" --describe; rc=$?
  # The tool lists the mechanisms in the order of its map: Apache Kafka 4.1.1's output has
  # SCRAM-SHA-512 first, so either order is right.
  local both="SCRAM credential configs for user-principal '$U' are "
  if [[ $rc -ne 0 ]] || ! grep -qxF -e "${both}SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096" \
      -e "${both}SCRAM-SHA-512=iterations=4096, SCRAM-SHA-256=iterations=8192" "$WORK/ucfgd.out"; then
    fail configs-users "--describe: $(why $rc ucfgd) stdout: $(snip "$WORK/ucfgd.out")"; return
  fi
  tool ucfgr $CFG "${B[@]}" "${E[@]}" --alter --delete-config SCRAM-SHA-512; rc=$?
  tool ucfgd2 $CFG "${B[@]}" "${E[@]}" --describe
  tool ucfgr2 $CFG "${B[@]}" "${E[@]}" --alter --delete-config SCRAM-SHA-512
  if [[ $rc -ne 0 ]] || ! grep -qxF "SCRAM credential configs for user-principal '$U' are SCRAM-SHA-256=iterations=8192" "$WORK/ucfgd2.out"; then
    fail configs-users "--delete-config SCRAM-SHA-512: $(why $rc ucfgr); describe after: $(snip "$WORK/ucfgd2.out")"
  elif ! grep -q "ResourceNotFoundException" "$WORK/ucfgr2.out" "$WORK/ucfgr2.err"; then
    fail configs-users "a second delete was not refused as not found: $(snip "$WORK/ucfgr2.out") $(snip_err "$WORK/ucfgr2.err")"
  else
    pass configs-users
  fi
}

# ---------------------------------------------------------------- configs-quotas
# Client quotas (KIP-546): kafka-configs --entity-type clients sets two rates on a client id
# and one on the default client id, describes each (the values are doubles), deletes one
# rate, and the default's is deleted again so that no quota outlives the check.
check_quota_configs() {
  local rc CFG=$CONFIGS C="quota-client-$RUN_ID"
  local E=(--entity-type clients --entity-name "$C") D=(--entity-type clients --entity-default)
  tool qcfga $CFG "${B[@]}" "${E[@]}" --alter --add-config producer_byte_rate=1024,consumer_byte_rate=2048; rc=$?
  [[ $rc -eq 0 ]] && { tool qcfgb $CFG "${B[@]}" "${D[@]}" --alter --add-config request_percentage=12.5; rc=$?; }
  if [[ $rc -ne 0 ]] || ! grep -q "Completed updating" "$WORK/qcfga.out"; then
    fail configs-quotas "--add-config: $(why $rc qcfgb) $(snip "$WORK/qcfga.out") $(snip_err "$WORK/qcfga.err")"; return
  fi
  tool qcfgd $CFG "${B[@]}" "${E[@]}" --describe; rc=$?
  tool qcfgdd $CFG "${B[@]}" "${D[@]}" --describe
  local line; line=$(grep -F "Quota configs for client-id '$C' are " "$WORK/qcfgd.out")
  if [[ $rc -ne 0 || $line != *producer_byte_rate=1024.0* || $line != *consumer_byte_rate=2048.0* ]]; then
    fail configs-quotas "--describe: $(why $rc qcfgd) stdout: $(snip "$WORK/qcfgd.out")"
  elif ! grep -qxF "Quota configs for the default client-id are request_percentage=12.5" "$WORK/qcfgdd.out"; then
    fail configs-quotas "--entity-default --describe: $(snip "$WORK/qcfgdd.out") $(snip_err "$WORK/qcfgdd.err")"
  else
    tool qcfgr $CFG "${B[@]}" "${E[@]}" --alter --delete-config producer_byte_rate; rc=$?
    tool qcfgd2 $CFG "${B[@]}" "${E[@]}" --describe
    if [[ $rc -eq 0 ]] && grep -qxF "Quota configs for client-id '$C' are consumer_byte_rate=2048.0" "$WORK/qcfgd2.out"; then
      pass configs-quotas
    else
      fail configs-quotas "--delete-config producer_byte_rate: $(why $rc qcfgr); describe after: $(snip "$WORK/qcfgd2.out")"
    fi
  fi
  tool qcfgx $CFG "${B[@]}" "${D[@]}" --alter --delete-config request_percentage
}

# ---------------------------------------------------------------- quota-mutations
# KIP-599: with controller_mutation_rate=0.01 (a bucket of 0.11 partitions, refilled one
# partition per 100 s) on a client id, kafka-topics creates a topic of two partitions and
# then has the next refused: the admin client turns THROTTLING_QUOTA_EXCEEDED into
# ThrottlingQuotaExceededException, and kafka-topics does not retry on it.
check_quota_mutations() {
  local rc C="quota-mutations-$RUN_ID" t="cairn-jt-mutations-$RUN_ID"
  tool qma $CONFIGS "${B[@]}" --entity-type clients --entity-name "$C" --alter \
    --add-config controller_mutation_rate=0.01; rc=$?
  if [[ $rc -ne 0 ]]; then fail quota-mutations "setup: $(why $rc qma) $(snip_err "$WORK/qma.err")"; return; fi
  echo "client.id=$C" > "$WORK/qm.properties"
  tool qm1 $TOPICS "${B[@]}" --command-config "$WORK/qm.properties" --create --topic "$t-1" \
    --partitions 2 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]] || ! grep -q "Created topic $t-1" "$WORK/qm1.out"; then
    fail quota-mutations "first topic: $(why $rc qm1) $(snip "$WORK/qm1.out") $(snip_err "$WORK/qm1.err")"; return
  fi
  tool qm2 $TOPICS "${B[@]}" --command-config "$WORK/qm.properties" --create --topic "$t-2" \
    --partitions 1 --replication-factor 1; rc=$?
  tool qm3 $TOPICS "${B[@]}" --list
  # 4.x names the exception; 3.x prints only its message.
  if [[ $rc -eq 0 ]] || ! grep -qE "ThrottlingQuotaExceededException|command : The throttling quota has been exceeded" \
      "$WORK/qm2.out" "$WORK/qm2.err"; then
    fail quota-mutations "second topic was not refused: $(why $rc qm2) $(snip "$WORK/qm2.out") $(snip_err "$WORK/qm2.err")"
  elif grep -qx "$t-2" "$WORK/qm3.out"; then
    fail quota-mutations "the refused topic exists: $(snip "$WORK/qm3.out")"
  else
    pass quota-mutations
  fi
}

# ---------------------------------------------------------------- quota-requests
# request_percentage (KIP-124): with 0.001 % of a thread on a client id (0.1 ms of request
# handling over the 10 s a new client is measured on), ProducerPerformance still sends every
# record, and its own metrics show the throttles the broker put in the produce responses.
check_quota_requests() {
  local rc C="quota-requests-$RUN_ID" t="cairn-jt-requests-$RUN_ID" n=40
  tool qrc $TOPICS "${B[@]}" --create --topic "$t" --partitions 1 --replication-factor 1; rc=$?
  [[ $rc -eq 0 ]] && { tool qra $CONFIGS "${B[@]}" --entity-type clients --entity-name "$C" --alter \
    --add-config request_percentage=0.001; rc=$?; }
  if [[ $rc -ne 0 ]]; then fail quota-requests "setup: $(why $rc qra) $(snip_err "$WORK/qra.err")"; return; fi
  tool qrp org.apache.kafka.tools.ProducerPerformance --topic "$t" --num-records $n --record-size 1024 \
    --throughput -1 --print-metrics --producer-props "bootstrap.servers=$BOOTSTRAP" "client.id=$C" acks=1 \
    batch.size=4096; rc=$?
  local pt; pt=$(grep -oE "produce-throttle-time-max:\{client-id=$C\}[[:space:]]*: [0-9.]+" "$WORK/qrp.out" | awk '{print $NF}')
  if [[ $rc -ne 0 ]] || ! grep -q "^$n records sent" "$WORK/qrp.out"; then
    fail quota-requests "producer: $(why $rc qrp) stdout: $(snip "$WORK/qrp.out")"
  elif ! awk -v v="${pt:-0}" 'BEGIN {exit !(v > 0 && v <= 1000)}'; then
    fail quota-requests "want a throttle above 0 and at most 1000 ms (produce-throttle-time-max ${pt:-absent})"
  else
    pass quota-requests
  fi
}

# ---------------------------------------------------------------- quota-throttle
# Byte-rate quotas hold real clients back (KIP-219): with producer_byte_rate and
# consumer_byte_rate of 128 KiB/s on a client id (10 s of which a new client may send at
# once), ProducerPerformance sends 1500 KiB and ConsumerPerformance reads them back; each
# must finish with every record and report a throttle above 0 in its own metrics.
check_quota_throttle() {
  local rc C="quota-throttled-$RUN_ID" t="cairn-jt-quota-$RUN_ID" n=1500
  tool qtc $TOPICS "${B[@]}" --create --topic "$t" --partitions 1 --replication-factor 1; rc=$?
  [[ $rc -eq 0 ]] && { tool qta $CONFIGS "${B[@]}" --entity-type clients --entity-name "$C" --alter \
    --add-config producer_byte_rate=131072,consumer_byte_rate=131072; rc=$?; }
  if [[ $rc -ne 0 ]]; then fail quota-throttle "setup: $(why $rc qta) $(snip_err "$WORK/qta.err")"; return; fi
  tool qtp org.apache.kafka.tools.ProducerPerformance --topic "$t" --num-records $n --record-size 1024 \
    --throughput -1 --print-metrics --producer-props "bootstrap.servers=$BOOTSTRAP" "client.id=$C" acks=1; rc=$?
  local pt; pt=$(grep -oE "produce-throttle-time-max:\{client-id=$C\}[[:space:]]*: [0-9.]+" "$WORK/qtp.out" | awk '{print $NF}')
  if [[ $rc -ne 0 ]] || ! grep -q "^$n records sent" "$WORK/qtp.out"; then
    fail quota-throttle "producer: $(why $rc qtp) stdout: $(snip "$WORK/qtp.out")"; return
  elif ! awk -v v="${pt:-0}" 'BEGIN {exit !(v > 0)}'; then
    fail quota-throttle "the producer saw no throttle (produce-throttle-time-max ${pt:-absent})"; return
  fi
  echo "client.id=$C" > "$WORK/qt-consumer.properties"
  tool qtr "$(first_class org.apache.kafka.tools.ConsumerPerformance kafka.tools.ConsumerPerformance)" "${B[@]}" \
    --topic "$t" --messages $n --print-metrics --timeout 30000 --consumer.config "$WORK/qt-consumer.properties"; rc=$?
  local ft; ft=$(grep -oE "fetch-throttle-time-max:\{client-id=$C\}[[:space:]]*: [0-9.]+" "$WORK/qtr.out" | awk '{print $NF}')
  local got; got=$(grep -vE '^(start|[a-z-]+:)' "$WORK/qtr.out" | grep -E '^[0-9]' | head -1 | cut -d, -f5 | tr -d ' ')
  if [[ $rc -ne 0 || "$got" != "$n" ]]; then
    fail quota-throttle "consumer: want $n records, got ${got:-none} ($(why $rc qtr)) $(snip "$WORK/qtr.out")"
  elif ! awk -v v="${ft:-0}" 'BEGIN {exit !(v > 0)}'; then
    fail quota-throttle "the consumer saw no throttle (fetch-throttle-time-max ${ft:-absent})"
  else
    pass quota-throttle
  fi
}

# ---------------------------------------------------------------- delete-records
check_delete_records() {
  local rc to=3
  if [[ "${CT_COUNT[0]:-0}" -le $to ]]; then fail delete-records "console topic has too few records"; return; fi
  printf '{"partitions":[{"topic":"%s","partition":0,"offset":%d}],"version":1}\n' "$CT" "$to" > "$WORK/delete-records.json"
  tool dr org.apache.kafka.tools.DeleteRecordsCommand "${B[@]}" --offset-json-file "$WORK/delete-records.json"; rc=$?
  if [[ $rc -ne 0 ]] || ! grep -qE "partition: $CT-0[[:space:]]+low_watermark: $to\$" "$WORK/dr.out"; then
    fail delete-records "$(why $rc dr) stdout: $(snip "$WORK/dr.out")"
    return
  fi
  tool dre org.apache.kafka.tools.GetOffsetShell "${B[@]}" --topic "$CT" --time -2; rc=$?
  local want; want=$(printf '%s:0:%d\n%s:1:0\n' "$CT" "$to" "$CT")
  if [[ $rc -eq 0 ]] && [[ "$(sort "$WORK/dre.out")" == "$want" ]]; then pass delete-records
  else fail delete-records "earliest offsets after delete want [$(echo $want)] got [$(snip "$WORK/dre.out")] ($(why $rc dre))"; fi
}

# ---------------------------------------------------------------- compaction
# A cleanup.policy=compact topic fed by four console-producer runs (a second or more apart,
# so segment.ms=100 puts each in a segment of its own and only the last stays active): once
# the broker's cleaner has run, the console consumer reads exactly the latest value of each
# key, at the offset it was written to, and k9's tombstone at most.
check_compaction() {
  local t="cairn-jt-compact-$RUN_ID" rc round k
  tool kcreate $TOPICS "${B[@]}" --create --topic "$t" --partitions 1 --replication-factor 1 \
    --config cleanup.policy=compact --config segment.ms=100 \
    --config min.cleanable.dirty.ratio=0.01 --config delete.retention.ms=0; rc=$?
  if [[ $rc -ne 0 ]]; then fail compaction "could not create $t: $(why $rc kcreate)"; return; fi
  for round in 1 2 3; do
    for k in 0 1 2 3 4 5 6 7 8 9; do
      if [[ $round -eq 3 && $k -eq 9 ]]; then echo "k9	<NULL>"; else echo "k$k	r$round-k$k"; fi
    done > "$WORK/kin.$round"
  done
  printf 'last\tv\n' > "$WORK/kin.4"
  for round in 1 2 3 4; do
    tool_in "kprod$round" "$WORK/kin.$round" $PRODUCER "${B[@]}" --topic "$t" "$PRODUCER_PROP" acks=all \
      "$READER_PROP" parse.key=true "$READER_PROP" null.marker='<NULL>'; rc=$?
    if [[ $rc -ne 0 ]]; then fail compaction "producer run $round: $(why $rc "kprod$round")"; return; fi
    sleep 1
  done
  # The cleaner looks every log.cleaner.backoff.ms (15 s by default; 1 s on the compat
  # brokers, run-all.sh and kafka-ref/start.sh). The reads assign the one partition (no
  # group to join), so 2 s without a record is the end.
  local tries r=""
  for tries in $(seq 1 12); do
    tool kcons org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$t" \
      --partition 0 --offset earliest --timeout-ms 2000 "$FORMATTER_PROP" print.key=true "$FORMATTER_PROP" print.offset=true \
      "$FORMATTER_PROP" null.literal='<NULL>'
    if r=$(python3 - "$WORK/kcons.out" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
# Offset:N, key, value (console consumer: "Offset:3\tk3\tr1-k3")
got = [(int(r[0].split(":")[1]), r[1], r[2]) for r in rows if len(r) >= 3]
want = [(20 + k, f"k{k}", f"r3-k{k}") for k in range(9)] + [(30, "last", "v")]
rest = [g for g in got if g[1] != "k9"]
k9 = [g for g in got if g[1] == "k9"]
if rest == want and k9 in ([], [(29, "k9", "<NULL>")]):
    sys.exit(0)
print(f"{len(got)} records, first {got[:3]}")
sys.exit(1)
PY
    ); then pass compaction; return; fi
    sleep 2
  done
  fail compaction "not the latest value per key after a minute and more: $r"
}

# Reads topic $1 from the beginning with isolation level $2 (output in $WORK/$3.out) until
# its (offset, key, value) rows equal the JSON list $4. The cleaner looks every
# log.cleaner.backoff.ms (15 s by default; 1 s on the compat brokers): a minute at most.
await_compacted() {
  local t="$1" iso="$2" name="$3" want="$4" tries
  for tries in $(seq 1 12); do
    tool "$name" org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$t" \
      --partition 0 --offset earliest --timeout-ms 2000 --isolation-level "$iso" \
      "$FORMATTER_PROP" print.key=true "$FORMATTER_PROP" print.offset=true
    if python3 - "$WORK/$name.out" "$want" <<'PY'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
got = [[int(r[0].split(":")[1]), r[1], r[2]] for r in rows if len(r) >= 3]
sys.exit(0 if got == json.loads(sys.argv[2]) else 1)
PY
    then return 0; fi
    sleep 2
  done
  return 1
}

# A compacted topic written in transactions (TxnWrites.java), one producer:
#   0-9 k0..k9 aborted (marker 10), 11-15 k0..k4 committed (16),
#   17-21 k5..k9 aborted (22), 23-27 k5..k9 committed (28), then a plain record at 29.
# Cleaning removes the aborted records: a read_uncommitted consumer then reads only the
# committed values. One more record lets later passes remove the emptied abort markers;
# a read_committed consumer must still read every committed record, none taken for
# aborted.
check_compaction_txn() {
  local t="cairn-jt-compact-txn-$RUN_ID" rc k a1=() c1=() a2=() c2=() want
  compile_reader || { fail compaction-txn "javac failed: $(snip "$WORK/javac.err")"; return; }
  tool ctcreate $TOPICS "${B[@]}" --create --topic "$t" --partitions 1 --replication-factor 1 \
    --config cleanup.policy=compact --config segment.ms=100 \
    --config min.cleanable.dirty.ratio=0.01 --config delete.retention.ms=0; rc=$?
  if [[ $rc -ne 0 ]]; then fail compaction-txn "could not create $t: $(why $rc ctcreate)"; return; fi
  for k in 0 1 2 3 4 5 6 7 8 9; do a1+=("k$k=a1-k$k"); done
  for k in 0 1 2 3 4; do c1+=("k$k=c1-k$k"); done
  for k in 5 6 7 8 9; do a2+=("k$k=a2-k$k"); c2+=("k$k=c2-k$k"); done
  helper cttxn TxnWrites "$BOOTSTRAP" "$t" "cairn-jt-compact-txn-$RUN_ID" \
    "abort:$(IFS=,; echo "${a1[*]}")" "commit:$(IFS=,; echo "${c1[*]}")" \
    "abort:$(IFS=,; echo "${a2[*]}")" "commit:$(IFS=,; echo "${c2[*]}")"; rc=$?
  if [[ $rc -ne 0 ]]; then fail compaction-txn "transactions: $(why $rc cttxn)"; return; fi
  sleep 1
  printf 'last\tv\n' > "$WORK/ctlast.txt"
  tool_in ctprod "$WORK/ctlast.txt" $PRODUCER "${B[@]}" --topic "$t" "$PRODUCER_PROP" acks=all \
    "$READER_PROP" parse.key=true; rc=$?
  if [[ $rc -ne 0 ]]; then fail compaction-txn "plain record: $(why $rc ctprod)"; return; fi
  want=$(python3 -c 'import json; print(json.dumps(
    [[11 + k, f"k{k}", f"c1-k{k}"] for k in range(5)] +
    [[18 + k, f"k{k}", f"c2-k{k}"] for k in range(5, 10)] + [[29, "last", "v"]]))')
  if ! await_compacted "$t" read_uncommitted ctread "$want"; then
    fail compaction-txn "aborted records still read after a minute and more: $(snip "$WORK/ctread.out")"; return
  fi
  sleep 1
  printf 'last2\tv\n' > "$WORK/ctlast2.txt"
  tool_in ctprod2 "$WORK/ctlast2.txt" $PRODUCER "${B[@]}" --topic "$t" "$PRODUCER_PROP" acks=all \
    "$READER_PROP" parse.key=true
  want=$(python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1]) + [[30, "last2", "v"]]))' "$want")
  sleep 3  # a cleaner look or two (1 s apart), so the markers' passes run before the read
  if await_compacted "$t" read_committed ctreadc "$want"; then
    pass compaction-txn
  else
    fail compaction-txn "read_committed after cleaning: $(snip "$WORK/ctreadc.out") $(snip_err "$WORK/ctreadc.err")"
  fi
}

# ---------------------------------------------------------------- verifiable producer
# compiles the helpers (*.java here) into $BUILD once per change of them or of the jars
compile_reader() {
  local build="$BUILD" sum
  sum=$(cat "$DIR"/*.java "$KAFKA_LIB/.stamp" | sha256sum | cut -d' ' -f1)
  if [[ -f "$build/DumpPartitions.class" && "$(cat "$build/.stamp" 2>/dev/null)" == "$sum" ]]; then return 0; fi
  local tmp="$BUILD.tmp.$$" helpers=() f
  for f in "$DIR"/*.java; do
    # SubscriptionPattern came with the 4.0 client
    [[ "$f" == */RegexConsumer.java ]] && ! have_class org.apache.kafka.clients.consumer.SubscriptionPattern && continue
    # share groups' production API came with the 4.2 client
    [[ "$f" == */ShareConsumers.java || "$f" == */ShareTxn.java || "$f" == */ShareLag.java || "$f" == */ShareLeaderMove.java ]] && ! client_at_least 4.2 && continue
    # RENEW acknowledgements and share.acquire.mode came with the 4.4 client
    [[ "$f" == */ShareRenew.java ]] && ! client_at_least 4.4 && continue
    helpers+=("$f")
  done
  rm -rf "$tmp" && mkdir -p "$tmp" &&
    javac -nowarn -cp "$KAFKA_LIB/*" -d "$tmp" "${helpers[@]}" 2>"$WORK/javac.err" &&
    echo "$sum" > "$tmp/.stamp" && rm -rf "$build" && mv "$tmp" "$build"
  local rc=$?
  rm -rf "$tmp"
  return $rc
}
check_verifiable() {
  local vt="cairn-jt-verifiable-$RUN_ID" rc mode
  local modes=(acks-all idempotent acks1)
  # VerifiableProducer's --value-prefix is an integer: values are "<prefix>.<n>"
  declare -A prefix=([acks-all]=1 [idempotent]=2 [acks1]=3)
  tool vcreate $TOPICS "${B[@]}" --create --topic "$vt" --partitions 3 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then
    for mode in "${modes[@]}"; do fail "verifiable-producer-$mode" "could not create $vt: $(why $rc vcreate)"; done
    return
  fi
  printf 'enable.idempotence=false\nretries=5\nmax.in.flight.requests.per.connection=5\nlinger.ms=5\n' > "$WORK/acks-all.properties"
  # VerifiableProducer sets retries=0, which idempotence rejects: restore the client default
  printf 'enable.idempotence=true\nretries=2147483647\nlinger.ms=5\n' > "$WORK/idempotent.properties"
  printf 'linger.ms=5\n' > "$WORK/acks1.properties"   # acks=1: idempotence is off by default
  declare -A acks=([acks-all]=-1 [idempotent]=-1 [acks1]=1)
  declare -A vrc
  for mode in "${modes[@]}"; do
    # one JSON event per line; keys "0".."96" spread the records over all partitions
    tool "vp-$mode" org.apache.kafka.tools.VerifiableProducer "${B[@]}" --topic "$vt" \
      --max-messages "$VP_MESSAGES" --throughput -1 --acks "${acks[$mode]}" \
      --repeating-keys 97 --value-prefix "${prefix[$mode]}" --producer.config "$WORK/$mode.properties"
    vrc[$mode]=$?
  done
  if ! compile_reader; then
    for mode in "${modes[@]}"; do fail "verifiable-producer-$mode" "javac DumpPartitions failed: $(snip "$WORK/javac.err")"; done
    return
  fi
  timeout -k 5 "$TOOL_TIMEOUT" java -Xmx512M -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$DIR/log4j2-quiet.xml" -cp "$KAFKA_LIB/*:$BUILD" \
    DumpPartitions "$BOOTSTRAP" "$vt" 45000 >"$WORK/vdump.out" 2>"$WORK/vdump.err"; rc=$?
  for mode in "${modes[@]}"; do
    local name="verifiable-producer-$mode" r
    if [[ ${vrc[$mode]} -ne 0 ]]; then fail "$name" "$(why "${vrc[$mode]}" "vp-$mode")"; continue; fi
    if [[ $rc -ne 0 ]]; then fail "$name" "reading the topic back failed: exit $rc; $(snip "$WORK/vdump.err" 400)"; continue; fi
    local nodups=0; [[ $mode == idempotent ]] && nodups=1
    if r=$(python3 "$DIR/helpers.py" verifiable-check "$WORK/vp-$mode.out" "$WORK/vdump.out" "${prefix[$mode]}" "$VP_MESSAGES" "$nodups"); then
      pass "$name"
    else
      fail "$name" "$r"
    fi
  done
}

# ---------------------------------------------------------------- transactions
# A transactional producer (ProducerPerformance --transactional-id, a commit every 100 ms),
# a read_committed console consumer that must see every record once, and kafka-transactions'
# list / describe / describe-producers.
check_transactions() {
  local tt="cairn-jt-txn-$RUN_ID" tid="cairn-jt-txn-$RUN_ID" rc n=5000
  tool tcreate $TOPICS "${B[@]}" --create --topic "$tt" --partitions 3 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail transactions-producer "could not create $tt: $(why $rc tcreate)"; return; fi
  tool tpp org.apache.kafka.tools.ProducerPerformance --topic "$tt" --num-records $n --record-size 100 \
    --throughput -1 --producer-props "bootstrap.servers=$BOOTSTRAP" \
    --transactional-id "$tid" --transaction-duration-ms 100; rc=$?
  if [[ $rc -eq 0 ]] && grep -q "^$n records sent" "$WORK/tpp.out"; then pass transactions-producer
  else fail transactions-producer "$(why $rc tpp) stdout: $(snip "$WORK/tpp.out")"; return; fi
  tool tcc org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$tt" --from-beginning \
    --isolation-level read_committed --max-messages $n --timeout-ms 20000; rc=$?
  local got; got=$(wc -l < "$WORK/tcc.out")
  if [[ $got -eq $n ]]; then pass transactions-read-committed
  else fail transactions-read-committed "want $n records, got $got ($(why $rc tcc))"; fi
  tool tl org.apache.kafka.tools.TransactionsCommand "${B[@]}" list; rc=$?
  if [[ $rc -eq 0 ]] && grep -qE "^$tid[[:space:]]" "$WORK/tl.out"; then pass transactions-list
  else fail transactions-list "$(why $rc tl) stdout: $(snip "$WORK/tl.out")"; fi
  # ListTransactions v2: only the ids the whole pattern matches
  if ! client_at_least 4.1; then
    skip transactions-list-pattern "kafka-transactions list has --transactional-id-pattern from 4.1 (KIP-1152)"
  else
  tool tlp org.apache.kafka.tools.TransactionsCommand "${B[@]}" list --transactional-id-pattern "cairn-jt-tx.-$RUN_ID"; rc=$?
  tool tln org.apache.kafka.tools.TransactionsCommand "${B[@]}" list --transactional-id-pattern "cairn-jt-txn" || rc=$?
  if [[ $rc -eq 0 ]] && grep -qE "^$tid[[:space:]]" "$WORK/tlp.out" && ! grep -qE "^cairn-jt-txn-" "$WORK/tln.out"; then
    pass transactions-list-pattern
  else fail transactions-list-pattern "$(why $rc tlp) matching: $(snip "$WORK/tlp.out") not matching: $(snip "$WORK/tln.out")"; fi
  fi
  tool td org.apache.kafka.tools.TransactionsCommand "${B[@]}" describe --transactional-id "$tid"; rc=$?
  if [[ $rc -eq 0 ]] && grep -qE "[[:space:]]$tid[[:space:]].*(Complete|Prepare)Commit" "$WORK/td.out"; then pass transactions-describe
  else fail transactions-describe "$(why $rc td) stdout: $(snip "$WORK/td.out")"; fi
  tool tdp org.apache.kafka.tools.TransactionsCommand "${B[@]}" describe-producers --topic "$tt" --partition 0; rc=$?
  if [[ $rc -eq 0 ]] && [[ $(grep -cE '^[0-9]+[[:space:]]' "$WORK/tdp.out") -ge 1 ]]; then pass transactions-describe-producers
  else fail transactions-describe-producers "$(why $rc tdp) stdout: $(snip "$WORK/tdp.out")"; fi
}

# ---------------------------------------------------------------- kafka-transactions abort
# A transactional producer (ProducerPerformance, one transaction of ten minutes) is killed
# -9 with its transaction open, which holds the partition's last stable offset: a
# read_committed consumer sees nothing after it. kafka-transactions abort --start-offset
# (DescribeProducers, then WriteTxnMarkers from the admin client to the leader) ends it;
# describe-producers then shows no open transaction and a record written afterwards
# reaches a read_committed consumer while the aborted ones never do.
check_transactions_abort() {
  local ta="cairn-jt-abort-$RUN_ID" tid="cairn-jt-abort-$RUN_ID" rc pid start waited=0
  tool acreate $TOPICS "${B[@]}" --create --topic "$ta" --partitions 1 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail transactions-abort "could not create $ta: $(why $rc acreate)"; return; fi
  java -Xmx256M -XX:+UseSerialGC -Dlog4j2.configurationFile="$DIR/log4j2-quiet.xml" -cp "$KAFKA_LIB/*" \
    org.apache.kafka.tools.ProducerPerformance --topic "$ta" --num-records 1000000 --record-size 10 \
    --throughput 50 --transactional-id "$tid" --transaction-duration-ms 600000 \
    --producer-props "bootstrap.servers=$BOOTSTRAP" transaction.timeout.ms=600000 \
    >"$WORK/app.out" 2>"$WORK/app.err" </dev/null &
  pid=$!
  # the open transaction's first offset, once the partition has one
  open_start() {
    tool adp org.apache.kafka.tools.TransactionsCommand "${B[@]}" describe-producers --topic "$ta" --partition 0 >/dev/null 2>&1
    awk 'NR > 1 && $6 ~ /^[0-9]+$/ {print $6; exit}' "$WORK/adp.out"
  }
  until start=$(open_start) && [[ -n "$start" ]] || (( waited >= 60 )); do sleep 1; waited=$((waited + 1)); done
  kill -9 "$pid"; wait "$pid" 2>/dev/null
  if [[ -z "$start" ]]; then fail transactions-abort "no open transaction on $ta-0 after ${waited}s: $(snip "$WORK/adp.out") $(snip "$WORK/app.err")"; return; fi
  # The coordinator still holds this transaction (open with $ta-0): not hanging.
  tool afind org.apache.kafka.tools.TransactionsCommand "${B[@]}" find-hanging --topic "$ta" --max-transaction-timeout 0; rc=$?
  if [[ $rc -eq 0 ]] && grep -q "^Topic" "$WORK/afind.out" && ! awk -v t="$ta" '$1 == t' "$WORK/afind.out" | grep -q .; then
    pass transactions-find-hanging-ongoing
  else fail transactions-find-hanging-ongoing "want no hanging transaction; $(why $rc afind) stdout: $(snip "$WORK/afind.out")"; fi
  tool aabort org.apache.kafka.tools.TransactionsCommand "${B[@]}" abort --topic "$ta" --partition 0 --start-offset "$start"; rc=$?
  if [[ $rc -ne 0 ]]; then fail transactions-abort "$(why $rc aabort) stdout: $(snip "$WORK/aabort.out")"; return; fi
  local after; after=$(open_start)
  printf 'after-abort\n' > "$WORK/aafter.txt"
  tool_in aprod "$WORK/aafter.txt" $PRODUCER "${B[@]}" --topic "$ta"
  tool acons org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$ta" --from-beginning \
    --isolation-level read_committed --max-messages 1 --timeout-ms 20000
  if [[ -z "$after" ]] && [[ "$(cat "$WORK/acons.out")" == "after-abort" ]]; then
    pass transactions-abort
  else
    fail transactions-abort "open transaction after abort: '${after}' (was at $start); read_committed read: $(snip "$WORK/acons.out") $(snip_err "$WORK/acons.err")"
  fi
}

# ---------------------------------------------------------------- kafka-transactions find-hanging
# A hanging transaction, as a producer from before KIP-890 left them: helpers.py
# hanging-txn writes one transactional record with Produce v3 and no AddPartitionsToTxn
# (the broker runs with transaction.partition.verification.enable=false; run-all.sh sets
# it, and Java 4.x producers, transaction version 2, are checked whatever it says). The
# coordinator knows the producer but not the partition: find-hanging must report it, the
# ongoing transaction of a live producer (check_transactions_abort) it must not, and
# kafka-transactions abort with the producer id, epoch and coordinator epoch find-hanging
# printed must end it, so a record written afterwards reaches a read_committed consumer.
check_transactions_hanging() {
  local th="cairn-jt-hang-$RUN_ID" tid="cairn-jt-hang-$RUN_ID" rc pid epoch base row cepoch
  local T=org.apache.kafka.tools.TransactionsCommand
  tool hcreate $TOPICS "${B[@]}" --create --topic "$th" --partitions 1 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail transactions-find-hanging "could not create $th: $(why $rc hcreate)"; return; fi
  if ! python3 "$DIR/helpers.py" hanging-txn "${BOOTSTRAP%%,*}" "$tid" "$th" 0 >"$WORK/hang.out" 2>"$WORK/hang.err"; then
    fail transactions-find-hanging "could not leave a hanging transaction (does the broker run with transaction.partition.verification.enable=false?): $(snip "$WORK/hang.err")"
    return
  fi
  read -r pid epoch base < "$WORK/hang.out"
  # --max-transaction-timeout 0: any open transaction is old enough to be a candidate
  tool hfind $T "${B[@]}" find-hanging --topic "$th" --max-transaction-timeout 0; rc=$?
  # Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp Duration
  row=$(awk -v t="$th" -v p="$pid" '$1 == t && $2 == 0 && $3 == p' "$WORK/hfind.out")
  if [[ $rc -eq 0 && -n "$row" && "$(awk '{print $4, $6}' <<<"$row")" == "$epoch $base" ]]; then
    pass transactions-find-hanging
  else
    fail transactions-find-hanging "want producer $pid epoch $epoch at $base; $(why $rc hfind) stdout: $(snip "$WORK/hfind.out")"
    return
  fi
  cepoch=$(awk '{print $5}' <<<"$row")
  tool habort $T "${B[@]}" abort --topic "$th" --partition 0 --producer-id "$pid" \
    --producer-epoch "$epoch" --coordinator-epoch "$cepoch"; rc=$?
  tool hfind2 $T "${B[@]}" find-hanging --topic "$th" --max-transaction-timeout 0 || rc=$?
  printf 'after-hanging\n' > "$WORK/hafter.txt"
  tool_in hprod "$WORK/hafter.txt" $PRODUCER "${B[@]}" --topic "$th"
  tool hcons org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$th" --from-beginning \
    --isolation-level read_committed --max-messages 1 --timeout-ms 20000
  if [[ $rc -eq 0 ]] && ! awk -v t="$th" '$1 == t' "$WORK/hfind2.out" | grep -q . &&
     [[ "$(cat "$WORK/hcons.out")" == "after-hanging" ]]; then
    pass transactions-abort-hanging
  else
    fail transactions-abort-hanging "$(why $rc habort) abort: $(snip "$WORK/habort.out") find-hanging after: $(snip "$WORK/hfind2.out") read_committed read: $(snip "$WORK/hcons.out") $(snip_err "$WORK/hcons.err")"
  fi
}

# ---------------------------------------------------------------- kafka-features
# describe, a downgrade of transaction.version and the upgrade back to 2 (where a new
# cluster starts), and an upgrade past what the broker supports, which must fail with the
# controller's reason. Runs last: producers between the downgrade and the upgrade would
# use transaction version 1.
check_features() {
  local F=org.apache.kafka.tools.FeatureCommand rc
  # Tab-separated up to Kafka 4.1, aligned with spaces since.
  tv_level() { grep -oP "^Feature: transaction.version\s+SupportedMinVersion: 0\s+SupportedMaxVersion: 2\s+FinalizedVersionLevel: \K[0-9]+" "$WORK/$1.out"; }
  tool fd0 $F "${B[@]}" describe; rc=$?
  if [[ $rc -eq 0 && "$(tv_level fd0)" == 2 ]]; then pass features-describe
  else fail features-describe "$(why $rc fd0) stdout: $(snip "$WORK/fd0.out")"; fi
  tool fdown $F "${B[@]}" downgrade --feature transaction.version=1; rc=$?
  tool fd1 $F "${B[@]}" describe
  if [[ $rc -eq 0 ]] && grep -q "^transaction.version was downgraded to 1." "$WORK/fdown.out" && [[ "$(tv_level fd1)" == 1 ]]; then
    pass features-downgrade
  else fail features-downgrade "$(why $rc fdown) stdout: $(snip "$WORK/fdown.out") then: $(snip "$WORK/fd1.out")"; fi
  tool fup $F "${B[@]}" upgrade --feature transaction.version=2; rc=$?
  tool fd2 $F "${B[@]}" describe
  if [[ $rc -eq 0 ]] && grep -q "^transaction.version was upgraded to 2." "$WORK/fup.out" && [[ "$(tv_level fd2)" == 2 ]]; then
    pass features-upgrade
  else fail features-upgrade "$(why $rc fup) stdout: $(snip "$WORK/fup.out") then: $(snip "$WORK/fd2.out")"; fi
  tool fbad $F "${B[@]}" upgrade --feature transaction.version=9; rc=$?
  if [[ $rc -ne 0 ]] && grep -q "^Could not upgrade transaction.version to 9. The update failed for all features since the following feature had an error: Invalid update version 9 for feature transaction.version. Local controller [0-9]* only supports versions 0-2" "$WORK/fbad.out"; then
    pass features-upgrade-refused
  else fail features-upgrade-refused "want a refusal; exit $rc, stdout: $(snip "$WORK/fbad.out")"; fi
}

# ---------------------------------------------------------------- kafka streams, exactly once
# StreamsEos.java (exactly_once_v2: a repartition topic, an in-memory count with its
# changelog, two stream threads) counts 20 keys while kafka-verifiable-producer writes
# 20000 numbers at 2000/s. The application is killed -9 while it works and started again;
# then a read_committed consumer must see, for every key, the counts 1, 2, ... n once each
# and in order, n being how many input records have that key: a record counted twice, an
# aborted write seen or an update lost breaks that.
check_streams() {
  local si="cairn-jt-si-$RUN_ID" so="cairn-jt-so-$RUN_ID" app="cairn-jt-app-$RUN_ID" rc n=20000
  local state="$WORK/streams-state" pid ppid
  if ! compile_reader; then fail streams-eos "javac failed: $(snip "$WORK/javac.err")"; return; fi
  for t in "$si" "$so"; do
    tool "create-$t" $TOPICS "${B[@]}" --create --topic "$t" --partitions 3 --replication-factor 1; rc=$?
    if [[ $rc -ne 0 ]]; then fail streams-eos "could not create $t: $(why $rc "create-$t")"; return; fi
  done
  # java itself in the background (no `timeout` in between: kill -9 must hit the JVM)
  run_app() {
    java -Xmx256M -XX:+UseSerialGC -Dlog4j2.configurationFile="$DIR/log4j2-quiet.xml" \
      -cp "$KAFKA_LIB/*:$BUILD" StreamsEos "$BOOTSTRAP" "$app" "$si" "$so" "$state" \
      >>"$WORK/streams-$1.out" 2>>"$WORK/streams-$1.err" </dev/null &
    pid=$!
  }
  # the output's end offsets (uncommitted writes and markers included), summed
  out_end() {
    tool soff org.apache.kafka.tools.GetOffsetShell "${B[@]}" --topic "$so" --time -1 >/dev/null 2>&1
    awk -F: '{s += $3} END {print s + 0}' "$WORK/soff.out"
  }
  run_app first
  # The producer's 10 s must overlap the application's processing: start it once the
  # application has joined its group and made its internal topics (RUNNING), which
  # takes several seconds of a loaded machine.
  local waited=0
  until grep -q "^state RUNNING" "$WORK/streams-first.out" 2>/dev/null || (( waited >= 90 )); do
    sleep 1; waited=$((waited + 1))
  done
  timeout -k 5 120 "$DIR/kafka-run.sh" org.apache.kafka.tools.VerifiableProducer "${B[@]}" --topic "$si" \
    --max-messages $n --throughput 2000 --acks -1 >"$WORK/sprod.out" 2>"$WORK/sprod.err" </dev/null &
  ppid=$!
  local end=0
  waited=0
  while (( waited < 60 )) && kill -0 "$pid" 2>/dev/null && kill -0 "$ppid" 2>/dev/null; do
    sleep 1; waited=$((waited + 1))
    end=$(out_end)
    (( end >= 2000 )) && break
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    kill "$ppid" 2>/dev/null
    fail streams-eos "the application stopped before it was killed: $(snip "$WORK/streams-first.err") $(snip "$WORK/streams-first.out")"
    return
  fi
  kill -9 "$pid"; wait "$pid" 2>/dev/null
  if ! kill -0 "$ppid" 2>/dev/null || (( end < 2000 )); then
    kill "$ppid" 2>/dev/null
    fail streams-eos "not killed mid-run: producer done or output only at $end after ${waited}s; $(snip "$WORK/streams-first.err")"
    return
  fi
  run_app second
  wait "$ppid"; rc=$?
  if [[ $rc -ne 0 ]]; then kill "$pid"; fail streams-eos "the producer failed: $(why $rc sprod)"; return; fi
  # the restarted instance takes over once the killed one's members have left the group
  waited=0
  until grep -q "^state RUNNING" "$WORK/streams-second.out" 2>/dev/null || (( waited >= 90 )); do
    sleep 1; waited=$((waited + 1))
  done
  # The input holds exactly n records (the producer exited 0). The output should too, one
  # count per input record: read up to one more than that, and stop after 10 s with none
  # (the second instance commits every 100 ms), so an extra count is still caught.
  tool sin org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$si" --from-beginning \
    --max-messages $n --timeout-ms 15000
  tool scons org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$so" --from-beginning \
    --isolation-level read_committed --max-messages $((n + 1)) --timeout-ms 10000 "$FORMATTER_PROP" print.key=true \
    "$FORMATTER_PROP" key.separator=: \
    --value-deserializer org.apache.kafka.common.serialization.LongDeserializer; rc=$?
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  local r
  if r=$(python3 - "$WORK/sin.out" "$WORK/scons.out" <<'PY'
import sys
want = {}
for line in open(sys.argv[1]):
    k = "k" + str(int(line.strip().rpartition(".")[2]) % 20)
    want[k] = want.get(k, 0) + 1
seen = {}
for line in open(sys.argv[2]):
    k, _, v = line.rstrip("\n").partition(":")
    seen.setdefault(k, []).append(int(v))
bad = [k for k in sorted(set(want) | set(seen)) if seen.get(k) != list(range(1, want.get(k, 0) + 1))]
if bad or not want:
    k = bad[0] if bad else None
    got = seen.get(k, [])
    dup = sorted({x for x in got if got.count(x) > 1})[:5]
    print(f"{len(bad)} of {len(want)} keys wrong; {k}: {len(got)} counts (want {want.get(k)}), "
          f"last {got[-3:]}, repeated {dup}")
    sys.exit(1)
print(f"{sum(want.values())} records, {len(want)} keys, every count once and in order")
PY
  ); then
    pass "streams-eos"
    echo "  streams-eos: $r; killed -9 at $end output offsets"
  else
    fail streams-eos "$r ($(why $rc scons); app: $(snip "$WORK/streams-second.err"))"
  fi
}

# shellcheck source=groups.sh
source "$DIR/groups.sh"
# shellcheck source=share.sh
source "$DIR/share.sh"

ABORT=0
want() { [[ $ABORT -eq 0 && "$1" =~ $ONLY ]]; }
check_api_versions   # always: also tells whether the broker answers at all
want topics && check_topics
if want 'console|get_offsets|configs|delete_records'; then
  check_console
  want get_offsets && check_get_offsets
  want configs && check_configs
  want configs && check_broker_configs
  want configs && check_user_configs
  want configs && check_quota_configs
  want configs && check_quota_throttle
  want configs && check_quota_mutations
  want configs && check_quota_requests
  want delete_records && check_delete_records
fi
want compaction && check_compaction
want compaction && check_compaction_txn
want verifiable && check_verifiable
want groups && check_groups
want transactions && check_transactions
want transactions && check_transactions_abort
want transactions && check_transactions_hanging
want share && check_share
want streams && check_streams
want features && check_features

echo "java-tools: run took $(( ($(now_ms) - T_START) / 1000 ))s; outputs in $WORK" >&2
if [[ $FAILED -eq 0 && "${KEEP_WORK:-0}" != 1 ]]; then rm -rf "$WORK"; fi
echo "java-tools: $PASSED passed, $FAILED failed, $SKIPPED not applicable to Kafka $KAFKA_VERSION's client"
[[ $FAILED -eq 0 ]]
