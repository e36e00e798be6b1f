//! `ansible/` against real machines (as root): two Debian bookworm PoPs booted with
//! systemd-nspawn into the lab's pop-a and pop-b namespaces (so the lab's router, origin
//! and client are their upstream and senders), provisioned over ssh by `site.yml` with
//! the package built from this checkout, one speaking BGP through ExaBGP and one through
//! BIRD; then upgraded by `rolling-deploy.yml` under load (each stage judged by its
//! Prometheus gate), a broken build stopped at the canary and rolled back, and refused a
//! bad config.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lab::machine::Machine;
use lab::sender::Outcome;
use testkit::e2e::{
    LabCli, MAX_REHASHED_PER_CHANGE, POP_A_ADDR, POP_B_ADDR, RouterWatch, VIP, failures, now_ms,
};

#[test]
fn ansible_provisions_upgrades_and_refuses_bad_config() {
    ::lab::require_root!("machines booted with systemd-nspawn");
    let fleet = Fleet::prepare();
    let lab = LabCli::up_for_machines("pop-a,pop-b");
    let mut machines = fleet.boot();

    provision(&fleet, &lab, &machines);
    firewall(&machines);
    second_run_changes_nothing(&fleet);
    rolling_deploy(&fleet, &lab, &machines);
    canary_stops_a_broken_build(&fleet, &lab, &machines);
    rotate_ticket_keys(&fleet, &lab, &machines);
    pause_the_fleet(&fleet, &lab, &machines);
    replay_a_range(&fleet, &lab, &machines);
    operations(&lab, &machines);
    hardening(&lab, &machines);
    power_cut(&lab, &mut machines[1]);
    bad_config_stops_at_validate(&fleet, &lab, &machines);
    controller_is_never_locked_out(&fleet, &machines[0]);
    lab.verify_origin_has_every_ack();
}

/// The packaged units score at or under their exposure limits before they ship (the
/// booted machines check them again where they run).
#[test]
fn units_are_hardened() {
    let repo = repo();
    let units = [
        "edge/systemd/edge.service",
        "edge/systemd/edge-ranges.service",
        "bgp-agent/systemd/bgp-agent.service",
        "xdp/loader/systemd/edge-xdp.service",
    ];
    let report = run_ok(
        Command::new("systemd-analyze")
            .current_dir(&repo)
            .args(["security", "--offline=true", "--no-pager"])
            .args(units),
    );
    let scores: Vec<String> = UNIT_EXPOSURE_LIMITS
        .iter()
        .map(|(unit, limit)| {
            let score = exposure(&report, unit);
            assert!(score <= *limit, "{unit}: exposure {score} > {limit}");
            format!("{unit} {score} (limit {limit})")
        })
        .collect();
    println!(
        "scenario unit-exposure: systemd-analyze security --offline: {}",
        scores.join(", ")
    );
}

/// Every playbook passes `--syntax-check` and the roles and playbooks pass
/// `ansible-lint --offline` with the production profile.
#[test]
fn ansible_syntax_and_lint() {
    let repo = repo();
    let bin = PathBuf::from(script_output(&repo.join("lab/machines/controller.sh")));
    let ansible = repo.join("ansible");
    let syntax = run_ok(
        Command::new(bin.join("ansible-playbook"))
            .current_dir(&ansible)
            .env("ANSIBLE_VAULT_PASSWORD_FILE", lab_vault_password())
            .arg("--syntax-check")
            .args(PLAYBOOKS),
    );
    assert_eq!(
        syntax.matches("playbook: ").count(),
        PLAYBOOKS.len(),
        "{syntax}"
    );
    let lint = Command::new(bin.join("ansible-lint"))
        .current_dir(&ansible)
        .env("ANSIBLE_VAULT_PASSWORD_FILE", lab_vault_password())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .args(["--offline", "--profile", "production", "--nocolor"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&lint.stderr);
    assert!(
        lint.status.success(),
        "ansible-lint:\n{}{report}",
        String::from_utf8_lossy(&lint.stdout)
    );
    println!(
        "scenario ansible-lint: {} playbooks pass --syntax-check; ansible-lint --offline --profile production: {}",
        PLAYBOOKS.len(),
        report
            .lines()
            .rfind(|l| l.contains("Passed"))
            .unwrap_or("passed")
            .trim()
    );
}

/// `site.yml` on fresh machines: every unit active, two ECMP paths at the router, signed
/// webhooks to the anycast address acknowledged and every one at the origin.
fn provision(fleet: &Fleet, lab: &LabCli, machines: &[Machine]) {
    let run = fleet.playbook("site.yml", &["-v", "--diff"]);
    run.assert_ok();
    let secrets = fleet.lab_secrets();
    for secret in &secrets {
        assert!(
            !run.output.contains(secret.as_str()),
            "a secret of the lab's vault or ticket keys is in site.yml's -v --diff output"
        );
    }
    for machine in machines {
        let speaker: &[&str] = if machine.name == "pop-a" {
            &["exabgp"]
        } else {
            &["bird", "bgp-agent"]
        };
        for unit in COMMON_UNITS.iter().chain(speaker) {
            assert_eq!(
                machine.unit_state(unit),
                "active",
                "{}: {unit}: {}",
                machine.name,
                machine
                    .run(&format!("journalctl -u {unit} --no-pager -n 20"))
                    .unwrap_or_default()
            );
        }
    }
    // The package's units, checked where they run (BIRD, which bgp-agent needs, is on pop-b).
    let verify = machines[1].run(
        "systemd-analyze verify edge.service edge-ranges.service edge-ranges.timer edge-xdp.service bgp-agent.service",
    );
    assert!(verify.is_ok(), "systemd-analyze verify: {verify:?}");
    for machine in machines {
        write_provider_list(machine);
        edge_pings_the_watchdog(machine);
    }
    let announced = lab.wait_next_hops(2, Duration::from_secs(30));
    let outcomes = lab
        .load("ansible-site", 50, Duration::from_secs(4))
        .finish(lab);
    let acked = outcomes.iter().filter(|o| o.acked()).count();
    assert_eq!(acked, outcomes.len(), "{:?}", failures(&outcomes));
    let pops: HashMap<String, usize> = outcomes.iter().fold(HashMap::new(), |mut by, o| {
        *by.entry(o.pop.clone().unwrap_or_default()).or_default() += 1;
        by
    });
    assert!(pops.len() == 2, "both PoPs answer: {pops:?}");
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    for machine in machines {
        provider_list_in_force(machine);
    }
    println!(
        "scenario ansible-site: site.yml provisioned 2 PoPs (ExaBGP, BIRD) in {:.1} s, {} units active, 2 ECMP paths {} ms after the play, {acked}/{} webhooks acked ({pops:?}), all at the origin; the partners list stored by edge-ranges, in force in the edge and edge-xdp",
        run.elapsed.as_secs_f64(),
        machines.len() * COMMON_UNITS.len() + 3,
        announced.as_millis(),
        outcomes.len(),
    );
}

/// The operator's tooling writes the `partners` list and runs the timer's service now
/// (the timer alone would within the hour).
fn write_provider_list(machine: &Machine) {
    let stored = machine.run(
        "printf '# lab partners\\n198.51.100.0/24\\n203.0.113.7\\n' > /etc/edge/partner-ranges.txt && \
         systemctl start edge-ranges.service && cat /var/lib/edge/ranges/partners.txt",
    );
    assert!(
        stored
            .as_ref()
            .is_ok_and(|text| text.contains("203.0.113.7/32")),
        "{}: edge-ranges stored {stored:?}: {}",
        machine.name,
        machine
            .run("journalctl -u edge-ranges --no-pager -n 20")
            .unwrap_or_default()
    );
}

/// The running edge reads the stored list within `ranges.reload_every` (30 s), and
/// edge-xdp (group edge, no CAP_DAC_OVERRIDE) reads it for under-attack mode: its two
/// entries and the two management networks open, the mode off.
fn provider_list_in_force(machine: &Machine) {
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    while metric(machine, "edge_provider_ranges_entries", "partners") != 2.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}: the edge never took the partners list in",
            machine.name
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        metric(machine, "edge_provider_ranges_stale", "partners"),
        0.0
    );
    let xdp = machine
        .run("curl -s http://127.0.0.1:9182/metrics")
        .unwrap_or_default();
    for (name, value) in [("xdp_open_ranges{", " 4"), ("xdp_under_attack{", "} 0")] {
        assert!(
            xdp.lines()
                .any(|l| l.starts_with(name) && l.ends_with(value)),
            "{}: edge-xdp: no {name}…{value}:\n{xdp}",
            machine.name
        );
    }
}

