//! `Run`: the real `egress-sandbox run` as a child process, with a clean environment, its
//! own report and audit log files, output captured live (bounded), and a hang bound.

use std::ffi::OsString;
use std::io::Read;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use super::docker::TestNetwork;

/// The binary under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_egress-sandbox");
/// How long a run may take before the test kills it and fails: catches hangs, never timings.
pub const HANG_BOUND: Duration = Duration::from_secs(120);
/// Building the images (debootstrap for the base image) takes minutes the first time.
const IMAGE_BUILD_BOUND: Duration = Duration::from_secs(30 * 60);
/// Output kept per stream; the rest is only counted (a run that fails to cap its output
/// must not exhaust the test's memory).
const CAPTURE_LIMIT: usize = 16 << 20;

/// The environment variable naming the OCI runtime every [`Run`] uses (`--runtime`): CI runs
/// the isolation, reach, hardening and credential modules once with the engine's default
/// and once with `runsc` (gVisor), so both wirings are proven end to end.
pub const RUNTIME_ENV: &str = "EGRESS_SANDBOX_TEST_RUNTIME";

/// The runtime the tests run under, from [`RUNTIME_ENV`]; `None`: the engine's default.
pub fn test_runtime() -> Option<String> {
    std::env::var(RUNTIME_ENV)
        .ok()
        .filter(|name| !name.is_empty())
}

