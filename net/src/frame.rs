//! Framing: a Kafka frame is a 4-byte big-endian length, then that many bytes.
//!
//! Sans-io: [`check`] looks at buffered bytes and says whether a whole frame is there,
//! how long it is, or that its length is unacceptable, before anything is allocated for it.

use thiserror::Error;

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// The smallest request body Kafka can send: api key, api version, correlation id and
/// a null client id (2 + 2 + 4 + 2 bytes).
pub const REQUEST_BYTES_MIN: usize = 10;

#[derive(Error, Debug, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {size_bytes} bytes exceeds socket.request.max.bytes ({size_bytes_max})")]
    TooLarge {
        size_bytes: i64,
        size_bytes_max: usize,
    },
    #[error("frame of {size_bytes} bytes is shorter than any request")]
    TooSmall { size_bytes: i64 },
}

/// What the buffered bytes hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// Not even the length prefix yet.
    NeedPrefix,
    /// The prefix says the frame body has `body_bytes`; `missing_bytes` have not arrived.
    Incomplete {
        body_bytes: usize,
        missing_bytes: usize,
    },
    /// A whole frame: the body is `buffered[4..4 + body_bytes]`.
    Complete { body_bytes: usize },
}

/// Inspects `buffered` (which starts at a frame boundary).
pub fn check(buffered: &[u8], size_bytes_max: usize) -> Result<Check, FrameError> {
    let Some(prefix) = buffered.first_chunk::<LENGTH_PREFIX_BYTES>() else {
        return Ok(Check::NeedPrefix);
    };
    let size_bytes = i64::from(i32::from_be_bytes(*prefix));
    if size_bytes < REQUEST_BYTES_MIN as i64 {
        return Err(FrameError::TooSmall { size_bytes });
    }
    if size_bytes > size_bytes_max as i64 {
        return Err(FrameError::TooLarge {
            size_bytes,
            size_bytes_max,
        });
    }
    let body_bytes = size_bytes as usize;
    let buffered_body_bytes = buffered.len() - LENGTH_PREFIX_BYTES;
    if buffered_body_bytes < body_bytes {
        return Ok(Check::Incomplete {
            body_bytes,
            missing_bytes: body_bytes - buffered_body_bytes,
        });
    }
    Ok(Check::Complete { body_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn complete_incomplete_and_prefix() {
        let frame = framed(&[0u8; 12]);
        assert_eq!(check(&frame[..3], 100), Ok(Check::NeedPrefix));
        assert_eq!(
            check(&frame[..10], 100),
            Ok(Check::Incomplete {
                body_bytes: 12,
                missing_bytes: 6
            })
        );
        assert_eq!(check(&frame, 100), Ok(Check::Complete { body_bytes: 12 }));
    }

    #[test]
    fn rejects_oversized_and_negative_lengths() {
        assert!(matches!(
            check(&framed(&[0u8; 200]), 100),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(matches!(
            check(&(-1i32).to_be_bytes(), 100),
            Err(FrameError::TooSmall { .. })
        ));
        assert!(matches!(
            check(&i32::MAX.to_be_bytes(), 100),
            Err(FrameError::TooLarge { .. })
        ));
    }

    proptest! {
        #[test]
        fn never_panics_and_never_claims_more_than_buffered(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(Check::Complete { body_bytes }) = check(&bytes, 1 << 20) {
                prop_assert!(LENGTH_PREFIX_BYTES + body_bytes <= bytes.len());
            }
        }
    }
}
