#!/usr/bin/env bash
# Installs kafkajs, pinned in package.json/package-lock.json, from the npm registry into
# node_modules/ here (gitignored). Idempotent: quick when the lock file is unchanged.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v node >/dev/null || { echo "setup.sh: Node.js 18 or newer is required (apt-get install nodejs npm)" >&2; exit 1; }
cd "$HERE"
STAMP="node_modules/.cairn-setup-done"
KEY="$(sha256sum package-lock.json | cut -c1-16)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$KEY" ]]; then
  echo "kafkajs $(node -p 'require("kafkajs/package.json").version'): already set up"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "$KEY" > "$STAMP"
echo "kafkajs $(node -p 'require("kafkajs/package.json").version') ready"