/// The edge's unit is `Type=notify` with a watchdog, and systemd hears the pings through
/// the unit's sandbox: the time of the last one moves on, and the edge has not been
/// restarted.
fn edge_pings_the_watchdog(machine: &Machine) {
    let show = || {
        machine
            .run("systemctl show edge -p Type -p WatchdogUSec -p NRestarts -p WatchdogTimestampMonotonic")
            .unwrap()
    };
    let before = show();
    std::thread::sleep(Duration::from_millis(2500));
    let after = show();
    for line in ["Type=notify", "WatchdogUSec=30s", "NRestarts=0"] {
        assert!(after.contains(line), "{}: {after}", machine.name);
    }
    let last_ping = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("WatchdogTimestampMonotonic="))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(
        last_ping(&after) > last_ping(&before) && last_ping(&before) > 0,
        "{}: the edge's watchdog pings do not reach systemd: before {before}, after {after}",
        machine.name
    );
}

/// What each PoP answers, and to whom: the internet (the lab's client) reaches only the
/// anycast service, the other PoP and the monitoring node reach the management ports, BGP
/// only the peers; everything else is dropped (no RST) and counted.
fn firewall(machines: &[Machine]) {
    let (pop_a, pop_b) = (&machines[0], &machines[1]);
    let ports = "22 179 443 9100 9180 9181 9182";
    let from_netns = |netns: &str, host: &str| {
        run_ok(
            Command::new("ip")
                .args(["netns", "exec", netns, "python3", "-c", PORT_SCAN, host])
                .args(ports.split(' ')),
        )
    };
    let internet_unicast = from_netns("lab-client", POP_A_ADDR);
    assert_eq!(
        internet_unicast.trim(),
        "22:filtered 179:filtered 443:filtered 9100:filtered 9180:filtered 9181:filtered 9182:filtered",
        "the internet sees nothing on the PoP's own address"
    );
    let internet_anycast = from_netns("lab-client", VIP);
    assert!(
        internet_anycast.contains("443:open") && internet_anycast.matches(":open").count() == 1,
        "the internet sees only the webhook port on the anycast address: {internet_anycast}"
    );
    let monitoring = from_netns("lab-mon", POP_A_ADDR);
    for open in ["22:open", "9100:open", "9181:open"] {
        assert!(
            monitoring.contains(open),
            "from the monitoring node: {monitoring}"
        );
    }
    let peer_pop = pop_b
        .run(&format!(
            "python3 - {POP_A_ADDR} {ports} <<'PY'\n{PORT_SCAN}\nPY"
        ))
        .unwrap();
    for expected in [
        "22:open",
        "9100:open",
        "9181:open",
        "179:filtered",
        "443:filtered",
    ] {
        assert!(
            peer_pop.contains(expected),
            "from the other PoP: {peer_pop}"
        );
    }
    let dropped: u64 = pop_a
        .run("nft list counter inet webhook_edge dropped")
        .unwrap()
        .split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(dropped >= 7, "the scan's drops were not counted: {dropped}");
    let rollback = pop_a
        .run("systemctl is-active webhook-edge-firewall-rollback.timer || true")
        .unwrap();
    assert_ne!(
        rollback.trim(),
        "active",
        "the controller's confirmation did not cancel the way back"
    );
    println!(
        "scenario ansible-firewall: from the internet {POP_A_ADDR}: {}; {VIP}: {}; from the monitoring node: {}; from the other PoP: {}; {dropped} packets dropped and counted",
        internet_unicast.trim(),
        internet_anycast.trim(),
        monitoring.trim(),
        peer_pop.trim()
    );
}

/// A second `site.yml` changes nothing.
fn second_run_changes_nothing(fleet: &Fleet) {
    let run = fleet.playbook("site.yml", &[] as &[&str]);
    run.assert_ok();
    for host in ["pop-a", "pop-b"] {
        assert_eq!(
            run.recap(host, "changed"),
            0,
            "{host} changed on a second run:\n{}",
            run.changed_tasks()
        );
    }
    println!(
        "scenario ansible-idempotent: second site.yml run in {:.1} s, changed=0 on both PoPs",
        run.elapsed.as_secs_f64()
    );
}

/// `rolling-deploy.yml` with a bumped package while the client sends 50 webhooks/s to
/// the anycast address: no failed request, every ack at the origin, the new version on
/// both PoPs, and the router never without a path.
fn rolling_deploy(fleet: &Fleet, lab: &LabCli, machines: &[Machine]) {
    let router = RouterWatch::start();
    let load_started = Instant::now();
    let load = lab.load("ansible-deploy", 50, DEPLOY_LOAD);
    std::thread::sleep(Duration::from_secs(1));
    let upgrade = fleet.upgrade_package.display().to_string();
    let run = fleet.playbook(
        "rolling-deploy.yml",
        &["-e", &format!("edge_package_file={upgrade}")],
    );
    let deploy_done = load_started.elapsed();
    run.assert_ok();
    for pop in ["pop-a", "pop-b"] {
        assert!(
            run.output.contains(&format!("gate passed for {pop}")),
            "{pop}'s stage was not judged:\n{}",
            run.output
        );
    }
    let outcomes = load.finish(lab);
    let router = router.stop();
    assert!(
        deploy_done < DEPLOY_LOAD,
        "the deploy ({:?}) outlasted the load",
        run.elapsed
    );
    // A connection open while the router's ECMP set changes can be hashed to the other
    // PoP mid-flight and reset there (Linux's hash-threshold multipath moves flows on
    // every add and remove). That is the router's doing, not the deploy's: only such
    // requests may fail, and only a few.
    let failed: Vec<Outcome> = outcomes.iter().filter(|o| !o.acked()).cloned().collect();
    let (rehashed, other): (Vec<_>, Vec<_>) =
        failed.iter().cloned().partition(|o| router.rehashed(o));
    assert!(other.is_empty(), "{:?}", failures(&other));
    let allowed = MAX_REHASHED_PER_CHANGE * router.changes().len();
    assert!(rehashed.len() <= allowed, "{:?}", failures(&rehashed));
    let fewest = router.fewest_paths();
    assert!(fewest >= 1, "the router had no path during the deploy");
    for machine in machines {
        let version = machine
            .run("dpkg-query -W -f '${Version}' webhook-edge")
            .unwrap();
        assert_eq!(version, fleet.upgrade_version, "{}", machine.name);
    }
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    lab.wait_next_hops(2, Duration::from_secs(30));
    println!(
        "scenario ansible-rolling-deploy: {} → {} on 2 PoPs in {:.1} s ({:.1} s per PoP, its gate's soak included) under 50 webhooks/s: {} of {} requests failed (all in flight across one of the router's {} path changes), fewest router paths {fewest}, every ack at the origin (the load went on {:.1} s after the deploy)",
        fleet.version,
        fleet.upgrade_version,
        run.elapsed.as_secs_f64(),
        run.elapsed.as_secs_f64() / 2.0,
        failed.len(),
        outcomes.len(),
        router.changes().len(),
        (DEPLOY_LOAD - deploy_done).as_secs_f64(),
    );
}

