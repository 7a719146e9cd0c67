//! Where a new partition's replicas go: a pure function of the live brokers (with their
//! `broker.rack`), the partition indexes, the replication factor and a start.
//!
//! Invariants:
//! - A partition's replicas are distinct brokers, as many as the replication factor (the
//!   caller checks there are enough).
//! - Leaders (first replicas) are striped: consecutive partitions start on consecutive
//!   brokers, so leadership spreads evenly.
//! - With brokers in two racks or more, Kafka's rack-aware assignment (its
//!   `assignReplicasToBrokersRackAware`): brokers are listed alternating racks, and a
//!   partition's replicas take a rack none of them holds yet while there is one, so losing a
//!   rack loses at most `ceil(replicas / racks)` replicas of any partition. Brokers without
//!   a rack count as one rack of their own. With fewer than two racks, plain striping.

use std::collections::BTreeMap;

/// A live broker as placement sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: i32,
    pub rack: Option<String>,
}

/// Replicas for each of `indexes`, `replication_factor` of `brokers` each (sorted by id,
/// at least `replication_factor` of them), starting from `start`.
pub fn place(
    brokers: &[Candidate],
    indexes: std::ops::Range<i32>,
    replication_factor: usize,
    start: usize,
) -> Vec<Vec<i32>> {
    assert!(
        (1..=brokers.len()).contains(&replication_factor),
        "placement needs 1..={} replicas, got {replication_factor}",
        brokers.len()
    );
    let mut racks: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
    for broker in brokers {
        racks
            .entry(broker.rack.as_deref())
            .or_default()
            .push(broker.id);
    }
    if racks.len() < 2 {
        let ids: Vec<i32> = brokers.iter().map(|b| b.id).collect();
        return indexes
            .map(|index| {
                (0..replication_factor)
                    .map(|i| ids[(start + index as usize + i) % ids.len()])
                    .collect()
            })
            .collect();
    }
    let arranged = rack_alternated(&racks);
    let rack_of: BTreeMap<i32, Option<&str>> = racks
        .iter()
        .flat_map(|(rack, ids)| ids.iter().map(move |&id| (id, *rack)))
        .collect();
    let (broker_count, rack_count) = (arranged.len(), racks.len());
    indexes
        .map(|index| {
            let index = index as usize;
            let first = (index + start) % broker_count;
            // Kafka shifts the second replica once per round of partitions over the brokers.
            let shift = start + index / broker_count;
            let mut replicas = vec![arranged[first]];
            let mut racks_used = vec![rack_of[&arranged[first]]];
            let mut k = 0;
            while replicas.len() < replication_factor {
                let step = 1 + (shift * rack_count + k) % (broker_count - 1);
                let broker = arranged[(first + step) % broker_count];
                let rack = rack_of[&broker];
                let rack_free = !racks_used.contains(&rack) || racks_used.len() == rack_count;
                // A broker already chosen is skipped while another is left (always, as the
                // replication factor is at most the broker count).
                if rack_free && !replicas.contains(&broker) {
                    replicas.push(broker);
                    if !racks_used.contains(&rack) {
                        racks_used.push(rack);
                    }
                }
                k += 1;
            }
            replicas
        })
        .collect()
}

/// The brokers listed one per rack in turn (Kafka's `getRackAlternatedBrokerList`): racks in
/// order, each rack's brokers in id order, e.g. a: [1, 2], b: [3], c: [4, 5] → 1, 3, 4, 2, 5.
fn rack_alternated(racks: &BTreeMap<Option<&str>, Vec<i32>>) -> Vec<i32> {
    let deepest = racks.values().map(Vec::len).max().unwrap_or(0);
    (0..deepest)
        .flat_map(|depth| {
            racks
                .values()
                .filter_map(move |ids| ids.get(depth).copied())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn brokers(racks: &[(i32, Option<&str>)]) -> Vec<Candidate> {
        racks
            .iter()
            .map(|&(id, rack)| Candidate {
                id,
                rack: rack.map(str::to_string),
            })
            .collect()
    }

    fn racks_of(brokers: &[Candidate], replicas: &[i32]) -> BTreeSet<Option<String>> {
        replicas
            .iter()
            .map(|id| brokers.iter().find(|b| b.id == *id).unwrap().rack.clone())
            .collect()
    }

    #[test]
    fn without_racks_replicas_are_striped() {
        let three = brokers(&[(1, None), (2, None), (3, None)]);
        assert_eq!(
            place(&three, 0..4, 2, 1),
            vec![vec![2, 3], vec![3, 1], vec![1, 2], vec![2, 3]]
        );
    }

    #[test]
    fn brokers_alternate_racks() {
        let racks: BTreeMap<Option<&str>, Vec<i32>> = [
            (Some("a"), vec![1, 2]),
            (Some("b"), vec![3]),
            (Some("c"), vec![4, 5]),
        ]
        .into_iter()
        .collect();
        assert_eq!(rack_alternated(&racks), vec![1, 3, 4, 2, 5]);
    }

    #[test]
    fn each_partition_spans_as_many_racks_as_it_can_and_leaders_spread() {
        let six = brokers(&[
            (1, Some("a")),
            (2, Some("a")),
            (3, Some("b")),
            (4, Some("b")),
            (5, Some("c")),
            (6, Some("c")),
        ]);
        for start in 0..6 {
            let placed = place(&six, 0..12, 3, start);
            let mut led = BTreeMap::new();
            for replicas in &placed {
                let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
                assert_eq!(distinct.len(), 3, "{replicas:?}");
                assert_eq!(racks_of(&six, replicas).len(), 3, "{replicas:?}");
                *led.entry(replicas[0]).or_insert(0) += 1;
            }
            assert!(led.values().all(|&n| n == 2), "leaders spread: {led:?}");
        }
        // More replicas than racks: every rack first, then distinct brokers.
        for replicas in place(&six, 0..6, 4, 2) {
            assert_eq!(racks_of(&six, &replicas).len(), 3, "{replicas:?}");
            assert_eq!(replicas.iter().collect::<BTreeSet<_>>().len(), 4);
        }
    }

    #[test]
    fn uneven_racks_and_brokers_without_a_rack() {
        let mixed = brokers(&[(1, Some("a")), (2, Some("a")), (3, Some("a")), (4, None)]);
        for replicas in place(&mixed, 0..8, 2, 3) {
            assert_eq!(racks_of(&mixed, &replicas).len(), 2, "{replicas:?}");
        }
        for replicas in place(&mixed, 0..8, 4, 0) {
            assert_eq!(replicas.iter().collect::<BTreeSet<_>>().len(), 4);
        }
    }
}
