//! `baton check-config` reports every problem of a config in one pass, each with its key and a
//! fix, exits non-zero, and still says which model endpoint the rest of the file points at;
//! `baton serve` refuses to start with the same list.

use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `baton serve --config file`, which must refuse to start: its outcome, or a panic when it is
/// still running after 20 s (it started).
fn refused_by_serve(file: &str) -> (bool, String, String) {
    refused_by_serve_with(file, &[])
}

/// [`refused_by_serve`] with these variables set.
fn refused_by_serve_with(file: &str, vars: &[(&str, &str)]) -> (bool, String, String) {
    refused_by_serve_args(&["--config", file], vars)
}

/// `baton serve ARGS`, which must refuse to start (see [`refused_by_serve`]).
fn refused_by_serve_args(args: &[&str], vars: &[(&str, &str)]) -> (bool, String, String) {
    let file = args.join(" ");
    let child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("serve")
        .args(args)
        .envs(vars.iter().copied())
        .env_remove("BATON_TEST_UNSET_SIP_PW")
        .env_remove("BATON_TEST_UNSET_TRUNK_PW")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let Ok(out) = rx.recv_timeout(std::time::Duration::from_secs(20)) else {
        let _ = Command::new("kill").arg(&pid).status();
        panic!("serve started with {file}");
    };
    let out = out.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn baton(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .env_remove("BATON_TEST_UNSET_TOKENS")
        .env_remove("BATON_TEST_UNSET_SIP_PW")
        .env_remove("BATON_TEST_UNSET_TRUNK_PW")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `(key, words its message or fix must hold)` for each of the ten mistakes.
const MISTAKES: [(&str, &str); 10] = [
    ("server.drain_timeout", "did you mean `drain_timeout_s`?"),
    ("server.listen", "already in use"),
    (
        "server.auth_tokens_env",
        "BATON_TEST_UNSET_TOKENS, which is not set",
    ),
    (
        "limits.max_calls",
        "\"lots\" (text) where a whole number (0 or more) is needed",
    ),
    ("limits.leg_queue_frames", "-1 is negative"),
    ("log.format", "did you mean \"json\"?"),
    ("model.scenario", "seed000.toml"),
    (
        "twilio.disable_signature_check",
        "signatures are not checked anyway",
    ),
    ("resume.keepalive_dead_s", "keepalive_ping_s + 30"),
    ("sever", "did you mean `server`?"),
];

#[test]
fn ten_mistakes_are_reported_at_once_with_their_fixes_and_serve_refuses_with_the_same_list() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\n\
             listen = \"127.0.0.1:{port}\"\n\
             drain_timeout = 10\n\
             auth_tokens_env = \"BATON_TEST_UNSET_TOKENS\"\n\
             [limits]\n\
             max_calls = \"lots\"\n\
             leg_queue_frames = -1\n\
             [log]\n\
             format = \"jsn\"\n\
             [model]\n\
             scenario = \"{ROOT}/audio-fixtures/scenarios/seed00.toml\"\n\
             [twilio]\n\
             disable_signature_check = true\n\
             [resume]\n\
             keepalive_dead_s = 20\n\
             [sever]\n\
             listen = \"0.0.0.0:80\"\n"
        ),
    )
    .unwrap();
    let file = path.to_str().unwrap();
    let (ok, out, err) = baton(&["check-config", file]);
    assert!(
        !ok,
        "check-config passed a config with ten mistakes:\n{out}"
    );
    assert!(err.contains("10 problem(s)"), "{err}");
    // What runs instead of a refused value is its default, and the summary says so.
    assert!(
        out.contains("max 200 calls (see its problem below)"),
        "{out}"
    );
    assert!(
        out.contains("(see its problem below) · model backend mock ·"),
        "{out}"
    );
    // Each problem: its key, what is wrong, and a fix, in that order.
    for (key, words) in MISTAKES {
        let at = err.find(&format!("\n  {key}: ")).unwrap_or_for(key, &err);
        let entry: String = err[at + 1..].lines().take(2).collect::<Vec<_>>().join("\n");
        assert!(entry.contains(words), "{key}: {words:?} not in\n{entry}");
        assert!(entry.contains("\n    fix: "), "{key} has no fix:\n{entry}");
    }
    assert_eq!(err.matches("\n    fix: ").count(), 10, "{err}");
    // No Rust type names where the expected form is said in words.
    for jargon in ["usize", "u64", "expected"] {
        assert!(!err.contains(jargon), "{jargon:?} in\n{err}");
    }
    // The rest of the file is still described: the model endpoint first of all.
    assert!(
        out.contains("model endpoint the embedded mock model"),
        "{out}"
    );

    // serve refuses with the same list, before listening anywhere.
    let (ok, _, serve_err) = baton(&["serve", "--config", file]);
    assert!(!ok);
    for (key, _) in MISTAKES {
        assert!(
            serve_err.contains(&format!("\n  {key}: ")),
            "serve: no {key} in\n{serve_err}"
        );
    }
    assert!(serve_err.contains("10 problem(s)"), "{serve_err}");
    drop(held);
}

