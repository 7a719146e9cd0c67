//! One connection to one broker on glommio: ApiVersions on connect, then one request at a
//! time (or, for Produce with acks=0, requests that get no answer).
//!
//! Invariants:
//! - One request in flight per connection; the answer's correlation id must be the one sent,
//!   else the call fails and the connection should be dropped.
//! - Requests are built at [`Connection::version`], the highest both sides support
//!   ([`crate::versions`]).
//! - Every read waits at most the connection's timeout ([`REQUEST_TIMEOUT`] unless a call
//!   says otherwise); every frame is length-checked before allocating ([`crate::frame`]).
//! - An answer's buffer is reused for the next answer only once nothing else holds it (a
//!   Fetch answer's records are slices of it).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use futures_lite::AsyncWriteExt;
use glommio::net::TcpStream;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Request, StrBytes};

use crate::error::{check, codes};
use crate::frame::{correlation_id_of, decode_response, encode_request, read_frame};
use crate::versions::Versions;

/// How long one request may wait for its answer unless the caller says otherwise.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The first address `address` (host:port) resolves to.
pub fn resolve(address: &str) -> Result<SocketAddr> {
    address
        .to_socket_addrs()
        .with_context(|| format!("resolving {address}"))?
        .next()
        .ok_or_else(|| anyhow!("{address} resolves to nothing"))
}

pub struct Connection {
    stream: TcpStream,
    /// host:port as given (or as Metadata named the broker).
    pub address: String,
    pub client_id: &'static str,
    pub versions: Versions,
    correlation_id: i32,
    out: Vec<u8>,
    frame: Vec<u8>,
    /// The last answer's frame; its buffer is read into again once nothing else holds it.
    last_frame: Bytes,
}

impl Connection {
    /// Connects to `address` (host:port) and learns its API versions.
    pub async fn connect(address: &str, client_id: &'static str) -> Result<Connection> {
        Connection::connect_to(resolve(address)?, address, client_id).await
    }

    /// Connects to `socket`, known to the caller as `address`, and learns its API versions.
    pub async fn connect_to(
        socket: SocketAddr,
        address: &str,
        client_id: &'static str,
    ) -> Result<Connection> {
        let stream = TcpStream::connect_timeout(socket, CONNECT_TIMEOUT)
            .await
            .map_err(|e| anyhow!("connecting to {address}: {}", std::io::Error::from(e)))?;
        stream
            .set_nodelay(true)
            .map_err(|e| anyhow!("TCP_NODELAY: {e}"))?;
        stream
            .set_read_timeout(Some(REQUEST_TIMEOUT))
            .map_err(|e| anyhow!("read timeout: {e}"))?;
        let mut connection = Connection {
            stream,
            address: address.to_string(),
            client_id,
            versions: Versions::default(),
            correlation_id: 0,
            out: Vec::with_capacity(4096),
            frame: Vec::with_capacity(4096),
            last_frame: Bytes::new(),
        };
        connection.api_versions().await?;
        Ok(connection)
    }

