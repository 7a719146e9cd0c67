//! A network partition cuts the leader of a replicated partition (RF 3,
//! `min.insync.replicas=2`) off from the other two nodes, and Kafka's promises hold. Each node
//! runs in a network namespace of its own, joined to the root namespace by a veth pair
//! (10.O.N.1/30 on the root side, 10.O.N.2/30 inside), the namespaces reaching each other
//! through the root namespace (`ip_forward`); the test stays in the root namespace and reaches
//! every node throughout. A partition is blackhole routes: inside the cut node's namespace to
//! the other two, inside theirs to it. It happens twice: to the active controller, so that
//! the metadata quorum moves as well as the leadership, then to a leader that is not the
//! controller, which cannot reach the controller with its ISR change.
//! - Cut off, the old leader answers no acks=all write successfully (its followers stop
//!   fetching, and the shrink of its ISR cannot be committed: the controller is on the other
//!   side) and its consumers see nothing past what every replica held; it still takes acks=1
//!   writes alone, as Kafka allows.
//! - The other two elect a new leader from the ISR within a bounded time (printed) and
//!   acks=all goes on there, in a newer leader epoch.
//! - Healed, the old leader follows the new one, truncates what only it held and rejoins the
//!   ISR: every node's log of every partition holds the same batches, byte for byte, at the
//!   same offsets as the leader serves them (read from each node's segment files, as Kafka's
//!   DumpLogSegments reads them), and that log is exactly what was acknowledged with acks=all,
//!   each record once, in order, with none of what the old leader took alone.
//!
//! Every wait is bounded. Namespaces, links and routes carry the test's pid in their names and
//! are removed at the end, on a panic too. Without root or iproute2 the test says why and
//! passes, except under CI (`CI` set), where it fails.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{wait_for, Cluster};
use common::replicated::{
    leaders_among, produce_round, wait_isr, wait_readable, with_topic, Acknowledged, TOPIC,
};
use common::{
    batch, fetch_at, metadata, produce_answer, produce_request, read_values, values, Client, Host,
};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, RequestKind};

/// Every node listens on its own address, so fixed ports do.
const CLIENT_PORT: u16 = 9092;
const CONTROLLER_PORT: u16 = 9093;
/// The Produce timeout of writes to the node cut off: an acks=all write there must end in an
/// error, and this keeps each attempt short.
const CUT_OFF_TIMEOUT_MS: i32 = 1_000;
/// A new leader is due within the broker session (1.5 s) and a quorum election (about 2 s)
/// of the cut; this leaves room for a slow machine.
const ELECTION_MAX: Duration = Duration::from_secs(15);
const NODES: [i32; 3] = [1, 2, 3];
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

#[test]
fn a_leader_cut_off_acknowledges_no_acks_all_write_and_truncates_what_it_took_alone() {
    let network = match Network::create() {
        Ok(network) => network,
        Err(reason) if std::env::var_os("CI").is_some() => {
            panic!("CI must run this test, but {reason}")
        }
        Err(reason) => {
            eprintln!("network_partition skipped: {reason}");
            return;
        }
    };
    let hosts = NODES.iter().map(|&id| (id, network.host(id))).collect();
    // Followers retry a moved leader soon; a leader cut off tries to shrink its ISR soon.
    let settings = [
        "replica.fetch.backoff.ms=100",
        "replica.lag.time.max.ms=2000",
    ];
    let (cluster, _, mut acknowledged) = with_topic(Cluster::start_on(hosts, &settings));

    // First the active controller (leaders are striped over the brokers, so it leads a
    // partition): the metadata quorum moves as well as the leadership. Then a leader that is
    // not the controller: its ISR change goes to a controller it cannot reach.
    let controller = cluster.controller();
    cut_off_and_heal(&network, &cluster, controller, &mut acknowledged);
    let controller = cluster.controller();
    let leaders = leaders_among(&cluster, &NODES);
    let leader = *leaders
        .values()
        .find(|&&leader| leader != controller)
        .expect("a leader that is not the controller");
    cut_off_and_heal(&network, &cluster, leader, &mut acknowledged);
}