#[test]
fn a_model_url_makes_the_scenario_void_and_the_endpoint_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    std::fs::write(
        &path,
        format!(
            "[model]\nurl = \"ws://127.0.0.1:9300\"\nscenario = \"{ROOT}/audio-fixtures/scenarios/seed000.toml\"\n"
        ),
    )
    .unwrap();
    let (ok, out, err) = baton(&["check-config", path.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("model endpoint ws://127.0.0.1:9300"), "{out}");
    assert!(err.contains("model.scenario: is ignored"), "{err}");
    assert!(err.contains("baton mock-model --scenario"), "{err}");
}

#[test]
fn resample_input_is_taken_on_both_protocols() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    for model in [
        "[model]\nbackend = \"mock\"\nprofile = \"openai\"\nresample_input = true\n",
        "[model]\nresample_input = true\n",
    ] {
        std::fs::write(&path, model).unwrap();
        let (ok, out, err) = baton(&["check-config", path.to_str().unwrap()]);
        assert!(ok || err.contains("already in use"), "{model}: {out}{err}");
        assert!(!err.contains("resample_input"), "{model}: {err}");
    }
}

#[test]
fn the_shipped_configs_have_no_problem() {
    for f in ["config/baton.toml", "config/browser-demo.toml"] {
        let (ok, out, err) = baton(&["check-config", &format!("{ROOT}/{f}")]);
        // Ports the machine already uses (HTTP 8080, SIP 5060) are the only thing that may
        // differ between machines.
        if !ok {
            let taken = err.matches("already in use").count();
            assert!(
                taken > 0 && err.contains(&format!("{taken} problem(s)")),
                "{f}:\n{out}{err}"
            );
        }
    }
}

trait Found {
    fn unwrap_or_for(self, key: &str, text: &str) -> usize;
}

impl Found for Option<usize> {
    fn unwrap_or_for(self, key: &str, text: &str) -> usize {
        self.unwrap_or_else(|| panic!("no problem for {key} in\n{text}"))
    }
}

#[test]
fn human_agents_are_listed_with_the_calls_that_can_reach_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    let set = format!("{ROOT}/config/agents/front_desk.toml");
    std::fs::write(
        &path,
        format!("[server]\nlisten = \"127.0.0.1:0\"\n[agents]\nset = \"{set}\"\n"),
    )
    .unwrap();
    let (_, out, err) = baton(&["check-config", path.to_str().unwrap()]);
    assert!(
        out.contains("human agent ravi (Ravi): blind transfer to sip:ravi@127.0.0.1:5999, but no call of this daemon can be handed on"),
        "{out}{err}"
    );
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[agents]\nset = \"{set}\"\n[sip]\nlisten = [\"udp:127.0.0.1:0\"]\n"
        ),
    )
    .unwrap();
    let (_, out, err) = baton(&["check-config", path.to_str().unwrap()]);
    assert!(
        out.contains("human agent ravi (Ravi): blind transfer to sip:ravi@127.0.0.1:5999, on SIP calls (REFER); a call on any other leg keeps the agent (outcome unavailable)"),
        "{out}{err}"
    );
}

