# Share-group (KIP-932, queues) checks for run.sh (sourced; uses its tool/helper/pass/fail/
# skip/why/snip helpers). Kafka 4.2 made share groups production-ready; earlier clients
# speak preview versions of the protocol, so the checks run with 4.2+ tools and clients.
#
# The broker must serve share groups: a new Kafka 4.2+ or Cairn cluster does (share.version
# 1 or more); one at 0 is upgraded with `kafka-features upgrade --feature share.version=1`.

SHARE_GROUPS=org.apache.kafka.tools.consumer.group.ShareGroupCommand
CONSOLE_SHARE=org.apache.kafka.tools.consumer.ConsoleShareConsumer

check_share() {
  local rc
  if ! client_at_least 4.2; then
    skip share "share groups are production-ready from Kafka 4.2 (KIP-932)"; return
  fi
  # Kafka 4.4 is at level 2 (share groups' dead-letter queues) already; Cairn serves 1.
  sv_level() { grep -oP "^Feature: share.version\s+SupportedMinVersion: 0\s+SupportedMaxVersion: [0-9]+\s+FinalizedVersionLevel: \K[0-9]+" "$WORK/$1.out"; }
  tool shfd0 org.apache.kafka.tools.FeatureCommand "${B[@]}" describe
  rc=0
  if [[ "$(sv_level shfd0)" == 0 || -z "$(sv_level shfd0)" ]]; then
    tool shfeat org.apache.kafka.tools.FeatureCommand "${B[@]}" upgrade --feature share.version=1; rc=$?
  fi
  tool shfd org.apache.kafka.tools.FeatureCommand "${B[@]}" describe
  if [[ "$(sv_level shfd)" -ge 1 ]]; then
    pass share-feature-enabled
  else
    fail share-feature-enabled "$(why $rc shfeat) stdout: $(snip "$WORK/shfeat.out") then: $(snip "$WORK/shfd.out")"
    return
  fi
  check_share_consumers
  check_share_renew
  check_share_lag
  check_share_leader_move
  check_share_read_committed
  check_share_console
  check_share_offsets
}

# KIP-1222 and KIP-1206 (ShareFetch and ShareAcknowledge v2, 4.4 clients): a member that
# renews its record locks keeps its records past the lock duration while another member
# reads the rest, and a record_limit member gets at most max.poll.records of one batch
# (ShareRenew.java).
check_share_renew() {
  local t="cairn-jt-sharer-$RUN_ID" rc
  if ! client_at_least 4.4; then
    skip share-renew "RENEW acknowledgements and share.acquire.mode came with the 4.4 client"; return
  fi
  tool shrcreate $TOPICS "${B[@]}" --create --topic "$t" --partitions 1 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail share-renew "could not create $t: $(why $rc shrcreate)"; return; fi
  helper shr ShareRenew "$BOOTSTRAP" "cairn-jt-sharer-$RUN_ID" "$t" 90000; rc=$?
  if [[ $rc -eq 0 ]] && grep -qx ok "$WORK/shr.out"; then pass share-renew
  else fail share-renew "$(snip "$WORK/shr.out" 600) ($(why $rc shr))"; fi
}

# KIP-1226 (DescribeShareGroupOffsets v1, 4.2+ clients): share-partition lag as
# Admin.listShareGroupOffsets and kafka-share-groups --describe show it, with records
# released, redelivered and not yet read (ShareLag.java).
check_share_lag() {
  local t="cairn-jt-sharel-$RUN_ID" grp="cairn-jt-sharel-$RUN_ID" rc
  if ! client_at_least 4.2; then
    skip share-lag "share-partition lag came with the 4.2 client"; return
  fi
  tool shlcreate $TOPICS "${B[@]}" --create --topic "$t" --partitions 1 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail share-lag "could not create $t: $(why $rc shlcreate)"; return; fi
  helper shl ShareLag "$BOOTSTRAP" "$grp" "$t" 90000; rc=$?
  if [[ $rc -ne 0 ]] || ! grep -qx ok "$WORK/shl.out"; then
    fail share-lag "$(snip "$WORK/shl.out" 600) ($(why $rc shl))"; return
  fi
  # The tool shows the same lag: 4 records produced after the rest were accepted.
  tool shldesc $SHARE_GROUPS "${B[@]}" --describe --group "$grp"; rc=$?
  local lag; lag=$(awk -v g="$grp" -v t="$t" '$1 == g && $2 == t && $3 == 0 { print $5 }' "$WORK/shldesc.out")
  if [[ $rc -eq 0 && "$lag" == 4 ]]; then pass share-lag
  else fail share-lag "kafka-share-groups showed a lag of '$lag', want 4: $(snip "$WORK/shldesc.out" 400)"; fi
}

