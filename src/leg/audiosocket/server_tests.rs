//! The AudioSocket leg driven in its call's task, on an in-memory socket and the paused clock:
//! idle and stall timeouts, a peer that stops reading, and what a hang-up writes.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::audio::Frame;
use crate::leg::{LegCommand, PlayedKind};

/// The UUID and one 20 ms message of 8 kHz audio: what starts a call.
fn call_start() -> Vec<u8> {
    let mut b = BytesMut::new();
    wire::encode_raw(wire::KIND_UUID, &[7; 16], &mut b);
    wire::encode_audio(0x10, &[0; 160], &mut b);
    b.to_vec()
}

async fn started(
    buffer: usize,
    opts: AudioSocketLegOptions,
) -> (DuplexStream, LegHandle, JoinHandle<LegStats>) {
    let (mut peer, ours) = tokio::io::duplex(buffer);
    peer.write_all(&call_start()).await.unwrap();
    let (leg, info, task) = accept(ours, opts).await.unwrap();
    assert_eq!(info.rate, 8000);
    (peer, leg, task)
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_goes_quiet_is_hung_up_after_the_idle_timeout() {
    let opts = AudioSocketLegOptions::default();
    let idle = opts.idle_timeout;
    let (mut peer, mut leg, task) = started(1 << 16, opts).await;
    let t0 = Instant::now();
    assert!(matches!(leg.recv().await, Some(LegEvent::Frame { .. })));
    // A DTMF digit later restarts the wait.
    tokio::time::sleep(idle / 2).await;
    let mut b = BytesMut::new();
    wire::encode_raw(wire::KIND_DTMF, b"5", &mut b);
    peer.write_all(&b).await.unwrap();
    assert!(matches!(
        leg.recv().await,
        Some(LegEvent::Dtmf { digit: '5' })
    ));
    assert!(matches!(
        leg.recv().await,
        Some(LegEvent::Stop(crate::leg::StopReason::Failed(_)))
    ));
    let waited = Instant::now() - t0;
    assert!(
        waited >= idle / 2 + idle && waited < idle / 2 + idle + Duration::from_millis(5),
        "{waited:?}"
    );
    assert!(leg.recv().await.is_none());
    // The peer is told, and the connection closes.
    let mut got = Vec::new();
    peer.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, wire::HANGUP);
    let stats = task.await.unwrap();
    assert_eq!(
        stats.end,
        EndReason::Protocol(SessionError::Idle(idle)),
        "{stats:?}"
    );
    assert_eq!(stats.frames_dropped, 0);
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_stops_reading_ends_the_call() {
    let opts = AudioSocketLegOptions {
        idle_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    // The peer keeps its end open but reads nothing; 1 KiB fits three frames.
    let (_peer, mut leg, task) = started(1024, opts).await;
    assert!(matches!(leg.recv().await, Some(LegEvent::Frame { .. })));
    let stopped = crate::leg::socket::play_until_given_up(&mut leg, 8000).await;
    assert!(
        matches!(&stopped, Some(LegEvent::Stop(crate::leg::StopReason::Failed(why))) if why.starts_with("cannot write to the peer")),
        "{stopped:?}"
    );
    assert!(leg.recv().await.is_none());
    let stats = task.await.unwrap();
    assert!(
        matches!(stats.end, EndReason::Unwritable(_)),
        "{:?}",
        stats.end
    );
}

#[tokio::test(start_paused = true)]
async fn a_hang_up_writes_what_was_played_then_the_hang_up_and_closes() {
    let (mut peer, mut leg, task) = started(1 << 16, AudioSocketLegOptions::default()).await;
    assert!(matches!(leg.recv().await, Some(LegEvent::Frame { .. })));
    for n in 0..3 {
        let frame = Frame::silence(8000, Duration::from_millis(20) * n);
        leg.send(LegCommand::Play {
            frame,
            kind: PlayedKind::Voice,
        })
        .unwrap();
    }
    leg.send(LegCommand::Hangup).unwrap();
    drop(leg);
    let mut got = Vec::new();
    peer.read_to_end(&mut got).await.unwrap();
    let mut d = wire::Decoder::new(wire::DEFAULT_MAX_PAYLOAD);
    d.push(&got);
    let msgs: Vec<_> = std::iter::from_fn(|| d.next_message().ok().flatten()).collect();
    assert_eq!(msgs.len(), 4, "{msgs:?}");
    assert_eq!(msgs.last(), Some(&wire::Message::Hangup));
    let stats = task.await.unwrap();
    assert_eq!(
        (stats.end, stats.session.frames_out),
        (EndReason::Hangup, 3)
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_left_unfinished_by_the_first_read_runs_on_the_stall_timeout() {
    let opts = AudioSocketLegOptions::default();
    let stall = opts.stall_timeout;
    let (mut peer, ours) = tokio::io::duplex(1 << 16);
    let mut start = call_start();
    start.push(wire::KIND_SLIN);
    peer.write_all(&start).await.unwrap();
    let (mut leg, _, task) = accept(ours, opts).await.unwrap();
    let t0 = Instant::now();
    assert!(matches!(leg.recv().await, Some(LegEvent::Frame { .. })));
    assert!(matches!(
        leg.recv().await,
        Some(LegEvent::Stop(crate::leg::StopReason::Failed(_)))
    ));
    assert!(Instant::now() - t0 < stall + Duration::from_millis(5));
    assert!(leg.recv().await.is_none());
    let mut got = Vec::new();
    peer.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, wire::HANGUP);
    let stats = task.await.unwrap();
    assert_eq!(stats.end, EndReason::Protocol(SessionError::Stalled(stall)));
}
