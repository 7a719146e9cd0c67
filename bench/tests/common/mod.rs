//! A real ringlog node for the bench's integration tests: found or built, started with one
//! core on a free 127.0.0.1 port and a temporary log dir, killed on drop.
//! A missing or broken broker fails the test with its log; it never passes silently.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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

fn free_port() -> u16 {
    // Port 0 asks the kernel for a free port; there is always one on loopback.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    l.local_addr().expect("local addr").port()
}

pub fn start_node(dir: &Path) -> (Node, SocketAddr) {
    let bin = ringlog_binary();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("valid address");
    let log = dir.join("ringlog.log");
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file handle");
    let listener = format!("PLAINTEXT://127.0.0.1:{port}");
    let child = Command::new(&bin)
        .arg("serve")
        .args(["--cores", "1"])
        .args(["--set", &format!("log.dirs={}", dir.join("data").display())])
        .args(["--set", &format!("listeners={listener}")])
        .args(["--set", &format!("advertised.listeners={listener}")])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let mut node = Node { child, log };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return (node, addr);
        }
        if let Ok(Some(status)) = node.child.try_wait() {
            panic!(
                "{} exited ({status}) before listening on {addr}; its log:\n{}",
                bin.display(),
                std::fs::read_to_string(&node.log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{} never listened on {addr}",
            bin.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Node {
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
