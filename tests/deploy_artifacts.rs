//! The deployment artifacts in `deploy/` against the config they run and the routes baton
//! serves: the shared config validates; the systemd unit passes `systemd-analyze verify` with no
//! warning and stops later than the drain; the Kubernetes manifests parse and agree with the
//! config (port, probe paths, grace period, credentials' variables, the ConfigMap carrying the
//! config unchanged) and with each other (selectors, named ports); the container build script
//! is valid shell and builds the image the manifests name.

use crate::cluster_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use baton::server::health::{LIVEZ, READYZ};
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn deploy(p: &str) -> PathBuf {
    Path::new(ROOT).join("deploy").join(p)
}

fn config() -> baton::config::Loaded {
    baton::config::load(&deploy("baton.toml")).expect("deploy/baton.toml is a valid config")
}

fn yaml(name: &str) -> Value {
    let text = std::fs::read_to_string(deploy(&format!("kubernetes/{name}"))).unwrap();
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("kubernetes/{name}: {e}"))
}

#[test]
fn the_shared_config_is_valid_and_the_cli_agrees() {
    let c = config();
    assert_eq!(c.listen.port(), 8080);
    assert!(c.config.cluster.enabled);
    assert!(
        !c.config.store.url_env.is_empty(),
        "the store URL comes from the environment"
    );
    // With the variables the deployment provides (Secret, ConfigMap), the only problem
    // check-config may find is this machine's port 8080 being taken.
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("check-config")
        .arg(deploy("baton.toml"))
        .env("GEMINI_API_KEY", "set-by-the-deployment")
        .env("BATON_API_TOKENS", "set-by-the-deployment-0123456789")
        .env("BATON_STORE_URL", "postgres://baton@db/baton")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || (err.contains("1 problem(s)") && err.contains("already in use")),
        "{err}"
    );
    // Without them, check-config names each one.
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("check-config")
        .arg(deploy("baton.toml"))
        .env_remove("GEMINI_API_KEY")
        .env_remove("BATON_API_TOKENS")
        .env_remove("BATON_STORE_URL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for var in ["GEMINI_API_KEY", "BATON_API_TOKENS", "BATON_STORE_URL"] {
        assert!(err.contains(&format!("{var}, which is not set")), "{err}");
    }
}

/// What a stop may take after the drain, at most (every bounded step of it).
const AFTER_DRAIN: u64 = baton::server::STOP_AFTER_DRAIN.as_secs();

#[test]
fn the_systemd_unit_verifies_and_outlasts_the_drain() {
    let unit = std::fs::read_to_string(deploy("systemd/baton.service")).unwrap();
    let key = |k: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("the unit sets {k}"))
            .to_owned()
    };
    let drain = config().config.server.drain_timeout_s;
    let stop: u64 = key("TimeoutStopSec").parse().unwrap();
    assert!(
        stop >= drain + AFTER_DRAIN,
        "TimeoutStopSec={stop} must outlast the {drain} s drain and what follows it"
    );
    assert_eq!(key("Restart"), "on-failure");
    assert_eq!(key("KillSignal"), "SIGTERM");
    assert_eq!(
        key("ExecStart"),
        "/usr/local/bin/baton serve --config /etc/baton/baton.toml"
    );
    for hardening in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "DynamicUser=yes",
        "CapabilityBoundingSet=",
        "SystemCallFilter=@system-service",
    ] {
        assert!(unit.lines().any(|l| l == hardening), "missing {hardening}");
    }
    if !cluster_support::have("systemd-analyze", "the_systemd_unit_verifies") {
        return;
    }
    // Verified as shipped, except that ExecStart names the binary this build made.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/baton", env!("CARGO_BIN_EXE_baton")),
    )
    .unwrap();
    let analyze = cluster_support::tool("systemd-analyze").expect("found above");
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
}

