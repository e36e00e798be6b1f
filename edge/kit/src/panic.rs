//! The panic policy every binary of the appliance shares: a panic ends the process.
//!
//! tokio catches a panic inside a task and lets the rest run on, which leaves a
//! half-alive process: an edge whose spool writer died answers 503 to everything while
//! its listeners and `/readyz` look fine; an agent whose check task died keeps the route
//! announced while nothing watches. A dead process is what supervision handles: systemd
//! restarts it, recovery reads what is really on disk, and the agent's unit withdraws.

/// Makes any panic, in any task or thread, end the process with exit status 101 after
/// the usual report.
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
    const CHILD: &str = "EDGE_KIT_PANIC_CHILD";

    #[test]
    fn a_panic_in_a_spawned_task_or_a_blocking_thread_ends_the_process() {
        if let Some(kind) = std::env::var_os(CHILD) {
            super::exit_on_panic();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                if kind == "blocking" {
                    drop(tokio::task::spawn_blocking(|| {
                        panic!("a writer thread failed")
                    }));
                } else {
                    drop(tokio::spawn(async { panic!("a background task failed") }));
                }
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            });
            std::process::exit(0);
        }
        for kind in ["task", "blocking"] {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "panic::tests::a_panic_in_a_spawned_task_or_a_blocking_thread_ends_the_process",
                    "--nocapture",
                ])
                .env(CHILD, kind)
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            assert_eq!(status.code(), Some(101), "{kind}: {status}");
        }
    }
}
