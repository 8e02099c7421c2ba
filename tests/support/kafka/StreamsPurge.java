// A Kafka Streams at-least-once application with a repartition topic (words
// regrouped by value, then counted), for the purge test in tests/kafka_streams.rs.
// Single-file program for the Java source launcher:
//
//   kafka-run-class.sh tests/support/kafka/StreamsPurge.java BOOTSTRAP STATE_DIR RECORDS
//
// Produces RECORDS words to "words", runs the app until every count has reached
// "counts" and Streams has purged its repartition topic up to its committed
// offsets (DeleteRecords, every repartition.purge.interval.ms), then prints one
// line per repartition partition, "purged <topic> <partition> <earliest> <committed>",
// and exits 0; exits 1 if that does not happen within 90 s.

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsPurge {
    static final String APP = "purge-app";

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String stateDir = args[1];
        int records = Integer.parseInt(args[2]);

        Properties producerProps = new Properties();
        producerProps.put("bootstrap.servers", bootstrap);
        producerProps.put("key.serializer", StringSerializer.class.getName());
        producerProps.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps)) {
            for (int i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>("words", null, "word-" + (i % 10)));
            }
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream("words")
                .groupBy((key, value) -> value, Grouped.with("by-word", Serdes.String(), Serdes.String()))
                .count()
                .toStream()
                .to("counts", Produced.with(Serdes.String(), Serdes.Long()));
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, APP);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put("consumer.auto.offset.reset", "earliest");

        try (KafkaStreams streams = new KafkaStreams(builder.build(), props);
             Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            streams.start();
            long deadline = System.currentTimeMillis() + 90_000;
            while (System.currentTimeMillis() < deadline) {
                Thread.sleep(500);
                Set<String> topics = admin.listTopics().names().get();
                List<String> repartition = topics.stream()
                        .filter(t -> t.startsWith(APP) && t.endsWith("-repartition"))
                        .collect(Collectors.toList());
                if (repartition.isEmpty()) continue;
                Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(APP).partitionsToOffsetAndMetadata().get();
                Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
                Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
                admin.describeTopics(repartition).allTopicNames().get().forEach((name, description) ->
                        description.partitions().forEach(p -> {
                            earliest.put(new TopicPartition(name, p.partition()), OffsetSpec.earliest());
                            latest.put(new TopicPartition(name, p.partition()), OffsetSpec.latest());
                        }));
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> starts =
                        admin.listOffsets(earliest).all().get();
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends =
                        admin.listOffsets(latest).all().get();
                long total = ends.values().stream().mapToLong(ListOffsetsResult.ListOffsetsResultInfo::offset).sum();
                boolean purged = total >= records && starts.entrySet().stream().allMatch(e -> {
                    OffsetAndMetadata c = committed.get(e.getKey());
                    long end = ends.get(e.getKey()).offset();
                    return c != null && c.offset() == end && e.getValue().offset() == end;
                });
                if (purged) {
                    starts.forEach((tp, start) -> System.out.println("purged " + tp.topic() + " "
                            + tp.partition() + " " + start.offset() + " " + committed.get(tp).offset()));
                    streams.close(Duration.ofSeconds(10));
                    System.exit(0);
                }
            }
            System.err.println("the repartition topic was not purged within 90 s");
            System.exit(1);
        }
    }
}