/// What the runtime of this test process's runs is, from the engine's registration
/// (`None`: the engine's default, runc here).
fn test_runtime_kind() -> Option<egress_sandbox::RuntimeKind> {
    static KIND: OnceLock<Option<egress_sandbox::RuntimeKind>> = OnceLock::new();
    *KIND.get_or_init(|| {
        let name = test_runtime()?;
        let (ok, stdout, _) = super::docker::docker(&["info", "--format", "{{json .Runtimes}}"]);
        assert!(ok, "docker info failed");
        let runtimes: Value = serde_json::from_str(&stdout).expect("docker info's runtimes");
        let runtime = &runtimes[name.as_str()];
        assert!(
            !runtime.is_null(),
            "the engine has no runtime {name}: {stdout}"
        );
        let path = runtime["path"].as_str().unwrap_or(&name);
        let args: Vec<String> = runtime["runtimeArgs"]
            .as_array()
            .map(|args| {
                args.iter()
                    .filter_map(|arg| arg.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        Some(egress_sandbox::RuntimeKind::classify(path, &args))
    })
}

/// Whether the runs of this test process have a network of their own (the run-network
/// wiring: gVisor) rather than none (passed listeners: runc on a local engine).
pub fn runs_have_a_network() -> bool {
    use egress_sandbox::WiringChoice;
    test_runtime_kind().is_some_and(|kind| kind.wiring(true) == WiringChoice::RunNetwork)
}

/// Whether the runs of this test process are on a kernel of their own (gVisor): their
/// processes are not host processes, `/proc` is that kernel's.
pub fn runs_on_their_own_kernel() -> bool {
    use egress_sandbox::RuntimeKind;
    test_runtime_kind().is_some_and(|kind| kind != RuntimeKind::HostKernel)
}

/// `egress-sandbox` with nothing from the test's environment but PATH (and what a test
/// plants on purpose with [`Run::caller_env`]).
pub fn binary() -> Command {
    let mut command = Command::new(BINARY);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command
}

/// Builder for one `egress-sandbox run`.
pub struct Run {
    command: Command,
    dir: TempDir,
    report: PathBuf,
    audit_log: PathBuf,
    /// The `--egress-network`, or none for the default.
    network: Option<String>,
    hang_bound: Duration,
    policies: usize,
    /// Fed to the run's stdin, then closed; none: stdin is /dev/null.
    stdin: Option<Vec<u8>>,
    /// Keep the run's stdout pipe open but never read it (a caller that reads nothing).
    stdout_unread: bool,
    /// Close the run's stdout pipe once this was read (a reader that goes away: `| head`).
    stdout_closed_after: Option<String>,
}

impl Run {
    /// A run whose proxy reaches the outside through `network`, writing its report and
    /// audit log into a temporary directory.
    pub fn new(network: &TestNetwork) -> Self {
        Self::with_egress(Some(&network.name))
    }

    /// A run on the tool's own shared egress network (`egress-sandbox-egress`, created on
    /// first use, inter-container traffic off), as users run it.
    pub fn on_default_egress() -> Self {
        Self::with_egress(None)
    }

    fn with_egress(network: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let report = dir.path().join("report.json");
        let audit_log = dir.path().join("audit.jsonl");
        let mut command = binary();
        command.arg("run");
        if let Some(network) = network {
            command.arg("--egress-network").arg(network);
        }
        if let Some(runtime) = test_runtime() {
            command.arg("--runtime").arg(runtime);
        }
        command
            .arg("--report")
            .arg(&report)
            .arg("--audit-log")
            .arg(&audit_log);
        Run {
            command,
            dir,
            report,
            audit_log,
            network: network.map(str::to_owned),
            hang_bound: HANG_BOUND,
            policies: 0,
            stdin: None,
            stdout_unread: false,
            stdout_closed_after: None,
        }
    }

    /// Reads the run's stdout until `needle`, then closes the pipe, as `run … | head` does.
    pub fn stdout_closed_after(mut self, needle: &str) -> Self {
        self.stdout_closed_after = Some(needle.to_owned());
        self
    }

    /// The audit log file is on a full disk: its path is a link to `/dev/full`, where
    /// every write fails with "No space left on device".
    pub fn audit_log_on_a_full_disk(self) -> Self {
        std::os::unix::fs::symlink("/dev/full", &self.audit_log).expect("link to /dev/full");
        self
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.command.arg(arg.into());
        self
    }

    pub fn option(self, name: &str, value: impl Into<OsString>) -> Self {
        self.arg(name).arg(value)
    }

    pub fn allow(self, host_port: &str) -> Self {
        self.option("--allow", host_port)
    }

    pub fn resolve(self, name: &str, address: Ipv4Addr) -> Self {
        self.option("--resolve", format!("{name}={address}"))
    }

    pub fn timeout(self, duration: &str) -> Self {
        self.option("--timeout", duration)
    }

    /// Writes `yaml` to a policy file and passes it with `--policy`.
    pub fn policy(mut self, yaml: &str) -> Self {
        self.policies += 1;
        let path = self
            .dir
            .path()
            .join(format!("policy-{}.yaml", self.policies));
        std::fs::write(&path, yaml).expect("write the policy file");
        self.option("--policy", path)
    }

    /// Writes `yaml` to a policy file called `file_name` (any name a file may have) and
    /// passes it with `--policy`.
    pub fn policy_named(self, file_name: &str, yaml: &str) -> Self {
        let path = self.dir.path().join(file_name);
        std::fs::write(&path, yaml).expect("write the policy file");
        self.option("--policy", path)
    }

    /// Sets a variable in the environment of the `egress-sandbox` process itself (the
    /// caller's environment), which must never reach the sandbox.
    pub fn caller_env(mut self, key: &str, value: &str) -> Self {
        self.command.env(key, value);
        self
    }

    /// Writes `input` to the run's stdin (from a thread), then closes it.
    pub fn stdin(mut self, input: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(input.into());
        self
    }

    /// The run's stdout is a pipe nobody reads (it fills up and stays full) until the run
    /// ends; the finished run's `stdout` is then empty.
    pub fn stdout_unread(mut self) -> Self {
        self.stdout_unread = true;
        self
    }

    pub fn hang_bound(mut self, bound: Duration) -> Self {
        self.hang_bound = bound;
        self
    }

    /// Starts the run with `program` (after `--`) as the sandboxed command.
    pub fn spawn(mut self, program: &[&str]) -> RunningRun {
        warm_up(self.network.as_deref());
        self.command.arg("--").args(program);
        let stdin = match self.stdin {
            Some(_) => Stdio::piped(),
            None => Stdio::null(),
        };
        let mut child = self
            .command
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start egress-sandbox");
        if let (Some(input), Some(mut pipe)) = (self.stdin, child.stdin.take()) {
            // A command that never reads may leave this blocked until the run ends.
            thread::spawn(move || {
                use std::io::Write;
                let _ = pipe.write_all(&input);
            });
        }
        let stdout_pipe = child.stdout.take().expect("piped stdout");
        let (stdout, unread_stdout) = if self.stdout_unread {
            (Capture::start(std::io::empty(), None), Some(stdout_pipe))
        } else {
            (Capture::start(stdout_pipe, self.stdout_closed_after), None)
        };
        let stderr = Capture::start(child.stderr.take().expect("piped stderr"), None);
        RunningRun {
            pid: child.id(),
            child,
            stdout,
            unread_stdout,
            stderr,
            dir: self.dir,
            report: self.report,
            audit_log: self.audit_log,
            hang_bound: self.hang_bound,
            started: Instant::now(),
        }
    }

    /// Runs `program` to the end.
    pub fn run(self, program: &[&str]) -> Finished {
        self.spawn(program).wait()
    }
}

/// One trivial run per test process before the real ones, with a bound that fits image
/// builds: the first run after a new binary builds the proxy image from it, and the very
/// first one builds the base image (debootstrap, minutes). Hang bounds of the real runs
/// then measure runs, not image builds.
pub fn warm_up(network: Option<&str>) {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let mut command = binary();
        command.arg("run");
        if let Some(network) = network {
            command.args(["--egress-network", network]);
        }
        if let Some(runtime) = test_runtime() {
            command.arg("--runtime").arg(runtime);
        }
        command
            .args(["--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().expect("start egress-sandbox");
        let status = wait_bounded(&mut child, IMAGE_BUILD_BOUND, || {});
        assert!(status.success(), "warm-up run failed: {status}");
    });
}

/// Waits for `child`, calling `tick` between polls. After `bound` it is stopped (SIGTERM,
/// then SIGKILL), whatever it owns in Docker is removed so later tests start clean, and the
/// test fails.
pub fn wait_bounded(child: &mut Child, bound: Duration, mut tick: impl FnMut()) -> ExitStatus {
    let deadline = Instant::now() + bound;
    loop {
        tick();
        if let Some(status) = child.try_wait().expect("poll the child") {
            return status;
        }
        if Instant::now() > deadline {
            stop_hung(child);
            panic!(
                "egress-sandbox (pid {}) did not finish within {bound:?}: stopped",
                child.id()
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// How long a hung run gets to tear down after SIGTERM before it is killed.
const TERM_GRACE: Duration = Duration::from_secs(20);

fn stop_hung(child: &mut Child) {
    let pid = child.id();
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let deadline = Instant::now() + TERM_GRACE;
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    let (owned, _) = super::docker::objects_owned_by(pid);
    owned.remove();
}

/// One output stream, read live by a thread; kept up to [`CAPTURE_LIMIT`], all bytes counted.
struct Capture {
    seen: Arc<Mutex<(Vec<u8>, u64)>>,
    reader: JoinHandle<()>,
}

impl Capture {
    /// Reads `stream` to its end, or until it has read `until` (then the stream is closed).
    fn start(mut stream: impl Read + Send + 'static, until: Option<String>) -> Self {
        let seen = Arc::new(Mutex::new((Vec::new(), 0u64)));
        let sink = Arc::clone(&seen);
        let reader = thread::spawn(move || {
            let mut buffer = vec![0u8; 64 << 10];
            while let Ok(read @ 1..) = stream.read(&mut buffer) {
                let mut seen = sink.lock().expect("capture lock");
                let room = CAPTURE_LIMIT.saturating_sub(seen.0.len()).min(read);
                seen.0.extend_from_slice(&buffer[..room]);
                seen.1 += read as u64;
                if let Some(needle) = &until
                    && String::from_utf8_lossy(&seen.0).contains(needle.as_str())
                {
                    break;
                }
            }
        });
        Capture { seen, reader }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().expect("capture lock").0).into_owned()
    }

    fn finish(self) -> (String, u64) {
        self.reader.join().expect("capture thread");
        let seen = self.seen.lock().expect("capture lock");
        (String::from_utf8_lossy(&seen.0).into_owned(), seen.1)
    }
}

/// A run in progress.
pub struct RunningRun {
    pub pid: u32,
    child: Child,
    stdout: Capture,
    /// Held open, never read ([`Run::stdout_unread`]); closed once the run has ended.
    unread_stdout: Option<std::process::ChildStdout>,
    stderr: Capture,
    dir: TempDir,
    report: PathBuf,
    audit_log: PathBuf,
    hang_bound: Duration,
    started: Instant,
}

impl RunningRun {
    /// Waits until the sandboxed command has printed `needle` on stdout; panics (after
    /// killing the run) if it does not within the hang bound.
    pub fn wait_for_stdout(&mut self, needle: &str) {
        loop {
            if self.stdout.text().contains(needle) {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("poll the child") {
                panic!(
                    "run ended ({status}) before printing {needle:?}; stderr:\n{}",
                    self.stderr.text()
                );
            }
            if self.started.elapsed() > self.hang_bound {
                stop_hung(&mut self.child);
                panic!("run did not print {needle:?} within {:?}", self.hang_bound);
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The name of this run's proxy container, found by its owner label (the run must be
    /// under way: the container exists).
    pub fn proxy_container(&self) -> String {
        let (owned, _) = super::docker::objects_owned_by(self.pid);
        owned
            .containers
            .into_iter()
            .find(|name| name.ends_with("-proxy"))
            .unwrap_or_else(|| panic!("run (pid {}) has no proxy container", self.pid))
    }

    /// Sends `signal` (a name such as "TERM" or "KILL") to the `egress-sandbox` process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid);
    }

    /// Waits for the end of the run (bounded), calling `tick` between polls.
    pub fn wait_with(self, tick: impl FnMut()) -> Finished {
        self.finish(false, tick)
    }

    /// After a SIGKILL: waits until the run's output ends (its watchdog holds stderr open
    /// until it has removed the run's objects), and only then reaps the process. Until
    /// then it is a zombie, which the kernel still answers for: no `gc` or daemon start-up
    /// sweep of another test takes its objects before the watchdog does.
    pub fn wait_killed(self) -> Finished {
        self.finish(true, || {})
    }

    fn finish(mut self, output_first: bool, tick: impl FnMut()) -> Finished {
        let outputs = |run: &mut Self| {
            drop(run.unread_stdout.take());
            let stdout = std::mem::replace(&mut run.stdout, Capture::start(std::io::empty(), None));
            let stderr = std::mem::replace(&mut run.stderr, Capture::start(std::io::empty(), None));
            (stdout.finish(), stderr.finish())
        };
        let (status, ((stdout, stdout_bytes), (stderr, stderr_bytes))) = if output_first {
            let outputs = outputs(&mut self);
            (
                wait_bounded(&mut self.child, self.hang_bound, tick),
                outputs,
            )
        } else {
            let status = wait_bounded(&mut self.child, self.hang_bound, tick);
            (status, outputs(&mut self))
        };
        let report_text = std::fs::read_to_string(&self.report).ok();
        // A link (to /dev/full, `Run::audit_log_on_a_full_disk`) holds nothing to read.
        let is_link = std::fs::symlink_metadata(&self.audit_log)
            .is_ok_and(|metadata| metadata.file_type().is_symlink());
        let audit_text = if is_link {
            String::new()
        } else {
            std::fs::read_to_string(&self.audit_log).unwrap_or_default()
        };
        Finished {
            pid: self.pid,
            status,
            stdout,
            stdout_bytes,
            stderr,
            stderr_bytes,
            report: report_text.as_deref().map(|text| {
                serde_json::from_str(text)
                    .unwrap_or_else(|e| panic!("report is not JSON ({e}): {text}"))
            }),
            report_text,
            audit: parse_audit(&audit_text),
            audit_text,
            audit_log_path: self.audit_log,
            _dir: self.dir,
        }
    }

    pub fn wait(self) -> Finished {
        self.wait_with(|| {})
    }
}

fn parse_audit(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {line}"))
        })
        .collect()
}

/// What a finished run left: exit status, output, report and audit records.
pub struct Finished {
    /// Process id the `egress-sandbox` process had (its objects carry it as owner).
    pub pid: u32,
    pub status: ExitStatus,
    pub stdout: String,
    /// Bytes the run wrote on stdout in total (more than `stdout` holds if very large).
    pub stdout_bytes: u64,
    pub stderr: String,
    pub stderr_bytes: u64,
    pub report: Option<Value>,
    pub report_text: Option<String>,
    pub audit: Vec<Value>,
    pub audit_text: String,
    audit_log_path: PathBuf,
    _dir: TempDir,
}

impl Finished {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Exit code, asserted equal to `expected`, with the output in the failure message.
    pub fn assert_code(&self, expected: i32) {
        assert_eq!(
            self.code(),
            Some(expected),
            "exit status {} (expected {expected})\n{}",
            self.status,
            self.describe()
        );
    }

    /// stdout, stderr and report, for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "--- stdout ({} bytes):\n{}\n--- stderr:\n{}\n--- report:\n{}\n--- audit:\n{}",
            self.stdout_bytes,
            tail(&self.stdout, 4000),
            tail(&self.stderr, 4000),
            self.report_text.as_deref().unwrap_or("(none)"),
            tail(&self.audit_text, 4000),
        )
    }

    pub fn report(&self) -> &Value {
        self.report
            .as_ref()
            .unwrap_or_else(|| panic!("the run wrote no report\n{}", self.describe()))
    }

    /// The run id, from the report, else from the audit records.
    pub fn run_id(&self) -> String {
        self.report
            .as_ref()
            .and_then(|report| report["run"].as_str())
            .or_else(|| self.audit.iter().find_map(|record| record["run"].as_str()))
            .unwrap_or_else(|| panic!("no run id in report or audit log\n{}", self.describe()))
            .to_owned()
    }

    /// Audit records matching `predicate`.
    pub fn audit_where(&self, predicate: impl Fn(&Value) -> bool) -> Vec<&Value> {
        self.audit
            .iter()
            .filter(|record| predicate(record))
            .collect()
    }

    /// The run's summary line on stderr (the last line starting `egress-sandbox:`).
    pub fn summary_line(&self) -> &str {
        self.stderr
            .lines()
            .rev()
            .find(|line| line.starts_with("egress-sandbox:"))
            .unwrap_or_else(|| panic!("no summary line on stderr\n{}", self.describe()))
    }

    /// Asserts that no container or network of this run is left (by run id and by owner).
    pub fn assert_nothing_left(&self) {
        super::docker::assert_nothing_left(&self.run_id(), self.pid);
    }

    pub fn audit_log_path(&self) -> &Path {
        &self.audit_log_path
    }
}

fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
