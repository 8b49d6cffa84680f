#!/usr/bin/env bash
# Real clients over TLS and SASL against one broker (started by run-all.sh) with these
# listeners: PLAINTEXT (BOOTSTRAP), SSL requiring a client certificate (BOOTSTRAP_TLS),
# SASL_PLAINTEXT with PLAIN and SCRAM (BOOTSTRAP_SASL), SASL_SSL with SCRAM
# (BOOTSTRAP_SASL_SSL). Certificates: scripts/make-test-certs.sh, in CERTS.
#   TLS:
#   - kcat: the smoke test (metadata, keyed records with headers, read back exactly) with
#     alice's certificate; refused without a certificate and with an untrusted one.
#   - the Java tools of Kafka 4.4.0 and 3.9.1 with --command-config / --producer.config /
#     --consumer.config: kafka-topics creates, kafka-console-producer writes, the console
#     consumer reads back in a group, kafka-consumer-groups describes it; a client with no
#     keystore fails.
#   SASL:
#   - kafka-configs --entity-type users makes SCRAM users (over PLAINTEXT);
#   - OAUTHBEARER with unsecured tokens: kcat's smoke test, kafka-topics 4.4.0;
#   - kcat: PLAIN (JAAS users) and SCRAM-SHA-256 on SASL_PLAINTEXT, SCRAM-SHA-512 on
#     SASL_SSL, the smoke test each; a wrong password refused;
#   - the Java tools of 4.4.0 and 3.9.1 over SASL_SSL with SCRAM-SHA-256: produce and
#     consume in a group;
#   - a user whose credential kafka-configs deletes can no longer log in;
#   - KIP-368: the Java 4.4.0 producer and librdkafka 2.16 (confluent-kafka) re-authenticate
#     on 3 s sessions and every record is acknowledged;
#   - franz-go (franz-go/sasl.go): kadm makes a SCRAM-SHA-512 user, produce and consume
#     as it over SASL_SSL, a wrong password and the user once deleted refused.
# Prints PASS/FAIL per check and "security: N passed, M failed"; exit 0 iff all pass.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${BOOTSTRAP_TLS:?run through run-all.sh}" "${BOOTSTRAP_SASL:?}" "${BOOTSTRAP_SASL_SSL:?}" "${CERTS:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

kcat_tls="-X security.protocol=ssl -X ssl.ca.location=$CERTS/ca.pem"
alice="-X ssl.certificate.location=$CERTS/alice.pem -X ssl.key.location=$CERTS/alice.key"
mallory="-X ssl.certificate.location=$CERTS/mallory.pem -X ssl.key.location=$CERTS/mallory.key"

# kcat: the smoke test over TLS.
if out=$(BOOTSTRAP=$BOOTSTRAP_TLS KCAT_OPTS="$kcat_tls $alice" "$here/../librdkafka/smoke-kcat.sh" 2>&1); then
  pass kcat-smoke-tls
else
  fail kcat-smoke-tls "$out"
fi
# kcat without a certificate, or with mallory's, gets no metadata.
for who in none mallory; do
  opts="$kcat_tls"
  [ "$who" = mallory ] && opts="$opts $mallory"
  # shellcheck disable=SC2086
  if timeout 30 kcat -b "$BOOTSTRAP_TLS" -L -m 5 $opts >"$tmp/kcat-$who" 2>&1; then
    fail "kcat-refused-$who" "metadata was served: $(head -3 "$tmp/kcat-$who")"
  else
    pass "kcat-refused-$who"
  fi
done

