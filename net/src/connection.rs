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
//! - Memory: a frame's body is admitted only after its bytes are reserved from the shard's
//!   request budget (a semaphore shared by every connection of the shard), and the
//!   reservation lives until the answer is written. No client can make the shard hold more
//!   than the budget, and none can hold more than `request_bytes_max` for one frame.
//! - A connection that breaks the protocol (oversized, truncated or unparsable frames,
//!   unknown keys or versions) is closed after the answers already owed are written; the
//!   problem is logged once, and nothing else on the shard is affected.
//! - The socket is shared by the two halves through `Rc<RefCell<_>>`; a borrow lasts one
//!   `poll_*` call and never spans an `.await`.

use std::cell::RefCell;
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
use glommio::sync::{Semaphore, StaticPermit};
use glommio::task::JoinHandle;
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tracing::{debug, warn};

use crate::frame::{self, Check, LENGTH_PREFIX_BYTES};
use crate::out_frame::OutFrame;
use crate::read_buffer::ReadBuffer;
use crate::request::{decode_request, DecodeError, Request};
use crate::response::{encode_response, encode_unsupported_api_versions};
use crate::SupportedApis;

/// Bytes asked of the socket per read when no frame length is known yet.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// What the broker does with a request.
pub enum Reply {
    /// Send this response (boxed: responses are large and move between tasks).
    Respond(Box<ResponseKind>),
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

/// Serves `stream` until the client leaves or breaks the protocol.
pub async fn serve_connection<H: Handler>(
    stream: TcpStream,
    handler: Rc<H>,
    apis: Rc<SupportedApis>,
    limits: ConnectionLimits,
    request_budget: Rc<Semaphore>,
) -> io::Result<()> {
    assert!(limits.in_flight_max > 0);
    assert!(
        request_budget.available() >= limits.request_bytes_max as u64,
        "the shard budget must admit the largest frame"
    );
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(limits.idle_timeout))?;
    let peer_addr = stream.peer_addr().ok();
    let peer = peer_addr.map(|a| a.to_string()).unwrap_or_default();
    let stream = Rc::new(RefCell::new(stream));
    let (slots_tx, slots_rx) = local_channel::new_bounded(limits.in_flight_max);
    let writer = glommio::spawn_local(write_answers(Half(stream.clone()), slots_rx));
    let read_result = read_requests(
        Half(stream.clone()),
        handler,
        &apis,
        &limits,
        &request_budget,
        slots_tx,
        (peer_addr, &peer),
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
    apis: &Rc<SupportedApis>,
    limits: &ConnectionLimits,
    request_budget: &Rc<Semaphore>,
    slots: local_channel::LocalSender<(Slot, Option<StaticPermit>)>,
    (peer_addr, peer): (Option<std::net::SocketAddr>, &str),
) -> io::Result<()> {
    let mut buffered = ReadBuffer::with_capacity(READ_CHUNK_BYTES);
    loop {
        let body_bytes = loop {
            match frame::check(buffered.data(), limits.request_bytes_max) {
                Ok(Check::Complete { body_bytes }) => break body_bytes,
                Ok(Check::NeedPrefix) => {
                    if fill(&mut socket, &mut buffered, READ_CHUNK_BYTES).await? == 0 {
                        if !buffered.is_empty() {
                            warn!(peer, "connection closed inside a frame prefix");
                        }
                        return Ok(());
                    }
                }
                Ok(Check::Incomplete { missing_bytes, .. }) => {
                    let want = missing_bytes.clamp(1, READ_CHUNK_BYTES.max(missing_bytes));
                    if fill(&mut socket, &mut buffered, want).await? == 0 {
                        warn!(peer, missing_bytes, "connection closed inside a frame");
                        return Ok(());
                    }
                }
                Err(error) => {
                    warn!(peer, %error, "closing connection");
                    return Ok(());
                }
            }
        };
        // Reserve before decoding: the frame stays alive until its answer is written.
        let permit = request_budget
            .acquire_static_permit(body_bytes as u64)
            .await
            .map_err(|_| io::Error::other("request budget closed"))?;
        buffered.skip(LENGTH_PREFIX_BYTES);
        let body = buffered.take(body_bytes);
        let slot = match decode_request(body, apis) {
            Ok(mut request) => {
                request.peer = peer_addr;
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
        if slots.send((slot, Some(permit))).await.is_err() {
            return Ok(()); // the writer stopped: the client is gone
        }
    }
}

async fn write_answers(
    mut socket: Half,
    slots: local_channel::LocalReceiver<(Slot, Option<StaticPermit>)>,
) -> io::Result<()> {
    let mut out = OutFrame::with_capacity(READ_CHUNK_BYTES);
    while let Some((slot, permit)) = slots.recv().await {
        match slot {
            Slot::Ready(frame) => out = frame,
            Slot::Pending {
                api_key,
                api_version,
                correlation_id,
                task,
            } => {
                let reply = task.await;
                match reply {
                    Some(Reply::Respond(body)) => {
                        encode_response(api_key, api_version, correlation_id, &body, &mut out)
                            .map_err(io::Error::other)?;
                    }
                    Some(Reply::Silent) => continue,
                    Some(Reply::Close) | None => return Ok(()),
                }
            }
        }
        socket.write_all_vectored(&mut out.io_slices()).await?;
        drop(permit);
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