# A share consumer follows its partition's leadership to another broker while the old
# leader stays up (ShareLeaderMove.java): the old leader's NOT_LEADER_OR_FOLLOWER answers
# must name the new leader, which the 4.4 client takes over its cached one. Needs two
# brokers (the java-cluster suite); skipped on one.
check_share_leader_move() {
  local t="cairn-jt-sharem-$RUN_ID" rc
  if ! client_at_least 4.2; then
    skip share-leader-move "share groups are production-ready from Kafka 4.2 (KIP-932)"; return
  fi
  helper shm ShareLeaderMove "$BOOTSTRAP" "cairn-jt-sharem-$RUN_ID" "$t" 60000; rc=$?
  if [[ $rc -eq 0 ]] && grep -q "^skip: " "$WORK/shm.out"; then
    skip share-leader-move "$(grep "^skip: " "$WORK/shm.out" | cut -c7-)"
  elif [[ $rc -eq 0 ]] && grep -qx ok "$WORK/shm.out"; then pass share-leader-move
  else fail share-leader-move "$(snip "$WORK/shm.out" 600) ($(why $rc shm))"; fi
}

# Three KafkaShareConsumers with explicit acknowledgement on one partition
# (ShareConsumers.java): records locked by one member at a time, ACCEPT / RELEASE / REJECT
# as Kafka defines them, and a closing member's records delivered again.
check_share_consumers() {
  local t="cairn-jt-share-$RUN_ID" rc
  if ! compile_reader; then fail share-consumers "javac failed: $(snip "$WORK/javac.err")"; return; fi
  tool shcreate $TOPICS "${B[@]}" --create --topic "$t" --partitions 1 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail share-consumers "could not create $t: $(why $rc shcreate)"; return; fi
  helper shc ShareConsumers "$BOOTSTRAP" "cairn-jt-share-$RUN_ID" "$t" 200 90000; rc=$?
  if [[ $rc -eq 0 ]] && grep -qx ok "$WORK/shc.out"; then pass share-consumers
  else fail share-consumers "$(snip "$WORK/shc.out" 600) ($(why $rc shc))"; return; fi
  # The 200 records of the rounds are finished with: the share partition starts past them
  # (DescribeShareGroupOffsets). Kafka 4.4 shows 200 here (its persisted start moves
  # lazily) with a lag of 0; Cairn shows 205, the 5 records of the close check included.
  tool shdo $SHARE_GROUPS "${B[@]}" --describe --group "cairn-jt-share-$RUN_ID"; rc=$?
  local start; start=$(awk -v g="cairn-jt-share-$RUN_ID" -v t="$t" '$1 == g && $2 == t && $3 == 0 { print $4 }' "$WORK/shdo.out")
  if [[ $rc -eq 0 && "$start" =~ ^[0-9]+$ && $start -ge 200 && $start -le 205 ]]; then
    pass share-groups-describe-offsets
  else fail share-groups-describe-offsets "want a start offset of 200 to 205: $(snip "$WORK/shdo.out" 400) ($(why $rc shdo))"; fi
}

# share.isolation.level=read_committed (ShareTxn.java): a KafkaShareConsumer reads the
# committed transactions and the plain record, not the aborted one, and nothing past the
# open transaction until it commits.
check_share_read_committed() {
  local t="cairn-jt-sharetx-$RUN_ID" rc
  tool shtcreate $TOPICS "${B[@]}" --create --topic "$t" --partitions 1 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail share-read-committed "could not create $t: $(why $rc shtcreate)"; return; fi
  helper sht ShareTxn "$BOOTSTRAP" "cairn-jt-sharetx-$RUN_ID" "$t" read_committed 90000; rc=$?
  if [[ $rc -eq 0 ]] && grep -qx ok "$WORK/sht.out"; then pass share-read-committed
  else fail share-read-committed "$(snip "$WORK/sht.out" 600) ($(why $rc sht))"; fi
}

