//! InitProducerId hands out producer ids that are never handed out twice, across shards
//! and across a crash.
//!
//! Method: a real two-shard node; ids taken on two connections (which the acceptor deals to
//! both shards, each drawing from its own block), then `kill -9`, a restart on the same
//! data directory, and more ids on new connections: none may repeat. Every id comes from a
//! block the controller committed to the metadata before handing it out, so a restart
//! starts from the next block.

mod common;

use common::{init_producer_id, Node};

#[test]
fn producer_ids_are_never_handed_out_twice_across_kill_9() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    let mut seen: Vec<i64> = (0..5).map(|_| init_producer_id(&mut client)).collect();
    // A second connection may land on the other shard, which takes its own block.
    let mut other = node.connect();
    seen.extend((0..5).map(|_| init_producer_id(&mut other)));
    let node = node.kill().restart(&[]);
    for _ in 0..2 {
        let mut client = node.connect();
        for _ in 0..3 {
            let id = init_producer_id(&mut client);
            assert!(!seen.contains(&id), "{id} was handed out before: {seen:?}");
            seen.push(id);
        }
    }
}
