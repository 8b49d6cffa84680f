#!/usr/bin/env bash
# Fetch and build librdkafka's own test suite: Debian's source package (2.0.2 on Debian 12),
# or, with LIBRDKAFKA_RELEASE, a newer release's public source as npm carries it.
#
# Idempotent: a stamp file makes a second run a no-op (a few ms).
# Nothing third-party lands in the repository: sources go to $LIBRDKAFKA_CACHE
# (default ~/.cache/cairn-librdkafka, or ~/.cache/cairn-librdkafka-RELEASE).
#
# Env:
#   LIBRDKAFKA_RELEASE  a newer release (see NPM_PACKAGES below) instead of Debian's
#   LIBRDKAFKA_CACHE    where to unpack/build   (default above)
#   JOBS                make parallelism        (default 2)
#   FORCE=1             ignore the stamp and redo every step
set -euo pipefail

RELEASE="${LIBRDKAFKA_RELEASE:-}"
# librdkafka's own releases are on GitHub, which this project's machines cannot reach; the
# npm registry can be, and Confluent's JavaScript client ships the whole librdkafka source
# tree (tests included) in its package. Release -> the package version that bundles it.
declare -A NPM_PACKAGES=([2.15.1]="@confluentinc/kafka-javascript@1.10.1")
if [[ -n "$RELEASE" && -z "${NPM_PACKAGES[$RELEASE]:-}" ]]; then
    echo "librdkafka setup: no known source for librdkafka $RELEASE (known: ${!NPM_PACKAGES[*]})" >&2
    exit 2
fi
CACHE="${LIBRDKAFKA_CACHE:-$HOME/.cache/cairn-librdkafka${RELEASE:+-$RELEASE}}"
JOBS="${JOBS:-2}"
STAMP="$CACHE/.setup-done"

if [[ -f "$STAMP" && "${FORCE:-0}" != 1 ]]; then
    src="$(cat "$STAMP")"
    if [[ -x "$src/tests/test-runner" ]] && command -v kcat >/dev/null; then
        echo "librdkafka setup: already done ($src)"
        exit 0
    fi
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

# 1. Build dependencies + kcat --------------------------------------------------
PKGS=(build-essential python3 zlib1g-dev libzstd-dev liblz4-dev libssl-dev
      libsasl2-dev libcurl4-openssl-dev dpkg-dev kcat)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$p")
done

# 2. deb-src entry --------------------------------------------------------------
# Debian 12 uses deb822 (/etc/apt/sources.list.d/debian.sources). Add a separate
# deb-src file mirroring its URIs/Suites unless some deb-src entry exists already.
need_update=0
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "librdkafka setup: adding deb-src entry /etc/apt/sources.list.d/cairn-deb-src.sources"
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        # Copy the stanzas, replacing "Types: deb" with "Types: deb-src".
        sed -E 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
            | $SUDO tee /etc/apt/sources.list.d/cairn-deb-src.sources >/dev/null
    else
        codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
        printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$codename" | $SUDO tee /etc/apt/sources.list.d/cairn-deb-src.sources >/dev/null
    fi
    need_update=1
fi
# Source index present?
if ! apt-cache showsrc librdkafka >/dev/null 2>&1 || [[ -z "$(apt-cache showsrc librdkafka 2>/dev/null)" ]]; then
    need_update=1
fi
if [[ ${#missing[@]} -gt 0 ]] && ! apt-cache policy "${missing[0]}" 2>/dev/null | grep -q Candidate:; then
    need_update=1
fi
if [[ $need_update == 1 ]]; then
    echo "librdkafka setup: apt-get update"
    $SUDO apt-get update -qq
fi
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "librdkafka setup: installing ${missing[*]}"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# 3. the source: npm (LIBRDKAFKA_RELEASE) or apt-get source librdkafka ---------------
mkdir -p "$CACHE"
if [[ -n "$RELEASE" ]]; then
    src="$CACHE/librdkafka-$RELEASE"
    if [[ ! -f "$src/configure" ]]; then
        command -v npm >/dev/null || { echo "librdkafka setup: npm is needed for librdkafka $RELEASE" >&2; exit 1; }
        pkg="${NPM_PACKAGES[$RELEASE]}"
        echo "librdkafka setup: npm pack $pkg (librdkafka $RELEASE) -> $CACHE"
        tmp="$(mktemp -d "$CACHE/npm.XXXXXX")"
        (cd "$tmp" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz package/deps/librdkafka)
        # The tree must be the release asked for (rdkafka.h: 0xMMmmrrff).
        want="$(printf '0x%02x%02x%02xff' ${RELEASE//./ })"
        got="$(sed -nE 's/^#define RD_KAFKA_VERSION +(0x[0-9a-f]+).*/\1/p' "$tmp/package/deps/librdkafka/src/rdkafka.h")"
        if [[ "$got" != "$want" ]]; then
            echo "librdkafka setup: $pkg carries librdkafka $got, not $want ($RELEASE)" >&2
            rm -rf "$tmp"; exit 1
        fi
        rm -rf "$src"
        mv "$tmp/package/deps/librdkafka" "$src"
        chmod +x "$src/configure" "$src"/lds-gen.py 2>/dev/null || true
        rm -rf "$tmp"
    fi
fi
src="${src:-$(ls -d "$CACHE"/librdkafka-*/ 2>/dev/null | grep -v '\.orig' | head -n1 || true)}"
src="${src%/}"
if [[ -z "$src" || ! -f "$src/configure" ]]; then
    echo "librdkafka setup: apt-get source librdkafka -> $CACHE"
    (cd "$CACHE" && apt-get source -qq librdkafka)
    src="$(ls -d "$CACHE"/librdkafka-*/ | grep -v '\.orig' | head -n1)"
    src="${src%/}"
fi
echo "librdkafka setup: source tree $src"

# 4. configure + build -------------------------------------------------------------
cd "$src"
start=$(date +%s)
if [[ ! -f Makefile.config ]]; then
    # Never --install-deps: it downloads from the internet.
    ./configure --disable-gssapi
fi
make -j"$JOBS" libs
make -C tests -j"$JOBS" build
end=$(date +%s)
echo "librdkafka setup: build took $((end - start))s"

[[ -x tests/test-runner ]] || { echo "librdkafka setup: tests/test-runner missing" >&2; exit 1; }
echo "$src" > "$STAMP"
echo "librdkafka setup: done (librdkafka $(basename "$src" | sed "s/^librdkafka-//") in $src)"