# kafka-console-share-consumer (implicit acknowledgement) reads what is produced once it
# is assigned; kafka-share-groups lists the group and describes its member, refuses to
# delete it while the member is there, and deletes it once it has left.
check_share_console() {
  local t="cairn-jt-sharec-$RUN_ID" grp="cairn-jt-sharec-$RUN_ID" rc i pid n=0
  tool shccreate $TOPICS "${B[@]}" --create --topic "$t" --partitions 2 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail share-console-consumer "could not create $t: $(why $rc shccreate)"; return; fi
  timeout -k 5 "$TOOL_TIMEOUT" "$DIR/kafka-run.sh" $CONSOLE_SHARE "${B[@]}" --topic "$t" --group "$grp" \
    --max-messages 50 --timeout-ms 30000 >"$WORK/shcons.out" 2>"$WORK/shcons.err" </dev/null &
  pid=$!
  # Assigned: kafka-share-groups --describe --members lists the member with both partitions.
  for i in $(seq 1 60); do
    tool shdm $SHARE_GROUPS "${B[@]}" --describe --group "$grp" --members
    if grep -q "$t:0,1" "$WORK/shdm.out" 2>/dev/null; then n=1; break; fi
    sleep 1
  done
  if [[ $n -ne 1 ]]; then
    fail share-groups-describe-members "the member never showed both partitions: $(snip "$WORK/shdm.out" 400)"
  else pass share-groups-describe-members; fi
  tool shl $SHARE_GROUPS "${B[@]}" --list
  if grep -qx "$grp" "$WORK/shl.out"; then pass share-groups-list
  else fail share-groups-list "$(snip "$WORK/shl.out" 400)"; fi
  tool shdel1 $SHARE_GROUPS "${B[@]}" --delete --group "$grp"
  if grep -q "NON_EMPTY_GROUP\|not empty\|GroupNotEmpty" "$WORK/shdel1.out" "$WORK/shdel1.err"; then
    pass share-groups-delete-refused
  else fail share-groups-delete-refused "deleting a group with a member: $(snip "$WORK/shdel1.out" 300) $(snip "$WORK/shdel1.err" 300)"; fi
  for i in $(seq 0 49); do echo "k$i:share-$i"; done >"$WORK/shin.txt"
  tool_in shprod "$WORK/shin.txt" $PRODUCER "${B[@]}" --topic "$t" "$READER_PROP" parse.key=true "$READER_PROP" key.separator=:
  wait "$pid"; rc=$?
  local got; got=$(grep -c '^share-' "$WORK/shcons.out")
  local distinct; distinct=$(grep '^share-' "$WORK/shcons.out" | sort -u | wc -l)
  if [[ $got -eq 50 && $distinct -eq 50 ]]; then pass share-console-consumer
  else fail share-console-consumer "read $got ($distinct distinct) of 50 ($(why $rc shcons))"; fi
  # The member has left (the consumer closed): the group can go.
  for i in $(seq 1 30); do
    tool shdel2 $SHARE_GROUPS "${B[@]}" --delete --group "$grp"
    grep -q "Deletion of requested share groups ('$grp') was successful" "$WORK/shdel2.out" && break
    sleep 1
  done
  tool shl2 $SHARE_GROUPS "${B[@]}" --list
  if grep -q "was successful" "$WORK/shdel2.out" && ! grep -qx "$grp" "$WORK/shl2.out"; then pass share-groups-delete
  else fail share-groups-delete "$(snip "$WORK/shdel2.out" 300) $(snip "$WORK/shdel2.err" 300); then listed: $(snip "$WORK/shl2.out" 200)"; fi
}

