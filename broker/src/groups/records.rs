//! What the group coordinator writes to `__consumer_offsets`, in Kafka's own layout, so the
//! partition reads like Kafka's: each record's key says what it is about, its value the
//! latest state, and a null value (tombstone) deletes.
//!
//! ```text
//! offset commit   key:   version i16 = 1 | group string | topic string | partition i32
//!                 value: version i16 = 3 | offset i64 | leader_epoch i32 | metadata string
//!                        | commit_timestamp i64
//! group metadata  key:   version i16 = 2 | group string
//!                 value: version i16 = 3 | protocol_type string | generation i32
//!                        | protocol nullable string | leader nullable string
//!                        | state_timestamp i64 | members [member]
//! member:         member_id string | group_instance_id nullable string | client_id string
//!                 | client_host string | rebalance_timeout i32 | session_timeout i32
//!                 | subscription bytes | assignment bytes
//! ```
//! Strings are `i16` length + UTF-8 (-1 for null); byte arrays are `i32` length + bytes;
//! arrays are `i32` count + elements; all big endian.
//!
//! Invariant: decoding never trusts a length beyond the bytes present.

use bytes::{Buf, BufMut, Bytes, BytesMut};

const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_VALUE_VERSION: i16 = 3;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub state_timestamp_ms: i64,
    pub members: Vec<MemberValue>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordValue {
    Offset(OffsetValue),
    Group(GroupValue),
}

pub fn encode_key(key: &RecordKey) -> Bytes {
    let mut out = BytesMut::new();
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition,
        } => {
            out.put_i16(OFFSET_KEY_VERSION);
            put_string(&mut out, group);
            put_string(&mut out, topic);
            out.put_i32(*partition);
        }
        RecordKey::Group { group } => {
            out.put_i16(GROUP_KEY_VERSION);
            put_string(&mut out, group);
        }
    }
    out.freeze()
}

pub fn encode_value(value: &RecordValue) -> Bytes {
    let mut out = BytesMut::new();
    match value {
        RecordValue::Offset(offset) => {
            out.put_i16(OFFSET_VALUE_VERSION);
            out.put_i64(offset.offset);
            out.put_i32(offset.leader_epoch);
            put_string(&mut out, &offset.metadata);
            out.put_i64(offset.commit_timestamp_ms);
        }
        RecordValue::Group(group) => {
            out.put_i16(GROUP_VALUE_VERSION);
            put_string(&mut out, &group.protocol_type);
            out.put_i32(group.generation);
            put_nullable_string(&mut out, group.protocol.as_deref());
            put_nullable_string(&mut out, group.leader.as_deref());
            out.put_i64(group.state_timestamp_ms);
            out.put_i32(group.members.len() as i32);
            for member in &group.members {
                put_string(&mut out, &member.member_id);
                put_nullable_string(&mut out, member.group_instance_id.as_deref());
                put_string(&mut out, &member.client_id);
                put_string(&mut out, &member.client_host);
                out.put_i32(member.rebalance_timeout_ms);
                out.put_i32(member.session_timeout_ms);
                put_bytes(&mut out, &member.subscription);
                put_bytes(&mut out, &member.assignment);
            }
        }
    }
    out.freeze()
}

/// Decodes a key; `None` for versions this node does not write (ignored on load).
pub fn decode_key(mut bytes: Bytes) -> Result<Option<RecordKey>, String> {
    match get_i16(&mut bytes)? {
        0 | OFFSET_KEY_VERSION => Ok(Some(RecordKey::Offset {
            group: get_string(&mut bytes)?,
            topic: get_string(&mut bytes)?,
            partition: get_i32(&mut bytes)?,
        })),
        GROUP_KEY_VERSION => Ok(Some(RecordKey::Group {
            group: get_string(&mut bytes)?,
        })),
        _ => Ok(None),
    }
}

pub fn decode_value(key: &RecordKey, mut bytes: Bytes) -> Result<RecordValue, String> {
    let version = get_i16(&mut bytes)?;
    match key {
        RecordKey::Offset { .. } => {
            if version != OFFSET_VALUE_VERSION {
                return Err(format!("offset value version {version}"));
            }
            Ok(RecordValue::Offset(OffsetValue {
                offset: get_i64(&mut bytes)?,
                leader_epoch: get_i32(&mut bytes)?,
                metadata: get_string(&mut bytes)?,
                commit_timestamp_ms: get_i64(&mut bytes)?,
            }))
        }
        RecordKey::Group { .. } => {
            if version != GROUP_VALUE_VERSION {
                return Err(format!("group value version {version}"));
            }
            let protocol_type = get_string(&mut bytes)?;
            let generation = get_i32(&mut bytes)?;
            let protocol = get_nullable_string(&mut bytes)?;
            let leader = get_nullable_string(&mut bytes)?;
            let state_timestamp_ms = get_i64(&mut bytes)?;
            let count = get_i32(&mut bytes)?;
            if count < 0 || count as usize > bytes.remaining() {
                return Err(format!("member count {count}"));
            }
            let mut members = Vec::with_capacity(count as usize);
            for _ in 0..count {
                members.push(MemberValue {
                    member_id: get_string(&mut bytes)?,
                    group_instance_id: get_nullable_string(&mut bytes)?,
                    client_id: get_string(&mut bytes)?,
                    client_host: get_string(&mut bytes)?,
                    rebalance_timeout_ms: get_i32(&mut bytes)?,
                    session_timeout_ms: get_i32(&mut bytes)?,
                    subscription: get_bytes(&mut bytes)?,
                    assignment: get_bytes(&mut bytes)?,
                });
            }
            Ok(RecordValue::Group(GroupValue {
                protocol_type,
                generation,
                protocol,
                leader,
                state_timestamp_ms,
                members,
            }))
        }
    }
}

