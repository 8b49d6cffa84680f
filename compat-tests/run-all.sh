#!/usr/bin/env bash
# Runs every real-client suite against the real cairn binary: for each suite, a fresh broker on
# a free loopback port with its own data dir, then the suite's run.sh with BOOTSTRAP pointing
# at it. Each suite's setup.sh first brings in its client (Maven jars, Debian's librdkafka
# source, a PyPI sdist) when missing.
#
# Usage: compat-tests/run-all.sh path/to/cairn [suite...]
# Prints each suite's summary, then one line: "compat: N passed, M failed" (suites).
set -uo pipefail
CAIRN=${1:?usage: run-all.sh path/to/cairn [suite...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(java java-4.4.0 java-3.9.1 java-cluster kcat security librdkafka librdkafka-2.15.1 librdkafka-2.15.1-consumer librdkafka-cluster librdkafka-2.15.1-sasl kafka-python kafka-python-secured franz-go kafkajs confluent-kafka connect)
# LIBRDKAFKA_CACHE, if the caller set it, is Debian's librdkafka's (LIBRDKAFKA_NEWEST_CACHE
# the newest release's).
rdk_cache="${LIBRDKAFKA_CACHE:-}"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

broker_pid=""
cluster_pids=()
work=$(mktemp -d /tmp/cairn-compat.XXXXXX)
stop_broker() {
  local rc=0 pid
  # A cluster's nodes stop together (one node alone cannot finish controlled shutdown
  # without the quorum); the first is the one whose liveness is checked.
  for pid in "${cluster_pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${cluster_pids[@]}"; do wait "$pid" || rc=$?; done
  cluster_pids=()
  if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
    kill -TERM "$broker_pid"
    wait "$broker_pid" || rc=$?
  fi
  broker_pid=""
  return $rc
}
# KEEP_WORK=1 keeps the brokers' logs and data for a look after the run.
trap 'stop_broker; [ "${KEEP_WORK:-0}" = 1 ] && echo "compat: kept $work" || rm -rf "$work"' EXIT

# Three combined-mode nodes on loopback ports: BOOTSTRAP names all of them. The first
# node's pid is broker_pid (checked for liveness), the others' are in cluster_pids. With
# $2=secured the brokers reach each other on a SASL_SSL listener of their own (mutual TLS,
# PLAIN as User:broker, the StandardAuthorizer on; the clients' PLAINTEXT ANONYMOUS is a
# super user too): every follower fetch and share-state call goes through it; the quorum
# runs over SASL_SSL on the controller listeners (mutual TLS, then PLAIN as controller;
# with $2=sasl, 4 s sessions there too). With $2=sasl the same, but the clients
# come in over SASL_SSL too, on a CLIENT listener (server-side TLS, PLAIN as User:admin or
# OAUTHBEARER unsecured tokens), with no PLAINTEXT listener at all, the brokers log in to
# each other with OAUTHBEARER (unsecured tokens as User:broker) rather than PLAIN, and every
# SASL session, the brokers' own included, lasts 4 s (connections.max.reauth.ms, KIP-368;
# 0142 gives its OAUTHBEARER tokens half of that, and sessions may be renewed at most once a
# second).
start_cluster() { # $1: suite name, $2: secured, sasl or nothing
  local i ports=() ctrl=() secure=() voters=()
  for i in 1 2 3; do ports+=("$(free_port)"); ctrl+=("$(free_port)"); secure+=("$(free_port)"); done
  for i in 1 2 3; do voters+=("$i@127.0.0.1:${ctrl[$((i - 1))]}"); done
  local v; v=$(IFS=,; echo "${voters[*]}")
  local certs="$work/certs"
  [ -z "${2:-}" ] || "$here/../scripts/make-test-certs.sh" "$certs" >/dev/null
  for i in 1 2 3; do
    local port=${ports[$((i - 1))]} cport=${ctrl[$((i - 1))]} sport=${secure[$((i - 1))]}
    local extra=(--override "listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
      --override "advertised.listeners=PLAINTEXT://127.0.0.1:$port")
    if [ -n "${2:-}" ]; then
      local clients=PLAINTEXT supers="User:broker;User:ANONYMOUS"
      if [ "$2" = sasl ]; then
        clients=CLIENT supers="User:broker;User:admin"
        extra=(--override listener.name.client.sasl.enabled.mechanisms=PLAIN,OAUTHBEARER
          --override 'listener.name.client.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret";'
          --override 'listener.name.client.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";'
          --override connections.max.reauth.ms=4000
          --override listener.name.sasl_ssl.sasl.enabled.mechanisms=OAUTHBEARER
          --override 'listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker";')
      else
        extra=()
      fi
      extra+=(--override "listeners=$clients://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sport,CONTROLLER://127.0.0.1:$cport"
        --override "advertised.listeners=$clients://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sport"
        --override "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENT:SASL_SSL,SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL"
        --override inter.broker.listener.name=SASL_SSL
        --override "ssl.keystore.location=$certs/broker.p12" --override ssl.keystore.password=broker-pass
        --override "ssl.truststore.location=$certs/ca.p12" --override ssl.truststore.password=trust-pass
        --override listener.name.sasl_ssl.ssl.client.auth=required
        --override listener.name.controller.ssl.client.auth=required
        --override sasl.enabled.mechanisms=PLAIN
        --override "sasl.mechanism.inter.broker.protocol=$([ "$2" = sasl ] && echo OAUTHBEARER || echo PLAIN)"
        --override 'listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret";'
        --override listener.name.controller.sasl.enabled.mechanisms=PLAIN --override sasl.mechanism.controller.protocol=PLAIN
        --override 'listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="controller" password="controller-secret" user_controller="controller-secret";'
        --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
        --override "super.users=$supers")
    fi
    "$CAIRN" --override "node.id=$i" --override "process.roles=broker,controller" \
      --override "controller.quorum.voters=$v" --override "controller.listener.names=CONTROLLER" \
      "${extra[@]}" \
      --override "log.dirs=$work/$1-data-$i" --override metrics.listener=none \
      --override num.partitions=4 --override group.min.session.timeout.ms=1000 \
      >"$work/$1-broker-$i.log" 2>&1 &
    if [ "$i" = 1 ]; then broker_pid=$!; else cluster_pids+=($!); fi
  done
  local p
  for p in "${ports[@]}"; do
    local up=no
    for _ in $(seq 1 400); do
      if (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null; then up=yes; break; fi
      sleep 0.05
    done
    if [ "$up" = no ]; then
      echo "compat: the cairn cluster did not start for $1:"; tail -20 "$work/$1-broker-"*.log
      return 1
    fi
  done
  export BOOTSTRAP="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
}

start_broker() { # $1: suite name
  local port; port=$(free_port)
  # librdkafka's and kafka-python's tests assume the trivup default of 4 partitions for
  # auto-created topics; kafka-python's also assigns new partitions to broker 0.
  # kafka-python's test_group also joins with a 3 s session timeout (its fixture lowers
  # group.min.session.timeout.ms to 1000, as validate-ref.sh does for Apache Kafka).
  # The Java suite's find-hanging check needs a hanging transaction, which KIP-890 part 1
  # verification prevents; its Java 4.x producers (transaction version 2) are checked anyway.
  # The cleaner looks for dirty compacted logs every second rather than Kafka's default 15
  # (kafka-ref/start.sh sets the same): the suites that wait for compaction (librdkafka's
  # 0077, the Java compaction checks) then wait seconds, not minutes.
  local partitions=1 node=1 min_session=6000 verify=true
  case "$1" in
    librdkafka | librdkafka-2.*) partitions=4 ;;
    kafka-python*) partitions=4 node=0 min_session=1000 ;;
    java | java-*) verify=false ;;
  esac
  local data="$work/$1-data"
  # The security suite: beside PLAINTEXT, an SSL listener requiring client certificates
  # (scripts/make-test-certs.sh makes them), a SASL_PLAINTEXT one with PLAIN, SCRAM and
  # OAUTHBEARER (unsecured tokens), where SCRAM-SHA-512 sessions last 3 s (KIP-368
  # re-authentication; no other check uses that pair), and a SASL_SSL one with SCRAM.
  local listeners="PLAINTEXT://127.0.0.1:$port" secured=()
  if [ "$1" = security ]; then
    # The ACL matrix starts its own Cairn (and Kafka) with the authorizer.
    export CAIRN
    local tls_port sasl_port sasl_ssl_port
    tls_port=$(free_port); sasl_port=$(free_port); sasl_ssl_port=$(free_port)
    export CERTS="$work/certs" BOOTSTRAP_TLS="127.0.0.1:$tls_port"
    export BOOTSTRAP_SASL="127.0.0.1:$sasl_port" BOOTSTRAP_SASL_SSL="127.0.0.1:$sasl_ssl_port"
    "$here/../scripts/make-test-certs.sh" "$CERTS" || return 1
    listeners="$listeners,SSL://127.0.0.1:$tls_port,SASL_PLAINTEXT://127.0.0.1:$sasl_port"
    listeners="$listeners,SASL_SSL://127.0.0.1:$sasl_ssl_port"
    secured=(--override "ssl.keystore.location=$CERTS/broker.p12"
      --override ssl.keystore.password=broker-pass --override ssl.truststore.type=PEM
      --override "ssl.truststore.location=$CERTS/ca.pem" --override ssl.client.auth=required
      --override listener.name.sasl_ssl.ssl.client.auth=none
      --override sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
      --override 'listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";'
      --override listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
      --override listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms=3000
      --override 'listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" user_alice="alice-secret";')
  fi
  # kafka-python's SASL and SSL tests (kafka-python/cairn_kp_secured.py): a SASL_PLAINTEXT
  # listener with PLAIN (alice in its login module) and both SCRAMs, and an SSL one.
  if [ "$1" = kafka-python-secured ]; then
    local tls_port sasl_port
    tls_port=$(free_port); sasl_port=$(free_port)
    "$here/../scripts/make-test-certs.sh" "$work/certs" >/dev/null || return 1
    mkdir -p "$work/kp-ssl" && cp "$work/certs/ca.pem" "$work/kp-ssl/ca-cert"
    export KP_SECURED=1 KP_SSL_DIR="$work/kp-ssl" KP_SSL_BOOTSTRAP="127.0.0.1:$tls_port"
    export KP_SASL_BOOTSTRAP="127.0.0.1:$sasl_port"
    listeners="$listeners,SSL://127.0.0.1:$tls_port,SASL_PLAINTEXT://127.0.0.1:$sasl_port"
    secured=(--override "ssl.keystore.location=$work/certs/broker.p12"
      --override ssl.keystore.password=broker-pass
      --override sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
      --override 'listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";')
  fi
  "$CAIRN" --override "listeners=$listeners" --override "log.dirs=$data" "${secured[@]}" \
    --override "advertised.listeners=$listeners" \
    --override metrics.listener=none --override "num.partitions=$partitions" --override "node.id=$node" \
    --override "group.min.session.timeout.ms=$min_session" \
    --override "transaction.partition.verification.enable=$verify" \
    --override log.cleaner.backoff.ms=1000 \
    >"$work/$1-broker.log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 1 200); do
    if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
      export BOOTSTRAP="127.0.0.1:$port"
      return 0
    fi
    kill -0 "$broker_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "compat: cairn did not start for $1:"; cat "$work/$1-broker.log"
  return 1
}

