# Consumer-group checks for run.sh (sourced; uses its tool/pass/fail/why/snip helpers).
# Every check here goes through the group coordinator: console consumers with --group
# (alone, and two splitting partitions with cooperative-sticky rebalancing),
# kafka-verifiable-consumer, and kafka-consumer-groups --list / --describe /
# --reset-offsets / --delete-offsets / --delete.

GROUPS_CMD=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand

# describe_offsets NAME GROUP TOPIC -> "partition current leo lag" lines, sorted, from
# kafka-consumer-groups --describe ("-" where nothing is committed)
describe_offsets() {
  local name="$1" group="$2" topic="$3"
  tool "$name" $GROUPS_CMD "${B[@]}" --describe --group "$group" || return $?
  awk -v g="$group" -v t="$topic" '$1 == g && $2 == t { print $3, $4, $5, $6 }' "$WORK/$name.out" | sort -n
}

# produce_vp NAME TOPIC N PREFIX: kafka-verifiable-producer, acks=all, keys spread over partitions
produce_vp() {
  tool "$1" org.apache.kafka.tools.VerifiableProducer "${B[@]}" --topic "$2" \
    --max-messages "$3" --throughput -1 --acks -1 --repeating-keys 97 --value-prefix "$4"
}

# end offsets of TOPIC as "partition offset" lines (time -1 latest, a timestamp, ...)
end_offsets() {
  local name="$1" topic="$2" time="${3:--1}"
  tool "$name" org.apache.kafka.tools.GetOffsetShell "${B[@]}" --topic "$topic" --time "$time" || return $?
  awk -F: '{ print $2, $3 }' "$WORK/$name.out" | sort -n
}

check_groups() {
  local gt="cairn-jt-groups-$RUN_ID" grp="cairn-jt-group-$RUN_ID" rc got want
  tool gcreate $TOPICS "${B[@]}" --create --topic "$gt" --partitions 4 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail groups-setup "could not create $gt: $(why $rc gcreate)"; return; fi
  # 200 records, a moment, then 200 more: the moment is what --to-datetime resets to
  produce_vp gp1 "$gt" 200 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail groups-setup "$(why $rc gp1)"; return; fi
  local first; first=$(end_offsets gfirst "$gt")
  sleep 1.5
  local moment; moment=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
  sleep 1.5
  produce_vp gp2 "$gt" 200 2; rc=$?
  if [[ $rc -ne 0 ]]; then fail groups-setup "$(why $rc gp2)"; return; fi
  local leo; leo=$(end_offsets gleo "$gt")
  if [[ "$(awk '{ s += $2 } END { print s }' <<<"$leo")" != 400 ]]; then
    fail groups-setup "end offsets of $gt do not add up to 400: $(echo $leo)"; return
  fi

  # -- a console consumer in a group reads everything and commits on exit
  tool gcons org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$gt" --group "$grp" \
    --from-beginning --max-messages 400 --timeout-ms 30000; rc=$?
  got=$(sort -u "$WORK/gcons.out" | wc -l)
  if [[ $rc -eq 0 && $got -eq 400 ]]; then pass console-consumer-group
  else fail console-consumer-group "read $got distinct of 400 ($(why $rc gcons))"; fi

  # -- list and describe (lag 0 everywhere once the consumer committed)
  tool glist $GROUPS_CMD "${B[@]}" --list; rc=$?
  if [[ $rc -eq 0 ]] && grep -qxF "$grp" "$WORK/glist.out"; then pass consumer-groups-list
  else fail consumer-groups-list "$grp not listed ($(why $rc glist)); stdout: $(snip "$WORK/glist.out")"; fi

  # partition current leo lag, expected from the end offsets
  local want_synced; want_synced=$(awk '{ print $1, $2, $2, 0 }' <<<"$leo")
  got=$(describe_offsets gdesc "$grp" "$gt"); rc=$?
  if [[ $rc -eq 0 && "$got" == "$want_synced" ]]; then pass consumer-groups-describe
  else fail consumer-groups-describe "want [$(echo $want_synced)] got [$(echo $got)] ($(why $rc gdesc)); stdout: $(snip "$WORK/gdesc.out" 400)"; fi

  # -- reset offsets: each one checked with --describe
  local R=(--reset-offsets --group "$grp" --topic "$gt" --execute)
  reset_check() { # name, expected "partition current" lines, reset args...
    local name="$1" expect="$2"; shift 2
    tool "$name" $GROUPS_CMD "${B[@]}" "${R[@]}" "$@"; rc=$?
    if [[ $rc -ne 0 ]]; then fail "consumer-groups-$name" "$(why $rc "$name") stdout: $(snip "$WORK/$name.out")"; return; fi
    got=$(describe_offsets "$name-d" "$grp" "$gt" | awk '{ print $1, $2 }')
    if [[ "$got" == "$expect" ]]; then pass "consumer-groups-$name"
    else fail "consumer-groups-$name" "want [$(echo $expect)] got [$(echo $got)]; reset said: $(snip "$WORK/$name.out" 300)"; fi
  }
  reset_check reset-to-earliest "$(awk '{ print $1, 0 }' <<<"$leo")" --to-earliest
  reset_check reset-shift-by "$(awk '{ print $1, ($2 < 50 ? $2 : 50) }' <<<"$leo")" --shift-by 50
  reset_check reset-to-latest "$(awk '{ print $1, $2 }' <<<"$leo")" --to-latest
  reset_check reset-to-datetime "$first" --to-datetime "$moment"

  # -- delete the group's offsets for the topic, then the group
  tool gdelo $GROUPS_CMD "${B[@]}" --delete-offsets --group "$grp" --topic "$gt"; rc=$?
  got=$(describe_offsets gdelo-d "$grp" "$gt" | awk '$2 ~ /^[0-9]+$/')
  if [[ $rc -eq 0 && -z "$got" ]]; then pass consumer-groups-delete-offsets
  else fail consumer-groups-delete-offsets "offsets still committed: [$(echo $got)] ($(why $rc gdelo)); stdout: $(snip "$WORK/gdelo.out" 300)"; fi

  tool gdel $GROUPS_CMD "${B[@]}" --delete --group "$grp"; rc=$?
  tool glist2 $GROUPS_CMD "${B[@]}" --list
  if [[ $rc -eq 0 ]] && ! grep -qxF "$grp" "$WORK/glist2.out"; then pass consumer-groups-delete
  else fail consumer-groups-delete "$(why $rc gdel); still listed: $(grep -cxF "$grp" "$WORK/glist2.out")"; fi

  check_group_split "$gt"
  check_verifiable_consumer "$gt"
  check_consumer_protocol "$gt" "$leo"
  check_consumer_regex
}

