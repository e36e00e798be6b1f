//! The agent against real daemons in network namespaces: an upstream BIRD router learns
//! the VIP from the PoP (ExaBGP, then BIRD), and the route appears in and disappears from
//! the upstream's kernel table as the PoP's readiness fails and recovers, on drain, and
//! when the agent stops. Needs root (CI runs as root).

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use testkit::bgp::*;

const ADMIN_PORT: u16 = 19181;
/// The lab's supervisor: Restart= and ExecStopPost= where there is no systemd.
const SUPERVISE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../lab/images/supervise.sh");
const EDGE_PORT: u16 = 19180;
/// The PoP's AS in these tests' BGP session.
const POP_AS: u32 = 65001;

fn wait_up(lab: &Lab, what: &str) -> Duration {
    lab.wait_vip(true, Duration::from_secs(20))
        .unwrap_or_else(|| {
            panic!(
                "{what}: VIP never reached the upstream\nup: {}\npop: {}\nbird-pop: {}",
                lab.log("up-bird.log"),
                lab.log("exabgp.log"),
                lab.log("pop-bird.log")
            )
        })
}

/// Polls `condition` every 10 ms for up to `limit`; how long it took to hold.
fn wait_for(limit: Duration, condition: impl Fn() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if condition() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// The agent reports its BGP session with the upstream established (within a few
/// seconds: BIRD's is polled every 5 s, ExaBGP's arrives as a neighbor change).
fn assert_session_up(lab: &Lab) {
    let series = format!("bgp_agent_session_up{{pop=\"test\",peer=\"{UP_ADDR}\"}} 1");
    let metrics = || lab.pop_exec(&["curl", "-s", &format!("127.0.0.1:{ADMIN_PORT}/metrics")]);
    assert!(
        wait_for(Duration::from_secs(8), || metrics().contains(&series)).is_some(),
        "no {series}:\n{}",
        metrics()
    );
}

fn wait_down(lab: &Lab, what: &str, limit: Duration) -> Duration {
    lab.wait_vip(false, limit)
        .unwrap_or_else(|| panic!("{what}: VIP still at the upstream after {limit:?}"))
}

/// The spool fills past the degrade bound and drains again; readiness fails and
/// recovers; drain withdraws and holds; the hold-down delays the way back. Returns the
/// withdraw time after the failure.
fn exercise_health_and_drain(
    lab: &Lab,
    flag: &std::path::Path,
    config: &std::path::Path,
) -> Duration {
    wait_up(lab, "start");
    assert_session_up(lab);
    assert_eq!(lab.upstream_as_path(), [POP_AS]);

    // Soft drain: over half full, the route stays, two AS hops longer.
    std::fs::write(lab.path("fill"), "0.8").unwrap();
    let degraded = wait_for(Duration::from_secs(2), || {
        lab.upstream_as_path() == [POP_AS; 3]
    });
    assert!(
        degraded.is_some(),
        "not degraded: {:?}",
        lab.upstream_as_path()
    );
    assert!(lab.upstream_has_vip(), "a degraded PoP must stay announced");
    std::fs::write(lab.path("fill"), "0.2").unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        lab.upstream_as_path(),
        [POP_AS; 3],
        "undegraded before the 2 s hold-down"
    );
    let back = wait_for(Duration::from_secs(3), || {
        lab.upstream_as_path() == [POP_AS]
    });
    assert!(
        back.is_some(),
        "still degraded: {:?}",
        lab.upstream_as_path()
    );

    std::fs::remove_file(flag).unwrap();
    let withdraw = wait_down(lab, "readiness failed", Duration::from_secs(3));
    assert!(
        withdraw < Duration::from_secs(1),
        "withdraw took {withdraw:?}"
    );

    std::fs::write(flag, "").unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(!lab.upstream_has_vip(), "back before the 2 s hold-down");
    wait_up(lab, "recovered");

    // A drain first re-announces with GRACEFUL_SHUTDOWN (the upstream still routes to
    // the PoP, at local preference 0), then withdraws after the wait.
    let drained = Instant::now();
    let drain = std::thread::scope(|scope| {
        let cli = scope
            .spawn(|| lab.pop_exec(&[agent_bin(), "drain", "--config", config.to_str().unwrap()]));
        let tagged = wait_for(Duration::from_secs(1), || {
            lab.upstream_sees_graceful_shutdown() && lab.upstream_has_vip()
        });
        assert!(
            tagged.is_some(),
            "no 65535:0 at the upstream before the withdraw"
        );
        (cli.join().unwrap(), tagged.unwrap())
    });
    let (out, tagged) = drain;
    assert!(out.contains("drained"), "{out}");
    wait_down(lab, "drain", Duration::from_secs(2));
    let took = drained.elapsed();
    let wait = Duration::from_millis(GRACEFUL_WAIT_MS);
    assert!(
        took >= wait && took < wait + Duration::from_secs(1),
        "drain took {took:?} (graceful shutdown {wait:?}, tagged after {tagged:?})"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !lab.upstream_has_vip(),
        "a drained PoP stays withdrawn while healthy"
    );
    let status = lab.pop_exec(&[agent_bin(), "status", "--config", config.to_str().unwrap()]);
    assert!(status.contains(r#""why": "drained""#), "{status}");
    lab.pop_exec(&[agent_bin(), "undrain", "--config", config.to_str().unwrap()]);
    wait_up(lab, "undrained");
    withdraw
}

#[test]
fn exabgp_speaker_follows_readiness_drain_and_agent_restarts() {
    testkit::require_root!("network namespaces");
    let mut lab = Lab::new("x");
    lab.start_upstream_bird();
    let flag = lab.path("ready");
    std::fs::write(&flag, "").unwrap();
    lab.start_fake_edge(EDGE_PORT, &flag);
    let config = agent_config(
        &lab,
        ADMIN_PORT,
        EDGE_PORT,
        "{ kind: exabgp, local_as: 65001, degraded: { as_path_prepend: 2 } }",
    );
    lab.start_exabgp(
        &format!("{} run --config {}", agent_bin(), config.display()),
        "exabgp.log",
    );
    let withdraw = exercise_health_and_drain(&lab, &flag, &config);
    println!("exabgp: readiness failure -> upstream FIB delete in {withdraw:?}");

    // The agent dies (SIGTERM: it withdraws first). ExaBGP respawns it; the new agent
    // starts withdrawn and announces again only after `rise`.
    let agent_pid = lab.pop_exec(&[
        "pgrep",
        "-f",
        &format!("{} run --config {}", agent_bin(), config.display()),
    ]);
    let agent_pid: u32 = agent_pid
        .lines()
        .next()
        .expect("agent running under ExaBGP")
        .trim()
        .parse()
        .unwrap();
    // SIGHUP (what `systemctl reload` sends) reloads: same process, route kept.
    lab.kill(agent_pid, Signal::SIGHUP);
    lab.wait_log("exabgp.log", "config reloaded", Duration::from_secs(3));
    std::thread::sleep(Duration::from_millis(500));
    assert!(lab.upstream_has_vip(), "the route moved on SIGHUP");
    assert_eq!(
        lab.log("exabgp.log")
            .matches("bgp-agent started withdrawn")
            .count(),
        1,
        "SIGHUP ended the agent"
    );

    lab.kill(agent_pid, Signal::SIGTERM);
    wait_down(&lab, "agent SIGTERM", Duration::from_secs(3));
    wait_up(&lab, "respawned agent");
    let log = lab.log("exabgp.log");
    assert!(
        log.matches("bgp-agent started withdrawn").count() >= 2,
        "ExaBGP did not respawn the agent:\n{log}"
    );

    // kill -9: ExaBGP does not withdraw by itself; it respawns the agent, which starts by
    // withdrawing and announces again only once its checks rise.
    let pids = lab.pop_exec(&[
        "pgrep",
        "-f",
        &format!("{} run --config {}", agent_bin(), config.display()),
    ]);
    let agent_pid: u32 = pids
        .lines()
        .next()
        .expect("respawned agent")
        .trim()
        .parse()
        .unwrap();
    lab.kill(agent_pid, Signal::SIGKILL);
    let started = Instant::now();
    while lab
        .log("exabgp.log")
        .matches("bgp-agent started withdrawn")
        .count()
        < 3
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "ExaBGP did not respawn the agent after kill -9"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let announced_again = || {
        let log = lab.log("exabgp.log");
        log[log.rfind("bgp-agent started withdrawn").unwrap()..].contains("change=\"announce\"")
    };
    while !announced_again() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the respawned agent never announced"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_up(&lab, "agent respawned after kill -9");
}

#[test]
fn bird_speaker_follows_readiness_drain_and_withdraws_on_sigterm() {
    testkit::require_root!("network namespaces");
    let mut lab = Lab::new("b");
    let config = bird_pop(&mut lab);
    let pop = lab.pop.clone();
    let agent = lab.spawn(
        &pop,
        &[agent_bin(), "run", "--config", config.to_str().unwrap()],
        "agent.log",
    );
    let flag = lab.path("ready");

    let withdraw = exercise_health_and_drain(&lab, &flag, &config);
    println!("bird: readiness failure -> upstream FIB delete in {withdraw:?}");
    assert!(
        std::fs::read_to_string(lab.path("anycast.conf"))
            .unwrap()
            .contains("192.0.2.10/32")
    );

    // SIGTERM: 65535:0 first, the withdraw after the wait, then the exit.
    lab.kill(agent, Signal::SIGTERM);
    assert!(
        wait_for(Duration::from_secs(1), || lab
            .upstream_sees_graceful_shutdown())
        .is_some(),
        "no 65535:0 at the upstream after SIGTERM"
    );
    wait_down(&lab, "agent SIGTERM", Duration::from_secs(3));
    assert!(
        lab.wait_exit(agent, Duration::from_secs(3)),
        "agent did not exit"
    );
    let log = lab.log("agent.log");
    assert!(
        log.contains("graceful shutdown before exit") && log.contains("withdrawing before exit"),
        "{log}"
    );
}

/// The agent as the lab and the package run it: under a supervisor that runs
/// `bgp-agent withdraw` after any exit and restarts it. SIGHUP reloads (a valid file
/// takes effect, an invalid one is refused) without touching the route; kill -9 takes
/// the route away within a second and the restarted agent brings it back after `rise`.
#[test]
fn bird_agent_reloads_on_sighup_and_a_killed_agent_is_withdrawn_by_its_supervisor() {
    testkit::require_root!("network namespaces");
    let mut lab = Lab::new("s");
    let config = bird_pop(&mut lab);
    let config_arg = config.to_str().unwrap();
    let withdraw = format!("{} withdraw --config {config_arg}", agent_bin());
    let pop = lab.pop.clone();
    let supervisor = lab.spawn(
        &pop,
        &[
            "bash",
            SUPERVISE,
            &withdraw,
            agent_bin(),
            "run",
            "--config",
            config_arg,
        ],
        "agent.log",
    );
    wait_up(&lab, "start");
    let agent = lab.child_of(supervisor);
    let fast = check_rounds_per_second(&lab);
    assert!(fast >= 5.0, "interval 100ms but {fast} check rounds/s");

    // A valid change: checks every second instead of every 100 ms.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("interval: 100ms", "interval: 1s")).unwrap();
    lab.kill(agent, Signal::SIGHUP);
    let slow = check_rounds_per_second(&lab);
    assert!(
        slow <= 2.0,
        "interval 1s after SIGHUP but {slow} check rounds/s"
    );
    assert_eq!(
        lab.child_of(supervisor),
        agent,
        "SIGHUP restarted the agent"
    );
    assert!(lab.upstream_has_vip(), "the route moved on reload");

    // An invalid file: refused with every bad field named, the running config kept.
    std::fs::write(
        &config,
        text.replace("rise: 3", "rise: 0")
            .replace("fall: 2", "fall: 0"),
    )
    .unwrap();
    lab.kill(agent, Signal::SIGHUP);
    let refused = lab.wait_log("agent.log", "config reload refused", Duration::from_secs(3));
    assert!(
        refused.contains(": rise: must be at least 1")
            && refused.contains(": fall: must be at least 1"),
        "{refused}"
    );
    let metrics = lab.pop_exec(&[
        "curl",
        "-s",
        &format!("http://127.0.0.1:{ADMIN_PORT}/metrics"),
    ]);
    assert!(
        metrics.contains("bgp_agent_config_reloads_total{pop=\"test\",result=\"failed\"} 1")
            && metrics.contains("bgp_agent_config_reloads_total{pop=\"test\",result=\"ok\"} 1"),
        "{metrics}"
    );
    let kept = check_rounds_per_second(&lab);
    assert!(
        kept <= 2.0,
        "the refused file changed the interval: {kept} rounds/s"
    );
    assert_eq!(lab.child_of(supervisor), agent);
    assert!(
        lab.upstream_has_vip(),
        "the route moved on a refused reload"
    );
    std::fs::write(&config, &text).unwrap();

    // kill -9: no SIGTERM path runs in the agent; its supervisor withdraws.
    lab.kill(agent, Signal::SIGKILL);
    let gone = wait_down(&lab, "agent kill -9", Duration::from_secs(3));
    assert!(
        gone < Duration::from_secs(1),
        "withdrawn {gone:?} after kill -9"
    );
    let back = wait_up(&lab, "restarted agent");
    let restarted = lab.child_of(supervisor);
    assert_ne!(restarted, agent);
    let log = lab.log("agent.log");
    assert!(log.contains("exited with status 137"), "{log}");
    println!(
        "bird under supervision: kill -9 -> upstream FIB delete in {gone:?}, back after {back:?}"
    );

    // Stopping the supervisor stops the agent, which withdraws.
    lab.kill(supervisor, Signal::SIGTERM);
    wait_down(&lab, "supervisor SIGTERM", Duration::from_secs(3));
    assert!(lab.wait_exit(supervisor, Duration::from_secs(5)));
}

/// Real BIRD as the PoP's speaker, its include file, a ready fake edge, and the agent's
/// config for it (returned).
fn bird_pop(lab: &mut Lab) -> std::path::PathBuf {
    lab.start_upstream_bird();
    let flag = lab.path("ready");
    std::fs::write(&flag, "").unwrap();
    lab.start_fake_edge(EDGE_PORT, &flag);
    let include = lab.path("anycast.conf");
    let socket = lab.start_pop_bird(&include, &withdrawn_include());
    let speaker = format!(
        "{{ kind: bird, include_file: {}, socket: {} }}",
        include.display(),
        socket.display()
    );
    agent_config(lab, ADMIN_PORT, EDGE_PORT, &speaker)
}

/// Check rounds the agent ran per second, from its own counter over two seconds.
fn check_rounds_per_second(lab: &Lab) -> f64 {
    let rounds = || -> f64 {
        lab.pop_exec(&[
            "curl",
            "-s",
            &format!("http://127.0.0.1:{ADMIN_PORT}/metrics"),
        ])
        .lines()
        .filter(|line| line.starts_with("bgp_agent_check_results_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
    };
    std::thread::sleep(Duration::from_millis(300));
    let before = rounds();
    std::thread::sleep(Duration::from_secs(2));
    (rounds() - before) / 2.0
}

/// The agent's BIRD include with nothing announced: what BIRD starts with.
fn withdrawn_include() -> String {
    bgp_agent::bird_include(
        "ANYCAST_V4",
        "ANYCAST_V6",
        &[],
        bgp_agent::Advert::Withdrawn,
    )
}
