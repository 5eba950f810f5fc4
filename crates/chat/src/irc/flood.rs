//! Flood control: a token bucket per connection, so a burst from an agent is
//! paced rather than punished by the server (disconnected for excess flood,
//! or fake-lagged until every call times out).

use std::time::Duration;

use tokio::time::Instant;

/// How fast a connection may send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloodSettings {
    /// Lines that may go out at once after a quiet spell.
    pub burst: u32,
    /// Lines a second after the burst is spent.
    pub per_second: f64,
}

impl FloodSettings {
    /// No pacing (benchmarks, servers with flood control off).
    pub fn unlimited() -> Self {
        Self {
            burst: u32::MAX,
            per_second: f64::INFINITY,
        }
    }
}

impl Default for FloodSettings {
    /// Safe for stock InspIRCd (`threshold=10`, `commandrate=1000`: one
    /// command a second after a burst of 10, fake lag beyond) and stock
    /// ngIRCd (a one-second penalty a command beyond a short burst).
    fn default() -> Self {
        Self {
            burst: 5,
            per_second: 1.0,
        }
    }
}

/// A token bucket.
#[derive(Debug)]
pub(super) struct Bucket {
    settings: FloodSettings,
    tokens: f64,
    updated: Instant,
}

impl Bucket {
    pub(super) fn new(settings: FloodSettings) -> Self {
        Self {
            settings,
            tokens: f64::from(settings.burst),
            updated: Instant::now(),
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens =
            (self.tokens + elapsed * self.settings.per_second).min(f64::from(self.settings.burst));
        self.updated = now;
    }

    /// How long to wait before one more line may go; zero when it may go now.
    pub(super) fn delay(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.settings.per_second)
        }
    }

    /// Spends one token (call when `delay` returned zero).
    pub(super) fn take(&mut self) {
        self.tokens -= 1.0;
    }

    /// The pacing time for `lines` more lines from a full bucket: used to
    /// stretch a send's timeout so pacing never turns into a timeout.
    pub(super) fn time_for(settings: FloodSettings, lines: usize) -> Duration {
        let beyond = (lines as f64 - f64::from(settings.burst)).max(0.0);
        if settings.per_second.is_finite() {
            Duration::from_secs_f64(beyond / settings.per_second)
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_steady_rate() {
        let start = Instant::now();
        let mut bucket = Bucket::new(FloodSettings {
            burst: 3,
            per_second: 2.0,
        });
        for _ in 0..3 {
            assert_eq!(bucket.delay(start), Duration::ZERO);
            bucket.take();
        }
        let wait = bucket.delay(start);
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-6, "{wait:?}");
        assert_eq!(
            bucket.delay(start + Duration::from_millis(500)),
            Duration::ZERO
        );
        bucket.take();
        // Refills never exceed the burst.
        assert_eq!(
            bucket.delay(start + Duration::from_secs(100)),
            Duration::ZERO
        );
        assert!(bucket.tokens <= 3.0);
    }

    #[test]
    fn unlimited_never_waits() {
        let now = Instant::now();
        let mut bucket = Bucket::new(FloodSettings::unlimited());
        for _ in 0..10_000 {
            assert_eq!(bucket.delay(now), Duration::ZERO);
            bucket.take();
        }
        assert_eq!(
            Bucket::time_for(FloodSettings::unlimited(), 1000),
            Duration::ZERO
        );
        assert_eq!(
            Bucket::time_for(FloodSettings::default(), 50),
            Duration::from_secs(45)
        );
    }
}