# The Java tools, with each Kafka line.
cat >"$tmp/alice.properties" <<PROPS
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=$CERTS/ca.pem
ssl.keystore.type=PKCS12
ssl.keystore.location=$CERTS/alice.p12
ssl.keystore.password=alice-pass
PROPS
cat >"$tmp/anonymous.properties" <<PROPS
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=$CERTS/ca.pem
PROPS
for version in 4.4.0 3.9.1; do
  run() { KAFKA_VERSION=$version timeout 120 "$here/../java/kafka-run.sh" "$@"; }
  topic="tls-java-${version//./-}"
  group="tls-group-${version//./-}"
  cfg="$tmp/alice.properties"
  if run org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP_TLS" \
      --command-config "$cfg" --create --topic "$topic" --partitions 2 >"$tmp/create" 2>&1; then
    pass "java-$version-topics-create"
  else
    fail "java-$version-topics-create" "$(tail -3 "$tmp/create")"
  fi
  producer=org.apache.kafka.tools.ConsoleProducer
  [ "$version" = 3.9.1 ] && producer=kafka.tools.ConsoleProducer
  seq 1 50 | sed 's/^/record-/' >"$tmp/in"
  if run "$producer" --bootstrap-server "$BOOTSTRAP_TLS" --producer.config "$cfg" \
      --topic "$topic" <"$tmp/in" >"$tmp/produce" 2>&1; then
    pass "java-$version-console-producer"
  else
    fail "java-$version-console-producer" "$(tail -3 "$tmp/produce")"
  fi
  if run org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$BOOTSTRAP_TLS" \
      --consumer.config "$cfg" --topic "$topic" --group "$group" --from-beginning \
      --max-messages 50 --timeout-ms 60000 >"$tmp/out" 2>"$tmp/consume.err" \
      && [ "$(grep '^record-' "$tmp/out" | sort)" = "$(sort "$tmp/in")" ]; then
    pass "java-$version-console-consumer"
  else
    fail "java-$version-console-consumer" "$(grep -c '^record-' "$tmp/out") of 50 read; $(tail -3 "$tmp/consume.err")"
  fi
  if run org.apache.kafka.tools.consumer.group.ConsumerGroupCommand \
      --bootstrap-server "$BOOTSTRAP_TLS" --command-config "$cfg" --describe --group "$group" \
      >"$tmp/describe" 2>&1 && grep -q "$topic" "$tmp/describe"; then
    pass "java-$version-consumer-groups-describe"
  else
    fail "java-$version-consumer-groups-describe" "$(tail -3 "$tmp/describe")"
  fi
  # No keystore: the broker requires a certificate, and the tool says it cannot connect.
  if run org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP_TLS" \
      --command-config "$tmp/anonymous.properties" --list >"$tmp/anon" 2>&1; then
    fail "java-$version-refused-without-certificate" "listed: $(head -3 "$tmp/anon")"
  else
    pass "java-$version-refused-without-certificate"
  fi
done

# ---------------------------------------------------------------- SASL
configs() { KAFKA_VERSION=4.4.0 timeout 120 "$here/../java/kafka-run.sh" org.apache.kafka.tools.ConfigCommand --bootstrap-server "$BOOTSTRAP" "$@"; }
if configs --alter --entity-type users --entity-name carol \
    --add-config 'SCRAM-SHA-256=[password=carol-secret]' >"$tmp/scram1" 2>&1 \
  && configs --alter --entity-type users --entity-name carol \
    --add-config 'SCRAM-SHA-512=[iterations=8192,password=carol-secret]' >>"$tmp/scram1" 2>&1 \
  && configs --alter --entity-type users --entity-name dave \
    --add-config 'SCRAM-SHA-256=[password=dave-secret]' >>"$tmp/scram1" 2>&1; then
  pass scram-users-created
else
  fail scram-users-created "$(tail -3 "$tmp/scram1")"
fi

# kcat_sasl NAME BOOTSTRAP MECHANISM USER PASSWORD [more -X options]: the kcat smoke test.
kcat_sasl() {
  local name=$1 bootstrap=$2 mechanism=$3 user=$4 password=$5; shift 5
  local opts="-X sasl.mechanisms=$mechanism -X sasl.username=$user -X sasl.password=$password $*"
  if out=$(BOOTSTRAP=$bootstrap KCAT_OPTS="$opts" "$here/../librdkafka/smoke-kcat.sh" 2>&1); then
    pass "$name"
  else
    fail "$name" "$out"
  fi
}
kcat_sasl kcat-plain "$BOOTSTRAP_SASL" PLAIN alice alice-secret -X security.protocol=sasl_plaintext
kcat_sasl kcat-scram-sha-256 "$BOOTSTRAP_SASL" SCRAM-SHA-256 carol carol-secret -X security.protocol=sasl_plaintext
kcat_sasl kcat-scram-sha-512-over-tls "$BOOTSTRAP_SASL_SSL" SCRAM-SHA-512 carol carol-secret \
  -X security.protocol=sasl_ssl -X "ssl.ca.location=$CERTS/ca.pem"
# kcat_refused NAME BOOTSTRAP MECHANISM USER PASSWORD: no metadata for this login.
# OAUTHBEARER: librdkafka makes an unsecured token for alice; the Java 4.4.0 tools' default
# login module makes one too (unsecuredLoginStringClaim_sub).
if out=$(BOOTSTRAP=$BOOTSTRAP_SASL KCAT_OPTS="-X security.protocol=sasl_plaintext -X sasl.mechanisms=OAUTHBEARER -X enable.sasl.oauthbearer.unsecure.jwt=true -X sasl.oauthbearer.config=principal=alice" "$here/../librdkafka/smoke-kcat.sh" 2>&1); then
  pass kcat-oauthbearer
