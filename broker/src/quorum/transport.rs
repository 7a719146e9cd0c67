//! The controller plane's network: Raft messages between voters over TCP on each voter's
//! controller listener, in the frames of [`super::wire`]. Blocking sockets on threads of
//! their own (a handful of connections carrying kilobytes), never on a shard.
//!
//! Every voter dials every other voter and only sends on the connection it dialled; what it
//! receives arrives on connections it accepted. Raft tolerates loss, duplication and
//! reordering, so a failed write drops the frame and the connection is dialled anew with a
//! backoff; a peer's queue is bounded and sheds its oldest frames when the peer is gone.
//!
//! Invariants: an accepted connection's first frame is a [`Hello`] that passes
//! [`Hello::check`] (same cluster, another voter), else it is closed before anything else is
//! read; every Raft message on it must come `from` the voter it said hello as, else the
//! connection is closed (a peer cannot speak for another); a frame over the limit or with a
//! bad checksum closes the connection before its body is allocated; every thread stops
//! within a poll interval of [`Transport::stop`].

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use raft::eraftpb::Message;

use super::wire::{self, Frame, Hello, WireError, WireMessage, HEADER_BYTES};

/// Frames queued for one peer before the oldest are shed.
const PEER_QUEUE_FRAMES: usize = 4096;
/// How often blocked threads look at the stop flag.
const POLL: Duration = Duration::from_millis(50);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A peer that sends nothing for this long (not even heartbeats) is dropped.
const READ_IDLE_MAX: Duration = Duration::from_secs(30);

/// What arrives from another voter.
#[derive(Debug)]
pub enum Inbound {
    Raft(Message),
    Forward {
        from: u64,
        id: u64,
        body: Vec<u8>,
    },
    Forwarded {
        id: u64,
        result: Result<Vec<u8>, String>,
    },
}

/// Who this voter is and who the others are.
#[derive(Clone, Debug)]
pub struct Membership {
    pub local: Hello,
    /// Every voter's controller listener, this one's included.
    pub voters: BTreeMap<u64, SocketAddr>,
}

impl Membership {
    fn voter_ids(&self) -> Vec<u64> {
        self.voters.keys().copied().collect()
    }
}

/// A peer's queue: the sender, and a receiver to shed the oldest frame with.
type PeerQueue = (flume::Sender<Arc<Vec<u8>>>, flume::Receiver<Arc<Vec<u8>>>);

pub struct Transport {
    peers: BTreeMap<u64, PeerQueue>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Transport {
    /// Starts accepting on `listener` (this voter's controller listener), handing every
    /// checked message to `inbound`, and one dialling thread per other voter.
    pub fn start<T: From<Inbound> + Send + 'static>(
        membership: Membership,
        listener: TcpListener,
        inbound: flume::Sender<T>,
    ) -> std::io::Result<Transport> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        listener.set_nonblocking(true)?;
        threads.push(spawn("quorum-accept", {
            let (membership, stop) = (membership.clone(), stop.clone());
            move || accept_loop(listener, membership, inbound, stop)
        })?);
        let mut peers = BTreeMap::new();
        for (&id, &address) in &membership.voters {
            if id == membership.local.node_id {
                continue;
            }
            let (sender, receiver) = flume::bounded(PEER_QUEUE_FRAMES);
            peers.insert(id, (sender, receiver.clone()));
            let hello = wire::encode(&Frame::Hello(membership.local.clone()));
            let stop = stop.clone();
            let name = format!("quorum-peer-{id}");
            threads.push(spawn(&name, move || {
                dial_loop(address, hello, receiver, stop)
            })?);
        }
        Ok(Transport {
            peers,
            stop,
            threads,
        })
    }

    /// Queues `message` for its `to`; drops it (Raft resends) if the peer's queue is full
    /// of frames it could not deliver, shedding the oldest.
    pub fn send(&self, message: &Message) {
        let frame = Frame::Raft(Box::new(WireMessage::from(message)));
        self.send_frame(message.to, &frame);
    }

    /// Queues any frame for voter `to`, on the same terms as `send`.
    pub fn send_frame(&self, to: u64, frame: &Frame) {
        let Some((queue, oldest)) = self.peers.get(&to) else {
            return;
        };
        let frame = Arc::new(wire::encode(frame));
        if let Err(flume::TrySendError::Full(frame)) = queue.try_send(frame) {
            // The peer is unreachable: the oldest frames are the most stale.
            let _ = oldest.try_recv();
            let _ = queue.try_send(frame);
        }
    }

    /// Stops every thread and waits for them.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.peers);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).spawn(body)
}

