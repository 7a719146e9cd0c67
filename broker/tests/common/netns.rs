//! Three nodes each in a network namespace of its own, joined to the root namespace by a
//! veth pair (10.O.N.1/30 on the root side, 10.O.N.2/30 inside), the namespaces reaching
//! each other through the root namespace (`ip_forward`). The test stays in the root
//! namespace and reaches every node throughout, whatever partition is in place.
//!
//! A partition is blackhole routes: inside the cut node's namespace to the other two, inside
//! theirs to it. Namespaces and links carry the test's pid in their names; dropped,
//! [`Network`] removes all it made and restores `ip_forward`, on a panic too.

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

use super::Host;

pub const NODES: [i32; 3] = [1, 2, 3];
/// Every node listens on its own address, so fixed ports do.
pub const CLIENT_PORT: u16 = 9092;
pub const CONTROLLER_PORT: u16 = 9093;
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// Three network namespaces, one per node, each joined to the root namespace by a veth pair,
/// with forwarding on in the root namespace; the blackhole routes of a partition. Dropped, it
/// removes all it made and restores `ip_forward`.
pub struct Network {
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
    pub fn create() -> Result<Network, String> {
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

    /// Where node `id` runs: in its namespace, at its address, on the fixed ports.
    pub fn host(&self, id: i32) -> Host {
        Host::Netns {
            netns: self.netns(id),
            ip: IpAddr::V4(self.ip(id)),
            client_port: CLIENT_PORT,
            controller_port: CONTROLLER_PORT,
        }
    }

    /// Cuts node `id` off from the others, both ways; the root namespace still reaches all.
    pub fn cut_off(&self, id: i32) {
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
    pub fn heal(&self) {
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