#[test]
fn a_reachable_address_without_tokens_is_a_problem_unless_insecure_is_explicit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    std::fs::write(&path, "[server]\nlisten = \"0.0.0.0:0\"\n").unwrap();
    let file = path.to_str().unwrap();
    let (ok, out, err) = baton(&["check-config", file]);
    assert!(!ok, "check-config passed what serve refuses:\n{out}{err}");
    assert!(
        err.contains("1 problem(s)")
            && err
                .contains("\n  server.listen: refusing to listen on 0.0.0.0:0 without API tokens")
            && err.contains("--insecure-no-auth"),
        "{err}"
    );
    let (ok, out, err) = baton(&["check-config", "--insecure-no-auth", file]);
    assert!(ok, "{out}{err}");
}

#[test]
fn sip_passwords_named_but_unset_are_reported_at_once_and_serve_never_starts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [sip]\nlisten = [\"udp:127.0.0.1:0\"]\n\
         auth_user = \"baton\"\nauth_password_env = \"BATON_TEST_UNSET_SIP_PW\"\n\
         [sip.trunks.carrier]\nuri = \"sip:carrier.example.com\"\nusername = \"acct\"\n\
         password_env = \"BATON_TEST_UNSET_TRUNK_PW\"\nregister = false\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    let (ok, out, err) = baton(&["check-config", file]);
    assert!(!ok, "{out}{err}");
    let (serve_ok, serve_out, serve_err) = refused_by_serve(file);
    assert!(!serve_ok);
    assert!(
        !serve_out.contains("listening"),
        "serve started before finding the variables unset:\n{serve_out}{serve_err}"
    );
    for text in [&err, &serve_err] {
        assert!(text.contains("2 problem(s)"), "{text}");
        for (key, var) in [
            ("sip.auth_password_env", "BATON_TEST_UNSET_SIP_PW"),
            (
                "sip.trunks.carrier.password_env",
                "BATON_TEST_UNSET_TRUNK_PW",
            ),
        ] {
            assert!(
                text.contains(&format!(
                    "\n  {key}: names the environment variable {var}, which is not set"
                )),
                "no {key} in\n{text}"
            );
        }
    }
}

#[test]
fn a_sip_port_in_use_is_a_problem_of_sip_listen_and_serve_never_starts() {
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sip = held.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    std::fs::write(
        &path,
        format!("[server]\nlisten = \"127.0.0.1:0\"\n[sip]\nlisten = [\"udp:{sip}\"]\n"),
    )
    .unwrap();
    let file = path.to_str().unwrap();
    let (ok, out, err) = baton(&["check-config", file]);
    assert!(!ok, "check-config passed a SIP port in use:\n{out}{err}");
    let (serve_ok, serve_out, serve_err) = refused_by_serve(file);
    assert!(!serve_ok);
    assert!(
        !serve_out.contains("listening"),
        "serve started before finding the SIP port taken:\n{serve_out}{serve_err}"
    );
    for text in [&err, &serve_err] {
        assert!(text.contains("1 problem(s)"), "{text}");
        assert!(
            text.contains(&format!(
                "\n  sip.listen: {sip} (UDP) is already in use by another process"
            )) && text.contains("ss -lunp")
                && text.contains(&format!(
                    "sip.listen = [\"udp:127.0.0.1:{}\"]",
                    sip.port() + 1
                )),
            "{text}"
        );
    }
    drop(held);
}

#[test]
fn each_problem_of_the_agent_set_is_one_problem_of_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("financial.toml");
    let text = std::fs::read_to_string(format!("{ROOT}/config/agents/financial.toml")).unwrap();
    std::fs::write(
        &set,
        text.replace("priority = 10", "priority = \"high\"")
            .replace("strategy = \"auto\"", "strategy = \"fastest\""),
    )
    .unwrap();
    let path = dir.path().join("baton.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[agents]\nset = \"{}\"\n",
            set.display()
        ),
    )
    .unwrap();
    let (ok, out, err) = baton(&["check-config", path.to_str().unwrap()]);
    assert!(!ok, "{out}{err}");
    assert!(err.contains("2 problem(s)"), "{err}");
    for key in ["priority", "strategy"] {
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("  {}: agents.", set.display()))
                    && l.contains(&format!(".{key}: "))),
            "no {key} in\n{err}"
        );
    }
}

