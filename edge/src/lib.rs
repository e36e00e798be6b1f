//! The anycast webhook edge: accepts webhooks over TLS, verifies their signatures, stores
//! them durably in the local spool and only then acknowledges.
//!
//! Where things are: `verify/` checks signatures (one file per provider), `event`
//! extracts event ids, `spool/` stores events durably, `http/webhook` is the request
//! path, `server/` accepts connections (sockets, caps, deadlines, TLS), `admin/` serves
//! health and metrics, `backhaul/` forwards the spool to the origin queue, `operator/`
//! the commands operators run beside it.

mod admin;
pub mod admission;
pub mod backhaul;
pub mod config;
pub use admin::metrics;
pub mod event;
mod http;
pub mod operator;
pub mod ranges;
mod reload;
pub mod run;
mod server;
pub mod spool;
mod tls;
pub mod verify;
