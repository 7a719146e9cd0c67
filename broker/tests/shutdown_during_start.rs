//! A shutdown signal that arrives while the node is still starting stops it.
//!
//! Method: start the binary, wait for its "starting" log line (metadata loaded, shards not
//! yet listening), send SIGINT at once, and require a clean exit within a deadline. The
//! signal then reaches the shards before their accept loops run; a stop request read too
//! late would leave the node running forever.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigint_while_starting_stops_the_node() {
    for attempt in 0..5 {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_ringlog"))
            .args(["serve", "--cores", "2"])
            .args(["--set", &format!("log.dirs={}", dir.path().display())])
            // Port 0: the node binds a port the kernel picks, so nothing can race it for one.
            .args(["--set", "listeners=PLAINTEXT://127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .expect("ringlog starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut lines = BufReader::new(stderr).lines();
        for line in lines.by_ref() {
            if line.expect("log line").contains("starting") {
                break;
            }
        }
        let signalled = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(signalled.success());
        // Keep draining the log so the node never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("attempt {attempt}: the node ignored SIGINT sent while starting");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "attempt {attempt}: exit {status}");
    }
}
