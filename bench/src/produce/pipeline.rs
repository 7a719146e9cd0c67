//! One producer's connection: the pipelined Produce path. The writer builds batches
//! (`encode.rs`) and frames each request itself; the reader matches answers to requests.
//!
//! Invariants:
//! - Each producer owns one connection to the leader of its partitions, one `BatchBuilder`
//!   and one `PayloadPool`; the hot path allocates nothing per record.
//! - At most `max_in_flight` Produce requests are outstanding per connection (a semaphore
//!   permit is taken before a write and given back by the response); responses are matched to
//!   requests in FIFO order by correlation id, and a mismatch closes the connection.
//! - The `RefCell` shared by a producer's writer and reader is never borrowed across `.await`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use client::frame::{correlation_id_of, decode_response, read_frame};
use futures_lite::AsyncWriteExt;
use kafka_protocol::messages::ProduceRequest;

use super::{Assignment, Plan, RequestTimes, Tally, Timeline};
use crate::cli::Payload;
use crate::cores::Counters;
use crate::encode::{
    fill_batch, fill_batch_stamped, BatchBuilder, PayloadPool, ProduceFraming, KEY_BYTES,
};
use crate::kafka::{self, error_name, CLIENT_ID};
use crate::pacing::{clock, Pacer};
use crate::report;

fn new_pool(plan: &Plan, a: &Assignment) -> PayloadPool {
    PayloadPool::new(
        plan.message_bytes,
        plan.payload == Payload::Compressible,
        plan.seed.wrapping_add(a.id as u64 * 0x9E37_79B9),
    )
}

/// Encode, checksum and frame batches as the network producer would, and send nowhere.
pub(super) async fn dry_run_producer(plan: &Plan, a: &Assignment, counters: &Counters) -> Tally {
    let mut t = Tally::new();
    let mut pool = new_pool(plan, a);
    let mut builder = BatchBuilder::new(plan.batch_bytes, plan.compression).with_keys(plan.keys);
    let mut framing = ProduceFraming::new(9, CLIENT_ID, plan.acks, 30_000, &plan.topic);
    let tl = plan.timeline;
    while clock::now_ns() < tl.start_ns {
        glommio::timer::sleep(Duration::from_micros(100)).await;
    }
    let limit = a.messages.unwrap_or(u64::MAX);
    let mut correlation_id = 0i32;
    let mut batches = 0u64;
    while t.sent < limit {
        builder.reset(clock::unix_ms());
        let n = fill_batch(&mut builder, &mut pool, limit - t.sent);
        let batch = builder.finish();
        let batch_bytes = batch.len() as u64;
        let crc = u32::from_be_bytes([batch[17], batch[18], batch[19], batch[20]]);
        framing.partition = a.partitions[(batches % a.partitions.len() as u64) as usize];
        correlation_id = correlation_id.wrapping_add(1);
        let frame = builder.frame_produce(&framing, correlation_id);
        t.checksum ^= crc ^ frame.len() as u32;
        let now = clock::now_ns();
        t.sent += n;
        if now >= tl.warmup_end_ns {
            t.measured_messages += n;
            t.measured_wire_bytes += batch_bytes;
            t.last_ns = now;
        }
        batches += 1;
        if batches % 64 == 0 {
            Counters::add(&counters.sent, 64 * n);
            if now >= tl.end_ns {
                break;
            }
            // Let the executor breathe (timers, other tasks) without measurable cost.
            glommio::yield_if_needed().await;
        }
    }
    t
}

struct InFlight {
    correlation_id: i32,
    send_ns: u64,
    /// Index of the batch's first message in this producer's schedule.
    first_index: u64,
    count: u64,
    wire_bytes: u64,
    /// A second copy of the batch before it (`--resend-every`): its answer must repeat that
    /// batch's offset, and it counts for nothing else.
    resend: bool,
}

struct Shared {
    inflight: VecDeque<InFlight>,
    tally: Tally,
}

