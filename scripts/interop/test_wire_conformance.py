"""Byte-level answers that every client depends on, read without a client library.

Goal: catch protocol mistakes that a tolerant client would hide and a strict
one would trip over: ApiVersions bodies that do not parse to the last byte,
tagged fields sent with their default values (which librdkafka < 2.2
mis-reads), a v0 and a v3 answer that disagree, Metadata that advertises an
address other than the listener, and pipelined requests answered out of order.

Method: hand-encoded requests from kafka_wire.py on a raw socket, responses
parsed field by field with a check that nothing is left over.
"""

import pytest

import kafka_wire as wire
from clients import create_topic, unique_topic

# What the single-node issue requires the broker to implement.
REQUIRED_APIS = {
    wire.PRODUCE: "Produce", wire.FETCH: "Fetch", wire.LIST_OFFSETS: "ListOffsets",
    wire.METADATA: "Metadata", wire.API_VERSIONS: "ApiVersions",
    wire.CREATE_TOPICS: "CreateTopics", wire.DELETE_TOPICS: "DeleteTopics",
    wire.DESCRIBE_CONFIGS: "DescribeConfigs", wire.CREATE_PARTITIONS: "CreatePartitions",
    wire.DESCRIBE_CLUSTER: "DescribeCluster",
}

# Top-level tagged fields of ApiVersionsResponse v3 and the encoding of their
# default values; Kafka omits a tagged field whose value is its default.
DEFAULT_TAG_VALUES = {
    0: wire.uvarint(1),    # SupportedFeatures: empty compact array
    1: wire.int64(-1),     # FinalizedFeaturesEpoch
    2: wire.uvarint(1),    # FinalizedFeatures: empty compact array
    3: wire.int8(0),       # ZkMigrationReady: false
}


def api_versions(port, version):
    frame = wire.api_versions_request(version, 7)
    corr, body = wire.roundtrip(port, frame)
    assert corr == 7, f"ApiVersions v{version}: correlation id {corr}, sent 7"
    return body


def test_api_versions_v0_lists_every_required_api(broker):
    error, apis, leftover = wire.parse_api_versions_v0(api_versions(broker.port, 0))
    assert error == wire.NONE
    assert leftover == 0, f"{leftover} bytes after the ApiVersions v0 body"
    missing = [name for key, name in REQUIRED_APIS.items() if key not in apis]
    assert not missing, f"ApiVersions does not advertise {missing}"
    for key, (lo, hi) in apis.items():
        assert 0 <= lo <= hi, f"api {key} advertises versions {lo}..{hi}"
    assert apis[wire.API_VERSIONS][0] == 0 and apis[wire.API_VERSIONS][1] >= 3
    assert apis[wire.PRODUCE][0] <= 3 <= apis[wire.PRODUCE][1], (
        "Produce v3 (first with v2 record batches) must be supported")
    assert apis[wire.METADATA][0] <= 1 <= apis[wire.METADATA][1], "Metadata v1"


def test_api_versions_v3_parses_fully_and_omits_default_tags(broker):
    v0 = wire.parse_api_versions_v0(api_versions(broker.port, 0))[1]
    v3 = wire.parse_api_versions_v3(api_versions(broker.port, 3))
    assert v3["error"] == wire.NONE
    assert v3["leftover"] == 0, f"{v3['leftover']} bytes after the ApiVersions v3 body"
    assert v3["apis"] == v0, "v0 and v3 advertise different API ranges"
    assert not v3["api_tags"], f"unexpected per-API tagged fields {v3['api_tags']}"
    for tag, raw in v3["tags"].items():
        assert raw != DEFAULT_TAG_VALUES.get(tag), (
            f"ApiVersions v3 carries tagged field {tag} with its default value {raw.hex()}: "
            "librdkafka < 2.2 mis-reads this; Kafka omits default-valued tagged fields")


def test_metadata_v1_advertises_the_listener(broker):
    corr, body = wire.roundtrip(broker.port, wire.metadata_v1_request(None, 3))
    md = wire.parse_metadata_v1(body)
    assert corr == 3 and md["leftover"] == 0
    assert [(b["host"], b["port"]) for b in md["brokers"]] == [("127.0.0.1", broker.port)]
    assert md["controller"] == md["brokers"][0]["node_id"]


@pytest.mark.parametrize("broker", [{"cores": 2}], indirect=True)
def test_pipelined_requests_are_answered_in_order(broker):
    """Ten mixed requests in one write; answers come back in request order."""
    kinds = []
    frames = b""
    for i in range(10):
        corr = 100 + i
        if i % 3 == 0:
            frames += wire.metadata_v1_request(None, corr)
        else:
            frames += wire.api_versions_request(3 if i % 3 == 1 else 0, corr)
        kinds.append(i % 3)
    with wire.connect(broker.port) as s:
        s.sendall(frames)
        for i, kind in enumerate(kinds):
            corr, body = wire.read_response(s)
            assert corr == 100 + i, f"answer {i} has correlation id {corr}, expected {100 + i}"
            if kind == 0:
                assert wire.parse_metadata_v1(body)["leftover"] == 0
            elif kind == 1:
                assert wire.parse_api_versions_v3(body)["error"] == wire.NONE
            else:
                assert wire.parse_api_versions_v0(body)[0] == wire.NONE


def test_acks_0_produce_gets_no_response(broker):
    """Kafka sends nothing back for acks=0; an answer would be taken as the
    response to the client's next request."""
    topic = unique_topic("acks0-wire")
    create_topic(broker.bootstrap, topic, 1)
    batch = wire.record_batch([(b"k", b"v")])
    with wire.connect(broker.port) as s:
        s.sendall(wire.produce_v3_request(topic, 0, batch, 50, acks=0)
                  + wire.api_versions_request(0, 51))
        corr, body = wire.read_response(s)
        assert corr == 51, f"first answer has correlation id {corr}: acks=0 produce was answered"
        assert wire.parse_api_versions_v0(body)[0] == wire.NONE


@pytest.mark.parametrize("broker", [{"cores": 2}], indirect=True)
def test_pipelined_produces_to_partitions_on_both_shards_answer_in_order(broker):
    """Produces for partitions owned by different shards, pipelined on one
    connection with a Metadata between them, come back in request order and
    each partition's base offsets follow the order the requests were sent."""
    topic = unique_topic("pipelined")
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    frames = b""
    expected = []
    for i in range(24):
        corr = 500 + i
        if i % 6 == 5:
            frames += wire.metadata_v1_request([topic], corr)
            expected.append((corr, None))
        else:
            p = i % partitions
            frames += wire.produce_v3_request(topic, p, wire.record_batch([(b"k", b"v%d" % i)] * 3),
                                              corr, acks=1)
            expected.append((corr, p))
    next_offset = {p: 0 for p in range(partitions)}
    with wire.connect(broker.port) as s:
        s.sendall(frames)
        for corr, partition in expected:
            got_corr, body = wire.read_response(s, timeout=20)
            assert got_corr == corr, f"got the answer to {got_corr} where {corr} was due"
            if partition is None:
                assert wire.parse_metadata_v1(body)["topics"][topic]["error"] == wire.NONE
                continue
            results, _, leftover = wire.parse_produce_v3(body)
            assert leftover == 0
            error, base_offset = results[(topic, partition)]
            assert error == wire.NONE, f"produce {corr}: error {error}"
            assert base_offset == next_offset[partition], (
                f"partition {partition}: base offset {base_offset}, expected "
                f"{next_offset[partition]} (appends reordered)")
            next_offset[partition] += 3
