#!/usr/bin/env bash
# Download the Apache Kafka jars (clients, tools, broker) listed in pom.xml into ./lib
# (gitignored); with KAFKA_VERSION set to another release, that release's into
# ./lib-<version> (lib-dir.sh). Idempotent: does nothing if the folder is up to date with
# pom.xml (checked through its .stamp, which holds the pom's sha256 and the version).
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$DIR/lib-dir.sh"
LIB="$KAFKA_LIB"
STAMP="$LIB/.stamp"
want="$(sha256sum "$DIR/pom.xml" | cut -d' ' -f1) $KAFKA_VERSION"

up_to_date() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && ls "$LIB"/kafka-clients-*.jar >/dev/null 2>&1; }
up_to_date && exit 0

# Several suites may call this at once: one downloads, the others wait.
exec 9>"$DIR/.setup.lock"
flock -w 900 9 || { echo "setup.sh: could not lock $DIR/.setup.lock" >&2; exit 1; }
up_to_date && exit 0

command -v mvn >/dev/null || { echo "setup.sh: mvn not found" >&2; exit 1; }
echo "setup.sh: downloading Kafka jars into $LIB (pom changed or lib missing)" >&2
t0=$(date +%s)
TMP="$LIB.tmp.$$"
rm -rf "$TMP"
trap 'rm -rf "$TMP"' EXIT
(cd "$DIR" && nice -n 10 mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
    -Dkafka.version="$KAFKA_VERSION" -DoutputDirectory="$TMP" -DincludeScope=runtime)
rm -rf "$LIB"
mv "$TMP" "$LIB"
echo "$want" > "$STAMP"
echo "setup.sh: $(ls "$LIB"/*.jar | wc -l) jars in $(( $(date +%s) - t0 ))s" >&2
