//! BIRD speaker: the announced prefixes live in a file that bird.conf includes, as
//! `define` prefix sets an export filter matches. The file is replaced atomically (temp +
//! rename), then `birdc configure` applies it; birdc exits 0 even when BIRD rejected the
//! configuration, so its output must say `Reconfigured`. A prefix set cannot be empty,
//! so each holds a placeholder no route ever matches.
//!
//! Two more sets, the same names with `_GSHUT` appended, hold the prefixes announced
//! with GRACEFUL_SHUTDOWN; the export filter tags them:
//! `if net ~ ANYCAST_V4_GSHUT then bgp_community.add((65535, 0));`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use ipnet::IpNet;

use super::Advert;
use crate::config::SpeakerConfig;

pub struct Bird {
    prefixes: Vec<IpNet>,
    include_file: PathBuf,
    socket: PathBuf,
    birdc: PathBuf,
    define_v4: String,
    define_v6: String,
    timeout: Duration,
}

impl Bird {
    pub fn new(config: &SpeakerConfig, prefixes: Vec<IpNet>) -> Self {
        let SpeakerConfig::Bird {
            include_file,
            socket,
            birdc,
            define_v4,
            define_v6,
            timeout,
        } = config
        else {
            unreachable!("built from a bird config");
        };
        Self {
            prefixes,
            include_file: include_file.clone(),
            socket: socket.clone(),
            birdc: birdc.clone(),
            define_v4: define_v4.clone(),
            define_v6: define_v6.clone(),
            timeout: *timeout,
        }
    }

    pub async fn apply(&mut self, advert: Advert) -> anyhow::Result<()> {
        let (announced, graceful): (&[IpNet], &[IpNet]) = match advert {
            Advert::Announced => (&self.prefixes, &[]),
            Advert::GracefulShutdown => (&self.prefixes, &self.prefixes),
            Advert::Withdrawn => (&[], &[]),
        };
        let text = render(&self.define_v4, &self.define_v6, announced, graceful);
        let temp = self.include_file.with_extension("tmp");
        tokio::fs::write(&temp, text)
            .await
            .with_context(|| format!("writing {}", temp.display()))?;
        tokio::fs::rename(&temp, &self.include_file)
            .await
            .with_context(|| format!("renaming to {}", self.include_file.display()))?;
        let output = tokio::time::timeout(
            self.timeout,
            tokio::process::Command::new(&self.birdc)
                .arg("-s")
                .arg(&self.socket)
                .arg("configure")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .with_context(|| format!("birdc configure took longer than {:?}", self.timeout))?
        .with_context(|| format!("running {}", self.birdc.display()))?;
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

/// The include file's text: per address family, a set of the announced prefixes and a
/// set of those tagged GRACEFUL_SHUTDOWN, placeholder first.
pub fn render(define_v4: &str, define_v6: &str, announced: &[IpNet], graceful: &[IpNet]) -> String {
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
        "# Written by bgp-agent; do not edit. {} prefixes announced, {} with GRACEFUL_SHUTDOWN.\n\
         # The first entry of each set is a placeholder: BIRD refuses an empty set.\n\
         define {define_v4} = [ {} ];\n\
         define {define_v6} = [ {} ];\n\
         define {define_v4}_GSHUT = [ {} ];\n\
         define {define_v6}_GSHUT = [ {} ];\n",
        announced.len(),
        graceful.len(),
        set(announced, false),
        set(announced, true),
        set(graceful, false),
        set(graceful, true),
    )
}

const PLACEHOLDER_V4: &str = "0.0.0.0/32";
const PLACEHOLDER_V6: &str = "::/128";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_never_empty_and_split_by_family() {
        let none = render("A4", "A6", &[], &[]);
        assert!(
            none.contains("define A4 = [ 0.0.0.0/32 ];")
                && none.contains("define A6 = [ ::/128 ];"),
            "{none}"
        );
        let prefixes: Vec<IpNet> = vec![
            "192.0.2.10/32".parse().unwrap(),
            "2001:db8::10/128".parse().unwrap(),
        ];
        let both = render("A4", "A6", &prefixes, &[]);
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
    fn graceful_shutdown_sets_hold_the_tagged_prefixes() {
        let prefixes: Vec<IpNet> = vec![
            "192.0.2.10/32".parse().unwrap(),
            "2001:db8::10/128".parse().unwrap(),
        ];
        let plain = render("A4", "A6", &prefixes, &[]);
        assert!(
            plain.contains("define A4_GSHUT = [ 0.0.0.0/32 ];"),
            "{plain}"
        );
        assert!(plain.contains("define A6_GSHUT = [ ::/128 ];"), "{plain}");
        let leaving = render("A4", "A6", &prefixes, &prefixes);
        assert!(
            leaving.contains("define A4 = [ 0.0.0.0/32, 192.0.2.10/32 ];")
                && leaving.contains("define A4_GSHUT = [ 0.0.0.0/32, 192.0.2.10/32 ];")
                && leaving.contains("define A6_GSHUT = [ ::/128, 2001:db8::10/128 ];"),
            "{leaving}"
        );
    }
}
