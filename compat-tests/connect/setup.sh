#!/usr/bin/env bash
# Downloads Apache Kafka Connect (connect-runtime, connect-file, connect-json: pom.xml) and
# its runtime dependencies into ./lib (gitignored), and the Kafka 4.4.0 tools that run.sh
# reads the internal topics with (../java/setup.sh with KAFKA_VERSION=4.4.0, into
# ../java/lib-4.4.0). Idempotent: does nothing when lib/.stamp holds the sha256 of pom.xml.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LIB="$DIR/lib"
STAMP="$LIB/.stamp"
want="$(sha256sum "$DIR/pom.xml" | cut -d' ' -f1)"

KAFKA_VERSION=4.4.0 "$DIR/../java/setup.sh"

up_to_date() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && ls "$LIB"/connect-runtime-*.jar >/dev/null 2>&1; }
up_to_date && exit 0

# run-all.sh and a caller may set up at once: one downloads, the other waits.
exec 9>"$DIR/.setup.lock"
flock -w 900 9 || { echo "setup.sh: could not lock $DIR/.setup.lock" >&2; exit 1; }
up_to_date && exit 0

for c in mvn; do command -v $c >/dev/null || { echo "setup.sh: $c not found" >&2; exit 1; }; done
echo "setup.sh: downloading Kafka Connect jars into $LIB (pom changed or lib missing)" >&2
t0=$(date +%s)
TMP="$LIB.tmp.$$"
rm -rf "$TMP"
trap 'rm -rf "$TMP"' EXIT
(cd "$DIR" && nice -n 10 mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
    -DoutputDirectory="$TMP" -DincludeScope=runtime)
rm -rf "$LIB"
mv "$TMP" "$LIB"
echo "$want" > "$STAMP"
echo "setup.sh: $(ls "$LIB"/*.jar | wc -l) jars in $(( $(date +%s) - t0 ))s" >&2
