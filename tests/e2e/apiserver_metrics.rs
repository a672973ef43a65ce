//! The API server's own measurements (`/metrics`): histograms summed over the series a filter
//! selects, and their difference between two readings.

use anyhow::Result;
use std::collections::BTreeMap;

/// One histogram, summed over the series selected.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    pub count: f64,
    pub sum: f64,
    /// Cumulative count per bucket bound (`le`), `+Inf` last.
    pub buckets: Vec<(f64, f64)>,
}

impl Histogram {
    /// `metric`'s series in `text` whose labels satisfy `select`, summed.
    pub fn read(text: &str, metric: &str, select: impl Fn(&str) -> bool) -> Histogram {
        let mut buckets: BTreeMap<String, f64> = BTreeMap::new();
        let mut h = Histogram::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            if !select(labels) {
                continue;
            }
            let value: f64 = value.parse().unwrap_or(0.0);
            if name == format!("{metric}_bucket") {
                let le = labels
                    .split("le=\"")
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .unwrap_or_default();
                *buckets.entry(le.to_string()).or_default() += value;
            } else if name == format!("{metric}_sum") {
                h.sum += value;
            } else if name == format!("{metric}_count") {
                h.count += value;
            }
        }
        h.buckets = buckets
            .into_iter()
            .map(|(le, n)| (le.parse().unwrap_or(f64::INFINITY), n))
            .collect();
        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        h
    }

    /// What was observed between `before` and `self`.
    pub fn since(&self, before: &Histogram) -> Histogram {
        let earlier = |le: f64| {
            before
                .buckets
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, n)| *n)
        };
        Histogram {
            count: self.count - before.count,
            sum: self.sum - before.sum,
            buckets: self
                .buckets
                .iter()
                .map(|(le, n)| (*le, n - earlier(*le)))
                .collect(),
        }
    }

    /// The mean, in milliseconds.
    pub fn mean_ms(&self) -> f64 {
        if self.count == 0.0 {
            return f64::NAN;
        }
        1000.0 * self.sum / self.count
    }

    /// The smallest bucket bound holding the `q` quantile, in milliseconds.
    pub fn quantile_bound_ms(&self, q: f64) -> f64 {
        1000.0
            * self
                .buckets
                .iter()
                .find(|(_, n)| *n >= q * self.count)
                .map_or(f64::INFINITY, |(le, _)| *le)
    }

    /// `calls, mean, p99 bound` in words.
    pub fn summary(&self) -> String {
        format!(
            "{} calls, mean {:.2} ms, p99 <= {} ms (bucket bound)",
            self.count,
            self.mean_ms(),
            self.quantile_bound_ms(0.99)
        )
    }
}

/// The API server's metrics text.
pub async fn scrape(client: &kube::Client) -> Result<String> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(request).await?)
}
