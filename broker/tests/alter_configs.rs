//! Settings changed at run time: a topic's own (IncrementalAlterConfigs, and AlterConfigs,
//! which replaces the whole set), and the dynamic broker settings of one broker or of the
//! whole cluster that every topic inherits: what DescribeConfigs shows (value, source,
//! synonyms, read-only), what the open log and retention enforce without a restart, what is
//! refused as Kafka refuses it, and what a restart keeps.

mod common;

use common::{alter_resource, batch, create_topic, produce, Client, Node};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use kafka_protocol::messages::{DescribeConfigsRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

fn code(error: ResponseError) -> i16 {
    error.code()
}

/// DescribeConfigs and IncrementalAlterConfigs resource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

/// Alters settings of `topic`; the resource's error code.
fn alter(
    client: &mut Client,
    topic: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> i16 {
    alter_resource(client, (TOPIC, topic), ops, validate_only)
}

/// What DescribeConfigs (with synonyms) gives `key` of resource `kind` `name`.
fn describe(
    client: &mut Client,
    (kind, name): (i8, &str),
    key: &str,
) -> DescribeConfigsResourceResult {
    let request = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_string(
                key.to_string(),
            )]))]);
    let ResponseKind::DescribeConfigs(answer) =
        client.call(4, RequestKind::DescribeConfigs(request))
    else {
        unreachable!()
    };
    assert_eq!(answer.results[0].error_code, 0, "describing {name}");
    answer.results[0].configs[0].clone()
}

/// The value DescribeConfigs gives `key` of `topic`, with its source.
fn setting(client: &mut Client, topic: &str, key: &str) -> (String, i8) {
    let found = describe(client, (TOPIC, topic), key);
    let value = found.value.as_ref().map(|v| v.to_string());
    (value.unwrap_or_default(), found.config_source)
}

/// (name, value, source) of each synonym of a described setting, highest first.
fn synonyms(found: &DescribeConfigsResourceResult) -> Vec<(String, String, i8)> {
    found
        .synonyms
        .iter()
        .map(|s| {
            let value = s.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
            (s.name.to_string(), value, s.source)
        })
        .collect()
}

#[test]
fn topic_settings_change_at_run_time_and_survive_a_restart() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    create_topic(&mut client, "settings", 1, &[]);
    let big = batch(&[&[7u8; 3000]]);
    assert_eq!(produce(&mut client, "settings", 0, big.clone(), 1).0, 0);

    // validate_only changes nothing.
    assert_eq!(
        alter(
            &mut client,
            "settings",
            &[("max.message.bytes", SET, Some("2000"))],
            true
        ),
        0
    );
    assert_eq!(produce(&mut client, "settings", 0, big.clone(), 1).0, 0);

    let ops = [
        ("max.message.bytes", SET, Some("2000")),
        ("retention.ms", SET, Some("123456")),
    ];
    assert_eq!(alter(&mut client, "settings", &ops, false), 0);
    // Source 1: DYNAMIC_TOPIC_CONFIG, an override of this topic.
    assert_eq!(
        setting(&mut client, "settings", "max.message.bytes"),
        ("2000".into(), 1)
    );
    assert_eq!(setting(&mut client, "settings", "retention.ms").0, "123456");
    assert_eq!(
        produce(&mut client, "settings", 0, big.clone(), 1).0,
        code(ResponseError::MessageTooLarge),
        "the open log takes the new limit"
    );
    assert_eq!(
        produce(&mut client, "settings", 0, batch(&[b"small"]), 1).0,
        0
    );

    // Lists grow and shrink; other settings refuse it.
    assert_eq!(
        alter(
            &mut client,
            "settings",
            &[("cleanup.policy", APPEND, Some("compact"))],
            false
        ),
        0
    );
    assert_eq!(
        setting(&mut client, "settings", "cleanup.policy").0,
        "delete,compact"
    );
    assert_eq!(
        alter(
            &mut client,
            "settings",
            &[("cleanup.policy", SUBTRACT, Some("delete"))],
            false
        ),
        0
    );
    assert_eq!(
        setting(&mut client, "settings", "cleanup.policy").0,
        "compact"
    );
    assert_eq!(
        alter(
            &mut client,
            "settings",
            &[("retention.ms", APPEND, Some("1"))],
            false
        ),
        code(ResponseError::InvalidConfig)
    );
    // A refused resource changes none of its settings.
    let mixed = [
        ("retention.ms", DELETE, None),
        ("no.such.setting", SET, Some("1")),
    ];
    assert_eq!(
        alter(&mut client, "settings", &mixed, false),
        code(ResponseError::InvalidConfig)
    );
    assert_eq!(setting(&mut client, "settings", "retention.ms").0, "123456");
    assert_eq!(
        alter(
            &mut client,
            "settings",
            &[("retention.ms", SET, Some("soon"))],
            false
        ),
        code(ResponseError::InvalidConfig)
    );
    assert_eq!(
        alter(
            &mut client,
            "missing",
            &[("retention.ms", SET, Some("1"))],
            false
        ),
        code(ResponseError::UnknownTopicOrPartition)
    );
    // DELETE goes back to the broker's default (source 5: DEFAULT_CONFIG).
    assert_eq!(
        alter(
            &mut client,
            "settings",
            &[("retention.ms", DELETE, None)],
            false
        ),
        0
    );
    assert_eq!(
        setting(&mut client, "settings", "retention.ms"),
        ("604800000".into(), 5)
    );

    let node = node.stop().restart(&[]);
    let mut client = node.connect();
    assert_eq!(
        setting(&mut client, "settings", "max.message.bytes").0,
        "2000"
    );
    assert_eq!(
        setting(&mut client, "settings", "cleanup.policy").0,
        "compact"
    );
    assert_eq!(
        produce(&mut client, "settings", 0, big, 1).0,
        code(ResponseError::MessageTooLarge),
        "a reopened log starts with the altered limit"
    );
}

