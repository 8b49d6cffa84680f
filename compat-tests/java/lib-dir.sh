# Sourced by setup.sh, kafka-run.sh and run.sh (with DIR set to this folder). Sets
# KAFKA_VERSION (default: pom.xml's kafka.version) and KAFKA_LIB, the folder of its jars:
# lib/ for pom.xml's version, lib-<version>/ for another line (e.g. KAFKA_VERSION=3.9.1
# runs the same checks with Kafka 3.9's tools and client).
POM_KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$DIR/pom.xml")"
KAFKA_VERSION="${KAFKA_VERSION:-$POM_KAFKA_VERSION}"
if [[ "$KAFKA_VERSION" == "$POM_KAFKA_VERSION" ]]; then
  KAFKA_LIB="$DIR/lib"
else
  KAFKA_LIB="$DIR/lib-$KAFKA_VERSION"
fi
