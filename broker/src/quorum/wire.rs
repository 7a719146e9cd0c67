//! Frames between voters on the controller listener: ringlog's own framing, with the Raft
//! messages copied into plain serde types and encoded with postcard, so that nothing a peer
//! sends is parsed by protobuf (whose 2.x parser recurses without bound, RUSTSEC-2024-0437).
//!
//! ```text
//! connection:  "RLQ\x01" | frame...        (the dialler's preamble, then frames both ways)
//! frame:       length u32 LE | crc32 u32 LE | postcard(Frame)
//! ```
//!
//! The controller listener serves Kafka clients too (`transport.rs`): a connection whose
//! first four bytes are not [`PREAMBLE`] is a Kafka connection. Read as a Kafka frame's
//! length (i32 big-endian), the preamble would announce 1.38 GB, far above any request a
//! Kafka client sends, so neither protocol can be taken for the other.
//!
//! Invariants: a frame longer than [`FRAME_BYTES_MAX`] is refused before anything is
//! allocated for it; a connection's first frame is a [`Hello`] naming the cluster, the voter
//! and its directory, and a peer of another cluster, an unknown voter or this node itself is
//! refused; decoding never panics, whatever the bytes.

use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};
use serde::{Deserialize, Serialize};

/// A snapshot of the metadata image is the largest message; far above any real one.
pub const FRAME_BYTES_MAX: usize = 64 << 20;
/// Length and checksum ahead of each frame's body.
pub const HEADER_BYTES: usize = 8;
/// What a voter's connection to another voter opens with.
pub const PREAMBLE: [u8; 4] = *b"RLQ\x01";

/// Who is on the other end of a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub cluster_id: String,
    pub node_id: u64,
    pub directory_id: String,
}

