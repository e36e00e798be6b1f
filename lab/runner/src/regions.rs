//! `lab status` of a topology whose nodes name their region (the fleet's `lab.region`
//! label): each region's router and, for each of its PoPs, whether the router routes the
//! VIP to it, its requests a second, spool fill, backhaul lag and firing alerts, read
//! from the router's kernel routes and the lab Prometheus. [`table`] is the pure part.

use std::collections::BTreeMap;

use crate::prometheus::{Alert, Prometheus, labels_by, values_by};
use crate::runner::Lab;

/// The regions' table, or None when no node names a region (the small topology).
pub fn status(lab: &Lab, prometheus: &Prometheus, vip: &str) -> Option<String> {
    let regions = regions_of(lab);
    if regions.is_empty() {
        return None;
    }
    // A Prometheus that is down or starting leaves its columns empty, not the table.
    let query = |expr: &str| {
        prometheus
            .query(expr)
            .map(|data| values_by(&data, "pop"))
            .unwrap_or_default()
    };
    let seen = Seen {
        addresses: prometheus
            .query("max by (pop, instance) (up{job=\"edge\"})")
            .map(|data| {
                labels_by(&data, "pop", "instance")
                    .into_iter()
                    .map(|(pop, instance)| (pop, host_of(&instance).to_owned()))
                    .collect()
            })
            .unwrap_or_default(),
        requests_per_s: query("sum by (pop) (rate(edge_requests_total[30s]))"),
        spool_fill: query("max by (pop) (edge_spool_fill_ratio)"),
        lag_records: query("max by (pop) (edge_backhaul_lag_records)"),
        alerts: prometheus.alerts().unwrap_or_default(),
        next_hops: regions
            .values()
            .filter_map(|region| region.router.as_deref())
            .map(|router| {
                let hops = lab.next_hops(router, vip).unwrap_or_default();
                (router.to_owned(), hops)
            })
            .collect(),
    };
    Some(table(&regions, &seen))
}

/// The nodes of one region.
#[derive(Debug, Default, PartialEq)]
pub struct Region {
    /// Its router (the node labelled `lab.role: router`), if it has one.
    pub router: Option<String>,
    /// Its PoPs: the nodes that run an edge.
    pub pops: Vec<String>,
}

/// What the routers and Prometheus say now, per PoP (by its `pop` label).
#[derive(Debug, Default)]
pub struct Seen {
    /// Each PoP's address, as Prometheus scrapes its edge.
    pub addresses: BTreeMap<String, String>,
    /// Requests answered a second over the last 30 s.
    pub requests_per_s: BTreeMap<String, f64>,
    /// Spool fill, 0 to 1.
    pub spool_fill: BTreeMap<String, f64>,
    /// Records acked and not yet at the origin.
    pub lag_records: BTreeMap<String, f64>,
    /// Every alert pending or firing.
    pub alerts: Vec<Alert>,
    /// Each router's next hops for the VIP.
    pub next_hops: BTreeMap<String, Vec<String>>,
}

/// One block per region: its router's next hops, then a line per PoP.
pub fn table(regions: &BTreeMap<String, Region>, seen: &Seen) -> String {
    let mut out = String::new();
    for (name, region) in regions {
        let hops = region
            .router
            .as_ref()
            .and_then(|router| seen.next_hops.get(router));
        out.push_str(&format!(
            "region {name} ({}: {} next hops)\n",
            region.router.as_deref().unwrap_or("no router"),
            hops.map_or(0, Vec::len)
        ));
        out.push_str("  pop        route        req/s  spool   lag  alerts\n");
        for pop in &region.pops {
            let routed = match (seen.addresses.get(pop), hops) {
                (Some(address), Some(hops)) if hops.contains(address) => "routed",
                (Some(_), Some(_)) => "not routed",
                _ => "unknown",
            };
            let alerts: Vec<&str> = seen
                .alerts
                .iter()
                .filter(|alert| alert.firing() && alert.label("pop") == pop)
                .map(Alert::name)
                .collect();
            out.push_str(&format!(
                "  {pop:<10} {routed:<11} {:>6} {:>6} {:>5}  {}\n",
                shown(seen.requests_per_s.get(pop).copied(), 1, ""),
                shown(seen.spool_fill.get(pop).map(|fill| fill * 100.0), 1, "%"),
                shown(seen.lag_records.get(pop).copied(), 0, ""),
                if alerts.is_empty() {
                    "-".to_owned()
                } else {
                    alerts.join(",")
                }
            ));
        }
    }
    out
}

