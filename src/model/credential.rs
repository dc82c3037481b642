//! A model credential that a command renews (`model.credential_command`): the program is run
//! directly (no shell, no stdin, killed past a timeout), its trimmed standard output is the
//! credential, held in a lock-free cell that only the opening of a model connection reads, and
//! a task runs it again every `credential_refresh_s`, keeping the last value when a run fails.
//! The command's output is the secret: no error, log line or `Debug` output ever shows it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::secret::Secret;

/// How long one run of the command may take before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// After a failed renewal, the next try comes this long after (or after the refresh interval,
/// when that is shorter).
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The most of the command's stderr line an error quotes, in characters.
const STDERR_SHOWN: usize = 200;

/// The most of each output stream that is read (a credential is a few kilobytes at most).
const OUTPUT_LIMIT: u64 = 64 * 1024;

/// The longest pause between two looks at a running command.
const POLL_MAX: Duration = Duration::from_millis(20);

/// A run of the command gave no credential. None of these holds anything of its standard
/// output.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("the command names no program")]
    NoProgram,
    #[error("cannot start {program}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} failed ({status}){}", stderr_part(.stderr))]
    Failed {
        program: String,
        status: String,
        /// The last line of its standard error (the last that says "error", when one does), at
        /// most 200 characters.
        stderr: String,
    },
    #[error("{program} printed nothing on its standard output")]
    Empty { program: String },
    #[error(
        "{program} printed a credential with characters an HTTP header cannot carry (a line \
         break, a control character or non-ASCII text)"
    )]
    NotHeader { program: String },
    #[error("{program} did not finish within {} and was killed", span(*.after))]
    TimedOut { program: String, after: Duration },
    #[error("running {program}: {source}")]
    Wait {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} was stopped: the daemon is shutting down")]
    Stopped { program: String },
}

/// `30 s`, or `200 ms` for a span that is not whole seconds.
fn span(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

fn stderr_part(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

impl CredentialError {
    /// What to do about it, for `check-config` and `serve`.
    pub fn fix(&self) -> String {
        match self {
            CredentialError::NoProgram => {
                "give the program and its arguments, e.g. credential_command = [\"gcloud\", \
                 \"auth\", \"print-access-token\"]"
                    .into()
            }
            CredentialError::Start { program, .. } => format!(
                "install {program} or give its full path (the command is run directly, not \
                 through a shell)"
            ),
            CredentialError::Failed { .. } | CredentialError::Wait { .. } => {
                "run the command by hand as the user baton runs as and fix what it says (e.g. \
                 `gcloud auth login`, or an activated service account)"
                    .into()
            }
            CredentialError::Empty { .. } => {
                "make the command print the credential on its standard output".into()
            }
            CredentialError::NotHeader { .. } => {
                "make the command print only the credential, on one line".into()
            }
            CredentialError::TimedOut { after, .. } => format!(
                "make the command finish within {} (it runs without a terminal or stdin)",
                span(*after)
            ),
            CredentialError::Stopped { .. } => "nothing: it runs again at the next start".into(),
        }
    }
}

/// A program and its arguments whose standard output is a credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialCommand {
    argv: Vec<String>,
    timeout: Duration,
}

impl CredentialCommand {
    /// `argv[0]` is the program (looked up in `PATH` unless it is a path), the rest its
    /// arguments; the timeout is [`COMMAND_TIMEOUT`].
    pub fn new(argv: Vec<String>) -> Result<Self, CredentialError> {
        match argv.first() {
            Some(p) if !p.trim().is_empty() => Ok(CredentialCommand {
                argv,
                timeout: COMMAND_TIMEOUT,
            }),
            _ => Err(CredentialError::NoProgram),
        }
    }

    /// The same command with another timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The program, for messages.
    pub fn program(&self) -> &str {
        self.argv.first().map_or("", String::as_str)
    }

    /// Runs the command once, blocking until it ends (at most its timeout), and returns its
    /// trimmed standard output.
    pub fn run(&self) -> Result<Secret, CredentialError> {
        self.run_unless(&AtomicBool::new(false))
    }

    /// [`CredentialCommand::run`], killing the command early once `stop` is set.
    fn run_unless(&self, stop: &AtomicBool) -> Result<Secret, CredentialError> {
        let program = self.program().to_owned();
        let (first, args) = self.argv.split_first().ok_or(CredentialError::NoProgram)?;
        if stop.load(Ordering::Relaxed) {
            return Err(CredentialError::Stopped { program });
        }
        let mut child = Command::new(first)
            .args(args)
            // A group of its own: a timeout or a stop ends what it started too (a `sh -c`
            // pipeline's curl and jq), not only the command, so nothing holds its output open.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| CredentialError::Start {
                program: program.clone(),
                source,
            })?;
        let deadline = Instant::now() + self.timeout;
        let outputs = match read_outputs(&mut child) {
            Ok(rx) => rx,
            Err(source) => {
                end(&mut child);
                return Err(CredentialError::Wait { program, source });
            }
        };
        // Its output first, while the child is not yet reaped (so its pid, the group's id,
        // cannot have gone to another process): both streams end with the command, unless
        // something it started still holds them; then the group is ended, at the deadline or
        // at once on a stop.
        let (mut out, mut err) = (None, None);
        while out.is_none() || err.is_none() {
            if stop.load(Ordering::Relaxed) {
                end(&mut child);
                return Err(CredentialError::Stopped { program });
            }
            if Instant::now() >= deadline {
                end(&mut child);
                return Err(CredentialError::TimedOut {
                    program,
                    after: self.timeout,
                });
            }
            match outputs.recv_timeout(POLL_MAX) {
                Ok((Stream::Out, bytes)) => out = Some(bytes),
                Ok((Stream::Err, bytes)) => err = Some(bytes),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                // A reader gone without a word: what it read is lost, the stream taken as empty.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    out.get_or_insert_with(Vec::new);
                    err.get_or_insert_with(Vec::new);
                }
            }
        }
        let status = wait(&mut child, deadline, stop).map_err(|w| match w {
            Waited::TimedOut => CredentialError::TimedOut {
                program: program.clone(),
                after: self.timeout,
            },
            Waited::Stopped => CredentialError::Stopped {
                program: program.clone(),
            },
            Waited::Failed(source) => CredentialError::Wait {
                program: program.clone(),
                source,
            },
        })?;
        if !status.success() {
            let out = out.unwrap_or_default();
            // What it printed on stdout is not shown, even where it repeats it (or a line of
            // it) on stderr: taken out of the whole of stderr before a line is chosen and cut.
            let stderr = last_line(redacted(&err.unwrap_or_default(), &out).as_bytes());
            return Err(CredentialError::Failed {
                program,
                status: status.to_string(),
                stderr,
            });
        }
        credential(out.unwrap_or_default(), program)
    }
}