else
  fail kcat-oauthbearer "$out"
fi
cat >"$tmp/oauth.properties" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=OAUTHBEARER
sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";
PROPS
if KAFKA_VERSION=4.4.0 timeout 120 "$here/../java/kafka-run.sh" org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "$BOOTSTRAP_SASL" --command-config "$tmp/oauth.properties" \
    --create --topic oauth-topic --partitions 2 >"$tmp/oauth-create" 2>&1 \
  && KAFKA_VERSION=4.4.0 timeout 120 "$here/../java/kafka-run.sh" org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "$BOOTSTRAP_SASL" --command-config "$tmp/oauth.properties" \
    --list >"$tmp/oauth-list" 2>&1 \
  && grep -qx oauth-topic "$tmp/oauth-list"; then
  pass java-4.4.0-oauthbearer-topics
else
  fail java-4.4.0-oauthbearer-topics "$(head -3 "$tmp/oauth-create" "$tmp/oauth-list" 2>/dev/null | tr -s ' \n' ' ' | cut -c1-400)"
fi

kcat_refused() {
  if timeout 30 kcat -b "$2" -X security.protocol=sasl_plaintext -X "sasl.mechanisms=$3" \
      -X "sasl.username=$4" -X "sasl.password=$5" -L -m 5 >"$tmp/$1" 2>&1; then
    fail "$1" "metadata was served: $(head -3 "$tmp/$1")"
  elif ! grep -q "Authentication failed\|Invalid username or password" "$tmp/$1"; then
    fail "$1" "refused, but not as an authentication failure: $(head -3 "$tmp/$1")"
  else
    pass "$1"
  fi
}
kcat_refused kcat-plain-wrong-password "$BOOTSTRAP_SASL" PLAIN alice wrong
kcat_refused kcat-scram-wrong-password "$BOOTSTRAP_SASL" SCRAM-SHA-256 carol wrong
kcat_refused kcat-scram-unknown-user "$BOOTSTRAP_SASL" SCRAM-SHA-256 nobody x

# The Java tools over SASL_SSL with SCRAM-SHA-256.
cat >"$tmp/carol.properties" <<PROPS
security.protocol=SASL_SSL
ssl.truststore.type=PEM
ssl.truststore.location=$CERTS/ca.pem
sasl.mechanism=SCRAM-SHA-256
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="carol" password="carol-secret";
PROPS
for version in 4.4.0 3.9.1; do
  run() { KAFKA_VERSION=$version timeout 120 "$here/../java/kafka-run.sh" "$@"; }
  topic="sasl-java-${version//./-}"
  cfg="$tmp/carol.properties"
  producer=org.apache.kafka.tools.ConsoleProducer
  [ "$version" = 3.9.1 ] && producer=kafka.tools.ConsoleProducer
  seq 1 30 | sed 's/^/scram-/' >"$tmp/sin"
  if run org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP_SASL_SSL" \
      --command-config "$cfg" --create --topic "$topic" --partitions 2 >"$tmp/screate" 2>&1 \
    && run "$producer" --bootstrap-server "$BOOTSTRAP_SASL_SSL" --producer.config "$cfg" \
      --topic "$topic" <"$tmp/sin" >"$tmp/sproduce" 2>&1 \
    && run org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$BOOTSTRAP_SASL_SSL" \
      --consumer.config "$cfg" --topic "$topic" --group "sasl-$version" --from-beginning \
      --max-messages 30 --timeout-ms 60000 >"$tmp/sout" 2>"$tmp/sconsume.err" \
    && [ "$(grep '^scram-' "$tmp/sout" | sort)" = "$(sort "$tmp/sin")" ]; then
    pass "java-$version-scram-over-sasl-ssl"
  else
    fail "java-$version-scram-over-sasl-ssl" "$(grep -c '^scram-' "$tmp/sout" 2>/dev/null) of 30 read; $(tail -2 "$tmp/screate" "$tmp/sproduce" "$tmp/sconsume.err" 2>/dev/null | tr '\n' ' ' | cut -c1-400)"
  fi
done