/// Dials `address` and writes queued frames to it, after the hello, until stopped.
fn dial_loop(
    address: SocketAddr,
    hello: Vec<u8>,
    queue: flume::Receiver<Arc<Vec<u8>>>,
    stop: Arc<AtomicBool>,
) {
    let mut backoff = BACKOFF_MIN;
    let mut connection: Option<TcpStream> = None;
    while !stop.load(Ordering::Relaxed) {
        let frame = match queue.recv_timeout(POLL) {
            Ok(frame) => frame,
            Err(flume::RecvTimeoutError::Timeout) => continue,
            Err(flume::RecvTimeoutError::Disconnected) => return,
        };
        if connection.is_none() {
            match dial(address, &hello) {
                Ok(stream) => {
                    connection = Some(stream);
                    backoff = BACKOFF_MIN;
                }
                Err(error) => {
                    tracing::debug!(%address, %error, "quorum peer unreachable");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            }
        }
        let stream = connection.as_mut().expect("connected above");
        if let Err(error) = stream.write_all(&frame) {
            tracing::debug!(%address, %error, "quorum peer connection lost");
            connection = None;
        }
    }
}

fn dial(address: SocketAddr, hello: &[u8]) -> std::io::Result<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&address, CONNECT_TIMEOUT)?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(hello)?;
    Ok(stream)
}

fn accept_loop<T: From<Inbound> + Send + 'static>(
    listener: TcpListener,
    membership: Membership,
    inbound: flume::Sender<T>,
    stop: Arc<AtomicBool>,
) {
    let mut readers: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let (membership, inbound, stop) =
                    (membership.clone(), inbound.clone(), stop.clone());
                match spawn("quorum-read", move || {
                    if let Err(error) = read_peer(stream, &membership, &inbound, &stop) {
                        tracing::info!(%peer, %error, "quorum connection closed");
                    }
                }) {
                    Ok(reader) => readers.push(reader),
                    Err(error) => tracing::warn!(%error, "no thread for a quorum connection"),
                }
                readers.retain(|reader| !reader.is_finished());
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(POLL)
            }
            Err(error) => {
                tracing::warn!(%error, "accepting on the controller listener");
                std::thread::sleep(POLL);
            }
        }
    }
    for reader in readers {
        let _ = reader.join();
    }
}

#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("the first frame is not a hello")]
    NoHello,
    #[error("a second hello")]
    SecondHello,
    #[error("voter {hello} sent a message from {from}")]
    Impersonation { hello: u64, from: u64 },
    #[error("stopped")]
    Stopped,
}

/// Reads one accepted connection: the hello, then Raft messages for `inbound`.
fn read_peer<T: From<Inbound>>(
    mut stream: TcpStream,
    membership: &Membership,
    inbound: &flume::Sender<T>,
    stop: &AtomicBool,
) -> Result<(), ReadError> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(POLL))?;
    let Frame::Hello(hello) = read_frame(&mut stream, stop)? else {
        return Err(ReadError::NoHello);
    };
    hello.check(
        &membership.local.cluster_id,
        membership.local.node_id,
        &membership.voter_ids(),
    )?;
    loop {
        let received = match read_frame(&mut stream, stop)? {
            Frame::Hello(_) => return Err(ReadError::SecondHello),
            Frame::Raft(message) => {
                let message = Message::try_from(*message)?;
                if message.from != hello.node_id {
                    return Err(ReadError::Impersonation {
                        hello: hello.node_id,
                        from: message.from,
                    });
                }
                Inbound::Raft(message)
            }
            Frame::Forward { id, body } => Inbound::Forward {
                from: hello.node_id,
                id,
                body,
            },
            Frame::Forwarded { id, result } => Inbound::Forwarded { id, result },
        };
        if inbound.send(T::from(received)).is_err() {
            return Err(ReadError::Stopped);
        }
    }
}

fn read_frame(stream: &mut TcpStream, stop: &AtomicBool) -> Result<Frame, ReadError> {
    let mut header = [0u8; HEADER_BYTES];
    read_exact(stream, &mut header, stop)?;
    let mut body = vec![0u8; wire::body_len(header)?];
    read_exact(stream, &mut body, stop)?;
    Ok(wire::decode_body(header, &body)?)
}

/// `read_exact` that gives up when stopped or after `READ_IDLE_MAX` without a byte.
fn read_exact(
    stream: &mut TcpStream,
    mut out: &mut [u8],
    stop: &AtomicBool,
) -> Result<(), ReadError> {
    let mut idle = Duration::ZERO;
    while !out.is_empty() {
        if stop.load(Ordering::Relaxed) {
            return Err(ReadError::Stopped);
        }
        match stream.read(out) {
            Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => {
                out = &mut out[n..];
                idle = Duration::ZERO;
            }
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                idle += POLL;
                if idle >= READ_IDLE_MAX {
                    return Err(error.into());
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}
