//! The operations a caller may perform on a resource, as the `authorized_operations` fields
//! of Metadata, DescribeCluster and DescribeGroups answer them (KIP-430). The node has no
//! authorizer, so every caller may perform every operation Kafka defines for the resource
//! type (Kafka's `AclEntry.supportedOperations`), which is what a Kafka broker without an
//! authorizer answers too. A request that did not ask gets `NOT_ASKED`.

/// Kafka's `AclOperation` codes: bit `1 << code` of the field.
const READ: u8 = 3;
const WRITE: u8 = 4;
const CREATE: u8 = 5;
const DELETE: u8 = 6;
const ALTER: u8 = 7;
const DESCRIBE: u8 = 8;
const CLUSTER_ACTION: u8 = 9;
const DESCRIBE_CONFIGS: u8 = 10;
const ALTER_CONFIGS: u8 = 11;
const IDEMPOTENT_WRITE: u8 = 12;

pub const TOPIC: i32 = bits(&[
    READ,
    WRITE,
    CREATE,
    DELETE,
    ALTER,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
]);
pub const GROUP: i32 = bits(&[READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS]);
pub const CLUSTER: i32 = bits(&[
    CREATE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
    ALTER,
    DESCRIBE,
]);

/// Kafka's answer when the request did not ask for the operations.
pub const NOT_ASKED: i32 = i32::MIN;

/// `operations` if the request asked for them, else `NOT_ASKED`.
pub fn if_asked(asked: bool, operations: i32) -> i32 {
    if asked {
        operations
    } else {
        NOT_ASKED
    }
}

const fn bits(operations: &[u8]) -> i32 {
    let mut field = 0;
    let mut i = 0;
    while i < operations.len() {
        field |= 1 << operations[i];
        i += 1;
    }
    field
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_kafkas_for_a_broker_without_an_authorizer() {
        // The values a Kafka 4 broker without an authorizer sends.
        assert_eq!(TOPIC, 3576);
        assert_eq!(GROUP, 3400);
        assert_eq!(CLUSTER, 8096);
        assert_eq!(if_asked(false, TOPIC), i32::MIN);
    }
}
