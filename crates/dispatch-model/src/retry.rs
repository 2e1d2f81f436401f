//! When to try a request again, and how long to wait first.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// Attempts and waits for one turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The first back-off; each retry doubles it.
    pub base_wait: Duration,
    /// No wait is longer. A provider asking for longer (Retry-After) fails the turn at once:
    /// retrying sooner than it asked would only be refused again.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_wait: Duration::from_secs(1),
            max_wait: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The back-off before attempt `attempt + 1` (1-based `attempt` just failed): exponential,
    /// with "equal jitter" (half fixed, half random) so that many clients refused together do
    /// not come back together.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base_wait
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max_wait);
        let half = exp / 2;
        half + half.mul_f64(random_unit())
    }
}

/// Whether a status is worth another attempt: rate limits, server errors, and Anthropic's 529
/// (overloaded).
pub(crate) fn is_retryable(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// How long the provider asked us to wait: `retry-after-ms` (OpenAI), else `Retry-After` in
/// seconds or as an HTTP date (relative to `now`).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    // A date in the past means "now".
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A number in [0, 1) from the standard library's per-process random hash keys; jitter needs
/// no more than that, and no RNG crate.
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_reads_seconds_milliseconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let at = |h: &[(&'static str, &str)]| retry_after(&headers(h), now);
        assert_eq!(at(&[("retry-after", "7")]), Some(Duration::from_secs(7)));
        assert_eq!(
            at(&[("retry-after", "1.5")]),
            Some(Duration::from_millis(1500))
        );
        // The millisecond header is the more precise one, so it wins.
        assert_eq!(
            at(&[("retry-after", "7"), ("retry-after-ms", "250")]),
            Some(Duration::from_millis(250))
        );
        let in_30s = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            at(&[("retry-after", &in_30s)]),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(at(&[("retry-after", &past)]), Some(Duration::ZERO));
        assert_eq!(at(&[("retry-after", "soon")]), None);
        assert_eq!(at(&[("retry-after", "-3")]), None);
        assert_eq!(at(&[]), None);
    }

    #[test]
    fn backoff_doubles_within_jitter_and_stops_at_the_cap() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_wait: Duration::from_secs(1),
            max_wait: Duration::from_secs(5),
        };
        for _ in 0..50 {
            let first = policy.backoff(1);
            assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
            let third = policy.backoff(3);
            assert!(third >= Duration::from_secs(2) && third <= Duration::from_secs(4));
            assert!(policy.backoff(9) <= Duration::from_secs(5));
            assert!(policy.backoff(40) >= Duration::from_millis(2500));
        }
    }

    #[test]
    fn rate_limits_server_errors_and_overload_are_retried_other_refusals_are_not() {
        for status in [429, 500, 502, 503, 529] {
            assert!(is_retryable(status), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            assert!(!is_retryable(status), "{status}");
        }
    }
}
