#!/usr/bin/env python3
"""Checkers used by run.sh (no third-party modules).

  helpers.py console-gen TOPIC_PARTITIONS OUT_DIR
      writes OUT_DIR/console.in (ConsoleProducer input, parse.key/parse.headers)
      and OUT_DIR/expected.<p> (exact ConsoleConsumer output per partition,
      without the CreateTime column) for keys placed by Kafka's default
      partitioner (murmur2 of the key bytes).
  helpers.py console-check EXPECTED_FILE ACTUAL_FILE T_MIN_MS T_MAX_MS
      compares ConsoleConsumer output (print.timestamp/partition/offset/headers/key)
  helpers.py verifiable-check PRODUCER_JSONL DUMP_FILE PREFIX EXPECTED_COUNT NO_DUPS
      checks VerifiableProducer events against a DumpPartitions dump.
  helpers.py hanging-txn HOST:PORT TRANSACTIONAL_ID TOPIC PARTITION
      leaves a hanging transaction, as a producer from before KIP-890 could: InitProducerId
      v1, then one transactional record with Produce v3 and no AddPartitionsToTxn (the
      broker must run with transaction.partition.verification.enable=false to store it).
      Prints "producer_id epoch base_offset".
"""
import json
import socket
import struct
import sys
import time


def murmur2(data: bytes) -> int:
    """org.apache.kafka.common.utils.Utils.murmur2, as an unsigned 32-bit int."""
    mask = 0xFFFFFFFF
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rem, idx = length % 4, length & ~3
    if rem == 3:
        h ^= data[idx + 2] << 16
    if rem >= 2:
        h ^= data[idx + 1] << 8
    if rem >= 1:
        h ^= data[idx]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def partition_for_key(key: str, n: int) -> int:
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % n


# (headers field as typed to ConsoleProducer / as printed by ConsoleConsumer, value)
# "<NULL>" is the null marker / null literal used on both sides.
CONSOLE_RECORDS = [
    ("h1:v1,h2:v2", "value one"),
    ("<NULL>", "no headers at all"),          # printed as NO_HEADERS
    ("h3:", "empty header value"),
    ("h4:<NULL>", "null header value"),
    ("h5:a,h5:b", "repeated header key"),
    ("trace-id:abc-123", "<NULL>"),           # null value (tombstone)
    ("h6:x", "  spaced  value, with: colons and unicode é ✓"),
    ("h7:y", ""),                            # empty (non-null) value
    ("h8:z", "x" * 3000),                    # larger value
    ("h9:1,h10:2,h11:3", "last-ish"),
]


