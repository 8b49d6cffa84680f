// Cairn compat-tests helper (compiled by run.sh with javac against lib/*; Kafka 4.2+).
// KIP-1226's share-partition lag, as Admin.listShareGroupOffsets (DescribeShareGroupOffsets
// v1) reports it: the records from the share-partition start offset on whose delivery is
// not complete.
//
//   ShareLag BOOTSTRAP GROUP TOPIC TIMEOUT_MS
//
// 1. Sets the group's share.auto.offset.reset to earliest and produces 10 records in one
//    batch to TOPIC (one partition).
// 2. A KafkaShareConsumer with explicit acknowledgement gets the 10, accepts offsets 0-2
//    and 4-8 and releases 3 and 9: the lag must be 2 (3 and 9), whatever start offset the
//    broker shows (at most 3).
// 3. It gets 3 and 9 again and accepts them: the lag must be 0.
// 4. 4 more records are produced and not read: the lag must be 4.
// Kafka 4.4 moves its persisted start offset lazily (it showed 0, 3, 3 where Cairn shows
// 3, 10, 10), so only the lag is held to one value.
// Prints each description; exit 0 when all of that held.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ShareLag {
    static final List<String> problems = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: ShareLag BOOTSTRAP GROUP TOPIC TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0], group = args[1], topic = args[2];
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]);
        TopicPartition tp = new TopicPartition(topic, 0);

        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get();
            produce(bootstrap, topic, 0, 10);

            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.CLIENT_ID_CONFIG, "cairn-lag");
            p.put("share.acknowledgement.mode", "explicit");
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
                c.subscribe(List.of(topic));
                Set<Long> got = new TreeSet<>();
                while (got.size() < 10 && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> rec : c.poll(Duration.ofMillis(500))) {
                        got.add(rec.offset());
                        boolean release = rec.offset() == 3 || rec.offset() == 9;
                        c.acknowledge(rec, release ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                    }
                    check("first commit", c.commitSync(Duration.ofSeconds(10)));
                }
                System.out.println("got " + got + ", released 3 and 9");
                if (got.size() != 10) problems.add("got " + got + ", want offsets 0 to 9");
                expect(admin, group, tp, 0, 3, 2, deadline);

                Set<Long> again = new TreeSet<>();
                while (again.size() < 2 && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> rec : c.poll(Duration.ofMillis(500))) {
                        again.add(rec.offset());
                        c.acknowledge(rec, AcknowledgeType.ACCEPT);
                    }
                    check("second commit", c.commitSync(Duration.ofSeconds(10)));
                }
                System.out.println("got again " + again + ", accepted");
                if (!again.equals(Set.of(3L, 9L))) problems.add("got again " + again + ", want [3, 9]");
                expect(admin, group, tp, 0, 10, 0, deadline);
            }
            produce(bootstrap, topic, 10, 4);
            expect(admin, group, tp, 0, 10, 4, deadline);
        }
        for (String s : problems) System.out.println("problem: " + s);
        System.out.println(problems.isEmpty() ? "ok" : "FAILED");
        System.exit(problems.isEmpty() ? 0 : 1);
    }

    /** Describes the group's share partition until its lag is `lag` and its start offset
     *  within [minStart, maxStart], or 15 s (or the deadline) pass. */
    static void expect(Admin admin, String group, TopicPartition tp, long minStart, long maxStart, long lag, long deadline)
            throws Exception {
        long until = Math.min(deadline, System.currentTimeMillis() + 15_000);
        SharePartitionOffsetInfo info = null;
        while (true) {
            Map<TopicPartition, SharePartitionOffsetInfo> all = admin
                .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                .partitionsToOffsetInfo(group).get();
            info = all.get(tp);
            boolean good = info != null && info.lag().orElse(-1L) == lag
                && info.startOffset() >= minStart && info.startOffset() <= maxStart;
            if (good || System.currentTimeMillis() > until) break;
            Thread.sleep(300);
        }
        System.out.println("described " + info + ", want lag " + lag + " with a start of " + minStart + " to " + maxStart);
        if (info == null || info.lag().orElse(-1L) != lag || info.startOffset() < minStart || info.startOffset() > maxStart)
            problems.add("described " + info + ", want lag " + lag + " with a start of " + minStart + " to " + maxStart);
    }

    static void produce(String bootstrap, String topic, int from, int n) throws Exception {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "60000");
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(pp)) {
            for (int i = from; i < from + n; i++) prod.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i));
            prod.flush();
        }
    }

    static void check(String what, Map<TopicIdPartition, Optional<KafkaException>> result) {
        result.forEach((tp, e) -> e.ifPresent(x -> problems.add(what + " on " + tp + ": " + x)));
    }
}
