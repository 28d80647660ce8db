//! Child processes: spawning them from one long-lived thread, capturing their output and
//! stopping them.
//!
//! Every child runs under `setpriv --pdeathsig KILL`, so the kernel kills it when its parent
//! goes away, even if the test process is SIGKILLed and no destructor runs. The kernel ties
//! that signal to the *thread* that forked the child, so all children are forked by one
//! spawner thread that lives as long as the process.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use crate::error::{Error, io};

/// How much of a log file an error message carries.
const LOG_TAIL_BYTES: u64 = 4096;

struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<std::io::Result<Child>>,
}

/// The spawner thread's inbox; `None` until the first spawn.
static SPAWNER: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);

fn spawner() -> Result<mpsc::Sender<SpawnRequest>, Error> {
    let mut slot = SPAWNER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(sender) = slot.as_ref() {
        return Ok(sender.clone());
    }
    let (sender, receiver) = mpsc::channel::<SpawnRequest>();
    std::thread::Builder::new()
        .name("flotilla-localenv-spawner".into())
        .spawn(move || {
            // The sender lives in a static and is never dropped, so this loop (and with it
            // the thread that parents every child) lasts as long as the process.
            for mut request in receiver {
                let result = request.command.spawn();
                if let Err(mpsc::SendError(Ok(mut orphan))) = request.reply.send(result) {
                    // Nobody is waiting for this child any more: do not leave it running.
                    let _ = orphan.kill();
                    let _ = orphan.wait();
                }
            }
        })
        .map_err(|_| Error::SpawnerGone)?;
    *slot = Some(sender.clone());
    Ok(sender)
}

/// A running (or exited, not yet collected) child process whose output goes to a log file.
///
/// Dropping it kills the process if it still runs; [`terminate`] stops it gracefully.
#[derive(Debug)]
pub struct Process {
    label: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `program args…` under `setpriv --pdeathsig KILL`, appending stdout and stderr
    /// to `log`.
    pub fn spawn(
        label: impl Into<String>,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Self, Error> {
        Self::spawn_with_env(label, program, args, &[], log)
    }

    /// [`Process::spawn`] with extra environment variables for the program.
    pub fn spawn_with_env(
        label: impl Into<String>,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Result<Self, Error> {
        let label = label.into();
        let stdout = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(io(format!("opening log file {}", log.display())))?;
        let stderr = stdout
            .try_clone()
            .map_err(io(format!("opening log file {}", log.display())))?;
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--"])
            .arg(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let (reply, answer) = mpsc::channel();
        spawner()?
            .send(SpawnRequest { command, reply })
            .map_err(|_| Error::SpawnerGone)?;
        let child = answer
            .recv()
            .map_err(|_| Error::SpawnerGone)?
            .map_err(io(format!(
                "spawning {label} ({}) through setpriv (util-linux)",
                program.display()
            )))?;
        tracing::debug!(process = %label, pid = child.id(), "spawned");
        Ok(Self {
            label,
            child,
            log: log.to_path_buf(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the process has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last few kilobytes of the process's log.
    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// The error describing that this process exited while it should have come up.
    pub(crate) fn exited_error(&self, status: ExitStatus) -> Error {
        Error::ProcessExited {
            process: self.label.clone(),
            status: status.to_string(),
            log_tail: self.log_tail(),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.exit_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The last [`LOG_TAIL_BYTES`] of a log file, or a note saying why it cannot be read.
pub(crate) fn log_tail(path: &Path) -> String {
    let read = || -> std::io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes);
        // Drop the partial first line when the tail starts mid-file.
        let text = match (len > LOG_TAIL_BYTES, text.find('\n')) {
            (true, Some(newline)) => &text[newline + 1..],
            _ => &text[..],
        };
        Ok(text.to_owned())
    };
    match read() {
        Ok(text) => text,
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Stops the processes: SIGTERM to all, then SIGKILL to those still running after `grace`,
/// and waits for every one of them.
pub(crate) fn terminate(processes: &mut [Process], grace: Duration) {
    // Only processes that have not been reaped get a signal, so a pid cannot have been
    // reused by an unrelated process.
    let running: Vec<String> = processes
        .iter_mut()
        .filter_map(|p| p.exit_status().is_none().then(|| p.pid().to_string()))
        .collect();
    if running.is_empty() {
        return;
    }
    // std only sends SIGKILL and this crate has no unsafe code, so SIGTERM goes through kill(1).
    let signalled = Command::new("kill")
        .args(["-s", "TERM"])
        .args(&running)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    let started = Instant::now();
    let deadline = started + if signalled { grace } else { Duration::ZERO };
    while Instant::now() < deadline {
        if processes.iter_mut().all(|p| p.exit_status().is_some()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for process in processes.iter_mut() {
        if process.exit_status().is_none() {
            tracing::debug!(process = %process.label, "still running after SIGTERM, killing");
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
    }
    tracing::debug!(
        processes = running.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "processes stopped"
    );
}
