// Cairn compat-tests helper (compiled by run.sh with javac against lib/*; Kafka 4.2+).
// A share consumer follows its partition to a new leader while the old leader stays up.
//
//   ShareLeaderMove BOOTSTRAP GROUP TOPIC TIMEOUT_MS
//
// Needs two brokers or more: prints "skip: ..." and exits 0 with fewer.
// 1. Creates TOPIC (one partition) on brokers [a, b], led by a, and produces 10 records.
// 2. A KafkaShareConsumer (share.auto.offset.reset=earliest) gets them.
// 3. The replicas are reordered to [b, a] and a preferred election moves the leadership to b;
//    a stays up, so its ShareFetch answers must say where the partition went: the 4.4 client
//    keeps each partition's leader for its share session and moves only on the
//    CurrentLeader of a NOT_LEADER_OR_FOLLOWER answer (or -1 for "unknown, look it up").
// 4. 10 more records are produced: the consumer must get all 20.
// Prints what happened; exit 0 when all of that held.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ShareLeaderMove {
    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: ShareLeaderMove BOOTSTRAP GROUP TOPIC TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0], group = args[1], topic = args[2];
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]);
        TopicPartition tp = new TopicPartition(topic, 0);

        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            List<Node> nodes = new ArrayList<>(admin.describeCluster().nodes().get());
            if (nodes.size() < 2) {
                System.out.println("skip: one broker, so no leader to move to");
                return;
            }
            nodes.sort(Comparator.comparingInt(Node::id));
            int a = nodes.get(0).id(), b = nodes.get(1).id();
            admin.createTopics(List.of(new NewTopic(topic, Map.of(0, List.of(a, b))))).all().get();
            waitFor(admin, topic, a, List.of(a, b), deadline);
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get();
            produce(bootstrap, topic, 0, 10);

            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.CLIENT_ID_CONFIG, "cairn-leader-move");
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
                c.subscribe(List.of(topic));
                Set<Long> got = new TreeSet<>();
                read(c, got, 10, deadline);
                System.out.println("got " + got.size() + " records from leader " + a);
                if (got.size() != 10) fail("got " + got + " from leader " + a + ", want offsets 0 to 9");

                admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(List.of(b, a)))))
                    .all().get();
                waitFor(admin, topic, -1, List.of(b, a), deadline);
                try {
                    admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions().get().get(tp)
                        .ifPresent(e -> { if (!(e instanceof ElectionNotNeededException)) throw new RuntimeException(e); });
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof ElectionNotNeededException)) throw e;
                }
                waitFor(admin, topic, b, List.of(b, a), deadline);
                System.out.println("leader moved from " + a + " to " + b + ", " + a + " still up");

                produce(bootstrap, topic, 10, 10);
                read(c, got, 20, deadline);
                System.out.println("got " + got.size() + " records in all");
                if (got.size() != 20)
                    fail("got " + got.size() + " of 20 records after the leader moved from " + a + " to " + b
                        + " (the consumer kept fetching from " + a + "?): " + got);
            }
        }
        System.out.println("ok");
    }

    static void read(KafkaShareConsumer<String, String> c, Set<Long> got, int want, long deadline) {
        while (got.size() < want && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> rec : c.poll(Duration.ofMillis(500))) got.add(rec.offset());
        }
    }

    /** Until TOPIC-0 has replicas `replicas` in that order and (unless -1) `leader` leads it. */
    static void waitFor(Admin admin, String topic, int leader, List<Integer> replicas, long deadline) throws Exception {
        String seen = "";
        while (System.currentTimeMillis() < deadline) {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            var part = d.partitions().get(0);
            List<Integer> ids = part.replicas().stream().map(Node::id).toList();
            int now = part.leader() == null ? -1 : part.leader().id();
            seen = "leader " + now + ", replicas " + ids + ", isr " + part.isr().stream().map(Node::id).toList();
            if (ids.equals(replicas) && (leader < 0 || now == leader) && part.isr().size() == replicas.size()) return;
            Thread.sleep(300);
        }
        fail("waited for leader " + leader + " and replicas " + replicas + ", saw " + seen);
    }

    static void produce(String bootstrap, String topic, int from, int n) throws Exception {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(pp)) {
            for (int i = from; i < from + n; i++) prod.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i));
            prod.flush();
        }
    }

    static void fail(String why) {
        System.out.println("problem: " + why);
        System.out.println("FAILED");
        System.exit(1);
    }
}
