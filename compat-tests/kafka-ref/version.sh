# Sourced by kafka-ref/start.sh, bench/run.sh and bench/cluster.sh (tests/faults/harness.py
# reads the same line): the Apache Kafka release the reference broker runs, whatever line
# the tools and clients are. The newest on Maven Central; KAFKA_REF_VERSION picks another.
KAFKA_REF_VERSION="${KAFKA_REF_VERSION:-4.4.0}"
