//! Running one command: no shell, no terminal, no inherited environment,
//! bounded in time and in output, and nothing left behind.
//!
//! - The child starts in a **new session** (`setsid`), which also makes it
//!   the leader of a new process group. Its group can then be signalled as a
//!   whole, and it has no controlling terminal: a CLI that prompts on
//!   `/dev/tty` (git, ssh, npm login) fails at once instead of stopping the
//!   server's terminal job or waiting forever.
//! - **stdin is `/dev/null`**: a CLI that prompts on stdin reads EOF.
//! - The **environment** is exactly what the caller passes (the allow-list
//!   and the declared variables): it starts empty.
//! - **Output**: stdout and stderr are read as they arrive, interleaved, into
//!   one buffer that keeps the last `max_output` bytes and counts the rest.
//! - **Timeout**: the group gets SIGTERM, then SIGKILL after the grace
//!   period. The leader is only reaped after that, so its pid — the group's
//!   id — cannot have been reused by an unrelated process in between.
//! - **Cancellation**: if the call is dropped while the command runs, the
//!   whole group gets SIGKILL.
//! - **Escapees**: a process the command started in a session of its own
//!   (`setsid`, a daemonising CLI) is out of the group. Each run's
//!   environment carries one more variable, [`RUN_MARK`], naming the run;
//!   what a timeout or a cancellation signals is the group and every process
//!   of this user whose environment still carries the run's mark (found in
//!   `/proc`). A process that clears its environment escapes that too.
//!
//! A command that exits normally is not signalled: a CLI that starts
//! services in the background (`imq ctl start`) keeps them running.

use std::{
    io,
    os::unix::{fs::PermissionsExt, process::ExitStatusExt},
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt},
    time::Instant,
};

/// How long to keep reading after SIGKILL for pipes held open by a process
/// that left the group.
const DRAIN_AFTER_KILL: Duration = Duration::from_millis(500);
/// The longest pause between checks for the leader's exit.
const MAX_POLL: Duration = Duration::from_millis(50);

/// How long output is still read after the program exited. A program that
/// starts background services (`imq ctl start`) exits while they keep its
/// stdout open; they are meant to outlive it, so it is not made to wait for
/// them, and they are left running.
const AFTER_EXIT: Duration = Duration::from_millis(500);

/// How long a program that is still open for writing ("text file busy") is
/// waited for. It is a passing state: an installer finishing its copy, or a
/// file just written whose descriptor a process forked at that moment still
/// holds until it execs.
const BUSY_WAIT: Duration = Duration::from_secs(1);

/// The variable naming the run in every command's environment, so that
/// the processes it started can be found however they left its group.
pub(crate) const RUN_MARK: &str = "SWITCHBOARD_RUN";

/// Numbers this process's runs, for [`RUN_MARK`].
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One command to run.
pub(crate) struct Invocation<'a> {
    /// An absolute path (see [`find_program`]).
    pub(crate) program: &'a Path,
    pub(crate) args: &'a [String],
    /// The child's whole environment.
    pub(crate) env: &'a [(String, String)],
    /// The working directory; `None` keeps switchboard's.
    pub(crate) cwd: Option<&'a Path>,
    pub(crate) timeout: Duration,
    /// Time between SIGTERM and SIGKILL after a timeout.
    pub(crate) grace: Duration,
    /// Bytes of output kept (the tail).
    pub(crate) max_output: usize,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// It exited with this code.
    Exited(i32),
    /// A signal it did not expect killed it.
    Signalled(i32),
    /// It ran past the timeout and its process group was killed.
    TimedOut,
}

/// A finished command.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) ending: Ending,
    /// The tail of stdout and stderr, interleaved as they arrived.
    pub(crate) output: String,
    /// Bytes of output dropped from the start.
    pub(crate) dropped: u64,
    /// It exited, but processes it started still held its output open.
    pub(crate) left_running: bool,
}

/// Starts `command`, waiting out a program that is busy being written.
async fn spawn(command: &mut tokio::process::Command) -> io::Result<tokio::process::Child> {
    let give_up = Instant::now() + BUSY_WAIT;
    let mut pause = Duration::from_millis(1);
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() < give_up => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_POLL);
            }
            result => return result,
        }
    }
}