/// Cuts node `cut`, the leader of a partition, off from the two others while a client
/// writes to it, checks what it and the others answer, heals the partition and checks that
/// every log converges on what was acknowledged with acks=all (`acknowledged`, to which
/// this adds).
fn cut_off_and_heal(
    network: &Network,
    cluster: &Cluster,
    cut: i32,
    acknowledged: &mut Acknowledged,
) {
    let leaders = leaders_among(cluster, &NODES);
    let partition = *leaders
        .iter()
        .find(|&(_, &leader)| leader == cut)
        .expect("the node cut off leads a partition")
        .0;
    let others: Vec<i32> = NODES.iter().copied().filter(|&id| id != cut).collect();
    let before = leadership(cluster, cut, partition);
    let held_by_all = acknowledged[&partition].clone();
    println!(
        "cutting off node {cut}, leader of {TOPIC}-{partition} at epoch {} (controller: {})",
        before.epoch,
        cluster.controller()
    );

    network.cut_off(cut);
    let cut_at = Instant::now();
    let address = cluster.nodes[&cut].address();
    let stop = AtomicBool::new(false);
    let (new_leader, alone) = std::thread::scope(|scope| {
        // A client keeps writing to the node cut off, acks=all and acks=1 in turn, until the
        // new leader has taken acks=all writes.
        let writer = scope.spawn(|| write_alone(address, cut, partition, &stop));
        let _stop = StopOnDrop(&stop);

        let new_leader = wait_for(|| {
            let seen: Vec<Leadership> = others
                .iter()
                .map(|&id| leadership(cluster, id, partition))
                .collect();
            let agreed = seen.iter().all(|s| *s == seen[0]);
            let moved = others.contains(&seen[0].leader) && seen[0].epoch > before.epoch;
            (agreed && moved).then(|| seen[0].clone())
        });
        let election = cut_at.elapsed();
        println!(
            "node {} leads {TOPIC}-{partition} at epoch {} (ISR {:?}) {election:?} after the cut",
            new_leader.leader, new_leader.epoch, new_leader.isr
        );
        assert!(
            before.isr.contains(&new_leader.leader),
            "the new leader comes from the ISR"
        );
        assert!(
            election < ELECTION_MAX,
            "a new leader took {election:?}, more than {ELECTION_MAX:?}"
        );
        // Every partition settles on the two: the old leader is out of every ISR, and acks=all
        // is answered on each, the cut-off node's former partition included.
        let leaders = leaders_among(cluster, &others);
        assert_eq!(leaders[&partition], new_leader.leader);
        let round = format!("while-{cut}-is-cut-off");
        produce_round(cluster, &leaders, &round, -1, 0, acknowledged);
        wait_readable(cluster, &leaders, acknowledged);

        // The old leader, still cut off, believes it leads at its old epoch: yet consumers
        // there see nothing past what every replica held, and acks=all is still refused
        // while the new leader takes it.
        let mut client = cluster.client(cut);
        assert_eq!(
            leadership(cluster, cut, partition).epoch,
            before.epoch,
            "the node cut off learns nothing"
        );
        assert_eq!(
            read_values(&mut client, TOPIC, partition),
            held_by_all,
            "the node cut off serves what its followers never held"
        );
        let late = Bytes::from(format!("alone-on-{cut}-all-late"));
        let code = produce_within(&mut client, partition, &late, -1);
        assert_ne!(
            code, 0,
            "the node cut off acknowledged an acks=all write after node {} took over",
            new_leader.leader
        );
        stop.store(true, Ordering::Relaxed);
        let mut alone = writer.join().expect("the writer ends");
        alone.all.push((late, code));
        (new_leader, alone)
    });
    alone.check();
    // What it took alone is in its log, after what every replica held: the comparison of the
    // logs after the heal proves it was cut away.
    let stored = stored_batches(&cluster.dirs[&cut], partition).expect("the log reads");
    let stored: Vec<Bytes> = stored.iter().flat_map(values).collect();
    assert!(stored.starts_with(&held_by_all), "{stored:?}");
    for (value, _) in &alone.one {
        assert!(
            stored.contains(value),
            "node {cut} lost {value:?}: {stored:?}"
        );
    }

    network.heal();
    let healed_at = Instant::now();
    // The old leader catches up with the quorum, is unfenced, truncates, fetches and rejoins
    // every ISR; every node gives the same account of the cluster.
    wait_isr(cluster, &NODES);
    let rejoined = healed_at.elapsed();
    cluster.wait_agreed();
    let after = leadership(cluster, cut, partition);
    assert_eq!(
        (after.leader, after.epoch),
        (new_leader.leader, new_leader.epoch),
        "node {cut} follows the new leader"
    );
    let leaders = leaders_among(cluster, &NODES);
    let round = format!("after-{cut}-healed");
    produce_round(cluster, &leaders, &round, -1, 0, acknowledged);
    wait_readable(cluster, &leaders, acknowledged);

    // Every replica of every partition holds the leader's batches, byte for byte.
    let mut batches_compared = 0;
    for (&p, &leader) in &leaders {
        let served = served_batches(&mut cluster.client(leader), p);
        batches_compared += served.len();
        for (&id, dir) in &cluster.dirs {
            wait_same_log(id, dir, p, &served);
        }
        let log: Vec<Bytes> = served.iter().flat_map(values).collect();
        for (value, _) in alone.all.iter().chain(&alone.one) {
            assert!(
                !log.contains(value),
                "{TOPIC}-{p} holds {value:?}, which node {cut} took alone"
            );
        }
        assert_eq!(
            log, acknowledged[&p],
            "{TOPIC}-{p} holds exactly what was acknowledged with acks=all, each once, in order"
        );
    }
    println!(
        "healed: node {cut} back in every ISR after {rejoined:?}, every log the same after {:?} \
         ({batches_compared} batches on each node)",
        healed_at.elapsed()
    );
}

