//! The anycast webhook edge: accepts webhooks over TLS, verifies their signatures, stores
//! them durably in the local spool and only then acknowledges.
//!
//! Where things are: `verify/` checks signatures (one file per provider), `event`
//! extracts event ids, `spool/` stores events durably, `http/webhook` is the request
//! path, `server` accepts connections, `admin` serves health and metrics, `backhaul/` forwards the spool to
//! the origin queue.

pub mod admin;
pub mod admission;
pub mod backhaul;
pub mod body_rate;
pub mod config;
pub mod conn_limits;
pub mod deadline_io;
pub mod event;
pub mod http;
pub mod metrics;
pub mod reload;
pub mod run;
pub mod server;
pub mod sockets;
pub mod spool;
pub mod tls;
pub mod verify;
