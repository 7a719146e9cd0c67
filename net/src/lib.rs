//! ① The Kafka wire protocol: bytes on a socket become typed requests, and typed
//! responses become bytes again, in request order.
//!
//! Invariants:
//! - A frame is checked complete and within `socket.request.max.bytes` before anything is
//!   parsed or allocated for it ([`frame`]).
//! - Message bodies are decoded and encoded only by the `kafka-protocol` crate, which is
//!   generated from Kafka's own message descriptors; this crate adds framing, version
//!   checks and the connection loop.
//! - Every request a connection reads gets exactly one answer slot, and answers leave in the
//!   order the requests arrived, however many are being handled at once ([`connection`]).
//! - The versions a client may use are the ones the broker says it implements
//!   ([`SupportedApis`]); anything else is refused the way Kafka refuses it.

pub mod budget;
pub mod connection;
pub mod frame;
pub mod out_frame;
mod read_buffer;
pub mod request;
pub mod response;
pub mod sequence;
pub mod versions;

pub use budget::{Budget, Reservation};
pub use connection::{serve_connection, Answer, ConnectionLimits, Handler, Outbox, Reply};
pub use out_frame::OutFrame;
pub use request::{decode_request, DecodeError, Request};
pub use response::encode_response;
pub use versions::SupportedApis;

pub use kafka_protocol;