impl Hello {
    /// Whether a connection that opened with this Hello may speak to voter `local` of
    /// `cluster_id`, whose quorum is `voters`: the same cluster, another voter of it.
    pub fn check(&self, cluster_id: &str, local: u64, voters: &[u64]) -> Result<(), WireError> {
        if self.cluster_id != cluster_id {
            return Err(WireError::Refused(format!(
                "peer of cluster {}, this is cluster {cluster_id}",
                self.cluster_id
            )));
        }
        if self.node_id == local || !voters.contains(&self.node_id) {
            return Err(WireError::Refused(format!(
                "node {} is not another voter of {voters:?}",
                self.node_id
            )));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    Hello(Hello),
    Raft(Box<WireMessage>),
    /// A request for the active controller from another voter, answered by `Forwarded`
    /// with the same id (see `runner::Quorum::forward`).
    Forward {
        id: u64,
        body: Vec<u8>,
    },
    Forwarded {
        id: u64,
        result: Result<Vec<u8>, String>,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("a frame of {0} bytes is over the limit")]
    TooLarge(usize),
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("undecodable frame: {0}")]
    Decode(String),
    #[error("unknown Raft message type {0}")]
    MessageType(i32),
    #[error("unknown Raft entry type {0}")]
    EntryType(i32),
    #[error("peer refused: {0}")]
    Refused(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireEntry {
    entry_type: i32,
    term: u64,
    index: u64,
    data: Vec<u8>,
    context: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireSnapshot {
    data: Vec<u8>,
    index: u64,
    term: u64,
    voters: Vec<u64>,
    learners: Vec<u64>,
    voters_outgoing: Vec<u64>,
    learners_next: Vec<u64>,
    auto_leave: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireMessage {
    msg_type: i32,
    to: u64,
    from: u64,
    term: u64,
    log_term: u64,
    index: u64,
    entries: Vec<WireEntry>,
    commit: u64,
    commit_term: u64,
    snapshot: Option<WireSnapshot>,
    request_snapshot: u64,
    reject: bool,
    reject_hint: u64,
    context: Vec<u8>,
    priority: i64,
}

impl From<&Message> for WireMessage {
    fn from(m: &Message) -> WireMessage {
        let snapshot = m.snapshot.as_ref();
        WireMessage {
            msg_type: m.get_msg_type() as i32,
            to: m.to,
            from: m.from,
            term: m.term,
            log_term: m.log_term,
            index: m.index,
            entries: m
                .entries
                .iter()
                .map(|e| WireEntry {
                    entry_type: e.get_entry_type() as i32,
                    term: e.term,
                    index: e.index,
                    data: e.data.to_vec(),
                    context: e.context.to_vec(),
                })
                .collect(),
            commit: m.commit,
            commit_term: m.commit_term,
            snapshot: snapshot.map(|s| {
                let meta = s.get_metadata();
                let conf = meta.get_conf_state();
                WireSnapshot {
                    data: s.data.to_vec(),
                    index: meta.index,
                    term: meta.term,
                    voters: conf.voters.clone(),
                    learners: conf.learners.clone(),
                    voters_outgoing: conf.voters_outgoing.clone(),
                    learners_next: conf.learners_next.clone(),
                    auto_leave: conf.auto_leave,
                }
            }),
            request_snapshot: m.request_snapshot,
            reject: m.reject,
            reject_hint: m.reject_hint,
            context: m.context.to_vec(),
            priority: m.priority,
        }
    }
}

impl TryFrom<WireMessage> for Message {
    type Error = WireError;

    fn try_from(w: WireMessage) -> Result<Message, WireError> {
        use protobuf::ProtobufEnum;
        let mut m = Message {
            msg_type: MessageType::from_i32(w.msg_type)
                .ok_or(WireError::MessageType(w.msg_type))?,
            to: w.to,
            from: w.from,
            term: w.term,
            log_term: w.log_term,
            index: w.index,
            commit: w.commit,
            commit_term: w.commit_term,
            request_snapshot: w.request_snapshot,
            reject: w.reject,
            reject_hint: w.reject_hint,
            context: w.context.into(),
            priority: w.priority,
            ..Message::default()
        };
        for e in w.entries {
            m.entries.push(Entry {
                entry_type: EntryType::from_i32(e.entry_type)
                    .ok_or(WireError::EntryType(e.entry_type))?,
                term: e.term,
                index: e.index,
                data: e.data.into(),
                context: e.context.into(),
                ..Entry::default()
            });
        }
        if let Some(s) = w.snapshot {
            let mut snapshot = Snapshot {
                data: s.data.into(),
                ..Snapshot::default()
            };
            let meta = snapshot.mut_metadata();
            meta.index = s.index;
            meta.term = s.term;
            meta.set_conf_state(ConfState {
                voters: s.voters,
                learners: s.learners,
                voters_outgoing: s.voters_outgoing,
                learners_next: s.learners_next,
                auto_leave: s.auto_leave,
                ..ConfState::default()
            });
            m.set_snapshot(snapshot);
        }
        Ok(m)
    }
}

/// One frame, ready to write.
pub fn encode(frame: &Frame) -> Vec<u8> {
    let body = postcard::to_stdvec(frame).expect("frames always encode");
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The length of the frame that `header` (its first 8 bytes) announces, checked against
/// the limit before anything is read or allocated for it.
pub fn body_len(header: [u8; HEADER_BYTES]) -> Result<usize, WireError> {
    let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if length > FRAME_BYTES_MAX {
        return Err(WireError::TooLarge(length));
    }
    Ok(length)
}

/// Decodes the body of a frame whose header was `header`.
pub fn decode_body(header: [u8; HEADER_BYTES], body: &[u8]) -> Result<Frame, WireError> {
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if crc32fast::hash(body) != crc {
        return Err(WireError::Checksum);
    }
    postcard::from_bytes(body).map_err(|e| WireError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rich_message() -> Message {
        let mut message = Message {
            msg_type: MessageType::MsgAppend,
            to: 2,
            from: 1,
            term: 7,
            log_term: 6,
            index: 41,
            commit: 40,
            commit_term: 6,
            reject_hint: 3,
            context: b"ctx".to_vec().into(),
            priority: -1,
            ..Message::default()
        };
        for index in 42..45 {
            message.entries.push(Entry {
                entry_type: EntryType::EntryNormal,
                term: 7,
                index,
                data: format!("[{{\"type\":\"NoOpRecord\"}}] {index}")
                    .into_bytes()
                    .into(),
                ..Entry::default()
            });
        }
        let mut snapshot = Snapshot {
            data: b"image".to_vec().into(),
            ..Snapshot::default()
        };
        snapshot.mut_metadata().index = 30;
        snapshot.mut_metadata().term = 5;
        snapshot.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
        message.set_snapshot(snapshot);
        message
    }

    fn split(frame: &[u8]) -> ([u8; HEADER_BYTES], &[u8]) {
        let header: [u8; HEADER_BYTES] = frame[..HEADER_BYTES].try_into().expect("header");
        (header, &frame[HEADER_BYTES..])
    }

    #[test]
    fn raft_messages_and_hellos_survive_the_wire() {
        let message = rich_message();
        let frame = encode(&Frame::Raft(Box::new(WireMessage::from(&message))));
        let (header, body) = split(&frame);
        assert_eq!(body_len(header), Ok(body.len()));
        let Frame::Raft(wire) = decode_body(header, body).expect("decodes") else {
            panic!("a Raft frame");
        };
        assert_eq!(Message::try_from(*wire).expect("valid"), message);
        let hello = Frame::Hello(Hello {
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qg".into(),
            node_id: 3,
            directory_id: "J8aAPcfLQt2bqs1JT_rMgQ".into(),
        });
        let frame = encode(&hello);
        let (header, body) = split(&frame);
        assert_eq!(decode_body(header, body), Ok(hello));
    }

    #[test]
    fn only_other_voters_of_the_same_cluster_are_heard() {
        let hello = |cluster: &str, node_id| Hello {
            cluster_id: cluster.into(),
            node_id,
            directory_id: "d".into(),
        };
        let voters = [1, 2, 3];
        assert_eq!(hello("A", 2).check("A", 1, &voters), Ok(()));
        assert!(
            hello("B", 2).check("A", 1, &voters).is_err(),
            "another cluster"
        );
        assert!(hello("A", 4).check("A", 1, &voters).is_err(), "not a voter");
        assert!(hello("A", 1).check("A", 1, &voters).is_err(), "itself");
    }

    #[test]
    fn oversized_corrupt_and_unknown_frames_are_refused() {
        let huge = ((FRAME_BYTES_MAX + 1) as u32).to_le_bytes();
        let header = [huge[0], huge[1], huge[2], huge[3], 0, 0, 0, 0];
        assert_eq!(
            body_len(header),
            Err(WireError::TooLarge(FRAME_BYTES_MAX + 1))
        );
        let frame = encode(&Frame::Raft(Box::new(WireMessage::from(&rich_message()))));
        let (header, body) = split(&frame);
        let mut flipped = body.to_vec();
        flipped[5] ^= 1;
        assert_eq!(decode_body(header, &flipped), Err(WireError::Checksum));
        let mut wire = WireMessage::from(&rich_message());
        wire.msg_type = 99;
        assert_eq!(Message::try_from(wire), Err(WireError::MessageType(99)));
    }

    #[test]
    fn no_bytes_make_decoding_panic() {
        let frame = encode(&Frame::Raft(Box::new(WireMessage::from(&rich_message()))));
        let (_, body) = split(&frame);
        // Every truncation, and bodies of pseudo-random bytes, with a matching checksum so
        // that postcard itself sees them.
        let mut bodies: Vec<Vec<u8>> = (0..body.len()).map(|n| body[..n].to_vec()).collect();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for length in 0..300 {
            bodies.push(
                (0..length)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state as u8
                    })
                    .collect(),
            );
        }
        for body in bodies {
            let crc = crc32fast::hash(&body).to_le_bytes();
            let len = (body.len() as u32).to_le_bytes();
            let header = [
                len[0], len[1], len[2], len[3], crc[0], crc[1], crc[2], crc[3],
            ];
            if let Ok(Frame::Raft(wire)) = decode_body(header, &body) {
                let _ = Message::try_from(*wire);
            }
        }
    }
}
