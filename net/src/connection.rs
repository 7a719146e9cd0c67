//! One client connection: read frames, hand each request to the broker, write the
//! answers back in request order.
//!
//! ```text
//!   socket ─▶ reader ──(slot per request, in arrival order)──▶ writer ─▶ socket
//!               │  spawn handler task ─────────────────────────────▲ await in order
//! ```
//!
//! Invariants:
//! - Order: requests are admitted one at a time, in arrival order ([`Handler::admit`]), so
//!   what they change is changed in that order; then up to `in_flight_max` of them are
//!   answered at once, and the writer awaits the slots strictly in arrival order, so
//!   answers leave in order.
//! - Request memory: every byte the read buffer touches is reserved from the shard's request
//!   budget (`queued.max.request.bytes`, shared by every connection of the shard) before it
//!   is touched, and a frame keeps its share until its answer is written. The buffer grows
//!   only as bytes arrive (sized by what the socket holds), so a frame whose length prefix
//!   promises a megabyte and sends ten bytes costs a few kilobytes; once
//!   `FRAME_COMMIT_BYTES` of a frame have arrived the rest is reserved in one step, so
//!   connections sending large frames at once never deadlock on each other's halves. An
//!   idle connection holds no buffer at all.
//! - Answer memory: handlers may make an answer hold a [`Reservation`] (a fetch holds its
//!   records' share of the answer budgets), kept until the frame is written; the connection
//!   reports its unsent bytes through its [`Outbox`], and bounds them with the outbox's own
//!   budget.
//! - A client that stops reading: a write that makes no progress for `write_timeout` closes
//!   the connection, and with it every answer it held.
//! - A connection that breaks the protocol (oversized, truncated or unparsable frames,
//!   unknown keys or versions) is closed after the answers already owed are written; the
//!   problem is logged once, and nothing else on the shard is affected.
//! - The socket is shared by the two halves through `Rc<RefCell<_>>`; a borrow lasts one
//!   `poll_*` call and never spans an `.await`.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::TcpStream;
use glommio::task::JoinHandle;
use glommio::{GlommioError, ResourceType};
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tracing::{debug, info, warn};

use crate::budget::{Budget, Reservation};
use crate::frame::{self, Check, LENGTH_PREFIX_BYTES};
use crate::out_frame::OutFrame;
use crate::read_buffer::ReadBuffer;
use crate::request::{decode_request, DecodeError, Request};
use crate::response::{encode_response, encode_unsupported_api_versions};
use crate::SupportedApis;

/// Most bytes asked of the socket per read: what it holds, up to this.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Fewest bytes asked of the socket per read.
const READ_MIN_BYTES: usize = 4 * 1024;
/// Once this much of a frame has arrived, the rest of it is reserved at once.
const FRAME_COMMIT_BYTES: usize = 64 * 1024;
/// Bytes a client may leave unacknowledged in its socket and still count as keeping up.
const UNACKNOWLEDGED_KEEPS_UP_BYTES: usize = 256 * 1024;
/// A writer's encode buffer above this is let go after its frame is written.
const OUT_KEEP_BYTES: usize = 16 * 1024;

/// What the broker does with a request.
pub enum Reply {
    /// Send this response (boxed: responses are large and move between tasks).
    Respond(Box<ResponseKind>),
    /// Send this response, holding `held` until it is written (the memory its records take).
    RespondHolding(Box<ResponseKind>, Vec<Reservation>),
    /// Send nothing (a Produce with acks=0 that succeeded).
    Silent,
    /// Close the connection after the answers already owed (a failed acks=0 produce,
    /// which Kafka signals by closing).
    Close,
}

/// The future of one request's answer.
pub type Answer = Pin<Box<dyn Future<Output = Reply>>>;

/// The broker side of a connection: one call per decoded request, in arrival order.
pub trait Handler: 'static {
    /// Admits `request`. The connection awaits the returned future before it reads the
    /// next request, so whatever must happen in arrival order (a produce taking its place
    /// in its partitions' queues) is done by the time it resolves; it resolves to the future
    /// of the answer, which runs beside the requests that follow.
    fn admit(self: Rc<Self>, request: Request) -> Pin<Box<dyn Future<Output = Answer>>>;
}

