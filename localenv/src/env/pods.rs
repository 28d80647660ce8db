//! Pods that run (in appearance) in the member clusters: a kube-scheduler process per
//! member and a simulated kubelet task ([`crate::kubelet`]) per member, started when
//! [`super::EnvOptions::pods`] asks for them. No container runs.

use super::{LocalEnv, write};
use crate::error::Error;
use crate::kubeconfig;
use crate::process::Process;

/// The scheduler binary, next to the apiserver.
pub(crate) const SCHEDULER: &str = "kube-scheduler";

impl LocalEnv {
    /// Starts the kube-scheduler of the cluster at `index`.
    pub(super) fn spawn_scheduler(&self, index: usize) -> Result<(), Error> {
        let cluster = &self.clusters[index];
        let dir = cluster.dir();
        let config = dir.join("scheduler.kubeconfig");
        write(&config, &kubeconfig::render(std::slice::from_ref(cluster))?)?;
        let args = vec![
            format!("--kubeconfig={}", config.display()),
            "--leader-elect=false".to_owned(),
            // v1.20 serves on fixed ports 10251 (HTTP) and 10259 (HTTPS) by default, which
            // would collide between clusters.
            "--port=0".to_owned(),
            "--secure-port=0".to_owned(),
            "--kube-api-qps=100".to_owned(),
            "--kube-api-burst=200".to_owned(),
        ];
        let scheduler = Process::spawn(
            format!("scheduler {}", cluster.name()),
            &self.bin_dir.join(SCHEDULER),
            &args,
            &dir.join("scheduler.log"),
        )?;
        self.lock().schedulers[index] = Some(scheduler);
        Ok(())
    }

    /// Starts a scheduler and a simulated kubelet for every member.
    pub(super) async fn start_pod_simulation(&mut self) -> Result<(), Error> {
        let Some(options) = self.options.pods.clone() else {
            return Ok(());
        };
        for index in 1..self.clusters.len() {
            self.spawn_scheduler(index)?;
            let cluster = &self.clusters[index];
            let client = cluster.client().await?;
            let kubelet =
                crate::kubelet::spawn(client, cluster.name().to_owned(), index, options.clone());
            self.kubelets.push(kubelet);
        }
        Ok(())
    }
}
