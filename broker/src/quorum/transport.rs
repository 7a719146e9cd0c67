//! The controller plane's network: Raft messages between voters over TCP on each voter's
//! controller listener, in the frames of [`super::wire`]. Blocking sockets on threads of
//! their own (a handful of connections carrying kilobytes), never on a shard.
//!
//! Every voter dials every other voter and only sends on the connection it dialled; what it
//! receives arrives on connections it accepted. Both ends of a connection say hello: the
//! dialler first, the acceptor once it took the dialler's, and the dialler sends nothing
//! until the acceptor's hello names the voter it dialled, from its known directory. Raft
//! tolerates loss, duplication and reordering, so a failed write drops the frame and the
//! connection is dialled anew with a backoff; a peer's queue is bounded and sheds its
//! oldest frames when the peer is gone. Each accepted connection's hello and end are
//! reported too, the end saying whether the peer closed it, so that the controller learns
//! at once of a voter whose process died.
//!
//! A voter's connection opens with [`wire::PREAMBLE`]; any other accepted connection is a
//! Kafka client's (an admin tool with `--bootstrap-controller`): its requests are handed on
//! one at a time as [`Inbound::Request`] and each answer is written back length-prefixed,
//! as Kafka frames them; an empty answer closes the connection. At most [`CLIENTS_MAX`]
//! such connections are open at once, a request over [`CLIENT_REQUEST_BYTES_MAX`] closes
//! its connection before it is read, and a client silent for [`READ_IDLE_MAX`] is dropped.
//!
//! Invariants: a voter's connection's first frame after the preamble is a [`Hello`] that
//! passes [`Hello::check`] (same cluster, another voter) from the directory that voter
//! first spoke from ([`VoterDirectories`]), else it is closed before anything else is
//! read; every Raft message on it must come `from` the voter it said hello as, else the
//! connection is closed (a peer cannot speak for another); a frame over the limit or with a
//! bad checksum closes the connection before its body is allocated; no Kafka client's
//! request reaches the quorum's frames, nor a voter's frame a client's handler; every
//! thread stops within a poll interval of [`Transport::stop`].

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use raft::eraftpb::Message;

use super::directories::VoterDirectories;
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
/// How long either end of a new connection has to say hello.
const HELLO_WAIT: Duration = Duration::from_secs(2);
/// Kafka client connections open at once on the controller listener.
pub const CLIENTS_MAX: usize = 16;
/// The largest request a Kafka client may send the controller listener (its requests name
/// a few brokers or topics).
pub const CLIENT_REQUEST_BYTES_MAX: usize = 1 << 20;
/// How long a client's request may wait for its answer before the connection is closed.
const CLIENT_ANSWER_WAIT: Duration = Duration::from_secs(60);

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
    /// A Kafka client's request (header and body, without the length prefix), answered
    /// on `reply`.
    Request {
        body: Vec<u8>,
        reply: flume::Sender<Vec<u8>>,
    },
    /// A connection from voter `from` passed the hellos.
    Connected {
        from: u64,
    },
    /// A connection from voter `from` that had passed the hellos ended: `by_peer` if the
    /// peer's end closed it (as the kernel does for a process that dies), not if it was
    /// silent too long or broke the protocol.
    Closed {
        from: u64,
        by_peer: bool,
    },
}

/// Who this voter is and who the others are.
#[derive(Clone, Debug)]
pub struct Membership {
    pub local: Hello,
    /// Every voter's controller listener, this one's included.
    pub voters: BTreeMap<u64, SocketAddr>,
}