# group.protocol=consumer (KIP-848: ConsumerGroupHeartbeat, server-side assignment), then
# kafka-consumer-groups --describe (ConsumerGroupDescribe + OffsetFetch) shows lag 0.
check_consumer_protocol() {
  local topic="$1" leo="$2" grp="cairn-jt-848-$RUN_ID" rc got
  tool c848 org.apache.kafka.tools.consumer.ConsoleConsumer "${B[@]}" --topic "$topic" --group "$grp" \
    "$CONSUMER_PROP" group.protocol=consumer --from-beginning --max-messages 400 --timeout-ms 30000; rc=$?
  got=$(sort -u "$WORK/c848.out" | wc -l)
  if [[ $rc -eq 0 && $got -eq 400 ]]; then pass consumer-protocol-848
  else fail consumer-protocol-848 "read $got distinct of 400 ($(why $rc c848))"; fi
  local want; want=$(awk '{ print $1, $2, $2, 0 }' <<<"$leo")
  got=$(describe_offsets d848 "$grp" "$topic"); rc=$?
  if [[ $rc -eq 0 && "$got" == "$want" ]]; then pass consumer-protocol-848-describe
  else fail consumer-protocol-848-describe "want [$(echo $want)] got [$(echo $got)] ($(why $rc d848)); stdout: $(snip "$WORK/d848.out" 400)"; fi
}

# KIP-848 regular-expression subscription: a Java consumer subscribes with a
# SubscriptionPattern and the broker resolves it (RegexConsumer.java). It must read the
# matching topics (whole names: not the one that only contains a match), then a matching
# topic created while it runs; an invalid pattern fails poll() with InvalidRegularExpression.
check_consumer_regex() {
  local p="cairn-jt-rx$RUN_ID" rc got t
  if ! have_class org.apache.kafka.clients.consumer.SubscriptionPattern; then
    skip consumer-regex "the client has no SubscriptionPattern (Kafka 4.0+)"; return
  fi
  if ! compile_reader; then fail consumer-regex "javac failed: $(snip "$WORK/javac.err")"; return; fi
  for t in "$p-a:2" "$p-b:1" "x$p-a:1"; do
    tool rxcreate $TOPICS "${B[@]}" --create --topic "${t%:*}" --partitions "${t#*:}" --replication-factor 1; rc=$?
    if [[ $rc -ne 0 ]]; then fail consumer-regex "could not create ${t%:*}: $(why $rc rxcreate)"; return; fi
    produce_vp rxprod "${t%:*}" 100 5; rc=$?
    if [[ $rc -ne 0 ]]; then fail consumer-regex "$(why $rc rxprod)"; return; fi
  done
  helper rxc RegexConsumer "$BOOTSTRAP" "cairn-jt-rx-$RUN_ID" "$p-.*" 200 "$p-c" 50 60000; rc=$?
  got=$(grep '^topics: ' "$WORK/rxc.out")
  if [[ $rc -eq 0 && "$got" == "topics: $p-a,$p-b,$p-c" ]]; then pass consumer-regex
  else fail consumer-regex "want topics $p-a,$p-b,$p-c and 200 + 50 records, got: $(snip "$WORK/rxc.out" 300) ($(why $rc rxc))"; fi
  helper rxbad RegexConsumer "$BOOTSTRAP" "cairn-jt-rxbad-$RUN_ID" "$p-(" invalid 30000; rc=$?
  if [[ $rc -eq 0 ]] && grep -qF "SubscribedTopicRegex \`$p-(\` is not a valid regular expression: " "$WORK/rxbad.out"; then
    pass consumer-regex-invalid
  else fail consumer-regex-invalid "$(snip "$WORK/rxbad.out" 300) ($(why $rc rxbad))"; fi
}

