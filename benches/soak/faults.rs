//! The fault schedule: one fault at a time at an even pace through the
//! load, round after round of the same list, each logged with its time.
//! Replica 0 is never killed, so its whole run shows how memory and
//! descriptors trend; replica 1 is killed and started again.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt as _;

use crate::ledger::Ledger;
use crate::record::Fault;
use crate::rig::{Peer, Rig, signal};
use crate::sample::child_pids;

/// Connections a flood opens to a replica.
const FLOOD: usize = 300;

#[derive(Debug, Clone, Copy)]
enum Step {
    KillChild(usize),
    RestartPeer(Peer),
    AddUpstream,
    KillReplica,
    RestartRedis,
    Flood,
    RemoveUpstream,
    Stall(usize),
}

const ROUND: [Step; 11] = [
    Step::KillChild(0),
    Step::RestartPeer(Peer::Web),
    Step::AddUpstream,
    Step::KillReplica,
    Step::RestartRedis,
    Step::Flood,
    Step::RemoveUpstream,
    Step::Stall(0),
    Step::RestartPeer(Peer::Legacy),
    Step::KillChild(1),
    Step::RestartPeer(Peer::Py),
];

/// Injects faults until `until`, leaving the last quarter minute quiet.
pub async fn run(
    rig: Arc<tokio::sync::Mutex<Rig>>,
    ledger: Arc<Ledger>,
    until: Instant,
    faults: Arc<Mutex<Vec<Fault>>>,
) {
    let total = until.saturating_duration_since(Instant::now());
    let pace =
        (total / (ROUND.len() as u32 + 1)).clamp(Duration::from_secs(8), Duration::from_secs(30));
    let mut steps = ROUND.iter().cycle();
    let mut log = |what: String| {
        faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Fault {
                at_s: ledger.now(),
                what,
            });
    };
    loop {
        tokio::time::sleep(pace).await;
        if Instant::now() + Duration::from_secs(15) >= until {
            break;
        }
        let Some(step) = steps.next() else { break };
        let mut rig = rig.lock().await;
        if let Err(e) = inject(&mut rig, *step, &mut log).await {
            log(format!("{step:?} could not be injected: {e}"));
        }
    }
    // The run ends on the config it started with, so the idle counts compare.
    let mut rig = rig.lock().await;
    if rig.extra
        && let Err(e) = inject(&mut rig, Step::RemoveUpstream, &mut log).await
    {
        log(format!("the config could not be restored: {e}"));
    }
}

async fn inject(rig: &mut Rig, step: Step, log: &mut impl FnMut(String)) -> crate::Res<()> {
    match step {
        Step::KillChild(slot) => {
            let pid = rig
                .replica_pid(slot)
                .ok_or_else(|| crate::fail("replica down"))?;
            let child = child_pids(pid, "fx.record")
                .into_iter()
                .next()
                .ok_or_else(|| crate::fail("no fx child"))?;
            log(format!(
                "stdio upstream fx of replica {slot} killed (SIGKILL)"
            ));
            signal(child, "-KILL")?;
        }
        Step::RestartPeer(peer) => {
            log(format!(
                "HTTP upstream {peer:?} stopped and started again (new sessions)"
            ));
            rig.restart_peer(peer).await?;
        }
        Step::AddUpstream | Step::RemoveUpstream => {
            rig.extra = matches!(step, Step::AddUpstream);
            rig.write_config()?;
            rig.reload()?;
            log(format!(
                "config reloaded: upstream extra {}",
                if rig.extra { "added" } else { "removed" }
            ));
        }
        Step::KillReplica => {
            log("replica 1 killed (SIGKILL)".into());
            rig.kill_replica(1).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            rig.start_replica(1).await?;
            log("replica 1 started again".into());
        }
        Step::RestartRedis => {
            log("Redis killed and started again, empty".into());
            rig.restart_redis().await?;
        }
        Step::Flood => {
            log(format!(
                "connection flood: {FLOOD} connections to replica 0, idle or sending half a request"
            ));
            flood(&rig.replica_base(0)).await;
        }
        Step::Stall(slot) => {
            log(format!(
                "stdio upstream fy of replica {slot} stalled (stops reading)"
            ));
            stall(&rig.replica_base(slot)).await?;
        }
    }
    Ok(())
}

/// Opens [`FLOOD`] connections, half of them sending an unfinished
/// request, holds them two seconds, then drops them all.
async fn flood(base: &str) {
    let addr = base.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for i in 0..FLOOD {
        if let Ok(mut stream) = tokio::net::TcpStream::connect(&addr).await {
            if i % 2 == 0 {
                let _ = stream
                    .write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Le")
                    .await;
            }
            held.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(held);
}

/// Tells `fy` of the replica at `base` to stop reading its input, by a
/// stateless call straight to that replica.
async fn stall(base: &str) -> crate::Res<()> {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "fy__stall", "arguments": {},
        "_meta": crate::wire::modern_meta() } });
    let answer = crate::wire::post(
        &reqwest::Client::new(),
        &format!("{base}/mcp"),
        None,
        Some(("tools/call", Some("fy__stall"))),
        body.to_string(),
    )
    .await
    .map_err(|e| crate::fail(format!("{e:?}")))?;
    match answer.status {
        200 => Ok(()),
        s => Err(crate::fail(format!("fy__stall answered HTTP {s}"))),
    }
}
