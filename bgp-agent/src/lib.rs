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
