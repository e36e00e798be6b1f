//! PoP machines for the Ansible test: Debian booted by systemd-nspawn inside a lab
//! node's network namespace, so the lab's router, origin and client are its upstream and
//! its senders. Ansible reaches a machine over ssh across the lab; the test looks inside
//! with `run` (nsenter into the booted system: systemctl, journalctl, curl).
//!
//! Our hosts' PID 1 is not systemd, so nothing registers with machined: the machine is
//! the nspawn process, stopped by its PID (SIGTERM is a clean poweroff inside).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A booted Debian PoP machine (systemd-nspawn), reached through its namespace.
pub struct Machine {
    /// Its name (also its hostname and machine name).
    pub name: String,
    /// The network namespace it shares with its lab node.
    pub netns: String,
    root: PathBuf,
    /// Where its pidfile and console log are.
    dir: PathBuf,
    nspawn: Child,
    init: u32,
}

impl Machine {
    /// Unpacks `rootfs` (a tarball from `lab/machines/rootfs.sh`) into `dir/name`, lets
    /// `authorized_key` in as root, boots it in `netns` and waits until systemd is up.
    /// A machine left running by an earlier, crashed run in the same place is stopped.
    pub fn boot(
        name: &str,
        netns: &str,
        rootfs: &Path,
        dir: &Path,
        authorized_key: &str,
    ) -> anyhow::Result<Machine> {
        let root = dir.join(name);
        let pidfile = dir.join(format!("{name}.pid"));
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            // Not our child: init reaps it, so it is gone once kill(0) fails.
            stop(pid, || kill(Pid::from_raw(pid), None).is_err());
        }
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)?;
        run_ok(
            Command::new("tar")
                .arg("-C")
                .arg(&root)
                .args(["--zstd", "-xf"])
                .arg(rootfs),
        )?;
        std::fs::write(root.join("etc/hostname"), format!("{name}\n"))?;
        std::fs::create_dir_all(root.join("root/.ssh"))?;
        std::fs::write(root.join("root/.ssh/authorized_keys"), authorized_key)?;
        run_ok(Command::new("chroot").arg(&root).args(["ssh-keygen", "-A"]))?;

        let _ = std::fs::remove_file(dir.join(format!("{name}.console.log")));
        let nspawn = start_nspawn(name, netns, &root, dir)?;
        std::fs::write(&pidfile, nspawn.id().to_string())?;
        let mut machine = Machine {
            name: name.to_owned(),
            netns: netns.to_owned(),
            root,
            dir: dir.to_owned(),
            init: 0,
            nspawn,
        };
        machine.wait_for_systemd()?;
        Ok(machine)
    }

    /// Cuts the machine's power (SIGKILL to its init, PID 1 of its PID namespace: every
    /// process in it goes at once, nothing is stopped cleanly, and nspawn exits) and
    /// boots it again on the same disk: /etc and /var as they were, /run empty.
    pub fn power_cut_and_boot(&mut self) -> anyhow::Result<()> {
        let _ = kill(Pid::from_raw(self.init as i32), Signal::SIGKILL);
        let nspawn = &mut self.nspawn;
        let pid = nspawn.id() as i32;
        stop(pid, || nspawn.try_wait().ok().flatten().is_some());
        let _ = nspawn.wait();
        self.nspawn = start_nspawn(&self.name, &self.netns, &self.root, &self.dir)?;
        std::fs::write(
            self.dir.join(format!("{}.pid", self.name)),
            self.nspawn.id().to_string(),
        )?;
        self.wait_for_systemd()
    }

    /// Waits until the machine's systemd runs; "degraded" is fine: a fresh rootfs has
    /// services the roles configure later.
    fn wait_for_systemd(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + BOOT_TIMEOUT;
        self.init = self.wait_for_init(deadline)?;
        // "offline" until systemd's bus is up.
        loop {
            let state = self
                .run("systemctl is-system-running --wait")
                .unwrap_or_else(|e| format!("{e:#}"));
            match state.trim() {
                "running" | "degraded" => return Ok(()),
                state if Instant::now() > deadline => bail!("{}: systemd is {state}", self.name),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Runs a shell command inside the machine (all its namespaces): its stdout, or an
    /// error with its stderr if it failed.
    pub fn run(&self, command: &str) -> anyhow::Result<String> {
        let output = self.nsenter(command).output()?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        // `systemctl is-system-running` exits 1 for "degraded" but answers.
        if !output.status.success() && stdout.trim().is_empty() {
            bail!(
                "{}: {command}: {}",
                self.name,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(stdout)
    }

    /// `systemctl is-active UNIT` inside the machine.
    pub fn unit_state(&self, unit: &str) -> String {
        self.nsenter(&format!("systemctl is-active {unit}"))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    }

    /// A file of the machine's filesystem, seen from the host.
    pub fn path(&self, inside: &str) -> PathBuf {
        self.root.join(inside.trim_start_matches('/'))
    }

    /// Powers the machine off (SIGTERM to nspawn), SIGKILL if it takes too long.
    pub fn shutdown(&mut self) {
        let nspawn = &mut self.nspawn;
        let pid = nspawn.id() as i32;
        stop(pid, || nspawn.try_wait().ok().flatten().is_some());
        let _ = nspawn.wait();
    }

    fn nsenter(&self, command: &str) -> Command {
        let mut nsenter = Command::new("nsenter");
        nsenter
            .args(["-t", &self.init.to_string(), "-a", "sh", "-c", command])
            .stdin(Stdio::null());
        nsenter
    }

    /// The machine's PID 1 (nspawn's child) once its systemd answers.
    fn wait_for_init(&mut self, deadline: Instant) -> anyhow::Result<u32> {
        let children = format!("/proc/{0}/task/{0}/children", self.nspawn.id());
        loop {
            if let Some(status) = self.nspawn.try_wait()? {
                bail!(
                    "{}: systemd-nspawn exited ({status}) while booting",
                    self.name
                );
            }
            // nspawn's first child may be its short-lived "outer child", which forks
            // the container's init and exits: only a PID 1 of its own PID namespace is it.
            let init = std::fs::read_to_string(&children)
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|pid| pid.parse::<u32>().ok())
                .find(|&pid| is_namespace_init(pid));
            if let Some(init) = init {
                return Ok(init);
            }
            if Instant::now() > deadline {
                bail!("{}: no init process after {BOOT_TIMEOUT:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Whether `pid` is PID 1 of a PID namespace below ours (its `NSpid` ends in 1).
fn is_namespace_init(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let ids: Vec<&str> = status
                .lines()
                .find_map(|line| line.strip_prefix("NSpid:"))?
                .split_whitespace()
                .collect();
            Some(ids.len() > 1 && ids.last() == Some(&"1"))
        })
        .unwrap_or(false)
}

/// systemd-nspawn booting the machine at `root` inside `netns`, its console logged
/// beside the machine.
fn start_nspawn(name: &str, netns: &str, root: &Path, dir: &Path) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.console.log")))?;
    // Joining a namespace we built gives no CAP_NET_ADMIN by default; the edge's XDP
    // filter also needs CAP_BPF/CAP_PERFMON and the bpf() system call.
    // The namespace is the machine's own, so its net.* sysctls are the roles' to set
    // (nspawn mounts /proc/sys read-only otherwise).
    Command::new("setsid")
        .env("SYSTEMD_NSPAWN_API_VFS_WRITABLE", "network")
        .arg("systemd-nspawn")
        .args(["--keep-unit", "--register=no", "--console=read-only", "-b"])
        .arg(format!("--machine={name}"))
        .arg("-D")
        .arg(root)
        .arg(format!("--network-namespace-path=/run/netns/{netns}"))
        .arg("--capability=CAP_NET_ADMIN,CAP_BPF,CAP_PERFMON")
        .arg("--system-call-filter=bpf perf_event_open")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting systemd-nspawn")
}

fn run_ok(command: &mut Command) -> anyhow::Result<()> {
    let output = command.output()?;
    if !output.status.success() {
        bail!(
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// SIGTERM (a clean poweroff inside), then SIGKILL after `STOP_TIMEOUT` unless `gone`.
fn stop(pid: i32, mut gone: impl FnMut() -> bool) {
    let pid = Pid::from_raw(pid);
    if gone() || kill(pid, Signal::SIGTERM).is_err() {
        return;
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    while !gone() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    if !gone() {
        let _ = kill(pid, Signal::SIGKILL);
    }
}

const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
