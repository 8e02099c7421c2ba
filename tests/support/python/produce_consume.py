"""kafka-python against a broker: produce COUNT keyed records with acks=all,
read them back with a manually assigned consumer, print what was read."""
import sys

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])

producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
futures = [producer.send(topic, key=b"k%d" % (i % 10), value=b"v%d" % i, partition=0) for i in range(count)]
producer.flush(timeout=30)
offsets = [f.get(timeout=30).offset for f in futures]
assert offsets == list(range(count)), "acknowledged offsets %r..." % offsets[:5]
producer.close()

consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", consumer_timeout_ms=10000)
partition = TopicPartition(topic, 0)
consumer.assign([partition])
consumer.seek_to_beginning(partition)
for message in consumer:
    print(message.offset, message.key.decode(), message.value.decode())
    if message.offset == count - 1:
        break
consumer.close()
