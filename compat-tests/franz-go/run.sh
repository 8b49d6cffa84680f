#!/usr/bin/env bash
# Builds the franz-go checks (main.go; modules from the Go module proxy, pinned in
# go.mod/go.sum) into the cache and runs them against BOOTSTRAP (default 127.0.0.1:9092).
# Prints the checks' PASS/FAIL lines and exactly one "franz-go: N passed, M failed" line.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BOOTSTRAP="${BOOTSTRAP:-127.0.0.1:9092}"
BIN="${FRANZ_GO_CACHE:-$HOME/.cache/cairn-franz-go}/franz-go-checks"
command -v go >/dev/null || { echo "run.sh: go not found" >&2; echo "franz-go: 0 passed, 1 failed"; exit 1; }
mkdir -p "$(dirname "$BIN")"
if ! (cd "$HERE" && go build -mod=readonly -o "$BIN" .) 2>"$BIN.build.log"; then
  echo "run.sh: go build failed: $(tail -n 5 "$BIN.build.log")" >&2
  echo "franz-go: 0 passed, 1 failed"
  exit 1
fi
exec "$BIN" -bootstrap "$BOOTSTRAP"
