//! A source the call's loop polls only when it may have moved: its own waker fired, the call
//! gave it something to write, or its last poll found something (more may be buffered). A pass
//! woken by the playout tick, or by a caller frame that sends nothing yet (it completes no
//! uplink chunk), then leaves the model sockets alone instead of reading each of them to find
//! nothing (a read buffer prepared, wakers registered again, a timer looked at); a frame that
//! goes out opens the gate, and its pass writes it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// What the source's waker reaches: the flag the loop looks at, then the call's task.
#[derive(Debug)]
struct Flag {
    ready: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// The gate in front of one source (or of a set polled together).
#[derive(Debug)]
pub struct Gate {
    flag: Arc<Flag>,
    /// Given to the source when it is polled: what it registers (sockets, timers) wakes this
    /// gate, which wakes the call's task.
    waker: Waker,
}

impl Default for Gate {
    /// Open: the first poll goes through, and the source registers its wakers.
    fn default() -> Self {
        let flag = Arc::new(Flag {
            ready: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(flag.clone());
        Gate { flag, waker }
    }
}

impl Gate {
    /// Polls the source with `poll` if it may have moved since it was last found waiting;
    /// otherwise `Pending` (the source's waker, or [`Gate::open`], brings the task back).
    pub fn poll<T>(
        &self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        // The task's waker is in place before the flag is read: a wake between the two still
        // finds it.
        self.flag.task.register(cx.waker());
        if !self.flag.ready.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let r = poll(&mut Context::from_waker(&self.waker));
        if r.is_ready() {
            // What it has not said yet may already be read (no new wake would tell).
            self.open();
        }
        r
    }

    /// The call gave the source something to do (a frame to write, a session to start
    /// reading): the next poll goes through.
    pub fn open(&self) {
        self.flag.ready.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A source that counts its polls and keeps the waker it was given, like a socket.
    #[derive(Default)]
    struct Source {
        polls: usize,
        waker: Option<Waker>,
        queued: Vec<u32>,
    }

    impl Source {
        fn poll(&mut self, cx: &mut Context<'_>) -> Poll<u32> {
            self.polls += 1;
            match self.queued.pop() {
                Some(v) => Poll::Ready(v),
                None => {
                    self.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        }

        fn arrive(&mut self, v: u32) {
            self.queued.insert(0, v);
            if let Some(w) = self.waker.take() {
                w.wake();
            }
        }
    }

    /// The call's task (counting its wakes), its waker, a gate and a source behind it.
    fn rig() -> (Arc<Count>, Waker, Gate, Source) {
        let task = Arc::new(Count::default());
        let waker = Waker::from(task.clone());
        (task, waker, Gate::default(), Source::default())
    }

    #[test]
    fn a_source_is_polled_again_only_once_it_wakes_or_is_opened() {
        let (task, waker, gate, mut src) = rig();
        let mut cx = Context::from_waker(&waker);

        // Open at first: polled, finds nothing, registers.
        assert!(gate.poll(&mut cx, |c| src.poll(c)).is_pending());
        assert_eq!(src.polls, 1);
        // Passes woken by something else leave it alone.
        for _ in 0..3 {
            assert!(gate.poll(&mut cx, |c| src.poll(c)).is_pending());
        }
        assert_eq!(src.polls, 1);
        assert_eq!(task.0.load(Ordering::SeqCst), 0);

        // Its own wake reaches the task, and the next pass polls it.
        src.arrive(7);
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert_eq!(gate.poll(&mut cx, |c| src.poll(c)), Poll::Ready(7));
        // After a value it is polled again (more may be buffered), then left alone.
        assert!(gate.poll(&mut cx, |c| src.poll(c)).is_pending());
        assert!(gate.poll(&mut cx, |c| src.poll(c)).is_pending());
        assert_eq!(src.polls, 3);

        // Given something to write: polled without a wake.
        gate.open();
        assert!(gate.poll(&mut cx, |c| src.poll(c)).is_pending());
        assert_eq!(src.polls, 4);
    }

    #[test]
    fn two_values_buffered_behind_one_wake_are_both_seen() {
        let (_task, waker, gate, mut src) = rig();
        let mut cx = Context::from_waker(&waker);
        assert!(gate.poll(&mut cx, |c| src.poll(c)).is_pending());
        src.queued = vec![2, 1];
        if let Some(w) = src.waker.take() {
            w.wake();
        }
        assert_eq!(gate.poll(&mut cx, |c| src.poll(c)), Poll::Ready(1));
        assert_eq!(gate.poll(&mut cx, |c| src.poll(c)), Poll::Ready(2));
        assert!(gate.poll(&mut cx, |c| src.poll(c)).is_pending());
    }

    #[test]
    fn a_wake_from_another_thread_while_the_task_runs_is_kept() {
        let (task, waker, gate, mut src) = rig();
        let mut cx = Context::from_waker(&waker);
        assert!(gate.poll(&mut cx, |c| src.poll(c)).is_pending());
        let w = src.waker.take().expect("registered");
        std::thread::spawn(move || w.wake())
            .join()
            .expect("waker thread");
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        src.queued = vec![9];
        assert_eq!(gate.poll(&mut cx, |c| src.poll(c)), Poll::Ready(9));
    }
}