# KIP-368: SCRAM-SHA-512 sessions on SASL_PLAINTEXT last 3 s (run-all.sh). The Java
# 4.4.0 producer re-authenticates on its open connections through a 10 s perf run, and
# every record is acknowledged; so does librdkafka 2.16 (reauth.py, confluent-kafka's
# bundled build). Debian's librdkafka 2.0.2 predates KIP-368: its connection would be
# closed when the session ends, as Kafka closes it, so it is not asked to.
cat >"$tmp/reauth.properties" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="carol" password="carol-secret";
PROPS
if KAFKA_VERSION=4.4.0 timeout 120 "$here/../java/kafka-run.sh" org.apache.kafka.tools.ProducerPerformance \
    --topic reauth-java --num-records 2000 --record-size 100 --throughput 200 \
    --producer-props bootstrap.servers="$BOOTSTRAP_SASL" acks=all \
    --producer.config "$tmp/reauth.properties" --print-metrics >"$tmp/reauth-java" 2>&1 \
  && grep -q '^2000 records sent' "$tmp/reauth-java"; then
  reauths=$(awk -F: '/^producer-metrics:successful-reauthentication-total:/ {gsub(/ /, "", $NF); print int($NF)}' "$tmp/reauth-java")
  refused=$(awk -F: '/^producer-metrics:failed-reauthentication-total:/ {gsub(/ /, "", $NF); print int($NF)}' "$tmp/reauth-java")
  if [ "${reauths:-0}" -ge 1 ] && [ "${refused:-1}" = 0 ]; then
    pass "java-4.4.0-reauthenticates-$reauths-times"
  else
    fail java-4.4.0-reauthenticates "re-authentications ${reauths:-none}, failed ${refused:-none}"
  fi
else
  fail java-4.4.0-reauthenticates "$(grep -v '^producer-\|^kafka-metrics\|^app-info' "$tmp/reauth-java" | tail -4 | tr '\n' ' ' | cut -c1-500)"
fi
out=$("$here/../confluent-kafka/.venv/bin/python" "$here/reauth.py" "$BOOTSTRAP_SASL" 2>&1)
case "$out" in
  PASS\ *) pass "${out#PASS }" ;;
  *) fail librdkafka-reauthenticates "$(echo "$out" | tail -3 | tr '\n' ' ' | cut -c1-500)" ;;
esac

# dave logs in; his credential is deleted; he no longer can.
kcat_sasl kcat-scram-before-delete "$BOOTSTRAP_SASL" SCRAM-SHA-256 dave dave-secret -X security.protocol=sasl_plaintext
if configs --alter --entity-type users --entity-name dave --delete-config SCRAM-SHA-256 >"$tmp/sdel" 2>&1; then
  kcat_refused kcat-scram-after-delete "$BOOTSTRAP_SASL" SCRAM-SHA-256 dave dave-secret
else
  fail kcat-scram-after-delete "kafka-configs --delete-config: $(tail -3 "$tmp/sdel")"
fi

# franz-go (sasl.go): kadm makes and deletes a SCRAM-SHA-512 user; produce and consume as
# that user over SASL_SSL; a wrong password and the deleted user refused.
franz="${FRANZ_GO_CACHE:-$HOME/.cache/cairn-franz-go}/franz-go-checks"
mkdir -p "$(dirname "$franz")"
if ! (cd "$here/../franz-go" && go build -mod=readonly -o "$franz" .) >"$tmp/franz-build" 2>&1; then
  fail franz-go-build "$(tail -5 "$tmp/franz-build")"
else
  "$franz" -sasl-admin "$BOOTSTRAP" -sasl-bootstrap "$BOOTSTRAP_SASL_SSL" -sasl-ca "$CERTS/ca.pem" >"$tmp/franz" 2>&1
  while read -r verdict name rest; do
    case "$verdict" in
      PASS) pass "franz-go-$name" ;;
      FAIL) fail "franz-go-${name%:}" "$rest" ;;
    esac
  done <"$tmp/franz"
  grep -q "^franz-go: [0-9]* passed, 0 failed" "$tmp/franz" || fail franz-go "$(tail -3 "$tmp/franz")"
fi

