#!/usr/bin/env bash
# Usage: bench/goals.sh CAIRN_BINARY
#
# Issue 19's goals measured in one run, Apache Kafka beside Cairn in every script:
#   1. bench/run.sh            unpinned Java perf clients: produce and consume CPU per GiB
#   2. bench/backlog.sh        pinned, a cold backlog: MB/s and broker CPU per GiB (RUNS=5)
#   3. bench/partitions.sh     pinned, 1 to 10,000 partitions, start-up with 10,000 on disk
#   4. bench/cluster.sh        p99 at half of Kafka's peak, 60 s x 3, RF=1 then RF=3
# then, unless GOALS_PROFILE=0, a profiled pass of Cairn alone (BENCH_PROFILE=1: one run of
# bench/run.sh and of bench/backlog.sh) for each case's top functions and flamegraph.
# Writes bench/results/goals.md: each goal, its target, what this run measured (each
# script's raw figures are copied into GOALS_WORK, emptied first, and a step not run is
# "not measured"). The scripts' own reports stay beside it (latest.md, backlog.md,
# partitions.md, cluster1-latest.md, cluster-latest.md). Takes about an hour; run it on a
# quiet machine.
# Environment: GOALS_ONLY (a space-separated subset of: run backlog partitions cluster1
# cluster3 profile), GOALS_WORK (default /tmp/cairn-bench-goals).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RESULTS="$HERE/results"
[[ $# == 1 && -x "$1" ]] || { sed -n '2p' "$0" | sed 's/^# //' >&2; exit 2; }
CAIRN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
WORK="${GOALS_WORK:-/tmp/cairn-bench-goals}"
STEPS="${GOALS_ONLY:-run backlog partitions cluster1 cluster3 profile}"
[[ "${GOALS_PROFILE:-1}" == 0 ]] && STEPS="${STEPS/profile/}"
# Each run starts afresh: a goal is only reported from this run's figures.
rm -rf "$WORK"
mkdir -p "$WORK" "$RESULTS"
log() { echo "[goals $(date +%H:%M:%S)] $*" >&2; }
wants() { [[ " $STEPS " == *" $1 "* ]]; }
T0="$(date -u '+%Y-%m-%d %H:%M')"

if wants run; then
  log "bench/run.sh (unpinned Java clients, 3 runs per case)"
  nice -n 10 "$HERE/run.sh" "$CAIRN" || log "bench/run.sh exited with $? (its report lists the errors)"
  cp "$RESULTS/raw.tsv" "$WORK/run-raw.tsv"
fi
if wants backlog; then
  log "bench/backlog.sh (pinned, cold and hot, 5 runs)"
  RUNS=5 WORK="$WORK/backlog" "$HERE/backlog.sh" "$CAIRN" || log "bench/backlog.sh exited with $?"
fi
if wants partitions; then
  log "bench/partitions.sh (pinned, 1 to 10,000 partitions, start-up)"
  WORK="$WORK/partitions" "$HERE/partitions.sh" "$CAIRN" || log "bench/partitions.sh exited with $?"
fi
if wants cluster1; then
  log "bench/cluster.sh, RF=1, half of Kafka's peak for 60 s, 3 rounds"
  BENCH_NODES=1 BENCH_RATE=half-kafka BENCH_RATE_SECONDS=60 nice -n 10 "$HERE/cluster.sh" "$CAIRN" \
    || log "bench/cluster.sh (RF=1) exited with $?"
  cp "$RESULTS/cluster1-raw.tsv" "$WORK/cluster1-raw.tsv" 2>/dev/null || true
fi
if wants cluster3; then
  log "bench/cluster.sh, RF=3, half of Kafka's peak for 60 s, 3 rounds"
  BENCH_RATE=half-kafka BENCH_RATE_SECONDS=60 nice -n 10 "$HERE/cluster.sh" "$CAIRN" \
    || log "bench/cluster.sh (RF=3) exited with $?"
  cp "$RESULTS/cluster-raw.tsv" "$WORK/cluster-raw.tsv" 2>/dev/null || true
fi
if wants profile; then
  log "profiles: Cairn alone, one run of bench/run.sh and of bench/backlog.sh, perf record"
  rm -rf "$WORK/profiles"; mkdir -p "$WORK/profiles"
  # run.sh writes its report and logs over the measured run's: keep those first.
  cp "$RESULTS/latest.md" "$WORK/run-latest.md" 2>/dev/null || true
  rm -rf "$WORK/run-logs"; cp -r "$RESULTS/logs" "$WORK/run-logs" 2>/dev/null || true
  BENCH_PROFILE=1 BENCH_ONLY=cairn BENCH_RUNS=1 nice -n 10 "$HERE/run.sh" "$CAIRN" > /dev/null || true
  cp "$RESULTS"/logs/*.top.txt "$RESULTS"/logs/*.svg "$WORK/profiles/" 2>/dev/null || true
  cp "$WORK/run-latest.md" "$RESULTS/latest.md" 2>/dev/null || true
  rm -rf "$RESULTS/logs"; cp -r "$WORK/run-logs" "$RESULTS/logs" 2>/dev/null || true
  BENCH_PROFILE=1 BENCH_ONLY=cairn RUNS=1 WORK="$WORK/backlog-profile" "$HERE/backlog.sh" "$CAIRN" > /dev/null || true
  cp "$WORK"/backlog-profile/*.top.txt "$WORK"/backlog-profile/*.svg "$WORK/profiles/" 2>/dev/null || true
  log "profiles in $WORK/profiles"
fi

python3 - "$WORK" "$RESULTS" "$T0" <<'PY'
import csv, datetime, os, statistics, sys
work, results, t0 = sys.argv[1:]

def rows(path):
    try:
        return [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
    except FileNotFoundError:
        return []

def med(values):
    values = [float(v) for v in values if v not in ("", "nan")]
    return statistics.median(values) if values else None

run = rows(os.path.join(work, "run-raw.tsv"))
def run_med(broker, metric):
    return med(r[3] for r in run if r[0] == broker and r[1] == metric)

backlog = rows(os.path.join(work, "backlog", "raw.tsv"))
def backlog_med(kafka, phase, col):
    return med(r[col] for r in backlog if r[0].startswith("kafka") == kafka and r[2] == phase)

def cluster_med(tag, broker, metric):
    return med(r[3] for r in rows(os.path.join(work, f"{tag}-raw.tsv"))
               if r[0] == broker and r[1] == metric)

parts = rows(os.path.join(work, "partitions", "raw.tsv"))
start = {r[0].split("-")[0]: float(r[2]) for r in parts if len(r) == 3 and r[1] == "start"}

def ratio(c, k):
    return None if c is None or k in (None, 0) else c / k

goals = []  # (goal, target, measured text, met)
def goal(name, target, cairn, kafka, at_most=True, unit="x"):
    r = ratio(cairn, kafka)
    if r is None:
        goals.append((name, target, "not measured", "—"))
        return
    bound = float(target.split()[-1].rstrip("x"))
    met = r <= bound if at_most else r >= bound
    goals.append((name, target, f"{r:.2f}x (Cairn {cairn:.2f}, Kafka {kafka:.2f})", "yes" if met else "**no**"))

goal("Cold backlog: MB/s (pinned, kcat)", "at least 1.5x",
     backlog_med(False, "cold", 3), backlog_med(True, "cold", 3), at_most=False)
goal("Cold backlog: broker CPU-s per GiB", "at most 0.5x",
     backlog_med(False, "cold", 4), backlog_med(True, "cold", 4))
goal("Produce acks=1, unpinned Java: broker CPU-s per GiB", "at most 0.5x",
     run_med("cairn", "p1_bcpu"), run_med("kafka", "p1_bcpu"))
goal("Produce acks=all, unpinned Java: broker CPU-s per GiB", "at most 0.5x",
     run_med("cairn", "pall_bcpu"), run_med("kafka", "pall_bcpu"))
goal("Consume, unpinned Java: broker CPU-s per GiB", "at most 0.5x",
     run_med("cairn", "c_bcpu"), run_med("kafka", "c_bcpu"))
goal("p99 produce latency at half of Kafka's peak, RF=1", "at most 0.3x",
     cluster_med("cluster1", "cairn", "rate_p99"), cluster_med("cluster1", "kafka", "rate_p99"))
goal("p99 produce latency at half of Kafka's peak, RF=3", "at most 0.3x",
     cluster_med("cluster", "cairn", "rate_p99"), cluster_med("cluster", "kafka", "rate_p99"))
if "cairn" in start:
    goals.append(("Start-up to first produce, 10,000 partitions on disk", "at most 1 s",
                  f"{start['cairn'] / 1000:.2f} s (Kafka {start.get('kafka', float('nan')) / 1000:.1f} s)",
                  "yes" if start["cairn"] <= 1000 else "**no**"))
else:
    goals.append(("Start-up to first produce, 10,000 partitions on disk", "at most 1 s", "not measured", "—"))

extra = []
for label, tag in (("RF=3", "cluster"), ("RF=1", "cluster1")):
    for metric, what in (("max_mbs", "max MB/s"), ("max_bcpu", "max CPU-s/GiB"),
                         ("rate_bcpu", "fixed-rate CPU-s/GiB"), ("rss_peak", "peak RSS MiB")):
        c, k = cluster_med(tag, "cairn", metric), cluster_med(tag, "kafka", metric)
        if c is not None:
            extra.append(f"| {label} | {what} | {k if k is not None else float('nan'):.1f} | {c:.1f} | "
                         f"{ratio(c, k) or float('nan'):.2f}x |")
for metric, what in (("p1_cs", "produce acks=1"), ("pall_cs", "produce acks=all"), ("c_cs", "consume")):
    for kind, suffix in (("context switches", "_cs"), ("page faults", "_pf")):
        m = metric.replace("_cs", suffix)
        c, k = run_med("cairn", m), run_med("kafka", m)
        if c is not None:
            extra.append(f"| unpinned Java | {what}: {kind}, k/GiB | {k if k is not None else float('nan'):.1f} "
                         f"| {c:.1f} | {ratio(c, k) or float('nan'):.2f}x |")

out = [f"# Issue 19's goals, one run: {t0} to {datetime.datetime.utcnow():%H:%M} UTC", "",
       "bench/goals.sh: each script runs Apache Kafka and Cairn one after the other; ratios "
       "are Cairn/Kafka, medians of each script's runs.", "",
       "| goal | target | measured | met |", "|---|---|---|---|"]
out += [f"| {g} | {t} | {m} | {ok} |" for g, t, m, ok in goals]
if extra:
    out += ["", "| run | figure | Kafka | Cairn | Cairn/Kafka |", "|---|---|---:|---:|---:|"] + extra
profiles = os.path.join(work, "profiles")
if os.path.isdir(profiles):
    out += ["", f"Profiles (Cairn alone, perf record): {profiles}/*.top.txt, *.svg"]
open(os.path.join(results, "goals.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