# Two console consumers in one group (cooperative-sticky) split a topic's partitions:
# both join first, then records arrive; together they read each record exactly once.
check_group_split() {
  local st="$1-split" grp="cairn-jt-split-$RUN_ID" rc i members=0
  tool screate $TOPICS "${B[@]}" --create --topic "$st" --partitions 4 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail consumer-group-split "could not create $st: $(why $rc screate)"; return; fi
  local pids=()
  for i in 1 2; do
    timeout -k 5 "$TOOL_TIMEOUT" "$DIR/kafka-run.sh" org.apache.kafka.tools.consumer.ConsoleConsumer \
      "${B[@]}" --topic "$st" --group "$grp" --from-beginning --timeout-ms 15000 "$FORMATTER_PROP" print.partition=true \
      "$CONSUMER_PROP" partition.assignment.strategy=org.apache.kafka.clients.consumer.CooperativeStickyAssignor \
      >"$WORK/split$i.out" 2>"$WORK/split$i.err" </dev/null &
    pids+=($!)
  done
  # both members holding partitions (all 4 between them) before anything is produced
  for i in $(seq 1 60); do
    tool smembers $GROUPS_CMD "${B[@]}" --describe --group "$grp" --members
    members=$(awk -v g="$grp" '$1 == g && $5 > 0 { n++; s += $5 } END { print (s == 4 ? n : 0) }' "$WORK/smembers.out")
    [[ $members -eq 2 ]] && break
    sleep 1
  done
  if [[ $members -ne 2 ]]; then
    kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
    fail consumer-group-split "the group never had 2 members sharing 4 partitions: $(snip "$WORK/smembers.out" 300); consumer 1: $(snip_err "$WORK/split1.err")"
    return
  fi
  produce_vp sprod "$st" 400 7; rc=$?
  wait "${pids[@]}"
  if [[ $rc -ne 0 ]]; then fail consumer-group-split "producing failed: $(why $rc sprod)"; return; fi
  local r
  if r=$(python3 - "$WORK/split1.out" "$WORK/split2.out" <<'EOF'
import sys
seen, parts = [], []
for path in sys.argv[1:]:
    p, vals = set(), []
    for line in open(path):
        head, _, value = line.rstrip("\n").partition("\t")
        if head.startswith("Partition:"):
            p.add(int(head.split(":")[1])); vals.append(value)
    parts.append(p); seen.extend(vals)
if len(seen) != 400 or len(set(seen)) != 400:
    print(f"read {len(seen)} records, {len(set(seen))} distinct, want 400 once each"); sys.exit(1)
if not parts[0] or not parts[1] or parts[0] & parts[1]:
    print(f"partitions not split: {sorted(parts[0])} / {sorted(parts[1])}"); sys.exit(1)
print(f"{sorted(parts[0])} / {sorted(parts[1])}")
EOF
  ); then pass consumer-group-split
  else fail consumer-group-split "$r"; fi
}

# kafka-verifiable-consumer in a group reads back every record of the topic and commits.
check_verifiable_consumer() {
  local topic="$1" grp="cairn-jt-vc-$RUN_ID" rc r
  tool vcons org.apache.kafka.tools.VerifiableConsumer "${B[@]}" --topic "$topic" --group-id "$grp" \
    --max-messages 400 --reset-policy earliest; rc=$?
  if r=$(python3 - "$WORK/vcons.out" <<'EOF'
import json, sys
consumed, committed_ok, committed_bad = 0, 0, 0
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("name") == "records_consumed":
        consumed += e.get("count", 0)
    elif e.get("name") == "offsets_committed":
        if e.get("success"):
            committed_ok += 1
        else:
            committed_bad += 1
if consumed < 400:
    print(f"consumed {consumed} of 400"); sys.exit(1)
if committed_ok == 0 or committed_bad:
    print(f"offset commits: {committed_ok} ok, {committed_bad} failed"); sys.exit(1)
print(f"consumed {consumed}, {committed_ok} commits")
EOF
  ) && [[ $rc -eq 0 ]]; then pass verifiable-consumer-group
  else fail verifiable-consumer-group "${r:-} ($(why $rc vcons))"; fi
}