/// What the connection threads share: who is who, and the directory each voter speaks from.
#[derive(Clone)]
struct Peers {
    membership: Membership,
    directories: Arc<VoterDirectories>,
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
    /// checked message to `inbound`, and one dialling thread per other voter. Each voter
    /// must speak from the directory `directories` knows it by.
    pub fn start<T: From<Inbound> + Send + 'static>(
        membership: Membership,
        directories: Arc<VoterDirectories>,
        listener: TcpListener,
        inbound: flume::Sender<T>,
    ) -> std::io::Result<Transport> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        listener.set_nonblocking(true)?;
        let shared = Peers {
            membership: membership.clone(),
            directories,
        };
        threads.push(spawn("quorum-accept", {
            let (peers, stop) = (shared.clone(), stop.clone());
            move || accept_loop(listener, peers, inbound, stop)
        })?);
        let mut peers = BTreeMap::new();
        for (&id, &address) in &membership.voters {
            if id == membership.local.node_id {
                continue;
            }
            let (sender, receiver) = flume::bounded(PEER_QUEUE_FRAMES);
            peers.insert(id, (sender, receiver.clone()));
            let dialler = Dialler {
                id,
                address,
                peers: shared.clone(),
                stop: stop.clone(),
            };
            let name = format!("quorum-peer-{id}");
            threads.push(spawn(&name, move || dialler.run(receiver))?);
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

/// The sending side of the connection to one other voter.
struct Dialler {
    id: u64,
    address: SocketAddr,
    peers: Peers,
    stop: Arc<AtomicBool>,
}

impl Dialler {
    /// Dials the voter and writes queued frames to it, after the hellos, until stopped.
    fn run(self, queue: flume::Receiver<Arc<Vec<u8>>>) {
        let mut backoff = BACKOFF_MIN;
        let mut connection: Option<TcpStream> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let frame = match queue.recv_timeout(POLL) {
                Ok(frame) => frame,
                Err(flume::RecvTimeoutError::Timeout) => continue,
                Err(flume::RecvTimeoutError::Disconnected) => return,
            };
            if connection.is_none() {
                match self.dial() {
                    Ok(stream) => {
                        connection = Some(stream);
                        backoff = BACKOFF_MIN;
                    }
                    Err(error) => {
                        let address = self.address;
                        if let ReadError::Wire(WireError::Refused(_)) = error {
                            tracing::warn!(%address, %error, "quorum peer refused");
                        } else {
                            tracing::debug!(%address, %error, "quorum peer unreachable");
                        }
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        continue;
                    }
                }
            }
            let stream = connection.as_mut().expect("connected above");
            if let Err(error) = stream.write_all(&frame) {
                tracing::debug!(address = %self.address, %error, "quorum peer connection lost");
                connection = None;
            }
        }
    }

    /// A connection on which both ends said hello, and the voter answering is the one
    /// dialled, from the directory it is known by.
    fn dial(&self) -> Result<TcpStream, ReadError> {
        let mut stream = TcpStream::connect_timeout(&self.address, CONNECT_TIMEOUT)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        stream.set_read_timeout(Some(POLL))?;
        let membership = &self.peers.membership;
        let mut opening = wire::PREAMBLE.to_vec();
        opening.extend(wire::encode(&Frame::Hello(membership.local.clone())));
        stream.write_all(&opening)?;
        let Frame::Hello(answer) = read_frame(&mut stream, &self.stop, HELLO_WAIT)? else {
            return Err(ReadError::NoHello);
        };
        answer.check(
            &membership.local.cluster_id,
            membership.local.node_id,
            &[self.id],
        )?;
        self.peers
            .directories
            .admit(self.id, &answer.directory_id)?;
        Ok(stream)
    }
}