pub(crate) async fn producer(plan: &Plan, a: &Assignment, counters: &Counters) -> Tally {
    let mut t = Tally::new();
    let Some(leader) = a.leader else {
        t.error("NO_LEADER", a.messages.unwrap_or(1));
        return t;
    };
    let mut conn = match kafka::connect(leader).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("producer {}: {e:#}", a.id);
            t.error("NETWORK_EXCEPTION", a.messages.unwrap_or(1));
            return t;
        }
    };
    let producer_id = if plan.idempotent {
        match client::admin::init_producer_id(&mut conn).await {
            Ok(Some(producer)) => Some((producer.id, producer.epoch)),
            Ok(None) => {
                eprintln!(
                    "producer {}: the broker does not offer InitProducerId: \
                     no idempotent producers",
                    a.id
                );
                t.error("INIT_PRODUCER_ID_FAILED", a.messages.unwrap_or(1));
                return t;
            }
            Err(e) => {
                eprintln!("producer {}: {e:#}", a.id);
                t.error("INIT_PRODUCER_ID_FAILED", a.messages.unwrap_or(1));
                return t;
            }
        }
    } else {
        None
    };
    // The next sequence number per partition of `a.partitions` (idempotent only).
    let mut sequences = vec![0i32; a.partitions.len()];
    let version = match conn.version::<ProduceRequest>() {
        Ok(version) => version,
        Err(e) => {
            eprintln!("producer {}: {e:#}", a.id);
            t.error("UNSUPPORTED_VERSION", a.messages.unwrap_or(1));
            return t;
        }
    };
    let (stream, _) = conn.into_parts();
    let (reader, mut writer) = futures_lite::io::split(stream);
    let shared = Rc::new(RefCell::new(Shared {
        inflight: VecDeque::new(),
        tally: t,
    }));
    let permits = Rc::new(glommio::sync::Semaphore::new(plan.max_in_flight));
    let pacer = a.rate.map(|r| Pacer::new(plan.timeline.start_ns, r));
    let reader_task = (plan.acks != 0).then(|| {
        let shared = shared.clone();
        let permits = permits.clone();
        let tl = plan.timeline;
        // The reader reports through `shared`; the writer publishes its counts to `counters`.
        let log_requests = plan.log_requests;
        glommio::spawn_local(read_responses(
            reader,
            shared,
            permits,
            version,
            tl,
            pacer,
            log_requests,
        ))
    });

    let mut pool = new_pool(plan, a);
    let mut stamped = Vec::with_capacity(plan.message_bytes);
    let mut builder = BatchBuilder::new(plan.batch_bytes, plan.compression).with_keys(plan.keys);
    let mut framing = ProduceFraming::new(
        version,
        CLIENT_ID,
        plan.acks,
        plan.request_timeout_ms,
        &plan.topic,
    );
    let key_bytes = if plan.keys.is_some() { KEY_BYTES } else { 0 };
    let record_bytes_estimate = plan.message_bytes + key_bytes + 8;
    let per_batch = ((plan.batch_bytes.saturating_sub(61)) / record_bytes_estimate).max(1) as u64;
    let linger_ns = plan.linger.as_nanos() as u64;
    let tl = plan.timeline;
    let limit = a.messages.unwrap_or(u64::MAX);
    let mut index = 0u64;
    let mut batches = 0u64;
    let mut correlation_id = 0i32;
    let mut last_acked_seen = 0u64;
    while clock::now_ns() < tl.start_ns {
        glommio::timer::sleep(Duration::from_micros(200)).await;
    }
    loop {
        let now = clock::now_ns();
        if now >= tl.end_ns || index >= limit {
            break;
        }
        let mut count_max = limit - index;
        if let Some(p) = &pacer {
            let ready = p.due(now).saturating_sub(index);
            let oldest_ns = p.intended_ns(index);
            if ready == 0 || (ready < per_batch && now < oldest_ns + linger_ns) {
                let full_ns = p.intended_ns(index + per_batch - 1);
                let wake = if ready == 0 {
                    oldest_ns
                } else {
                    full_ns.min(oldest_ns + linger_ns)
                };
                let wait = wake.saturating_sub(now).clamp(1_000, 100_000_000);
                glommio::timer::sleep(Duration::from_nanos(wait)).await;
                continue;
            }
            count_max = count_max.min(ready);
        }
        if plan.acks != 0 && permits.acquire(1).await.is_err() {
            break; // the reader failed and closed the semaphore
        }
        builder.reset(clock::unix_ms());
        let n = if plan.stamp {
            let now = clock::now_ns();
            let at = |i: u64| pacer.map_or(now, |p| p.intended_ns(index + i));
            fill_batch_stamped(&mut builder, &mut pool, count_max, &mut stamped, at)
        } else {
            fill_batch(&mut builder, &mut pool, count_max)
        };
        let slot = (batches % a.partitions.len() as u64) as usize;
        if let Some((producer_id, epoch)) = producer_id {
            builder.set_producer(producer_id, epoch, sequences[slot]);
            sequences[slot] = net::sequence::sequence_after(sequences[slot], n);
        }
        let wire_bytes = builder.finish().len() as u64;
        framing.partition = a.partitions[slot];
        correlation_id = correlation_id.wrapping_add(1);
        let frame = builder.frame_produce(&framing, correlation_id);
        let send_ns = clock::now_ns();
        let resend = plan.acks != 0
            && plan
                .resend_every
                .is_some_and(|every| batches % every == every - 1);
        let in_flight = move |resend| InFlight {
            correlation_id,
            send_ns,
            first_index: index,
            count: n,
            wire_bytes,
            resend,
        };
        if plan.acks != 0 {
            shared.borrow_mut().inflight.push_back(in_flight(false));
        } else {
            let mut s = shared.borrow_mut();
            let from_ns = pacer.map(|p| p.intended_ns(index)).unwrap_or(send_ns);
            if from_ns >= tl.warmup_end_ns {
                s.tally.measured_messages += n;
                s.tally.measured_wire_bytes += wire_bytes;
                s.tally.last_ns = send_ns;
            }
        }
        if let Err(e) = writer.write_all(frame).await {
            eprintln!("producer {}: write failed: {e}", a.id);
            let mut s = shared.borrow_mut();
            if plan.acks != 0 {
                s.inflight.pop_back();
            }
            s.tally.error("NETWORK_EXCEPTION", n);
            break;
        }
        // The same request again (same bytes, correlation id included), as a retry after a
        // lost answer; answered right after the first copy, in order.
        if resend && permits.acquire(1).await.is_ok() {
            shared.borrow_mut().inflight.push_back(in_flight(true));
            if let Err(e) = writer.write_all(frame).await {
                eprintln!("producer {}: write failed: {e}", a.id);
                let mut s = shared.borrow_mut();
                s.inflight.pop_back();
                s.tally.error("NETWORK_EXCEPTION", n);
                break;
            }
        }
        shared.borrow_mut().tally.sent += n;
        Counters::add(&counters.sent, n);
        index += n;
        batches += 1;
        let acked = shared.borrow().tally.acked;
        Counters::add(&counters.acked, acked - last_acked_seen);
        last_acked_seen = acked;
    }
    if plan.acks == 0 {
        let _ = writer.flush().await;
    }
    if let Some(task) = reader_task {
        // Wait for every outstanding response: all permits back means nothing is in flight.
        let wait =
            Duration::from_millis(plan.request_timeout_ms.max(0) as u64) + Duration::from_secs(5);
        let drained = glommio::timer::timeout(wait, permits.acquire(plan.max_in_flight)).await;
        drop(task); // cancels the reader
        if drained.is_err() {
            let mut s = shared.borrow_mut();
            let left: u64 = s.inflight.iter().map(|f| f.count).sum();
            if left > 0 {
                s.tally.error("REQUEST_TIMED_OUT", left);
            }
            s.inflight.clear();
        }
    }
    let mut s = shared.borrow_mut();
    Counters::add(&counters.acked, s.tally.acked - last_acked_seen);
    Counters::add(&counters.errors, s.tally.errors.values().sum());
    std::mem::take(&mut s.tally)
}

