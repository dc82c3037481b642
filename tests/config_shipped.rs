#[test]
fn the_shipped_config_is_valid() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/baton.toml");
    let loaded = baton::config::load(&path).unwrap();
    assert_eq!(
        loaded.config.model.backend,
        baton::config::BackendKind::Mock
    );
    assert!(
        loaded.config.twilio.auth_token_env.is_empty(),
        "the shipped config keeps signatures off"
    );
    assert_eq!(
        loaded.config.sip.listen,
        ["udp:127.0.0.1:5060"],
        "the shipped config answers SIP on loopback with the embedded mock"
    );
}
