//! A paired comparison with another build of the gateway (`--baseline PATH`,
//! for instance one built from an earlier commit): one HTTP floor behind this
//! build (`head`) and behind the baseline (`base`), both on the same config,
//! in interleaved rounds: 2 KB echo latency with each gateway's CPU and
//! context switches per call, and throughput at 16 clients. This is how a
//! change shows that it costs nothing on the hot path when it is not used
//! (one replica without a session store; tracing off).

use std::path::Path;
use std::time::Duration;

use crate::calls::{self, Target};
use crate::floor::ECHO;
use crate::procs::{self, Scratch};
use crate::report::Results;
use crate::{Plan, Res};

/// Clients of the throughput window.
pub const CLIENTS: usize = 16;

/// The whole part: floor, both gateways, `plan.rounds` rounds, teardown.
/// Results: `lat_p50_2k/{head,base}` (and p99), `cpu_gw/..`,
/// `csw_cpu_gw/..`, `tput_16/..`.
pub async fn run(
    head: &Path,
    base: &Path,
    exe: &Path,
    scratch: &Scratch,
    floor_threads: usize,
    plan: &Plan,
    res: &mut Results,
) -> Res<()> {
    let (floor, floor_addr) = procs::floor_http(exe, 2, floor_threads).await?;
    let config = scratch.write(
        "baseline.yaml",
        &crate::gateway_yaml(&crate::http_upstream("fh", floor_addr)),
    )?;
    let mut gateways = Vec::new();
    let outcome = async {
        for binary in [head, base] {
            let gateway = procs::gateway(binary, &config).await?;
            procs::wait_ready(gateway.addr, gateway.spawned, Duration::from_secs(60)).await?;
            gateways.push(gateway);
        }
        let targets: Vec<Target> = ["head", "base"]
            .into_iter()
            .zip(&gateways)
            .map(|(key, gateway)| Target {
                key,
                addr: gateway.addr,
                tool: format!("fh__{ECHO}"),
                floor: floor.pid,
                gateway: Some(gateway.proc.pid),
            })
            .collect();
        for round in 1..=plan.rounds {
            eprintln!("baseline round {round}/{}", plan.rounds);
            // A failure says which round, measurement and gateway it hit.
            let at = |what: &str, key: &str| {
                crate::failed_at(format!("baseline round {round}, {what}, gateway {key}"))
            };
            for t in &targets {
                calls::latency(t, 2048, "2k", plan.calls_2k, plan.warmup, true, res)
                    .await
                    .map_err(at("2 KB latency", t.key))?;
            }
            for t in &targets {
                calls::throughput(t, CLIENTS, plan.window, res)
                    .await
                    .map_err(at("throughput", t.key))?;
            }
        }
        Ok::<_, crate::Error>(())
    }
    .await;
    for gateway in gateways {
        gateway.proc.stop().await;
    }
    floor.stop().await;
    outcome
}
