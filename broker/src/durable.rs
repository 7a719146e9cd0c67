//! Small files replaced whole and durably, outside the shards' I/O: written aside as
//! `<name>.tmp`, fsynced, renamed over the old one, and the directory fsynced, so that after
//! a crash the file holds either its old bytes or its new ones, never a mix.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Replaces the file at `path` (in an existing directory) by `bytes`.
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "a file needs a directory")
    })?;
    let mut aside = path.as_os_str().to_owned();
    aside.push(".tmp");
    let mut file = File::create(&aside)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&aside, path)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_nothing_is_left_aside() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("state");
        replace_file(&path, b"old").expect("write");
        replace_file(&path, b"new").expect("replace");
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state")]);
    }
}
