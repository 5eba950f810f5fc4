//! The faults of a soak run and when they happen: `kill -9` of the daemon,
//! restarts of the IRC server, and one full disk (a tmpfs filled to ENOSPC).

use std::time::Duration;

/// How often the daemon is killed, and the IRC server restarted, in a run
/// of at least 5 minutes.
const KILL_EVERY: Duration = Duration::from_secs(90);
const IRC_RESTART_EVERY: Duration = Duration::from_secs(120);
/// How long the disk stays full.
const FULL_FOR: Duration = Duration::from_secs(20);

/// When each fault happens, as offsets from the start of the run.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub duration: Duration,
    pub kill_every: Duration,
    pub irc_restart_every: Duration,
    /// When the filler is written, and how long it stays.
    pub full_at: Duration,
    pub full_for: Duration,
}

impl Schedule {
    /// The default intervals, scaled down for runs shorter than 5 minutes
    /// so that the daemon is still killed twice, the IRC server restarted
    /// twice and the disk filled once. The full disk sits between two kills
    /// (a kill due while it is full waits until space is back).
    pub fn new(duration: Duration) -> Self {
        let kill_every = KILL_EVERY.min(duration / 3);
        let irc_restart_every = IRC_RESTART_EVERY.min(duration * 2 / 5);
        let full_for = FULL_FOR.min(duration / 6);
        let mut kill = kill_every;
        while kill < duration * 7 / 20 {
            kill += kill_every;
        }
        let full_at = kill + kill_every.saturating_sub(full_for) / 2;
        Self {
            duration,
            kill_every,
            irc_restart_every,
            full_at,
            full_for,
        }
    }

    pub fn full_until(&self) -> Duration {
        self.full_at + self.full_for
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_minutes_keep_the_issued_intervals_and_fill_between_kills() {
        let s = Schedule::new(Duration::from_secs(600));
        assert_eq!(s.kill_every, Duration::from_secs(90));
        assert_eq!(s.irc_restart_every, Duration::from_secs(120));
        assert_eq!(s.full_for, Duration::from_secs(20));
        // Kills at 90, 180, 270, 360 s: the disk is full from 305 to 325 s.
        assert_eq!(s.full_at, Duration::from_secs(305));
    }

    #[test]
    fn one_minute_still_has_every_fault() {
        let s = Schedule::new(Duration::from_secs(60));
        assert_eq!(s.kill_every, Duration::from_secs(20));
        assert_eq!(s.irc_restart_every, Duration::from_secs(24));
        assert_eq!(s.full_for, Duration::from_secs(10));
        assert_eq!(s.full_at, Duration::from_secs(45));
        assert!(s.full_until() < s.duration);
    }
}
