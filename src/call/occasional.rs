//! A channel the call's loop looks at on every pass but that rarely carries anything (opened
//! sessions, tool results, operator commands): its waker is registered once and stays with
//! the channel until a message or the close takes it, so a pass with nothing new costs two
//! loads instead of a registration per channel per pass.

use std::task::{Context, Poll};

use tokio::sync::mpsc;

/// An [`mpsc::Receiver`] polled only when it may have changed.
pub struct Occasional<T> {
    rx: mpsc::Receiver<T>,
    /// The last poll found nothing and left this task's waker with the channel; a send or the
    /// close wakes the task, and only then can the channel have changed.
    armed: bool,
}

impl<T> Occasional<T> {
    pub fn new(rx: mpsc::Receiver<T>) -> Self {
        Occasional { rx, armed: false }
    }

    /// As [`mpsc::Receiver::poll_recv`]; the same waker (the call's task) must be given each
    /// time, which the call's loop does.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if self.armed && self.rx.is_empty() && !self.rx.is_closed() {
            return Poll::Pending;
        }
        let r = self.rx.poll_recv(cx);
        // A `Pending` from a task whose coop budget ran out left no waker with the channel
        // (tokio only asks to poll the task again): not armed then, the next pass polls.
        self.armed = r.is_pending() && tokio::task::coop::has_budget_remaining();
        r
    }

    /// The next message; `None` once the channel is closed and empty.
    pub async fn recv(&mut self) -> Option<T> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_send_after_an_empty_pass_wakes_and_is_received() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let (tx, rx) = mpsc::channel(4);
        let mut o = Occasional::new(rx);
        assert!(o.poll_recv(&mut cx).is_pending());
        // Passes with nothing new leave the registration in place.
        for _ in 0..3 {
            assert!(o.poll_recv(&mut cx).is_pending());
        }
        tx.try_send(1).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(o.poll_recv(&mut cx), Poll::Ready(Some(1)));
        // Two messages sent while the waker was spent: both still come, one per pass.
        tx.try_send(2).unwrap();
        tx.try_send(3).unwrap();
        assert_eq!(o.poll_recv(&mut cx), Poll::Ready(Some(2)));
        assert_eq!(o.poll_recv(&mut cx), Poll::Ready(Some(3)));
        assert!(o.poll_recv(&mut cx).is_pending());
        let woken = count.0.load(Ordering::SeqCst);
        tx.try_send(4).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), woken + 1);
        assert_eq!(o.poll_recv(&mut cx), Poll::Ready(Some(4)));
        // The close wakes too, and ends the stream.
        assert!(o.poll_recv(&mut cx).is_pending());
        drop(tx);
        assert_eq!(count.0.load(Ordering::SeqCst), woken + 2);
        assert_eq!(o.poll_recv(&mut cx), Poll::Ready(None));
    }

    /// A poll refused for lack of coop budget registers nothing (tokio only has the task polled
    /// again): the pass after it must poll the channel, or a later send would wake nobody.
    #[tokio::test]
    async fn a_poll_refused_for_budget_is_not_taken_for_a_registration() {
        let (tx, rx) = mpsc::channel(4);
        let mut o = Occasional::new(rx);
        let mut first = true;
        let receive = poll_fn(move |cx| {
            if std::mem::take(&mut first) {
                while tokio::task::coop::has_budget_remaining() {
                    let mut spend = std::pin::pin!(tokio::task::coop::consume_budget());
                    let _ = spend.as_mut().poll(cx);
                }
                assert!(o.poll_recv(cx).is_pending());
                return Poll::Pending;
            }
            o.poll_recv(cx)
        });
        let sender = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            tx.send(7).await.unwrap();
            tx
        });
        // The deadline first: at it the receiver is not looked at again, so only the send's
        // wake-up can bring the message.
        let got = tokio::select! {
            biased;
            () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {
                panic!("the send did not wake the receiver")
            }
            got = receive => got,
        };
        assert_eq!(got, Some(7));
        drop(sender.await.unwrap());
    }

    #[tokio::test]
    async fn messages_sent_from_another_task_all_arrive() {
        let (tx, rx) = mpsc::channel(2);
        let mut o = Occasional::new(rx);
        let sender = tokio::spawn(async move {
            for i in 0..100u32 {
                tx.send(i).await.unwrap();
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        });
        let mut got = Vec::new();
        while let Some(i) = poll_fn(|cx| o.poll_recv(cx)).await {
            got.push(i);
        }
        sender.await.unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }
}