#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// `socket.request.max.bytes`: the largest frame body accepted.
    pub request_bytes_max: usize,
    /// Requests of one connection handled at once.
    pub in_flight_max: usize,
    /// `connections.max.idle.ms`: a connection that sends nothing for this long is closed.
    pub idle_timeout: Duration,
    /// A connection whose answers make no progress into the socket for this long (the
    /// client stopped reading) is closed.
    pub write_timeout: Duration,
    /// Bytes of answers one connection may hold built and unsent ([`Outbox::budget`]).
    pub unsent_bytes_max: usize,
}

/// What handlers can know of a connection's way out: how much it has not sent yet, and the
/// budget that bounds the answers it holds.
#[derive(Debug)]
pub struct Outbox {
    fd: std::os::fd::RawFd,
    unsent_bytes: Cell<usize>,
    answers_written: Cell<u64>,
    /// The connection is gone: nothing more will be written.
    closed: Cell<bool>,
    /// Answers of this connection draw on it for what they hold until written.
    pub budget: Budget,
}

impl Outbox {
    fn new(fd: std::os::fd::RawFd, unsent_bytes_max: usize) -> Outbox {
        Outbox {
            fd,
            unsent_bytes: Cell::new(0),
            answers_written: Cell::new(0),
            closed: Cell::new(false),
            budget: Budget::new(unsent_bytes_max),
        }
    }

    /// Bytes of the frame being written that the socket has not taken yet: 0 when the
    /// client keeps up with its answers.
    pub fn unsent_bytes(&self) -> usize {
        self.unsent_bytes.get()
    }

    /// The client has read answers and has none left unread: nothing waits to be written,
    /// and the socket holds almost nothing the client has not acknowledged (the kernel's
    /// send buffer would otherwise hide a client that stopped reading). A client that never
    /// read an answer is not known to keep up.
    pub fn keeps_up(&self) -> bool {
        if self.closed.get() || self.unsent_bytes.get() > 0 || self.answers_written.get() == 0 {
            return false;
        }
        let mut unacknowledged: libc::c_int = 0;
        // SAFETY: TIOCOUTQ (SIOCOUTQ for sockets) writes one int into `unacknowledged`; the
        // descriptor is open while the connection is not closed.
        let asked = unsafe { libc::ioctl(self.fd, libc::TIOCOUTQ, &mut unacknowledged) };
        asked == 0 && (unacknowledged as usize) < UNACKNOWLEDGED_KEEPS_UP_BYTES
    }

    /// The connection is gone: an answer being built will never be written.
    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }
}

/// An answer slot: either a handler still working, or a frame ready to go.
enum Slot {
    Pending {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
        task: JoinHandle<Reply>,
    },
    Ready(OutFrame),
}

/// Serves `stream` until the client leaves, breaks the protocol or stops reading.
pub async fn serve_connection<H: Handler>(
    stream: TcpStream,
    handler: Rc<H>,
    apis: Rc<SupportedApis>,
    limits: ConnectionLimits,
    request_budget: Budget,
) -> io::Result<()> {
    assert!(limits.in_flight_max > 0);
    assert!(
        request_budget.total_bytes() >= limits.request_bytes_max,
        "the shard budget must admit the largest frame"
    );
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(limits.idle_timeout))?;
    stream.set_write_timeout(Some(limits.write_timeout))?;
    let peer_addr = stream.peer_addr().ok();
    let peer = peer_addr.map(|a| a.to_string()).unwrap_or_default();
    let outbox = Rc::new(Outbox::new(stream.as_raw_fd(), limits.unsent_bytes_max));
    let stream = Rc::new(RefCell::new(stream));
    let (slots_tx, slots_rx) = local_channel::new_bounded(limits.in_flight_max);
    let writer = glommio::spawn_local(write_answers(
        Half(stream.clone()),
        slots_rx,
        outbox.clone(),
        peer.clone(),
    ));
    let read_result = read_requests(
        Half(stream.clone()),
        handler,
        (&apis, &limits),
        &request_budget,
        slots_tx,
        (peer_addr, &peer, &outbox),
    )
    .await;
    // The sender is gone now; the writer finishes the answers owed and stops.
    let write_result = writer.await;
    // Both halves are done; dropping the last handle closes the socket.
    drop(stream);
    match (read_result, write_result) {
        (Err(error), _) | (_, Err(error)) if !is_disconnect(&error) => Err(error),
        _ => Ok(()),
    }
}