/// The standard output as a credential: trimmed, not empty, fit for a header.
fn credential(out: Vec<u8>, program: String) -> Result<Secret, CredentialError> {
    let Ok(text) = String::from_utf8(out) else {
        return Err(CredentialError::NotHeader { program });
    };
    let value = text.trim();
    if value.is_empty() {
        return Err(CredentialError::Empty { program });
    }
    if !value
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        return Err(CredentialError::NotHeader { program });
    }
    Ok(Secret::new(value))
}

enum Stream {
    Out,
    Err,
}

/// Reads the child's stdout and stderr, each on a thread of its own (a command that fills one
/// pipe while the other is waited on would never end), up to [`OUTPUT_LIMIT`] each.
fn read_outputs(child: &mut Child) -> std::io::Result<mpsc::Receiver<(Stream, Vec<u8>)>> {
    let (tx, rx) = mpsc::channel();
    let readers: [(Option<Box<dyn Read + Send>>, Stream); 2] = [
        (
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            Stream::Out,
        ),
        (
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            Stream::Err,
        ),
    ];
    for (pipe, which) in readers {
        let tx = tx.clone();
        let Some(pipe) = pipe else {
            let _ = tx.send((which, Vec::new()));
            continue;
        };
        std::thread::Builder::new()
            .name("credential-output".into())
            .spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.take(OUTPUT_LIMIT).read_to_end(&mut bytes);
                let _ = tx.send((which, bytes));
            })?;
    }
    Ok(rx)
}

enum Waited {
    TimedOut,
    Stopped,
    Failed(std::io::Error),
}

/// Waits for the child to exit until `deadline`; past it, or once `stop` is set, kills it.
fn wait(child: &mut Child, deadline: Instant, stop: &AtomicBool) -> Result<ExitStatus, Waited> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => {}
            Err(e) => {
                // The child may be gone already (reaped elsewhere): its id is not a group to kill.
                let _ = child.kill();
                return Err(Waited::Failed(e));
            }
        }
        if stop.load(Ordering::Relaxed) {
            end(child);
            return Err(Waited::Stopped);
        }
        let now = Instant::now();
        if now >= deadline {
            end(child);
            return Err(Waited::TimedOut);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(POLL_MAX);
    }
}

