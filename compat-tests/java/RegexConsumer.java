// Cairn compat-tests helper (compiled by run.sh with javac against lib/*).
// A KIP-848 consumer (group.protocol=consumer) that subscribes with a
// SubscriptionPattern: the broker resolves the regular expression.
//
//   RegexConsumer BOOTSTRAP GROUP REGEX EXPECT NEW_TOPIC NEW_COUNT TIMEOUT_MS
//     Reads until EXPECT records of the topics matching REGEX have arrived, then
//     creates NEW_TOPIC (which must match REGEX), produces NEW_COUNT records to it
//     and reads until they arrive too: the broker must re-evaluate the pattern
//     when topics are created. Prints "topics: ..." (the topics records came
//     from) and "read: N new: M"; exit 0 when both counts were met, 1 otherwise.
//   RegexConsumer BOOTSTRAP GROUP REGEX invalid TIMEOUT_MS
//     Expects poll() to fail with InvalidRegularExpression; prints its message.
//     Exit 0 when it did, 1 otherwise.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.InvalidRegularExpression;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class RegexConsumer {
    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: RegexConsumer BOOTSTRAP GROUP REGEX (EXPECT NEW_TOPIC NEW_COUNT | invalid) TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0];
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, args[1]);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "cairn-regex-consumer");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(new SubscriptionPattern(args[2]));
            if (args[3].equals("invalid")) {
                System.exit(expectInvalid(c, Long.parseLong(args[4])));
            }
            int expect = Integer.parseInt(args[3]);
            String newTopic = args[4];
            int newCount = Integer.parseInt(args[5]);
            long deadline = System.currentTimeMillis() + Long.parseLong(args[6]);
            Set<String> seen = new HashSet<>();
            Set<String> topics = new TreeSet<>();
            int newRead = 0;
            while (seen.size() < expect && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    seen.add(r.topic() + "/" + r.partition() + "/" + r.offset());
                    topics.add(r.topic());
                }
            }
            if (seen.size() >= expect) {
                try (Admin a = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
                    a.createTopics(List.of(new NewTopic(newTopic, 1, (short) 1))).all().get();
                }
                Properties pp = new Properties();
                pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
                pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
                try (KafkaProducer<String, String> prod = new KafkaProducer<>(pp)) {
                    for (int i = 0; i < newCount; i++) prod.send(new ProducerRecord<>(newTopic, "k" + i, "v" + i));
                    prod.flush();
                }
                while (newRead < newCount && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                        if (!seen.add(r.topic() + "/" + r.partition() + "/" + r.offset())) continue;
                        topics.add(r.topic());
                        if (r.topic().equals(newTopic)) newRead++;
                    }
                }
            }
            System.out.println("topics: " + String.join(",", topics));
            System.out.println("read: " + (seen.size() - newRead) + " new: " + newRead);
            System.exit(seen.size() - newRead >= expect && newRead == newCount ? 0 : 1);
        }
    }

    static int expectInvalid(KafkaConsumer<String, String> c, long timeoutMs) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < deadline) {
            try {
                c.poll(Duration.ofMillis(500));
            } catch (InvalidRegularExpression e) {
                System.out.println("refused: " + e.getMessage());
                return 0;
            } catch (Exception e) {
                System.out.println("other error: " + e);
                return 1;
            }
        }
        System.out.println("no error within " + timeoutMs + " ms");
        return 1;
    }
}