passed=0
failed=0
failed_names=()
# "suite seconds" (setup included), printed at the end to keep CI's time budget in view
timings=()
# the Java check groups but Kafka Streams (ONLY, if set, is the caller's choice)
no_streams='topics|console|get_offsets|configs|delete_records|verifiable|groups|transactions|share|features'
for s in "${suites[@]}"; do
  unset ALLOW_LIST KAFKA_VERSION PARALLEL LIBRDKAFKA_RELEASE TEST_KAFKA_VERSION EXPECTED_FAILURES TEST_CONSUMER_GROUP_PROTOCOL
  unset TEST_CONF_EXTRA SKIP_FAILS KP_SECURED
  if [[ -n "$rdk_cache" ]]; then export LIBRDKAFKA_CACHE="$rdk_cache"; else unset LIBRDKAFKA_CACHE; fi
  suite_only="${ONLY:-}"
  case "$s" in
    # The share group checks on a three-node cluster, with the newest client: a share
    # partition's leader and its share coordinator are then mostly different brokers,
    # which reach each other over SASL_SSL (start_cluster's "secured").
    java-cluster)
      setup="$here/java/setup.sh"; run="$here/java/run.sh"
      export KAFKA_VERSION=4.4.0
      suite_only="${ONLY:-share}" ;;
    # The Java checks with another Kafka line's tools and client (java/lib-dir.sh).
    java-*)
      setup="$here/java/setup.sh"; run="$here/java/run.sh"
      export KAFKA_VERSION="${s#java-}"
      # Kafka Streams runs with the newest line (java-4.4.0) only, to keep CI in budget; the
      # older lines (java-3.9.1 in CI) run every other check, compaction included (80 s,
      # mostly waiting for the cleaner's 15 s backoff); the plain `java` suite leaves
      # compaction to these two.
      [[ "$KAFKA_VERSION" == 4.4.* ]] || suite_only="${ONLY:-$no_streams|compaction}" ;;
    kcat) setup="$here/librdkafka/setup.sh"; run="$here/librdkafka/smoke-kcat.sh" ;;
    librdkafka-cluster)
      setup="$here/librdkafka/setup.sh"; run="$here/librdkafka/run.sh"
      export ALLOW_LIST="$here/librdkafka/cluster-allow-list.txt" ;;
    java)
      setup="$here/java/setup.sh"; run="$here/java/run.sh"
      suite_only="${ONLY:-$no_streams}" ;;
    # Three tests at a time: most of them wait on timeouts, so this cuts the suite's 13
    # minutes to under 5 (7 at two); a test that fails is run again alone (FLAKY) before it
    # counts.
    librdkafka)
      setup="$here/librdkafka/setup.sh"; run="$here/librdkafka/run.sh"
      export PARALLEL="${LIBRDKAFKA_PARALLEL:-3}" ;;
    # The newest librdkafka release's own suite (KIP-848 groups, the newer admin APIs, the
    # share consumer), gated as for Apache Kafka 4.4, beside Debian's 2.0.2 above: its allow
    # list is what passes against Apache Kafka 4.4.0 (librdkafka/README.md).
    # The same release's consumer-group tests with the KIP-848 protocol (group.protocol=
    # consumer), which librdkafka's suite otherwise runs with the classic one.
    # The same release's tests over SASL_SSL (allow-list-sasl.txt) on a three-node cluster
    # whose brokers also reach each other over SASL_SSL: TLS, PLAIN and OAUTHBEARER logins,
    # and KIP-368 re-authentication every 4 s under producers, consumers, share consumers and
    # transactions (0142). A skipped test counts as failed here.
    librdkafka-2.*-sasl)
      setup="$here/librdkafka/setup.sh"; run="$here/librdkafka/run.sh"
      release="${s#librdkafka-}"; release="${release%-sasl}"
      export LIBRDKAFKA_RELEASE="$release" TEST_KAFKA_VERSION=4.4.0 SKIP_FAILS=1
      export LIBRDKAFKA_CACHE="${LIBRDKAFKA_NEWEST_CACHE:-$HOME/.cache/cairn-librdkafka-$LIBRDKAFKA_RELEASE}"
      export ALLOW_LIST="$here/librdkafka/allow-list-sasl.txt"
      export EXPECTED_FAILURES="$here/librdkafka/expected-failures-sasl.txt"
      export TEST_CONF_EXTRA="security.protocol=SASL_SSL
