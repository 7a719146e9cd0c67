//! The node's listening socket and the acceptor that deals its connections to the shards.
//!
//! ```text
//!   one socket (SO_REUSEADDR, no SO_REUSEPORT) ─▶ shard 0 accepts ─▶ shard 0, 1, … in turn
//! ```
//!
//! Invariants:
//! - The node listens on exactly one socket, bound at start-up before any log is opened, so
//!   a taken address fails the start at once and the port cannot be taken while the logs
//!   recover; connections wait in the kernel's backlog until every shard is ready.
//! - No other process can share the port. SO_REUSEPORT is not used: Linux lets any process
//!   of the same user join a reuseport group, and two nodes would silently split the
//!   connections (and a producer's records) between two logs. SO_REUSEADDR only lets a
//!   restart bind over the TIME_WAIT connections of the last run, as Kafka's socket does.
//! - A connection is dealt to one shard and stays there; shards take turns, skipping none
//!   (Kafka's acceptor and processors).
//! - `max.connections` pauses accepting while the node holds that many connections (the
//!   kernel's backlog holds the rest, as Kafka's acceptor does); `max.connections.per.ip`
//!   closes a new connection from an address that holds that many already. Both counts are
//!   kept on shard 0 only; a connection that ends on another shard reports it there.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd};
use std::rc::Rc;

use anyhow::Context;
use glommio::net::{TcpListener, TcpStream};
use shard::Notify;
use socket2::{Domain, Socket, Type};

use crate::shard_state::Shard;

/// Connections the kernel queues for the acceptor (the backlog of `listen`).
const BACKLOG_MAX: i32 = 1024;

/// How long a start waits for a taken address to be freed before it gives up.
///
/// A node killed a moment ago still holds its sockets for a little while after its process
/// is gone: the kernel tears down its io_uring rings, which hold the listener and the
/// connections, in the background. A restart (by a supervisor, by a test) waits that out
/// instead of failing; another live process holding the address fails the start after it.
pub const BIND_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Binds the node's listening socket on `host:port` (port 0: a port the kernel picks),
/// waiting up to [`BIND_WAIT`] while the address is taken.
pub fn bind(host: &str, port: u16) -> anyhow::Result<std::net::TcpListener> {
    let deadline = std::time::Instant::now() + BIND_WAIT;
    loop {
        match bind_once(host, port) {
            Err(Bind::InUse(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(Bind::InUse(error) | Bind::Other(error)) => return Err(error),
            Ok(listener) => return Ok(listener),
        }
    }
}

enum Bind {
    InUse(anyhow::Error),
    Other(anyhow::Error),
}

/// One attempt; the error says whether the address was in use.
fn bind_once(host: &str, port: u16) -> Result<std::net::TcpListener, Bind> {
    let other = Bind::Other;
    let address = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .with_context(|| format!("resolving listener {host}:{port}"))
        .map_err(other)?
        .next()
        .with_context(|| format!("listener {host}:{port} resolves to no address"))
        .map_err(other)?;
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)
        .context("creating the listening socket")
        .map_err(other)?;
    socket
        .set_reuse_address(true)
        .context("setting SO_REUSEADDR")
        .map_err(other)?;
    let bound = socket
        .bind(&address.into())
        .and_then(|()| socket.listen(BACKLOG_MAX));
    match bound {
        Ok(()) => Ok(socket.into()),
        Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => {
            Err(Bind::InUse(anyhow::anyhow!(
                "listening on {address}: address already in use (another process listens there)"
            )))
        }
        Err(error) => Err(other(anyhow::anyhow!("listening on {address}: {error}"))),
    }
}

/// How many connections the node holds, in all and per client address; lives on shard 0.
pub struct ConnectionCounts {
    total: Cell<usize>,
    per_ip: RefCell<HashMap<IpAddr, usize>>,
    /// Fired when a connection ends, for an acceptor paused at `max.connections`.
    released: Notify,
}

impl ConnectionCounts {
    pub fn new() -> ConnectionCounts {
        ConnectionCounts {
            total: Cell::new(0),
            per_ip: RefCell::new(HashMap::new()),
            released: Notify::new(),
        }
    }

    pub fn total(&self) -> usize {
        self.total.get()
    }

    /// Counts a connection from `ip` unless the address holds `per_ip_max` already.
    fn admit(&self, ip: IpAddr, per_ip_max: usize) -> bool {
        let mut per_ip = self.per_ip.borrow_mut();
        let count = per_ip.entry(ip).or_default();
        if *count >= per_ip_max {
            return false;
        }
        *count += 1;
        self.total.set(self.total.get() + 1);
        true
    }

    fn release(&self, ip: IpAddr) {
        let mut per_ip = self.per_ip.borrow_mut();
        if let Some(count) = per_ip.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                per_ip.remove(&ip);
            }
            self.total.set(self.total.get() - 1);
        }
        drop(per_ip);
        self.released.notify_all();
    }
}

impl Default for ConnectionCounts {
    fn default() -> Self {
        ConnectionCounts::new()
    }
}

