#!/usr/bin/env python3
"""Checkers for run.sh: they read what the Connect REST API, the console consumer and the
FileStream connectors wrote, print one line saying what they saw, and exit 0 when it is what
the check expects, 1 otherwise.

  helpers.py running STATUS_JSON NAMES [WORKERS]
      GET /connectors?expand=status: the connectors NAMES (comma separated) and no others,
      each RUNNING with at least one task, every task RUNNING; with WORKERS (comma
      separated), the worker ids of those connectors and tasks are exactly that set.
  helpers.py task-worker STATUS_JSON NAME
      prints the worker id of NAME's task 0.
  helpers.py offset OFFSETS_JSON
      GET /connectors/NAME/offsets of one partition: prints a FileStreamSource's stored
      "position" or a sink's committed "kafka_offset" (-1 when there is none yet).
  helpers.py config CONFIG_JSON EXPECTED_JSON
      GET /connectors/NAME/config holds exactly EXPECTED (plus the "name" Connect adds).
  helpers.py compacted CONSUMER_OUT OLD NEWEST
      the config topic as the console consumer printed it (print.offset, print.key): some
      offsets below the last one are gone, no connector or task config record of
      cairn.generation OLD (superseded by later ones) is left, and each connector or task
      config key's last record is of generation NEWEST.
  helpers.py compare INPUT OUTPUT
      the lines of OUTPUT are those of INPUT, in order: otherwise says how many are missing,
      duplicated or unexpected.
"""
import collections
import json
import os
import sys


def short(name):
    """A connector name without the run id run.sh gives it (in RUN_ID), for shorter lines."""
    run_id = os.environ.get("RUN_ID", "")
    return name.replace("-" + run_id, "") if run_id else name


def load(path):
    with open(path) as f:
        return json.load(f)


def running(path, names, workers=None):
    try:
        status = load(path)
    except ValueError as e:
        print(f"not JSON ({e})")
        return 1
    want = set(names.split(","))
    seen, bad, ids = [], [], set()
    for name in sorted(status):
        s = status[name].get("status", {})
        c = s.get("connector", {})
        seen.append(f"{short(name)}={c.get('state')}@{c.get('worker_id')}")
        ids.add(c.get("worker_id"))
        if c.get("state") != "RUNNING":
            bad.append(f"connector {name} {c.get('state')}")
        tasks = s.get("tasks", [])
        if not tasks:
            bad.append(f"{name} has no task")
        for t in tasks:
            seen.append(f"{short(name)}-{t.get('id')}={t.get('state')}@{t.get('worker_id')}")
            ids.add(t.get("worker_id"))
            if t.get("state") != "RUNNING":
                bad.append(f"task {name}-{t.get('id')} {t.get('state')}")
    if set(status) != want:
        bad.append(f"connectors {sorted(status)}, expected {sorted(want)}")
    if workers is not None and ids != set(workers.split(",")):
        bad.append(f"worker ids {sorted(ids)}, expected {sorted(workers.split(','))}")
    print(" ".join(seen) + ("" if not bad else " -- " + "; ".join(bad)))
    return 0 if not bad else 1


def task_worker(path, name):
    tasks = load(path)[name]["status"]["tasks"]
    print(tasks[0]["worker_id"])
    return 0


def offset(path):
    offsets = load(path).get("offsets", [])
    if len(offsets) != 1:
        print(-1)
        return 0
    o = offsets[0]["offset"]
    print(o.get("position", o.get("kafka_offset", -1)))
    return 0


def config(path, expected_path):
    got, want = load(path), load(expected_path)
    extra = {k: v for k, v in got.items() if k not in want and k != "name"}
    wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    if extra or wrong:
        print(f"differs from the last PUT: (got, put) {wrong}, extra {extra}")
        return 1
    print(f"{len(want)} keys as put, cairn.generation={got.get('cairn.generation')}")
    return 0


def compacted(path, old, newest):
    offsets, stale, last_gen = [], [], {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t", 2)
            if len(parts) != 3 or not parts[0].startswith("Offset:"):
                continue
            off, key, value = int(parts[0][len("Offset:"):]), parts[1], parts[2]
            offsets.append(off)
            if not key.startswith(("connector-", "task-")) or value == "null":
                continue
            gen = json.loads(value).get("properties", {}).get("cairn.generation")
            last_gen[key] = gen
            if gen == old:
                stale.append(f"{key}@{off}")
    if not offsets:
        print("the console consumer printed no record")
        return 1
    last = max(offsets)
    gone = last + 1 - len(set(offsets))
    not_newest = {k: g for k, g in last_gen.items() if g != newest}
    print(f"{len(offsets)} records at offsets 0..{last} ({gone} removed); "
          f"generation-{old} config records left: {stale or 'none'}; "
          f"{len(last_gen)} config keys, the last record of each of generation {newest}"
          + (f" but {not_newest}" if not_newest else ""))
    return 0 if gone > 0 and not stale and last_gen and not not_newest else 1


def compare(input_path, output_path):
    with open(input_path) as f:
        want = f.read().splitlines()
    with open(output_path) as f:
        got = f.read().splitlines()
    if got == want:
        print(f"{len(got)} lines, as written")
        return 0
    w, g = collections.Counter(want), collections.Counter(got)
    missing = sum((w - g).values())
    dup = sum(n - 1 for line, n in g.items() if n > 1)
    unexpected = sum(n for line, n in g.items() if line not in w)
    order = "" if missing or dup or unexpected else ", same lines in another order"
    print(f"input {len(want)} lines, output {len(got)}: {missing} missing, "
          f"{dup} duplicated, {unexpected} unexpected{order}")
    return 1


def main(argv):
    cmds = {"running": running, "task-worker": task_worker, "offset": offset,
            "config": config, "compacted": compacted, "compare": compare}
    if len(argv) < 2 or argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        return 2
    return cmds[argv[1]](*argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