#[test]
fn a_sip_routes_agent_set_is_loaded_and_its_problems_reported() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("desk.toml");
    let text = std::fs::read_to_string(format!("{ROOT}/config/agents/financial.toml")).unwrap();
    std::fs::write(&set, text.replace("priority = 10", "priority = \"high\"")).unwrap();
    let path = dir.path().join("baton.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\n[sip]\nlisten = [\"udp:127.0.0.1:0\"]\n\
         [sip.routes]\n\"100\" = \"desk.toml\"\n",
    )
    .unwrap();
    let (ok, out, err) = baton(&["check-config", path.to_str().unwrap()]);
    assert!(
        !ok,
        "check-config passed a route's broken agent set:\n{out}{err}"
    );
    assert!(
        err.contains("1 problem(s)") && err.contains(".priority: \"high\""),
        "{err}"
    );
    // The same set named twice is checked once.
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\n[agents]\nset = \"desk.toml\"\n\
         [sip]\nlisten = [\"udp:127.0.0.1:0\"]\n[sip.routes]\n\"100\" = \"desk.toml\"\n\"200\" = \"./desk.toml\"\n",
    )
    .unwrap();
    let (_, out, err) = baton(&["check-config", path.to_str().unwrap()]);
    assert!(err.contains("1 problem(s)"), "{out}{err}");
    // Without SIP listening, serve never loads the routes' sets, and neither does the check.
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\n[sip.routes]\n\"100\" = \"desk.toml\"\n",
    )
    .unwrap();
    let (_, out, err) = baton(&["check-config", path.to_str().unwrap()]);
    assert!(!err.contains("priority"), "{out}{err}");
}

#[test]
fn api_tokens_serve_refuses_are_a_problem_of_check_config_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\nauth_tokens_env = \"BATON_TEST_TOKENS\"\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    for (value, says) in [
        ("tok3n", "shorter than 16 characters"),
        (
            "aaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbbbbbb",
            "characters an Authorization header cannot carry",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["check-config", file])
            .env("BATON_TEST_TOKENS", value)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "check-config passed {value:?}");
        assert!(
            err.contains("1 problem(s)")
                && err.contains("\n  server.auth_tokens_env: a token in BATON_TEST_TOKENS"),
            "{err}"
        );
        assert!(err.contains(says), "{err}");
        assert!(!err.contains(value), "the tokens are never printed: {err}");
        let (ok, _, serve_err) = refused_by_serve_with(file, &[("BATON_TEST_TOKENS", value)]);
        assert!(!ok);
        assert!(
            serve_err.contains("server.auth_tokens_env: a token in BATON_TEST_TOKENS"),
            "serve refuses with the same problem: {serve_err}"
        );
    }
    // Good tokens: no problem.
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["check-config", file])
        .env(
            "BATON_TEST_TOKENS",
            "0123456789abcdef0123, fedcba9876543210fedc",
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serve_says_how_to_give_a_config_and_an_address() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("serve")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("config/baton.toml: no such config file") && err.contains("--config <FILE>"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--listen", "localhost:8080"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("\"localhost:8080\" is not an IP address and port: write e.g. 127.0.0.1:8080"),
        "{err}"
    );
}

/// The problem listed under `key` and its fix, as two lines.
fn entry(err: &str, key: &str) -> String {
    let at = err.find(&format!("\n  {key}: ")).unwrap_or_for(key, err);
    err[at + 1..].lines().take(2).collect::<Vec<_>>().join("\n")
}

