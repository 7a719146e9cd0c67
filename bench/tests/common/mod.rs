//! A real ringlog node for the bench's integration tests: found or built, started with one
//! core on a free 127.0.0.1 port and a temporary log dir, killed on drop.
//! A missing or broken broker fails the test with its log; it never passes silently.

#![allow(dead_code)]

#[path = "../../../broker/tests/common/launch.rs"]
mod launch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

pub struct Node {
    child: Child,
    pub log: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

fn ringlog_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("RINGLOG_BIN") {
        return PathBuf::from(bin);
    }
    let target = target_dir();
    for profile in ["debug", "release"] {
        let bin = target.join(profile).join("ringlog");
        if bin.is_file() {
            return bin;
        }
    }
    eprintln!("no ringlog binary under {}; building it", target.display());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "broker", "--bin", "ringlog"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .status()
        .expect("running cargo build -p broker --bin ringlog");
    assert!(
        status.success(),
        "cargo build -p broker --bin ringlog failed: the test needs the broker"
    );
    let bin = target.join("debug").join("ringlog");
    assert!(
        bin.is_file(),
        "built the broker but found no binary at {}",
        bin.display()
    );
    bin
}

pub fn start_node(dir: &Path) -> (Node, SocketAddr) {
    let bin = ringlog_binary();
    let launched = launch::launch(&dir.join("ringlog.log"), |port| {
        let listener = format!("PLAINTEXT://127.0.0.1:{port}");
        let mut command = Command::new(&bin);
        command
            .arg("serve")
            .args(["--cores", "1"])
            .args(["--set", &format!("log.dirs={}", dir.join("data").display())])
            .args(["--set", &format!("listeners={listener}")])
            .args(["--set", &format!("advertised.listeners={listener}")])
            .env("RUST_LOG", launch::log_filter("info"));
        command
    });
    let addr = SocketAddr::from(([127, 0, 0, 1], launched.port));
    let node = Node {
        child: launched.child,
        log: launched.log,
    };
    (node, addr)
}

impl Node {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Runs `ringlog-bench` with `args`; fails the test with both outputs and the node's log
/// unless it succeeds.
pub fn bench(node: &Node, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_ringlog-bench"))
        .args(args)
        .output()
        .expect("running ringlog-bench");
    assert!(
        output.status.success(),
        "ringlog-bench {args:?} failed ({}):\n{}\n{}\nbroker log:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        node.log_text()
    );
    output
}