def console_gen(nparts: int, out_dir: str) -> None:
    # Deterministic keys; for each record pick the first candidate key that
    # lands on the partition we want (round robin), so every partition gets records
    # in an interleaved send order.
    lines, per_part = [], {p: [] for p in range(nparts)}
    cand = 0
    for i, (hdr, val) in enumerate(CONSOLE_RECORDS * 2):
        want = i % nparts
        while True:
            key = f"key-{cand}"
            cand += 1
            if partition_for_key(key, nparts) == want:
                break
        val = val if val == "<NULL>" else (f"{i}:{val}" if val else "")
        lines.append(f"{hdr}\t{key}\t{val}")
        printed_hdr = "NO_HEADERS" if hdr == "<NULL>" else hdr
        off = len(per_part[want])
        per_part[want].append(f"Partition:{want}\tOffset:{off}\t{printed_hdr}\t{key}\t{val}")
    with open(f"{out_dir}/console.in", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    for p, exp in per_part.items():
        with open(f"{out_dir}/expected.{p}", "w", encoding="utf-8") as f:
            f.write("\n".join(exp) + "\n")
        print(f"{p} {len(exp)}")


def console_check(expected_file, actual_file, tmin, tmax) -> int:
    exp = open(expected_file, encoding="utf-8").read().splitlines()
    act = open(actual_file, encoding="utf-8").read().splitlines()
    if len(act) != len(exp):
        print(f"expected {len(exp)} records, got {len(act)}")
        return 1
    for n, (e, a) in enumerate(zip(exp, act)):
        ts, _, rest = a.partition("\t")
        if not ts.startswith("CreateTime:"):
            print(f"record {n}: expected CreateTime timestamp, got {ts!r}")
            return 1
        t = int(ts.split(":", 1)[1])
        if not (int(tmin) <= t <= int(tmax)):
            print(f"record {n}: timestamp {t} outside produce window [{tmin},{tmax}]")
            return 1
        if rest != e:
            print(f"record {n}: expected {e[:120]!r} got {rest[:120]!r}")
            return 1
    return 0


def verifiable_check(prod_file, dump_file, prefix, expected_count, no_dups) -> int:
    expected_count, no_dups = int(expected_count), no_dups == "1"
    acked, errors, tool_data = [], [], None
    for line in open(prod_file, encoding="utf-8"):
        if not line.startswith("{"):
            continue
        ev = json.loads(line)
        if ev.get("name") == "producer_send_success":
            acked.append(ev)
        elif ev.get("name") == "producer_send_error":
            errors.append(ev)
        elif ev.get("name") == "tool_data":
            tool_data = ev
    problems = []
    if errors:
        problems.append(f"{len(errors)} producer_send_error (first: {errors[0].get('exception')} {errors[0].get('message')})")
    if len(acked) != expected_count:
        problems.append(f"{len(acked)} acked of {expected_count} sent")
    if tool_data is None:
        problems.append("no tool_data event")
    at = {}   # (partition, offset) -> (key, value)
    by_value = {}
    for line in open(dump_file, encoding="utf-8"):
        p, o, k, v = line.rstrip("\n").split("\t", 3)
        at[(int(p), int(o))] = (k, v)
        if v.startswith(prefix + "."):
            by_value.setdefault(v, []).append((int(p), int(o)))
    wrong = missing = 0
    first = None
    parts = set()
    for ev in acked:
        key = "<NULL>" if ev["key"] is None else ev["key"]
        pos = (ev["partition"], ev["offset"])
        parts.add(ev["partition"])
        got = at.get(pos)
        if got != (key, ev["value"]):
            wrong += 1
            first = first or f"value {ev['value']!r} acked at p{pos[0]}@{pos[1]} but read {got!r}"
        if ev["value"] not in by_value:
            missing += 1
    acked_values = {ev["value"] for ev in acked}
    if len(acked_values) != len(acked):
        problems.append("producer reported the same value acked twice")
    if wrong:
        problems.append(f"{wrong} acked records not at their (partition, offset); first: {first}")
    if missing:
        problems.append(f"{missing} acked values missing from the topic")
    dups = sum(len(v) - 1 for v in by_value.values())
    unacked = len(set(by_value) - acked_values)
    if no_dups and dups:
        problems.append(f"{dups} duplicate records with idempotence on")
    if no_dups and unacked:
        problems.append(f"{unacked} unacknowledged values present")
    if len(parts) < 2 and expected_count > 0:
        problems.append(f"all acked records on partitions {sorted(parts)} (expected a spread)")
    if problems:
        print("; ".join(problems))
        return 1
    print(f"acked={len(acked)} partitions={sorted(parts)} dups={dups}")
    return 0


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def kstr(v) -> bytes:
    if v is None:
        return struct.pack(">h", -1)
    b = v.encode()
    return struct.pack(">h", len(b)) + b


class Conn:
    """One connection speaking non-flexible request versions (header v1)."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.corr = 0

    def call(self, api_key, version, body: bytes) -> bytes:
        self.corr += 1
        frame = struct.pack(">hhi", api_key, version, self.corr) + kstr("cairn-hanging-txn") + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._read(4))[0]
        resp = self._read(size)
        assert struct.unpack(">i", resp[:4])[0] == self.corr, "correlation id"
        return resp[4:]

    def _read(self, n) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("broker closed the connection")
            buf += chunk
        return buf


def txn_batch(producer_id, epoch, value: bytes) -> bytes:
    now = int(time.time() * 1000)
    record = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    record = varint(len(record)) + record
    # attributes 0x10: transactional; last offset delta, timestamps, producer, sequence 0, count
    after_crc = struct.pack(">hiqqqhii", 0x10, 0, now, now, producer_id, epoch, 0, 1) + record
    header = struct.pack(">ib", -1, 2) + struct.pack(">I", crc32c(after_crc))
    body = header + after_crc
    return struct.pack(">qi", 0, len(body)) + body


def hanging_txn(addr, txn_id, topic, partition) -> int:
    c = Conn(addr)
    for _ in range(300):
        # InitProducerId v1: transactional id, timeout -> throttle, error, producer id, epoch
        r = c.call(22, 1, kstr(txn_id) + struct.pack(">i", 60000))
        _, err, pid, epoch = struct.unpack(">ihqh", r[:16])
        if err in (14, 15, 16, 51):  # loading, not available, not coordinator, concurrent
            time.sleep(0.1)
            continue
        if err != 0:
            print(f"InitProducerId failed: error {err}", file=sys.stderr)
            return 1
        break
    else:
        print("InitProducerId kept failing", file=sys.stderr)
        return 1
    records = txn_batch(pid, epoch, b"hanging")
    body = (kstr(txn_id) + struct.pack(">hii", -1, 30000, 1) + kstr(topic)
            + struct.pack(">ii", 1, partition) + struct.pack(">i", len(records)) + records)
    r = c.call(0, 3, body)
    # topics[1]: name, partitions[1]: index, error, base offset, log append time
    name_len = struct.unpack(">h", r[4:6])[0]
    at = 6 + name_len + 4
    _, err, base = struct.unpack(">ihq", r[at:at + 14])
    if err != 0:
        print(f"Produce failed: error {err}", file=sys.stderr)
        return 1
    print(pid, epoch, base)
    return 0


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "console-gen":
        console_gen(int(argv[2]), argv[3])
        return 0
    if cmd == "console-check":
        return console_check(*argv[2:6])
    if cmd == "hanging-txn":
        return hanging_txn(argv[2], argv[3], argv[4], int(argv[5]))
    if cmd == "verifiable-check":
        return verifiable_check(*argv[2:7])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
