//! A process and its ancestors, read from `/proc` (Linux).
//!
//! The server reads the ancestry of every client when it says hello, so an
//! application can tell which terminal, tab or editor spawned the agent
//! behind a call (see [`PeerInfo::ancestry`](crate::PeerInfo::ancestry)).
//!
//! Reading is tolerant: processes exit while they are being read (the walk
//! then ends where it is), `comm` may hold spaces, parentheses or newlines
//! (`/proc/<pid>/stat` is parsed from the *last* `)`), and `cmdline` may be
//! unreadable (hidden by `hidepid`, empty for kernel threads and zombies).
//!
//! ```
//! let me = switchboard_relay::proctree::ancestry(std::process::id());
//! # if std::path::Path::new("/proc/self/stat").exists() {
//! assert_eq!(me[0].pid, std::process::id());
//! assert_eq!(me[0].ppid, me[1].pid);
//! # }
//! ```

use std::{
    collections::HashSet,
    io::Read as _,
    path::{Path, PathBuf},
};

/// One process, as `/proc` showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Its process id.
    pub pid: u32,
    /// Its parent's process id (0 for pid 1 and kernel threads).
    pub ppid: u32,
    /// Its name, `comm` in `/proc/<pid>/stat` (at most 15 bytes, set by the
    /// kernel from the executable's name or by the process itself).
    pub name: String,
    /// Its command line, one entry per argument, when readable and not
    /// empty. Cut at [`MAX_CMDLINE`] bytes.
    pub cmdline: Option<Vec<String>>,
}

/// The longest command line read, in bytes.
pub const MAX_CMDLINE: usize = 32 * 1024;

/// The longest ancestry walked (a guard against a pid-reuse loop).
pub const MAX_DEPTH: usize = 128;

/// Reads process `pid`, or `None` if it does not exist (any more) or its
/// `stat` cannot be read.
pub fn process(pid: u32) -> Option<ProcessInfo> {
    process_in(Path::new("/proc"), pid)
}

/// `pid` and its ancestors, nearest first, up to pid 1 (or to the first
/// process whose parent is 0, such as the init of a PID namespace). Ends
/// early where a process has exited or cannot be read; empty when `pid`
/// itself cannot be read.
pub fn ancestry(pid: u32) -> Vec<ProcessInfo> {
    ancestry_in(Path::new("/proc"), pid)
}

pub(crate) fn ancestry_in(proc_root: &Path, pid: u32) -> Vec<ProcessInfo> {
    let mut chain = Vec::new();
    let mut seen = HashSet::new();
    let mut next = pid;
    while next != 0 && chain.len() < MAX_DEPTH && seen.insert(next) {
        let Some(process) = process_in(proc_root, next) else {
            break;
        };
        next = if process.pid == 1 { 0 } else { process.ppid };
        chain.push(process);
    }
    chain
}

fn process_in(proc_root: &Path, pid: u32) -> Option<ProcessInfo> {
    let dir: PathBuf = proc_root.join(pid.to_string());
    let stat = std::fs::read(dir.join("stat")).ok()?;
    let (name, ppid) = parse_stat(&stat)?;
    Some(ProcessInfo {
        pid,
        ppid,
        name,
        cmdline: read_cmdline(&dir.join("cmdline")),
    })
}

/// Parses the `comm` and the parent pid out of a `/proc/<pid>/stat` line:
/// `pid (comm) state ppid …`, where `comm` may itself hold `)` and spaces,
/// so it runs from the first `(` to the last `)`.
pub(crate) fn parse_stat(stat: &[u8]) -> Option<(String, u32)> {
    let open = stat.iter().position(|&b| b == b'(')?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let name = String::from_utf8_lossy(&stat[open + 1..close]).into_owned();
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((name, ppid))
}