/// A partition's leadership as one node answers.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Leadership {
    leader: i32,
    epoch: i32,
    isr: Vec<i32>,
}

fn leadership(cluster: &Cluster, id: i32, partition: i32) -> Leadership {
    let answer = metadata(&mut cluster.client(id), &[TOPIC]);
    let found = &answer.topics[0].partitions[partition as usize];
    assert_eq!(found.partition_index, partition);
    let mut isr: Vec<i32> = found.isr_nodes.iter().map(|id| id.0).collect();
    isr.sort_unstable();
    Leadership {
        leader: found.leader_id.0,
        epoch: found.leader_epoch,
        isr,
    }
}

/// Produces one record of `value` with `acks` and a Produce timeout of
/// [`CUT_OFF_TIMEOUT_MS`]: the answer's error code.
fn produce_within(client: &mut Client, partition: i32, value: &[u8], acks: i16) -> i16 {
    let request = produce_request(TOPIC, partition, batch(&[value]), acks)
        .with_timeout_ms(CUT_OFF_TIMEOUT_MS);
    client.send(ApiKey::Produce, 9, &RequestKind::Produce(request));
    produce_answer(client).0
}

/// What was written to the node cut off, and how it answered: (value, error code).
struct WrittenAlone {
    all: Vec<(Bytes, i16)>,
    one: Vec<(Bytes, i16)>,
}

impl WrittenAlone {
    /// Not one acks=all write succeeded; every acks=1 write did (the leader's write alone is
    /// all acks=1 asks, and the node knows of no other leader).
    fn check(&self) {
        let mut codes: BTreeMap<i16, usize> = BTreeMap::new();
        for (value, code) in &self.all {
            assert_ne!(
                *code, 0,
                "the node cut off acknowledged {value:?}, an acks=all write"
            );
            *codes.entry(*code).or_default() += 1;
        }
        let answers: Vec<String> = codes
            .iter()
            .map(|(code, count)| {
                let name = ResponseError::try_from_code(*code)
                    .map_or_else(|| "an unknown error".to_string(), |e| format!("{e:?}"));
                format!("{count} × {name} ({code})")
            })
            .collect();
        println!(
            "the node cut off answered {} acks=all writes with {} and acknowledged {} acks=1 \
             writes",
            self.all.len(),
            answers.join(", "),
            self.one.len()
        );
        for (value, code) in &self.one {
            assert_eq!(*code, 0, "acks=1 write {value:?} to the node cut off");
        }
        assert!(!self.one.is_empty(), "the node cut off took writes alone");
    }
}

/// Writes to `partition` on node `id` at `address` until `stop`, acks=all then acks=1, one
/// record each; bounded by the harness's wait even if nobody stops it.
fn write_alone(address: SocketAddr, id: i32, partition: i32, stop: &AtomicBool) -> WrittenAlone {
    let deadline = Instant::now() + common::cluster::WAIT;
    let mut client = Client::connect_to(address);
    let mut written = WrittenAlone {
        all: Vec::new(),
        one: Vec::new(),
    };
    for i in 0.. {
        if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
            break;
        }
        let value = Bytes::from(format!("alone-on-{id}-all-{i}"));
        let code = produce_within(&mut client, partition, &value, -1);
        written.all.push((value, code));
        let value = Bytes::from(format!("alone-on-{id}-one-{i}"));
        let code = produce_within(&mut client, partition, &value, 1);
        written.one.push((value, code));
    }
    written
}