# The ACL matrix (franz-go/acls.go): the same principals, ACLs and requests against a
# Cairn and an Apache Kafka (kafka-ref, the newest release) that both run the
# StandardAuthorizer, with User:ANONYMOUS on PLAINTEXT as super user and PLAIN users on
# SASL_PLAINTEXT. Every answer must be Kafka's.
acl_props() { # PORT SASL_PORT: the listeners and security settings, as server.properties lines
  cat <<P
listeners=PLAINTEXT://127.0.0.1:$1,CONTROLLER://127.0.0.1:$(($1 + 1)),SASL_PLAINTEXT://127.0.0.1:$2
advertised.listeners=PLAINTEXT://127.0.0.1:$1,SASL_PLAINTEXT://127.0.0.1:$2
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
P
}
# Two free ports in a row (Kafka's controller listener is PORT+1).
port_pair() { "$here/../kafka-ref/port-pair.sh"; }
if [ -x "$franz" ] && [ -n "${CAIRN:-}" ]; then
  kport=$(port_pair); ksasl=$(port_pair)
  cport=$(port_pair); csasl=$(port_pair)
  KAFKA_REF_EXTRA_PROPS="$(acl_props "$kport" "$ksasl")" \
    "$here/../kafka-ref/start.sh" "$kport" "$tmp/kafka-acl" >"$tmp/kafka-acl-start" 2>&1
  # Cairn reads the same lines as overrides (it has no controller listener here).
  overrides=()
  while IFS= read -r line; do
    case "$line" in
      listeners=*) line="listeners=PLAINTEXT://127.0.0.1:$cport,SASL_PLAINTEXT://127.0.0.1:$csasl" ;;
      listener.security.protocol.map=*) continue ;;
    esac
    overrides+=(--override "$line")
  done < <(acl_props "$cport" "$csasl")
  "$CAIRN" "${overrides[@]}" --override "log.dirs=$tmp/cairn-acl" --override metrics.listener=none \
    >"$tmp/cairn-acl.log" 2>&1 &
  cairn_acl=$!
  for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$cport") 2>/dev/null && break; sleep 0.05; done
  "$franz" -acl-admin "127.0.0.1:$kport" -acl-sasl "127.0.0.1:$ksasl" >"$tmp/matrix-kafka" 2>&1
  krc=$?
  "$franz" -acl-admin "127.0.0.1:$cport" -acl-sasl "127.0.0.1:$csasl" >"$tmp/matrix-cairn" 2>&1
  crc=$?
  # kafka-acls (4.4.0 and 3.9.1) adds, lists and removes an ACL on Cairn.
  for version in 4.4.0 3.9.1; do
    acls() { KAFKA_VERSION=$version timeout 120 "$here/../java/kafka-run.sh" org.apache.kafka.tools.AclCommand --bootstrap-server "127.0.0.1:$cport" "$@"; }
    [ "$version" = 3.9.1 ] && acls() { KAFKA_VERSION=$version timeout 120 "$here/../java/kafka-run.sh" kafka.admin.AclCommand --bootstrap-server "127.0.0.1:$cport" "$@"; }
    rm -f "$tmp"/acl-*
    if acls --add --allow-principal User:dave --operation Read --operation Describe --topic m-acl-tool --group g-tool >"$tmp/acl-add" 2>&1 \
      && acls --list --topic m-acl-tool >"$tmp/acl-list" 2>&1 \
      && grep -q 'principal=User:dave, host=\*, operation=READ, permissionType=ALLOW' "$tmp/acl-list" \
      && grep -q 'principal=User:dave, host=\*, operation=DESCRIBE, permissionType=ALLOW' "$tmp/acl-list" \
      && acls --remove --force --allow-principal User:dave --operation Read --operation Describe --topic m-acl-tool --group g-tool >"$tmp/acl-remove" 2>&1 \
      && acls --list --principal User:dave >"$tmp/acl-after" 2>&1 \
      && ! grep -q 'principal=User:dave' "$tmp/acl-after"; then
      pass "kafka-acls-$version-add-list-remove"
    else
      fail "kafka-acls-$version-add-list-remove" "$(head -3 "$tmp"/acl-* 2>/dev/null | tr -s ' \n' ' ' | cut -c1-600)"
    fi
  done
  kill -TERM "$cairn_acl"; wait "$cairn_acl"
  "$here/../kafka-ref/stop.sh" "$tmp/kafka-acl" >/dev/null 2>&1
  if [ "$krc" != 0 ] || [ "$crc" != 0 ]; then
    fail acl-matrix "kafka: $(tail -2 "$tmp/matrix-kafka" "$tmp/kafka-acl-start" | tr '\n' ' '); cairn: $(tail -2 "$tmp/matrix-cairn" | tr '\n' ' ')"
  elif diff "$tmp/matrix-kafka" "$tmp/matrix-cairn" >"$tmp/matrix-diff"; then
    pass "acl-matrix-$(wc -l <"$tmp/matrix-kafka")-answers-as-kafka"
  else
    fail acl-matrix "answers differ from Kafka's (< Kafka, > Cairn): $(grep '^[<>]' "$tmp/matrix-diff" | tr '\n' ';')"
  fi
else
  fail acl-matrix "franz-go did not build or CAIRN is not set"
fi

echo "security: $passed passed, $failed failed"
[ "$failed" = 0 ]
