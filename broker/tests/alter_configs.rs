//! Topic settings changed at run time (IncrementalAlterConfigs): what DescribeConfigs shows,
//! what the open log enforces from the next append, and what a restart keeps.

mod common;

use common::{batch, create_topic, produce, Client, Node};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    DescribeConfigsRequest, IncrementalAlterConfigsRequest, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

fn code(error: ResponseError) -> i16 {
    error.code()
}

/// Alters settings of `topic`; the resource's error code.
fn alter(
    client: &mut Client,
    topic: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> i16 {
    let configs = ops
        .iter()
        .map(|(name, op, value)| {
            AlterableConfig::default()
                .with_name(StrBytes::from_string(name.to_string()))
                .with_config_operation(*op)
                .with_value(value.map(|v| StrBytes::from_string(v.to_string())))
        })
        .collect();
    let request = IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configs(configs)]);
    let ResponseKind::IncrementalAlterConfigs(answer) =
        client.call(1, RequestKind::IncrementalAlterConfigs(request))
    else {
        unreachable!()
    };
    answer.responses[0].error_code
}

/// The value DescribeConfigs gives `key` of `topic`, with its source.
fn setting(client: &mut Client, topic: &str, key: &str) -> (String, i8) {
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_string(key.to_string())]))]);
    let ResponseKind::DescribeConfigs(answer) =
        client.call(4, RequestKind::DescribeConfigs(request))
    else {
        unreachable!()
    };
    let found = &answer.results[0].configs[0];
    (
        found
            .value
            .as_ref()
            .map(|v| v.to_string())
            .unwrap_or_default(),
        found.config_source,
    )
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
