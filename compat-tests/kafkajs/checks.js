// kafkajs (the most used Node.js client) against a Kafka-compatible broker:
//
//   node checks.js 127.0.0.1:9092
//
// 1. admin: create a 3-partition topic, list it, read its metadata and offsets, add a
//    partition, read and change a topic config, delete records below an offset.
// 2. An idempotent producer writes 300 keyed records, gzip-compressed, with headers;
//    a consumer group reads every one (keys, values and headers intact) and commits.
// 3. The group's committed offsets equal the end offsets; describeGroups shows it
//    Empty after the member left; deleteGroups removes it.
// 4. Two members of one group split the partitions and together read every record once.
// 5. Transactions: a committed transaction is read by a read_committed consumer, an
//    aborted one is not (a read_uncommitted consumer sees both, plus the markers' gaps).
// 6. sendOffsets: offsets committed inside a transaction appear only when it commits.
// 7. Fencing: a second producer with the same transactional.id fences the first, whose
//    commit then fails with a fencing error, and whose records are never read_committed.
//
// Prints "PASS name" / "FAIL name: reason" lines, then exactly one line
// "kafkajs: N passed, M failed"; exits non-zero if M > 0.
'use strict';
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
const { Kafka, logLevel, CompressionTypes, ConfigResourceTypes } = require('kafkajs');

const bootstrap = (process.argv[2] || process.env.BOOTSTRAP || '127.0.0.1:9092').split(',');
const run = `${process.pid}-${Date.now()}`;
const kafka = new Kafka({
  clientId: 'cairn-kafkajs-checks',
  brokers: bootstrap,
  logLevel: logLevel.NOTHING,
  retry: { retries: 8 },
});

let passed = 0;
let failed = 0;
const CHECK_TIMEOUT_MS = 90000;

