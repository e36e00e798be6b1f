//! BIRD speaker: the announced prefixes live in a file that bird.conf includes, as
//! `define` prefix sets an export filter matches. The file is replaced atomically (temp +
//! rename), then `birdc configure` applies it; birdc exits 0 even when BIRD rejected the
//! configuration, so its output must say `Reconfigured`. A prefix set cannot be empty,
//! so each holds a placeholder no route ever matches.
//!
//! More sets, the same names with a suffix, hold the prefixes announced in a special
//! way, for the export filter to act on: `_GSHUT` those tagged GRACEFUL_SHUTDOWN
//! (`if net ~ ANYCAST_V4_GSHUT then bgp_community.add((65535, 0));`), `_DEGRADED` those
//! to make less preferred (`if net ~ ANYCAST_V4_DEGRADED then bgp_path.prepend(65002);`).

use std::time::Duration;

use anyhow::{Context, bail};
use ipnet::IpNet;

use super::advert::Advert;
use crate::config::BirdSettings;
use crate::metrics::{PeerLabel, Sessions};

pub(crate) struct Bird {
    prefixes: Vec<IpNet>,
    settings: BirdSettings,
}

impl Bird {
    pub(crate) fn new(settings: &BirdSettings, prefixes: Vec<IpNet>) -> Self {
        Self {
            prefixes,
            settings: settings.clone(),
        }
    }

