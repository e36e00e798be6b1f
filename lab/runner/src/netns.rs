//! Network namespaces and veth pairs through `ip`, and commands run inside a namespace.
//! Every name is prefixed so nothing outside the lab is touched.

use std::process::{Command, Output, Stdio};

use anyhow::{Context, bail};

/// The namespace that stands for `node`.
pub fn namespace(node: &str) -> String {
    format!("{PREFIX}{node}")
}

pub fn exists(node: &str) -> bool {
    std::path::Path::new("/run/netns")
        .join(namespace(node))
        .exists()
}

pub fn create(node: &str) -> anyhow::Result<()> {
    ip(&["netns", "add", &namespace(node)])?;
    ip(&["-n", &namespace(node), "link", "set", "lo", "up"])
}

/// Deletes the namespace (its veths go with it); a missing one is fine.
pub fn delete(node: &str) {
    let _ = Command::new("ip")
        .args(["netns", "del", &namespace(node)])
        .stderr(Stdio::null())
        .status();
}

/// Every lab namespace present, including ones a crashed run left behind.
pub fn leftovers() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter_map(|name| name.strip_prefix(PREFIX).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A veth pair with each end already in its node's namespace under its final name.
pub fn veth(a: (&str, &str), b: (&str, &str)) -> anyhow::Result<()> {
    let (ns_a, ns_b) = (namespace(a.0), namespace(b.0));
    ip(&[
        "link", "add", a.1, "netns", &ns_a, "type", "veth", "peer", "name", b.1, "netns", &ns_b,
    ])?;
    ip(&["-n", &ns_a, "link", "set", a.1, "up"])?;
    ip(&["-n", &ns_b, "link", "set", b.1, "up"])
}

/// Runs a shell command line inside the node's namespace and returns its output.
pub fn run(node: &str, command_line: &str) -> anyhow::Result<Output> {
    Command::new("ip")
        .args(["netns", "exec", &namespace(node), "sh", "-c", command_line])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("{node}: {command_line}"))
}

/// Like [`run`], failing with the command's stderr when it fails.
pub fn run_ok(node: &str, command_line: &str) -> anyhow::Result<String> {
    let output = run(node, command_line)?;
    if !output.status.success() {
        bail!(
            "{node}: `{command_line}` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A command prepared to run inside the node's namespace, in a session of its own so it
/// outlives the runner.
pub fn command(node: &str, command_line: &str) -> Command {
    let mut command = Command::new("setsid");
    command.args([
        "ip",
        "netns",
        "exec",
        &namespace(node),
        "sh",
        "-c",
        &format!("exec {command_line}"),
    ]);
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
