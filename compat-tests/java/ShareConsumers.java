// Cairn compat-tests helper (compiled by run.sh with javac against lib/*; Kafka 4.1+).
// Three KafkaShareConsumers (KIP-932) with explicit acknowledgement in one share group
// on a one-partition topic: a queue, every member reading the same partition.
//
//   ShareConsumers BOOTSTRAP GROUP TOPIC RECORDS TIMEOUT_MS
//
// 1. Sets the group's share.auto.offset.reset to earliest, polls the three until
//    ShareGroupDescribe shows each of them assigned the partition, then produces RECORDS
//    records "v<i>", of which those with i % 10 == 3 end in "-reject" and those with
//    i % 7 == 5 in "-release". (With the default, latest, the partition's leader picks the
//    start when it first initializes the share partition, as Kafka's does: on a cluster
//    whose leader is not the group's coordinator that is the first ShareFetch, which can
//    come after the records, and then none is delivered.)
// 2. Rounds: each consumer polls once, holding what it got; the three sets must not
//    overlap (a record is locked by one member). Then each acknowledges what it holds:
//    REJECT the "-reject" records, RELEASE the "-release" ones on their first delivery,
//    ACCEPT the rest, and commitSync.
// 3. Once every record is accepted or rejected, closes two of the consumers, produces 5
//    more, lets the first consumer poll them, starts a new member (which must get none
//    of them while they are locked) and closes the first without acknowledging: the new
//    member must get them again, with a delivery count of 2.
// 4. Polls the new member for a while: nothing else may come.
// Prints what it saw; exit 0 when: every record but the rejected ones accepted exactly
// once, no record delivered to two members at once, every "-reject" record delivered
// once only, every "-release" record delivered again with delivery count 2, the records
// the closed consumer held delivered again, and nothing delivered after that.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ShareConsumers {
    static final List<String> problems = new ArrayList<>();

    static void problem(String s) {
        if (problems.size() < 20) problems.add(s);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: ShareConsumers BOOTSTRAP GROUP TOPIC RECORDS TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0], group = args[1], topic = args[2];
        int records = Integer.parseInt(args[3]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]);

        // 1. Every member assigned the partition.
        List<KafkaShareConsumer<String, String>> cs = new ArrayList<>();
        boolean assigned = false;
        try (Admin a = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            a.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get();
            for (int i = 0; i < 3; i++) cs.add(consumer(bootstrap, group, i, topic));
            while (!assigned && System.currentTimeMillis() < deadline) {
                for (KafkaShareConsumer<String, String> c : cs) {
                    if (!c.poll(Duration.ofMillis(100)).isEmpty()) problem("a record before any was produced");
                }
                ShareGroupDescription d = a.describeShareGroups(List.of(group)).all().get().get(group);
                int n = 0;
                for (ShareMemberDescription m : d.members()) {
                    if (m.assignment().topicPartitions().stream().anyMatch(tp -> tp.topic().equals(topic))) n++;
                }
                assigned = n == 3;
            }
        }
        System.out.println("assigned: " + assigned);
        if (!assigned) {
            System.exit(1);
        }
        Set<Integer> rejects = new HashSet<>(), releases = new HashSet<>();
        produce(bootstrap, topic, 0, records, rejects, releases);

        // 2. Rounds of polls that hold their records, then acknowledgements.
        Map<Long, Integer> deliveries = new HashMap<>();
        Map<Long, Integer> accepted = new HashMap<>();
        Map<Long, Short> lastCount = new HashMap<>();
        Set<Long> rejected = new HashSet<>();
        Set<Integer> readers = new HashSet<>();
        int overlaps = 0;
        while (accepted.size() + rejected.size() < records && System.currentTimeMillis() < deadline) {
            List<ConsumerRecords<String, String>> held = new ArrayList<>();
            Set<Long> locked = new HashSet<>();
            for (int i = 0; i < cs.size(); i++) {
                ConsumerRecords<String, String> got = cs.get(i).poll(Duration.ofMillis(300));
                held.add(got);
                if (!got.isEmpty()) readers.add(i);
                for (ConsumerRecord<String, String> r : got) {
                    if (!locked.add(r.offset())) {
                        overlaps++;
                        problem("offset " + r.offset() + " delivered to two members at once");
                    }
                    deliveries.merge(r.offset(), 1, Integer::sum);
                    lastCount.put(r.offset(), r.deliveryCount().orElse((short) -1));
                }
            }
            for (int i = 0; i < cs.size(); i++) {
                for (ConsumerRecord<String, String> r : held.get(i)) {
                    short count = r.deliveryCount().orElse((short) -1);
                    if (r.value().endsWith("-reject")) {
                        cs.get(i).acknowledge(r, AcknowledgeType.REJECT);
                        rejected.add(r.offset());
                    } else if (r.value().endsWith("-release") && count == 1) {
                        cs.get(i).acknowledge(r, AcknowledgeType.RELEASE);
                    } else {
                        cs.get(i).acknowledge(r, AcknowledgeType.ACCEPT);
                        accepted.merge(r.offset(), 1, Integer::sum);
                    }
                }
                cs.get(i).commitSync();
            }
        }
        int twice = 0;
        for (int n : accepted.values()) if (n > 1) twice++;
        int rejectedAgain = 0;
        for (long o : rejected) if (deliveries.getOrDefault(o, 0) != 1) rejectedAgain++;
        int releasedAgain = 0;
        for (int i : releases) {
            if (rejects.contains(i)) continue;
            if (deliveries.getOrDefault((long) i, 0) >= 2 && lastCount.getOrDefault((long) i, (short) 0) == 2) releasedAgain++;
        }
        long wantReleased = releases.stream().filter(i -> !rejects.contains(i)).count();
        System.out.println("accepted: " + accepted.size() + "/" + (records - rejects.size())
                + " rejected: " + rejected.size() + "/" + rejects.size()
                + " accepted twice: " + twice + " overlaps: " + overlaps
                + " rejected delivered again: " + rejectedAgain
                + " released delivered again: " + releasedAgain + "/" + wantReleased
                + " members that read: " + readers.size());

        // 3. A member that closes gives back what it holds. The other two close first:
        //    a share consumer fetches ahead, so a subscribed member that is not polled
        //    could hold the new records in its buffer until their lock runs out.
        for (int i = 1; i < cs.size(); i++) cs.get(i).close();
        KafkaShareConsumer<String, String> first = cs.get(0);
        cs.clear();
        produce(bootstrap, topic, records, 5, new HashSet<>(), new HashSet<>());
        Set<Long> heldByClosed = new HashSet<>();
        while (heldByClosed.size() < 5 && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : first.poll(Duration.ofMillis(300))) {
                heldByClosed.add(r.offset());
                if (r.deliveryCount().orElse((short) -1) != 1) problem("offset " + r.offset() + " first delivered with count " + r.deliveryCount());
            }
        }
        // A new member joins while the first still holds them, then the first closes.
        cs.add(consumer(bootstrap, group, 3, topic));
        for (int i = 0; i < 3; i++) {
            if (!cs.get(0).poll(Duration.ofMillis(200)).isEmpty()) problem("a record still locked by another member");
        }
        first.close();
        Set<Long> again = new HashSet<>();
        boolean countTwo = true;
        Set<Long> extra = new HashSet<>();
        long quietUntil = 0;
        while (System.currentTimeMillis() < deadline && (again.size() < heldByClosed.size() || System.currentTimeMillis() < quietUntil)) {
            for (KafkaShareConsumer<String, String> c : cs) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) {
                    if (heldByClosed.contains(r.offset())) {
                        if (!again.add(r.offset())) extra.add(r.offset());
                        if (r.deliveryCount().orElse((short) -1) != 2) countTwo = false;
                    } else {
                        extra.add(r.offset());
                    }
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                c.commitSync();
            }
            // 4. Once they are back, keep polling a while: nothing else may come.
            if (quietUntil == 0 && again.size() == heldByClosed.size()) quietUntil = System.currentTimeMillis() + 3000;
        }
        System.out.println("held by the closed member: " + heldByClosed.size() + " delivered again: " + again.size()
                + " with delivery count 2: " + countTwo + " delivered after being finished: " + extra);
        for (KafkaShareConsumer<String, String> c : cs) c.close();
        for (String s : problems) System.out.println("problem: " + s);
        boolean ok = accepted.size() == records - rejects.size() && twice == 0 && overlaps == 0
                && rejected.size() == rejects.size() && rejectedAgain == 0 && releasedAgain == wantReleased
                && !heldByClosed.isEmpty() && again.equals(heldByClosed) && countTwo && extra.isEmpty()
                && problems.isEmpty();
        System.out.println(ok ? "ok" : "FAILED");
        System.exit(ok ? 0 : 1);
    }

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group, int i, String topic) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "cairn-share-" + i);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
        p.put("share.acknowledgement.mode", "explicit");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p);
        c.subscribe(List.of(topic));
        return c;
    }

    static void produce(String bootstrap, String topic, int from, int n, Set<Integer> rejects, Set<Integer> releases) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        // Small batches, so a member's acquisition (whole batches) is a few records.
        pp.put(ProducerConfig.BATCH_SIZE_CONFIG, "256");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(pp)) {
            for (int i = from; i < from + n; i++) {
                String v = "v" + i;
                if (n > 5 && i % 10 == 3) {
                    v += "-reject";
                    rejects.add(i);
                } else if (n > 5 && i % 7 == 5) {
                    v += "-release";
                    releases.add(i);
                }
                prod.send(new ProducerRecord<>(topic, "k" + i, v));
            }
            prod.flush();
        }
    }
}
