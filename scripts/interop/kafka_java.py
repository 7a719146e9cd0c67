"""Kafka's Java client and command-line tools, run from the jars scripts/peer-kafka.sh
fetches from Maven Central (cached under the target dir, so a second run is offline).

`tool(cls, *args)` runs one of Kafka's tool classes as its shell wrapper would
(`kafka-topics.sh` is `org.apache.kafka.tools.TopicCommand`), `client(*args)` runs
scripts/interop/java/JavaClient.java with Java's single-file launcher. Both return the
completed process and fail the test, with both outputs, when it does not exit 0 (unless
`check=False`).
"""

import functools
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "scripts" / "interop" / "java" / "JavaClient.java"
TIMEOUT_S = 180

# Kafka's tool classes, by the name of the script that starts each.
TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
METADATA_QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"


@functools.cache
def classpath() -> str:
    done = subprocess.run([str(REPO / "scripts" / "peer-kafka.sh"), "classpath"],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"fetching Kafka's jars failed:\n{done.stderr}", pytrace=False)
    return done.stdout.strip().splitlines()[-1]


def _java(args, check, input_text=None, timeout=TIMEOUT_S):
    command = ["java", "-Xmx512m", "-Dlog4j2.level=WARN", "-cp", classpath(), *args]
    done = subprocess.run(command, capture_output=True, text=True, input=input_text,
                          timeout=timeout, env={**os.environ, "LC_ALL": "C"})
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(args[:2])} exited {done.returncode}\n--- stdout\n"
                    f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}", pytrace=False)
    return done


def tool(cls, *args, check=True, input_text=None, timeout=TIMEOUT_S):
    return _java([cls, *map(str, args)], check, input_text, timeout)


def client(*args, check=True, timeout=TIMEOUT_S):
    return _java([str(CLIENT), *map(str, args)], check, timeout=timeout)
