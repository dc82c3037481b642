//! Many instances on one PostgreSQL, with nothing else between them. Each instance registers
//! in the store's `instances` table and heartbeats its state (`ready`, `full`, `draining`) and
//! load; reads everyone's rows at each heartbeat, which is all [`placement`] needs to send a new
//! call to an instance that takes it; marks an instance that stopped heartbeating as gone (its
//! calls ended as failed, their agent contexts paused and so resumable: see
//! [`crate::store::instances`]), once its own heartbeats have held for a whole stale window
//! ([`liveness`]); and carries admin requests about a call to the instance that holds it over
//! `LISTEN/NOTIFY` ([`bus`]), each with a timeout.
//!
//! The tasks here never touch a call's audio: a slow or absent database delays placement data
//! and admin answers, never a frame.

pub mod bus;
pub mod liveness;
pub mod placement;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;

use self::bus::{Answer, Bus, BusError, Op};
use self::liveness::{Change, Liveness};
use self::placement::Place;
use super::calls::{CallRegistry, Unready};
use crate::config::ClusterConfig;
use crate::store::instances::{Beat, InstanceRow};
use crate::store::{Store, StoreError};

/// Serves a request from another instance with this instance's own calls.
pub type Serve = Arc<dyn Fn(Op) -> BoxFuture<'static, Answer> + Send + Sync>;

/// Who holds a call, as far as the cluster can tell.
#[derive(Clone, Debug, PartialEq)]
pub enum Owner {
    /// The store knows no such call.
    Unknown,
    /// The call has ended (its rows are in the store), for this reason.
    Ended(String),
    /// The store says this instance (the call is not live here: it has just ended).
    Me,
    /// Another instance that heartbeats.
    Alive(InstanceRow),
    /// Another instance that stopped heartbeating or exited.
    Gone {
        id: String,
        holder: Option<InstanceRow>,
    },
}

/// The registry as last read, and the calls placed on others since.
#[derive(Default)]
struct View {
    rows: Vec<InstanceRow>,
    placed: HashMap<String, i64>,
}

/// This instance's membership of the cluster.
pub struct Cluster {
    id: String,
    url: String,
    store: Store,
    bus: Bus,
    calls: CallRegistry,
    cfg: ClusterConfig,
    view: Mutex<View>,
    /// Wakes the heartbeat at once (a drain has started).
    wake: Notify,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Cluster {
    /// Joins: the first heartbeat (registration) is tried at once, then the heartbeat and the
    /// bus listener run in tasks of their own. `store_url` opens the listener's connection.
    pub async fn start(
        id: String,
        url: String,
        store: Store,
        store_url: String,
        calls: CallRegistry,
        cfg: ClusterConfig,
        serve: Serve,
    ) -> Arc<Cluster> {
        let c = Arc::new(Cluster {
            bus: Bus::new(&id, store.clone()),
            id,
            url,
            store,
            calls,
            cfg,
            view: Mutex::new(View::default()),
            wake: Notify::new(),
            tasks: Mutex::new(Vec::new()),
        });
        let mut live = Liveness::new(c.stale_after());
        c.beat(&mut live).await;
        tracing::info!(instance = %c.id, url = %c.url, "joined the cluster");
        let heartbeat = tokio::spawn({
            let c = c.clone();
            async move {
                let every = Duration::from_millis(c.cfg.heartbeat_ms);
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = c.wake.notified() => {}
                    }
                    c.beat(&mut live).await;
                }
            }
        });
        let listener = tokio::spawn(listen(c.clone(), store_url, serve));
        lock(&c.tasks).extend([heartbeat, listener]);
        c
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where this instance is reached.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn stale_after(&self) -> Duration {
        Duration::from_millis(self.cfg.stale_after_ms)
    }

    /// How long a request to another instance may take.
    pub fn command_timeout(&self) -> Duration {
        Duration::from_millis(self.cfg.command_timeout_ms)
    }

    /// The registry as last read (every instance, this one included).
    pub fn instances(&self) -> Vec<InstanceRow> {
        lock(&self.view).rows.clone()
    }

    /// Records the state now rather than at the next heartbeat (a drain has started).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Chooses the instance for a new call (see [`placement::place`]); a call placed elsewhere
    /// counts against that instance until the registry is read again.
    pub fn place(&self) -> Place {
        let here = self.calls.unready().is_none();
        let mut view = lock(&self.view);
        let p = placement::place(
            &self.id,
            here,
            &view.rows,
            self.cfg.stale_after_ms as i64,
            &view.placed,
        );
        if let Place::There { id, .. } = &p {
            *view.placed.entry(id.clone()).or_insert(0) += 1;
        }
        p
    }

