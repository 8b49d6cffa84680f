#!/usr/bin/env python3
"""Seeds from real client traffic: a TCP proxy between clients and a broker that keeps what
passes through as seed inputs for the fuzz targets.

    python3 fuzz/capture.py LISTEN_PORT BROKER_HOST:PORT OUT_DIR

Point the broker's advertised listener at LISTEN_PORT so clients come back through the
proxy after the bootstrap, run clients against it, and stop it with SIGINT or SIGTERM. In
OUT_DIR, one file per distinct input, named by its SHA-1:

- request/       each request frame without its length prefix (the `request` target; with
                 the broker's controller listener behind the proxy, each controller
                 message, which `controller_rpc` takes with its 4-byte length);
- frame/         the first 64 KiB of each connection's request stream (`frame`);
- batch/         each valid v2 record batch found in requests and responses, after the
                 `batch` target's fix-ups byte (0: none);
- fetch_answer/  the batches of each partition, as a Fetch v12 answer for partition 0 of
                 topic "t" (what a follower's fetcher decodes and applies).

Batches are found by their shape: magic 2 at byte 16, a length that fits, and a CRC-32C
that matches.
"""
import hashlib
import os
import signal
import socket
import struct
import sys
import threading

STREAM_BYTES_MAX = 64 * 1024


def crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def batches(buf):
    """Valid v2 batches in buf, by shape and CRC."""
    found, i = [], 0
    while i + 61 <= len(buf):
        if buf[i + 16] == 2:
            (length,) = struct.unpack_from(">i", buf, i + 8)
            end = i + 12 + length
            if 49 <= length and end <= len(buf):
                (crc,) = struct.unpack_from(">I", buf, i + 17)
                if crc32c(buf[i + 21:end]) == crc:
                    found.append(bytes(buf[i:end]))
                    i = end
                    continue
        i += 1
    return found


def uvarint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fetch_v12_answer(records):
    """A Fetch v12 response frame (no length prefix), correlation id 1, for topic "t"
    partition 0 holding `records`."""
    last = 0
    for b in batches(records):
        base, = struct.unpack_from(">q", b, 0)
        delta, = struct.unpack_from(">i", b, 23)
        last = max(last, base + delta + 1)
    header = struct.pack(">i", 1) + b"\x00"
    partition = (struct.pack(">ihqqq", 0, 0, last, last, 0)
                 + uvarint(1)  # aborted transactions: empty
                 + struct.pack(">i", -1)
                 + uvarint(len(records) + 1) + records
                 + b"\x00")
    topic = uvarint(2) + b"t" + uvarint(2) + partition + b"\x00"
    body = struct.pack(">ihi", 0, 0, 0) + uvarint(2) + topic + b"\x00"
    return header + body


class Out:
    def __init__(self, root):
        self.root = root
        self.lock = threading.Lock()

    def keep(self, kind, data):
        if not data:
            return
        d = os.path.join(self.root, kind)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, hashlib.sha1(data).hexdigest())
        with self.lock:
            if not os.path.exists(path):
                with open(path, "wb") as f:
                    f.write(data)

    def records(self, buf):
        found = batches(buf)
        for b in found:
            self.keep("batch", b"\x00" + b)
        if found:
            self.keep("fetch_answer", fetch_v12_answer(b"".join(found)))


def pump(src, dst, out, requests):
    pending, stream = bytearray(), bytearray()
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
            if requests and len(stream) < STREAM_BYTES_MAX:
                stream += data[:STREAM_BYTES_MAX - len(stream)]
            pending += data
            while len(pending) >= 4:
                (n,) = struct.unpack_from(">i", pending, 0)
                if n < 0 or len(pending) < 4 + n:
                    break
                frame = bytes(pending[4:4 + n])
                del pending[:4 + n]
                if requests:
                    out.keep("request", frame)
                out.records(frame)
    except OSError:
        pass
    finally:
        if requests:
            out.keep("frame", bytes(stream))
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    port, upstream, root = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    host, up_port = upstream.rsplit(":", 1)
    out = Out(root)
    server = socket.create_server(("127.0.0.1", port), reuse_port=False)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        client, _ = server.accept()
        try:
            broker = socket.create_connection((host, int(up_port)))
        except OSError:
            client.close()  # the broker is down (restarting, say): so is this connection
            continue
        threading.Thread(target=pump, args=(client, broker, out, True), daemon=True).start()
        threading.Thread(target=pump, args=(broker, client, out, False), daemon=True).start()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
