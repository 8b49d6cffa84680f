// Cairn compat-tests helper (compiled by run.sh with javac against lib/*; Kafka 4.2+).
// A share group with share.isolation.level=read_committed reads only committed
// transactions, and nothing past an open one until it ends.
//
//   ShareTxn BOOTSTRAP GROUP TOPIC ISOLATION TIMEOUT_MS
//
// 1. Sets the group's share.isolation.level to ISOLATION and share.auto.offset.reset to
//    earliest.
// 2. A transactional producer commits c0..c4, aborts a0..a4, commits c5..c9; a plain
//    producer writes n0; then a transaction writes o0..o2 and stays open.
// 3. A KafkaShareConsumer (implicit acknowledgement) polls until it has 11 records and
//    then 3 s more: read_committed wants c0..c9 and n0, each once.
// 4. The open transaction commits: then o0..o2 come, each once, and nothing else.
// Prints what it read; exit 0 when that held.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ShareTxn {
    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: ShareTxn BOOTSTRAP GROUP TOPIC ISOLATION TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0], group = args[1], topic = args[2], isolation = args[3];
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]);
        try (Admin a = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            a.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("share.isolation.level", isolation), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get();
        }
        KafkaProducer<String, String> tx = producer(bootstrap, "cairn-sharetxn-" + group);
        tx.initTransactions();
        send(tx, topic, "c", 0, 5, true);
        send(tx, topic, "a", 0, 5, false);
        send(tx, topic, "c", 5, 5, true);
        try (KafkaProducer<String, String> plain = producer(bootstrap, null)) {
            plain.send(new ProducerRecord<>(topic, "n0")).get();
        }
        tx.beginTransaction();
        for (int i = 0; i < 3; i++) tx.send(new ProducerRecord<>(topic, "o" + i));
        tx.flush();

        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        List<String> problems = new ArrayList<>();
        List<String> read = new ArrayList<>();
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(topic));
            poll(c, read, 11, deadline);
            List<String> want = new ArrayList<>();
            for (int i = 0; i < 10; i++) want.add("c" + i);
            want.add("n0");
            List<String> sorted = new ArrayList<>(read);
            Collections.sort(sorted);
            Collections.sort(want);
            System.out.println("before the open transaction ends: " + read);
            if (!sorted.equals(want)) problems.add("read " + read + ", want " + want);
            tx.commitTransaction();
            List<String> after = new ArrayList<>();
            poll(c, after, 3, deadline);
            System.out.println("after it commits: " + after);
            List<String> sortedAfter = new ArrayList<>(after);
            Collections.sort(sortedAfter);
            if (!sortedAfter.equals(List.of("o0", "o1", "o2"))) problems.add("then read " + after + ", want o0..o2");
        }
        tx.close();
        for (String s : problems) System.out.println("problem: " + s);
        System.out.println(problems.isEmpty() ? "ok" : "FAILED");
        System.exit(problems.isEmpty() ? 0 : 1);
    }

    /// Polls until `n` records are read, then 3 s more.
    static void poll(KafkaShareConsumer<String, String> c, List<String> out, int n, long deadline) {
        long quiet = 0;
        while (System.currentTimeMillis() < deadline && (quiet == 0 || System.currentTimeMillis() < quiet)) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) out.add(r.value());
            if (quiet == 0 && out.size() >= n) quiet = System.currentTimeMillis() + 3_000;
        }
    }

    static void send(KafkaProducer<String, String> tx, String topic, String prefix, int from, int n, boolean commit) {
        tx.beginTransaction();
        for (int i = from; i < from + n; i++) tx.send(new ProducerRecord<>(topic, prefix + i));
        tx.flush();
        if (commit) tx.commitTransaction();
        else tx.abortTransaction();
    }

    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        if (transactionalId != null) pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        return new KafkaProducer<>(pp);
    }
}
