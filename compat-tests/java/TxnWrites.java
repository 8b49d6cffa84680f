// Cairn compat-tests helper (compiled by run.sh with javac against lib/*).
// Writes keyed records in transactions, one transactional producer for all of them.
//
//   TxnWrites BOOTSTRAP TOPIC TRANSACTIONAL_ID (commit|abort):KEY=VALUE[,KEY=VALUE...] ...
//
// Each argument after the transactional id is one transaction: its records are sent and
// flushed, then the transaction is committed or aborted as the argument says. Exit 0 when
// every transaction ended as asked.
import java.util.*;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnWrites {
    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: TxnWrites BOOTSTRAP TOPIC TRANSACTIONAL_ID (commit|abort):K=V[,K=V...] ...");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args[2]);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (int i = 3; i < args.length; i++) {
                String[] how = args[i].split(":", 2);
                producer.beginTransaction();
                for (String kv : how[1].split(",")) {
                    String[] pair = kv.split("=", 2);
                    producer.send(new ProducerRecord<>(args[1], pair[0], pair[1])).get();
                }
                producer.flush();
                switch (how[0]) {
                    case "commit": producer.commitTransaction(); break;
                    case "abort": producer.abortTransaction(); break;
                    default: throw new IllegalArgumentException("not commit or abort: " + args[i]);
                }
                System.out.println(how[0] + " " + how[1]);
            }
        }
    }
}
