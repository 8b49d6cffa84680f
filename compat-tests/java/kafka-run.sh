#!/usr/bin/env bash
# Usage: kafka-run.sh MAIN_CLASS [args...]
# Runs a class from the Apache Kafka jars in ./lib (run setup.sh first, or let
# this script do it), e.g.
#   kafka-run.sh org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:9092 --list
# Environment:
#   KAFKA_HEAP_OPTS        JVM heap flags (default -Xmx256M)
#   KAFKA_JVM_PERFORMANCE_OPTS  (default: fast-start flags for short-lived tools)
#   KAFKA_OPTS             extra JVM flags
#   KAFKA_LOG4J_OPTS       override logging (default: quiet log4j2-quiet.xml -> stderr, WARN)
#   KAFKA_TOOLS_LOG_LEVEL  level used by log4j2-quiet.xml (default WARN)
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -lt 1 ]]; then
  echo "usage: $0 MAIN_CLASS [args...]" >&2
  exit 2
fi
"$DIR/setup.sh"
source "$DIR/lib-dir.sh"
CLASS="$1"; shift
# word-splitting of the *_OPTS variables is intended (as in Kafka's bin/kafka-run-class.sh)
# shellcheck disable=SC2086
exec java ${KAFKA_HEAP_OPTS:--Xmx256M} \
  ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto} \
  ${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$DIR/log4j2-quiet.xml} \
  ${KAFKA_OPTS:-} \
  -cp "$KAFKA_LIB/*" "$CLASS" "$@"
