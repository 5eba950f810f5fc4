//! What the benchmark reads from `/proc`: memory, open files and CPU time of
//! a process, and the file system a directory lives on.

use std::{
    fs,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context;

/// Resident memory of a process, in KiB: now (`VmRSS`) and at its peak (`VmHWM`).
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

impl Memory {
    pub fn of(pid: u32) -> anyhow::Result<Self> {
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("cannot read /proc/{pid}/status"))?;
        let field = |name: &str| -> anyhow::Result<u64> {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .with_context(|| format!("/proc/{pid}/status has no {name}"))
        };
        Ok(Self {
            rss_kib: field("VmRSS:")?,
            peak_kib: field("VmHWM:")?,
        })
    }
}

/// How many file descriptors a process has open (`/proc/PID/fd`).
pub fn open_fds(pid: u32) -> anyhow::Result<usize> {
    Ok(fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("cannot list /proc/{pid}/fd"))?
        .count())
}

/// Watches the CPU that some processes, and the rest of the machine, use
/// over an interval: on a shared machine, other processes skew results.
pub struct CpuWatch {
    pids: Vec<u32>,
    before: Vec<Duration>,
    machine_before: Duration,
    started: Instant,
}

/// What a [`CpuWatch`] saw, in cores (CPU time over wall time).
#[derive(Debug, Clone)]
pub struct CpuUse {
    /// One figure per watched process, in the order given.
    pub cores: Vec<f64>,
    /// Every other process on the machine.
    pub others: f64,
}

impl CpuWatch {
    pub fn start(pids: &[u32]) -> anyhow::Result<Self> {
        Ok(Self {
            pids: pids.to_vec(),
            before: pids
                .iter()
                .map(|&pid| cpu_time(pid))
                .collect::<Result<_, _>>()?,
            machine_before: machine_cpu_time()?,
            started: Instant::now(),
        })
    }

    pub fn stop(&self) -> anyhow::Result<CpuUse> {
        let wall = self.started.elapsed().as_secs_f64();
        let machine = machine_cpu_time()?.saturating_sub(self.machine_before);
        let mut watched = Duration::ZERO;
        let mut cores = Vec::with_capacity(self.pids.len());
        for (&pid, &before) in self.pids.iter().zip(&self.before) {
            let used = cpu_time(pid)?.saturating_sub(before);
            watched += used;
            cores.push(used.as_secs_f64() / wall);
        }
        Ok(CpuUse {
            cores,
            others: machine.saturating_sub(watched).as_secs_f64() / wall,
        })
    }
}

/// CPU time (user and system) used so far by the live threads of a process,
/// from `/proc/PID/task/*/schedstat`, which counts nanoseconds rather than
/// the 10 ms ticks of `/proc/PID/stat`.
fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let mut total = 0u64;
    let tasks = fs::read_dir(format!("/proc/{pid}/task"))
        .with_context(|| format!("cannot list /proc/{pid}/task"))?;
    for task in tasks {
        // A thread may exit between listing and reading; it is simply missed.
        let Ok(stat) = fs::read_to_string(task?.path().join("schedstat")) else {
            continue;
        };
        total += stat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .context("unexpected schedstat format")?;
    }
    Ok(Duration::from_nanos(total))
}

/// CPU time (user, system, interrupts, steal) the whole machine has used
/// since boot, summed over its CPUs, from the `cpu` line of `/proc/stat`.
fn machine_cpu_time() -> anyhow::Result<Duration> {
    let stat = fs::read_to_string("/proc/stat").context("cannot read /proc/stat")?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("cpu "))
        .context("/proc/stat has no cpu line")?
        .split_whitespace()
        .map(|t| t.parse().context("unexpected /proc/stat format"))
        .collect::<anyhow::Result<_>>()?;
    // user nice system idle iowait irq softirq steal ...
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_nanos(busy * 1_000_000_000 / per_second))
}

/// The 1-minute load average, from `/proc/loadavg`.
pub fn load_average() -> Option<f64> {
    fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The type of the file system holding `path` (`ext4`, `tmpfs`, …), from the
/// longest matching mount point in `/proc/self/mounts`.
pub fn fs_type(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            path.starts_with(point)
                .then(|| (point.len(), kind.to_owned()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, kind)| kind)
}
