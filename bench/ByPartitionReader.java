import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Benchmark reader for bench/run.sh: reads a whole topic back partition by
 * partition WITHOUT a consumer group (assign() + seekToBeginning(), no commits,
 * no group.id), and prints one machine-readable line:
 *
 *   RESULT records=N bytes=B ms=T mb_per_s=X rec_per_s=Y partitions=P gaps=G
 *
 * MB = 2^20 bytes of record key+value, as kafka-producer-perf-test counts them.
 * The clock starts at the first poll() after seekToBeginning() and stops when
 * the last expected record has been returned.
 *
 * With --offsets-only it only prints
 *   OFFSETS total=N partitions=P
 * (sum over partitions of endOffset - beginningOffset), used to check that a
 * perf-test run really stored every acknowledged record.
 *
 * With --read-committed it reads with isolation.level=read_committed (a topic written
 * in transactions: control records take offsets, so gaps are expected) until every
 * partition's position reaches its end offset (the LSO), and --expect counts records.
 *
 * Usage: ByPartitionReader --bootstrap HOST:PORT --topic T [--expect N]
 *          [--offsets-only] [--read-committed] [--stall-timeout-ms 30000]
 * Exit status: 0 ok, 2 usage, 3 stalled / short read, 4 count mismatch with --expect.
 */
public class ByPartitionReader {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null;
        long expect = -1, stallTimeoutMs = 30000;
        boolean offsetsOnly = false;
        boolean readCommitted = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap": bootstrap = args[++i]; break;
                case "--topic": topic = args[++i]; break;
                case "--expect": expect = Long.parseLong(args[++i]); break;
                case "--offsets-only": offsetsOnly = true; break;
                case "--read-committed": readCommitted = true; break;
                case "--stall-timeout-ms": stallTimeoutMs = Long.parseLong(args[++i]); break;
                default:
                    System.err.println("unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        if (bootstrap == null || topic == null) {
            System.err.println("usage: ByPartitionReader --bootstrap HOST:PORT --topic T [--expect N] [--offsets-only]");
            System.exit(2);
        }

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "bench-by-partition-reader");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        // No consumer group: no group.id, no commits.
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("isolation.level", readCommitted ? "read_committed" : "read_uncommitted");
        // Fetch settings, explicit so both brokers see identical requests.
        p.put("fetch.min.bytes", "1");
        p.put("fetch.max.wait.ms", "500");
        p.put("fetch.max.bytes", "52428800");
        p.put("max.partition.fetch.bytes", "1048576");
        p.put("max.poll.records", "2000");
        p.put("receive.buffer.bytes", "65536");
        p.put("check.crcs", "true");
        p.put("request.timeout.ms", "30000");
        p.put("default.api.timeout.ms", "60000");

        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<PartitionInfo> infos = c.partitionsFor(topic, Duration.ofSeconds(60));
            if (infos == null || infos.isEmpty()) {
                System.err.println("ByPartitionReader: topic " + topic + " has no partitions (does it exist?)");
                System.exit(3);
            }
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : infos) tps.add(new TopicPartition(topic, pi.partition()));
            Map<TopicPartition, Long> begin = c.beginningOffsets(tps, Duration.ofSeconds(60));
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(60));
            long total = 0;
            for (TopicPartition tp : tps) total += end.get(tp) - begin.get(tp);

            if (offsetsOnly) {
                System.out.println("OFFSETS total=" + total + " partitions=" + tps.size());
                if (expect >= 0 && total != expect) System.exit(4);
                return;
            }
            if (expect >= 0 && total != expect && !readCommitted) {
                System.err.println("ByPartitionReader: WARNING end-beginning offsets sum to " + total
                        + " but " + expect + " records were expected; reading " + total);
            }

            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> next = new HashMap<>(begin);
            long records = 0, bytes = 0, gaps = 0;
            long t0 = System.nanoTime();
            long lastProgress = t0;
            while (readCommitted ? !caughtUp(c, tps, end) : records < total) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(100));
                long now = System.nanoTime();
                if (recs.isEmpty()) {
                    if ((now - lastProgress) / 1_000_000 > stallTimeoutMs) {
                        System.err.println("ByPartitionReader: STALLED: no records for " + stallTimeoutMs
                                + " ms after " + records + " of " + total + " records; positions:");
                        for (TopicPartition tp : tps) {
                            System.err.println("  " + tp + " position=" + c.position(tp)
                                    + " begin=" + begin.get(tp) + " end=" + end.get(tp));
                        }
                        System.exit(3);
                    }
                    continue;
                }
                lastProgress = now;
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    long want = next.get(tp);
                    if (r.offset() != want) gaps++;
                    next.put(tp, r.offset() + 1);
                    records++;
                    if (r.value() != null) bytes += r.value().length;
                    if (r.key() != null) bytes += r.key().length;
                }
            }
            double ms = (System.nanoTime() - t0) / 1e6;
            double mb = bytes / (1024.0 * 1024.0);
            System.out.printf("RESULT records=%d bytes=%d ms=%.1f mb_per_s=%.2f rec_per_s=%.1f partitions=%d gaps=%d%n",
                    records, bytes, ms, mb / (ms / 1000.0), records / (ms / 1000.0), tps.size(), gaps);
            if (gaps > 0 && !readCommitted) {
                System.err.println("ByPartitionReader: WARNING " + gaps + " offset discontinuities seen");
            }
            if (readCommitted && expect >= 0 && records != expect) {
                System.err.println("ByPartitionReader: read " + records + " committed records, expected " + expect);
                System.exit(4);
            }
        }
    }

    /** Whether every partition's position has reached its end offset (read_committed: the LSO). */
    private static boolean caughtUp(KafkaConsumer<byte[], byte[]> c, List<TopicPartition> tps,
                                    Map<TopicPartition, Long> end) {
        for (TopicPartition tp : tps) {
            if (c.position(tp) < end.get(tp)) return false;
        }
        return true;
    }
}