/// Kills the child and all it started (its process group), and reaps the child.
fn end(child: &mut Child) {
    kill_group(child);
    let _ = child.kill();
    let _ = child.wait();
}

/// Kills the child's process group (the child leads it: [`CommandExt::process_group`]).
/// Called only while the child is not yet reaped: its pid, the group's id, is still its own.
fn kill_group(child: &Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: killpg takes plain integers and touches no memory of ours. The group is the
        // one the child was started in, led by it; the child is alive or a zombie not yet
        // reaped (every caller reaps it only afterwards), so the id names no other group.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}

/// Lines of a multi-line stdout shorter than this are not taken for a credential to hide on
/// their own (the whole of it always is).
const SECRET_MIN: usize = 8;

/// `stderr` as text with whatever `stdout` printed (the whole of it, and each line of it long
/// enough to be a credential) replaced by `***`.
fn redacted(stderr: &[u8], stdout: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(stderr).into_owned();
    let printed = String::from_utf8_lossy(stdout);
    let whole = printed.trim();
    if !whole.is_empty() {
        text = text.replace(whole, "***");
    }
    for line in printed.lines().map(str::trim) {
        if line.len() >= SECRET_MIN {
            text = text.replace(line, "***");
        }
    }
    text
}

/// The last line of `stderr` that says "error" (a tool such as gcloud follows its error with
/// lines of advice), else its last non-blank line; control characters made spaces, at most
/// [`STDERR_SHOWN`] characters (an ellipsis marks a cut).
fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines = || text.lines().rev().map(str::trim).filter(|l| !l.is_empty());
    let line = lines()
        .find(|l| l.to_ascii_lowercase().contains("error"))
        .or_else(|| lines().next())
        .unwrap_or("");
    let mut shown: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(STDERR_SHOWN)
        .collect();
    if line.chars().count() > STDERR_SHOWN {
        shown.push('…');
    }
    shown
}

/// What a model endpoint sends as its credential: a fixed value (an environment variable's,
/// read at start) or the current value of one a command renews.
#[derive(Clone, Debug)]
pub enum Credential {
    Fixed(Secret),
    Renewed(Arc<RenewedCredential>),
}

impl Credential {
    /// The value to send now.
    pub fn current(&self) -> Secret {
        match self {
            Credential::Fixed(s) => s.clone(),
            Credential::Renewed(r) => r.current(),
        }
    }

    /// The renewed credential, to keep renewed.
    pub fn renewed(&self) -> Option<&Arc<RenewedCredential>> {
        match self {
            Credential::Fixed(_) => None,
            Credential::Renewed(r) => Some(r),
        }
    }
}

/// A credential [`CredentialCommand`] renews: read when a model session opens, replaced by
/// [`RenewedCredential::keep_renewed`].
pub struct RenewedCredential {
    command: CredentialCommand,
    refresh: Duration,
    current: ArcSwap<Secret>,
    /// When the first value was obtained (start-up).
    started: Instant,
}

impl RenewedCredential {
    /// Runs the command once (blocking; this is start-up) and holds its credential, to be
    /// renewed every `refresh`.
    pub fn start(command: CredentialCommand, refresh: Duration) -> Result<Self, CredentialError> {
        let first = command.run()?;
        Ok(RenewedCredential {
            command,
            refresh,
            current: ArcSwap::from_pointee(first),
            started: Instant::now(),
        })
    }

    /// The credential now (a lock-free read).
    pub fn current(&self) -> Secret {
        Secret::clone(&self.current.load())
    }

    /// Replaces the credential.
    pub fn set(&self, value: Secret) {
        self.current.store(Arc::new(value));
    }

    /// The command that renews it.
    pub fn command(&self) -> &CredentialCommand {
        &self.command
    }

    /// How often it is renewed.
    pub fn refresh(&self) -> Duration {
        self.refresh
    }

