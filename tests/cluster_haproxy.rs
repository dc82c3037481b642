//! Three `baton serve` processes on one PostgreSQL (a server of the test's own, from
//! `scripts/postgres.sh`) behind HAProxy, on loopback, in one run:
//!
//! 1. 150 Twilio-protocol calls through HAProxy, spread over the instances; one instance is
//!    SIGTERMed mid-load and started again (a rolling restart): 0 calls fail, and no call
//!    reaches it while it drains.
//! 2. Admin commands sent to instance A about a call on instance B (activate, deactivate, hang
//!    up, reads, the cluster-wide `GET /calls`) take effect; `/twiml` on a draining instance
//!    places the call elsewhere.
//! 3. Instance B killed with SIGKILL: the others mark it gone within the stale window, its call
//!    is ended as failed in the store, commands about it fail with a clear error, and its
//!    caller's agent context resumes when they call again, on another instance.
//! 4. PostgreSQL restarted mid-load: the calls go on, and once it is back every call's writes
//!    are in the store, the registry is fresh and the control bus answers again.
//!
//! A short call (about 4 s) keeps the run well under two minutes on two cores.

use crate::cluster_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton::leg::twilio::caller::{self, CallerEnd, CallerReport};
use cluster_support::{
    Haproxy, Instance, Postgres, ROOT, Scratch, get, have, post, short_caller, until, until_seen,
};
use serde_json::Value;

const HEARTBEAT_MS: u64 = 300;
const STALE_MS: u64 = 1500;

fn config(dir: &Path, name: &str, pg: &str, front: u16) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout_s = 20\n\
             [model]\nbackend = \"mock\"\n\
             [agents]\nset = \"{ROOT}/config/agents/router.toml\"\n\
             [store]\nurl = \"{pg}\"\n\
             [cluster]\ninstance_id = \"{name}\"\nadvertise_url = \"http://127.0.0.1:{front}/i/{name}\"\n\
             heartbeat_ms = {HEARTBEAT_MS}\nstale_after_ms = {STALE_MS}\ncommand_timeout_ms = 1500\n\
             [limits]\nmax_calls = 120\n"
        ),
    )
    .unwrap();
    path
}

/// A call that failed: it could not start, did not end with the caller's hang-up, or the
/// agent never answered.
fn failed(r: &Result<CallerReport, caller::CallerError>) -> Option<String> {
    match r {
        Err(e) => Some(e.to_string()),
        Ok(r) if !matches!(r.end, CallerEnd::HungUp) => Some(format!("{:?}", r.end)),
        Ok(r) if r.played_ms == 0 => Some("the agent never answered".into()),
        Ok(_) => None,
    }
}

/// `n` short calls through `front`, one every `gap`, the `i`-th started at `gap × i`.
fn launch(
    rt: &tokio::runtime::Runtime,
    front: SocketAddr,
    tag: &str,
    n: usize,
    gap: Duration,
) -> Vec<tokio::task::JoinHandle<Result<CallerReport, caller::CallerError>>> {
    (0..n)
        .map(|i| {
            let url = format!("ws://{front}/twilio");
            let opts = short_caller(&format!("{tag}-{i}"), 1000, 4000, Duration::from_secs(5));
            rt.spawn(async move {
                tokio::time::sleep(gap * i as u32).await;
                caller::dial(&url, opts).await
            })
        })
        .collect()
}

/// A long call from `from` placed on `instance` through its own path on HAProxy.
fn long_call(
    rt: &tokio::runtime::Runtime,
    front: SocketAddr,
    instance: &str,
    from: &str,
    secs: usize,
) -> tokio::task::JoinHandle<Result<CallerReport, caller::CallerError>> {
    let url = format!("ws://{front}/i/{instance}/twilio");
    let mut opts = short_caller(from, 1400, secs * 1000, Duration::from_secs(secs as u64));
    opts.custom_parameters.insert("From".into(), from.into());
    rt.spawn(async move { caller::dial(&url, opts).await })
}

