//! Kafka's text form of a UUID (topic, cluster and directory ids): its 16 bytes in
//! URL-safe base64 without padding, 22 characters, as Kafka's `Uuid.toString` writes it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use uuid::Uuid;

pub fn kafka_uuid(id: &Uuid) -> String {
    URL_SAFE_NO_PAD.encode(id.as_bytes())
}

/// A fresh id minted by the rule of Kafka's `Uuid.randomUuid`: never an id Kafka reserves
/// (nil, and 1 for the metadata topic), and never one whose text starts with '-', which a
/// command line (`ringlog format --cluster-id ID`, Kafka's tools) would take for an option.
pub fn random_kafka_uuid() -> Uuid {
    loop {
        let id = Uuid::new_v4();
        if id.as_u128() > 1 && !kafka_uuid(&id).starts_with('-') {
            return id;
        }
    }
}

/// The UUID `text` names, or None if it is not Kafka's text form of one.
pub fn parse_kafka_uuid(text: &str) -> Option<Uuid> {
    let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
    Uuid::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_and_parse_as_kafkas() {
        assert_eq!(kafka_uuid(&Uuid::nil()), "AAAAAAAAAAAAAAAAAAAAAA");
        // Kafka's Uuid(0x0102030405060708, 0x090a0b0c0d0e0f10).toString().
        let id = Uuid::from_bytes([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
        assert_eq!(kafka_uuid(&id), "AQIDBAUGBwgJCgsMDQ4PEA");
        assert_eq!(parse_kafka_uuid("AQIDBAUGBwgJCgsMDQ4PEA"), Some(id));
        // What `kafka-storage random-uuid` printed once.
        assert!(parse_kafka_uuid("MkU3OEVBNTcwNTJENDM2Qg").is_some());
        for bad in [
            "",
            "ringlog-local",
            "AQIDBAUGBwgJCgsMDQ4P",
            "AQIDBAUGBwgJCgsMDQ4PEA==",
        ] {
            assert_eq!(parse_kafka_uuid(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn minted_ids_never_read_as_options() {
        // One plain random id in 64 starts with '-': 10 000 draws would find many.
        for _ in 0..10_000 {
            let text = kafka_uuid(&random_kafka_uuid());
            assert!(!text.starts_with('-'), "{text}");
            assert_eq!(text.len(), 22);
        }
    }
}
