//! Network namespaces for tests that simulate machines: a hub namespace
//! with a bridge, one namespace per node on 10.213.0.<n>/24, and links that
//! can be cut and healed. Needs root and `ip`; everything is deleted on drop.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::skip::is_root;

/// Why namespace tests cannot run here (not root, or no `ip`), if so.
pub fn netns_unavailable() -> Option<&'static str> {
    if !is_root() {
        return Some("needs root to create network namespaces");
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("the `ip` command is missing");
    }
    None
}

/// Whether `nft` is here, for one-way cuts ([`Net::cut_one_way`]).
pub fn nft_available() -> bool {
    Command::new("nft").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Runs `ip ARGS`; its stderr on failure.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)))
    }
}

/// One node: its name, namespace, and the hub side of its veth pair.
struct Node {
    name: String,
    ns: String,
    hub_veth: String,
}

/// The namespaces of one test, deleted (with their veths and bridge) on drop.
pub struct Net {
    hub: String,
    nodes: Vec<Node>,
}

impl Net {
    /// A hub namespace with a bridge, and one namespace per node on
    /// 10.213.0.<n>/24 (node i gets address i+1).
    pub fn create(nodes: &[&str]) -> Result<Net, String> {
        // Unique per process and per call, so two tests of one process do
        // not collide; short, because interface names are at most 15 bytes.
        static CALLS: AtomicU32 = AtomicU32::new(0);
        let n = CALLS.fetch_add(1, Ordering::Relaxed) % 100;
        let tag = format!("sw{}x{n}", std::process::id() % 100_000);
        let hub = format!("{tag}-hub");
        ip(&["netns", "add", &hub])?;
        let mut net = Net { hub: hub.clone(), nodes: Vec::new() };
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for (i, node) in nodes.iter().enumerate() {
            let ns = format!("{tag}-{node}");
            ip(&["netns", "add", &ns])?;
            let (a, b) = (format!("{tag}h{i}"), format!("{tag}n{i}"));
            net.nodes.push(Node { name: node.to_string(), ns: ns.clone(), hub_veth: a.clone() });
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            ip(&["link", "set", &a, "netns", &hub])?;
            ip(&["link", "set", &b, "netns", &ns])?;
            ip(&["-n", &hub, "link", "set", &a, "master", "br0", "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("10.213.0.{}/24", i + 1), "dev", &b])?;
            ip(&["-n", &ns, "link", "set", &b, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn node(&self, node: &str) -> &Node {
        self.nodes.iter().find(|n| n.name == node).unwrap_or_else(|| panic!("no node {node}"))
    }

    /// The namespace of `node`.
    pub fn ns(&self, node: &str) -> String {
        self.node(node).ns.clone()
    }

    /// Cuts `node` off the bridge: its packets go nowhere until [`Net::heal`].
    pub fn cut(&self, node: &str) {
        let veth = &self.node(node).hub_veth;
        ip(&["-n", &self.hub, "link", "set", veth, "down"]).unwrap();
    }

    /// Drops the packets of `node`'s link going one way only (the bridge
    /// filters them in the hub), until [`Net::heal`]: a half-open link, on
    /// which what one side sends still arrives.
    pub fn cut_one_way(&self, node: &str, way: Way) {
        let veth = &self.node(node).hub_veth;
        let matching = match way {
            Way::ToNode => "oifname",
            Way::FromNode => "iifname",
        };
        let rules = format!(
            "table bridge cut_{veth} {{\n  chain forward {{ type filter hook forward priority 0; policy accept; {matching} \"{veth}\" drop; }}\n}}\n"
        );
        nft(&self.hub, &rules).unwrap();
    }

    /// Puts `node` back on the bridge, both ways.
    pub fn heal(&self, node: &str) {
        let veth = &self.node(node).hub_veth;
        ip(&["-n", &self.hub, "link", "set", veth, "up"]).unwrap();
        // A one-way cut's table, if there is one.
        let _ = nft(&self.hub, &format!("delete table bridge cut_{veth}\n"));
    }
}

/// Which packets a one-way cut drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Those sent to the node: it still talks, and hears nothing.
    ToNode,
    /// Those the node sends: it still hears, and nobody hears it.
    FromNode,
}

/// Loads `rules` into nftables in namespace `ns`.
fn nft(ns: &str, rules: &str) -> Result<(), String> {
    use std::io::Write as _;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("nft: no stdin")?
        .write_all(rules.as_bytes())
        .map_err(|e| format!("nft: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(format!("nft: {}", String::from_utf8_lossy(&out.stderr))) }
}

impl Drop for Net {
    fn drop(&mut self) {
        for n in &self.nodes {
            let _ = ip(&["netns", "del", &n.ns]);
        }
        let _ = ip(&["netns", "del", &self.hub]);
    }
}

/// A process killed on drop.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `bin` run inside namespace `ns` (through `ip netns exec`).
pub fn in_ns(ns: &str, bin: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(bin);
    c
}

/// The address `Net::create` gives its first node, where tests run the
/// controller.
pub const CONTROLLER_IP: &str = "10.213.0.1";

/// Certificates from `swarmctl certs init DIR --san <controller ip>`.
pub struct Pki {
    dir: std::path::PathBuf,
}

impl Pki {
    pub fn init(dir: &Path) -> Pki {
        let out = crate::wait_output(
            Command::new(crate::binary("swarmctl"))
                .args(["certs", "init"])
                .arg(dir)
                .args(["--san", CONTROLLER_IP])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
            crate::WAIT,
        );
        assert!(out.status.success(), "certs init: {}", crate::stderr(&out));
        Pki { dir: dir.to_path_buf() }
    }

    /// The path of one of its files, as an argument.
    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_string()
    }

    /// `--ca ca.pem --cert <role>.pem --key <role>.key`.
    pub fn client_args(&self, role: &str) -> Vec<String> {
        vec![
            "--ca".into(),
            self.file("ca.pem"),
            "--cert".into(),
            self.file(&format!("{role}.pem")),
            "--key".into(),
            self.file(&format!("{role}.key")),
        ]
    }
}

/// Starts `swarm-controller` over mTLS on `CONTROLLER_IP:7420` inside `ns`
/// (plus `extra` flags), logging to `<log_dir>/controller.log`, and waits
/// for its ready line. Returns it and its `https://` URL.
pub fn spawn_controller_in(
    ns: &str,
    repo: &Path,
    pki: &Pki,
    extra: &[&str],
    log_dir: &Path,
) -> (Killed, String) {
    use std::io::BufRead as _;
    let log_path = log_dir.join("controller.log");
    let mut controller = Killed(
        in_ns(ns, &crate::binary("swarm-controller"))
            .args(["--listen", &format!("{CONTROLLER_IP}:7420"), "--repo"])
            .arg(repo)
            .args(["--tls-cert", &pki.file("controller.pem"), "--tls-key", &pki.file("controller.key")])
            .args(["--client-ca", &pki.file("ca.pem")])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut lines = std::io::BufReader::new(controller.0.stdout.take().unwrap()).lines();
    let ready = lines.next();
    std::thread::spawn(move || for _ in lines {});
    assert!(
        matches!(&ready, Some(Ok(l)) if l.starts_with("listening on")),
        "controller not ready ({ready:?}):\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    (controller, format!("https://{CONTROLLER_IP}:7420"))
}

/// Clones `repo` for worker `id` and starts a `--remote` sidecar for it
/// inside `ns`, over mTLS with the sidecar certificate; logs to
/// `<dir>/<id>.log`.
pub fn spawn_remote_sidecar_in(ns: &str, id: &str, repo: &Path, url: &str, pki: &Pki, dir: &Path) -> Killed {
    let clone = dir.join(format!("clone-{id}"));
    let st = Command::new("git").args(["clone", "-q"]).arg(repo).arg(&clone).status().unwrap();
    assert!(st.success(), "git clone for {id}");
    let log = std::fs::File::create(dir.join(format!("{id}.log"))).unwrap();
    Killed(
        in_ns(ns, &crate::binary("swarm-sidecar"))
            .args(["--controller", url, "--remote", "--worker-id", id, "--repo"])
            .arg(&clone)
            .args(pki.client_args("sidecar"))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

/// Runs `swarmctl --controller URL AUTH.. ARGS..` inside `ns`, bounded.
pub fn swarmctl_in(ns: &str, url: &str, auth: &[String], args: &[&str]) -> std::process::Output {
    let child = in_ns(ns, &crate::binary("swarmctl"))
        .args(["--controller", url])
        .args(auth)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::wait_output(child, crate::WAIT)
}
