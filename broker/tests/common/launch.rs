//! Starting a test node so that nothing else on the machine can race it for its port.
//!
//! - The port comes from below the kernel's ephemeral range
//!   (`/proc/sys/net/ipv4/ip_local_port_range`), where client sockets take their source
//!   ports from, so no connection of a parallel test can hold it; the choice is random, a
//!   port something already listens on is skipped, and no port is handed out twice in one
//!   test process (its parallel tests would otherwise race each other for one port between
//!   drawing it and binding it: a cluster draws its controller ports before it starts).
//! - A node whose port another process took in between exits at once saying "address
//!   already in use" (a node never shares its port); the launcher then tries another port.
//! - Ready means the node logged "ready": every shard has opened its partitions and the
//!   acceptor runs. A TCP connect proves less: the socket is bound before the logs recover.
//! - A node on an address of its own (in a network namespace) takes the port it is given
//!   ([`launch_at`]): nothing else listens there.
//!
//! Shared by the broker's and the bench's integration tests (the bench includes this file).

#![allow(dead_code)]

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Ports tried before the launcher gives up.
const ATTEMPTS_MAX: usize = 20;
/// How long a node may take to recover its logs and log "ready".
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Width of the range below the ephemeral ports that test nodes pick from.
const RANGE_BYTES: u16 = 12_000;

/// A node process that logged "ready", with its port and the file its output goes to.
pub struct Launched {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

/// Starts `command(port)` with its output appended to `log` and waits until it is ready,
/// trying other ports while the chosen one turns out to be taken. Panics with the node's
/// log if it exits for another reason or is not ready in time.
pub fn launch(log: &Path, mut command: impl FnMut(u16) -> Command) -> Launched {
    for _ in 0..ATTEMPTS_MAX {
        let port = candidate_port();
        if let Some(launched) = start(log, port, command(port)) {
            return launched;
        }
        // Taken since we looked: try another port.
    }
    panic!("no free port found below the ephemeral range in {ATTEMPTS_MAX} attempts");
}

/// Starts `command`, a node listening on `port` that nothing else can take (an address of
/// its own, as in a network namespace), and waits until it is ready. Panics with the node's
/// log if it exits or is not ready in time.
pub fn launch_at(log: &Path, port: u16, command: Command) -> Launched {
    start(log, port, command).unwrap_or_else(|| {
        panic!(
            "the node's port {port} is taken; its log:\n{}",
            new_text(log, 0)
        )
    })
}

/// Starts `command` with its output appended to `log` and waits until it logs "ready":
/// `None` if it exits because its port is in use, a panic with its log if it exits for
/// another reason or is not ready within [`READY_TIMEOUT`].
fn start(log: &Path, port: u16, mut command: Command) -> Option<Launched> {
    let start_bytes = std::fs::metadata(log).map_or(0, |m| m.len() as usize);
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("node log file");
    let err = out.try_clone().expect("node log handle");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("the node starts");
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let new_text = new_text(log, start_bytes);
        if new_text.lines().any(is_ready_line) {
            return Some(Launched {
                child,
                port,
                log: log.to_path_buf(),
            });
        }
        if let Ok(Some(status)) = child.try_wait() {
            if new_text.contains("address already in use") {
                return None;
            }
            panic!("the node exited ({status}) before it was ready; its log:\n{new_text}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node was not ready within {READY_TIMEOUT:?}; its log:\n{new_text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What `log` holds past its first `start_bytes` bytes.
fn new_text(log: &Path, start_bytes: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.get(start_bytes..).unwrap_or_default().to_string()
}

/// The node's start-up line once every shard serves: `… INFO broker::server: ready …`.
fn is_ready_line(line: &str) -> bool {
    line.contains("broker::server") && line.contains(" ready ")
}

/// The log filter for a test node: `base` (RUST_LOG or `default`) plus the ready line.
pub fn log_filter(default: &str) -> String {
    let base = std::env::var("RUST_LOG").unwrap_or_else(|_| default.to_string());
    format!("{base},broker::server=info")
}

/// Ports this process handed out already.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A random port below the ephemeral range that nothing listens on right now and that this
/// process never handed out before.
pub fn candidate_port() -> u16 {
    let low = ephemeral_low();
    let floor = low.saturating_sub(RANGE_BYTES).max(1024);
    loop {
        // Each RandomState has fresh random keys: a random number without a crate for it.
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let port = floor + (hasher.finish() % u64::from(low - floor)) as u16;
        let mut handed_out = HANDED_OUT
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let handed_out = handed_out.get_or_insert_with(HashSet::new);
        if handed_out.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .filter(|&low: &u16| low > 2048)
        .unwrap_or(32768)
}