/// Runs `inv` to the end. Fails only when the program cannot be started.
pub(crate) async fn run(inv: Invocation<'_>) -> io::Result<Finished> {
    let mark = format!(
        "{}.{}",
        std::process::id(),
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut command = tokio::process::Command::new(inv.program);
    command
        .args(inv.args)
        .env_clear()
        .envs(inv.env.iter().map(|(k, v)| (k, v)))
        .env(RUN_MARK, &mark)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(cwd) = inv.cwd {
        command.current_dir(cwd);
    }
    // SAFETY: the closure runs in the forked child before exec; it only calls
    // setsid(2), which is async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
    }
    let mut child = spawn(&mut command).await?;
    let pid = child
        .id()
        .and_then(|id| libc::pid_t::try_from(id).ok())
        .ok_or_else(|| io::Error::other("the child has no process id"))?;
    let mut group = GroupGuard {
        pgid: pid,
        mark: format!("{RUN_MARK}={mark}"),
    };
    let mut pipes = Pipes {
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        tail: Tail::new(inv.max_output),
        left_running: false,
    };

    let finished = pipes.pump(pid, Instant::now() + inv.timeout, true).await;
    if !finished {
        group.signal(libc::SIGTERM);
        pipes.pump(pid, Instant::now() + inv.grace, false).await;
        // Always, even if the leader is gone: a member may ignore SIGTERM.
        // The leader is not reaped yet, so the group id is still ours.
        group.signal(libc::SIGKILL);
        pipes
            .pump(pid, Instant::now() + DRAIN_AFTER_KILL, false)
            .await;
    }
    group.disarm();
    let status = child.wait().await?;
    let (output, dropped) = pipes.tail.finish();
    let ending = if !finished {
        Ending::TimedOut
    } else if let Some(code) = status.code() {
        Ending::Exited(code)
    } else {
        Ending::Signalled(status.signal().unwrap_or(0))
    };
    Ok(Finished {
        ending,
        output,
        dropped,
        left_running: pipes.left_running,
    })
}

/// Looks `program` up as `execvp` would with the child's `PATH`, skipping
/// empty and relative entries; a name containing `/` is a path from `base`.
/// Only executable regular files count.
pub(crate) fn find_program(program: &str, path_var: Option<&str>, base: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        // Absolute, as reports show it: `base` may be relative to the start.
        let path = base.join(program);
        let path = std::path::absolute(&path).unwrap_or(path);
        return is_executable(&path).then_some(path);
    }
    path_var?
        .split(':')
        .map(Path::new)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

pub(crate) fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why `path` is not an executable file, for a message: it does not exist,
/// is not a file, or lacks execute permission.
pub(crate) fn not_executable(path: &Path) -> String {
    let shown = path.display();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!("{shown} does not exist"),
        Err(e) => format!("{shown} cannot be read ({e})"),
        Ok(m) if !m.is_file() => format!("{shown} is not a file"),
        Ok(_) => format!("{shown} is not executable (chmod +x {shown})"),
    }
}

/// Kills the run's processes on drop unless disarmed, so a cancelled call
/// leaves nothing running.
struct GroupGuard {
    pgid: libc::pid_t,
    /// `RUN_MARK=<run>`, as it stands in the environment of what it started.
    mark: String,
}

impl GroupGuard {
    /// Sends `signal` to the group and to every process carrying the mark.
    fn signal(&self, signal: libc::c_int) {
        if self.pgid > 0 {
            // SAFETY: killpg has no memory-safety preconditions; ESRCH (the
            // group is already empty) is the only expected error.
            unsafe {
                libc::killpg(self.pgid, signal);
            }
            for pid in marked(&self.mark) {
                // SAFETY: as above; the pid was just read from /proc.
                unsafe {
                    libc::kill(pid, signal);
                }
            }
        }
    }

    fn disarm(&mut self) {
        self.pgid = 0;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// The processes whose environment holds `mark` (`NAME=value`) as one of
/// its variables: those this user may read.
fn marked(mark: &str) -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let wanted = mark.as_bytes();
    entries
        .filter_map(|entry| {
            entry
                .ok()?
                .file_name()
                .to_str()?
                .parse::<libc::pid_t>()
                .ok()
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == wanted))
        })
        .collect()
}

/// Whether the leader has exited, without reaping it (`WNOWAIT`), so that
/// its pid stays reserved while the group may still be signalled.
fn leader_exited(pid: libc::pid_t) -> bool {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            // SAFETY: waitid succeeded, so si_pid is initialised (0 when the
            // child has not changed state).
            return unsafe { info.si_pid() } != 0;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // ECHILD: already reaped, so certainly exited.
            return true;
        }
    }
}

struct Pipes {
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
    tail: Tail,
    left_running: bool,
}

