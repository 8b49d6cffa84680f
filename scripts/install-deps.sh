#!/usr/bin/env bash
# Installs what building and testing Cairn needs and is missing: Debian packages (libclang for
# the rocksdb bindings, a C++ toolchain, kcat, librdkafka's build deps) and a Rust toolchain
# check. Idempotent and quick when everything is present. Usage: install-deps.sh [run|test|bench]
# (bench: what bench/ needs beyond the tests' packages, linux-perf and inferno's flamegraphs).
set -euo pipefail
what=${1:-test}

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in build-essential libclang-dev clang pkg-config; do have_pkg "$p" || need+=("$p"); done
if [ "$what" = bench ]; then
  have_pkg linux-perf || need+=(linux-perf)
fi
if [ "$what" = test ] || [ "$what" = bench ]; then
  # openssl: scripts/make-test-certs.sh (keytool comes with the JDK). iproute2 (ss) and
  # util-linux (prlimit): tests/bad_input.rs's listen backlog, tests/flood.rs's file limit.
  for p in iproute2 util-linux kcat openssl python3-venv zlib1g-dev libzstd-dev liblz4-dev libssl-dev libsasl2-dev libcurl4-openssl-dev dpkg-dev maven default-jdk-headless curl; do
    have_pkg "$p" || need+=("$p")
  done
  # Java and Maven may come from elsewhere on the machine; only install them if absent.
  command -v mvn >/dev/null && need=("${need[@]/maven}")
  command -v java >/dev/null && need=("${need[@]/default-jdk-headless}")
fi
pkgs=()
for p in "${need[@]}"; do [ -n "$p" ] && pkgs+=("$p"); done
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "install-deps: installing ${pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
if [ "$what" = test ] && ! command -v promtool >/dev/null; then
  # Debian's prometheus: tests start a real Prometheus against Cairn and check rules and
  # metrics with promtool. Without recommends: no node exporter or other services.
  echo "install-deps: installing prometheus"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if [ "$what" = test ]; then
  # check-jsonschema (PyPI) validates docker-compose.yml against the compose spec offline.
  tools="${CAIRN_TOOLS:-$HOME/.cache/cairn-tools}"
  if [ ! -x "$tools/bin/check-jsonschema" ]; then
    echo "install-deps: installing check-jsonschema into $tools"
    python3 -m venv "$tools"
    "$tools/bin/pip" install -q check-jsonschema==0.39.0
  fi
fi
if ! command -v cargo >/dev/null; then
  echo "install-deps: cargo is missing; install Rust (https://rustup.rs) and run again" >&2
  exit 1
fi
if [ "$what" = bench ]; then
  # inferno (crates.io) draws the flamegraphs of bench/counters-lib.sh's profiles.
  tools="${CAIRN_TOOLS:-$HOME/.cache/cairn-tools}"
  if [ ! -x "$tools/bin/inferno-flamegraph" ]; then
    echo "install-deps: installing inferno into $tools"
    cargo install --quiet --locked --root "$tools" inferno@0.12.8
  fi
fi
if [ "$what" = test ] && ! command -v node >/dev/null; then
  # compat-tests/kafkajs runs kafkajs (npm) on Node.js 18 or newer; Debian 12's is 18.
  echo "install-deps: installing nodejs and npm"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
if [ "$what" = test ] && ! command -v go >/dev/null; then
  # compat-tests/franz-go needs a Go recent enough for franz-go 1.22 (Debian 12's golang-go
  # 1.19 is not): take it from https://go.dev/dl/.
  echo "install-deps: go is missing; install Go 1.24 or newer (https://go.dev/dl/) and run again" >&2
  exit 1
fi