/// (name, value, source) triples, for comparing synonyms.
fn levels(expected: &[(&str, &str, i8)]) -> Vec<(String, String, i8)> {
    expected
        .iter()
        .map(|(name, value, source)| (name.to_string(), value.to_string(), *source))
        .collect()
}

#[test]
fn dynamic_broker_settings_take_kafkas_precedence_and_survive_a_restart() {
    let node = Node::start(&["log.retention.bytes=5000"]);
    let mut client = node.connect();
    create_topic(&mut client, "inherits", 1, &[]);
    let cluster = (BROKER, "");
    let this_broker = (BROKER, "1");

    // The cluster-wide default, then this broker's own value, then the topic's own.
    let set = |value| [("log.retention.ms", SET, Some(value))];
    assert_eq!(
        alter_resource(&mut client, cluster, &set("60000"), false),
        0
    );
    assert_eq!(
        setting(&mut client, "inherits", "retention.ms"),
        ("60000".into(), 3)
    );
    assert_eq!(
        alter_resource(&mut client, this_broker, &set("70000"), false),
        0
    );
    assert_eq!(
        setting(&mut client, "inherits", "retention.ms"),
        ("70000".into(), 2)
    );
    assert_eq!(
        alter(
            &mut client,
            "inherits",
            &[("retention.ms", SET, Some("80000"))],
            false
        ),
        0
    );
    let found = describe(&mut client, (TOPIC, "inherits"), "retention.ms");
    assert_eq!(
        synonyms(&found),
        levels(&[
            ("retention.ms", "80000", 1),
            ("log.retention.ms", "70000", 2),
            ("log.retention.ms", "60000", 3),
            ("log.retention.ms", "604800000", 5),
        ])
    );
    // The static configuration is source 4.
    assert_eq!(
        setting(&mut client, "inherits", "retention.bytes"),
        ("5000".into(), 4)
    );
    // The broker describes itself: a dynamic setting may change, a static one may not.
    let found = describe(&mut client, this_broker, "log.retention.ms");
    assert_eq!((found.config_source, found.read_only), (2, false));
    let found = describe(&mut client, this_broker, "num.partitions");
    assert_eq!((found.config_source, found.read_only), (5, true));
    let found = describe(&mut client, cluster, "log.retention.ms");
    assert_eq!(
        found.value.as_ref().map(|v| v.to_string()).as_deref(),
        Some("60000")
    );

    // Kafka's refusals: read-only, unknown, a bad value, a bad broker name; a refused
    // resource changes nothing, nor does validate_only.
    let refused = [
        ("log.retention.hours", code(ResponseError::InvalidRequest)),
        (
            "log.retention.check.interval.ms",
            code(ResponseError::InvalidRequest),
        ),
        ("no.such.setting", code(ResponseError::InvalidConfig)),
    ];
    for (key, error) in refused {
        let ops = [("log.retention.ms", SET, Some("1")), (key, SET, Some("1"))];
        assert_eq!(
            alter_resource(&mut client, cluster, &ops, false),
            error,
            "{key}"
        );
    }
    let bad = [("log.retention.ms", SET, Some("soon"))];
    assert_eq!(
        alter_resource(&mut client, cluster, &bad, false),
        code(ResponseError::InvalidConfig)
    );
    assert_eq!(
        alter_resource(&mut client, (BROKER, "one"), &set("1"), false),
        code(ResponseError::InvalidRequest)
    );
    assert_eq!(alter_resource(&mut client, cluster, &set("1"), true), 0);
    let found = describe(&mut client, cluster, "log.retention.ms");
    assert_eq!(
        found.value.as_ref().map(|v| v.to_string()).as_deref(),
        Some("60000")
    );

    // A restart keeps every level; deleting the broker's own goes back to the cluster's.
    let node = node.stop().restart(&["log.retention.bytes=5000"]);
    let mut client = node.connect();
    assert_eq!(
        alter(
            &mut client,
            "inherits",
            &[("retention.ms", DELETE, None)],
            false
        ),
        0
    );
    assert_eq!(
        setting(&mut client, "inherits", "retention.ms"),
        ("70000".into(), 2)
    );
    let delete = [("log.retention.ms", DELETE, None)];
    assert_eq!(alter_resource(&mut client, this_broker, &delete, false), 0);
    assert_eq!(
        setting(&mut client, "inherits", "retention.ms"),
        ("60000".into(), 3)
    );
}

