//! Starting the one etcd under every apiserver: its process, a new port when the chosen
//! one was taken meanwhile, and its health.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{LocalEnv, PORT_ATTEMPTS, PROBE_INTERVAL, port_conflict};
use crate::error::Error;
use crate::etcd::{self, EtcdSpec};
use crate::ports;
use crate::process::{self, Process};

impl LocalEnv {
    pub(super) async fn start_etcd(&mut self, etcd: &Path) -> Result<(), Error> {
        let data_dir = self.dir.join("etcd");
        for attempt in 1..=PORT_ATTEMPTS {
            let spec = EtcdSpec {
                binary: etcd.to_path_buf(),
                data_dir: data_dir.clone(),
                log: self.dir.join("etcd.log"),
                client_port: ports::free_port()?,
                peer_port: ports::free_port()?,
            };
            self.spawn_etcd(&spec)?;
            match self.wait_etcd_healthy(spec.client_port).await {
                Ok(()) => {
                    self.etcd_url = spec.client_url();
                    tracing::debug!(client_url = %self.etcd_url, "etcd ready");
                    self.etcd_spec = Some(spec);
                    return Ok(());
                }
                Err(e) if attempt < PORT_ATTEMPTS && port_conflict(&e) => {
                    tracing::warn!(attempt, "etcd port taken, retrying with other ports");
                    self.lock().etcd = None;
                    // A failed first start may have left a half-initialised data dir.
                    let _ = std::fs::remove_dir_all(&data_dir);
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::NoFreePort)
    }

    pub(super) fn spawn_etcd(&self, spec: &EtcdSpec) -> Result<(), Error> {
        let etcd = Process::spawn("etcd", &spec.binary, &spec.args(), &spec.log)?;
        if self.options.favour_etcd {
            favour(etcd.pid());
        }
        self.lock().etcd = Some(etcd);
        Ok(())
    }

    pub(super) async fn wait_etcd_healthy(&self, port: u16) -> Result<(), Error> {
        let deadline = Instant::now() + self.options.startup_timeout;
        loop {
            {
                let mut processes = self.lock();
                if let Some(etcd) = processes.etcd.as_mut()
                    && let Some(status) = etcd.exit_status()
                {
                    return Err(etcd.exited_error(status));
                }
            }
            let last_error =
                match tokio::time::timeout(Duration::from_secs(2), etcd::health(port)).await {
                    Ok(Ok(true)) => return Ok(()),
                    Ok(Ok(false)) => "etcd reports unhealthy".to_owned(),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "health probe timed out".to_owned(),
                };
            if Instant::now() >= deadline {
                return Err(Error::StartupTimeout {
                    process: "etcd".into(),
                    timeout: self.options.startup_timeout,
                    last_error,
                    log_tail: process::log_tail(&self.dir.join("etcd.log")),
                });
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }
}

/// Raises etcd's CPU priority above the apiservers' ([`crate::EnvOptions::favour_etcd`]).
fn favour(pid: u32) {
    let raised = std::process::Command::new("renice")
        .args(["-n", "-10", "-p", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match raised {
        Ok(s) if s.success() => tracing::debug!(pid, "etcd runs at nice -10"),
        Ok(s) => tracing::warn!(pid, status = %s, "etcd's priority could not be raised"),
        Err(e) => tracing::warn!(pid, error = %e, "renice could not run; etcd keeps its priority"),
    }
}