/// `rolling-deploy.yml` with a build whose GitHub route answers 500, under the same
/// load: the canary (pop-a) takes it and fails its gate, is drained, put back on the
/// running package and undrained, and the play fails with the gate's numbers. pop-b is
/// never touched, the router keeps at least one path, the 500s all come from the canary
/// within one gate interval, nothing else fails but in flight across a path change, and
/// every acked webhook reaches the origin.
fn canary_stops_a_broken_build(fleet: &Fleet, lab: &LabCli, machines: &[Machine]) {
    let (broken, broken_version) = build_broken_package(fleet);
    let router = RouterWatch::start();
    let load_started = Instant::now();
    let load = lab.load("ansible-canary", 50, CANARY_LOAD);
    std::thread::sleep(Duration::from_secs(1));
    let run = fleet.playbook(
        "rolling-deploy.yml",
        &["-e", &format!("edge_package_file={}", broken.display())],
    );
    let play_done = load_started.elapsed();
    let outcomes = load.finish(lab);
    let router = router.stop();
    assert!(
        !run.success,
        "the broken build went through:\n{}",
        run.output
    );
    let rolled_back = format!("pop-a rolled back to {}", fleet.upgrade_version);
    assert!(
        run.output.contains("gate failed for pop-a") && run.output.contains(&rolled_back),
        "the play did not stop at the canary's gate:\n{}",
        run.output
    );
    assert_eq!(
        run.recap("pop-b", "ok"),
        0,
        "pop-b was touched:\n{}",
        run.output
    );
    assert!(
        play_done < CANARY_LOAD,
        "the play ({play_done:?}) outlasted the load"
    );
    for machine in machines {
        let version = machine
            .run("dpkg-query -W -f '${Version}' webhook-edge")
            .unwrap();
        assert_eq!(version, fleet.upgrade_version, "{}", machine.name);
    }

    let broken_answers: Vec<Outcome> = outcomes
        .iter()
        .filter(|o| o.status == Some(500))
        .cloned()
        .collect();
    assert!(
        !broken_answers.is_empty(),
        "no 500 from the broken build: was it installed?"
    );
    assert!(
        broken_answers
            .iter()
            .all(|o| o.pop.as_deref() == Some("pop-a")),
        "a 500 from another PoP than the canary: {:?}",
        failures(&broken_answers)
    );
    let first_ms = broken_answers.iter().map(|o| o.sent_ms).min().unwrap();
    let last_ms = broken_answers.iter().map(|o| o.done_ms).max().unwrap();
    let broken_for = Duration::from_millis(last_ms - first_ms);
    assert!(
        broken_for <= GATE_SOAK + GATE_JUDGEMENT,
        "the canary answered 500s for {broken_for:?}, longer than one gate interval"
    );
    let other_failures: Vec<Outcome> = outcomes
        .iter()
        .filter(|o| !o.acked() && o.status != Some(500))
        .cloned()
        .collect();
    let (rehashed, other): (Vec<_>, Vec<_>) = other_failures
        .iter()
        .cloned()
        .partition(|o| router.rehashed(o));
    assert!(other.is_empty(), "{:?}", failures(&other));
    let allowed = MAX_REHASHED_PER_CHANGE * router.changes().len();
    assert!(rehashed.len() <= allowed, "{:?}", failures(&rehashed));
    let fewest = router.fewest_paths();
    assert!(fewest >= 1, "the router had no path during the canary");
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    lab.wait_next_hops(2, Duration::from_secs(30));
    let gate = run
        .output
        .lines()
        .find_map(|line| line.split_once("gate failed for pop-a: "))
        .map_or("", |(_, numbers)| numbers.trim_end_matches(['"', '\'']));
    println!(
        "scenario ansible-canary: {} -> {broken_version} (GitHub route answers 500) under 50 webhooks/s: stopped at the canary and rolled back in {:.1} s, pop-b untouched; {} of {} requests answered 500, all by pop-a within {:.1} s (soak {} s); {} failed in flight across the router's {} path changes; fewest router paths {fewest}; every ack at the origin; gate: {gate}",
        fleet.upgrade_version,
        run.elapsed.as_secs_f64(),
        broken_answers.len(),
        outcomes.len(),
        broken_for.as_secs_f64(),
        GATE_SOAK.as_secs(),
        rehashed.len(),
        router.changes().len(),
    );
}

/// `rotate-ticket-keys.yml`: a new key ends up first in the controller's file, every PoP
/// holds the same file, and the edges keep serving.
fn rotate_ticket_keys(fleet: &Fleet, lab: &LabCli, machines: &[Machine]) {
    let keys = |text: &str| -> Vec<String> { text.lines().map(str::to_owned).collect() };
    let before = fleet.controller_ticket_keys();
    let rotated_after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64
        - 1.0;
    let run = fleet.playbook("rotate-ticket-keys.yml", &fleet.current_package());
    run.assert_ok();
    let after = fleet.controller_ticket_keys();
    assert_eq!(after.len(), before.len() + 1, "{after:?}");
    assert!(!before.contains(&after[0]), "the new key encrypts");
    assert_eq!(after[1..], before[..], "the old keys still decrypt");
    for machine in machines {
        let on_pop = std::fs::read_to_string(machine.path("/etc/edge/tls/tickets.keys")).unwrap();
        assert_eq!(keys(&on_pop), after, "{}", machine.name);
        assert_eq!(machine.unit_state("edge"), "active");
        let changed = metric(
            machine,
            "edge_tls_ticket_keys_changed_timestamp_seconds",
            "pop=",
        );
        assert!(
            changed >= rotated_after,
            "{}: the ticket keys' age did not restart with the rotation ({changed} < {rotated_after})",
            machine.name
        );
    }
    let outcomes = lab
        .load("ansible-rotate", 50, Duration::from_secs(2))
        .finish(lab);
    assert!(
        outcomes.iter().all(|o| o.acked()),
        "{:?}",
        failures(&outcomes)
    );
    println!(
        "scenario ansible-ticket-keys: rotate-ticket-keys.yml in {:.1} s: {} → {} keys, the new one first on both PoPs, {}/{} webhooks acked after",
        run.elapsed.as_secs_f64(),
        before.len(),
        after.len(),
        outcomes.len(),
        outcomes.len()
    );
}