    async fn api_versions(&mut self) -> Result<()> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(self.client_id))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response: ApiVersionsResponse = self.call_at(3, &request).await?;
        if response.error_code == codes::UNSUPPORTED_VERSION {
            // UNSUPPORTED_VERSION: the broker answered in v0 with its ranges; ask in v0.
            response = self.call_at(0, &ApiVersionsRequest::default()).await?;
        }
        check(response.error_code, None, || {
            format!("ApiVersions to {}", self.address)
        })?;
        self.versions = Versions::from_response(&response);
        Ok(())
    }

    /// The version of `R` to build and send on this connection.
    pub fn version<R: Request>(&self) -> Result<i16> {
        self.versions.of::<R>()
    }

    /// True when the broker offers `R` at any version this client speaks.
    pub fn supports<R: Request>(&self) -> bool {
        self.versions.supports::<R>()
    }

    pub fn next_correlation_id(&mut self) -> i32 {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        self.correlation_id
    }

    /// Sends `request` at the negotiated version and waits for its answer.
    pub async fn call<R: Request>(&mut self, request: &R) -> Result<R::Response> {
        let version = self.version::<R>()?;
        self.call_at(version, request).await
    }

    /// Sends `request` at `version` and waits for its answer.
    pub async fn call_at<R: Request>(&mut self, version: i16, request: &R) -> Result<R::Response> {
        let correlation_id = self.send_at(version, request).await?;
        self.reclaim_frame();
        read_frame(&mut self.stream, &mut self.frame)
            .await
            .with_context(|| format!("reading an answer from {}", self.address))?;
        // Hand the frame to the decoder without copying; fetched records stay slices of it.
        let frame = Bytes::from(std::mem::take(&mut self.frame));
        self.last_frame = frame.clone();
        let answered = correlation_id_of(&frame)?;
        if answered != correlation_id {
            bail!(
                "{} answered correlation id {answered} to request {correlation_id}",
                self.address
            );
        }
        Ok(decode_response::<R>(frame, version)?.1)
    }

    /// Like [`Connection::call_at`], with the read timeout raised to `timeout` for this call
    /// (JoinGroup may wait a whole rebalance).
    pub async fn call_with_timeout<R: Request>(
        &mut self,
        version: i16,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response> {
        self.set_read_timeout(timeout)?;
        let answer = self.call_at(version, request).await;
        self.set_read_timeout(REQUEST_TIMEOUT)?;
        answer
    }

    fn set_read_timeout(&self, timeout: Duration) -> Result<()> {
        self.stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| anyhow!("read timeout: {e}"))
    }

    /// Sends `request` without waiting (Produce with acks=0 gets no answer); answers the
    /// correlation id it carries.
    pub async fn send_at<R: Request>(&mut self, version: i16, request: &R) -> Result<i32> {
        let correlation_id = self.next_correlation_id();
        self.out.clear();
        encode_request(
            &mut self.out,
            self.client_id,
            correlation_id,
            version,
            request,
        )?;
        self.stream
            .write_all(&self.out)
            .await
            .with_context(|| format!("sending to {}", self.address))?;
        Ok(correlation_id)
    }

    /// Takes the last answer's buffer back when the caller has dropped the answer, so that
    /// reading the next frame neither allocates nor zero-fills what the last one covered.
    fn reclaim_frame(&mut self) {
        if self.frame.capacity() > 0 {
            return;
        }
        if let Ok(buffer) = std::mem::take(&mut self.last_frame).try_into_mut() {
            self.frame = Vec::from(buffer);
        }
    }

    /// The socket and the negotiated versions, for a caller that pipelines its own frames
    /// (the bench's produce path); correlation ids then are the caller's.
    pub fn into_parts(self) -> (TcpStream, Versions) {
        (self.stream, self.versions)
    }

    #[cfg(test)]
    pub(crate) fn last_frame_ptr(&self) -> *const u8 {
        self.last_frame.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_broker::{api_versions, FakeBroker};
    use kafka_protocol::messages::{
        ApiKey, MetadataRequest, MetadataResponse, RequestKind, ResponseKind,
    };

    #[test]
    fn answers_are_read_into_the_last_answers_buffer_once_it_is_free() {
        let fake = FakeBroker::start(Box::new(|request, _, _| match request {
            RequestKind::ApiVersions(_) => {
                api_versions(&[(ApiKey::ApiVersions, 0, 3), (ApiKey::Metadata, 0, 12)])
            }
            _ => ResponseKind::Metadata(MetadataResponse::default()),
        }));
        crate::blocking::run(async {
            let mut conn = Connection::connect(&fake.address(), "test").await.unwrap();
            let request = MetadataRequest::default();
            let first = conn.call(&request).await.unwrap();
            let buffer = conn.last_frame_ptr();
            drop(first);
            conn.call(&request).await.unwrap();
            assert_eq!(conn.last_frame_ptr(), buffer, "the buffer came back");
            // While an answer is alive, its buffer is not reused.
            let held = conn.last_frame.clone();
            conn.call(&request).await.unwrap();
            assert_ne!(conn.last_frame_ptr(), held.as_ptr());
        })
        .unwrap();
        assert_eq!(fake.seen(ApiKey::Metadata), [12, 12, 12]);
    }
}
