// Cairn compat-tests helper (compiled by run.sh with javac against lib/*).
// Reads every partition of one topic from its earliest offset up to the end
// offset seen at start-up, with a plain KafkaConsumer: assign(), no group id,
// no commits. Prints one line per record on stdout:
//   partition<TAB>offset<TAB>key<TAB>value      (null printed as <NULL>)
// Exit status 0 when every partition was read to its end offset, 1 otherwise.
// Usage: java -cp 'lib/*:.build' DumpPartitions BOOTSTRAP TOPIC [TIMEOUT_MS]
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class DumpPartitions {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: DumpPartitions BOOTSTRAP TOPIC [TIMEOUT_MS]");
            System.exit(2);
        }
        String topic = args[1];
        long timeoutMs = args.length > 2 ? Long.parseLong(args[2]) : 60000L;
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "cairn-dump-partitions");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        long deadline = System.currentTimeMillis() + timeoutMs;
        StringBuilder out = new StringBuilder(1 << 20);
        int status = 0;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            List<PartitionInfo> infos = c.partitionsFor(topic, Duration.ofMillis(timeoutMs));
            if (infos == null || infos.isEmpty()) {
                System.err.println("DumpPartitions: no partitions for topic " + topic);
                System.exit(1);
            }
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo i : infos) tps.add(new TopicPartition(topic, i.partition()));
            tps.sort(Comparator.comparingInt(TopicPartition::partition));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofMillis(timeoutMs));
            Set<TopicPartition> pending = new HashSet<>();
            for (TopicPartition tp : tps) {
                if (c.position(tp, Duration.ofMillis(timeoutMs)) < end.get(tp)) pending.add(tp);
            }
            while (!pending.isEmpty() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() >= end.get(tp)) continue;
                    out.append(r.partition()).append('\t').append(r.offset()).append('\t')
                       .append(r.key() == null ? "<NULL>" : r.key()).append('\t')
                       .append(r.value() == null ? "<NULL>" : r.value()).append('\n');
                }
                pending.removeIf(tp -> c.position(tp) >= end.get(tp));
            }
            for (TopicPartition tp : tps) {
                System.err.println("DumpPartitions: " + tp + " end=" + end.get(tp) + " position=" + c.position(tp));
            }
            if (!pending.isEmpty()) {
                System.err.println("DumpPartitions: timed out; not read to end: " + pending);
                status = 1;
            }
        }
        System.out.print(out);
        System.out.flush();
        System.exit(status);
    }
}
