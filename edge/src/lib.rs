//! The anycast webhook edge: accepts webhooks over TLS, verifies their signatures, stores
//! them durably in the local spool and only then acknowledges.
//!
//! Where things are: `verify/` checks signatures (one file per provider), `event`
//! extracts event ids, `spool/` stores events durably, `http/webhook` is the request
//! path, `server` accepts connections, `admin` serves health and metrics, `backhaul/` forwards the spool to
//! the origin queue, `operator/` the commands operators run beside it.

#![warn(missing_docs)]

mod admin;
pub mod admission;
pub mod backhaul;
mod body_rate;
pub mod config;
mod conn_limits;
mod deadline_io;
pub mod event;
mod http;
mod liveness;
pub mod metrics;
pub mod operator;
pub mod ranges;
mod reload;
pub mod run;
mod server;
mod sockets;
pub mod spool;
mod tls;
pub mod verify;
