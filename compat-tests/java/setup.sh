#!/usr/bin/env bash
# Download the Apache Kafka 4.x jars (clients, tools, broker) listed in pom.xml
# into ./lib (gitignored). Idempotent: does nothing if lib/ is up to date with
# pom.xml (checked through lib/.stamp, which holds the pom's sha256).
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LIB="$DIR/lib"
STAMP="$LIB/.stamp"
want="$(sha256sum "$DIR/pom.xml" | cut -d' ' -f1)"

up_to_date() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && ls "$LIB"/kafka-clients-*.jar >/dev/null 2>&1; }
up_to_date && exit 0

# Several suites may call this at once: one downloads, the others wait.
exec 9>"$DIR/.setup.lock"
flock -w 900 9 || { echo "setup.sh: could not lock $DIR/.setup.lock" >&2; exit 1; }
up_to_date && exit 0

command -v mvn >/dev/null || { echo "setup.sh: mvn not found" >&2; exit 1; }
echo "setup.sh: downloading Kafka jars into $LIB (pom changed or lib missing)" >&2
t0=$(date +%s)
TMP="$DIR/lib.tmp.$$"
rm -rf "$TMP"
trap 'rm -rf "$TMP"' EXIT
(cd "$DIR" && nice -n 10 mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
    -DoutputDirectory="$TMP" -DincludeScope=runtime)
rm -rf "$LIB"
mv "$TMP" "$LIB"
echo "$want" > "$STAMP"
echo "setup.sh: $(ls "$LIB"/*.jar | wc -l) jars in $(( $(date +%s) - t0 ))s" >&2
