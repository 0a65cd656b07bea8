//! One host per node: a network namespace each, with its own address on a
//! bridge that lives in a namespace of its own, and one veth from the
//! harness's namespace onto that bridge so the harness (clients, resource)
//! reaches every node. Network faults are iptables rules inside a node's
//! namespace, so they touch nothing outside what this run created.
//!
//! Names carry the harness PID, so two runs never collide, and everything
//! is deleted by name when [`Hosts`] is dropped (also on panic).

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};

use leasehold_proto::NodeId;

/// The port every node listens on, each in its own namespace.
pub const NODE_PORT: u16 = 7700;

#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error("network namespaces need root")]
    NotRoot,
    #[error("`{command}` failed: {message}")]
    Command { command: String, message: String },
}

/// The namespaces and links of one run.
pub struct Hosts {
    bridge_ns: String,
    host_link: String,
    node_ns: Vec<String>,
    /// Third octet of 10.213.X.0/24, from the PID.
    subnet: u8,
}

/// Runs `ip`/`iptables` style commands, turning failures into [`HostsError`].
fn sh(args: &[&str]) -> Result<(), HostsError> {
    let output = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HostsError::Command { command: args.join(" "), message: e.to_string() })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(HostsError::Command {
            command: args.join(" "),
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

impl Hosts {
    /// Creates the bridge and `nodes` node namespaces.
    pub fn create(nodes: usize) -> Result<Hosts, HostsError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(HostsError::NotRoot);
        }
        let pid = std::process::id();
        let run = format!("lhchaos-{pid}");
        let mut hosts = Hosts {
            bridge_ns: format!("{run}-br"),
            // Interface names have at most 15 bytes.
            host_link: format!("lhc{}", pid % 10_000_000),
            node_ns: Vec::new(),
            // A private /24 unlikely to be in use, varied by PID.
            subnet: 20 + (pid % 200) as u8,
        };
        // From here on Drop removes whatever was made, if a step fails.
        sh(&["ip", "netns", "add", &hosts.bridge_ns])?;
        let br = hosts.bridge_ns.clone();
        sh(&["ip", "-n", &br, "link", "add", "br0", "type", "bridge"])?;
        sh(&["ip", "-n", &br, "link", "set", "br0", "up"])?;
        sh(&["ip", "link", "add", &hosts.host_link, "type", "veth", "peer", "name", "harness", "netns", &br])?;
        sh(&["ip", "-n", &br, "link", "set", "harness", "master", "br0", "up"])?;
        sh(&["ip", "addr", "add", &format!("{}/24", hosts.harness_ip()), "dev", &hosts.host_link])?;
        sh(&["ip", "link", "set", &hosts.host_link, "up"])?;
        for id in 1..=nodes as NodeId {
            let ns = format!("{run}-n{id}");
            sh(&["ip", "netns", "add", &ns])?;
            hosts.node_ns.push(ns.clone());
            let port = format!("n{id}");
            sh(&["ip", "-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            sh(&["ip", "-n", &br, "link", "set", &port, "master", "br0", "up"])?;
            sh(&["ip", "-n", &ns, "addr", "add", &format!("{}/24", hosts.node_ip(id)), "dev", "eth0"])?;
            sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    /// A one-line description for the run's output.
    pub fn describe(&self) -> String {
        format!(
            "network namespaces {}-n1..n{} on bridge 10.213.{}.0/24 (harness at {})",
            self.bridge_ns.trim_end_matches("-br"),
            self.node_ns.len(),
            self.subnet,
            self.harness_ip()
        )
    }

    pub fn harness_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 1)
    }

    pub fn node_ip(&self, id: NodeId) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 10 + id as u8)
    }

    /// Every node's listen address, node 1 first.
    pub fn node_addrs(&self) -> Vec<SocketAddr> {
        (1..=self.node_ns.len() as NodeId).map(|id| SocketAddr::from((self.node_ip(id), NODE_PORT))).collect()
    }

    /// The command prefix that runs a program in node `id`'s namespace.
    pub fn launcher(&self, id: NodeId) -> Vec<String> {
        ["ip", "netns", "exec", self.ns(id)].map(String::from).to_vec()
    }

    fn ns(&self, id: NodeId) -> &str {
        &self.node_ns[id as usize - 1]
    }

    fn iptables(&self, id: NodeId, rule: &[&str]) -> Result<(), HostsError> {
        let mut args = vec!["ip", "netns", "exec", self.ns(id), "iptables"];
        args.extend_from_slice(rule);
        sh(&args)
    }

    /// Drops every packet between node `id` and the nodes in `others`, in
    /// both directions (rules in `id`'s namespace suffice: what it does not
    /// send or receive does not cross).
    pub fn isolate(&self, id: NodeId, others: &[NodeId]) -> Result<(), HostsError> {
        for other in others {
            let ip = self.node_ip(*other).to_string();
            self.iptables(id, &["-A", "INPUT", "-s", &ip, "-j", "DROP"])?;
            self.iptables(id, &["-A", "OUTPUT", "-d", &ip, "-j", "DROP"])?;
        }
        Ok(())
    }

    /// Drops `percent`% of node `id`'s packets at random, both directions.
    pub fn lossy(&self, id: NodeId, percent: u32) -> Result<(), HostsError> {
        let probability = format!("{:.2}", percent as f64 / 100.0);
        for chain in ["INPUT", "OUTPUT"] {
            let rule =
                ["-A", chain, "-m", "statistic", "--mode", "random", "--probability", &probability, "-j", "DROP"];
            self.iptables(id, &rule)?;
        }
        Ok(())
    }

    /// Removes every rule in node `id`'s namespace.
    pub fn heal(&self, id: NodeId) -> Result<(), HostsError> {
        self.iptables(id, &["-F"])
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth ends inside it, and so their
        // peers; the host link is deleted by name in case the bridge
        // namespace was never made.
        for ns in &self.node_ns {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        let _ = sh(&["ip", "link", "del", &self.host_link]);
        let _ = sh(&["ip", "netns", "del", &self.bridge_ns]);
    }
}