/// `backhaul.yml` pauses the fleet's backhaul: webhooks are still acknowledged, none
/// reaches the origin until the same playbook resumes it, then every one does.
fn pause_the_fleet(fleet: &Fleet, lab: &LabCli, machines: &[Machine]) {
    let acks = || -> Vec<f64> {
        machines
            .iter()
            .map(|m| metric(m, "edge_backhaul_acks_total", "pop="))
            .collect()
    };
    let paused = |value: f64| {
        let deadline = Instant::now() + Duration::from_secs(5);
        for machine in machines {
            while metric(machine, "edge_backhaul_paused", "pop=") != value {
                assert!(
                    Instant::now() < deadline,
                    "{}: paused is not {value}",
                    machine.name
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let run = fleet.playbook(
        "backhaul.yml",
        &[
            "-e",
            "backhaul_action=pause",
            "-e",
            r#"{"backhaul_pause_reason": "origin deploy"}"#,
        ],
    );
    run.assert_ok();
    paused(1.0);
    let before = acks();
    let outcomes = lab
        .load("ansible-paused", 50, Duration::from_secs(2))
        .finish(lab);
    assert!(
        outcomes.iter().all(|o| o.acked()),
        "{:?}",
        failures(&outcomes)
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(acks(), before, "delivered while paused");
    let status = fleet.playbook("backhaul.yml", &[] as &[&str]);
    status.assert_ok();
    assert_eq!(
        status.output.matches("backhaul paused=True").count(),
        2,
        "{}",
        status.output
    );
    assert!(status.output.contains("origin deploy"), "{}", status.output);
    let resumed = fleet.playbook("backhaul.yml", &["-e", "backhaul_action=resume"]);
    resumed.assert_ok();
    paused(0.0);
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    println!(
        "scenario ansible-backhaul-pause: backhaul.yml paused both PoPs in {:.1} s; {} webhooks acked meanwhile, none delivered until resumed ({:.1} s), then all at the origin once",
        run.elapsed.as_secs_f64(),
        outcomes.len(),
        resumed.elapsed.as_secs_f64(),
    );
}

/// `replay.yml` over the fleet: the webhooks of a time range, counted on each PoP and
/// summed (a dry run first), are stored again and sent, marked; the origin, which still
/// has them within its de-duplication window, keeps one copy of each.
fn replay_a_range(fleet: &Fleet, lab: &LabCli, machines: &[Machine]) {
    let replayed = || -> f64 {
        machines
            .iter()
            .map(|m| metric(m, "edge_spool_replayed_total", "pop="))
            .sum()
    };
    let at = |time| humantime::format_rfc3339_millis(time).to_string();
    let since = at(std::time::SystemTime::now());
    let outcomes = lab
        .load("ansible-replay", 30, Duration::from_secs(2))
        .finish(lab);
    assert!(
        outcomes.iter().all(|o| o.acked()),
        "{:?}",
        failures(&outcomes)
    );
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    let until = at(std::time::SystemTime::now());
    let range = |dry_run: bool| {
        let run = fleet.playbook(
            "replay.yml",
            &[
                "-e".to_owned(),
                format!("replay_since={since}"),
                "-e".to_owned(),
                format!("replay_until={until}"),
                "-e".to_owned(),
                "replay_route=hooks_github".to_owned(),
                "-e".to_owned(),
                format!("replay_dry_run={dry_run}"),
            ],
        );
        run.assert_ok();
        run
    };
    let before = replayed();
    let counted = range(true);
    let total = format!("fleet replay events={} pops=2", outcomes.len());
    assert!(counted.output.contains(&total), "{}", counted.output);
    assert_eq!(replayed(), before, "a dry run sends nothing");
    let sent = range(false);
    assert!(sent.output.contains(&total), "{}", sent.output);
    let deadline = Instant::now() + Duration::from_secs(10);
    while replayed() < before + outcomes.len() as f64 {
        assert!(
            Instant::now() < deadline,
            "replayed {}",
            replayed() - before
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    println!(
        "scenario ansible-replay: replay.yml counted {n} webhooks of a {since}..{until} range over 2 PoPs (dry run, {:.1} s), then stored and sent all {n} again ({:.1} s); the origin kept one copy of each",
        counted.elapsed.as_secs_f64(),
        sent.elapsed.as_secs_f64(),
        n = outcomes.len(),
    );
}

/// What an operator does by hand: curl over HTTP/2 and HTTP/1.1, `systemctl reload`,
/// and kill -9 of every process under load: systemd brings each back, the route follows
/// the edge's health, and every acked webhook reaches the origin.
fn operations(lab: &LabCli, machines: &[Machine]) {
    let (pop_a, pop_b) = (&machines[0], &machines[1]);
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let body = format!(r#"{{"curl":"{version}"}}"#);
        // Arguments with spaces and quotes pass through `lab exec` as they are.
        let answer = lab.run(&[
            "exec",
            "client",
            "--",
            "curl",
            "-sk",
            flag,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
            "-H",
            "X-GitHub-Event: push",
            "-H",
            &format!("X-GitHub-Delivery: curl-{version}"),
            "-H",
            &format!(
                "X-Hub-Signature-256: {}",
                lab::sender::github_signature("lab-github-secret", &body)
            ),
            "--data-binary",
            &body,
            "https://192.0.2.10/hooks/github",
        ]);
        assert_eq!(answer, format!("202 {version}"), "curl {flag}");
    }

    let reloads = |m: &Machine| metric(m, "edge_config_reloads_total", "result=\"ok\"");
    let pid_before = main_pid(pop_a, "edge");
    let reloads_before = reloads(pop_a);
    pop_a.run("systemctl reload edge").unwrap();
    // The signal is handled after systemctl returns.
    let started = Instant::now();
    while reloads(pop_a) < reloads_before + 1.0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "systemctl reload edge: no reload counted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        main_pid(pop_a, "edge"),
        pid_before,
        "reload restarted the edge"
    );

    let mut report = Vec::new();
    for (machine, unit) in [
        (pop_a, "edge"),
        (pop_a, "edge-xdp"),
        (pop_a, "exabgp"),
        (pop_b, "bgp-agent"),
        (pop_b, "edge"),
    ] {
        let router = RouterWatch::start();
        let load = lab.load(
            &format!("kill-{}-{unit}", machine.name),
            50,
            Duration::from_secs(4),
        );
        std::thread::sleep(Duration::from_secs(1));
        let pid = main_pid(machine, unit);
        machine.run(&format!("kill -9 {pid}")).unwrap();
        let outcomes = load.finish(lab);
        let router = router.stop();
        // As in the rolling deploy: a request the router's ECMP change reset is the
        // router's doing (a dead agent's route is withdrawn at once, by design).
        let (rehashed, failed): (Vec<&Outcome>, Vec<&Outcome>) = outcomes
            .iter()
            .filter(|o| !o.acked())
            .partition(|o| router.rehashed(o));
        assert!(
            rehashed.len() <= MAX_REHASHED_PER_CHANGE * router.changes().len(),
            "kill -9 {unit} on {}: {} reset by the router's {} path changes",
            machine.name,
            rehashed.len(),
            router.changes().len()
        );
        let failed = failed.len();
        wait_restarted(machine, unit, &pid);
        let back = lab.wait_next_hops(2, Duration::from_secs(60));
        // Only the edge's own death can fail requests: those in flight on it, and new
        // ones until the agent's checks fail and the route leaves (~0.3 s at 50/s).
        let allowed = if unit == "edge" { 25 } else { 0 };
        assert!(
            failed <= allowed,
            "kill -9 {unit} on {}: {failed} failed: {:?}",
            machine.name,
            failures(&outcomes)
        );
        lab.assert_at_origin_once(&outcomes, Duration::from_secs(30));
        report.push(format!(
            "{}/{unit} {failed}/{} failed, {} reset by an ECMP change (2 paths {:.1} s after the load)",
            machine.name,
            outcomes.len(),
            rehashed.len(),
            back.as_secs_f64()
        ));
    }
    println!(
        "scenario ansible-operations: curl 202 over HTTP/2 and HTTP/1.1; systemctl reload: same PID, reload counted; kill -9 under 50 req/s, each restarted by systemd: {}",
        report.join("; ")
    );
}

/// The PoP's defences where they run: the units' exposure scores, an agent admin that
/// sheds a flood of half-sent heads while the agent keeps deciding, and a hung agent
/// (SIGSTOP) whose route the watchdog takes down, under both speakers, with nothing
/// acknowledged lost.
fn hardening(lab: &LabCli, machines: &[Machine]) {
    let (pop_a, pop_b) = (&machines[0], &machines[1]);
    let scores = pop_b
        .run("systemd-analyze security --no-pager edge.service edge-ranges.service bgp-agent.service edge-xdp.service")
        .unwrap();
    let mut printed = Vec::new();
    for (unit, limit) in UNIT_EXPOSURE_LIMITS {
        let score = exposure(&scores, unit);
        assert!(
            score <= limit,
            "{unit}: exposure {score} > {limit}:\n{scores}"
        );
        printed.push(format!("{unit} {score}"));
    }

    let decided = |m: &Machine| {
        m.run("curl -s --max-time 2 http://$(sed -n 's/^admin_listen: //p' /etc/edge/agent.yaml)/metrics")
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("bgp_agent_check_results_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let checks_before = decided(pop_b);
    let flood = pop_b
        .run(&format!(
            "ulimit -n 16384; python3 - <<'PY'\n{HALF_HEAD_FLOOD}\nPY"
        ))
        .unwrap();
    let flood = flood.trim().to_owned();
    let checks_during = decided(pop_b) - checks_before;
    let longest_held: f64 = flood
        .split("longer than ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or(f64::MAX);
    assert!(
        flood.starts_with("closed 2000/2000") && flood.contains("answered 200"),
        "half-head flood: {flood}"
    );
    assert!(
        longest_held <= HALF_HEAD_CLOSE_BOUND,
        "half-head flood: a connection was held {longest_held} s: {flood}"
    );
    assert!(
        checks_during >= 10.0,
        "the agent stopped deciding under the flood: {checks_during} check runs: {flood}"
    );

    let mut watchdog = Vec::new();
    for (machine, unit) in [(pop_b, "bgp-agent"), (pop_a, "exabgp")] {
        let agent = machine.run("pgrep -x bgp-agent").unwrap().trim().to_owned();
        let unit_pid = main_pid(machine, unit);
        let router = RouterWatch::start();
        let load = lab.load(
            &format!("stop-agent-{}", machine.name),
            50,
            Duration::from_secs(12),
        );
        std::thread::sleep(Duration::from_secs(1));
        machine.run(&format!("kill -STOP {agent}")).unwrap();
        let withdrawn = lab.wait_next_hops(1, WATCHDOG + Duration::from_secs(1));
        let outcomes = load.finish(lab);
        let router = router.stop();
        wait_restarted(machine, unit, &unit_pid);
        let back = lab.wait_next_hops(2, Duration::from_secs(60));
        let (rehashed, failed): (Vec<&Outcome>, Vec<&Outcome>) = outcomes
            .iter()
            .filter(|o| !o.acked())
            .partition(|o| router.rehashed(o));
        assert!(
            failed.is_empty() && rehashed.len() <= MAX_REHASHED_PER_CHANGE * router.changes().len(),
            "SIGSTOP of the agent on {}: {} failed, {} reset by the router: {:?}",
            machine.name,
            failed.len(),
            rehashed.len(),
            failures(&outcomes)
        );
        lab.assert_at_origin_once(&outcomes, Duration::from_secs(30));
        watchdog.push(format!(
            "{} ({unit}) withdrawn {:.1} s after SIGSTOP, back {:.1} s later, {}/{} acked",
            machine.name,
            withdrawn.as_secs_f64(),
            back.as_secs_f64(),
            outcomes.iter().filter(|o| o.acked()).count(),
            outcomes.len()
        ));
    }
    println!(
        "scenario ansible-hardening: exposure {}; agent admin flood: {flood}, {checks_during} check runs meanwhile; watchdog: {}",
        printed.join(", "),
        watchdog.join("; ")
    );
}

/// A power cut on pop-b (BIRD) and the boot after it: BIRD starts from the withdrawn
/// include file under /run, so the router gets no path via pop-b until its agent has
/// seen the edge ready (for `rise` rounds) and announced.
fn power_cut(lab: &LabCli, pop_b: &mut Machine) {
    lab.wait_next_hops(2, Duration::from_secs(60));
    let router = RouterWatch::start();
    let cut_ms = now_ms();
    pop_b.power_cut_and_boot().unwrap();
    let booted_ms = now_ms();
    // The machine boots faster than BFD notices the old BIRD is gone: two paths right
    // after the boot may still be the old one. Wait for the new agent's announce first.
    let started = Instant::now();
    while !pop_b
        .run(&format!(
            "journalctl -u bgp-agent --since @{} --no-pager | grep -c 'route change.*announce' || true",
            cut_ms / 1000
        ))
        .unwrap()
        .trim()
        .parse::<u32>()
        .is_ok_and(|announces| announces > 0)
    {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "pop-b's agent never announced after the power cut"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let back = lab.wait_next_hops(2, Duration::from_secs(90));
    let log = router.stop();
    let path_gone_ms = log
        .first_without(POP_B_ADDR, cut_ms)
        .expect("pop-b's path never left after the power cut");
    let path_back_ms = log
        .first_with(POP_B_ADDR, path_gone_ms)
        .expect("pop-b's path came back");
    // A machine shares the host's kernel, and so its boot id: `journalctl -b` would
    // include the boots before the cut.
    let first_unix_ms = |unit: &str, grep: &str| -> u64 {
        let line = pop_b
            .run(&format!(
                "journalctl -u {unit} --since @{} -o short-unix --no-pager | grep -m1 -e '{grep}'",
                cut_ms / 1000
            ))
            .unwrap();
        let secs: f64 = line
            .split_whitespace()
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{unit}: no '{grep}' in this boot's journal: {line}"));
        (secs * 1000.0) as u64
    };
    let bird_started_ms = first_unix_ms("bird", "Started");
    let edge_ready_ms = first_unix_ms("bgp-agent", "check changed check=edge.*ok=true");
    let announced_ms = first_unix_ms("bgp-agent", "route change.*announce");
    // A stale include file would have BIRD announce as it starts, a rise (0.9 s) or more
    // before the agent. journald stamps the agent's line when it reads it from the
    // agent's stdout, a few ms late on a machine that has just booted.
    assert!(
        path_back_ms + JOURNAL_STAMP_SLACK_MS >= announced_ms,
        "the router had pop-b's path {} ms before its agent announced: BIRD started from a stale include file?",
        announced_ms - path_back_ms
    );
    assert!(
        announced_ms >= edge_ready_ms,
        "the agent announced before it saw the edge ready"
    );
    println!(
        "scenario ansible-power-cut: pop-b cut and booted in {:.1} s; BIRD up {:.1} s after the cut, the agent saw the edge ready {:.1} s after BIRD started and announced {:.1} s later (rise), the router's path via pop-b {:.1} s after that; 2 paths {:.1} s after boot",
        (booted_ms - cut_ms) as f64 / 1e3,
        bird_started_ms.saturating_sub(cut_ms) as f64 / 1e3,
        edge_ready_ms.saturating_sub(bird_started_ms) as f64 / 1e3,
        announced_ms.saturating_sub(edge_ready_ms) as f64 / 1e3,
        path_back_ms.saturating_sub(announced_ms) as f64 / 1e3,
        back.as_secs_f64()
    );
}

/// "Overall exposure level for UNIT: N.N" of `systemd-analyze security`.
fn exposure(report: &str, unit: &str) -> f64 {
    report
        .lines()
        .find(|l| l.contains(&format!("Overall exposure level for {unit}:")))
        .and_then(|l| l.split(": ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level for {unit}:\n{report}"))
}

/// Waits (up to 20 s) until systemd runs `unit` again under a PID other than `old_pid`.
fn wait_restarted(machine: &Machine, unit: &str, old_pid: &str) {
    let started = Instant::now();
    while main_pid(machine, unit) == old_pid || machine.unit_state(unit) != "active" {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{unit} on {} did not come back",
            machine.name
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn main_pid(machine: &Machine, unit: &str) -> String {
    machine
        .run(&format!("systemctl show -p MainPID --value {unit}"))
        .unwrap()
        .trim()
        .to_owned()
}

/// A sample's value from the edge's metrics, read inside the machine: the series `name`
/// whose labels include `label` (0 when absent).
fn metric(machine: &Machine, name: &str, label: &str) -> f64 {
    machine
        .run("curl -s http://$(sed -n 's/^admin_listen: //p' /etc/edge/edge.yaml)/metrics")
        .unwrap()
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// An empty secrets list fails the play at the validate step on the first PoP; the
/// second is never touched and the first keeps serving with its running config.
fn bad_config_stops_at_validate(fleet: &Fleet, lab: &LabCli, machines: &[Machine]) {
    let pop_a = &machines[0];
    let config_before = std::fs::read(pop_a.path("/etc/edge/edge.yaml")).unwrap();
    let pid_before = main_pid(pop_a, "edge");
    let bad = fleet.dir.join("bad-routes.yml");
    std::fs::write(
        &bad,
        "edge_routes:\n  - { path: /hooks/github, provider: github, secrets: [] }\n",
    )
    .unwrap();
    let mut args = fleet.current_package();
    args.extend(["-e".to_owned(), format!("@{}", bad.display())]);
    let run = fleet.playbook("site.yml", &args);
    assert!(!run.success, "a bad config must fail the play");
    assert!(run.recap(&pop_a.name, "failed") >= 1, "{}", run.output);
    assert_eq!(run.recap("pop-b", "ok"), 0, "pop-b was touched");
    let refusal = run
        .output
        .lines()
        .find(|l| l.contains("secrets") && l.contains("must not be empty"))
        .unwrap_or_else(|| panic!("check-config's refusal not shown:\n{}", run.output));
    assert!(run.output.contains("Edge config, validated"));
    assert_eq!(
        std::fs::read(pop_a.path("/etc/edge/edge.yaml")).unwrap(),
        config_before,
        "the running config was replaced"
    );
    assert_eq!(main_pid(pop_a, "edge"), pid_before);
    let outcomes = lab
        .load("ansible-bad-config", 50, Duration::from_secs(3))
        .finish(lab);
    let served_by_a = outcomes
        .iter()
        .filter(|o| o.acked() && o.pop.as_deref() == Some("pop-a"))
        .count();
    assert!(
        outcomes.iter().all(|o| o.acked()),
        "{:?}",
        failures(&outcomes)
    );
    assert!(served_by_a > 0, "pop-a stopped serving");
    println!(
        "scenario ansible-bad-config: play failed at the validate step on pop-a ({}), pop-b untouched, pop-a kept its config and process and acked {served_by_a} of {} webhooks",
        refusal[refusal.find("routes[").unwrap_or(0)..]
            .trim()
            .chars()
            .take(60)
            .collect::<String>(),
        outcomes.len()
    );
}

/// Rules that would shut the controller out (as if it were left out of every management
/// set) are loaded, the controller cannot confirm them, the play fails, and the way-back
/// timer takes them out: the PoP answers ssh again within `firewall_confirm_seconds`.
fn controller_is_never_locked_out(fleet: &Fleet, pop_a: &Machine) {
    const CONFIRM_SECONDS: u64 = 20;
    let mut args = fleet.current_package();
    args.extend(
        [
            "--limit",
            "pop-a",
            "--tags",
            "firewall",
            "-e",
            "firewall_controller=",
            "-e",
        ]
        .map(str::to_owned),
    );
    args.push(format!("firewall_confirm_seconds={CONFIRM_SECONDS}"));
    let run = fleet.playbook("site.yml", &args);
    let failed_at = Instant::now();
    assert!(
        !run.success,
        "the controller confirmed rules that leave it out"
    );
    assert!(
        run.output.contains("A fresh connection gets through"),
        "{}",
        run.output
    );
    assert!(
        !fleet.ssh_answers(POP_A_ADDR),
        "the rules loaded did not shut the controller out"
    );
    let back = (0..60).find_map(|_| {
        std::thread::sleep(Duration::from_secs(1));
        fleet.ssh_answers(POP_A_ADDR).then(|| failed_at.elapsed())
    });
    let back = back.expect("the PoP stayed unreachable: the way back did not run");
    let tables = pop_a.run("nft list tables").unwrap();
    assert!(
        !tables.contains("webhook_edge"),
        "the way back left the table: {tables}"
    );
    println!(
        "scenario ansible-firewall-lockout: rules without the controller loaded on pop-a, the play failed at the confirmation, ssh answered again {:.1} s later (way-back timer {CONFIRM_SECONDS} s after loading)",
        back.as_secs_f64()
    );
}

/// What the test deploys with: the controller, two packages, the cached rootfs.
struct Fleet {
    repo: PathBuf,
    dir: PathBuf,
    ansible_bin: PathBuf,
    rootfs: PathBuf,
    ssh_key: PathBuf,
    package: PathBuf,
    version: String,
    upgrade_package: PathBuf,
    upgrade_version: String,
}

impl Fleet {
    /// The cached rootfs and controller (made when missing), an ssh key, and the
    /// package twice from this checkout's release binaries: as built, and bumped.
    fn prepare() -> Fleet {
        let repo = repo();
        let dir = repo.join("target/lab-machines");
        std::fs::create_dir_all(&dir).unwrap();
        let rootfs = PathBuf::from(script_output(&repo.join("lab/machines/rootfs.sh")));
        let ansible_bin = PathBuf::from(script_output(&repo.join("lab/machines/controller.sh")));
        let ssh_key = dir.join("id_ed25519");
        if !ssh_key.exists() {
            run_ok(
                Command::new("ssh-keygen")
                    .args(["-q", "-t", "ed25519", "-N", ""])
                    .arg("-f")
                    .arg(&ssh_key),
            );
        }
        let _ = std::fs::remove_dir_all(dir.join("ssh-control"));
        let _ = std::fs::remove_file(dir.join("tickets.keys"));
        let debs = dir.join("debs");
        let _ = std::fs::remove_dir_all(&debs);
        let (package, version) = build_package(&repo, &debs, None);
        let (upgrade_package, upgrade_version) = build_package(&repo, &debs, Some("2"));
        Fleet {
            repo,
            dir,
            ansible_bin,
            rootfs,
            ssh_key,
            package,
            version,
            upgrade_package,
            upgrade_version,
        }
    }

    /// pop-a and pop-b booted into their lab namespaces; the controller reaches their
    /// sshd from `CONTROLLER_ADDR`, across the lab's router and the PoPs' firewalls.
    fn boot(&self) -> Vec<Machine> {
        run_ok(Command::new("ip").args([
            "netns",
            "exec",
            "lab-client",
            "ip",
            "addr",
            "replace",
            &format!("{CONTROLLER_ADDR}/24"),
            "dev",
            "eth1",
        ]));
        let key = std::fs::read_to_string(self.ssh_key.with_extension("pub")).unwrap();
        let machines: Vec<Machine> = ["pop-a", "pop-b"]
            .iter()
            .map(|pop| {
                Machine::boot(pop, &format!("lab-{pop}"), &self.rootfs, &self.dir, &key).unwrap()
            })
            .collect();
        let mut inventory = String::from("pops:\n  hosts:\n");
        for machine in &machines {
            inventory.push_str(&format!(
                "    {}:\n      ansible_user: root\n      ansible_ssh_private_key_file: {}\n      ansible_ssh_common_args: >-\n        -o ProxyCommand=\"{}\" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null\n",
                machine.name,
                self.ssh_key.display(),
                controller_ssh_proxy()
            ));
        }
        std::fs::write(self.dir.join("connection.yml"), inventory).unwrap();
        machines
    }

    /// Runs a playbook of `ansible/` against the example inventory (the lab's PoPs)
    /// plus the machines' connection details.
    /// After the rolling deploy the fleet runs the upgraded package, and the inventory
    /// would say so: later plays name it.
    /// Whether `machine`'s sshd lets the controller in (a fresh connection, 3 s at most).
    fn ssh_answers(&self, address: &str) -> bool {
        Command::new("ssh")
            .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=3"])
            .args([
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
            ])
            .arg("-o")
            .arg(format!("ProxyCommand={}", controller_ssh_proxy()))
            .arg("-i")
            .arg(&self.ssh_key)
            .arg(format!("root@{address}"))
            .arg("true")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Every secret a site run handles: the values in the lab's vault and the fleet's
    /// ticket keys.
    fn lab_secrets(&self) -> Vec<String> {
        let vault = run_ok(
            Command::new(self.ansible_bin.join("ansible-vault"))
                .current_dir(self.repo.join("ansible"))
                .env("ANSIBLE_VAULT_PASSWORD_FILE", lab_vault_password())
                .args(["view", "inventory/group_vars/pops/vault.yml"]),
        );
        let mut secrets = Vec::new();
        string_leaves(&serde_yaml::from_str(&vault).unwrap(), &mut secrets);
        secrets.extend(self.controller_ticket_keys());
        assert!(secrets.len() >= 4, "the lab's vault holds its secrets");
        secrets
    }

    /// The controller's ticket keys, which must be kept ansible-vault encrypted.
    fn controller_ticket_keys(&self) -> Vec<String> {
        let file = self.dir.join("tickets.keys");
        let stored = std::fs::read_to_string(&file).unwrap();
        assert!(
            stored.starts_with("$ANSIBLE_VAULT;"),
            "the controller's ticket keys are not vault-encrypted: {}",
            file.display()
        );
        run_ok(
            Command::new(self.ansible_bin.join("ansible-vault"))
                .current_dir(self.repo.join("ansible"))
                .env("ANSIBLE_VAULT_PASSWORD_FILE", lab_vault_password())
                .arg("view")
                .arg(&file),
        )
        .lines()
        .map(str::to_owned)
        .collect()
    }

    fn current_package(&self) -> Vec<String> {
        vec![
            "-e".to_owned(),
            format!("edge_package_file={}", self.upgrade_package.display()),
        ]
    }

    fn playbook(&self, playbook: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> PlaybookRun {
        let started = Instant::now();
        let log_path = self.dir.join(format!("{playbook}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let status = Command::new("timeout")
            .arg(format!("{}s", PLAYBOOK_TIMEOUT.as_secs()))
            .arg(self.ansible_bin.join("ansible-playbook"))
            .current_dir(self.repo.join("ansible"))
            .env("ANSIBLE_NOCOLOR", "1")
            // ssh's shared connections are per run: a stale master from an earlier
            // run's machine at the same address would swallow this one's commands.
            .env("ANSIBLE_SSH_CONTROL_PATH_DIR", self.dir.join("ssh-control"))
            // The lab's vault password, named for the lab's runs only (not in ansible.cfg).
            .env("ANSIBLE_VAULT_PASSWORD_FILE", lab_vault_password())
            .args(["-i", "inventory/example.yml", "-i"])
            .arg(self.dir.join("connection.yml"))
            .arg("-e")
            .arg(format!("edge_package_file={}", self.package.display()))
            .arg("-e")
            .arg(format!(
                "edge_ticket_keys_file={}",
                self.dir.join("tickets.keys").display()
            ))
            // The machines' packages are in the rootfs; they cannot reach a mirror.
            .args(["-e", "apt_update_cache=false"])
            // The controller (on the host) cannot reach the lab's Prometheus; the PoPs can.
            .args(["-e", "rollout_query_from=pop-b"])
            // It reaches the lab's origin from the client's namespace, as it reaches the PoPs.
            .arg("-e")
            .arg(
                serde_json::json!({
                    "origin_admin_command": ["ip", "netns", "exec", "lab-client", testkit::edge::edge_bin()]
                })
                .to_string(),
            )
            .arg("-e")
            .arg(format!("rollout_soak_seconds={}", GATE_SOAK.as_secs()))
            .arg(playbook)
            .args(args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .unwrap();
        PlaybookRun {
            success: status.success(),
            output: std::fs::read_to_string(&log_path).unwrap(),
            elapsed: started.elapsed(),
        }
    }
}

struct PlaybookRun {
    success: bool,
    output: String,
    elapsed: Duration,
}

impl PlaybookRun {
    fn assert_ok(&self) {
        assert!(self.success, "playbook failed:\n{}", self.output);
    }

    /// A count from the PLAY RECAP (`pop-a : ok=30 changed=0 ...`); 0 for an absent host.
    fn recap(&self, host: &str, field: &str) -> u32 {
        let recap = self.output.rsplit("PLAY RECAP").next().unwrap_or("");
        recap
            .lines()
            .find(|l| l.split_whitespace().next() == Some(host))
            .and_then(|line| {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or(0)
    }

    /// The tasks that reported a change, with their headers, for a failure message.
    fn changed_tasks(&self) -> String {
        let mut task = "";
        let mut changed = Vec::new();
        for line in self.output.lines() {
            if line.starts_with("TASK [") {
                task = line;
            } else if line.starts_with("changed:") {
                changed.push(format!("{task}\n  {line}"));
            }
        }
        changed.join("\n")
    }
}

/// `cargo deb` over the release binaries; `revision` bumps the Debian revision.
fn build_package(repo: &Path, out: &Path, revision: Option<&str>) -> (PathBuf, String) {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .current_dir(repo)
        .args(["deb", "-p", "edge", "--no-build", "--strip", "--fast", "-o"])
        .arg(out);
    if let Some(revision) = revision {
        cargo.args(["--deb-revision", revision]);
    }
    let path = PathBuf::from(run_ok(&mut cargo).trim());
    assert_ships_the_docs(&path, out);
    let version = run_ok(
        Command::new("dpkg-deb")
            .args(["-f"])
            .arg(&path)
            .arg("Version"),
    );
    (path, version.trim().to_owned())
}

/// The package carries the edge's README and the alerts' runbook, where operators look.
fn assert_ships_the_docs(package: &Path, scratch: &Path) {
    let unpacked = scratch.join("docs-check");
    let _ = std::fs::remove_dir_all(&unpacked);
    run_ok(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(package)
            .arg(&unpacked),
    );
    let docs = unpacked.join("usr/share/doc/webhook-edge");
    let readme = std::fs::read_to_string(docs.join("README.md")).unwrap();
    assert!(readme.starts_with("# edge:"), "not the edge's README");
    let runbook = std::fs::read_to_string(docs.join("RUNBOOK.md")).unwrap();
    assert!(runbook.contains("## WebhookEdgeSpoolDamaged"));
    std::fs::remove_dir_all(&unpacked).unwrap();
}

/// The upgrade package with its edge binary swapped for a `rollback-rehearsal` build
/// (its GitHub route answers 500) and its version past the upgrade's, so apt takes it.
fn build_broken_package(fleet: &Fleet) -> (PathBuf, String) {
    let target = fleet.repo.join("target/rehearsal");
    run_ok(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&fleet.repo)
            .args(["build", "--release", "-p", "edge", "--bin", "edge"])
            .args(["--features", "rollback-rehearsal", "--target-dir"])
            .arg(&target),
    );
    let unpacked = fleet.dir.join("broken-deb");
    let _ = std::fs::remove_dir_all(&unpacked);
    run_ok(
        Command::new("dpkg-deb")
            .arg("-R")
            .arg(&fleet.upgrade_package)
            .arg(&unpacked),
    );
    std::fs::copy(target.join("release/edge"), unpacked.join("usr/bin/edge")).unwrap();
    let version = format!("{}+broken1", fleet.upgrade_version);
    let control_path = unpacked.join("DEBIAN/control");
    let control = std::fs::read_to_string(&control_path).unwrap();
    let control: Vec<String> = control
        .lines()
        .map(|line| match line.strip_prefix("Version: ") {
            Some(_) => format!("Version: {version}"),
            None => line.to_owned(),
        })
        .collect();
    std::fs::write(&control_path, control.join("\n") + "\n").unwrap();
    let arch = run_ok(
        Command::new("dpkg-deb")
            .arg("-f")
            .arg(&fleet.upgrade_package)
            .arg("Architecture"),
    );
    let package = fleet
        .dir
        .join(format!("debs/webhook-edge_{version}_{}.deb", arch.trim()));
    run_ok(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-b"])
            .arg(&unpacked)
            .arg(&package),
    );
    (package, version)
}

/// An ssh ProxyCommand from the controller's address.
/// Every string in `value`, at any depth.
fn string_leaves(value: &serde_yaml::Value, out: &mut Vec<String>) {
    match value {
        serde_yaml::Value::String(text) if !text.trim().is_empty() => out.push(text.clone()),
        serde_yaml::Value::Sequence(items) => items.iter().for_each(|v| string_leaves(v, out)),
        serde_yaml::Value::Mapping(map) => map.values().for_each(|v| string_leaves(v, out)),
        _ => {}
    }
}

/// The lab's vault password file: named by the lab's runs, never by ansible.cfg.
fn lab_vault_password() -> PathBuf {
    repo().join("ansible/inventory/lab-vault-password")
}

fn controller_ssh_proxy() -> String {
    format!("ip netns exec lab-client nc -s {CONTROLLER_ADDR} %h %p")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn script_output(script: &Path) -> String {
    run_ok(&mut Command::new(script)).trim().to_owned()
}

fn run_ok(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Prints `port:open|refused|filtered` for each port of argv[2..] on host argv[1], all
/// at once, one second each.
const PORT_SCAN: &str = "import socket, sys, concurrent.futures as f
def probe(port):
    s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)
    s.settimeout(1)
    code = s.connect_ex((sys.argv[1], int(port)))
    return port + ':' + ('open' if code == 0 else 'refused' if code == 111 else 'filtered')
print(' '.join(f.ThreadPoolExecutor(16).map(probe, sys.argv[2:])))";
/// `systemd-analyze security` exposure each unit must stay at or under: below
/// systemd's own daemons for the edge, its list fetcher and the agent; edge-xdp needs its
/// capabilities.
const UNIT_EXPOSURE_LIMITS: [(&str, f64); 4] = [
    ("edge.service", 1.9),
    ("edge-ranges.service", 1.5),
    ("bgp-agent.service", 2.5),
    ("edge-xdp.service", 3.5),
];
/// The admin server's header timeout (5 s), with room for the flood's own polling of
/// 2,000 sockets on a busy machine.
const HALF_HEAD_CLOSE_BOUND: f64 = 7.0;
/// `WatchdogSec=` of the agent's unit and of ExaBGP's drop-in.
const WATCHDOG: Duration = Duration::from_secs(5);
/// How much later than the agent wrote a line journald may stamp it (the power cut).
const JOURNAL_STAMP_SLACK_MS: u64 = 250;
/// 2,000 connections to the agent's admin that each send half a request head, then a
/// status read beside them; prints how many were closed and when.
const HALF_HEAD_FLOOD: &str = r#"
import re, socket, time, urllib.request
host, port = re.search(r"^admin_listen: (\S+):(\d+)", open("/etc/edge/agent.yaml").read(), re.M).groups()
started = time.monotonic()
held, closed, longest = {}, 0, 0.0
def sweep():
    # Notes each connection the server closed, and how long it had been held.
    global closed, longest
    for s, since in list(held.items()):
        try:
            if s.recv(4096) != b"":
                continue
        except BlockingIOError:
            continue
        except OSError:
            pass
        longest = max(longest, time.monotonic() - since)
        del held[s]
        s.close()
        closed += 1
for i in range(2000):
    s = socket.create_connection((host, int(port)))
    s.sendall(b"GET /status HTTP/1.1\r\nHost: pop\r\n")
    s.setblocking(False)
    held[s] = time.monotonic()
    if i % 25 == 0:
        sweep()
opened = time.monotonic() - started
answer = urllib.request.urlopen(f"http://{host}:{port}/status", timeout=3).status
while held and time.monotonic() - started < 40:
    sweep()
    time.sleep(0.05)
print(f"closed {closed}/2000, none held longer than {longest:.1f} s (opening them took {opened:.1f} s); /status answered {answer} beside them")
"#;
/// Units every provisioned PoP runs, whatever its speaker.
const COMMON_UNITS: [&str; 4] = [
    "edge",
    "edge-xdp",
    "prometheus-node-exporter",
    "anycast-addresses",
];
const PLAYBOOKS: [&str; 8] = [
    "site.yml",
    "backhaul.yml",
    "replay.yml",
    "origin-stream.yml",
    "rolling-deploy.yml",
    "drain.yml",
    "undrain.yml",
    "rotate-ticket-keys.yml",
];
/// A hung playbook fails the test instead of holding CI.
/// The controller's address: a second one on the lab's client, so that its ssh crosses
/// the router and each PoP's firewall as a real controller's does (and the client's own
/// address stays one the firewall refuses).
const CONTROLLER_ADDR: &str = "10.0.4.9";
const PLAYBOOK_TIMEOUT: Duration = Duration::from_secs(300);
/// Long enough to cover the whole rolling deploy: ~70 s on a quiet 2-core machine, over
/// 100 s with a busy disk (dpkg's fsyncs in the machines), plus each stage's gate.
const DEPLOY_LOAD: Duration = Duration::from_secs(200);
/// How long each stage of a rollout takes traffic before its gate judges it (the
/// production default is 120 s).
const GATE_SOAK: Duration = Duration::from_secs(20);
/// The rest of a gate interval: the gate's queries (from pop-b, over ssh), then the
/// rollback's drain until the router stops sending new connections to the canary.
const GATE_JUDGEMENT: Duration = Duration::from_secs(30);
/// The canary's install, soak, gate and rollback.
const CANARY_LOAD: Duration = Duration::from_secs(150);