/// Runs on shard 0 until `stopped` resolves: accepts connections on `listener` and deals them
/// to the shards in turn, each served by `serve` on the shard it was dealt to.
pub async fn accept_until<S, F>(
    shard: Rc<Shard>,
    listener: std::net::TcpListener,
    stopped: impl std::future::Future<Output = ()>,
    serve: F,
) where
    F: Fn(Rc<Shard>, TcpStream) -> S + Copy + Send + 'static,
    S: std::future::Future<Output = ()> + 'static,
{
    // SAFETY: the descriptor is the listening TCP socket `bind` made, owned from here on by
    // the glommio listener of this shard.
    let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
    let counts = shard
        .connections
        .as_ref()
        .expect("the acceptor runs on the shard that counts connections")
        .clone();
    let (total_max, per_ip_max) = (
        shard.config.connections_max,
        shard.config.connections_per_ip_max,
    );
    let shard_count = shard.router.shard_count();
    let mut next_shard = 0;
    let accept = async {
        loop {
            while counts.total() >= total_max {
                let generation = counts.released.generation();
                if counts.total() >= total_max {
                    counts.released.changed_since(generation).await;
                }
            }
            let stream = match listener.accept().await {
                Ok(stream) => stream,
                Err(error) => {
                    // Out of descriptors, say: back off instead of spinning on the error.
                    tracing::warn!(%error, "accept failed");
                    glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let Ok(peer) = stream.peer_addr() else {
                continue; // gone already
            };
            if !counts.admit(peer.ip(), per_ip_max) {
                tracing::warn!(
                    %peer,
                    max = per_ip_max,
                    "closing a connection: its address holds max.connections.per.ip"
                );
                continue;
            }
            let target = next_shard;
            next_shard = (next_shard + 1) % shard_count;
            if let Err(error) = deal(&shard, target, stream, peer, serve).await {
                tracing::warn!(%error, %peer, "could not hand a connection to its shard");
                counts.release(peer.ip());
            }
        }
    };
    futures_lite::future::or(accept, stopped).await;
}

/// Serves `stream` on shard `target`, then reports its end to the counts on shard 0.
async fn deal<S, F>(
    shard: &Rc<Shard>,
    target: usize,
    stream: TcpStream,
    peer: SocketAddr,
    serve: F,
) -> anyhow::Result<()>
where
    F: Fn(Rc<Shard>, TcpStream) -> S + Copy + Send + 'static,
    S: std::future::Future<Output = ()> + 'static,
{
    let counting_shard = shard.id();
    if target == shard.id() {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            serve(shard.clone(), stream).await;
            released(&shard, counting_shard, peer).await;
        })
        .detach();
        return Ok(());
    }
    // A glommio stream belongs to the executor that made it: the target shard makes its
    // own from a duplicate of the descriptor, and this shard's stream closes the original.
    // SAFETY: the descriptor is open for as long as `stream` lives, which spans the call.
    let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) }
        .try_clone_to_owned()
        .context("duplicating an accepted socket")?;
    drop(stream);
    // SAFETY: `fd` is an owned, open TCP socket; the Socket takes it over.
    let socket = unsafe { Socket::from_raw_fd(fd.into_raw_fd()) };
    shard
        .router
        .spawn(shard, target, move |shard: Rc<Shard>| async move {
            if !shard.is_stopped() {
                serve(shard.clone(), TcpStream::from(socket)).await;
            }
            released(&shard, counting_shard, peer).await;
        })
        .await
        .context("the shard has stopped")
}

/// Tells the counting shard that a connection from `peer` ended.
async fn released(shard: &Rc<Shard>, counting_shard: usize, peer: SocketAddr) {
    let job = move |shard: Rc<Shard>| async move {
        if let Some(counts) = &shard.connections {
            counts.release(peer.ip());
        }
    };
    if shard
        .router
        .spawn(shard, counting_shard, job)
        .await
        .is_err()
    {
        tracing::debug!(%peer, "the counting shard has stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_bind_of_a_taken_address_says_so() {
        let first = bind("127.0.0.1", 0).expect("a free port");
        let port = first.local_addr().expect("address").port();
        let error = match bind_once("127.0.0.1", port) {
            Err(Bind::InUse(error)) => error,
            _ => panic!("the port is taken"),
        };
        let message = format!("{error:#}");
        assert!(
            message.contains(&format!("127.0.0.1:{port}"))
                && message.contains("address already in use"),
            "{message}"
        );
        // Nor can a socket with SO_REUSEPORT join it, as it could join a reuseport group.
        let joiner = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        joiner.set_reuse_port(true).expect("SO_REUSEPORT");
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
        assert!(joiner.bind(&address.into()).is_err());
    }

    #[test]
    fn counts_refuse_past_the_per_ip_limit_and_free_on_release() {
        let counts = ConnectionCounts::new();
        let ip: IpAddr = "127.0.0.1".parse().expect("address");
        assert!(counts.admit(ip, 2));
        assert!(counts.admit(ip, 2));
        assert!(!counts.admit(ip, 2));
        assert!(counts.admit("127.0.0.2".parse().expect("address"), 2));
        assert_eq!(counts.total(), 3);
        let generation = counts.released.generation();
        counts.release(ip);
        assert_ne!(counts.released.generation(), generation);
        assert!(counts.admit(ip, 2));
        assert_eq!(counts.total(), 3);
    }
}