/// Stops the writer however the scope ends (a failed check must not wait on it).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Every batch the leader serves of `partition` (up to its high watermark), in offset
/// order, as it sends them.
fn served_batches(client: &mut Client, partition: i32) -> Vec<Bytes> {
    let mut batches = Vec::new();
    let mut offset = 0;
    while let Some(records) = fetch_at(client, TOPIC, partition, offset) {
        let whole = split_batches(&records);
        assert!(
            !whole.is_empty(),
            "a fetch at {offset} brings a whole batch"
        );
        for batch in whole {
            let header = storage::batch::check_batch(&batch).expect("a served batch is valid");
            assert!(
                header.base_offset >= offset,
                "batches arrive in offset order"
            );
            offset = header.last_offset() + 1;
            batches.push(batch);
        }
    }
    batches
}

/// The whole, valid batches at the start of `bytes`, up to the first that is not (a
/// partial batch, or the zero padding past a segment's end).
fn split_batches(bytes: &Bytes) -> Vec<Bytes> {
    let mut batches = Vec::new();
    let mut position = 0;
    while let Ok(header) = storage::batch::check_batch(&bytes[position..]) {
        let end = position + header.total_bytes();
        batches.push(bytes.slice(position..end));
        position = end;
    }
    batches
}

/// Waits until node `id`'s copy of `partition` (its segment files under `dir`) is
/// `served`, batch for batch; panics showing both if it is not within the harness's wait.
fn wait_same_log(id: i32, dir: &Path, partition: i32, served: &[Bytes]) {
    let deadline = Instant::now() + common::cluster::WAIT;
    loop {
        let stored = stored_batches(dir, partition);
        if stored.as_deref() == Some(served) {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "node {id}'s log of {TOPIC}-{partition} is not the leader's:\nstored:\n{}\n\
                 served:\n{}",
                describe(&stored.unwrap_or_default()),
                describe(served)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One line per batch: offsets, leader epoch, CRC and record values.
fn describe(batches: &[Bytes]) -> String {
    let lines: Vec<String> = batches
        .iter()
        .map(|batch| {
            let header = storage::batch::check_batch(batch).expect("a valid batch");
            format!(
                "  {}..={} epoch {} crc {:08x} {:?}",
                header.base_offset,
                header.last_offset(),
                header.partition_leader_epoch,
                header.crc,
                values(batch)
            )
        })
        .collect();
    lines.join("\n")
}

/// Every batch node directory `dir` holds of `partition`, from its segment files in offset
/// order; `None` while a file changes under the read.
fn stored_batches(dir: &Path, partition: i32) -> Option<Vec<Bytes>> {
    let dir = dir.join("data").join(format!("{TOPIC}-{partition}"));
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            (path.extension()? == "log").then_some(path)
        })
        .collect();
    // Names are zero-padded base offsets.
    segments.sort();
    let mut batches = Vec::new();
    for segment in segments {
        let bytes = Bytes::from(std::fs::read(segment).ok()?);
        batches.extend(split_batches(&bytes));
    }
    Some(batches)
}

/// Three network namespaces, one per node, each joined to the root namespace by a veth pair,
/// with forwarding on in the root namespace; the blackhole routes of a partition. Dropped, it
/// removes all it made and restores `ip_forward`.
struct Network {
    /// The start of every name: the test's pid, so that runs never share one.
    prefix: String,
    /// The second byte of every address, one that no root-namespace route uses.
    octet: u8,
    /// What was made so far, removed in the end.
    namespaces: Vec<String>,
    root_links: Vec<String>,
    ip_forward_before: Option<String>,
    /// The blackhole routes in place: (namespace, address).
    cuts: RefCell<Vec<(String, Ipv4Addr)>>,
}

impl Network {
    /// The namespaces and links of three nodes; an error only if this process cannot create
    /// network namespaces at all (no `ip`, not root).
    fn create() -> Result<Network, String> {
        match Command::new("ip").arg("-V").output() {
            Ok(output) if output.status.success() => {}
            Ok(output) => return Err(format!("`ip -V` failed: {output:?}")),
            Err(error) => return Err(format!("`ip` (iproute2) does not run: {error}")),
        }
        let prefix = format!("rlnp{}", std::process::id());
        let mut network = Network {
            octet: free_octet(std::process::id()),
            prefix,
            namespaces: Vec::new(),
            root_links: Vec::new(),
            ip_forward_before: None,
            cuts: RefCell::new(Vec::new()),
        };
        let first = network.netns(NODES[0]);
        try_ip(&["netns", "add", &first])
            .map_err(|error| format!("this process cannot create network namespaces: {error}"))?;
        network.namespaces.push(first);
        for id in NODES {
            network.join(id);
        }
        let before = std::fs::read_to_string(IP_FORWARD).expect("ip_forward reads");
        network.ip_forward_before = Some(before);
        std::fs::write(IP_FORWARD, "1").expect("ip_forward set");
        Ok(network)
    }

    /// Gives node `id` its namespace, if it has none yet, and its link to the root
    /// namespace.
    fn join(&mut self, id: i32) {
        let netns = self.netns(id);
        if !self.namespaces.contains(&netns) {
            ip(&["netns", "add", &netns]);
            self.namespaces.push(netns.clone());
        }
        // Link names have at most 15 bytes: rlnp, a pid of up to 7 digits, r or n, the id.
        let (root_link, inner_link) = (
            format!("{}r{id}", self.prefix),
            format!("{}n{id}", self.prefix),
        );
        ip(&[
            "link",
            "add",
            &root_link,
            "type",
            "veth",
            "peer",
            "name",
            &inner_link,
        ]);
        self.root_links.push(root_link.clone());
        ip(&["link", "set", &inner_link, "netns", &netns]);
        let root_address = format!("{}/30", self.root_ip(id));
        ip(&["addr", "add", &root_address, "dev", &root_link]);
        ip(&["link", "set", &root_link, "up"]);
        let inner_address = format!("{}/30", self.ip(id));
        ip(&["-n", &netns, "link", "set", "lo", "up"]);
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &inner_address,
            "dev",
            &inner_link,
        ]);
        ip(&["-n", &netns, "link", "set", &inner_link, "up"]);
        let gateway = self.root_ip(id).to_string();
        ip(&["-n", &netns, "route", "add", "default", "via", &gateway]);
    }

    fn netns(&self, id: i32) -> String {
        format!("{}-{id}", self.prefix)
    }

    /// Node `id`'s address, inside its namespace.
    fn ip(&self, id: i32) -> Ipv4Addr {
        Ipv4Addr::new(10, self.octet, id as u8, 2)
    }

    /// The root namespace's end of node `id`'s link: its namespace's gateway.
    fn root_ip(&self, id: i32) -> Ipv4Addr {
        Ipv4Addr::new(10, self.octet, id as u8, 1)
    }

    fn host(&self, id: i32) -> Host {
        Host::Netns {
            netns: self.netns(id),
            ip: IpAddr::V4(self.ip(id)),
            client_port: CLIENT_PORT,
            controller_port: CONTROLLER_PORT,
        }
    }

    /// Cuts node `id` off from the others, both ways; the root namespace still reaches all.
    fn cut_off(&self, id: i32) {
        for other in NODES.into_iter().filter(|&other| other != id) {
            self.blackhole(id, self.ip(other));
            self.blackhole(other, self.ip(id));
        }
    }

    fn blackhole(&self, id: i32, address: Ipv4Addr) {
        let netns = self.netns(id);
        ip(&[
            "-n",
            &netns,
            "route",
            "add",
            "blackhole",
            &format!("{address}/32"),
        ]);
        self.cuts.borrow_mut().push((netns, address));
    }

    /// Removes every blackhole route.
    fn heal(&self) {
        for (netns, address) in self.cuts.take() {
            ip(&[
                "-n",
                &netns,
                "route",
                "del",
                "blackhole",
                &format!("{address}/32"),
            ]);
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Removing one end of a veth pair removes both; a namespace goes once its last
        // process has (the nodes are killed before this runs).
        for link in &self.root_links {
            let _ = try_ip(&["link", "del", link]);
        }
        for netns in &self.namespaces {
            let _ = try_ip(&["netns", "del", netns]);
        }
        if let Some(before) = &self.ip_forward_before {
            let _ = std::fs::write(IP_FORWARD, before);
        }
    }
}

/// A second address byte from 100 to 199, from `pid` on, that no route of the root
/// namespace uses (`10.O.` appears in none).
fn free_octet(pid: u32) -> u8 {
    let routes = Command::new("ip")
        .args(["-4", "route", "show", "table", "all"])
        .output()
        .expect("ip route runs");
    let routes = String::from_utf8_lossy(&routes.stdout);
    (0..100)
        .map(|i| 100 + ((pid + i) % 100) as u8)
        .find(|octet| !routes.contains(&format!("10.{octet}.")))
        .expect("a free 10.O.0.0/16")
}

/// Runs `ip args`; the error is its stderr.
fn try_ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}

#[track_caller]
fn ip(args: &[&str]) {
    if let Err(error) = try_ip(args) {
        panic!("{error}");
    }
}