impl Pipes {
    /// Reads output until the leader has exited and both pipes are closed
    /// (`true`), or until `deadline` (`false`). With `let_run`, it stops
    /// reading [`AFTER_EXIT`] after the leader exited (`true`), leaving
    /// whatever still holds the pipes running.
    async fn pump(&mut self, pid: libc::pid_t, deadline: Instant, let_run: bool) -> bool {
        let mut exited = leader_exited(pid);
        let mut exited_at = (exited && let_run).then(Instant::now);
        let mut poll = Duration::from_millis(2);
        let mut out_buf = [0u8; 8192];
        let mut err_buf = [0u8; 8192];
        loop {
            if exited && self.stdout.is_none() && self.stderr.is_none() {
                return true;
            }
            let stop_reading = exited_at.map_or(deadline, |at| (at + AFTER_EXIT).min(deadline));
            let event = tokio::select! {
                r = read_some(&mut self.stdout, &mut out_buf) => Event::Stdout(r),
                r = read_some(&mut self.stderr, &mut err_buf) => Event::Stderr(r),
                () = tokio::time::sleep(poll), if !exited => Event::Poll,
                () = tokio::time::sleep_until(stop_reading) => {
                    if exited_at.is_none() {
                        return false;
                    }
                    self.left_running = true;
                    self.stdout = None;
                    self.stderr = None;
                    return true;
                }
            };
            match event {
                Event::Stdout(Ok(n)) if n > 0 => self.tail.push(&out_buf[..n]),
                Event::Stdout(_) => self.stdout = None,
                Event::Stderr(Ok(n)) if n > 0 => self.tail.push(&err_buf[..n]),
                Event::Stderr(_) => self.stderr = None,
                Event::Poll => {
                    exited = leader_exited(pid);
                    if exited && let_run {
                        exited_at = Some(Instant::now());
                    }
                    poll = (poll * 2).min(MAX_POLL);
                }
            }
        }
    }
}

enum Event {
    Stdout(io::Result<usize>),
    Stderr(io::Result<usize>),
    Poll,
}

/// Reads from an open pipe; never completes for a closed one.
async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

/// The last `cap` bytes of a stream, and how many came before them.
pub(crate) struct Tail {
    buf: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl Tail {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        // Compact once the slack reaches the cap: amortised O(1) per byte.
        if self.buf.len() >= self.cap.saturating_mul(2).max(8192) {
            self.trim_to(self.cap);
        }
    }

    fn trim_to(&mut self, cap: usize) {
        if self.buf.len() > cap {
            let excess = self.buf.len() - cap;
            self.buf.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    /// The kept text and the number of bytes dropped. Invalid UTF-8 and
    /// control characters but tab, newline and carriage return are shown as
    /// U+FFFD; as that takes three bytes, the text's start is cut further
    /// until it fits `cap`. It never starts mid-character after a cut.
    pub(crate) fn finish(mut self) -> (String, u64) {
        self.trim_to(self.cap);
        if self.dropped > 0 {
            let partial = self
                .buf
                .iter()
                .take(3)
                .take_while(|b| (**b & 0xC0) == 0x80)
                .count();
            self.buf.drain(..partial);
            self.dropped += partial as u64;
        }
        // Each character as shown, with the bytes of output it stands for.
        let mut shown: Vec<(char, usize)> = Vec::with_capacity(self.buf.len());
        for chunk in self.buf.utf8_chunks() {
            for c in chunk.valid().chars() {
                let plain = !c.is_control() || matches!(c, '\t' | '\n' | '\r');
                shown.push((if plain { c } else { '\u{FFFD}' }, c.len_utf8()));
            }
            if !chunk.invalid().is_empty() {
                shown.push(('\u{FFFD}', chunk.invalid().len()));
            }
        }
        let (mut start, mut kept) = (shown.len(), 0);
        while start > 0 && kept + shown[start - 1].0.len_utf8() <= self.cap {
            start -= 1;
            kept += shown[start].0.len_utf8();
        }
        self.dropped += shown[..start].iter().map(|(_, n)| *n as u64).sum::<u64>();
        (
            shown[start..].iter().map(|(c, _)| c).collect(),
            self.dropped,
        )
    }
}

/// `PATH` from an environment list.
pub(crate) fn path_of(env: &[(String, String)]) -> Option<&str> {
    env.iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
}

/// Whether `name` can be an environment variable name.
pub(crate) fn is_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_end_and_counts_the_rest() {
        let mut tail = Tail::new(10);
        for _ in 0..10_000 {
            tail.push(b"0123456789");
        }
        tail.push(b"abcdefghij");
        let (text, dropped) = tail.finish();
        assert_eq!(text, "abcdefghij");
        assert_eq!(dropped, 100_000);
    }

    #[test]
    fn the_tail_never_starts_mid_character() {
        let mut tail = Tail::new(4);
        tail.push("xxé€é".as_bytes()); // 2 + 2 + 3 + 2 bytes
        let (text, dropped) = tail.finish();
        // The cut at 4 bytes from the end lands inside €: its rest goes too.
        assert_eq!(text, "é");
        assert_eq!(dropped, 7);
        let mut short = Tail::new(100);
        short.push(b"hi");
        assert_eq!(short.finish(), ("hi".to_owned(), 0));
    }

    #[test]
    fn binary_output_and_control_characters_stay_within_the_cap() {
        let mut tail = Tail::new(8);
        tail.push(&[0xff; 8]);
        let (text, dropped) = tail.finish();
        assert_eq!(text, "\u{FFFD}\u{FFFD}");
        assert_eq!(dropped, 6);
        let mut tail = Tail::new(100);
        tail.push(b"a\0b\x1b[1mc\td\r\n");
        assert_eq!(
            tail.finish(),
            ("a\u{FFFD}b\u{FFFD}[1mc\td\r\n".to_owned(), 0)
        );
    }

    #[test]
    fn programs_are_found_on_the_given_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("tool");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let plain = dir.path().join("data");
        std::fs::write(&plain, "").unwrap();
        let path = format!("relative:{}", dir.path().display());
        assert_eq!(
            find_program("tool", Some(&path), Path::new("/")),
            Some(exe.clone())
        );
        assert_eq!(find_program("data", Some(&path), Path::new("/")), None);
        assert_eq!(find_program("tool", None, Path::new("/")), None);
        assert_eq!(find_program("tool", Some("relative"), dir.path()), None);
        assert_eq!(
            find_program("./tool", None, dir.path()),
            Some(dir.path().join("./tool"))
        );
    }

