//! The PoP's BGP health agent: announces the anycast prefix while this PoP can accept and
//! store webhooks, withdraws it when it cannot, with hysteresis so a flapping check cannot
//! flap the route. `hysteresis` decides (pure), `checks/` observe, `speaker/` announces or
//! withdraws (ExaBGP or BIRD), `guard` refuses a withdraw that would empty the fleet.

pub mod agent;
pub mod checks;
pub mod config;
pub mod guard;
pub mod hysteresis;
pub mod metrics;
pub mod speaker;

/// Makes any panic end the process (exit status 101) after the usual report. tokio
/// catches a panic inside a task and lets the rest run on: an agent whose check or admin
/// task died would keep the route announced while nothing watches. A dead process is
/// what supervision handles: the unit's `ExecStopPost=` withdraws, `Restart=` brings
/// a fresh agent that starts withdrawn.
pub fn exit_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(101);
    }));
}

#[cfg(test)]
mod tests {
    /// Runs in a child copy of this test binary, which must die with 101.
    const CHILD: &str = "BGP_AGENT_PANIC_CHILD";

    #[test]
    fn a_panic_in_a_spawned_task_ends_the_process() {
        if std::env::var_os(CHILD).is_some() {
            super::exit_on_panic();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                tokio::spawn(async { panic!("a check task failed") });
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            });
            std::process::exit(0);
        }
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::a_panic_in_a_spawned_task_ends_the_process",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(101), "{status}");
    }
}
