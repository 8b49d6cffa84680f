#!/usr/bin/env bash
# kcat smoke test: metadata, produce keyed messages (with a header and a NULL
# value), read them back from the beginning, compare exactly.
# Env: BOOTSTRAP (default 127.0.0.1:9092), KCAT_OPTS. Prints PASS/FAIL; exit 0 iff PASS.
set -uo pipefail

BOOTSTRAP="${BOOTSTRAP:-127.0.0.1:9092}"
TOPIC="${TOPIC:-cairn-kcat-smoke-$(date +%s)-$RANDOM}"
# KCAT_OPTS: more -X settings, e.g. the TLS suite's security.protocol=ssl and certificates.
# shellcheck disable=SC2206
KC=(kcat -b "$BOOTSTRAP" -X broker.address.family=v4 -X socket.timeout.ms=10000 ${KCAT_OPTS:-})
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL kcat-smoke: $*"; exit 1; }
command -v kcat >/dev/null || fail "kcat not installed (run setup.sh)"

# 1. Metadata
if ! timeout 30 "${KC[@]}" -L -m 10 > "$TMP/meta" 2> "$TMP/meta.err"; then
    fail "kcat -L: $(tail -n3 "$TMP/meta.err" | tr '\n' ' ')"
fi
grep -qE '^ *[0-9]+ brokers:' "$TMP/meta" || fail "kcat -L printed no broker list"
grep -qE '^ *broker [0-9]+ at ' "$TMP/meta" || fail "kcat -L printed no broker"

# 2. Produce 5 keyed messages to partition 0 (topic is auto-created), one with a
#    header and one with a NULL value (-Z: empty value => NULL).
printf 'k1:v1\nk2:hello world\nk3:\xc3\xa9t\xc3\xa9\nk4:\nk5:last\n' > "$TMP/in"
if ! timeout 60 "${KC[@]}" -P -t "$TOPIC" -p 0 -K: -Z -H smoke=yes \
        -X message.timeout.ms=30000 -l "$TMP/in" 2> "$TMP/prod.err"; then
    fail "kcat -P: $(tail -n3 "$TMP/prod.err" | tr '\n' ' ')"
fi

# 3. Consume from the beginning until end of partitions
if ! timeout 60 "${KC[@]}" -C -t "$TOPIC" -o beginning -e -q \
        -f '%p|%o|%k|%S|%s|%h\n' > "$TMP/out" 2> "$TMP/cons.err"; then
    fail "kcat -C: $(tail -n3 "$TMP/cons.err" | tr '\n' ' ')"
fi

cat > "$TMP/expected" <<EOF
0|0|k1|2|v1|smoke=yes
0|1|k2|11|hello world|smoke=yes
0|2|k3|5|$(printf '\xc3\xa9t\xc3\xa9')|smoke=yes
0|3|k4|-1||smoke=yes
0|4|k5|4|last|smoke=yes
EOF
if ! diff -u "$TMP/expected" "$TMP/out" > "$TMP/diff"; then
    fail "consumed messages differ from produced (topic $TOPIC):
$(cat "$TMP/diff")"
fi

# 4. Metadata for the topic
timeout 30 "${KC[@]}" -L -t "$TOPIC" > "$TMP/tmeta" 2>&1 || fail "kcat -L -t $TOPIC"
grep -q "topic \"$TOPIC\"" "$TMP/tmeta" || fail "topic $TOPIC missing from metadata"

echo "PASS kcat-smoke: metadata, 5 keyed messages produced and read back exactly (topic $TOPIC)"