/// Matches responses to in-flight requests, records latencies, returns permits.
async fn read_responses<R: futures_lite::AsyncRead + Unpin>(
    mut reader: R,
    shared: Rc<RefCell<Shared>>,
    permits: Rc<glommio::sync::Semaphore>,
    version: i16,
    tl: Timeline,
    pacer: Option<Pacer>,
    log_requests: bool,
) {
    let mut frame = Vec::with_capacity(1024);
    // Base offset of the last batch answered, for checking the resend that follows it.
    let mut last_base_offset = -1;
    loop {
        if let Err(e) = read_frame(&mut reader, &mut frame).await {
            let mut s = shared.borrow_mut();
            let left: u64 = s.inflight.iter().map(|f| f.count).sum();
            if left > 0 {
                eprintln!("producer connection lost with {left} messages in flight: {e:#}");
                s.tally.error("NETWORK_EXCEPTION", left);
            }
            s.inflight.clear();
            permits.close();
            return;
        }
        let ack_ns = clock::now_ns();
        let mut s = shared.borrow_mut();
        let Some(f) = s.inflight.pop_front() else {
            s.tally.error("UNEXPECTED_RESPONSE", 1);
            permits.close();
            return;
        };
        // read_frame accepts no frame shorter than a correlation id.
        let corr = correlation_id_of(&frame).unwrap_or(-1);
        if corr != f.correlation_id {
            eprintln!("correlation id {corr}, expected {}", f.correlation_id);
            s.tally.error("CORRELATION_ID_MISMATCH", f.count);
            permits.close();
            return;
        }
        let (code, base_offset) =
            match decode_response::<ProduceRequest>(Bytes::copy_from_slice(&frame), version) {
                Ok((_, r)) => r
                    .responses
                    .first()
                    .and_then(|t| t.partition_responses.first())
                    .map_or((-1, -1), |p| (p.error_code, p.base_offset)),
                Err(e) => {
                    eprintln!("undecodable Produce response: {e:#}");
                    (-1, -1)
                }
            };
        if f.resend {
            match code {
                0 if base_offset == last_base_offset => s.tally.duplicates_refused += 1,
                0 => s.tally.error("DUPLICATE_STORED", f.count),
                _ => s.tally.error(&error_name(code), f.count),
            }
        } else if code != 0 {
            s.tally.error(&error_name(code), f.count);
        } else {
            last_base_offset = base_offset;
            let t = &mut s.tally;
            t.acked += f.count;
            if f.send_ns >= tl.warmup_end_ns {
                // Past the top only if the message latency is too, which counts it.
                report::record(&mut t.round_trip, ack_ns - f.send_ns, 1);
                if log_requests {
                    t.requests.push(RequestTimes {
                        send_ns: f.send_ns,
                        answer_ns: ack_ns,
                        first_intended_ns: pacer
                            .map_or(f.send_ns, |p| p.intended_ns(f.first_index)),
                        messages: f.count,
                    });
                }
            }
            match pacer {
                None => {
                    if f.send_ns >= tl.warmup_end_ns {
                        t.clamped +=
                            u64::from(report::record(&mut t.hist, ack_ns - f.send_ns, f.count));
                        t.measured_messages += f.count;
                        t.measured_wire_bytes += f.wire_bytes;
                        t.last_ns = ack_ns;
                    }
                }
                Some(p) => {
                    let mut measured = 0;
                    for i in f.first_index..f.first_index + f.count {
                        let intended = p.intended_ns(i);
                        if intended >= tl.warmup_end_ns {
                            let lat = ack_ns.saturating_sub(intended);
                            t.clamped += u64::from(report::record(&mut t.hist, lat, 1));
                            measured += 1;
                        }
                    }
                    if measured > 0 {
                        t.measured_messages += measured;
                        t.measured_wire_bytes += f.wire_bytes * measured / f.count;
                        t.last_ns = ack_ns;
                    }
                }
            }
        }
        drop(s);
        permits.signal(1);
    }
}
