//! `listener:` how the client-facing sockets are set up (`crate::sockets` applies it).

use edge_kit::config_file::FieldErrors;
use serde::Deserialize;

/// The `listener` section, validated: the listening sockets' options.
#[derive(Clone, Debug)]
pub struct ListenerSettings {
    /// The accept queue's length (`listen(2)` backlog).
    pub backlog: i32,
    /// TCP Fast Open queue length; 0 turns TFO off.
    pub tcp_fastopen_queue: u32,
    /// Worker threads, each a runtime of its own with its own sockets; `None`: one per
    /// CPU the process may run on.
    pub workers: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawListener {
    /// Accept queue length (capped by `net.core.somaxconn`). Default 4096.
    backlog: i32,
    /// Pending TCP Fast Open requests the kernel keeps; 0 turns TFO off. Default 256.
    tcp_fastopen_queue: u32,
    /// Worker threads serving connections, each pinned to a CPU. Default (0): one per
    /// CPU in the process's affinity mask.
    workers: usize,
}

impl Default for RawListener {
    fn default() -> Self {
        Self {
            backlog: 4096,
            tcp_fastopen_queue: 256,
            workers: 0,
        }
    }
}

impl RawListener {
    pub(super) fn validate(self, errors: &mut FieldErrors) -> ListenerSettings {
        if self.backlog <= 0 {
            errors.add("listener.backlog", "must be positive");
        }
        if self.workers > MAX_WORKERS {
            errors.add(
                "listener.workers",
                format!("must be at most {MAX_WORKERS} (0: one per CPU)"),
            );
        }
        ListenerSettings {
            backlog: self.backlog,
            tcp_fastopen_queue: self.tcp_fastopen_queue,
            workers: (self.workers > 0).then_some(self.workers),
        }
    }
}

/// More worker threads than this is a typo, not a machine.
const MAX_WORKERS: usize = 1024;
