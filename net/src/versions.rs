//! The API versions this node implements, as announced in ApiVersions.
//!
//! Invariant: every range here lies inside what the `kafka-protocol` codecs can decode,
//! and a request outside its key's range is never handed to a handler.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiKey;

#[derive(Clone, Debug)]
pub struct SupportedApis {
    /// Indexed by api key; `None` for keys this node does not implement.
    ranges: Vec<Option<(i16, i16)>>,
}

impl SupportedApis {
    /// `apis` lists (key, min version, max version). Panics (a programmer error) when a
    /// range is empty or outside what the codecs support.
    pub fn new(apis: &[(ApiKey, i16, i16)]) -> SupportedApis {
        let mut ranges = Vec::new();
        for &(key, min, max) in apis {
            let codec = key.valid_versions();
            assert!(min <= max, "{key:?}: empty version range");
            assert!(
                codec.min <= min && max <= codec.max,
                "{key:?}: {min}..={max} outside the codec's {}..={}",
                codec.min,
                codec.max
            );
            let index = key as i16 as usize;
            if ranges.len() <= index {
                ranges.resize(index + 1, None);
            }
            ranges[index] = Some((min, max));
        }
        SupportedApis { ranges }
    }

    /// The implemented range for `key`, if any.
    pub fn range(&self, key: i16) -> Option<(i16, i16)> {
        usize::try_from(key)
            .ok()
            .and_then(|index| self.ranges.get(index).copied().flatten())
    }

    pub fn supports(&self, key: i16, version: i16) -> bool {
        self.range(key)
            .is_some_and(|(min, max)| (min..=max).contains(&version))
    }

    /// The list announced in an ApiVersions response.
    pub fn announced(&self) -> Vec<ApiVersion> {
        self.ranges
            .iter()
            .enumerate()
            .filter_map(|(key, range)| {
                range.map(|(min, max)| {
                    ApiVersion::default()
                        .with_api_key(key as i16)
                        .with_min_version(min)
                        .with_max_version(max)
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announces_exactly_what_was_given() {
        let apis = SupportedApis::new(&[(ApiKey::Produce, 3, 9), (ApiKey::ApiVersions, 0, 3)]);
        assert!(apis.supports(0, 9));
        assert!(!apis.supports(0, 10));
        assert!(!apis.supports(1, 4));
        assert!(!apis.supports(-1, 0));
        let announced = apis.announced();
        assert_eq!(announced.len(), 2);
        assert_eq!((announced[0].api_key, announced[0].max_version), (0, 9));
        assert_eq!((announced[1].api_key, announced[1].max_version), (18, 3));
    }

    #[test]
    #[should_panic(expected = "outside the codec")]
    fn refuses_versions_the_codec_cannot_decode() {
        SupportedApis::new(&[(ApiKey::Produce, 0, 3)]);
    }
}
