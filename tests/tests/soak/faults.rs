//! The faults the soak injects, one at a time, each held for a random while and lifted.

use std::time::Duration;

use flotilla_localenv::FaultMode;

use super::setup::Soak;
use crate::fault_harness::{Rng, start_control_plane};

/// The kinds of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// A member's API server stopped and started again (any member, pull included).
    MemberApiServer,
    /// The host's API server stopped and started again.
    HostApiServer,
    /// The one etcd under the host and every member stopped and started again.
    Etcd,
    /// The control plane dropped mid-flight (as a SIGKILL) and started afresh.
    ControlPlane,
    /// member3's agent dropped mid-flight (as a SIGKILL) and started afresh.
    Agent,
    /// A network partition between the host and member2 (the proxy black-holes).
    PartitionPush,
    /// A network partition between member3's agent and the host.
    PartitionPull,
    /// Latency (0.5–3 s each way) on one of the two proxied paths.
    Latency,
}

impl Fault {
    /// Every kind, for the driver to draw from.
    pub const ALL: [Fault; 8] = [
        Fault::MemberApiServer,
        Fault::HostApiServer,
        Fault::Etcd,
        Fault::ControlPlane,
        Fault::Agent,
        Fault::PartitionPush,
        Fault::PartitionPull,
        Fault::Latency,
    ];

    /// How the report names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::MemberApiServer => "member apiserver restart",
            Fault::HostApiServer => "host apiserver restart",
            Fault::Etcd => "etcd restart (host + members)",
            Fault::ControlPlane => "control plane kill+restart",
            Fault::Agent => "agent kill+restart",
            Fault::PartitionPush => "host/member2 partition",
            Fault::PartitionPull => "member3 agent/host partition",
            Fault::Latency => "latency",
        }
    }
}

/// Injects `fault`, holds it 2–7 s (a kill: 0–2 s down), lifts it; returns a detail for
/// the log.
pub async fn inject(soak: &mut Soak, fault: Fault, rng: &mut Rng) -> anyhow::Result<String> {
    let hold = rng.millis(2_000, 7_000);
    let env = &soak.fed.env;
    let detail = match fault {
        Fault::MemberApiServer => {
            let member = soak.names[rng.range(0, soak.names.len() as u64) as usize].clone();
            env.stop_apiserver(&member).await?;
            tokio::time::sleep(hold).await;
            env.start_apiserver(&member).await?;
            member
        }
        Fault::HostApiServer => {
            env.stop_apiserver("host").await?;
            tokio::time::sleep(hold).await;
            env.start_apiserver("host").await?;
            String::new()
        }
        Fault::Etcd => {
            env.stop_etcd().await?;
            tokio::time::sleep(hold).await;
            env.start_etcd_again().await?;
            String::new()
        }
        Fault::ControlPlane => {
            drop(soak.fed.control_plane.take());
            let down = rng.millis(0, 2_000);
            tokio::time::sleep(down).await;
            soak.fed.control_plane = Some(start_control_plane(&soak.fed.host));
            return Ok(format!("down {:.1} s", down.as_secs_f64()));
        }
        Fault::Agent => {
            soak.kill_agent();
            let down = rng.millis(0, 2_000);
            tokio::time::sleep(down).await;
            soak.start_agent();
            return Ok(format!("down {:.1} s", down.as_secs_f64()));
        }
        Fault::PartitionPush | Fault::PartitionPull => {
            let proxy = if fault == Fault::PartitionPush {
                &soak.member_proxy
            } else {
                &soak.agent_proxy
            };
            proxy.set_mode(FaultMode::BlackHole);
            tokio::time::sleep(hold).await;
            proxy.set_mode(FaultMode::PassThrough);
            String::new()
        }
        Fault::Latency => {
            let delay = rng.millis(500, 3_000);
            let (proxy, path) = if rng.chance(50) {
                (&soak.member_proxy, "host/member2")
            } else {
                (&soak.agent_proxy, "member3 agent/host")
            };
            proxy.set_mode(FaultMode::Latency(delay));
            tokio::time::sleep(hold).await;
            proxy.set_mode(FaultMode::PassThrough);
            format!("{path} {:.1} s", delay.as_secs_f64())
        }
    };
    Ok(format!("{detail} held {:.1} s", hold.as_secs_f64()))
}

/// A pause between two faults: 1–5 s.
pub fn pause(rng: &mut Rng) -> Duration {
    rng.millis(1_000, 5_000)
}
