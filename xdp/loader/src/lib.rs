//! User side of the edge's XDP filter: `config` (YAML), `filter` (the loaded program and
//! its maps), `metrics` (Prometheus text of the counters), `under_attack` (when only the
//! providers' ranges reach the served ports).

pub mod config;
pub mod filter;
pub mod metrics;
pub mod under_attack;