ssl.ca.location=$work/certs/ca.pem
sasl.mechanism=PLAIN
sasl.username=admin
sasl.password=admin-secret" ;;
    librdkafka-2.*-consumer)
      setup="$here/librdkafka/setup.sh"; run="$here/librdkafka/run.sh"
      release="${s#librdkafka-}"; release="${release%-consumer}"
      export LIBRDKAFKA_RELEASE="$release" TEST_KAFKA_VERSION=4.4.0 TEST_CONSUMER_GROUP_PROTOCOL=consumer
      export LIBRDKAFKA_CACHE="${LIBRDKAFKA_NEWEST_CACHE:-$HOME/.cache/cairn-librdkafka-$LIBRDKAFKA_RELEASE}"
      export ALLOW_LIST="$here/librdkafka/allow-list-$release-consumer.txt"
      export EXPECTED_FAILURES="$here/librdkafka/expected-failures-$release-consumer.txt"
      export PARALLEL="${LIBRDKAFKA_PARALLEL:-3}" ;;
    librdkafka-2.*)
      setup="$here/librdkafka/setup.sh"; run="$here/librdkafka/run.sh"
      export LIBRDKAFKA_RELEASE="${s#librdkafka-}" TEST_KAFKA_VERSION=4.4.0
      export LIBRDKAFKA_CACHE="${LIBRDKAFKA_NEWEST_CACHE:-$HOME/.cache/cairn-librdkafka-$LIBRDKAFKA_RELEASE}"
      export ALLOW_LIST="$here/librdkafka/allow-list-$LIBRDKAFKA_RELEASE.txt"
      export EXPECTED_FAILURES="$here/librdkafka/expected-failures-$LIBRDKAFKA_RELEASE.txt"
      export PARALLEL="${LIBRDKAFKA_PARALLEL:-3}" ;;
    kafka-python-secured) setup="$here/kafka-python/setup.sh"; run="$here/kafka-python/run.sh" ;;
    *) setup="$here/$s/setup.sh"; run="$here/$s/run.sh" ;;
  esac
  echo "=== $s: setup"
  suite_start=$(date +%s)
  if ! "$setup"; then
    echo "=== $s: setup FAILED"
    failed=$((failed + 1)); failed_names+=("$s(setup)")
    continue
  fi
  echo "=== $s: run"
  start=start_broker
  how=
  case "$s" in
    librdkafka-cluster) start=start_cluster ;;
    java-cluster) start=start_cluster how=secured ;;
    librdkafka-*-sasl) start=start_cluster how=sasl ;;
  esac
  $start "$s" $how || { failed=$((failed + 1)); failed_names+=("$s(start)"); continue; }
  ONLY="$suite_only" "$run" 2>&1 | tee "$work/$s.out"
  rc=${PIPESTATUS[0]}
  alive=yes
  kill -0 "$broker_pid" 2>/dev/null || alive=no
  stop_broker; stop_rc=$?
  if [ "$alive" = no ]; then
    echo "=== $s: the broker DIED during the suite; its log:"; tail -50 "$work/$s-broker"*.log
    rc=1
  elif [ "$stop_rc" != 0 ]; then
    echo "=== $s: the broker exited $stop_rc on SIGTERM; its log:"; tail -50 "$work/$s-broker"*.log
    rc=1
  fi
  if cat "$work/$s-broker"*.log | grep -v openraft | grep -q -E "panicked|ERROR"; then
    echo "=== $s: the broker logged errors:"; cat "$work/$s-broker"*.log | grep -v openraft | grep -E "panicked|ERROR" | head -20
  fi
  if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names+=("$s"); fi
  timings+=("$s $(($(date +%s) - suite_start))s")
done
# CI keeps only the end of the output: repeat what failed, with the end of each failed test's
# log where the suite names one ("(log: path)").
for s in "${failed_names[@]}"; do
  [ -f "$work/$s.out" ] || continue
  echo "=== $s: failures"
  grep -E '^(FAIL|FAILED|--- FAIL|not ok)|[0-9]+ failed' "$work/$s.out" | head -20
  grep -oE '\(log: [^)]+\)' "$work/$s.out" | head -3 | sed -E 's/^\(log: (.*)\)$/\1/' | while read -r log; do
    echo "--- end of $log"; tail -25 "$log" 2>/dev/null | cut -c1-300
  done
done
echo "compat: time per suite (setup included): ${timings[*]}"
[ ${#failed_names[@]} -eq 0 ] || echo "compat: failing suites: ${failed_names[*]}"
echo "compat: $passed passed, $failed failed"
[ "$failed" = 0 ]