    pub(crate) async fn apply(&mut self, advert: Advert) -> anyhow::Result<()> {
        let text = render(
            &self.settings.define_v4,
            &self.settings.define_v6,
            &self.prefixes,
            advert,
        );
        let temp = self.settings.include_file.with_extension("tmp");
        tokio::fs::write(&temp, text)
            .await
            .with_context(|| format!("writing {}", temp.display()))?;
        // BIRD, another user, reads it; the agent's umask is 0077.
        tokio::fs::set_permissions(&temp, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .await
            .with_context(|| format!("making {} readable", temp.display()))?;
        tokio::fs::rename(&temp, &self.settings.include_file)
            .await
            .with_context(|| format!("renaming to {}", self.settings.include_file.display()))?;
        let output = tokio::time::timeout(
            self.settings.timeout,
            tokio::process::Command::new(&self.settings.birdc)
                .arg("-s")
                .arg(&self.settings.socket)
                .arg("configure")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .with_context(|| {
            format!(
                "birdc configure took longer than {:?}",
                self.settings.timeout
            )
        })?
        .with_context(|| format!("running {}", self.settings.birdc.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !stdout.contains("Reconfigured") {
            bail!(
                "birdc configure did not reconfigure: {}{}",
                stdout.trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }
}

impl Bird {
    /// Keeps `sessions` at what `birdc show protocols all` says of each BGP protocol,
    /// every few seconds; while BIRD does not answer, every session it had is down.
    pub(crate) fn watch_sessions(&self, sessions: Sessions) -> impl Future<Output = ()> + use<> {
        let (birdc, socket) = (self.settings.birdc.clone(), self.settings.socket.clone());
        async move {
            let mut known: Vec<String> = Vec::new();
            let mut tick = tokio::time::interval(SESSION_POLL);
            loop {
                tick.tick().await;
                let output = tokio::time::timeout(
                    SESSION_POLL,
                    tokio::process::Command::new(&birdc)
                        .arg("-s")
                        .arg(&socket)
                        .args(["show", "protocols", "all"])
                        .kill_on_drop(true)
                        .output(),
                )
                .await;
                let now: Vec<(String, bool)> = match output {
                    Ok(Ok(out)) if out.status.success() => {
                        bgp_sessions(&String::from_utf8_lossy(&out.stdout))
                    }
                    _ => known.iter().map(|peer| (peer.clone(), false)).collect(),
                };
                for (peer, up) in now {
                    if !known.contains(&peer) {
                        known.push(peer.clone());
                    }
                    sessions
                        .get_or_create(&PeerLabel { peer })
                        .set(i64::from(up));
                }
            }
        }
    }
}

/// Each BGP protocol's neighbor address and whether its session is established, from
/// `birdc show protocols all`.
pub(crate) fn bgp_sessions(text: &str) -> Vec<(String, bool)> {
    let mut sessions = Vec::new();
    let mut established = None;
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            let mut fields = line.split_whitespace();
            established = (fields.nth(1) == Some("BGP")).then(|| line.contains("Established"));
        } else if let (Some(up), Some(address)) =
            (established, line.trim().strip_prefix("Neighbor address:"))
        {
            sessions.push((address.trim().to_owned(), up));
        }
    }
    sessions
}

/// The include file's text for `prefixes` carried as `advert`: per address family, the
/// set of announced prefixes and the sets of those announced specially, placeholder
/// first.
pub fn render(define_v4: &str, define_v6: &str, prefixes: &[IpNet], advert: Advert) -> String {
    let only = |wanted: bool| if wanted { prefixes } else { &[] };
    let announced = only(advert != Advert::Withdrawn);
    let graceful = only(advert == Advert::GracefulShutdown);
    let degraded = only(advert == Advert::Degraded);
    let set = |prefixes: &[IpNet], v6: bool| {
        let placeholder = if v6 { PLACEHOLDER_V6 } else { PLACEHOLDER_V4 };
        let mut items = vec![placeholder.to_owned()];
        items.extend(
            prefixes
                .iter()
                .filter(|p| matches!(p, IpNet::V6(_)) == v6)
                .map(|p| p.to_string()),
        );
        items.join(", ")
    };
    format!(
        "# Written by bgp-agent; do not edit. {} prefixes announced ({:?}).\n\
         # The first entry of each set is a placeholder: BIRD refuses an empty set.\n\
         define {define_v4} = [ {} ];\n\
         define {define_v6} = [ {} ];\n\
         define {define_v4}_GSHUT = [ {} ];\n\
         define {define_v6}_GSHUT = [ {} ];\n\
         define {define_v4}_DEGRADED = [ {} ];\n\
         define {define_v6}_DEGRADED = [ {} ];\n",
        announced.len(),
        advert,
        set(announced, false),
        set(announced, true),
        set(graceful, false),
        set(graceful, true),
        set(degraded, false),
        set(degraded, true),
    )
}

const SESSION_POLL: Duration = Duration::from_secs(5);
const PLACEHOLDER_V4: &str = "0.0.0.0/32";
const PLACEHOLDER_V6: &str = "::/128";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bgp_sessions_from_show_protocols_all() {
        let text = [
            "BIRD 2.0.12 ready.",
            "Name       Proto      Table      State  Since         Info",
            "device1    Device     ---        up     09:01:04.230  ",
            "upstream   BGP        ---        up     09:01:05.089  Established   ",
            "  BGP state:          Established",
            "    Neighbor address: 10.0.2.1",
            "    Neighbor AS:      65000",
            "",
            "upstream6  BGP        ---        start  09:01:05.013  Active        Socket: Connection refused",
            "  BGP state:          Active",
            "    Neighbor address: 2001:db8:2::1",
            "static1    Static     master4    up     09:01:04.230  ",
        ]
        .join("\n");
        assert_eq!(
            bgp_sessions(&text),
            [
                ("10.0.2.1".to_owned(), true),
                ("2001:db8:2::1".to_owned(), false)
            ]
        );
    }

    #[test]
    fn sets_are_never_empty_and_split_by_family() {
        let none = render("A4", "A6", &[], Advert::Withdrawn);
        assert!(
            none.contains("define A4 = [ 0.0.0.0/32 ];")
                && none.contains("define A6 = [ ::/128 ];"),
            "{none}"
        );
        let prefixes: Vec<IpNet> = vec![
            "192.0.2.10/32".parse().unwrap(),
            "2001:db8::10/128".parse().unwrap(),
        ];
        let both = render("A4", "A6", &prefixes, Advert::Announced);
        assert!(
            both.contains("define A4 = [ 0.0.0.0/32, 192.0.2.10/32 ];"),
            "{both}"
        );
        assert!(
            both.contains("define A6 = [ ::/128, 2001:db8::10/128 ];"),
            "{both}"
        );
    }

    #[test]
    fn special_sets_hold_the_prefixes_announced_that_way() {
        let prefixes: Vec<IpNet> = vec![
            "192.0.2.10/32".parse().unwrap(),
            "2001:db8::10/128".parse().unwrap(),
        ];
        let plain = render("A4", "A6", &prefixes, Advert::Announced);
        assert!(
            plain.contains("define A4_GSHUT = [ 0.0.0.0/32 ];"),
            "{plain}"
        );
        assert!(plain.contains("define A6_GSHUT = [ ::/128 ];"), "{plain}");
        assert!(
            plain.contains("define A4_DEGRADED = [ 0.0.0.0/32 ];"),
            "{plain}"
        );
        let degraded = render("A4", "A6", &prefixes, Advert::Degraded);
        assert!(
            degraded.contains("define A4 = [ 0.0.0.0/32, 192.0.2.10/32 ];")
                && degraded.contains("define A4_DEGRADED = [ 0.0.0.0/32, 192.0.2.10/32 ];")
                && degraded.contains("define A4_GSHUT = [ 0.0.0.0/32 ];"),
            "{degraded}"
        );
        let leaving = render("A4", "A6", &prefixes, Advert::GracefulShutdown);
        assert!(
            leaving.contains("define A4 = [ 0.0.0.0/32, 192.0.2.10/32 ];")
                && leaving.contains("define A4_GSHUT = [ 0.0.0.0/32, 192.0.2.10/32 ];")
                && leaving.contains("define A6_GSHUT = [ ::/128, 2001:db8::10/128 ];"),
            "{leaving}"
        );
    }
}