fn read_cmdline(path: &Path) -> Option<Vec<String>> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_CMDLINE as u64).read_to_end(&mut bytes).ok()?;
    if bytes.last() == Some(&0) {
        bytes.pop();
    }
    if bytes.is_empty() {
        return None;
    }
    Some(
        bytes
            .split(|&b| b == 0)
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_parsed_from_the_last_parenthesis() {
        assert_eq!(
            parse_stat(b"1234 (bash) S 42 1234 1234 0 -1 4194560\n"),
            Some(("bash".into(), 42))
        );
        assert_eq!(
            parse_stat(b"77 (a) b (c)) R 5 77 77"),
            Some(("a) b (c)".into(), 5))
        );
        assert_eq!(
            parse_stat(b"78 (two\nlines ) ) S 6 1"),
            Some(("two\nlines ) ".into(), 6))
        );
        assert_eq!(parse_stat(b"79 () Z 7"), Some((String::new(), 7)));
        assert_eq!(parse_stat(b""), None);
        assert_eq!(parse_stat(b"80 (x) S"), None);
        assert_eq!(parse_stat(b"81 )x( S 1"), None);
        assert_eq!(parse_stat(b"82 (x) S -3"), None);
    }

    fn fake_process(root: &Path, pid: u32, stat: &str, cmdline: Option<&[u8]>) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stat"), stat).unwrap();
        if let Some(cmdline) = cmdline {
            std::fs::write(dir.join("cmdline"), cmdline).unwrap();
        }
    }

    #[test]
    fn the_walk_follows_parents_to_pid_1() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        fake_process(root, 1, "1 (init) S 0 1 1", Some(b"/sbin/init\0"));
        fake_process(root, 50, "50 (tmux: server) S 1", Some(b"tmux\0new\0"));
        fake_process(root, 60, "60 (my (odd) shell) S 50", Some(b""));
        fake_process(root, 70, "70 (switchboard) S 60", None);
        let chain = ancestry_in(root, 70);
        let pids: Vec<_> = chain.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [70, 60, 50, 1]);
        assert_eq!(chain[1].name, "my (odd) shell");
        assert_eq!(chain[1].cmdline, None);
        assert_eq!(chain[2].cmdline, Some(vec!["tmux".into(), "new".into()]));
        assert_eq!(chain[3].cmdline, Some(vec!["/sbin/init".into()]));
        assert_eq!(chain[0].cmdline, None);
    }

    #[test]
    fn the_walk_ends_where_a_process_vanished_or_loops() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        // 60's parent 55 has exited.
        fake_process(root, 60, "60 (sh) S 55", None);
        fake_process(root, 70, "70 (switchboard) S 60", None);
        let pids: Vec<_> = ancestry_in(root, 70).iter().map(|p| p.pid).collect();
        assert_eq!(pids, [70, 60]);
        assert!(ancestry_in(root, 99).is_empty());
        // A loop (pid reuse while walking) ends.
        fake_process(root, 80, "80 (a) S 81", None);
        fake_process(root, 81, "81 (b) S 80", None);
        let pids: Vec<_> = ancestry_in(root, 80).iter().map(|p| p.pid).collect();
        assert_eq!(pids, [80, 81]);
        // Garbage in stat ends the walk too.
        fake_process(root, 90, "garbage", None);
        fake_process(root, 91, "91 (c) S 90", None);
        assert_eq!(ancestry_in(root, 91).len(), 1);
    }

    #[test]
    fn long_command_lines_are_cut() {
        let root = tempfile::tempdir().unwrap();
        let mut cmdline = b"prog\0".to_vec();
        cmdline.extend(std::iter::repeat_n(b'x', MAX_CMDLINE * 2));
        fake_process(root.path(), 5, "5 (prog) S 0", Some(&cmdline));
        let chain = ancestry_in(root.path(), 5);
        let args = chain[0].cmdline.as_ref().unwrap();
        assert_eq!(args[0], "prog");
        assert_eq!(args[1].len(), MAX_CMDLINE - 5);
    }

    #[test]
    fn this_process_and_its_parent_are_found() {
        let chain = ancestry(std::process::id());
        assert_eq!(chain[0].pid, std::process::id());
        // SAFETY: getppid(2) has no failure mode.
        let ppid = unsafe { libc::getppid() } as u32;
        assert_eq!(chain[0].ppid, ppid);
        assert_eq!(chain[1].pid, ppid);
        assert!(chain[0].cmdline.is_some());
        let last = chain.last().unwrap();
        assert!(last.pid == 1 || last.ppid == 0, "{last:?}");
    }
}