/// The topology's regions by their nodes' `lab.region` label: routers and PoPs.
fn regions_of(lab: &Lab) -> BTreeMap<String, Region> {
    let mut regions: BTreeMap<String, Region> = BTreeMap::new();
    for (name, node) in lab.topology.nodes() {
        let Some(region) = node.region() else {
            continue;
        };
        let region = regions.entry(region.to_owned()).or_default();
        if node.is_router() {
            region.router = Some(name.clone());
        } else if node.is_pop() {
            region.pops.push(name.clone());
        }
    }
    regions
}

/// `10.11.1.2:9180` → `10.11.1.2`.
fn host_of(instance: &str) -> &str {
    instance.rsplit_once(':').map_or(instance, |(host, _)| host)
}

/// A value rounded, with its unit, or `-` when Prometheus has none.
fn shown(value: Option<f64>, decimals: usize, unit: &str) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}{unit}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_region_lists_its_pops_with_route_state_load_spool_lag_and_alerts() {
        let regions = BTreeMap::from([
            (
                "ap".to_owned(),
                Region {
                    router: Some("rtr-ap".into()),
                    pops: vec!["pop-ap1".into(), "pop-ap2".into()],
                },
            ),
            (
                "eu".to_owned(),
                Region {
                    router: None,
                    pops: vec!["pop-eu1".into()],
                },
            ),
        ]);
        let text = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        let numbers = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| ((*k).into(), *v)).collect()
        };
        let alert = |name: &str, pop: &str, state: &str| Alert {
            labels: text(&[("alertname", name), ("pop", pop)]),
            state: state.into(),
            active_at: String::new(),
        };
        let seen = Seen {
            addresses: text(&[("pop-ap1", "10.13.1.2"), ("pop-ap2", "10.13.2.2")]),
            requests_per_s: numbers(&[("pop-ap1", 99.46)]),
            spool_fill: numbers(&[("pop-ap1", 0.0123), ("pop-ap2", 0.5)]),
            lag_records: numbers(&[("pop-ap1", 12.0), ("pop-ap2", 18_000.0)]),
            alerts: vec![
                alert("WebhookEdgeBackhaulLagging", "pop-ap2", "firing"),
                alert("WebhookEdgeDown", "pop-ap2", "pending"),
            ],
            next_hops: BTreeMap::from([("rtr-ap".to_owned(), vec!["10.13.1.2".to_owned()])]),
        };
        let table = table(&regions, &seen);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "region ap (rtr-ap: 1 next hops)");
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["pop-ap1", "routed", "99.5", "1.2%", "12", "-"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            [
                "pop-ap2",
                "not",
                "routed",
                "-",
                "50.0%",
                "18000",
                "WebhookEdgeBackhaulLagging"
            ]
        );
        assert_eq!(lines[4], "region eu (no router: 0 next hops)");
        assert_eq!(
            lines[6].split_whitespace().collect::<Vec<_>>(),
            ["pop-eu1", "unknown", "-", "-", "-", "-"]
        );
    }

    #[test]
    fn an_instance_is_its_host() {
        assert_eq!(host_of("10.11.1.2:9180"), "10.11.1.2");
        assert_eq!(host_of("[2001:db8::1]:9180"), "[2001:db8::1]");
        assert_eq!(host_of("pop-a"), "pop-a");
    }
}
