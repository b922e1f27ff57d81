//! A Prometheus text exposition (an operator's /metrics), read as the tests read it.

use std::collections::BTreeMap;

/// One scrape: each series (`name{labels}`, or `name` without labels) to its value.
pub struct Scrape(BTreeMap<String, f64>);

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        Scrape(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (k, v) = l.rsplit_once(' ')?;
                    Some((k.to_string(), v.parse::<f64>().ok()?))
                })
                .collect(),
        )
    }

    /// The sum of `metric` over its series whose labels contain each of `labels`
    /// (`key="value"`); 0 when there is none.
    pub fn sum(&self, metric: &str, labels: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| {
                let rest = k.strip_prefix(metric).unwrap_or("-");
                (rest.is_empty() || rest.starts_with('{')) && labels.iter().all(|l| rest.contains(l))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// Every series and its value.
    pub fn series(&self) -> impl Iterator<Item = (&str, f64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

/// The sum of a metric's samples (all its series) in a text exposition.
pub fn sample(text: &str, metric: &str) -> f64 {
    Scrape::parse(text).sum(metric, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_a_metrics_series_by_label_and_no_other_metric() {
        let text = "# HELP r_total reconciles\n# TYPE r_total counter\nr_total{result=\"ok\"} 3\nr_total{result=\"error\"} 1\nr_total_other 7\nr 5\ng 2\n# EOF\n";
        let s = Scrape::parse(text);
        assert_eq!(s.sum("r_total", &[]), 4.0);
        assert_eq!(s.sum("r_total", &["result=\"ok\""]), 3.0);
        assert_eq!(s.sum("r", &[]), 5.0);
        assert_eq!(s.sum("g", &[]), 2.0);
        assert_eq!(s.sum("missing", &[]), 0.0);
        assert_eq!(sample(text, "r_total"), 4.0);
    }
}
