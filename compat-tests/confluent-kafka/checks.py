"""confluent-kafka-python (the newest librdkafka, bundled in its wheel) against a
Kafka-compatible broker, with the KIP-848 consumer protocol (group.protocol=consumer):

    .venv/bin/python checks.py 127.0.0.1:9092

1. admin: create a 3-partition topic; describe_topics and describe_cluster answer.
2. An idempotent, zstd-compressed producer writes 300 keyed records with headers; a
   KIP-848 consumer reads each once (keys, values and headers intact) and commits; its
   committed offsets equal the high watermarks.
3. list_consumer_groups and describe_consumer_groups show the group as a "consumer"
   (KIP-848) group; after the member left, delete_consumer_groups removes it.
4. Two KIP-848 members of one group split a topic's partitions and together read every
   record once.
5. A regex subscription ("^prefix.*"), resolved by the broker: the member reads the two
   matching topics and not the third, then a matching topic created while it runs.
6. Transactions with a KIP-848 group: send_offsets_to_transaction commits the group's
   offsets with the transaction; a read_committed member reads the committed records and
   none of an aborted transaction.

Prints "PASS name" / "FAIL name: reason" lines, then exactly one line
"confluent-kafka: N passed, M failed"; exits non-zero if M > 0.
"""
import os
import sys
import time
import traceback

from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupType, KafkaException,
                             Producer, TopicPartition, libversion, version)
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BOOTSTRAP", "127.0.0.1:9092")
RUN = f"{os.getpid()}-{int(time.time())}"
passed = failed = 0
admin = AdminClient({"bootstrap.servers": BOOTSTRAP})


def check(fn):
    global passed, failed
    name = fn.__name__.replace("_", "-")
    try:
        fn()
        print(f"PASS {name}", flush=True)
        passed += 1
    except Exception as e:  # noqa: BLE001 - any failure of a check is reported as such
        where = traceback.extract_tb(e.__traceback__)[-1]
        print(f"FAIL {name}: {e!r} (line {where.lineno})", flush=True)
        failed += 1
    return fn


def create(name, partitions):
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)


def produce(topic, n, prefix, **conf):
    p = Producer({"bootstrap.servers": BOOTSTRAP, "enable.idempotence": True, "linger.ms": 5, **conf})
    errors = []
    for i in range(n):
        p.produce(topic, key=f"k{i}", value=f"{prefix}-{i}", headers=[("h", f"{i}".encode())],
                  on_delivery=lambda err, _m: err and errors.append(err))
        p.poll(0)
    assert p.flush(30) == 0, "records left unsent"
    assert not errors, f"delivery errors: {errors[:3]}"


def consumer(group, **conf):
    return Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})


def read(consumers, want, timeout=60, stop=None):
    """Polls the consumers in turn until `want` records arrived (or `stop()` says so):
    {consumer index: [messages]}."""
    got = {i: [] for i in range(len(consumers))}
    deadline = time.time() + timeout
    while time.time() < deadline:
        for i, c in enumerate(consumers):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            got[i].append(m)
        if sum(len(v) for v in got.values()) >= want or (stop and stop(got)):
            break
    return got


TOPIC = f"cairn-ck-{RUN}"
GROUP = f"cairn-ck-group-{RUN}"


@check
def admin_topics():
    create(TOPIC, 3)
    d = admin.describe_topics(__import__("confluent_kafka").TopicCollection([TOPIC]))[TOPIC].result(30)
    assert len(d.partitions) == 3, d.partitions
    cluster = admin.describe_cluster().result(30)
    assert cluster.nodes, "describe_cluster: no nodes"


@check
def consumer_848_reads_all():
    produce(TOPIC, 300, "v", **{"compression.type": "zstd"})
    c = consumer(GROUP)
    c.subscribe([TOPIC])
    msgs = read([c], 300)[0]
    assert len(msgs) == 300, f"read {len(msgs)} of 300"
    seen = {(m.partition(), m.offset()) for m in msgs}
    assert len(seen) == 300, "a record read twice"
    for m in msgs:
        i = m.key().decode()[1:]
        assert m.value() == f"v-{i}".encode() and dict(m.headers())["h"] == i.encode(), m
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(TOPIC, p) for p in range(3)], 30)
    high = [c.get_watermark_offsets(TopicPartition(TOPIC, p), 30)[1] for p in range(3)]
    assert [tp.offset for tp in committed] == high, f"committed {committed}, high watermarks {high}"
    c.close()