    /// Renews the credential every refresh interval, for as long as the future is polled: the
    /// command runs on a blocking thread; a success replaces the value, a failure is logged and
    /// the last value kept, tried again after [`RETRY_AFTER`] (or the refresh interval when
    /// shorter). Dropping the future kills a run in progress.
    pub async fn keep_renewed(self: Arc<Self>) {
        let stop = Arc::new(AtomicBool::new(false));
        let _stop_on_drop = StopOnDrop(stop.clone());
        let mut wait = self.refresh;
        // When the value in use was obtained: how old a kept one is, when renewals fail.
        let mut obtained = tokio::time::Instant::from_std(self.started);
        loop {
            tokio::time::sleep(wait).await;
            let this = self.clone();
            let flag = stop.clone();
            let run = tokio::task::spawn_blocking(move || this.command.run_unless(&flag)).await;
            let failure = match run {
                Ok(Ok(value)) => {
                    self.set(value);
                    obtained = tokio::time::Instant::now();
                    tracing::info!(program = self.command.program(), "model credential renewed");
                    None
                }
                Ok(Err(e)) => Some(e.to_string()),
                Err(e) => Some(format!("the renewal did not run: {e}")),
            };
            wait = match failure {
                None => self.refresh,
                Some(error) => {
                    let retry = RETRY_AFTER.min(self.refresh);
                    tracing::warn!(
                        %error,
                        retry_s = retry.as_secs_f64(),
                        kept_for_s = obtained.elapsed().as_secs(),
                        "model credential not renewed; the last one is kept (obtained kept_for_s \
                         ago: sessions are refused once it expires)"
                    );
                    retry
                }
            };
        }
    }
}

impl std::fmt::Debug for RenewedCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewedCredential")
            .field("program", &self.command.program())
            .field("refresh", &self.refresh)
            .field("current", &"***")
            .finish()
    }
}

