//! A short matrix against a real ringlog node: the report folder is complete, parses, and
//! accounts for every message.
//!
//! Method: find the `ringlog` binary (RINGLOG_BIN, else target/{debug,release}/ringlog next to
//! this crate, else build it with `cargo build -p broker --bin ringlog`), start one node with
//! one core on a free 127.0.0.1 port and a temporary log dir, run
//! `ringlog-bench matrix` (acks 0, 1, all × 100 B and 1 KiB, a fixed message count, no warm-up),
//! then read table.txt, results.json, every .hgrm and every plot. Each run produced to a fresh
//! topic, so its log end offsets must equal the messages sent; acks 1/all runs must have every
//! message acknowledged and one latency sample per message. The node is killed on drop.
//! A missing or broken broker fails the test with its log; it never passes silently.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MESSAGES: u64 = 5_000;

struct Node {
    child: Child,
    log: PathBuf,
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

fn start_node(dir: &Path) -> (Node, SocketAddr) {
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

#[test]
fn short_matrix_against_ringlog_counts_every_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, addr) = start_node(dir.path());
    let report = dir.path().join("report");
    let output = Command::new(env!("CARGO_BIN_EXE_ringlog-bench"))
        .arg("matrix")
        .args(["--bootstrap-server", &addr.to_string()])
        .args(["--output", report.to_str().expect("utf-8 temp path")])
        .args(["--messages", &MESSAGES.to_string()])
        .args([
            "--warmup",
            "0s",
            "--sizes",
            "100,1024",
            "--partitions",
            "2",
            "--producers",
            "2",
        ])
        .args(["--broker-label", "ringlog"])
        .output()
        .expect("running ringlog-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "ringlog-bench matrix failed ({}):\n{stdout}\n{stderr}\nbroker log:\n{}",
        output.status,
        std::fs::read_to_string(&node.log).unwrap_or_default()
    );
    assert!(stdout.contains("p99.9"), "the table is printed:\n{stdout}");

    let table = std::fs::read_to_string(report.join("table.txt")).expect("table.txt");
    for needle in [
        "# command: ",
        "matrix",
        "# broker: ringlog (127.0.0.1:",
        "# machine: ",
        "# date: ",
    ] {
        assert!(
            table.contains(needle),
            "table.txt lacks {needle:?}:\n{table}"
        );
    }

    let json = std::fs::read_to_string(report.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("results.json parses");
    let env = &v["environment"];
    assert!(env["command"]
        .as_str()
        .is_some_and(|c| c.contains("matrix")));
    assert!(env["cores"].as_u64().is_some_and(|c| c >= 1));
    assert!(env["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    assert!(env["date_utc"].as_str().is_some_and(|d| d.ends_with('Z')));
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 6, "acks 0, 1, all × 2 sizes");
    for r in runs {
        let acks = r["acks"].as_str().expect("acks");
        let size = r["message_bytes"].as_u64().expect("size");
        let what = format!("acks={acks} size={size}");
        assert_eq!(
            r["errors"].as_object().map(|e| e.len()),
            Some(0),
            "{what}: {r}"
        );
        assert_eq!(r["sent"].as_u64(), Some(MESSAGES), "{what}");
        assert_eq!(
            r["log_end_offset_total"].as_i64(),
            Some(MESSAGES as i64),
            "{what}: log end"
        );
        if acks != "0" {
            assert_eq!(
                r["acked"].as_u64(),
                Some(MESSAGES),
                "{what}: every message acked"
            );
            assert_eq!(
                r["latency"]["count"].as_u64(),
                Some(MESSAGES),
                "{what}: one sample each"
            );
            assert!(
                r["latency"]["p99_ms"].as_f64().is_some_and(|p| p > 0.0),
                "{what}"
            );
        }
        let name = format!("acks{acks}-{size}b.hgrm");
        let hgrm = std::fs::read_to_string(report.join(&name)).expect(&name);
        if acks != "0" {
            let total = hgrm
                .lines()
                .find(|l| l.starts_with("#[Max"))
                .and_then(|l| l.rsplit('=').next())
                .and_then(|n| n.trim().trim_end_matches(']').trim().parse::<u64>().ok());
            assert_eq!(total, Some(MESSAGES), "{name} total count");
        }
    }
    for acks in ["0", "1", "all"] {
        let name = format!("latency-acks{acks}.svg");
        let svg = std::fs::read_to_string(report.join(&name)).expect(&name);
        assert!(
            svg.starts_with("<svg") && svg.contains(&format!("acks={acks}")),
            "{name}"
        );
    }
}