fn put_string(out: &mut BytesMut, value: &str) {
    put_nullable_string(out, Some(value));
}

fn put_nullable_string(out: &mut BytesMut, value: Option<&str>) {
    match value {
        None => out.put_i16(-1),
        Some(value) => {
            let length = i16::try_from(value.len()).expect("names are validated to fit i16");
            out.put_i16(length);
            out.put_slice(value.as_bytes());
        }
    }
}

fn put_bytes(out: &mut BytesMut, value: &[u8]) {
    out.put_i32(value.len() as i32);
    out.put_slice(value);
}

fn need(bytes: &Bytes, count: usize) -> Result<(), String> {
    if bytes.remaining() < count {
        return Err(format!(
            "truncated: need {count} bytes, have {}",
            bytes.remaining()
        ));
    }
    Ok(())
}

fn get_i16(bytes: &mut Bytes) -> Result<i16, String> {
    need(bytes, 2)?;
    Ok(bytes.get_i16())
}

fn get_i32(bytes: &mut Bytes) -> Result<i32, String> {
    need(bytes, 4)?;
    Ok(bytes.get_i32())
}

fn get_i64(bytes: &mut Bytes) -> Result<i64, String> {
    need(bytes, 8)?;
    Ok(bytes.get_i64())
}

fn get_nullable_string(bytes: &mut Bytes) -> Result<Option<String>, String> {
    let length = get_i16(bytes)?;
    if length < 0 {
        return Ok(None);
    }
    need(bytes, length as usize)?;
    let raw = bytes.split_to(length as usize);
    String::from_utf8(raw.to_vec())
        .map(Some)
        .map_err(|_| "string is not UTF-8".to_string())
}

fn get_string(bytes: &mut Bytes) -> Result<String, String> {
    get_nullable_string(bytes)?.ok_or_else(|| "null where a string is required".to_string())
}

fn get_bytes(bytes: &mut Bytes) -> Result<Bytes, String> {
    let length = get_i32(bytes)?;
    if length < 0 {
        return Ok(Bytes::new());
    }
    need(bytes, length as usize)?;
    // A copy: a group keeps these for as long as it lives, and a slice would keep the whole
    // read of the offsets log it came from (up to a cache chunk) alive with it.
    Ok(Bytes::copy_from_slice(&bytes.split_to(length as usize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_groups_round_trip() {
        let key = RecordKey::Offset {
            group: "g".into(),
            topic: "orders".into(),
            partition: 2,
        };
        let value = RecordValue::Offset(OffsetValue {
            offset: 42,
            leader_epoch: 0,
            metadata: "m".into(),
            commit_timestamp_ms: 1_700_000_000_000,
        });
        assert_eq!(decode_key(encode_key(&key)), Ok(Some(key.clone())));
        assert_eq!(decode_value(&key, encode_value(&value)), Ok(value));

        let key = RecordKey::Group { group: "g".into() };
        let value = RecordValue::Group(GroupValue {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("m-1".into()),
            state_timestamp_ms: 5,
            members: vec![MemberValue {
                member_id: "m-1".into(),
                group_instance_id: None,
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        });
        assert_eq!(decode_key(encode_key(&key)), Ok(Some(key.clone())));
        let encoded = encode_value(&value);
        let decoded = decode_value(&key, encoded.clone());
        assert_eq!(decoded, Ok(value));
        // What a group keeps does not pin the read of the log it was loaded from.
        let Ok(RecordValue::Group(group)) = decoded else {
            unreachable!("decoded above")
        };
        let read = encoded.as_ptr_range();
        for kept in [&group.members[0].subscription, &group.members[0].assignment] {
            assert!(!read.contains(&kept.as_ptr()), "a slice of the read");
        }
    }

    #[test]
    fn truncated_or_lying_bytes_are_errors() {
        let key = RecordKey::Group { group: "g".into() };
        let mut lying = BytesMut::new();
        lying.put_i16(GROUP_VALUE_VERSION);
        put_string(&mut lying, "consumer");
        lying.put_i32(1);
        lying.put_i16(-1);
        lying.put_i16(-1);
        lying.put_i64(0);
        lying.put_i32(i32::MAX); // member count far beyond the bytes present
        assert!(decode_value(&key, lying.freeze()).is_err());
        let encoded = encode_key(&RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 0,
        });
        for cut in 0..encoded.len() {
            assert!(decode_key(encoded.slice(..cut)).is_err(), "cut at {cut}");
        }
    }
}