async fn read_requests<H: Handler>(
    mut socket: Half,
    handler: Rc<H>,
    (apis, limits): (&Rc<SupportedApis>, &ConnectionLimits),
    request_budget: &Budget,
    slots: local_channel::LocalSender<(Slot, Reservation)>,
    (peer_addr, peer, outbox): (Option<std::net::SocketAddr>, &str, &Rc<Outbox>),
) -> io::Result<()> {
    let mut buffered = ReadBuffer::new();
    // Covers `buffered.held_bytes()`: the memory the buffer touched for frames not yet taken.
    let mut held = request_budget.empty();
    loop {
        let body_bytes = loop {
            let room = match frame::check(buffered.data(), limits.request_bytes_max) {
                Ok(Check::Complete { body_bytes }) => break body_bytes,
                Ok(Check::NeedPrefix) => read_room(&socket, READ_CHUNK_BYTES),
                Ok(Check::Incomplete {
                    body_bytes,
                    missing_bytes,
                }) => {
                    let frame_bytes = LENGTH_PREFIX_BYTES + body_bytes;
                    if frame_bytes <= FRAME_COMMIT_BYTES {
                        // Address space only: the frame will not move as it arrives.
                        buffered.reserve_capacity(frame_bytes);
                    } else if frame_bytes - missing_bytes >= FRAME_COMMIT_BYTES {
                        // The client is sending this frame: hold all of it in one step.
                        if held.bytes() < frame_bytes {
                            held.grow(frame_bytes - held.bytes()).await;
                        }
                        buffered.reserve_capacity(frame_bytes);
                    }
                    read_room(&socket, missing_bytes)
                }
                Err(error) => {
                    warn!(peer, %error, "closing connection");
                    return Ok(());
                }
            };
            let held_after = buffered.held_bytes_with(room);
            if held_after > held.bytes() {
                held.grow(held_after - held.bytes()).await;
            }
            if fill(&mut socket, &mut buffered, room).await? == 0 {
                if !buffered.is_empty() {
                    warn!(peer, "connection closed inside a frame");
                }
                return Ok(());
            }
        };
        buffered.skip(LENGTH_PREFIX_BYTES);
        let body = buffered.take(body_bytes);
        // The frame keeps the share that covered it until its answer is written.
        let frame_held = held.split_off(body_bytes);
        buffered.release_if_empty();
        held.shrink_to(buffered.held_bytes());
        let slot = match decode_request(body, apis) {
            Ok(mut request) => {
                request.peer = peer_addr;
                request.outbox = Some(outbox.clone());
                let (api_key, api_version, correlation_id) =
                    (request.api_key, request.api_version, request.correlation_id);
                let answer = handler.clone().admit(request).await;
                Slot::Pending {
                    api_key,
                    api_version,
                    correlation_id,
                    task: glommio::spawn_local(answer).detach(),
                }
            }
            Err(DecodeError::UnsupportedApiVersions {
                api_version,
                correlation_id,
            }) => {
                debug!(
                    peer,
                    api_version, "ApiVersions version not supported; answering v0"
                );
                let mut out = OutFrame::default();
                encode_unsupported_api_versions(correlation_id, apis, &mut out)
                    .map_err(io::Error::other)?;
                Slot::Ready(out)
            }
            Err(error) => {
                warn!(peer, %error, "closing connection");
                return Ok(());
            }
        };
        if let Err(error) = slots.send((slot, frame_held)).await {
            // The writer stopped: the client is gone, and so is any use for the answer.
            if let GlommioError::Closed(ResourceType::Channel((Slot::Pending { task, .. }, _))) =
                error
            {
                task.cancel();
            }
            return Ok(());
        }
    }
}

/// How many bytes to ask the socket for: what it holds now (at least `READ_MIN_BYTES`, so
/// an idle connection waits with a small buffer), at most `limit_bytes`.
fn read_room(socket: &Half, limit_bytes: usize) -> usize {
    let mut queued: libc::c_int = 0;
    let fd = socket.0.borrow().as_raw_fd();
    // SAFETY: FIONREAD writes one int, the bytes the socket holds, into `queued`.
    let asked = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut queued) };
    let queued = if asked == 0 {
        queued.max(0) as usize
    } else {
        0
    };
    queued
        .clamp(READ_MIN_BYTES, READ_CHUNK_BYTES.max(READ_MIN_BYTES))
        .min(limit_bytes.max(1))
}

