//! The PoP's BGP health agent: announces the anycast prefix while this PoP can accept and
//! store webhooks, withdraws it when it cannot, with hysteresis so a flapping check cannot
//! flap the route. `hysteresis` decides (pure), `checks/` observe, `speaker/` announces or
//! withdraws (ExaBGP or BIRD), `guard` refuses a withdraw that would empty the fleet.

mod agent;
mod checks;
pub mod config;
mod guard;
mod hysteresis;
mod metrics;
mod speaker;

pub use agent::run;
pub use checks::fetch;
pub use hysteresis::{Dampening, Policy};
pub use speaker::{Advert, bird::render as bird_include, withdraw_out_of_band};
