//! Formatted storage: `meta.properties` in the log directory names the cluster, the node
//! and the directory, as Kafka's `kafka-storage format` writes it (KRaft, version 1).
//!
//! Invariants: a directory is formatted once and never changes identity: a node refuses to
//! start on a directory of another node id, or of another cluster id than the one it is
//! configured with; the directory id is random per formatting, so a wiped directory is a
//! new one even under the same node id (KIP-853: a voter with a new directory must not vote
//! as its old self). The file is written aside, fsynced and renamed into place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::config::parse_properties;
use crate::durable::replace_file;

pub const FILE_NAME: &str = "meta.properties";
const VERSION: &str = "1";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: i32,
    /// Kafka's directory id (KIP-858), in Kafka's text form.
    pub directory_id: String,
}

/// A fresh id in Kafka's text form: a random UUID as 22 characters of URL-safe base64,
/// never starting with '-'.
pub fn random_id() -> String {
    client::kafka_uuid(&client::random_kafka_uuid())
}

/// Kafka's rule for a cluster id: the text form of a UUID.
pub fn check_cluster_id(id: &str) -> Result<()> {
    match client::parse_kafka_uuid(id) {
        Some(_) => Ok(()),
        None => bail!("cluster id {id:?} is not a UUID in base64 (22 characters, as `ringlog format` prints and `kafka-storage random-uuid` makes)"),
    }
}

impl MetaProperties {
    fn path(dir: &Path) -> PathBuf {
        dir.join(FILE_NAME)
    }

    /// The directory's identity, or None if it was never formatted.
    pub fn read(dir: &Path) -> Result<Option<MetaProperties>> {
        let path = Self::path(dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
        };
        Self::parse(&text)
            .map(Some)
            .with_context(|| format!("{} is damaged", path.display()))
    }

    fn parse(text: &str) -> Result<MetaProperties> {
        let mut fields = BTreeMap::new();
        parse_properties(text, FILE_NAME, &mut fields)?;
        let field = |key: &str| {
            fields
                .get(key)
                .cloned()
                .with_context(|| format!("no {key}"))
        };
        let version = field("version")?;
        if version != VERSION {
            bail!("version {version}, expected {VERSION}");
        }
        let node_id = field("node.id")?;
        Ok(MetaProperties {
            cluster_id: field("cluster.id")?,
            node_id: node_id
                .parse()
                .with_context(|| format!("node.id {node_id:?}"))?,
            directory_id: field("directory.id")?,
        })
    }

    fn write(&self, dir: &Path) -> Result<()> {
        let path = Self::path(dir);
        let text = format!(
            "#\n#Written by ringlog\ncluster.id={}\ndirectory.id={}\nnode.id={}\nversion={VERSION}\n",
            self.cluster_id, self.directory_id, self.node_id
        );
        replace_file(&path, text.as_bytes()).with_context(|| format!("writing {}", path.display()))
    }
}

/// Formats `dir` for node `node_id` of cluster `cluster_id` (`ringlog format`). A directory
/// already formatted is refused unless `ignore_formatted`, and then left as it is.
pub fn format(
    dir: &Path,
    cluster_id: &str,
    node_id: i32,
    ignore_formatted: bool,
) -> Result<MetaProperties> {
    check_cluster_id(cluster_id)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    if let Some(existing) = MetaProperties::read(dir)? {
        if ignore_formatted {
            return Ok(existing);
        }
        bail!(
            "{} is already formatted (cluster {}, node {}); use --ignore-formatted to leave it",
            dir.display(),
            existing.cluster_id,
            existing.node_id
        );
    }
    let properties = MetaProperties {
        cluster_id: cluster_id.to_string(),
        node_id,
        directory_id: random_id(),
    };
    properties.write(dir)?;
    Ok(properties)
}