/// Sets its flag when dropped: a renewal whose task ends stops its command.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> CredentialCommand {
        CredentialCommand::new(vec!["sh".into(), "-c".into(), script.into()]).unwrap()
    }

    #[test]
    fn the_trimmed_output_is_the_credential() {
        let s = sh("printf ' tok-1\\n'").run().unwrap();
        assert_eq!(s.expose(), "tok-1");
        assert!(!format!("{s:?}").contains("tok-1"));
    }

    #[test]
    fn a_failure_says_its_status_and_last_stderr_line_but_not_its_output() {
        let e = sh("echo printed-SECRET; echo first >&2; echo 'no credentials found' >&2; exit 3")
            .run()
            .unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, CredentialError::Failed { .. }), "{e:?}");
        assert!(
            text.contains("sh failed")
                && text.contains("3")
                && text.ends_with("no credentials found"),
            "{text}"
        );
        assert!(!text.contains("first"), "{text}");
        assert!(!text.contains("SECRET") && !format!("{e:?}").contains("SECRET"));
        // What it printed on stdout is never shown, even repeated on stderr.
        let e = sh("echo tok-SECRET; echo 'rejected tok-SECRET' >&2; exit 1")
            .run()
            .unwrap_err();
        assert!(e.to_string().ends_with("rejected ***"), "{e}");
        // A tool's error line is preferred to the advice after it (gcloud's way).
        let e = sh(
            "echo 'ERROR: (gcloud.auth.print-access-token) no active account' >&2; \
                    echo 'Please run:' >&2; echo '  $ gcloud auth login' >&2; echo >&2; exit 1",
        )
        .run()
        .unwrap_err();
        assert!(
            e.to_string()
                .ends_with("ERROR: (gcloud.auth.print-access-token) no active account"),
            "{e}"
        );
        // A long line is cut.
        let e = sh("printf '%0500d\\n' 0 >&2; exit 1").run().unwrap_err();
        let CredentialError::Failed { stderr, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(stderr.chars().count(), STDERR_SHOWN + 1, "{stderr}");
    }

    /// A long token (Vertex's are longer than the quoted line) repeated on stderr, whole or a
    /// line of it, never shows, not even cut short.
    #[test]
    fn a_long_token_on_stderr_is_hidden_before_the_line_is_cut() {
        let token = format!("ya29.{}", "x".repeat(300));
        let e = sh(&format!(
            "echo {token}; echo 'ERROR: token {token} rejected' >&2; exit 1"
        ))
        .run()
        .unwrap_err();
        let text = e.to_string();
        assert!(text.ends_with("ERROR: token *** rejected"), "{text}");
        assert!(!text.contains("xxxxxxxx"), "{text}");
        // Two lines of output: each is hidden where it is repeated alone.
        let e = sh("printf 'line-one-SECRET\\nline-two-SECRET\\n'; \
                    echo 'error: line-two-SECRET' >&2; exit 1")
        .run()
        .unwrap_err();
        assert!(e.to_string().ends_with("error: ***"), "{e}");
        // A short credential is hidden too (only a line of a longer output needs a length).
        let e = sh("echo k3y; echo 'error: k3y refused' >&2; exit 1")
            .run()
            .unwrap_err();
        assert!(e.to_string().ends_with("error: *** refused"), "{e}");
    }

    /// A timeout ends what the command started too: a pipeline's other process holding its
    /// output does not outlive the run.
    #[test]
    fn a_timeout_ends_the_commands_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let e = sh(&script)
            .with_timeout(Duration::from_secs(1))
            .run()
            .unwrap_err();
        assert!(matches!(e, CredentialError::TimedOut { .. }), "{e:?}");
        // On a loaded machine the shell may not have written the pid before it was killed:
        // then it started nothing that could outlive it.
        let Ok(text) = std::fs::read_to_string(&pid_file) else {
            return;
        };
        // (written, or still empty if the shell was killed between creating it and writing)
        let Ok(pid) = text.trim().parse::<i32>() else {
            return;
        };
        // Killed with the group (a zombie until init reaps it: gone or a zombie, it no longer
        // runs); a signal lands in its own time, so the state is read for up to 5 s.
        let runs = || {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            state
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                .is_some_and(|st| st != "Z" && st != "X")
        };
        let t0 = Instant::now();
        while runs() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!runs(), "the pipeline's sleep still runs");
    }

    #[test]
    fn nothing_printed_is_an_error() {
        let e = sh("printf '  \\n'").run().unwrap_err();
        assert!(matches!(e, CredentialError::Empty { .. }), "{e:?}");
        assert!(e.to_string().contains("printed nothing"), "{e}");
    }

    #[test]
    fn a_value_a_header_cannot_carry_is_refused_without_showing_it() {
        for script in [
            "printf 'tok-SECRET\\nsecond-line\\n'",
            "printf 'tok-\\001SECRET'",
            "printf 'tok-\\303\\251SECRET'",
            "printf 'tok-\\377SECRET'",
        ] {
            let e = sh(script).run().unwrap_err();
            assert!(
                matches!(e, CredentialError::NotHeader { .. }),
                "{script}: {e:?}"
            );
            let text = format!("{e} {e:?}");
            assert!(!text.contains("SECRET"), "{text}");
        }
    }

    #[test]
    fn a_command_past_its_timeout_is_killed() {
        let cmd = CredentialCommand::new(vec!["sleep".into(), "30".into()])
            .unwrap()
            .with_timeout(Duration::from_millis(200));
        let e = cmd.run().unwrap_err();
        assert!(matches!(e, CredentialError::TimedOut { .. }), "{e:?}");
        assert!(e.to_string().contains("200 ms"), "{e}");
    }

    #[test]
    fn a_program_that_does_not_exist_is_named_with_the_os_error() {
        let e = CredentialCommand::new(vec!["baton-no-such-program-7f3".into()])
            .unwrap()
            .run()
            .unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, CredentialError::Start { .. }), "{e:?}");
        assert!(
            text.contains("cannot start baton-no-such-program-7f3")
                && text.to_lowercase().contains("no such file"),
            "{text}"
        );
        assert!(e.fix().contains("full path"), "{}", e.fix());
    }

    #[test]
    fn an_empty_program_is_refused() {
        assert!(matches!(
            CredentialCommand::new(vec![]),
            Err(CredentialError::NoProgram)
        ));
        assert!(matches!(
            CredentialCommand::new(vec![" ".into(), "x".into()]),
            Err(CredentialError::NoProgram)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_renewal_replaces_the_value_and_keeps_it_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        // Prints tok-1, then fails once, then prints tok-3.
        let script = format!(
            "n=$(cat '{c}' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '{c}'; \
             case $n in 1) printf tok-1;; 2) echo broken >&2; exit 1;; *) printf tok-$n;; esac",
            c = count.display()
        );
        let renewed =
            Arc::new(RenewedCredential::start(sh(&script), Duration::from_millis(50)).unwrap());
        assert_eq!(renewed.current().expose(), "tok-1");
        assert!(!format!("{renewed:?}").contains("tok-1"));
        let task = tokio::spawn(renewed.clone().keep_renewed());
        let deadline = Instant::now() + Duration::from_secs(20);
        while renewed.current().expose() == "tok-1" {
            assert!(Instant::now() < deadline, "never renewed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The failed run (the second) kept tok-1; the value that replaced it came after.
        let now = renewed.current();
        let n: u32 = now.expose().trim_start_matches("tok-").parse().unwrap();
        assert!(n >= 3, "{}", now.expose());
        task.abort();
    }
}
