//! The `metric` check's rule, on a Prometheus (or OpenMetrics) text page: every sample
//! of the named metric, whatever its labels, must be at most the bound.

/// `Ok` with the largest sample when all are within `max`; `Err` naming the first
/// sample over it, or the metric's absence.
pub(super) fn at_most(page: &str, metric: &str, max: f64) -> Result<String, String> {
    let mut largest: Option<f64> = None;
    for (labels, value) in samples(page, metric) {
        let value = value.map_err(|text| format!("{metric}{labels}: not a number: {text}"))?;
        if value > max || value.is_nan() {
            return Err(format!("{metric}{labels} = {value} is above {max}"));
        }
        largest = Some(largest.map_or(value, |l| l.max(value)));
    }
    match largest {
        Some(value) => Ok(format!("{metric} at most {value} (bound {max})")),
        None => Err(format!("no {metric} on the page")),
    }
}

/// The samples of `metric`: its label set as written and its value.
fn samples<'a>(
    page: &'a str,
    metric: &'a str,
) -> impl Iterator<Item = (&'a str, Result<f64, &'a str>)> + 'a {
    page.lines().filter_map(move |line| {
        let rest = line.strip_prefix(metric)?;
        let (labels, after) = match rest.chars().next()? {
            // Label values may hold spaces; they end at the last closing brace.
            '{' => rest.split_at(rest.rfind('}')? + 1),
            ' ' => ("", rest),
            _ => return None,
        };
        let text = after.split_whitespace().next()?;
        Some((labels, text.parse::<f64>().map_err(|_| text)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# HELP edge_spool_fill_ratio Bytes held\n\
# TYPE edge_spool_fill_ratio gauge\n\
edge_spool_fill_ratio{pop=\"fra1\"} 0.25\n\
edge_spool_fill_ratio_other{pop=\"fra1\"} 9\n\
edge_backhaul_oldest_undelivered_seconds{pop=\"fra1\",route=\"/a b\"} 12.5\n\
edge_backhaul_oldest_undelivered_seconds{pop=\"fra1\",route=\"/c\"} 3\n\
plain_metric 7 1700000000\n\
# EOF\n";

    #[test]
    fn every_sample_must_be_within_the_bound() {
        assert!(at_most(PAGE, "edge_spool_fill_ratio", 0.5).is_ok());
        let over = at_most(PAGE, "edge_spool_fill_ratio", 0.2).unwrap_err();
        assert!(over.contains("0.25 is above 0.2"), "{over}");
        // The largest of several labelled samples decides; a longer name is another metric.
        let ok = at_most(PAGE, "edge_backhaul_oldest_undelivered_seconds", 20.0).unwrap();
        assert!(ok.contains("12.5"), "{ok}");
        assert!(at_most(PAGE, "edge_backhaul_oldest_undelivered_seconds", 10.0).is_err());
        assert!(at_most(PAGE, "plain_metric", 7.0).is_ok());
    }

    #[test]
    fn a_missing_or_broken_metric_fails() {
        let missing = at_most(PAGE, "edge_spool", 1.0).unwrap_err();
        assert!(missing.contains("no edge_spool on the page"), "{missing}");
        let broken = at_most("m{a=\"b\"} lots\n", "m", 1.0).unwrap_err();
        assert!(broken.contains("not a number: lots"), "{broken}");
        assert!(at_most("m NaN\n", "m", 1.0).is_err());
    }
}
