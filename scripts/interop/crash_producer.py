"""Child process of test_crash.py: a produce loop that writes down each
acknowledgement as it arrives.

Usage: crash_producer.py BOOTSTRAP TOPIC ACK_FILE SECONDS_MAX FIRST_SEQ [ACKS [RATE [PAD]]]

ACKS is the producer's acks setting, "all" (the default) or "1"; RATE caps
the messages per second (default 20000); PAD bytes of filler follow each
value (default 0), so that a fast producer keeps the broker's disk busy.

Records are keyed k0..k19 with values "key:seq:" and the filler; seq counts up per key from
FIRST_SEQ. Each delivery callback without error appends
"key seq partition offset" to ACK_FILE and flushes, so the file is the exact
set of messages the broker has promised to keep, up to the moment the broker
dies. Retries are off, so a record appears in the log at most once and
per-key order in the log is produce order. The loop ends after SECONDS_MAX or
at the first failed delivery (the broker is gone), then drains with a bounded
flush. The rate is capped so the log stays small enough to read back quickly.
Exit status 0 unless the producer could not be set up.
"""

import sys
import time

from confluent_kafka import Producer

KEYS = 20
# Enough to keep many batches in flight at the kill, few enough that reading
# the log back stays quick.
RATE_DEFAULT_PER_S = 20_000


def main():
    bootstrap, topic, ack_path, seconds_max, first_seq = sys.argv[1:6]
    acks = sys.argv[6] if len(sys.argv) > 6 else "all"
    rate_max_per_s = int(sys.argv[7]) if len(sys.argv) > 7 else RATE_DEFAULT_PER_S
    filler = b"f" * (int(sys.argv[8]) if len(sys.argv) > 8 else 0)
    deadline = time.monotonic() + float(seconds_max)
    prod = Producer({
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "partitioner": "murmur2_random",
        "enable.idempotence": False,
        "retries": 0,
        "linger.ms": 2,
        "message.timeout.ms": 5000,
        "reconnect.backoff.max.ms": 500,
    })
    failures = 0
    acked = 0
    with open(ack_path, "a") as out:
        def on_delivery(err, msg):
            nonlocal failures, acked
            if err is not None:
                failures += 1
                return
            key, seq, _ = msg.value().split(b":", 2)
            key, seq = key.decode(), seq.decode()
            out.write(f"{key} {seq} {msg.partition()} {msg.offset()}\n")
            out.flush()
            acked += 1

        seq = int(first_seq)
        started = time.monotonic()
        produced = 0
        while failures == 0 and time.monotonic() < deadline:
            ahead_s = produced / rate_max_per_s - (time.monotonic() - started)
            if ahead_s > 0:
                prod.poll(ahead_s)
            for k in range(KEYS):
                value = f"k{k}:{seq}:".encode() + filler
                while True:
                    try:
                        prod.produce(topic, key=b"k%d" % k, value=value, on_delivery=on_delivery)
                        break
                    except BufferError:
                        prod.poll(0.01)
            seq += 1
            produced += KEYS
            prod.poll(0)
        prod.flush(15)
    print(f"crash_producer: acked={acked} failed={failures} last_seq={seq - 1}", flush=True)


if __name__ == "__main__":
    main()