async function check(name, fn) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${CHECK_TIMEOUT_MS} ms`)), CHECK_TIMEOUT_MS);
  });
  try {
    await Promise.race([fn(), timeout]);
    console.log(`PASS ${name}`);
    passed++;
  } catch (e) {
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
    failed++;
  } finally {
    clearTimeout(timer);
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

function assertEqual(got, want, what) {
  const g = JSON.stringify(got);
  const w = JSON.stringify(want);
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One group member reading `topics` from the beginning (where the group has no offsets).
// `records` and `assigned` (its partitions as of its latest join) fill in as it runs; offsets
// are committed only when `commit` is set (each record's offset + 1).
async function startMember({ groupId, topics, readUncommitted = false, commit = false }) {
  const consumer = kafka.consumer({
    groupId,
    readUncommitted,
    sessionTimeout: 10000,
    heartbeatInterval: 1000,
    rebalanceTimeout: 20000,
    maxWaitTimeInMs: 200,
  });
  const m = { records: [], assigned: [], last: Date.now(), stop: () => consumer.disconnect() };
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    const now = [];
    for (const [topic, parts] of Object.entries(e.payload.memberAssignment)) {
      for (const p of parts) now.push(`${topic}/${p}`);
    }
    m.assigned = now.sort();
  });
  await consumer.connect();
  for (const topic of topics) await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      m.records.push({ topic, partition, offset: Number(message.offset), key: message.key && message.key.toString(),
        value: message.value && message.value.toString(), headers: message.headers });
      m.last = Date.now();
      if (commit) await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }]);
    },
  });
  return m;
}

// Waits (up to a minute) until `done()` holds; returns whether it did.
async function waitFor(done) {
  const deadline = Date.now() + 60000;
  while (Date.now() < deadline) {
    if (done()) return true;
    await sleep(100);
  }
  return false;
}

// Consumes `topics` in group `groupId` until `want` records arrived, or, when want < 0,
// until `idleMs` passed without a new one after the member got its partitions.
async function consume({ groupId, topics, want, readUncommitted = false, commit = false, idleMs = 4000 }) {
  const m = await startMember({ groupId, topics, readUncommitted, commit });
  try {
    if (want >= 0) {
      await waitFor(() => m.records.length >= want);
      // Let a last fetch land so that extra records (duplicates) would be seen.
      await sleep(500);
    } else {
      await waitFor(() => m.assigned.length > 0 && Date.now() - m.last > idleMs);
    }
  } finally {
    await m.stop();
  }
  return m;
}

async function endOffsets(admin, topic) {
  const offs = await admin.fetchTopicOffsets(topic);
  const m = {};
  for (const o of offs) m[o.partition] = Number(o.high);
  return m;
}

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  const topic = `kafkajs-${run}`;
  const group = `kafkajs-group-${run}`;

  await check('admin: create, list, metadata, partitions, configs', async () => {
    await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 1 }], waitForLeaders: true });
    const topics = await admin.listTopics();
    assert(topics.includes(topic), `listTopics lacks ${topic}`);
    const md = await admin.fetchTopicMetadata({ topics: [topic] });
    assertEqual(md.topics[0].partitions.map((p) => p.partitionId).sort(), [0, 1, 2], 'partitions');
    const cluster = await admin.describeCluster();
    assert(cluster.brokers.length >= 1 && cluster.controller !== null, `describeCluster: ${JSON.stringify(cluster)}`);
    const extra = `kafkajs-extra-${run}`;
    await admin.createTopics({ topics: [{ topic: extra, numPartitions: 1 }], waitForLeaders: true });
    await admin.createPartitions({ topicPartitions: [{ topic: extra, count: 2 }] });
    const md2 = await admin.fetchTopicMetadata({ topics: [extra] });
    assertEqual(md2.topics[0].partitions.length, 2, 'partitions after createPartitions');
    await admin.alterConfigs({
      validateOnly: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: extra, configEntries: [{ name: 'retention.ms', value: '3600000' }] }],
    });
    const cfg = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: extra, configNames: ['retention.ms'] }],
    });
    const entry = cfg.resources[0].configEntries.find((e) => e.configName === 'retention.ms');
    assertEqual(entry && entry.configValue, '3600000', 'retention.ms after alterConfigs');
    // A duplicate create is refused with TOPIC_ALREADY_EXISTS.
    let dup = null;
    try {
      await admin.createTopics({ topics: [{ topic: extra, numPartitions: 1 }] });
    } catch (e) {
      dup = e;
    }
    // kafkajs resolves createTopics to false when the topic exists (it treats
    // TOPIC_ALREADY_EXISTS as "not created"); an error must name it.
    assert(dup === null || /already exists/i.test(String(dup.message) + JSON.stringify(dup.errors || '')), `duplicate create: ${dup}`);
    await admin.deleteTopics({ topics: [extra] });
    const after = await admin.listTopics();
    assert(!after.includes(extra), `${extra} still listed after deleteTopics`);
  });

  const sent = [];
  await check('idempotent producer: 300 keyed gzip records with headers', async () => {
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      for (let batch = 0; batch < 10; batch++) {
        const messages = [];
        for (let i = 0; i < 30; i++) {
          const n = batch * 30 + i;
          messages.push({ key: `k${n % 17}`, value: `v${n}`, headers: { seq: String(n) } });
          sent.push({ key: `k${n % 17}`, value: `v${n}`, seq: String(n) });
        }
        const res = await producer.send({ topic, messages, acks: -1, compression: CompressionTypes.GZIP });
        for (const r of res) assertEqual(r.errorCode, 0, 'produce error code');
      }
    } finally {
      await producer.disconnect();
    }
    const ends = await endOffsets(admin, topic);
    assertEqual(Object.values(ends).reduce((a, b) => a + b, 0), 300, 'sum of end offsets');
  });

  await check('consumer group: reads every record once and commits', async () => {
    const { records } = await consume({ groupId: group, topics: [topic], want: 300, commit: true });
    assertEqual(records.length, 300, 'records read');
    const byValue = new Map(records.map((r) => [r.value, r]));
    assertEqual(byValue.size, 300, 'distinct values');
    for (const s of sent) {
      const r = byValue.get(s.value);
      assert(r, `missing ${s.value}`);
      assertEqual(r.key, s.key, `key of ${s.value}`);
      assertEqual(r.headers.seq && r.headers.seq.toString(), s.seq, `header of ${s.value}`);
    }
    // The same key always lands in the same partition.
    const part = {};
    for (const r of records) {
      assert(part[r.key] === undefined || part[r.key] === r.partition, `key ${r.key} in two partitions`);
      part[r.key] = r.partition;
    }
  });

  await check('admin: committed offsets equal end offsets; group described and deleted', async () => {
    const ends = await endOffsets(admin, topic);
    const committed = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    const got = {};
    for (const p of committed[0].partitions) got[p.partition] = Number(p.offset);
    assertEqual(got, ends, 'committed offsets');
    const groups = await admin.listGroups();
    assert(groups.groups.some((g) => g.groupId === group), `listGroups lacks ${group}`);
    const desc = await admin.describeGroups([group]);
    assertEqual(desc.groups[0].state, 'Empty', 'group state after the member left');
    await admin.deleteGroups([group]);
    const desc2 = await admin.describeGroups([group]);
    assertEqual(desc2.groups[0].state, 'Dead', 'group state after deleteGroups');
  });

  await check('consumer group: two members split the partitions', async () => {
    const g = `kafkajs-pair-${run}`;
    const a = await startMember({ groupId: g, topics: [topic], commit: true });
    const b = await startMember({ groupId: g, topics: [topic], commit: true });
    const values = () => new Set([...a.records, ...b.records].map((r) => r.value));
    // Both stay in the group until, in one generation, each holds partitions, none is held
    // twice, all three are held, and every record was read.
    const split = () => a.assigned.length > 0 && b.assigned.length > 0 &&
      a.assigned.every((p) => !b.assigned.includes(p)) && a.assigned.length + b.assigned.length === 3;
    const ok = await waitFor(() => split() && values().size === 300);
    await Promise.all([a.stop(), b.stop()]);
    assert(ok, `assignments ${a.assigned} / ${b.assigned}, ${values().size} distinct records read`);
    assertEqual(a.records.length + b.records.length >= 300, true, 'records read');
  });

  await check('admin: deleteTopicRecords moves the log start offset', async () => {
    const ends = await endOffsets(admin, topic);
    const p = Number(Object.keys(ends).find((k) => ends[k] >= 2));
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: p, offset: '1' }] });
    const offs = await admin.fetchTopicOffsets(topic);
    const o = offs.find((x) => x.partition === p);
    assertEqual(Number(o.low), 1, `low watermark of partition ${p}`);
  });

  const txTopic = `kafkajs-tx-${run}`;
  await check('transactions: committed records are read_committed, aborted ones are not', async () => {
    await admin.createTopics({ topics: [{ topic: txTopic, numPartitions: 2 }], waitForLeaders: true });
    const producer = kafka.producer({ transactionalId: `kafkajs-tx-${run}`, idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      const t1 = await producer.transaction();
      await t1.send({ topic: txTopic, messages: [0, 1, 2, 3].map((i) => ({ key: `c${i}`, value: `committed-${i}` })) });
      await t1.commit();
      const t2 = await producer.transaction();
      await t2.send({ topic: txTopic, messages: [0, 1, 2, 3].map((i) => ({ key: `a${i}`, value: `aborted-${i}` })) });
      await t2.abort();
      const t3 = await producer.transaction();
      await t3.send({ topic: txTopic, messages: [{ key: 'c4', value: 'committed-4' }] });
      await t3.commit();
    } finally {
      await producer.disconnect();
    }
    const rc = await consume({ groupId: `kafkajs-rc-${run}`, topics: [txTopic], want: -1 });
    assertEqual(rc.records.map((r) => r.value).sort(), [0, 1, 2, 3, 4].map((i) => `committed-${i}`), 'read_committed values');
    const ru = await consume({ groupId: `kafkajs-ru-${run}`, topics: [txTopic], want: -1, readUncommitted: true });
    assertEqual(ru.records.length, 9, 'read_uncommitted sees committed and aborted records');
    // Three transactions wrote three markers: the end offsets count them too.
    const ends = await endOffsets(admin, txTopic);
    assert(Object.values(ends).reduce((a, b) => a + b, 0) >= 9 + 3, `end offsets ${JSON.stringify(ends)} lack the markers`);
  });

  await check('transactions: sendOffsets commits group offsets with the transaction', async () => {
    const g = `kafkajs-eos-${run}`;
    const producer = kafka.producer({ transactionalId: `kafkajs-eos-${run}`, idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      const aborted = await producer.transaction();
      await aborted.sendOffsets({ consumerGroupId: g, topics: [{ topic, partitions: [{ partition: 0, offset: '5' }] }] });
      await aborted.abort();
      let offs = await admin.fetchOffsets({ groupId: g, topics: [topic] });
      let p0 = offs[0].partitions.find((p) => p.partition === 0);
      assertEqual(p0.offset, '-1', 'offset after an aborted sendOffsets');
      const tx = await producer.transaction();
      await tx.send({ topic: txTopic, messages: [{ value: 'with-offsets' }] });
      await tx.sendOffsets({ consumerGroupId: g, topics: [{ topic, partitions: [{ partition: 0, offset: '7' }] }] });
      await tx.commit();
      // EndTxn answers once the commit is decided; the markers that make the offsets
      // visible follow (Kafka writes them after it answers), so wait for them a while.
      const deadline = Date.now() + 15000;
      do {
        offs = await admin.fetchOffsets({ groupId: g, topics: [topic] });
        p0 = offs[0].partitions.find((p) => p.partition === 0);
        if (p0.offset === '7') break;
        await sleep(200);
      } while (Date.now() < deadline);
      assertEqual(p0.offset, '7', 'offset after a committed sendOffsets');
    } finally {
      await producer.disconnect();
    }
  });

  await check('transactions: a new producer with the same transactional.id fences the old one', async () => {
    const fenceTopic = `kafkajs-fence-${run}`;
    await admin.createTopics({ topics: [{ topic: fenceTopic, numPartitions: 1 }], waitForLeaders: true });
    const id = `kafkajs-fence-${run}`;
    const old = kafka.producer({ transactionalId: id, idempotent: true, maxInFlightRequests: 1 });
    const fresh = kafka.producer({ transactionalId: id, idempotent: true, maxInFlightRequests: 1 });
    await old.connect();
    try {
      const t = await old.transaction();
      await t.send({ topic: fenceTopic, messages: [{ value: 'zombie' }] });
      await fresh.connect();
      // The new producer's InitProducerId bumps the epoch and aborts the open transaction.
      const t2 = await fresh.transaction();
      await t2.send({ topic: fenceTopic, messages: [{ value: 'fresh' }] });
      await t2.commit();
      let err = null;
      try {
        await t.send({ topic: fenceTopic, messages: [{ value: 'zombie-2' }] });
        await t.commit();
      } catch (e) {
        err = e;
      }
      assert(err !== null, 'the fenced producer committed');
      const text = `${err.type || ''} ${err.name} ${err.message}`;
      assert(/FENCED|EPOCH|fenced|epoch/.test(text), `unexpected error for the fenced producer: ${text}`);
    } finally {
      await old.disconnect().catch(() => {});
      await fresh.disconnect();
    }
    const rc = await consume({ groupId: `kafkajs-fence-rc-${run}`, topics: [fenceTopic], want: -1 });
    assertEqual(rc.records.map((r) => r.value), ['fresh'], 'read_committed values after fencing');
  });

  await admin.deleteTopics({ topics: [topic, txTopic] }).catch(() => {});
  await admin.disconnect();
}

main()
  .catch((e) => {
    console.log(`FAIL setup: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
    failed++;
  })
  .finally(() => {
    console.log(`kafkajs: ${passed} passed, ${failed} failed`);
    process.exit(failed > 0 ? 1 : 0);
  });