    /// One heartbeat: this instance's row, then everyone's, then (when this instance may judge)
    /// the sweep of instances that stopped heartbeating.
    async fn beat(&self, live: &mut Liveness) {
        let state = match self.calls.unready() {
            None => "ready",
            Some(Unready::Full) => "full",
            Some(Unready::Draining) => "draining",
        };
        let beat = Beat {
            id: &self.id,
            url: &self.url,
            capacity: self.calls.max() as i64,
            active_calls: self.calls.active() as i64,
            state,
        };
        let r = self.store.heartbeat(&beat).await;
        let now = Instant::now();
        match live.handle_beat(r.is_ok(), now) {
            Some(Change::Lost) => tracing::warn!(
                instance = %self.id,
                error = %r.as_ref().err().map(ToString::to_string).unwrap_or_default(),
                "heartbeat failed: the store does not answer; calls go on, placement uses the last registry read"
            ),
            Some(Change::Regained(d)) => tracing::info!(
                instance = %self.id,
                outage_ms = d.as_millis() as u64,
                "heartbeat reaches the store again"
            ),
            None => {}
        }
        match r {
            Ok(Some(prev)) if prev == "gone" => tracing::warn!(
                instance = %self.id,
                "this instance had been marked gone (its heartbeats did not reach the store for \
                 cluster.stale_after_ms); registered again, its calls go on"
            ),
            Ok(_) => {}
            Err(_) => return,
        }
        match self.store.instances().await {
            Ok(rows) => {
                let mut view = lock(&self.view);
                view.rows = rows;
                view.placed.clear();
            }
            Err(e) => tracing::debug!(error = %e, "cannot read the registry"),
        }
        if live.may_sweep(now) {
            match self.store.sweep_stale(self.cfg.stale_after_ms as i64).await {
                Ok(swept) => {
                    for s in swept {
                        tracing::warn!(
                            instance = %s.id,
                            calls_ended = s.calls_ended,
                            contexts_paused = s.contexts_paused,
                            "instance stopped heartbeating: marked gone; its calls ended as failed, \
                             their agent contexts paused (resumable)"
                        );
                    }
                }
                Err(e) => tracing::debug!(error = %e, "sweep failed"),
            }
        }
    }

    /// Who holds `call`.
    pub async fn owner(&self, call: &str) -> Result<Owner, StoreError> {
        let Some(o) = self.store.call_owner(call).await? else {
            return Ok(Owner::Unknown);
        };
        if let Some(reason) = o.ended {
            return Ok(Owner::Ended(reason));
        }
        let Some(id) = o.instance else {
            return Ok(Owner::Unknown);
        };
        if id == self.id {
            return Ok(Owner::Me);
        }
        Ok(match o.holder {
            Some(row) if self.alive(&row) => Owner::Alive(row),
            holder => Owner::Gone { id, holder },
        })
    }

    fn alive(&self, row: &InstanceRow) -> bool {
        matches!(row.state.as_str(), "ready" | "full" | "draining")
            && row.heartbeat_age_ms <= self.cfg.stale_after_ms as i64
    }

    /// Asks `instance` and waits for its answer, at most `cluster.command_timeout_ms`.
    pub async fn ask(&self, instance: &str, op: Op) -> Result<Answer, BusError> {
        self.bus.request(instance, op, self.command_timeout()).await
    }

    /// Asks every other instance that heartbeats, at once; their answers (or why none came).
    pub async fn ask_all(&self, op: Op) -> Vec<(String, Result<Answer, BusError>)> {
        let others: Vec<String> = self
            .instances()
            .into_iter()
            .filter(|r| r.id != self.id && self.alive(r))
            .map(|r| r.id)
            .collect();
        let asks = others.iter().map(|id| {
            let op = op.clone();
            async move { (id.clone(), self.ask(id, op).await) }
        });
        futures_util::future::join_all(asks).await
    }

    /// Leaves cleanly at the end of a drain: the heartbeat and the listener stop, and the
    /// registry says `stopped`.
    pub async fn leave(&self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
        match self.store.deregister(&self.id).await {
            Ok(()) => tracing::info!(instance = %self.id, "left the cluster"),
            Err(e) => {
                tracing::warn!(instance = %self.id, error = %e, "could not record leaving the cluster")
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bus listener: a connection of its own, `LISTEN` on this instance's channel, each request
/// served in a task of its own; on any error the connection is dropped and made again.
async fn listen(c: Arc<Cluster>, url: String, serve: Serve) {
    let chan = bus::channel(&c.id);
    let mut down_since: Option<Instant> = None;
    loop {
        let connected = async {
            let mut l = sqlx::postgres::PgListener::connect(&url).await?;
            l.listen(&chan).await?;
            Ok::<_, sqlx::Error>(l)
        }
        .await;
        let mut l = match connected {
            Ok(l) => l,
            Err(e) => {
                if down_since.is_none() {
                    tracing::warn!(error = %StoreError::from(e), "control bus: cannot listen; retrying");
                    down_since = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        if let Some(t) = down_since.take() {
            tracing::info!(
                down_ms = t.elapsed().as_millis() as u64,
                "control bus: listening again"
            );
        }
        loop {
            match l.try_recv().await {
                Ok(Some(n)) => {
                    if let Some(inc) = c.bus.receive(n.payload()) {
                        let (c, serve) = (c.clone(), serve.clone());
                        tokio::spawn(async move {
                            let answer = serve(inc.op.clone()).await;
                            if let Err(e) = c.bus.answer(&inc, &answer).await {
                                tracing::warn!(to = %inc.from, error = %e, "control bus: cannot answer");
                            }
                        });
                    }
                }
                // The connection was lost (requests sent meanwhile time out at their sender).
                Ok(None) => {
                    down_since.get_or_insert_with(Instant::now);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %StoreError::from(e), "control bus: connection lost; reconnecting");
                    down_since.get_or_insert_with(Instant::now);
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
