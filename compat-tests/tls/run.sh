#!/usr/bin/env bash
# Real clients over TLS: the broker (started by run-all.sh) has a PLAINTEXT listener
# (BOOTSTRAP) and an SSL one (BOOTSTRAP_TLS) that requires a client certificate, made by
# scripts/make-test-certs.sh in CERTS.
#   - kcat: the smoke test (metadata, keyed records with headers, read back exactly) over
#     TLS with alice's certificate; refused without a certificate and with one from an
#     untrusted CA.
#   - the Java tools of Kafka 4.4.0 and 3.9.1 with --command-config / --producer.config /
#     --consumer.config: kafka-topics creates, kafka-console-producer writes, the console
#     consumer reads back in a group, kafka-consumer-groups describes it; a client with no
#     keystore fails.
# Prints PASS/FAIL per check and "tls: N passed, M failed"; exit 0 iff all pass.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${BOOTSTRAP_TLS:?run through run-all.sh}" "${CERTS:?}"
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

echo "tls: $passed passed, $failed failed"
[ "$failed" = 0 ]