/// The id of the running call from `from`, as instance `ask` lists the cluster's calls.
fn running_call(ask: SocketAddr, from: &str) -> (String, String) {
    until(
        &format!("the call from {from}"),
        Duration::from_secs(15),
        || {
            let v = get(ask, "/admin/calls")?.json();
            v["calls"].as_array()?.iter().find_map(|c| {
                (c["caller"] == from && c["agent_set"].is_string()).then(|| {
                    (
                        c["id"].as_str().unwrap_or("").to_owned(),
                        c["instance"].as_str().unwrap_or("").to_owned(),
                    )
                })
            })
        },
    )
}

fn contexts(ask: SocketAddr, caller: &str) -> Vec<Value> {
    get(
        ask,
        &format!("/admin/callers/{}/contexts", caller.replace('+', "%2B")),
    )
    .map(|r| r.json()["contexts"].as_array().cloned().unwrap_or_default())
    .unwrap_or_default()
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn three_instances_behind_haproxy_on_one_postgres() {
    let test = "three_instances_behind_haproxy_on_one_postgres";
    // PostgreSQL comes from scripts/postgres.sh, which installs it when missing.
    if !have("haproxy", test) {
        return;
    }
    let started = Instant::now();
    let dir = Scratch::new("cluster");
    let pg = Postgres::start();
    let front_port = cluster_support::free_port();
    let names = ["b1", "b2", "b3"];
    let mut inst: Vec<Instance> = names
        .iter()
        .map(|n| {
            Instance::spawn(
                n,
                &config(&dir.0, n, &pg.url, front_port),
                "127.0.0.1:0",
                &dir.0.join(format!("{n}.log")),
            )
        })
        .collect();
    let backends: Vec<(String, SocketAddr)> =
        inst.iter().map(|i| (i.name.clone(), i.addr)).collect();
    let lb = Haproxy::start(&dir.0, front_port, &backends);
    let front = lb.addr;
    let (a1, a2, a3) = (inst[0].addr, inst[1].addr, inst[2].addr);
    // Everyone sees everyone.
    until(
        "three ready instances in the registry",
        Duration::from_secs(10),
        || {
            let v = get(a1, "/admin/instances")?.json();
            let ready = v["instances"]
                .as_array()?
                .iter()
                .filter(|i| i["state"] == "ready")
                .count();
            (ready == 3).then_some(())
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let db = rt.block_on(async {
        sqlx::any::install_default_drivers();
        sqlx::AnyPool::connect(&pg.url).await.unwrap()
    });
    let count = |sql: &str| -> i64 {
        rt.block_on(async {
            let row: (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()))
                .fetch_one(&db)
                .await
                .unwrap_or((-1,));
            row.0
        })
    };
    let now_ms = baton::store::now_ms;

    // 1. 150 calls, one instance SIGTERMed mid-load and started again.
    let t1 = now_ms();
    let calls = launch(&rt, front, "load", 150, Duration::from_millis(80));
    // Mid-load: once b3 holds calls of its own. HAProxy spreads the calls evenly, and a short
    // call lasts ~2 s here, so each instance holds about nine at a time: ask for five, not for
    // the mean. A failure says what each instance held.
    let active = |a| get(a, "/healthz").and_then(|r| r.json()["active_calls"].as_u64());
    let mut held = Vec::new();
    until_seen("b3 to hold five calls", Duration::from_secs(15), || {
        let now = [active(a1), active(a2), active(a3)];
        if now[2].is_some_and(|n| n >= 5) {
            return Ok(());
        }
        held.push(now);
        let last = &held[held.len().saturating_sub(20)..];
        Err(format!("active calls on b1, b2, b3, last polls: {last:?}"))
    });
    inst[2].terminate();
    let term_at = now_ms();
    let status = inst[2]
        .wait_exit(Duration::from_secs(25))
        .expect("the drained instance exits");
    assert!(status.success(), "{status:?}\n{}", inst[2].log_text());
    let exited_at = now_ms();
    // Started again where HAProxy expects it, under the same name.
    inst[2] = Instance::spawn(
        "b3",
        &config(&dir.0, "b3", &pg.url, front_port),
        &a3.to_string(),
        &dir.0.join("b3-again.log"),
    );
    let back_at = now_ms();
    let reports: Vec<_> = calls.into_iter().map(|c| rt.block_on(c).unwrap()).collect();
    let failures: Vec<String> = reports.iter().filter_map(failed).collect();
    assert!(
        failures.is_empty(),
        "{} of 150 calls failed: {failures:?}\nHAProxy's log:\n{}",
        failures.len(),
        std::fs::read_to_string(&lb.log).unwrap_or_default()
    );
    let mut jitter: Vec<f64> = reports
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .flat_map(|r| {
            r.intervals_us
                .iter()
                .map(|&u| (f64::from(u) / 1000.0 - 20.0).abs())
        })
        .collect();
    // Every call's writes are in the store, and the calls were spread.
    until(
        "150 ended calls in the store",
        Duration::from_secs(15),
        || {
            let n = count(&format!(
                "SELECT COUNT(*) FROM calls WHERE started_at >= {t1} AND ended_at IS NOT NULL"
            ));
            (n == 150).then_some(())
        },
    );
    for n in names {
        let got = count(&format!(
            "SELECT COUNT(*) FROM calls WHERE started_at >= {t1} AND instance_id = '{n}'"
        ));
        assert!(got >= 10, "instance {n} took {got} of the 150 calls");
    }
    let during_drain = count(&format!(
        "SELECT COUNT(*) FROM calls WHERE instance_id = 'b3' AND started_at > {} AND started_at < {back_at}",
        term_at + 500
    ));
    assert_eq!(during_drain, 0, "no call reached the draining instance");
    let mut late: Vec<f64> = reports
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .flat_map(|r| r.tick_late_us.iter().map(|&u| f64::from(u) / 1000.0))
        .collect();
    eprintln!(
        "rolling restart: 150 calls, 0 failed; b3 drained in {} ms; agent audio interval \
         deviation from 20 ms at the callers p50 {:.2} ms, p99 {:.2} ms (the callers' own tick \
         lateness p99 {:.2} ms)",
        exited_at - term_at,
        percentile(&mut jitter, 0.5),
        percentile(&mut jitter, 0.99),
        percentile(&mut late, 0.99),
    );

    // 2. Commands sent to b1 about a call held by b2.
    let a3 = inst[2].addr;
    until("b3 ready again", Duration::from_secs(10), || {
        (get(a3, "/readyz")?.status == 200).then_some(())
    });
    let x = long_call(&rt, front, "b2", "+4511000001", 12);
    let (xid, held) = running_call(a1, "+4511000001");
    assert_eq!(held, "b2", "the call went where its path said");
    let listed: Value = get(a1, "/calls").unwrap().json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == xid.as_str() && c["instance"] == "b2"),
        "GET /calls lists the cluster's calls: {listed}"
    );
    let mut latencies = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let r = get(a1, &format!("/admin/calls/{xid}")).unwrap();
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["instance"], "b2");
    }
    let r = operator(
        a1,
        &format!("/admin/calls/{xid}/agents/vehicle_offer/activate"),
    );
    assert_eq!(r.json()["instance"], "b2");
    until("the activation on b2", Duration::from_secs(10), || {
        let v = get(a1, &format!("/admin/calls/{xid}/history"))?.json();
        v["active_agents"]
            .as_array()?
            .iter()
            .any(|a| a == "vehicle_offer")
            .then_some(())
    });
    let r = operator(
        a1,
        &format!("/admin/calls/{xid}/agents/vehicle_offer/deactivate"),
    );
    assert_eq!(r.json()["instance"], "b2");
    until_seen("the deactivation on b2", Duration::from_secs(10), || {
        let v = get(a1, &format!("/admin/calls/{xid}/history"))
            .ok_or("no answer")?
            .json();
        (v["active_agents"] == serde_json::json!(["general"]))
            .then_some(())
            .ok_or_else(|| v.to_string())
    });
    let ev = get(a3, &format!("/admin/calls/{xid}/events")).unwrap();
    assert_eq!(ev.status, 200);
    assert!(ev.body.contains("agent_start"), "{}", ev.body);
    // The live event stream, asked of b3, which does not hold the call: relayed from b2.
    let relayed = rt.block_on(async {
        use futures_util::StreamExt;
        use tokio_tungstenite::tungstenite::Message;
        let url = format!("ws://{a3}/calls/{xid}/events");
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => got.push(t.to_string()),
                Ok(Some(Ok(_))) => {}
                other => panic!("the stream from b2 was not relayed: {other:?} after {got:?}"),
            }
        }
        got
    });
    assert!(relayed[0].contains("call_start"), "{relayed:?}");
    assert!(relayed[1].contains("agent_start"), "{relayed:?}");
    // A plain GET there says where the call is held.
    let r = get(a3, &format!("/calls/{xid}/events")).unwrap();
    assert_eq!(r.status, 421, "{}", r.body);
    assert!(r.body.contains("b2"), "{}", r.body);
    let r = post(a1, &format!("/admin/calls/{xid}/hangup")).unwrap();
    assert_eq!(r.status, 202, "{}", r.body);
    let report = rt.block_on(x).unwrap().unwrap();
    assert!(
        matches!(report.end, CallerEnd::ServerClosed { .. }),
        "{:?}",
        report.end
    );
    until(
        "the operator's hang-up in the store",
        Duration::from_secs(10),
        || {
            let v = get(a1, &format!("/admin/calls/{xid}"))?.json();
            (v["call"]["end_reason"] == "hung up by an operator").then_some(())
        },
    );
    // /twiml on a draining instance points the call at another one (checked on b3, drained by
    // the admin API while a call keeps it up, then started again).
    let v = long_call(&rt, front, "b3", "+4511000004", 20);
    let (vid, _) = running_call(a1, "+4511000004");
    let r = post(a3, "/admin/drain").unwrap();
    assert_eq!(r.status, 202);
    let twiml = until("b3's drain in the registry", Duration::from_secs(5), || {
        let r = get(a3, "/twiml")?;
        (r.status == 200 && !r.body.contains("/i/b3/")).then_some(r.body)
    });
    assert!(
        twiml.contains(&format!("ws://127.0.0.1:{front_port}/i/b")),
        "{twiml}"
    );
    // Placement as the webhook sees it: a ready instance answers with itself, a draining one
    // with another (both from the registry in memory, no database on the way).
    let mut here = Vec::new();
    let mut elsewhere = Vec::new();
    for _ in 0..200 {
        for (addr, into) in [(a1, &mut here), (a3, &mut elsewhere)] {
            let t = Instant::now();
            let r = get(addr, "/twiml").unwrap();
            into.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(r.status, 200);
        }
    }
    eprintln!(
        "placement (GET /twiml round trip): here p50 {:.2} ms, p99 {:.2} ms; from a draining \
         instance p50 {:.2} ms, p99 {:.2} ms",
        percentile(&mut here, 0.5),
        percentile(&mut here, 0.99),
        percentile(&mut elsewhere, 0.5),
        percentile(&mut elsewhere, 0.99),
    );
    // WHIP on the draining instance: a redirect to one that will hold the call.
    let sdp = [("Content-Type", "application/sdp")];
    let offer = cluster_support::OFFER.as_bytes();
    let r = cluster_support::request(a3, "POST", "/whip", &sdp, offer).unwrap();
    assert_eq!(r.status, 307, "{r:?}");
    let to = r.header("location").unwrap();
    assert!(
        to.starts_with(&format!("http://127.0.0.1:{front_port}/i/b")) && to.ends_with("/whip"),
        "{to}"
    );
    // A WHIP session answered by b1 is hung up through b2.
    let r = cluster_support::request(a1, "POST", "/whip", &sdp, offer).unwrap();
    assert_eq!(r.status, 201, "{r:?}");
    let session = r.header("location").unwrap();
    let r = cluster_support::request(a2, "DELETE", &session, &[], b"").unwrap();
    assert_eq!((r.status, r.body.trim()), (200, "hung up"), "{r:?}");
    // Once the call has ended, the session is gone everywhere.
    until("the WHIP session to end", Duration::from_secs(10), || {
        let r = cluster_support::request(a2, "DELETE", &session, &[], b"")?;
        (r.status == 404).then_some(())
    });
    assert_eq!(
        post(a1, &format!("/admin/calls/{vid}/hangup"))
            .unwrap()
            .status,
        202
    );
    let _ = rt.block_on(v);
    assert!(
        inst[2]
            .wait_exit(Duration::from_secs(15))
            .is_some_and(|s| s.success())
    );
    inst[2] = Instance::spawn(
        "b3",
        &config(&dir.0, "b3", &pg.url, front_port),
        &a3.to_string(),
        &dir.0.join("b3-third.log"),
    );
    let mut lat = latencies.clone();
    eprintln!(
        "cross-instance GET /admin/calls/{{id}}: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&mut lat, 0.5),
        percentile(&mut lat, 0.99)
    );

    // 3. b2 dies mid-call; its caller's context resumes on another instance.
    let y = long_call(&rt, front, "b2", "+4511000002", 30);
    let (yid, _) = running_call(a1, "+4511000002");
    operator(
        a1,
        &format!("/admin/calls/{yid}/agents/vehicle_offer/activate"),
    );
    let ctx = until(
        "the caller's active context",
        Duration::from_secs(10),
        || {
            contexts(a1, "+4511000002")
                .into_iter()
                .find(|c| c["agent"] == "vehicle_offer" && c["status"] == "active")
        },
    );
    let ctx_id = ctx["id"].as_str().unwrap().to_owned();
    assert_eq!(ctx["activation_call_id"], yid.as_str());
    inst[1].kill();
    let killed = Instant::now();
    // Right away the command cannot reach b2: a timeout naming it, or "gone" once swept.
    let r = post(a1, &format!("/admin/calls/{yid}/agents/general/activate")).unwrap();
    assert!(matches!(r.status, 504 | 410), "{r:?}");
    until("b2 marked gone", Duration::from_secs(10), || {
        let v = get(a1, "/admin/instances")?.json();
        v["instances"]
            .as_array()?
            .iter()
            .any(|i| i["id"] == "b2" && i["state"] == "gone")
            .then_some(())
    });
    let gone_after = killed.elapsed();
    assert!(
        gone_after < Duration::from_millis(STALE_MS + 2 * HEARTBEAT_MS + 2000),
        "b2 was marked gone {gone_after:?} after it died"
    );
    for command in [
        "hangup",
        "agents/vehicle_offer/activate",
        "agents/vehicle_offer/deactivate",
    ] {
        let r = post(a1, &format!("/admin/calls/{yid}/{command}")).unwrap();
        assert_eq!(r.status, 410, "{command}: {r:?}");
        let err = r.json()["error"].as_str().unwrap_or("").to_owned();
        assert!(
            err.contains("b2") && err.contains("instance failed"),
            "{command}: {err}"
        );
    }
    let v = get(a1, &format!("/admin/calls/{yid}")).unwrap().json();
    assert_eq!(
        v["call"]["end_reason"], "instance failed: b2 stopped heartbeating",
        "{v}"
    );
    let c = get(a1, &format!("/admin/contexts/{ctx_id}"))
        .unwrap()
        .json();
    assert_eq!(c["status"], "paused", "resumable: {c}");
    let dead = rt.block_on(y).unwrap();
    assert!(!matches!(dead.map(|r| r.end), Ok(CallerEnd::HungUp)));
    // The caller calls again; HAProxy sends them to a live instance, where the specialist
    // resumes the same context.
    let url = format!("ws://{front}/twilio");
    let mut opts = short_caller("again", 1400, 20_000, Duration::from_secs(20));
    opts.custom_parameters
        .insert("From".into(), "+4511000002".into());
    let again = rt.spawn(async move { caller::dial(&url, opts).await });
    let (zid, zon) = running_call(a1, "+4511000002");
    assert_ne!(zon, "b2");
    operator(
        a1,
        &format!("/admin/calls/{zid}/agents/vehicle_offer/activate"),
    );
    until(
        "the context resumed on the new call",
        Duration::from_secs(10),
        || {
            let c = get(a1, &format!("/admin/contexts/{ctx_id}"))?.json();
            (c["status"] == "active" && c["activation_call_id"] == zid.as_str()).then_some(())
        },
    );
    assert_eq!(
        post(a1, &format!("/admin/calls/{zid}/hangup"))
            .unwrap()
            .status,
        202
    );
    let _ = rt.block_on(again);
    eprintln!("SIGKILL: b2 marked gone after {gone_after:?}; the context resumed on {zon}");

    // 4. PostgreSQL restarted while calls run.
    until("b3 ready", Duration::from_secs(10), || {
        (get(inst[2].addr, "/readyz")?.status == 200).then_some(())
    });
    let t4 = now_ms();
    let calls = launch(&rt, front, "pg", 40, Duration::from_millis(80));
    // While calls run: once the instances hold five between them; down for two seconds.
    until("five running calls", Duration::from_secs(15), || {
        let running: u64 = inst
            .iter()
            .filter_map(|i| get(i.addr, "/healthz")?.json()["active_calls"].as_u64())
            .sum();
        (running >= 5).then_some(())
    });
    pg.stop();
    // The outage itself: two seconds without the database.
    std::thread::sleep(Duration::from_secs(2));
    pg.start_again();
    let reports: Vec<_> = calls.into_iter().map(|c| rt.block_on(c).unwrap()).collect();
    let failures: Vec<String> = reports.iter().filter_map(failed).collect();
    assert!(
        failures.is_empty(),
        "calls failed across the restart: {failures:?}"
    );
    let db = rt.block_on(async { sqlx::AnyPool::connect(&pg.url).await.unwrap() });
    let count = |sql: &str| -> i64 {
        rt.block_on(async {
            let row: (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()))
                .fetch_one(&db)
                .await
                .unwrap_or((-1,));
            row.0
        })
    };
    until(
        "every call of the restart in the store",
        Duration::from_secs(30),
        || {
            let n = count(&format!(
                "SELECT COUNT(*) FROM calls WHERE started_at >= {t4} AND ended_at IS NOT NULL \
             AND caller IS NULL"
            ));
            (n == 40).then_some(())
        },
    );
    until("a fresh registry", Duration::from_secs(10), || {
        let v = get(a1, "/admin/instances")?.json();
        let fresh = v["instances"]
            .as_array()?
            .iter()
            .filter(|i| i["state"] == "ready" && i["heartbeat_age_ms"].as_i64() < Some(1000))
            .count();
        (fresh == 2).then_some(())
    });
    // The bus answers again: b1 asks b3 about a call b3 holds.
    let w = long_call(&rt, front, "b3", "+4511000003", 6);
    let (wid, won) = running_call(a1, "+4511000003");
    assert_eq!(won, "b3");
    let r = get(a1, &format!("/admin/calls/{wid}")).unwrap();
    assert_eq!(
        (r.status, &r.json()["instance"]),
        (200, &"b3".into()),
        "{}",
        r.body
    );
    assert_eq!(
        post(a1, &format!("/admin/calls/{wid}/hangup"))
            .unwrap()
            .status,
        202
    );
    let _ = rt.block_on(w);
    for i in [&inst[0], &inst[2]] {
        let log = i.log_text();
        assert!(!log.contains("store write failed"), "{}: {log}", i.name);
    }
    eprintln!("whole run: {:?}", started.elapsed());
}

/// An operator's handoff command, accepted (202). One asked while another handoff is still
/// carried out is refused (409 "not now"); it is asked again, as an operator would.
fn operator(addr: SocketAddr, path: &str) -> cluster_support::Reply {
    until_seen(path, Duration::from_secs(10), || {
        let r = post(addr, path).ok_or("no answer")?;
        match r.status {
            202 => Ok(r),
            409 if r.body.contains("not now") => Err(r.body),
            _ => panic!("{path}: {} {}", r.status, r.body),
        }
    })
}
