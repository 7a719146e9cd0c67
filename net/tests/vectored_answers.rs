//! A Fetch answer whose records go to the socket by reference arrives byte for byte, in
//! request order, even when the client reads slowly and the socket fills up mid-frame.
//!
//! Method: `serve_connection` on a glommio executor with a handler that answers every Fetch
//! with three partitions of 1 MiB patterned records each (plus one small one, which the
//! frame copies). A blocking client pipelines two requests, waits so the socket buffers
//! fill while the writer is inside a frame, then reads both answers slowly and decodes
//! them with the kafka-protocol crate.

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpStream as StdStream;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use glommio::net::TcpListener;
use net::kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use net::kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, ResponseKind,
};
use net::kafka_protocol::protocol::{Decodable, Encodable};
use net::{
    serve_connection, Answer, Budget, ConnectionLimits, Handler, Reply, Request, SupportedApis,
};

const VERSION: i16 = 12;
const RECORDS_SIZES: [usize; 4] = [1 << 20, 100, 1 << 20, 1 << 20];

fn records(partition: usize, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8 ^ partition as u8)
        .collect::<Vec<u8>>()
        .into()
}

struct BigFetches;

impl Handler for BigFetches {
    fn admit(self: Rc<Self>, request: Request) -> Pin<Box<dyn Future<Output = Answer>>> {
        assert_eq!(request.api_key, ApiKey::Fetch);
        let partitions = RECORDS_SIZES
            .iter()
            .enumerate()
            .map(|(index, &len)| {
                PartitionData::default()
                    .with_partition_index(index as i32)
                    .with_records(Some(records(index, len)))
            })
            .collect();
        let response = FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default().with_partitions(partitions),
        ]);
        let answer: Answer =
            Box::pin(async move { Reply::Respond(Box::new(ResponseKind::Fetch(response))) });
        Box::pin(std::future::ready(answer))
    }
}

fn request_frame(correlation_id: i32) -> Vec<u8> {
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(VERSION)
        .with_correlation_id(correlation_id)
        .encode(&mut body, ApiKey::Fetch.request_header_version(VERSION))
        .expect("header");
    FetchRequest::default()
        .encode(&mut body, VERSION)
        .expect("body");
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

fn read_answer(client: &mut StdStream) -> (i32, FetchResponse) {
    let mut prefix = [0u8; 4];
    client.read_exact(&mut prefix).expect("prefix");
    let mut body = vec![0u8; i32::from_be_bytes(prefix) as usize];
    // Slowly: small reads with pauses, so the node's writer meets a full socket.
    let mut at = 0;
    while at < body.len() {
        let end = (at + (256 << 10)).min(body.len());
        client.read_exact(&mut body[at..end]).expect("body");
        at = end;
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut body = Bytes::from(body);
    let header = ResponseHeader::decode(&mut body, ApiKey::Fetch.response_header_version(VERSION))
        .expect("header");
    let response = FetchResponse::decode(&mut body, VERSION).expect("body");
    assert!(!body.has_remaining(), "nothing after the body");
    (header.correlation_id, response)
}

#[test]
fn shared_records_arrive_whole_and_in_order_through_a_full_socket() {
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .make()
            .expect("executor")
            .run(async move {
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
                address_tx
                    .send(listener.local_addr().expect("addr"))
                    .expect("send");
                let stream = listener.accept().await.expect("accept");
                let limits = ConnectionLimits {
                    request_bytes_max: 1 << 20,
                    in_flight_max: 4,
                    idle_timeout: Duration::from_secs(30),
                    write_timeout: Duration::from_secs(30),
                    unsent_bytes_max: 16 << 20,
                };
                serve_connection(
                    stream,
                    Rc::new(BigFetches),
                    Rc::new(SupportedApis::new(&[(ApiKey::Fetch, 4, VERSION)])),
                    limits,
                    Budget::new(4 << 20),
                )
                .await
                .expect("connection served");
            })
    });
    let address = address_rx.recv().expect("address");
    let mut client = StdStream::connect(address).expect("connect");
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut requests = request_frame(1);
    requests.put_slice(&request_frame(2));
    client.write_all(&requests).expect("send");
    // Let both answers pile up against the socket buffers before reading any.
    std::thread::sleep(Duration::from_millis(200));
    for expected_id in [1, 2] {
        let (correlation_id, response) = read_answer(&mut client);
        assert_eq!(correlation_id, expected_id);
        let partitions = &response.responses[0].partitions;
        assert_eq!(partitions.len(), RECORDS_SIZES.len());
        for (index, partition) in partitions.iter().enumerate() {
            let expected = records(index, RECORDS_SIZES[index]);
            assert!(
                partition.records.as_ref() == Some(&expected),
                "partition {index} of answer {expected_id}"
            );
        }
    }
    drop(client);
    server.join().expect("server thread");
}
