//! A network namespace of the test's own, joined to this host by veth links on private
//! addresses (10.x.y.z/30: the host's end .1, the namespace's .2), each of which can be cut and
//! healed (`ip link set down` / `up` on the host's end: whatever the namespace sends on it is
//! dropped, silently, as on a cut cable), to partition a process inside from one server while
//! another stays reachable. Needs root, which CI has; removed when dropped, or by a watcher when
//! the test process ends first.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// One veth link between the host and the namespace.
#[derive(Debug, Clone)]
pub struct Link {
    /// The host's end of the veth pair.
    host_dev: String,
    /// The host's address on it: a server the namespace should reach over this link listens
    /// here.
    pub host_ip: Ipv4Addr,
    /// The namespace's address on it.
    pub ns_ip: Ipv4Addr,
}

/// A namespace and its links; deleted when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
    links: Vec<Link>,
}

impl Netns {
    /// A new namespace with `links` links to this host (at most 8) and its loopback up.
    pub fn create(links: usize) -> Result<Netns, String> {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        assert!((1..=8).contains(&links), "1 to 8 links");
        if !crate::pg::running_as_root() {
            return Err(
                "network namespaces need root (ip netns add): run the tests as root, as CI does"
                    .to_owned(),
            );
        }
        let pid = std::process::id() % 100_000;
        let n = COUNT.fetch_add(1, Ordering::Relaxed) % 100;
        let name = format!("obx{pid}-{n}");
        let links: Vec<Link> = (0..links)
            .map(|i| {
                let base = [10, 200 + (pid % 50) as u8, n as u8, (i * 4) as u8];
                Link {
                    host_dev: format!("ox{pid}{n}{i}h"),
                    host_ip: Ipv4Addr::new(base[0], base[1], base[2], base[3] + 1),
                    ns_ip: Ipv4Addr::new(base[0], base[1], base[2], base[3] + 2),
                }
            })
            .collect();
        // Leftovers of an earlier process with the same pid.
        let _ = ip(&["netns", "del", &name]);
        for link in &links {
            let _ = ip(&["link", "del", &link.host_dev]);
        }
        let netns = Netns { name, links };
        netns.watch_this_process()?;
        ip(&["netns", "add", &netns.name])?;
        ip(&["-n", &netns.name, "link", "set", "lo", "up"])?;
        for link in &netns.links {
            let ns_dev = link.host_dev.replace('h', "n");
            ip(&[
                "link",
                "add",
                &link.host_dev,
                "type",
                "veth",
                "peer",
                "name",
                &ns_dev,
            ])?;
            ip(&["link", "set", &ns_dev, "netns", &netns.name])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/30", link.host_ip),
                "dev",
                &link.host_dev,
            ])?;
            ip(&["link", "set", &link.host_dev, "up"])?;
            ip(&[
                "-n",
                &netns.name,
                "addr",
                "add",
                &format!("{}/30", link.ns_ip),
                "dev",
                &ns_dev,
            ])?;
            ip(&["-n", &netns.name, "link", "set", &ns_dev, "up"])?;
        }
        Ok(netns)
    }

    /// The namespace's name, for `ip netns exec`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Link `i`.
    pub fn link(&self, i: usize) -> &Link {
        &self.links[i]
    }

    /// Cuts link `i`: what either side sends on it is lost.
    pub fn cut(&self, i: usize) -> Result<(), String> {
        ip(&["link", "set", &self.links[i].host_dev, "down"])
    }

    /// Heals link `i`.
    pub fn heal(&self, i: usize) -> Result<(), String> {
        ip(&["link", "set", &self.links[i].host_dev, "up"])
    }

    fn watch_this_process(&self) -> Result<(), String> {
        let links: Vec<String> = self
            .links
            .iter()
            .map(|l| format!("ip link del {} >/dev/null 2>&1;", l.host_dev))
            .collect();
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; ip netns del {name} >/dev/null 2>&1; {links}",
            pid = std::process::id(),
            name = self.name,
            links = links.join(" ")
        );
        crate::pg::spawn_watcher(&script, "network namespace")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
        for link in &self.links {
            let _ = ip(&["link", "del", &link.host_dev]);
        }
    }
}

/// Runs `ip` with `args`; its stderr in the error.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