fn accept_loop<T: From<Inbound> + Send + 'static>(
    listener: TcpListener,
    peers: Peers,
    inbound: flume::Sender<T>,
    stop: Arc<AtomicBool>,
) {
    let mut readers: Vec<JoinHandle<()>> = Vec::new();
    let clients = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let (peers, inbound, stop) = (peers.clone(), inbound.clone(), stop.clone());
                let clients = clients.clone();
                match spawn("quorum-read", move || {
                    match read_connection(stream, &peers, &inbound, &stop, &clients) {
                        Err(error @ ReadError::Wire(WireError::Refused(_))) => {
                            tracing::warn!(%peer, %error, "quorum connection refused");
                        }
                        Err(error) => tracing::info!(%peer, %error, "quorum connection closed"),
                        Ok(()) => {}
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
    #[error("a client's request of {0} bytes")]
    ClientFrame(i32),
    #[error("too many clients on the controller listener")]
    TooManyClients,
    #[error("a client's request was not answered")]
    Unanswered,
}

/// Reads one accepted connection: a voter's, or a Kafka client's.
fn read_connection<T: From<Inbound>>(
    mut stream: TcpStream,
    peers: &Peers,
    inbound: &flume::Sender<T>,
    stop: &AtomicBool,
    clients: &AtomicUsize,
) -> Result<(), ReadError> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(POLL))?;
    let mut opening = [0u8; 4];
    read_exact(&mut stream, &mut opening, stop, HELLO_WAIT)?;
    if opening == wire::PREAMBLE {
        return read_peer(stream, peers, inbound, stop);
    }
    if clients.fetch_add(1, Ordering::Relaxed) >= CLIENTS_MAX {
        clients.fetch_sub(1, Ordering::Relaxed);
        return Err(ReadError::TooManyClients);
    }
    let served = serve_client(stream, opening, inbound, stop);
    clients.fetch_sub(1, Ordering::Relaxed);
    served
}

/// Serves a Kafka client whose first request's length is `length`: one request at a time,
/// each answered before the next is read.
fn serve_client<T: From<Inbound>>(
    mut stream: TcpStream,
    mut length: [u8; 4],
    inbound: &flume::Sender<T>,
    stop: &AtomicBool,
) -> Result<(), ReadError> {
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    loop {
        let bytes = i32::from_be_bytes(length);
        let Some(bytes) = usize::try_from(bytes)
            .ok()
            .filter(|&b| (8..=CLIENT_REQUEST_BYTES_MAX).contains(&b))
        else {
            return Err(ReadError::ClientFrame(bytes));
        };
        let mut body = vec![0u8; bytes];
        read_exact(&mut stream, &mut body, stop, READ_IDLE_MAX)?;
        let (reply, answer) = flume::bounded(1);
        if inbound
            .send(T::from(Inbound::Request { body, reply }))
            .is_err()
        {
            return Err(ReadError::Stopped);
        }
        let answer = match answer.recv_timeout(CLIENT_ANSWER_WAIT) {
            Ok(answer) if !answer.is_empty() => answer,
            _ => return Err(ReadError::Unanswered),
        };
        let mut framed = Vec::with_capacity(4 + answer.len());
        framed.extend_from_slice(&(answer.len() as u32).to_be_bytes());
        framed.extend_from_slice(&answer);
        stream.write_all(&framed)?;
        read_exact(&mut stream, &mut length, stop, READ_IDLE_MAX)?;
    }
}

/// Reads a voter's connection after its preamble: the hello, then Raft messages for
/// `inbound`.
fn read_peer<T: From<Inbound>>(
    mut stream: TcpStream,
    peers: &Peers,
    inbound: &flume::Sender<T>,
    stop: &AtomicBool,
) -> Result<(), ReadError> {
    // A hello is a few dozen bytes: one that has not come whole by then never will.
    let Frame::Hello(hello) = read_frame(&mut stream, stop, HELLO_WAIT)? else {
        return Err(ReadError::NoHello);
    };
    let membership = &peers.membership;
    hello.check(
        &membership.local.cluster_id,
        membership.local.node_id,
        &membership.voter_ids(),
    )?;
    peers
        .directories
        .admit(hello.node_id, &hello.directory_id)?;
    // The dialler checks who answers, and from which directory, before it sends anything.
    stream.set_write_timeout(Some(HELLO_WAIT))?;
    stream.write_all(&wire::encode(&Frame::Hello(membership.local.clone())))?;
    let from = hello.node_id;
    if inbound.send(T::from(Inbound::Connected { from })).is_err() {
        return Err(ReadError::Stopped);
    }
    let ended = read_messages(&mut stream, from, inbound, stop);
    let by_peer = matches!(&ended, Err(ReadError::Io(error)) if matches!(
        error.kind(),
        std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
    ));
    let _ = inbound.send(T::from(Inbound::Closed { from, by_peer }));
    ended
}

/// Reads the frames after the hellos of a connection from voter `from` into `inbound`.
fn read_messages<T: From<Inbound>>(
    stream: &mut TcpStream,
    from: u64,
    inbound: &flume::Sender<T>,
    stop: &AtomicBool,
) -> Result<(), ReadError> {
    loop {
        let received = match read_frame(stream, stop, READ_IDLE_MAX)? {
            Frame::Hello(_) => return Err(ReadError::SecondHello),
            Frame::Raft(message) => {
                let message = Message::try_from(*message)?;
                if message.from != from {
                    return Err(ReadError::Impersonation {
                        hello: from,
                        from: message.from,
                    });
                }
                Inbound::Raft(message)
            }
            Frame::Forward { id, body } => Inbound::Forward { from, id, body },
            Frame::Forwarded { id, result } => Inbound::Forwarded { id, result },
        };
        if inbound.send(T::from(received)).is_err() {
            return Err(ReadError::Stopped);
        }
    }
}

/// The next frame; gives up when stopped or after `idle_max` without a byte.
fn read_frame(
    stream: &mut TcpStream,
    stop: &AtomicBool,
    idle_max: Duration,
) -> Result<Frame, ReadError> {
    let mut header = [0u8; HEADER_BYTES];
    read_exact(stream, &mut header, stop, idle_max)?;
    let mut body = vec![0u8; wire::body_len(header)?];
    read_exact(stream, &mut body, stop, idle_max)?;
    Ok(wire::decode_body(header, &body)?)
}

/// `read_exact` that gives up when stopped or after `idle_max` without a byte.
fn read_exact(
    stream: &mut TcpStream,
    mut out: &mut [u8],
    stop: &AtomicBool,
    idle_max: Duration,
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
                if idle >= idle_max {
                    return Err(error.into());
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}
