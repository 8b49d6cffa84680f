# What bench/run.sh and bench/backlog.sh share to count a broker's context switches and page
# faults over one step, and to profile it (issue 19: "context switches and page faults per
# GiB", "a profile per case"). Sourced; needs `log`.
#
# Counting uses `perf stat` attached to the broker's process: software events, which every
# machine has (hardware counters are missing on some virtual machines), for all of its
# threads, the ones it starts during the step too. Without perf the counts are empty and the
# reports say n/a.
#
# BENCH_PROFILE=1 also samples each step with `perf record` (DWARF call stacks, PROFILE_HZ
# samples a second, default 199) and writes, beside the step's logs, TAG.top.txt (the
# functions that used the most CPU themselves) and, where `inferno-flamegraph` is installed
# (scripts/install-deps.sh bench), TAG.svg. Sampling costs the broker CPU, so a profiled run
# is for the profile, not for the CPU figures.

PATH="$PATH:${CAIRN_TOOLS:-$HOME/.cache/cairn-tools}/bin"
COUNTERS_PID=""
PROFILE_PID=""
PROFILE_DATA=""

# counters_begin PID FILE: starts counting PID's context switches and page faults into FILE.
counters_begin() {
  COUNTERS_PID=""
  rm -f "$2"
  command -v perf >/dev/null || return 0
  perf stat -e context-switches,page-faults -x, -p "$1" -o "$2" 2>/dev/null &
  COUNTERS_PID=$!
  if [[ "${BENCH_PROFILE:-0}" == 1 ]]; then
    PROFILE_DATA="${2%.*}.perf.data"
    perf record -q -F "${PROFILE_HZ:-199}" --call-graph dwarf,16384 -p "$1" -o "$PROFILE_DATA" \
      > /dev/null 2>&1 &
    PROFILE_PID=$!
  fi
  # perf attaches to every thread before it counts: give it a moment.
  sleep 0.3
}

# counters_end: stops counting (and profiling: the report and flamegraph are written now).
counters_end() {
  if [[ -n "$COUNTERS_PID" ]]; then
    kill -INT "$COUNTERS_PID" 2>/dev/null || true
    wait "$COUNTERS_PID" 2>/dev/null || true
    COUNTERS_PID=""
  fi
  if [[ -n "$PROFILE_PID" ]]; then
    kill -INT "$PROFILE_PID" 2>/dev/null || true
    wait "$PROFILE_PID" 2>/dev/null || true
    PROFILE_PID=""
    profile_report "$PROFILE_DATA"
    rm -f "$PROFILE_DATA"
  fi
}

# profile_report DATA: DATA's top functions by their own samples, and its flamegraph.
profile_report() {
  local base="${1%.perf.data}"
  perf report -i "$1" --no-children --sort dso,symbol --percent-limit 0.7 --stdio -g none \
    2>/dev/null | grep -v '^$' > "$base.top.txt" || true
  if command -v inferno-collapse-perf >/dev/null && command -v inferno-flamegraph >/dev/null; then
    perf script -i "$1" 2>/dev/null | inferno-collapse-perf 2>/dev/null \
      | inferno-flamegraph --title "$(basename "$base")" > "$base.svg" 2>/dev/null || rm -f "$base.svg"
  fi
  log "profile: $base.top.txt$([[ -s "$base.svg" ]] && echo " and $base.svg")"
}

# counter FILE EVENT: the count perf stat wrote for EVENT, or nothing.
counter() {
  awk -F, -v e="$2" '$3 == e && $1 ~ /^[0-9]+$/ {print $1}' "$1" 2>/dev/null || true
}

# per_gib COUNT GIB: COUNT per GiB, in thousands, or n/a.
per_gib() {
  if [[ -n "$1" ]]; then awk -v c="$1" -v g="$2" 'BEGIN{printf "%.1f", c / g / 1000}'; else echo n/a; fi
}