# Group configs and offsets of an empty share group: kafka-configs sets
# share.auto.offset.reset=earliest on a group before it exists (and refuses a value out of
# the broker's bounds), so its first console share consumer reads what was produced
# before; kafka-share-groups --reset-offsets --to-earliest has it read everything again,
# and --delete-offsets makes it start over.
check_share_offsets() {
  local t="cairn-jt-shareo-$RUN_ID" grp="cairn-jt-shareo-$RUN_ID" rc got
  tool shocreate $TOPICS "${B[@]}" --create --topic "$t" --partitions 1 --replication-factor 1; rc=$?
  if [[ $rc -ne 0 ]]; then fail share-group-config "could not create $t: $(why $rc shocreate)"; return; fi
  for i in $(seq 0 9); do echo "early-$i"; done >"$WORK/shoin.txt"
  tool_in shoprod "$WORK/shoin.txt" $PRODUCER "${B[@]}" --topic "$t"
  tool shocfg $CONFIGS "${B[@]}" --alter --entity-type groups --entity-name "$grp" --add-config share.auto.offset.reset=earliest; rc=$?
  tool shocfgd $CONFIGS "${B[@]}" --describe --entity-type groups --entity-name "$grp"
  if [[ $rc -eq 0 ]] && grep -q "share.auto.offset.reset=earliest" "$WORK/shocfgd.out"; then pass share-group-config
  else fail share-group-config "$(snip "$WORK/shocfg.out" 300) $(snip "$WORK/shocfg.err" 300); described: $(snip "$WORK/shocfgd.out" 300)"; fi
  tool shocfgbad $CONFIGS "${B[@]}" --alter --entity-type groups --entity-name "$grp" --add-config share.delivery.count.limit=100; rc=$?
  if [[ $rc -ne 0 ]] && grep -qi "invalid" "$WORK/shocfgbad.out" "$WORK/shocfgbad.err"; then pass share-group-config-refused
  else fail share-group-config-refused "rc=$rc: $(snip "$WORK/shocfgbad.out" 300) $(snip "$WORK/shocfgbad.err" 300)"; fi
  share_read() { # NAME: reads up to 10 records with a console share consumer; prints how many
    timeout -k 5 "$TOOL_TIMEOUT" "$DIR/kafka-run.sh" $CONSOLE_SHARE "${B[@]}" --topic "$t" --group "$grp" \
      --max-messages 10 --timeout-ms 20000 >"$WORK/$1.out" 2>"$WORK/$1.err" </dev/null
    grep -c '^early-' "$WORK/$1.out"
  }
  got=$(share_read shoread1)
  if [[ $got -eq 10 ]]; then pass share-auto-offset-reset-earliest
  else fail share-auto-offset-reset-earliest "read $got of the 10 records produced before the group: $(snip "$WORK/shoread1.err" 300)"; fi
  # The consumer has closed; the group is empty once its member is gone.
  for i in $(seq 1 30); do
    tool shoreset $SHARE_GROUPS "${B[@]}" --reset-offsets --group "$grp" --topic "$t" --to-earliest --execute; rc=$?
    [[ $rc -eq 0 ]] && ! grep -qi "error\|not empty\|inactive" "$WORK/shoreset.out" "$WORK/shoreset.err" && break
    sleep 1
  done
  got=$(share_read shoread2)
  if [[ $rc -eq 0 && $got -eq 10 ]]; then pass share-groups-reset-offsets
  else fail share-groups-reset-offsets "rc=$rc $(snip "$WORK/shoreset.out" 300) $(snip "$WORK/shoreset.err" 300); then read $got of 10"; fi
  for i in $(seq 1 30); do
    tool shodel $SHARE_GROUPS "${B[@]}" --delete-offsets --group "$grp" --topic "$t"; rc=$?
    [[ $rc -eq 0 ]] && ! grep -qi "error\|not empty\|inactive" "$WORK/shodel.out" "$WORK/shodel.err" && break
    sleep 1
  done
  tool shodesc $SHARE_GROUPS "${B[@]}" --describe --group "$grp"
  if [[ $rc -eq 0 ]] && ! awk -v t="$t" '$2 == t && $4 ~ /^[0-9]+$/ { found = 1 } END { exit !found }' "$WORK/shodesc.out"; then
    pass share-groups-delete-offsets
  else fail share-groups-delete-offsets "rc=$rc $(snip "$WORK/shodel.out" 300) $(snip "$WORK/shodel.err" 300); then described: $(snip "$WORK/shodesc.out" 300)"; fi
}
