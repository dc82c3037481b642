//! The daemon's shards: one thread per core, each running a current-thread runtime. A call's
//! connection (HTTP/WebSocket or AudioSocket) is handed to the shard with the fewest live tasks,
//! and every task the call spawns (leg, call loop, model session) then runs on that one thread:
//! a frame's wake-ups never cross a core, no task is stolen mid-frame, and a wake-up costs no
//! futex. Every HTTP connection is placed this way, the admin API's and `/metrics`' too (their
//! handlers do not block); the daemon's background work (store writer, cluster, MCP sessions,
//! upkeep) and SIP stay on the multi-thread runtime.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle as ThreadHandle;

use super::RUNTIME_CLOSE_WAIT;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::{Handle, RuntimeMetrics};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The shards of one daemon. Dropping it stops them (tasks still running are dropped).
pub struct Shards {
    shards: Vec<Shard>,
}

struct Shard {
    handle: Handle,
    metrics: RuntimeMetrics,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<ThreadHandle<()>>,
}

impl Shards {
    /// Starts `count` shards (0: one per core the process may use).
    pub fn start(count: usize) -> io::Result<Shards> {
        let count = if count == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            count
        };
        let mut shards = Vec::with_capacity(count);
        for i in 0..count {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = rt.handle().clone();
            let metrics = handle.metrics();
            let (stop, stopped) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("baton-shard-{i}"))
                .spawn(move || {
                    rt.block_on(async {
                        let _ = stopped.await;
                    });
                    // Dropping the runtime drops its tasks first (a call still alive lets go
                    // of its recording), then waits for its blocking work (that recording's
                    // last write): on a thread of its own, so the stop waits a bounded moment.
                    let (dropped, done) = std::sync::mpsc::channel();
                    let _ = std::thread::Builder::new()
                        .name(format!("baton-shard-{i}-close"))
                        .spawn(move || {
                            drop(rt);
                            let _ = dropped.send(());
                        });
                    let _ = done.recv_timeout(RUNTIME_CLOSE_WAIT);
                })?;
            shards.push(Shard {
                handle,
                metrics,
                stop: Some(stop),
                thread: Some(thread),
            });
        }
        Ok(Shards { shards })
    }

    /// How many shards run.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Never empty: [`Shards::start`] makes at least one.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// The shard with the fewest live tasks (a call is a handful of tasks, so this places
    /// calls on the least-loaded shard).
    fn least_loaded(&self) -> &Shard {
        self.shards
            .iter()
            .min_by_key(|s| s.metrics.num_alive_tasks())
            .unwrap_or_else(|| unreachable!("Shards::start makes at least one shard"))
    }

    /// Runs `fut` on the least-loaded shard; what it spawns stays on that shard.
    pub fn spawn<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.least_loaded().handle.spawn(fut)
    }

    /// Live tasks per shard, in shard order (for `/metrics` and tests).
    pub fn load(&self) -> Vec<usize> {
        self.shards
            .iter()
            .map(|s| s.metrics.num_alive_tasks())
            .collect()
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        for s in &mut self.shards {
            if let Some(stop) = s.stop.take() {
                let _ = stop.send(());
            }
        }
        for s in &mut self.shards {
            if let Some(t) = s.thread.take()
                // A shard dropped from inside itself cannot wait for its own thread.
                && t.thread().id() != std::thread::current().id()
            {
                let _ = t.join();
            }
        }
    }
}

/// Moves an accepted socket to a shard: it leaves this runtime's reactor and joins the
/// shard's, so its readiness wakes the shard's thread directly.
pub fn hand_over<F, Fut>(shards: &Shards, tcp: TcpStream, serve: F) -> io::Result<()>
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let std = tcp.into_std()?;
    shards.spawn(async move {
        match TcpStream::from_std(std) {
            Ok(tcp) => serve(tcp).await,
            Err(e) => tracing::warn!(error = %e, "cannot move a connection to its shard"),
        }
    });
    Ok(())
}

/// Serves HTTP (and the WebSocket upgrades of calls) on `listener` until `stop` is cancelled;
/// each connection runs on the least-loaded shard. Connections open at `stop` are asked to
/// close once their request in flight is answered; upgraded connections (calls) are not
/// affected, the drain ends them.
pub async fn serve_http(
    listener: TcpListener,
    router: Router,
    shards: Arc<Shards>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors and the like: try again shortly, never spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        // Every 20 ms frame goes out at once: without TCP_NODELAY each waits for the previous
        // one's delayed ACK and reaches the caller ~40 ms late.
        let _ = tcp.set_nodelay(true);
        let router = router.clone();
        let stop = stop.clone();
        if let Err(e) = hand_over(&shards, tcp, move |tcp| serve_connection(tcp, router, stop)) {
            tracing::warn!(error = %e, "cannot move a connection to a shard; dropped");
        }
    }
}

async fn serve_connection(tcp: TcpStream, router: Router, stop: CancellationToken) {
    let service = TowerToHyperService::new(router);
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::trace!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_go_to_the_least_loaded_shard_and_stay_there() {
        let shards = Shards::start(2).unwrap();
        assert_eq!(shards.len(), 2);
        let (hold, held) = std::sync::mpsc::channel::<std::thread::ThreadId>();
        let (release_tx, release_rx) = tokio::sync::watch::channel(false);
        // Two long tasks land on different shards: the second finds the first shard busier.
        for _ in 0..2 {
            let hold = hold.clone();
            let mut release = release_rx.clone();
            shards.spawn(async move {
                let _ = hold.send(std::thread::current().id());
                let _ = release.wait_for(|r| *r).await;
            });
            // Let the task start (and count as alive) before the next placement.
            held.recv_timeout(std::time::Duration::from_secs(5))
                .unwrap();
        }
        assert_eq!(shards.load(), vec![1, 1], "one task per shard");
        // A task spawned from a shard runs on that shard's thread.
        let (tx, rx) = std::sync::mpsc::channel();
        shards.spawn(async move {
            let outer = std::thread::current().id();
            let inner = tokio::spawn(async { std::thread::current().id() })
                .await
                .unwrap();
            let _ = tx.send((outer, inner));
        });
        let (outer, inner) = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        assert_eq!(outer, inner);
        let _ = release_tx.send(true);
        drop(shards);
    }
}
