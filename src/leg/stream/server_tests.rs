//! The `/stream` leg driven in its call's task, on a test socket and the paused clock: a
//! client that stops reading, notices, and the last `stop` with the call's summary.

use std::pin::Pin;

use tokio_util::sync::PollSender;

use super::*;
use crate::leg::LegCommand;

const START16: &str = r#"{"event":"start","format":{"encoding":"pcm16","sample_rate":16000}}"#;

/// A client's socket in memory: what baton writes lands in a bounded queue the test reads (or
/// does not), what the test sends arrives as the client's messages.
struct FakeSocket {
    inbound: mpsc::Receiver<Result<Message, axum::Error>>,
    outbound: PollSender<Message>,
}

impl Stream for FakeSocket {
    type Item = Result<Message, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inbound.poll_recv(cx)
    }
}

impl Sink<Message> for FakeSocket {
    type Error = axum::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.outbound)
            .poll_ready(cx)
            .map_err(axum::Error::new)
    }

    fn start_send(mut self: Pin<&mut Self>, msg: Message) -> Result<(), Self::Error> {
        Pin::new(&mut self.outbound)
            .start_send(msg)
            .map_err(axum::Error::new)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.outbound)
            .poll_flush(cx)
            .map_err(axum::Error::new)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.outbound)
            .poll_close(cx)
            .map_err(axum::Error::new)
    }
}

/// A started leg over a fake socket whose client side holds `room` messages.
fn started(
    room: usize,
) -> (
    StreamLeg,
    mpsc::Sender<Result<Message, axum::Error>>,
    mpsc::Receiver<Message>,
) {
    let (client_tx, inbound) = mpsc::channel(16);
    let (outbound, client_rx) = mpsc::channel(room);
    let socket = FakeSocket {
        inbound,
        outbound: PollSender::new(outbound),
    };
    let mut core = StreamCore::new();
    core.handle_text(START16, Instant::now()).unwrap();
    let (format, at) = (core.format().unwrap(), core.started_at().unwrap());
    (start(core, socket, format, at), client_tx, client_rx)
}

fn text(m: &Message) -> &str {
    match m {
        Message::Text(t) => t.as_str(),
        _ => "",
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_is_given_up() {
    let (leg, _client_tx, _client_rx) = started(4);
    let StreamLeg {
        mut handle, task, ..
    } = leg;
    let stopped = crate::leg::socket::play_until_given_up(&mut handle, 16_000).await;
    assert!(
        matches!(&stopped, Some(LegEvent::Stop(crate::leg::StopReason::Failed(why))) if why.contains("read nothing")),
        "{stopped:?}"
    );
    assert!(handle.recv().await.is_none());
    let stats = task.await.unwrap();
    assert!(
        matches!(&stats.end, LegEnd::SocketError(e) if e.contains("read nothing")),
        "{:?}",
        stats.end
    );
}

#[tokio::test(start_paused = true)]
async fn notices_reach_the_client_and_the_last_stop_carries_the_summary() {
    let (leg, _client_tx, mut client_rx) = started(64);
    let StreamLeg {
        mut handle,
        task,
        notices,
        ..
    } = leg;
    notices
        .send(Notice::Event(ToClient::Transcript {
            role: "agent",
            text: "hello".into(),
            finished: true,
        }))
        .await
        .unwrap();
    // The call's task polls the leg: the acknowledgement and the fragment go out.
    let idle = timeout(Duration::from_millis(100), handle.recv()).await;
    assert!(idle.is_err(), "{idle:?}");
    assert!(text(&client_rx.recv().await.unwrap()).contains("\"started\""));
    assert!(text(&client_rx.recv().await.unwrap()).contains("hello"));
    // The call hangs up; its summary comes a little later, to the closing task.
    handle.send(LegCommand::Hangup).unwrap();
    drop(handle);
    tokio::time::sleep(Duration::from_millis(200)).await;
    notices
        .send(Notice::Finish {
            reason: "the caller said goodbye".into(),
            summary: serde_json::json!({"turns": 1}),
        })
        .await
        .unwrap();
    let stop = client_rx.recv().await.unwrap();
    let stop: serde_json::Value = serde_json::from_str(text(&stop)).unwrap();
    assert_eq!(stop["event"], "stop");
    assert_eq!(stop["reason"], "the caller said goodbye");
    assert_eq!(stop["summary"]["turns"], 1);
    assert!(matches!(
        client_rx.recv().await,
        Some(Message::Close(Some(_)))
    ));
    let stats = task.await.unwrap();
    assert_eq!((stats.end, stats.frames_dropped), (LegEnd::Hangup, 0));
}
