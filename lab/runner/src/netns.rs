//! Network namespaces and veth pairs through `ip`, and commands run inside a namespace.
//! The runner names a node's namespace with [`namespace`] (prefixed, so nothing outside
//! the lab is touched). The test fixtures of the workspace use [`Netns`] (one namespace
//! that lives as long as the value) and [`VethPair`] (two, joined, with the processes
//! started in them), under their own names.

use std::process::{Child, Command, Output, Stdio};

use anyhow::{Context, bail};

/// The namespace that stands for `node`.
pub fn namespace(node: &str) -> String {
    format!("{PREFIX}{node}")
}

/// Whether the named network namespace exists.
pub fn exists(ns: &str) -> bool {
    std::path::Path::new("/run/netns").join(ns).exists()
}

/// A fresh namespace with `lo` up (one left behind by a crashed run is replaced).
pub fn create(ns: &str) -> anyhow::Result<()> {
    delete(ns);
    ip(&["netns", "add", ns])?;
    ip(&["-n", ns, "link", "set", "lo", "up"])
}

/// Deletes the namespace (its veths go with it); a missing one is fine.
pub fn delete(ns: &str) {
    if exists(ns) {
        let _ = Command::new("ip")
            .args(["netns", "del", ns])
            .stderr(Stdio::null())
            .status();
    }
}

/// The nodes whose lab namespace exists, including ones a crashed run left behind.
pub fn lab_nodes() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter_map(|name| name.strip_prefix(PREFIX).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A namespace that exists for as long as this value: created fresh (one a crashed
/// run left is replaced), deleted on drop.
pub struct Netns(String);

impl Netns {
    /// Creates the namespace `name` with `lo` up.
    pub fn create(name: impl Into<String>) -> anyhow::Result<Netns> {
        let name = name.into();
        create(&name)?;
        Ok(Netns(name))
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        delete(&self.0);
    }
}

/// Two namespaces joined by a veth pair with an address at each end, and the processes
/// started inside them. On drop the processes are killed by PID, then the namespaces
/// (and the veths with them) are deleted.
pub struct VethPair {
    /// The first end's namespace.
    pub a: Netns,
    /// The second end's namespace.
    pub b: Netns,
    children: Vec<Child>,
}

impl VethPair {
    /// `a` and `b` are (namespace, interface, address with prefix length).
    pub fn new(a: (&str, &str, &str), b: (&str, &str, &str)) -> anyhow::Result<VethPair> {
        let pair = VethPair {
            a: Netns::create(a.0)?,
            b: Netns::create(b.0)?,
            children: Vec::new(),
        };
        veth((a.0, a.1), (b.0, b.1))?;
        for (ns, interface, address) in [a, b] {
            run_ok(ns, &format!("ip addr add {address} dev {interface}"))?;
        }
        Ok(pair)
    }

    /// Starts a program inside `ns` (one of the pair's), logging to `log`; returns its PID.
    pub fn spawn(&mut self, ns: &str, args: &[&str], log: &std::path::Path) -> u32 {
        let child =
            spawn_logged(ns, args, log).unwrap_or_else(|e| panic!("{ns}: starting {args:?}: {e}"));
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// Whether the process `pid` started by [`VethPair::spawn`] has exited.
    pub fn exited(&mut self, pid: u32) -> bool {
        self.children
            .iter_mut()
            .find(|child| child.id() == pid)
            .is_some_and(|child| child.try_wait().ok().flatten().is_some())
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A veth pair, each end created in its namespace under its final name, both up.
/// Each side is (namespace, interface).
pub fn veth(a: (&str, &str), b: (&str, &str)) -> anyhow::Result<()> {
    ip(&[
        "link", "add", a.1, "netns", a.0, "type", "veth", "peer", "name", b.1, "netns", b.0,
    ])?;
    ip(&["-n", a.0, "link", "set", a.1, "up"])?;
    ip(&["-n", b.0, "link", "set", b.1, "up"])
}

/// Runs a shell command line inside the namespace and returns its output.
pub fn run(ns: &str, command_line: &str) -> anyhow::Result<Output> {
    Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", command_line])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("{ns}: {command_line}"))
}

/// Like [`run`], failing with the command's stderr when it fails.
pub fn run_ok(ns: &str, command_line: &str) -> anyhow::Result<String> {
    let output = run(ns, command_line)?;
    if !output.status.success() {
        bail!(
            "{ns}: `{command_line}` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs a program (argv, no shell) inside the namespace; its stdout, whatever its exit.
pub fn output(ns: &str, args: &[&str]) -> String {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default()
}

/// Starts a program (argv, no shell) inside the namespace with its stdout and stderr
/// appended to `log`; the caller owns (and stops) the child.
pub fn spawn_logged(ns: &str, args: &[&str], log: &std::path::Path) -> std::io::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
}

/// A command prepared to run inside the namespace, in a session of its own so it
/// outlives the runner.
pub fn command(ns: &str, command_line: &str) -> Command {
    let mut command = Command::new("setsid");
    command.args([
        "ip",
        "netns",
        "exec",
        ns,
        "sh",
        "-c",
        &format!("exec {command_line}"),
    ]);
    command
}

/// `argv` run inside the namespace as it is (no shell), in a session of its own.
pub fn command_argv(ns: &str, argv: &[String]) -> Command {
    let mut command = Command::new("setsid");
    command.args(["ip", "netns", "exec", ns]).args(argv);
    command
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !output.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

const PREFIX: &str = "lab-";