#[test]
fn each_backend_is_told_what_it_reads_not_what_gemini_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    let check = |model: &str| {
        std::fs::write(
            &path,
            format!("[server]\nlisten = \"127.0.0.1:0\"\n[model]\n{model}"),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["check-config", path.to_str().unwrap()])
            .env_remove("BATON_TEST_UNSET_VERTEX_TOKEN")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{model}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let vertex = "backend = \"vertex\"\nurl = \"wss://us-central1-aiplatform.googleapis.com\"\n";
    // Vertex reads an OAuth2 access token from the variable (sent as `Authorization: Bearer`),
    // never a Gemini API key.
    for (credential, pasted) in [
        ("", None),
        ("credential_env = \"ya29.a0Secret-x\"\n", Some("ya29")),
    ] {
        let err = check(&format!("{vertex}{credential}"));
        let e = entry(&err, "model.credential_env");
        assert!(
            e.contains("credential_env = \"VERTEX_ACCESS_TOKEN\"")
                && e.contains("gcloud auth print-access-token")
                && !e.contains("GEMINI_API_KEY"),
            "{e}"
        );
        if let Some(secret) = pasted {
            assert!(!err.contains(secret), "the pasted token is shown:\n{err}");
        }
    }
    let err = check(&format!(
        "{vertex}credential_env = \"BATON_TEST_UNSET_VERTEX_TOKEN\"\n"
    ));
    let e = entry(&err, "model.credential_env");
    assert!(
        e.contains("export BATON_TEST_UNSET_VERTEX_TOKEN=\"$(gcloud auth print-access-token)\""),
        "{e}"
    );
    // Gemini's Developer API keeps its API key.
    let e = entry(&check("backend = \"gemini\"\n"), "model.credential_env");
    assert!(e.contains("credential_env = \"GEMINI_API_KEY\""), "{e}");
    // OpenAI's URL is the service's (with its /v1), not a Gemini mock's bare address.
    let e = entry(
        &check("backend = \"openai\"\nurl = \"https://api.openai.com/v1\"\n"),
        "model.url",
    );
    assert!(
        e.contains("wss://api.openai.com/v1")
            && e.contains("ws://127.0.0.1:9300/v1")
            && !e.contains("\"ws://127.0.0.1:9300\""),
        "{e}"
    );
    // Vertex's URL is a regional endpoint.
    let e = entry(
        &check("backend = \"vertex\"\nurl = \"https://x\"\ncredential_env = \"V\"\n"),
        "model.url",
    );
    assert!(e.contains("aiplatform.googleapis.com"), "{e}");
}

#[test]
fn an_address_in_use_from_listen_is_blamed_on_the_flag_not_the_file() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let file = path.to_str().unwrap();
    let listen = addr.to_string();
    let (ok, _, err) = refused_by_serve_args(&["--config", file, "--listen", &listen], &[]);
    assert!(!ok);
    let e = entry(&err, "--listen");
    assert!(
        e.contains(&format!("{addr} is already in use"))
            && e.contains(&format!("--listen 127.0.0.1:{}", addr.port() + 1)),
        "{e}"
    );
    assert!(!err.contains("server.listen"), "{err}");
    // A reachable address without API tokens, from the flag, is the flag's too.
    let (ok, _, err) = refused_by_serve_args(&["--config", file, "--listen", "0.0.0.0:0"], &[]);
    assert!(!ok);
    let e = entry(&err, "--listen");
    assert!(e.contains("refusing to listen on 0.0.0.0:0"), "{e}");
    assert!(!err.contains("server.listen"), "{err}");
    // The file's own address stays the file's key.
    std::fs::write(&path, format!("[server]\nlisten = \"{addr}\"\n")).unwrap();
    let (ok, _, err) = refused_by_serve(file);
    assert!(!ok);
    let e = entry(&err, "server.listen");
    assert!(
        e.contains(&format!(
            "server.listen = \"127.0.0.1:{}\"",
            addr.port() + 1
        )),
        "{e}"
    );
    drop(held);
}

/// What `model.credential_command` prints on its standard output in these tests: it must never
/// be shown.
const PRINTED: &str = "PRINTED-BY-THE-COMMAND-5c1e";

