//! Outbound TLS verifies certificates: a `wss://` mock model with a self-signed certificate is
//! refused by default and accepted once its certificate is trusted through `model.ca_file`.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use baton::leg::twilio::caller::{self, CallerEnd, CallerOptions};
use baton::mock::tls::TlsSetup;
use baton::mock::{MockOptions, Scenario};
use baton::model::gemini::endpoint::{Backend, Endpoint};
use baton::model::gemini::session::{self, SessionConfig, Transport};
use support::Daemon;

async fn tls_mock(cert_out: &std::path::Path) -> baton::mock::RunningMockServer {
    let opts = Arc::new(MockOptions::new(Arc::new(Scenario::builtin())));
    baton::mock::bind(
        "127.0.0.1:0",
        opts,
        Some(TlsSetup::SelfSigned {
            cert_out: cert_out.to_path_buf(),
        }),
    )
    .await
    .unwrap()
    .spawn()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_refused_and_a_configured_ca_is_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("mock-cert.pem");
    let mock = tls_mock(&cert).await;
    assert!(mock.base_url().starts_with("wss://"), "{}", mock.base_url());
    let cfg = SessionConfig {
        setup_timeout: Duration::from_secs(5),
        ..Default::default()
    };

    let plain = Endpoint::new(mock.base_url(), Backend::DeveloperApi, "v1beta", None).unwrap();
    let err = session::connect(&plain, Transport::Network, &cfg)
        .await
        .err()
        .expect("a self-signed certificate must not be trusted")
        .to_string();
    assert!(
        err.contains("certificate")
            && err.contains(mock.base_url())
            && err.contains("SSL_CERT_FILE=/path/to/cert.pem"),
        "{err}"
    );

    let trusted = plain.clone().with_ca_file(&cert).unwrap();
    let s = session::connect(&trusted, Transport::Network, &cfg)
        .await
        .expect("the mock's certificate is trusted through the CA file");
    drop(s);

    // The same through `baton serve`'s config: without the CA the call cannot open its model
    // session and is hung up; with `model.ca_file` it runs to the caller's own hang-up.
    let config =
        |ca: &str| support::mock_config("", &format!("url = \"{}\"\n{ca}", mock.base_url()));
    let short = || {
        let mut o = CallerOptions::from_pcm(&vec![0i16; 8000], 8000, "silence").unwrap();
        o.max_tail = Duration::from_secs(1);
        o
    };
    let d = Daemon::start(&config("")).await;
    let r = caller::dial(&d.twilio_url(), short()).await.unwrap();
    assert!(
        matches!(r.end, CallerEnd::ServerClosed { .. }),
        "without the CA the model session must fail: {:?}",
        r.end
    );
    d.stop().await;

    let d = Daemon::start(&config(&format!("ca_file = \"{}\"", cert.display()))).await;
    let r = caller::dial(&d.twilio_url(), short()).await.unwrap();
    assert_eq!(r.end, CallerEnd::HungUp, "{r:?}");
    d.stop().await;
}
