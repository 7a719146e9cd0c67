//! DeleteRecords: records below the offset become unreadable, ListOffsets earliest and the
//! answer's low watermark move to it, and a restart keeps it.

mod common;

use common::{
    batch, create_topic, earliest_offset, fetch_values, produce, topic_name as name, Client, Node,
};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::{DeleteRecordsRequest, RequestKind, ResponseKind};

/// (error code, low watermark) of DeleteRecords v2 below `offset` of partition 0.
fn delete(client: &mut Client, topic: &str, offset: i64) -> (i16, i64) {
    let request = DeleteRecordsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)])]);
    let ResponseKind::DeleteRecords(answer) = client.call(2, RequestKind::DeleteRecords(request))
    else {
        unreachable!()
    };
    let partition = &answer.topics[0].partitions[0];
    (partition.error_code, partition.low_watermark)
}

fn fetch_error(client: &mut Client, topic: &str, offset: i64) -> i16 {
    fetch_values(client, topic, offset).0
}

#[test]
fn deleted_records_are_gone_and_stay_gone() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    create_topic(&mut client, "trimmed", 1, &[]);
    for _ in 0..5 {
        assert_eq!(
            produce(&mut client, "trimmed", 0, batch(&[b"a", b"b"]), -1).0,
            0
        );
    }
    assert_eq!(delete(&mut client, "trimmed", 4), (0, 4));
    assert_eq!(earliest_offset(&mut client, "trimmed"), 4);
    let out_of_range = ResponseError::OffsetOutOfRange.code();
    assert_eq!(fetch_error(&mut client, "trimmed", 2), out_of_range);
    assert_eq!(fetch_error(&mut client, "trimmed", 4), 0);
    assert_eq!(
        delete(&mut client, "trimmed", 2),
        (0, 4),
        "the start never moves back"
    );
    assert_eq!(
        delete(&mut client, "trimmed", 11).0,
        out_of_range,
        "past the high watermark"
    );
    assert_eq!(delete(&mut client, "trimmed", -2).0, out_of_range);
    assert_eq!(
        delete(&mut client, "missing", 0).0,
        ResponseError::UnknownTopicOrPartition.code()
    );
    create_topic(
        &mut client,
        "compacted",
        1,
        &[("cleanup.policy", "compact")],
    );
    assert_eq!(
        delete(&mut client, "compacted", 0).0,
        ResponseError::PolicyViolation.code()
    );

    let node = node.stop().restart(&[]);
    let mut client = node.connect();
    assert_eq!(
        earliest_offset(&mut client, "trimmed"),
        4,
        "a restart keeps the start"
    );
    assert_eq!(fetch_error(&mut client, "trimmed", 3), out_of_range);
    // -1: everything below the high watermark.
    assert_eq!(delete(&mut client, "trimmed", -1), (0, 10));
    assert_eq!(earliest_offset(&mut client, "trimmed"), 10);
}