#[test]
fn the_kubernetes_manifests_agree_with_the_config_and_each_other() {
    let c = config();
    let k = yaml("kustomization.yaml");
    let mut listed: Vec<String> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    let mut files: Vec<String> = std::fs::read_dir(deploy("kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml") && f != "kustomization.yaml")
        .collect();
    files.sort();
    assert_eq!(listed, files, "kustomization.yaml lists every manifest");

    // The ConfigMap carries deploy/baton.toml unchanged.
    let cm = yaml("configmap.yaml");
    let shipped = std::fs::read_to_string(deploy("baton.toml")).unwrap();
    assert_eq!(cm["data"]["baton.toml"].as_str(), Some(shipped.as_str()));

    let d = yaml("deployment.yaml");
    assert_eq!(d["kind"], "Deployment");
    let pod = &d["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    assert_eq!(&d["spec"]["selector"]["matchLabels"], labels);
    let spec = &pod["spec"];
    let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    let drain = c.config.server.drain_timeout_s;
    assert!(
        grace >= drain + AFTER_DRAIN,
        "grace {grace} s must outlast the {drain} s drain and what follows it"
    );
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    let uid = spec["securityContext"]["runAsUser"].as_u64().unwrap();
    let ctr = &spec["containers"][0];
    let port = &ctr["ports"][0];
    assert_eq!(
        port["containerPort"].as_u64(),
        Some(u64::from(c.listen.port()))
    );
    let port_name = port["name"].as_str().unwrap();
    for (probe, path) in [
        ("readinessProbe", READYZ),
        ("livenessProbe", LIVEZ),
        ("startupProbe", LIVEZ),
    ] {
        assert_eq!(ctr[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(ctr[probe]["httpGet"]["port"], port_name, "{probe}");
    }
    // Liveness never fails a draining pod (/livez stays 200); readiness reacts within seconds.
    assert!(ctr["readinessProbe"]["periodSeconds"].as_u64().unwrap() <= 5);
    let notes = &pod["metadata"]["annotations"];
    assert_eq!(notes["prometheus.io/scrape"], "true");
    assert_eq!(
        notes["prometheus.io/port"]
            .as_str()
            .and_then(|p| p.parse::<u16>().ok()),
        Some(c.listen.port())
    );
    assert_eq!(notes["prometheus.io/path"], "/metrics");
    let env: Vec<&str> = ctr["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    for var in [
        &c.config.store.url_env,
        &c.config.server.auth_tokens_env,
        &c.config.model.credential_env,
    ] {
        assert!(
            env.contains(&var.as_str()),
            "the pod sets {var}, which the config names"
        );
    }
    // The config file is where the arguments say, from the ConfigMap.
    let args: Vec<&str> = ctr["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(args, ["serve", "--config", "/etc/baton/baton.toml"]);
    assert_eq!(ctr["volumeMounts"][0]["mountPath"], "/etc/baton");
    assert_eq!(
        spec["volumes"][0]["configMap"]["name"],
        cm["metadata"]["name"]
    );
    assert_eq!(ctr["securityContext"]["readOnlyRootFilesystem"], true);

    // The Service selects the pods and targets the named port; the PDB the same pods.
    let s = yaml("service.yaml");
    for (k, v) in s["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "the Service selects the pods");
    }
    assert_eq!(s["spec"]["ports"][0]["targetPort"], port_name);
    let pdb = yaml("pdb.yaml");
    assert_eq!(pdb["kind"], "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], *labels);
    assert!(
        pdb["spec"]["maxUnavailable"].as_u64().unwrap() < d["spec"]["replicas"].as_u64().unwrap()
    );

    // The ingress reaches the Service, with WebSocket timeouts as long as a call.
    let i = yaml("ingress.yaml");
    let backend = &i["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(backend["name"], s["metadata"]["name"]);
    assert_eq!(backend["port"]["name"], s["spec"]["ports"][0]["name"]);
    for t in ["proxy-read-timeout", "proxy-send-timeout"] {
        let v: u64 = i["metadata"]["annotations"][format!("nginx.ingress.kubernetes.io/{t}")]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("the ingress sets {t}"));
        assert!(v >= 3600, "{t} = {v} s would cut calls short");
    }
    let host = i["spec"]["rules"][0]["host"].as_str().unwrap();
    assert_eq!(
        c.public_url(),
        format!("https://{host}"),
        "public_url is the ingress host"
    );

    // The image the Deployment runs is the one the build script makes, as the same user.
    let script = std::fs::read_to_string(deploy("container/build.sh")).unwrap();
    assert!(
        script.contains(&format!("--user {uid}:{uid}")),
        "the image runs as {uid}"
    );
    let image = ctr["image"].as_str().unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(image, format!("localhost/baton:{version}"));
    assert!(script.contains(&format!("--port {}/tcp", c.listen.port())));
}

#[test]
fn the_container_build_script_is_valid_shell() {
    let out = Command::new("bash")
        .arg("-n")
        .arg(deploy("container/build.sh"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = std::fs::read_to_string(deploy("container/build.sh")).unwrap();
    for needed in [
        "debootstrap",
        "buildah commit",
        "deploy/baton.toml",
        "--stop-signal SIGTERM",
    ] {
        assert!(script.contains(needed), "build.sh: {needed}");
    }
}
