//! The pieces every binary of the appliance (`edge`, `bgp-agent`, `edge-xdp`) needs
//! the same way. Kept small: one module per concern.

pub mod admin;
pub mod cli;
pub mod clock;
pub mod config_file;
pub mod log_throttle;
pub mod logging;
pub mod metrics;
pub mod panic;
pub mod process;
pub mod ranges;
pub mod secret;
pub mod service;
pub mod signals;
pub mod watchdog;
