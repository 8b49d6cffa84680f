#!/usr/bin/env bash
# KAFKA_PATH/bin/kafka-topics.sh for librdkafka's tests that run Kafka's shell tools
# (test_kafka_topics: 0045, 0077): Kafka's TopicCommand from the newest line's Maven jars
# (compat-tests/java, KAFKA_VERSION=4.4.0; kafka-run.sh downloads them when missing).
# run.sh points KAFKA_PATH here and BROKERS at the broker under test.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
KAFKA_VERSION=4.4.0 exec "$here/java/kafka-run.sh" org.apache.kafka.tools.TopicCommand "$@"