/// Writes the answers in order until the client is gone; then gives up on the answers still
/// being worked on, so a client that left stops costing memory and budget at once.
async fn write_answers(
    socket: Half,
    slots: local_channel::LocalReceiver<(Slot, Reservation)>,
    outbox: Rc<Outbox>,
    peer: String,
) -> io::Result<()> {
    let result = write_in_order(Half(socket.0.clone()), &slots, &outbox, &peer).await;
    outbox.closed.set(true);
    // Ends the reader too (its read returns); until it has, whatever it still admits is
    // given up here.
    socket.shutdown();
    while let Some((slot, _)) = slots.recv().await {
        if let Slot::Pending { task, .. } = slot {
            task.cancel();
        }
    }
    result
}

async fn write_in_order(
    mut socket: Half,
    slots: &local_channel::LocalReceiver<(Slot, Reservation)>,
    outbox: &Outbox,
    peer: &str,
) -> io::Result<()> {
    let mut out = OutFrame::default();
    while let Some((slot, frame_held)) = slots.recv().await {
        let mut answer_held = Vec::new();
        match slot {
            Slot::Ready(frame) => out = frame,
            Slot::Pending {
                api_key,
                api_version,
                correlation_id,
                task,
            } => {
                let reply = task.await;
                let body = match reply {
                    Some(Reply::Respond(body)) => body,
                    Some(Reply::RespondHolding(body, held)) => {
                        answer_held = held;
                        body
                    }
                    Some(Reply::Silent) => continue,
                    Some(Reply::Close) | None => return Ok(()),
                };
                encode_response(api_key, api_version, correlation_id, &body, &mut out)
                    .map_err(io::Error::other)?;
            }
        }
        outbox
            .unsent_bytes
            .set(LENGTH_PREFIX_BYTES + out.body_len());
        let written = socket.write_all_vectored(&mut out.io_slices()).await;
        if let Err(error) = written {
            if error.kind() == io::ErrorKind::TimedOut {
                info!(
                    peer,
                    "closing a connection that stopped reading its answers"
                );
            }
            // The reader may be waiting for requests that will never be answered.
            socket.shutdown();
            return Err(error);
        }
        outbox.unsent_bytes.set(0);
        outbox.answers_written.set(outbox.answers_written.get() + 1);
        drop((frame_held, answer_held));
        if out.capacity_bytes() > OUT_KEEP_BYTES {
            out = OutFrame::default();
        }
    }
    socket.flush().await
}

/// Reads at least one byte (room is made for `want`) onto the end of `buffered`; 0 means
/// end of stream.
async fn fill(socket: &mut Half, buffered: &mut ReadBuffer, want: usize) -> io::Result<usize> {
    let read_bytes = socket.read(buffered.spare(want)).await?;
    buffered.commit(read_bytes);
    Ok(read_bytes)
}

fn is_disconnect(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::TimedOut
            | io::ErrorKind::NotConnected
    )
}

/// One side of a socket shared by the reader and the writer.
struct Half(Rc<RefCell<TcpStream>>);

impl Half {
    /// Ends both directions now: a read or write waiting on the socket returns.
    fn shutdown(&self) {
        let fd = self.0.borrow().as_raw_fd();
        // SAFETY: shutdown only changes the state of a socket this connection owns.
        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
    }
}

/// Most slices one `sendmsg` takes (Linux's IOV_MAX).
const IOV_MAX: usize = 1024;

impl Half {
    /// Writes every byte of `slices`, in order: each round hands the socket all of them in
    /// one `sendmsg`; when the socket has no room, waits for it through the stream.
    async fn write_all_vectored(&mut self, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
        while !slices.is_empty() {
            let written = match self.try_send_vectored(slices) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    self.write(&slices[0]).await?
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                other => other?,
            };
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut slices, written);
        }
        Ok(())
    }

    /// One non-blocking `sendmsg` of up to `IOV_MAX` slices.
    fn try_send_vectored(&self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        let slices = &slices[..slices.len().min(IOV_MAX)];
        let fd = self.0.borrow().as_raw_fd();
        // SAFETY: msghdr is plain data, zeroed means "no address, no control data";
        // IoSlice is ABI-compatible with iovec, and `slices` outlives the call.
        let sent = unsafe {
            let mut message: libc::msghdr = std::mem::zeroed();
            message.msg_iov = slices.as_ptr() as *mut libc::iovec;
            message.msg_iovlen = slices.len() as _;
            libc::sendmsg(fd, &message, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        };
        if sent < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(sent as usize)
        }
    }
}

impl AsyncRead for Half {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl AsyncWrite for Half {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}
