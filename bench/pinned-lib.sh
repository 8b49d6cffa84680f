# What bench/backlog.sh and bench/partitions.sh share: the Cairn binaries from the command
# line, the port, the records file, stopping a broker, CPU and page-cache helpers. Each
# broker runs on core 0 and kcat on core 1. Sourced after the script has set N, WORK, ONLY
# and its own log and die; then `pinned_init "$@"`.

# pinned_init CAIRN_BINARY...: sets BINS (absolute paths), PORT, BOOT, RAW (emptied), LINES
# (N records of 1 KiB, one per line, as kcat sends them); stops any broker left at exit.
pinned_init() {
  BINS=()
  local b
  for b in "$@"; do
    [[ -x "$b" ]] || die "$b is not an executable file"
    BINS+=("$(cd "$(dirname "$b")" && pwd)/$(basename "$b")")
  done
  [[ "$ONLY" == kafka || ${#BINS[@]} -gt 0 ]] || die "usage: $0 CAIRN_BINARY [MORE...] (or BENCH_ONLY=kafka)"
  command -v kcat >/dev/null || die "kcat is missing (scripts/install-deps.sh bench)"
  command -v taskset >/dev/null || die "taskset is missing (util-linux)"
  (( $(nproc) >= 2 )) || die "needs two cores"

  read -r PORT _ < <("$ROOT/compat-tests/kafka-ref/port-pair.sh")
  BOOT="127.0.0.1:$PORT"
  mkdir -p "$WORK" "$HERE/results"
  RAW="$WORK/raw.tsv"
  : > "$RAW"
  BROKER_PID=""
  KAFKA_DIR=""
  STARTER=""
  trap pinned_cleanup EXIT

  LINES="$WORK/lines-$N"
  if [[ ! -f "$LINES" ]]; then
    log "writing $N records of 1 KiB to $LINES"
    python3 -c 'import sys; sys.stdout.buffer.write((b"x" * 1023 + b"\n") * int(sys.argv[1]))' "$N" > "$LINES"
  fi
}

pinned_cleanup() {
  if [[ -n "$STARTER" ]]; then kill "$STARTER" 2>/dev/null || true; fi
  if [[ -n "$KAFKA_DIR" ]]; then "$ROOT/compat-tests/kafka-ref/stop.sh" "$KAFKA_DIR" >/dev/null 2>&1 || true; fi
  if [[ -n "$BROKER_PID" ]]; then kill "$BROKER_PID" 2>/dev/null || true; wait "$BROKER_PID" 2>/dev/null || true; fi
}

stop_broker() {
  if [[ -n "$KAFKA_DIR" ]]; then
    "$ROOT/compat-tests/kafka-ref/stop.sh" "$KAFKA_DIR" >/dev/null
    KAFKA_DIR=""
  else
    kill "$BROKER_PID"; wait "$BROKER_PID" || true
  fi
  BROKER_PID=""
}

# Prints "dropped" or, where the machine does not allow it, "kept".
drop_caches() {
  sync
  if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo dropped; else echo kept; fi
}

proc_jiffies() { awk '{print $14+$15}' "/proc/$1/stat"; }
