"""Cairn's own kafka-python check (beside kafka-python's integration tests): a compacted
topic, read back once the broker's log cleaner has run, holds exactly the latest value of
each key, at the offset it was written to."""

import os
import time
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

BOOTSTRAP = os.environ.get("KAFKA_URI", "tcp://127.0.0.1:9092")[len("tcp://"):]


def read_all(topic):
    """Every record of partition 0: [(offset, key, value)]."""
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out = []
        # Offsets the cleaner removed are skipped: the position jumps past them.
        while consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=1000).values():
                out += [(r.offset, r.key.decode(), r.value.decode()) for r in records]
        return out
    finally:
        consumer.close()


def test_compacted_topic_reads_the_latest_value_of_each_key():
    topic = "kp-compacted-" + uuid.uuid4().hex[:8]
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        # segment.ms=100: each batch sent 100 ms after the active segment began starts a
        # new one, and all but the active segment may be cleaned at once.
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={
            "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
    latest = {}
    for rnd in range(5):
        for k in range(20):
            key, value = f"k{k}", f"r{rnd}-k{k}"
            md = producer.send(topic, key=key.encode(), value=value.encode()).get(timeout=30)
            latest[key] = (md.offset, value)
        time.sleep(0.2)
    # The last record, alone in the active segment, which is never cleaned.
    md = producer.send(topic, key=b"tail", value=b"tail").get(timeout=30)
    latest["tail"] = (md.offset, "tail")
    producer.close()
    want = sorted((offset, key, value) for key, (offset, value) in latest.items())
    # 101 records at offsets 0..100 (the cleaner may already have run: no read before it).
    assert md.offset == 100, f"the last record went to offset {md.offset}"
    # The cleaner runs every log.cleaner.backoff.ms (15 s by default, 1 s on the compat
    # broker) when idle.
    deadline = time.time() + 90
    while True:
        got = read_all(topic)
        if got == want:
            break
        assert time.time() < deadline, (
            f"not the latest value of each key after 90 s: {len(got)} records, "
            f"first {got[:3]}, want first {want[:3]}")
        time.sleep(1)
