import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Benchmark reader for bench/run.sh: M consumers in ONE consumer group (classic protocol,
 * the Java client's defaults) subscribe to a topic together and read it from the start
 * until the group has seen every expected record. Prints one machine-readable line:
 *
 *   RESULT members=M records=N bytes=B join_ms=J ms=T mb_per_s=X rebalances=R
 *
 * join_ms: from the moment all members call subscribe() until every member has received
 * its first record (the group has formed, assigned and started fetching).
 * ms / mb_per_s: from that moment until the last expected record (MB = 2^20 bytes of
 * key+value, as kafka-producer-perf-test counts them). rebalances: partition assignments
 * seen, summed over members.
 *
 * Usage: GroupReader --bootstrap HOST:PORT --topic T --group G --expect N [--members 3]
 *          [--stall-timeout-ms 60000]
 * Exit status: 0 ok, 2 usage, 3 stalled / short read.
 */
public class GroupReader {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null, group = null;
        long expect = -1, stallTimeoutMs = 60000;
        int members = 3;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap": bootstrap = args[++i]; break;
                case "--topic": topic = args[++i]; break;
                case "--group": group = args[++i]; break;
                case "--expect": expect = Long.parseLong(args[++i]); break;
                case "--members": members = Integer.parseInt(args[++i]); break;
                case "--stall-timeout-ms": stallTimeoutMs = Long.parseLong(args[++i]); break;
                default:
                    System.err.println("unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        if (bootstrap == null || topic == null || group == null || expect < 0) {
            System.err.println("usage: GroupReader --bootstrap HOST:PORT --topic T --group G --expect N [--members M]");
            System.exit(2);
        }
        final AtomicLong records = new AtomicLong(), bytes = new AtomicLong(), rebalances = new AtomicLong();
        final AtomicLong lastRecordNs = new AtomicLong();
        final CountDownLatch allFirst = new CountDownLatch(members);
        final CountDownLatch start = new CountDownLatch(1);
        final long want = expect, stall = stallTimeoutMs;
        final String t = topic;
        List<Thread> threads = new ArrayList<>();
        List<Throwable> errors = Collections.synchronizedList(new ArrayList<>());
        for (int m = 0; m < members; m++) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("group.id", group);
            p.put("client.id", "group-reader-" + m);
            p.put("auto.offset.reset", "earliest");
            p.put("enable.auto.commit", "true");
            p.put("key.deserializer", ByteArrayDeserializer.class.getName());
            p.put("value.deserializer", ByteArrayDeserializer.class.getName());
            p.put("fetch.max.bytes", String.valueOf(50 << 20));
            p.put("max.partition.fetch.bytes", String.valueOf(1 << 20));
            p.put("max.poll.records", "2000");
            Thread th = new Thread(() -> {
                boolean first = true;
                try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
                    start.await();
                    c.subscribe(Collections.singletonList(t), new org.apache.kafka.clients.consumer.ConsumerRebalanceListener() {
                        public void onPartitionsRevoked(java.util.Collection<org.apache.kafka.common.TopicPartition> ps) { }
                        public void onPartitionsAssigned(java.util.Collection<org.apache.kafka.common.TopicPartition> ps) {
                            rebalances.incrementAndGet();
                        }
                    });
                    long idleSince = System.nanoTime();
                    while (records.get() < want) {
                        ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(200));
                        if (rs.isEmpty()) {
                            if ((System.nanoTime() - idleSince) / 1_000_000 > stall) {
                                throw new IllegalStateException("no record for " + stall + " ms");
                            }
                            continue;
                        }
                        idleSince = System.nanoTime();
                        if (first) {
                            first = false;
                            allFirst.countDown();
                        }
                        long b = 0;
                        for (ConsumerRecord<byte[], byte[]> r : rs) {
                            b += (r.key() == null ? 0 : r.key().length) + (r.value() == null ? 0 : r.value().length);
                        }
                        bytes.addAndGet(b);
                        if (records.addAndGet(rs.count()) >= want) {
                            lastRecordNs.compareAndSet(0, System.nanoTime());
                        }
                    }
                    if (first) {
                        allFirst.countDown(); // got no partition with data before the end
                    }
                } catch (Throwable e) {
                    errors.add(e);
                    allFirst.countDown();
                }
            });
            threads.add(th);
            th.start();
        }
        long t0 = System.nanoTime();
        start.countDown();
        allFirst.await();
        long joined = System.nanoTime();
        for (Thread th : threads) {
            th.join();
        }
        if (!errors.isEmpty() || records.get() < expect) {
            System.err.println("GroupReader: " + records.get() + " of " + expect + " records; errors: " + errors);
            System.exit(3);
        }
        long end = lastRecordNs.get();
        double ms = (end - joined) / 1e6;
        double mb = bytes.get() / (1024.0 * 1024.0);
        System.out.printf("RESULT members=%d records=%d bytes=%d join_ms=%.1f ms=%.1f mb_per_s=%.2f rebalances=%d%n",
            members, records.get(), bytes.get(), (joined - t0) / 1e6, ms, mb / (ms / 1000.0), rebalances.get());
    }
}
