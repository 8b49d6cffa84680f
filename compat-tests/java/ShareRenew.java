// Cairn compat-tests helper (compiled by run.sh with javac against lib/*; Kafka 4.4+).
// KIP-1222's RENEW acknowledgements and KIP-1206's record_limit acquire mode, with two
// KafkaShareConsumers on a one-partition topic.
//
//   ShareRenew BOOTSTRAP GROUP TOPIC TIMEOUT_MS
//
// 1. Sets the group's share.record.lock.duration.ms to 15000 (the least brokers allow by
//    default) and share.auto.offset.reset to earliest, then produces 10 records in one
//    batch.
// 2. Member A (share.acquire.mode=record_limit, max.poll.records=3) polls: it must get at
//    most 3 records although they sit in one batch of 10.
// 3. For 25 s (longer than the lock) A renews what it holds every 4 s (its next polls give
//    the renewed records back), while member B polls and accepts what it gets: B must get
//    the other records and none of A's.
// 4. A accepts its records and closes; B then reads whatever is left, and after that
//    nothing more for 4 s: every record accepted exactly once.
// Prints what it saw; exit 0 when all of that held and every commit succeeded.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ShareRenew {
    static final List<String> problems = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: ShareRenew BOOTSTRAP GROUP TOPIC TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0], group = args[1], topic = args[2];
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]);

        try (Admin a = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            a.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("share.record.lock.duration.ms", "15000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get();
        }
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "60000");
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(pp)) {
            for (int i = 0; i < 10; i++) prod.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
            prod.flush();
        }

        KafkaShareConsumer<String, String> a = consumer(bootstrap, group, topic, "a", "record_limit");
        List<ConsumerRecord<String, String>> held = new ArrayList<>();
        while (held.isEmpty() && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : a.poll(Duration.ofMillis(500))) held.add(r);
        }
        Set<Long> heldOffsets = new TreeSet<>();
        for (ConsumerRecord<String, String> r : held) heldOffsets.add(r.offset());
        System.out.println("A holds " + heldOffsets + " (record_limit, max.poll.records=3)");
        if (held.isEmpty() || held.size() > 3) problems.add("A got " + held.size() + " records, want 1 to 3");

        KafkaShareConsumer<String, String> b = consumer(bootstrap, group, topic, "b", "batch_optimized");
        Set<Long> gotB = new TreeSet<>(), acceptedA = new TreeSet<>();
        long renewUntil = System.currentTimeMillis() + 25_000, nextRenew = 0;
        int renewals = 0;
        while (System.currentTimeMillis() < renewUntil && System.currentTimeMillis() < deadline) {
            if (System.currentTimeMillis() >= nextRenew) {
                // Renewed records come back from A's next polls, to be acknowledged again.
                for (ConsumerRecord<String, String> r : held) a.acknowledge(r, AcknowledgeType.RENEW);
                List<ConsumerRecord<String, String>> back = new ArrayList<>();
                long until = System.currentTimeMillis() + 10_000;
                while (back.size() < held.size() && System.currentTimeMillis() < until) {
                    for (ConsumerRecord<String, String> r : a.poll(Duration.ofMillis(300))) {
                        if (heldOffsets.contains(r.offset())) {
                            back.add(r);
                        } else {
                            a.acknowledge(r, AcknowledgeType.ACCEPT);
                            acceptedA.add(r.offset());
                        }
                    }
                }
                if (back.size() < held.size()) problems.add("renewal " + renewals + " gave back " + back.size() + " of " + held.size());
                held = back;
                renewals++;
                nextRenew = System.currentTimeMillis() + 4_000;
            }
            for (ConsumerRecord<String, String> r : b.poll(Duration.ofMillis(500))) {
                if (heldOffsets.contains(r.offset())) problems.add("B got offset " + r.offset() + " while A renewed its lock");
                if (!gotB.add(r.offset())) problems.add("B got offset " + r.offset() + " twice");
                b.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            check("B's commit", b.commitSync(Duration.ofSeconds(10)));
        }
        System.out.println("A renewed " + renewals + " times, also accepted " + acceptedA + "; B got " + gotB);
        for (ConsumerRecord<String, String> r : held) a.acknowledge(r, AcknowledgeType.ACCEPT);
        check("A's accept", a.commitSync(Duration.ofSeconds(10)));
        // A closes, giving back anything it fetched ahead; B reads the rest, then nothing.
        a.close();
        long quiet = 0;
        while (System.currentTimeMillis() < deadline && (quiet == 0 || System.currentTimeMillis() < quiet)) {
            for (ConsumerRecord<String, String> r : b.poll(Duration.ofMillis(500))) {
                if (heldOffsets.contains(r.offset()) || acceptedA.contains(r.offset()) || !gotB.add(r.offset()))
                    problems.add("B got offset " + r.offset() + " after it was accepted");
                b.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            check("B's commit", b.commitSync(Duration.ofSeconds(10)));
            if (quiet == 0 && gotB.size() + heldOffsets.size() + acceptedA.size() >= 10) quiet = System.currentTimeMillis() + 4_000;
        }
        System.out.println("in the end B got " + gotB);
        b.close();
        Set<Long> all = new TreeSet<>(gotB);
        all.addAll(heldOffsets);
        all.addAll(acceptedA);
        if (all.size() != 10 || gotB.size() + heldOffsets.size() + acceptedA.size() != 10) problems.add("A and B together got " + all + ", want 10 distinct");
        if (renewals < 6) problems.add("only " + renewals + " renewals");
        for (String s : problems) System.out.println("problem: " + s);
        System.out.println(problems.isEmpty() ? "ok" : "FAILED");
        System.exit(problems.isEmpty() ? 0 : 1);
    }

    static void check(String what, Map<TopicIdPartition, Optional<KafkaException>> result) {
        result.forEach((tp, e) -> e.ifPresent(x -> problems.add(what + " on " + tp + ": " + x)));
    }

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group, String topic, String name, String mode) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "cairn-renew-" + name);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "3");
        p.put("share.acknowledgement.mode", "explicit");
        p.put("share.acquire.mode", mode);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p);
        c.subscribe(List.of(topic));
        return c;
    }
}