#[test]
fn a_credential_command_is_checked_and_run_without_showing_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.toml");
    let file = path.to_str().unwrap().to_owned();
    let vertex = "backend = \"vertex\"\nurl = \"wss://us-central1-aiplatform.googleapis.com\"\n\
                  model = \"projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5-flash-native-audio\"\n";
    let write = |model: &str| {
        std::fs::write(
            &path,
            format!("[server]\nlisten = \"127.0.0.1:0\"\n[model]\n{model}"),
        )
        .unwrap();
    };
    let run = |model: &str| {
        write(model);
        let (ok, out, err) = baton(&["check-config", &file]);
        assert!(
            !out.contains(PRINTED) && !err.contains(PRINTED),
            "the command's output is shown:\n{out}\n{err}"
        );
        (ok, out, err)
    };
    let prints = |script: &str| {
        format!(
            "credential_command = [\"sh\", \"-c\", {:?}]\n",
            script.replace("@", PRINTED)
        )
    };

    // A command that prints a token: nothing to report, no variable needed, and said so.
    let (ok, out, err) = run(&format!("{vertex}{}", prints("echo @")));
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("model credential: what sh prints, run at start and again every 300 s"),
        "{out}"
    );
    assert!(!err.contains("credential_env"), "{err}");
    // The same for the other remote backends.
    for other in [
        "backend = \"gemini\"\n",
        "backend = \"openai\"\ncredential_refresh_s = 600\n",
    ] {
        let (ok, out, err) = run(&format!("{other}{}", prints("echo @")));
        assert!(ok, "{other}: {out}\n{err}");
    }

    // One that fails: its status and the last line of its stderr, under the key.
    let (ok, _, err) = run(&format!(
        "{vertex}{}",
        prints("echo @; echo 'first line' >&2; echo 'reauthentication required' >&2; exit 5")
    ));
    assert!(!ok);
    let e = entry(&err, "model.credential_command");
    assert!(
        e.contains("sh failed (exit status: 5): reauthentication required")
            && !e.contains("first line")
            && e.contains("fix: run the command by hand"),
        "{e}"
    );
    // One that does not exist, one that prints nothing, one that prints two lines.
    for (command, says) in [
        (
            "credential_command = [\"baton-test-no-such-program\", \"auth\"]\n".to_owned(),
            "cannot start baton-test-no-such-program: ",
        ),
        (prints("true"), "printed nothing"),
        (
            prints("echo @; echo @"),
            "characters an HTTP header cannot carry",
        ),
    ] {
        let (ok, _, err) = run(&format!("{vertex}{command}"));
        assert!(!ok, "{command}");
        let e = entry(&err, "model.credential_command");
        assert!(e.contains(says), "{command}: {e}");
    }

    // The file's own mistakes, each with its fix.
    let command = prints("echo @");
    for (model, key, says) in [
        (
            format!("{vertex}{command}credential_env = \"VERTEX_ACCESS_TOKEN\"\n"),
            "model.credential_command",
            "is set together with model.credential_env",
        ),
        (
            format!("{vertex}credential_command = []\n"),
            "model.credential_command",
            "names no program",
        ),
        (
            format!("{vertex}credential_command = [\"\", \"auth\"]\n"),
            "model.credential_command",
            "names no program",
        ),
        (
            format!("{vertex}{command}credential_refresh_s = 0\n"),
            "model.credential_refresh_s",
            "is 0",
        ),
        (
            format!("backend = \"mock\"\n{command}"),
            "model.credential_command",
            "the mock model takes no credential",
        ),
        (
            format!("{vertex}credential_command = \"gcloud auth print-access-token\"\n"),
            "model.credential_command",
            "[\"gcloud\", \"auth\", \"print-access-token\"]",
        ),
    ] {
        let (ok, _, err) = run(&model);
        assert!(!ok, "{model}");
        let e = entry(&err, key);
        assert!(e.contains(says) && e.contains("fix: "), "{model}: {e}");
    }

    // Vertex without any credential is told of the command first.
    let (_, _, err) = run(vertex);
    let e = entry(&err, "model.credential_env");
    assert!(
        e.contains("credential_command = [\"gcloud\", \"auth\", \"print-access-token\"]"),
        "{e}"
    );

    // `serve` runs the command at start and refuses to start when it fails.
    write(&format!(
        "{vertex}{}",
        prints("echo @; echo 'token expired' >&2; exit 7")
    ));
    let (ok, out, err) = refused_by_serve(&file);
    assert!(!ok);
    assert!(
        err.contains("model.credential_command: sh failed (exit status: 7): token expired"),
        "{err}"
    );
    assert!(
        !out.contains(PRINTED) && !err.contains(PRINTED),
        "{out}\n{err}"
    );
}
