#!/usr/bin/env bash
# Fetches the franz-go modules pinned in go.mod/go.sum from the Go module proxy.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v go >/dev/null || { echo "setup.sh: Go is required (https://go.dev/dl/ or apt-get install golang)" >&2; exit 1; }
cd "$HERE" && go mod download
