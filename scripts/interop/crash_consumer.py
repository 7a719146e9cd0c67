"""Child process of test_crash.py: a consumer that reads every partition of a
topic from the beginning while it is being written, and writes down each
record it is given as it arrives.

Usage: crash_consumer.py BOOTSTRAP TOPIC PARTITIONS SEEN_FILE SECONDS_MAX [START]

START is where to begin, "offset,offset,..." one per partition (default: the
beginning of each).

Each record appends "partition offset crc32(value)" to SEEN_FILE and flushes,
so the file is exactly what the broker let a consumer see before it died. The loop
ends after SECONDS_MAX or once the broker has been gone for a while (the
test kills it), whichever comes first. Exit status 0 unless the consumer could
not be set up.
"""

import sys
import time
import zlib

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

QUIET_AFTER_LAST_RECORD_S = 3.0


def main():
    bootstrap, topic, partitions, seen_path, seconds_max = sys.argv[1:6]
    partitions = int(partitions)
    start = ([int(offset) for offset in sys.argv[6].split(",")] if len(sys.argv) > 6
             else [OFFSET_BEGINNING] * partitions)
    deadline = time.monotonic() + float(seconds_max)
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "crash-consumer-assign-only",  # required by the client, never joined
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 10,
        "reconnect.backoff.max.ms": 500,
    })
    consumer.assign([TopicPartition(topic, p, start[p]) for p in range(partitions)])
    seen = 0
    last_record = time.monotonic()
    with open(seen_path, "a") as out:
        while time.monotonic() < deadline:
            messages = consumer.consume(num_messages=1000, timeout=0.2)
            for msg in messages:
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        print(f"crash_consumer: {msg.error()}", flush=True)
                    continue
                out.write(f"{msg.partition()} {msg.offset()} {zlib.crc32(msg.value())}\n")
                seen += 1
            out.flush()
            if messages:
                last_record = time.monotonic()
            elif seen and time.monotonic() - last_record > QUIET_AFTER_LAST_RECORD_S:
                break
    consumer.close()
    print(f"crash_consumer: seen={seen}", flush=True)


if __name__ == "__main__":
    main()