@check
def group_848_described_and_deleted():
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(30)
    assert GROUP in {g.group_id for g in listed.valid}, "not listed as a consumer-protocol group"
    d = admin.describe_consumer_groups([GROUP])[GROUP].result(30)
    assert d.type == ConsumerGroupType.CONSUMER, d.type
    assert d.state == ConsumerGroupState.EMPTY, d.state
    admin.delete_consumer_groups([GROUP])[GROUP].result(30)
    listed = admin.list_consumer_groups().result(30)
    assert GROUP not in {g.group_id for g in listed.valid}, "still listed after delete"


@check
def two_members_split():
    topic, group = f"{TOPIC}-split", f"{GROUP}-split"
    create(topic, 4)
    a, b = consumer(group), consumer(group)
    a.subscribe([topic])
    b.subscribe([topic])
    # both hold partitions (all 4 between them) before anything is produced
    deadline = time.time() + 60
    while time.time() < deadline:
        read([a, b], 1, timeout=0.5)
        sa, sb = a.assignment(), b.assignment()
        if sa and sb and len(sa) + len(sb) == 4:
            break
    assert a.assignment() and b.assignment(), f"assignments {a.assignment()} / {b.assignment()}"
    produce(topic, 400, "s")
    got = read([a, b], 400)
    keys = [(m.partition(), m.offset()) for v in got.values() for m in v]
    assert len(keys) == 400 and len(set(keys)) == 400, f"read {len(keys)} ({len(set(keys))} distinct) of 400"
    assert got[0] and got[1], "one member read everything"
    a.close()
    b.close()


@check
def regex_subscription_848():
    prefix = f"cairn-ck-rx-{RUN}"
    for t in (f"{prefix}-a", f"{prefix}-b", f"x{prefix}-c"):
        create(t, 1)
        produce(t, 50, t)
    c = consumer(f"{GROUP}-rx")
    c.subscribe([f"^{prefix}-.*"])
    got = read([c], 100)[0]
    topics = sorted({m.topic() for m in got})
    assert len(got) == 100 and topics == [f"{prefix}-a", f"{prefix}-b"], f"read {len(got)} from {topics}"
    create(f"{prefix}-new", 1)
    produce(f"{prefix}-new", 20, "new")
    more = read([c], 20, timeout=60)[0]
    topics = {m.topic() for m in more}
    assert len(more) == 20 and topics == {f"{prefix}-new"}, f"then read {len(more)} from {topics}"
    c.close()


@check
def transactions_848():
    src, out, group = f"{TOPIC}-txin", f"{TOPIC}-txout", f"{GROUP}-tx"
    create(src, 1)
    create(out, 1)
    produce(src, 10, "in")
    c = consumer(group, **{"isolation.level": "read_committed"})
    c.subscribe([src])
    msgs = read([c], 10)[0]
    assert len(msgs) == 10, f"read {len(msgs)} of 10 inputs"
    p = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": f"cairn-ck-tx-{RUN}"})
    p.init_transactions(30)
    p.begin_transaction()
    for m in msgs:
        p.produce(out, value=b"committed-" + m.value())
    p.send_offsets_to_transaction([TopicPartition(src, 0, msgs[-1].offset() + 1)],
                                  c.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(out, value=b"aborted")
    p.abort_transaction(30)
    committed = c.committed([TopicPartition(src, 0)], 30)[0].offset
    assert committed == 10, f"group offset {committed} after the committed transaction, want 10"
    c.close()
    r = consumer(f"{group}-reader", **{"isolation.level": "read_committed"})
    r.subscribe([out])
    got = read([r], 15, timeout=20)[0]
    values = [m.value() for m in got]
    assert len(values) == 10 and all(v.startswith(b"committed-") for v in values), \
        f"read_committed read {len(values)}: {values[:3]}... (want the 10 committed, none aborted)"
    r.close()


_v = version()
print(f"confluent-kafka {_v if isinstance(_v, str) else _v[0]} (librdkafka {libversion()[0]}) against {BOOTSTRAP}", file=sys.stderr)
print(f"confluent-kafka: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