    #[tokio::test]
    async fn a_program_still_open_for_writing_starts_once_it_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("tool");
        let mut writing = std::fs::File::create(&exe).unwrap();
        io::Write::write_all(&mut writing, b"#!/bin/sh\necho started\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(writing);
        });
        let finished = run(Invocation {
            program: &exe,
            args: &[],
            env: &[],
            cwd: None,
            timeout: Duration::from_secs(10),
            grace: Duration::from_secs(1),
            max_output: 1024,
        })
        .await
        .expect("the program starts once its writer closes it");
        closer.join().unwrap();
        assert_eq!(finished.ending, Ending::Exited(0));
        assert_eq!(finished.output, "started\n");
    }

    /// `sh -c <script>` with the usual `PATH`, under `timeout`.
    fn shell<'a>(
        script: &'a [String],
        env: &'a [(String, String)],
        timeout: Duration,
    ) -> Invocation<'a> {
        Invocation {
            program: Path::new("/bin/sh"),
            args: script,
            env,
            cwd: None,
            timeout,
            grace: Duration::from_millis(200),
            max_output: 1024,
        }
    }

    /// The pid written to `file`, once it is there.
    async fn pid_in(file: &Path) -> libc::pid_t {
        for _ in 0..500 {
            if let Some(pid) = std::fs::read_to_string(file)
                .ok()
                .and_then(|text| text.trim().parse().ok())
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{} was never written", file.display());
    }

    /// Whether `pid` is gone (or a zombie) within 5 s.
    async fn ends(pid: libc::pid_t) -> bool {
        for _ in 0..500 {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| stat.rsplit_once(") ")?.1.chars().next());
            if state.is_none_or(|s| s == 'Z') {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn a_timeout_or_a_cancel_stops_what_left_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let env = [("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let script = |file: &Path| {
            [
                "-c".to_owned(),
                format!(
                    "setsid sh -c 'echo $$ > {}; exec sleep 1000' & sleep 1000",
                    file.display()
                ),
            ]
        };
        let timed = dir.path().join("timed");
        let args = script(&timed);
        let finished = run(shell(&args, &env, Duration::from_millis(500)))
            .await
            .unwrap();
        assert_eq!(finished.ending, Ending::TimedOut);
        let escapee = pid_in(&timed).await;
        assert!(ends(escapee).await, "{escapee} outlived the timeout");

        let cancelled = dir.path().join("cancelled");
        let args = script(&cancelled);
        let call = tokio::spawn(async move {
            let _ = run(shell(&args, &env, Duration::from_secs(60))).await;
        });
        let escapee = pid_in(&cancelled).await;
        call.abort();
        let _ = call.await;
        assert!(ends(escapee).await, "{escapee} outlived the cancelled call");
    }

    #[test]
    fn env_names() {
        assert!(is_env_name("PATH"));
        assert!(!is_env_name("A=B"));
        assert!(!is_env_name(""));
    }
}
