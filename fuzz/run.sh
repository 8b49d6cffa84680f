#!/usr/bin/env bash
# Builds the fuzz targets on stable Rust and runs them with libFuzzer.
#
#   fuzz/run.sh build                   build every target
#   fuzz/run.sh TARGET [SECONDS]        fuzz one target (default 60 s), its corpus growing in
#                                       $FUZZ_HOME/corpus/TARGET from fuzz/seeds/TARGET
#   fuzz/run.sh smoke [SECONDS]         each target for SECONDS (default 45) after replaying
#                                       its seeds and regressions, as many at a time as there
#                                       are cores (FUZZ_JOBS): what `make test` runs
#   fuzz/run.sh replay TARGET FILE...   run inputs once (a crasher, to debug it)
#
# A crash, panic, hang (-timeout) or memory over the limit (-rss_limit_mb) stops the run,
# leaves the input in $FUZZ_HOME/artifacts/TARGET and fails. Each crasher found goes in
# fuzz/regressions/TARGET once fixed, so every later run replays it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
FUZZ_HOME="${FUZZ_HOME:-$HOME/.cache/cairn-fuzz}"
# The broker's release build, whose RocksDB library the fuzz build links.
MAIN_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/cairn-target}"
# Its own target dir: the instrumented build must not replace the broker's.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$HOME/.cache/cairn-fuzz-target}"
TARGETS=(frame request batch config controller_rpc fetch_answer)
# Targets `smoke` leaves out while a finding of theirs is open, each with its reason
# (docs/FUZZING.md; the input is in fuzz/open/TARGET). This list only shrinks.
declare -A SMOKE_SKIP=()
triple="$(rustc -vV | sed -n 's/^host: //p')"

# What cargo-fuzz passes for libFuzzer without a sanitizer (those need nightly). Only the
# target's crates get them (--target keeps build scripts and proc macros out).
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"

build() {
    # RocksDB's C++ is most of a cold build and is not what is fuzzed: link the library the
    # broker's release build already made, when there is one (same crate, same features).
    local lib
    lib="$(ls -t "$MAIN_TARGET_DIR"/release/build/librocksdb-sys-*/out/librocksdb.a 2>/dev/null | head -1 || true)"
    if [ -n "$lib" ]; then
        export ROCKSDB_LIB_DIR="$(dirname "$lib")" ROCKSDB_STATIC=1
    fi
    (cd "$here" && cargo build --release --locked --target "$triple" --bins)
}

bin() { echo "$CARGO_TARGET_DIR/$triple/release/$1"; }

# -rss_limit_mb: no input may make the process hold more than 2 GiB; -timeout: none may
# take longer than 10 s. (libFuzzer's -malloc_limit_mb needs a sanitizer's malloc hooks,
# which stable Rust cannot build: a single huge allocation shows only if it is touched.)
LIMITS=(-rss_limit_mb=2048 -timeout=10)

dirs_for() {
    local t="$1" d
    for d in "$here/seeds/$t" "$here/regressions/$t"; do
        [ -d "$d" ] && echo "$d"
    done
    true
}

fuzz() {
    local t="$1" secs="$2" dict=()
    mkdir -p "$FUZZ_HOME/corpus/$t" "$FUZZ_HOME/artifacts/$t"
    [ -f "$here/dicts/$t.dict" ] && dict=(-dict="$here/dicts/$t.dict")
    local inputs=()
    mapfile -t inputs < <(dirs_for "$t")
    echo "== fuzz $t for ${secs}s"
    "$(bin "$t")" "${LIMITS[@]}" "${dict[@]}" -max_total_time="$secs" -print_final_stats=1 \
        -artifact_prefix="$FUZZ_HOME/artifacts/$t/" "$FUZZ_HOME/corpus/$t" "${inputs[@]}"
}

case "${1:-}" in
    build) build ;;
    smoke)
        build
        # As many targets at a time as there are cores (FUZZ_JOBS), each on a core of its
        # own for its seconds; each one's output goes to a log, shown once its wave ends.
        jobs="${FUZZ_JOBS:-$(nproc)}"
        mkdir -p "$FUZZ_HOME/logs"
        wave=() failed=()
        end_wave() {
            local t
            for t in "${wave[@]}"; do
                if wait "${pid[$t]}"; then
                    echo "== $t passed"
                    grep -E '^(Done|stat::(number_of_executed_units|peak_rss_mb))' "$FUZZ_HOME/logs/$t.log" || true
                else
                    echo "== $t FAILED; the end of its log ($FUZZ_HOME/logs/$t.log):"
                    tail -n 60 "$FUZZ_HOME/logs/$t.log"
                    failed+=("$t")
                fi
            done
            wave=()
        }
        declare -A pid=()
        for t in "${TARGETS[@]}"; do
            if [ -n "${SMOKE_SKIP[$t]:-}" ]; then
                echo "== SKIPPED $t, not fuzzed and not counted: ${SMOKE_SKIP[$t]}"
                continue
            fi
            fuzz "$t" "${2:-45}" > "$FUZZ_HOME/logs/$t.log" 2>&1 &
            pid[$t]=$!
            wave+=("$t")
            [ "${#wave[@]}" -ge "$jobs" ] && end_wave
        done
        [ "${#wave[@]}" -gt 0 ] && end_wave
        if [ "${#failed[@]}" -gt 0 ]; then
            echo "fuzz smoke: failed: ${failed[*]}"
            exit 1
        fi
        ;;
    replay)
        t="$2"; shift 2
        "$(bin "$t")" "${LIMITS[@]}" -runs=1 "$@"
        ;;
    frame|request|batch|config|controller_rpc|fetch_answer)
        build
        fuzz "$1" "${2:-60}"
        ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
esac