/// The identity of the directory a node starts on, checked against its configuration. A
/// directory never formatted is formatted now when `auto_format` (a single node: its
/// configured `cluster.id`, else a fresh one); otherwise the node must be formatted first.
pub fn load_for_start(
    dir: &Path,
    node_id: i32,
    configured_cluster_id: Option<&str>,
    auto_format: bool,
) -> Result<MetaProperties> {
    let properties = match MetaProperties::read(dir)? {
        Some(properties) => properties,
        None if auto_format => {
            let cluster_id = configured_cluster_id.map_or_else(random_id, str::to_string);
            let properties = format(dir, &cluster_id, node_id, false)?;
            tracing::info!(cluster = %properties.cluster_id, dir = %dir.display(),
                "formatted the log directory");
            properties
        }
        None => bail!(
            "{} is not formatted: run `ringlog format --cluster-id ID` with this node's settings",
            dir.display()
        ),
    };
    if properties.node_id != node_id {
        bail!(
            "{} belongs to node {}, not to node.id={node_id}",
            dir.display(),
            properties.node_id
        );
    }
    if let Some(configured) = configured_cluster_id {
        if configured != properties.cluster_id {
            bail!(
                "{} belongs to cluster {}, not to cluster.id={configured}",
                dir.display(),
                properties.cluster_id
            );
        }
    }
    Ok(properties)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_kafkas_text_form() {
        let id = random_id();
        assert_eq!(id.len(), 22);
        check_cluster_id(&id).expect("a fresh id is valid");
        // What `kafka-storage random-uuid` printed once.
        check_cluster_id("MkU3OEVBNTcwNTJENDM2Qg").expect("Kafka's example id");
        assert!(check_cluster_id("ringlog-local").is_err());
        assert!(check_cluster_id("").is_err());
    }

    #[test]
    fn a_directory_is_formatted_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let id = random_id();
        let formatted = format(dir.path(), &id, 3, false).expect("format");
        assert_eq!(
            (formatted.cluster_id.as_str(), formatted.node_id),
            (id.as_str(), 3)
        );
        assert_eq!(
            MetaProperties::read(dir.path()).expect("read"),
            Some(formatted.clone())
        );
        assert!(format(dir.path(), &random_id(), 3, false).is_err());
        assert_eq!(
            format(dir.path(), &random_id(), 3, true).expect("left as it is"),
            formatted
        );
    }

    #[test]
    fn a_node_refuses_a_directory_of_another_node_or_cluster() {
        let dir = tempfile::tempdir().expect("tmp");
        let id = random_id();
        format(dir.path(), &id, 1, false).expect("format");
        load_for_start(dir.path(), 1, Some(&id), false).expect("its own");
        load_for_start(dir.path(), 1, None, false).expect("cluster id from storage");
        let other_node = load_for_start(dir.path(), 2, None, true).expect_err("node 2");
        assert!(
            other_node.to_string().contains("belongs to node 1"),
            "{other_node}"
        );
        let other = random_id();
        let other_cluster = load_for_start(dir.path(), 1, Some(&other), true).expect_err("cluster");
        assert!(
            other_cluster.to_string().contains("belongs to cluster"),
            "{other_cluster}"
        );
    }

    #[test]
    fn a_fresh_directory_is_formatted_on_first_start_only_when_asked() {
        let dir = tempfile::tempdir().expect("tmp");
        assert!(load_for_start(dir.path(), 1, None, false).is_err());
        let first = load_for_start(dir.path(), 1, None, true).expect("auto format");
        let again = load_for_start(dir.path(), 1, None, true).expect("restart");
        assert_eq!(first, again, "the identity stays");
        // A wiped directory is a new one, whatever node id it is formatted for.
        std::fs::remove_file(dir.path().join(FILE_NAME)).expect("wipe");
        let wiped = load_for_start(dir.path(), 1, Some(&first.cluster_id), true).expect("new");
        assert_eq!(wiped.cluster_id, first.cluster_id);
        assert_ne!(wiped.directory_id, first.directory_id);
    }

    #[test]
    fn damage_is_reported_not_ignored() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join(FILE_NAME), "version=1\nnode.id=x\n").expect("write");
        assert!(MetaProperties::read(dir.path()).is_err());
        std::fs::write(dir.path().join(FILE_NAME), "version=0\n").expect("write");
        assert!(MetaProperties::read(dir.path()).is_err());
    }
}
