// Kafka's Java client (kafka-clients 4.x) with its defaults, driven by the interop tests
// (scripts/interop/test_java_client.py) through Java's single-file launcher:
//
//   java -cp "$(scripts/peer-kafka.sh classpath)" scripts/interop/java/JavaClient.java \
//       produce BOOTSTRAP TOPIC RECORDS KEYS [key=value ...]
//   ... consume BOOTSTRAP TOPIC GROUP RECORDS [key=value ...]
//   ... admin BOOTSTRAP TOPIC
//
// produce: RECORDS keyed records over KEYS keys, round robin, value "key:sequence"; prints
// one line per record, "partition offset key sequence", in send order.
// consume: joins GROUP (classic protocol) from the earliest offset, reads RECORDS records,
// commits them and prints "partition offset key value" per record, in read order.
// admin: the AdminClient calls a user makes, each printed as "ok <call> <what it saw>";
// any failure ends the program with an exception.
// key=value pairs override the client's configuration (e.g. compression.type=zstd).

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaClient {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]),
                    Integer.parseInt(args[4]), overrides(args, 5));
            case "consume" -> consume(args[1], args[2], args[3], Integer.parseInt(args[4]),
                    overrides(args, 5));
            case "admin" -> admin(args[1], args[2]);
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }

    static Properties overrides(String[] args, int from) {
        Properties props = new Properties();
        for (int i = from; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        return props;
    }

    static void produce(String bootstrap, String topic, int records, int keys, Properties extra)
            throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.putAll(extra);
        List<Future<RecordMetadata>> sent = new ArrayList<>(records);
        List<String> what = new ArrayList<>(records);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < records; i++) {
                String key = "key-" + (i % keys);
                int sequence = i / keys;
                sent.add(producer.send(new ProducerRecord<>(topic, key, key + ":" + sequence)));
                what.add(key + " " + sequence);
            }
            producer.flush();
        }
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < records; i++) {
            RecordMetadata m = sent.get(i).get();
            out.append(m.partition()).append(' ').append(m.offset()).append(' ')
                    .append(what.get(i)).append('\n');
        }
        System.out.print(out);
    }

    static void consume(String bootstrap, String topic, String group, int records,
            Properties extra) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class.getName());
        props.putAll(extra);
        StringBuilder out = new StringBuilder();
        int read = 0;
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (read < records && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    out.append(r.partition()).append(' ').append(r.offset()).append(' ')
                            .append(r.key()).append(' ').append(r.value()).append('\n');
                    read++;
                }
            }
            consumer.commitSync();
        }
        System.out.print(out);
    }

    static void admin(String bootstrap, String topic) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            System.out.println("ok createTopics " + topic);
            Set<String> names = admin.listTopics().names().get();
            check(names.contains(topic), "listTopics lacks " + topic);
            System.out.println("ok listTopics " + names.size());
            TopicDescription d = describe(admin, topic);
            check(d.partitions().size() == 3, "describeTopics: " + d);
            check(d.authorizedOperations() != null && !d.authorizedOperations().isEmpty(),
                    "describeTopics: no authorized operations");
            System.out.println("ok describeTopics " + d.partitions().size() + " "
                    + d.authorizedOperations().size());
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get();
            check(describe(admin, topic).partitions().size() == 4, "createPartitions");
            System.out.println("ok createPartitions 4");
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            check(config.get("cleanup.policy") != null, "describeConfigs lacks cleanup.policy");
            System.out.println("ok describeConfigs cleanup.policy="
                    + config.get("cleanup.policy").value());
            String cluster = admin.describeCluster().clusterId().get();
            int nodes = admin.describeCluster().nodes().get().size();
            System.out.println("ok describeCluster " + cluster + " " + nodes);

            Properties plain = new Properties(); // this part is about admin, not idempotence
            plain.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
            produce(bootstrap, topic, 40, 4, plain);
            TopicPartition p0 = new TopicPartition(topic, 0);
            long latest = offsets(admin, p0, OffsetSpec.latest()).offset();
            long earliest = offsets(admin, p0, OffsetSpec.earliest()).offset();
            ListOffsetsResult.ListOffsetsResultInfo byTime = offsets(admin, p0,
                    OffsetSpec.forTimestamp(System.currentTimeMillis() - 3_600_000));
            ListOffsetsResult.ListOffsetsResultInfo max = offsets(admin, p0,
                    OffsetSpec.maxTimestamp());
            check(earliest == 0 && byTime.offset() == 0 && max.offset() >= 0
                    && max.offset() < latest, "listOffsets " + earliest + " " + byTime + " "
                    + max + " " + latest);
            System.out.println("ok listOffsets " + earliest + " " + latest + " "
                    + byTime.offset() + " " + max.offset());

            String group = topic + "-group";
            consume(bootstrap, topic, group, 40, new Properties());
            Collection<String> groups = admin.listGroups().all().get().stream()
                    .filter(g -> g.type().orElse(null) == GroupType.CLASSIC)
                    .map(g -> g.groupId()).collect(Collectors.toList());
            check(groups.contains(group), "listGroups lacks " + group + ": " + groups);
            System.out.println("ok listGroups " + group);
            ConsumerGroupDescription g = admin.describeConsumerGroups(List.of(group)).all().get()
                    .get(group);
            System.out.println("ok describeConsumerGroups " + g.groupState());
            Map<TopicPartition, ?> committed = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get();
            check(!committed.isEmpty(), "listConsumerGroupOffsets: none");
            System.out.println("ok listConsumerGroupOffsets " + committed.size());
            admin.deleteConsumerGroups(List.of(group)).all().get();
            System.out.println("ok deleteConsumerGroups " + group);
            admin.deleteTopics(List.of(topic)).all().get();
            System.out.println("ok deleteTopics " + topic);
        }
    }

    static TopicDescription describe(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic),
                new org.apache.kafka.clients.admin.DescribeTopicsOptions()
                        .includeAuthorizedOperations(true))
                .allTopicNames().get().get(topic);
    }

    static ListOffsetsResult.ListOffsetsResultInfo offsets(Admin admin, TopicPartition tp,
            OffsetSpec spec) throws Exception {
        return admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get();
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException(what);
        }
    }
}
