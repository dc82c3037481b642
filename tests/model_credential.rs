//! A credential from `model.credential_command` is renewed while `serve` runs: the mock model
//! takes only "tok-2", the command prints "tok-1" on its first run and "tok-2" on every later
//! one, and with `credential_refresh_s = 1` a model session opened before the renewal is refused
//! while one opened after it is accepted, on Vertex (Gemini Live) and on OpenAI Realtime.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use baton::mock::{MockOptions, Scenario};
use baton::server;
use support::ROOT;

/// A script printing tok-1 the first time it runs and tok-2 afterwards (its runs counted in a
/// file beside it).
fn token_script(dir: &Path) -> PathBuf {
    let script = dir.join("token.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         count=\"$(dirname \"$0\")/count\"\n\
         n=$(cat \"$count\" 2>/dev/null || echo 0)\n\
         n=$((n + 1))\n\
         echo \"$n\" > \"$count\"\n\
         if [ \"$n\" -eq 1 ]; then echo tok-1; else echo tok-2; fi\n",
    )
    .unwrap();
    script
}

fn runs(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join("count"))
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0)
}

/// `serve` on `model` (a `[model]` body without its credential) against a mock requiring
/// tok-2: refused before the first renewal, accepted after it. `refusal` is what the refusal
/// says.
async fn renewed_while_serving(model: &str, mock: baton::mock::RunningMockServer, refusal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let script = token_script(dir.path());
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout_s = 1\n\
         [model]\n{model}\n\
         credential_command = [\"sh\", \"{}\"]\ncredential_refresh_s = 1\n",
        script.display()
    );
    let mut loaded =
        baton::config::parse(&config, &Path::new(ROOT).join("config/test.toml")).unwrap();
    let listener = tokio::net::TcpListener::bind(loaded.listen).await.unwrap();
    loaded.listen = listener.local_addr().unwrap();

    // The command runs once as the daemon's state is built: tok-1.
    let app = server::state(loaded).unwrap();
    assert_eq!(runs(dir.path()), 1);
    assert!(
        !format!("{:?}", app.backend).contains("tok-1"),
        "the credential shows in Debug output"
    );
    // No renewal runs before `serve`: tok-1 is sent and refused.
    let refused = app
        .open_call(None)
        .await
        .err()
        .expect("a session opened with tok-1 must be refused")
        .to_string();
    assert!(refused.contains(refusal), "{refused}");
    assert!(!refused.contains("tok-"), "{refused}");

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::serve(app.clone(), listener, async {
        let _ = stopped.await;
    }));
    // Within a second of `serve` starting, the command runs again and prints tok-2: a session
    // opened once it has is accepted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let opened = loop {
        match app.open_call(None).await {
            Ok((session, _)) => break session,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no session was accepted after {} run(s) of the command: {e}",
                    runs(dir.path())
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(runs(dir.path()) >= 2, "accepted before the renewal");
    drop(opened);
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(15), serving)
        .await
        .expect("serve stops")
        .unwrap()
        .unwrap();
    // The renewal stopped with `serve` (a run it cut short has been killed by now).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = runs(dir.path());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        runs(dir.path()),
        after,
        "the command still runs after serve ended"
    );
    mock.stop().await;
}

fn mock_options(openai: bool) -> Arc<MockOptions> {
    let mut opts = MockOptions::new(Arc::new(Scenario::builtin()));
    opts.api_key = Some("tok-2".into());
    if openai {
        opts.openai = Some(baton::mock::openai::OpenAiOptions::default());
    }
    Arc::new(opts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vertex_token_from_the_command_is_renewed_while_serving() {
    let mock = baton::mock::bind("127.0.0.1:0", mock_options(false), None)
        .await
        .unwrap()
        .spawn();
    let model = format!(
        "backend = \"vertex\"\nurl = \"{}\"\n\
         model = \"projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5-flash-native-audio\"",
        mock.base_url()
    );
    renewed_while_serving(&model, mock, "API key not valid").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_key_from_the_command_is_renewed_while_serving() {
    let mock = baton::mock::bind("127.0.0.1:0", mock_options(true), None)
        .await
        .unwrap()
        .spawn();
    let model = format!("backend = \"openai\"\nurl = \"{}/v1\"", mock.base_url());
    renewed_while_serving(&model, mock, "401").await;
}