#[test]
fn a_dynamic_default_reaches_open_logs_without_a_restart() {
    let node = Node::start(&["log.retention.check.interval.ms=200"]);
    let mut client = node.connect();
    // The test's batches carry old timestamps: only the size limit may delete them.
    let own = [("segment.bytes", "2048"), ("retention.ms", "-1")];
    create_topic(&mut client, "shrinks", 1, &own);
    for _ in 0..20 {
        assert_eq!(
            produce(&mut client, "shrinks", 0, batch(&[&[1u8; 1000]]), 1).0,
            0
        );
    }
    assert_eq!(common::earliest_offset(&mut client, "shrinks"), 0);
    // The largest batch the topic takes, and how much it keeps, set for the whole cluster.
    let ops = [
        ("message.max.bytes", SET, Some("500")),
        ("log.retention.bytes", SET, Some("1")),
    ];
    assert_eq!(alter_resource(&mut client, (BROKER, ""), &ops, false), 0);
    assert_eq!(
        produce(&mut client, "shrinks", 0, batch(&[&[1u8; 1000]]), 1).0,
        code(ResponseError::MessageTooLarge),
        "the open log takes the new default limit"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while common::earliest_offset(&mut client, "shrinks") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "retention never deleted a segment"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn the_cleaners_settings_are_described_with_their_sources() {
    let node = Node::start(&["log.cleaner.backoff.ms=60000"]);
    let mut client = node.connect();
    let ops = [("log.cleaner.threads", SET, Some("2"))];
    assert_eq!(alter_resource(&mut client, (BROKER, ""), &ops, false), 0);
    let threads = describe(&mut client, (BROKER, "1"), "log.cleaner.threads");
    assert!(!threads.read_only);
    assert_eq!(
        synonyms(&threads),
        levels(&[
            ("log.cleaner.threads", "2", 3),
            ("log.cleaner.threads", "1", 5),
        ])
    );
    let backoff = describe(&mut client, (BROKER, "1"), "log.cleaner.backoff.ms");
    assert_eq!(
        synonyms(&backoff),
        levels(&[("log.cleaner.backoff.ms", "60000", 4)])
    );
    let rate = describe(
        &mut client,
        (BROKER, "1"),
        "log.cleaner.io.max.bytes.per.second",
    );
    assert_eq!(
        rate.value.as_deref().map(|v| v.to_string()),
        Some("1.7976931348623157E308".to_string()),
        "Kafka's no limit, as Java writes it"
    );
    let enable = describe(&mut client, (BROKER, "1"), "log.cleaner.enable");
    assert!(enable.read_only, "read at start only");
}

#[test]
fn alter_configs_replaces_a_resources_whole_set() {
    use kafka_protocol::messages::alter_configs_request::{
        AlterConfigsResource as Replaced, AlterableConfig as Given,
    };
    use kafka_protocol::messages::AlterConfigsRequest;
    let node = Node::start(&[]);
    let mut client = node.connect();
    create_topic(
        &mut client,
        "replaced",
        1,
        &[("retention.ms", "1000"), ("max.message.bytes", "2000")],
    );
    let replace = |client: &mut Client, kind: i8, name: &str, given: &[(&str, &str)]| {
        let configs = given
            .iter()
            .map(|(key, value)| {
                Given::default()
                    .with_name(StrBytes::from_string(key.to_string()))
                    .with_value(Some(StrBytes::from_string(value.to_string())))
            })
            .collect();
        let request = AlterConfigsRequest::default().with_resources(vec![Replaced::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configs(configs)]);
        let ResponseKind::AlterConfigs(answer) = client.call(2, RequestKind::AlterConfigs(request))
        else {
            unreachable!()
        };
        answer.responses[0].error_code
    };
    assert_eq!(
        replace(&mut client, TOPIC, "replaced", &[("segment.bytes", "4096")]),
        0
    );
    assert_eq!(
        setting(&mut client, "replaced", "segment.bytes"),
        ("4096".into(), 1)
    );
    assert_eq!(
        setting(&mut client, "replaced", "retention.ms").1,
        5,
        "left out: removed"
    );
    assert_eq!(setting(&mut client, "replaced", "max.message.bytes").1, 5);
    assert_eq!(
        replace(&mut client, BROKER, "", &[("log.retention.ms", "5000")]),
        0
    );
    assert_eq!(
        setting(&mut client, "replaced", "retention.ms"),
        ("5000".into(), 3)
    );
    assert_eq!(
        replace(&mut client, TOPIC, "missing", &[("retention.ms", "1")]),
        code(ResponseError::UnknownTopicOrPartition)
    );
}
