//! `baton dial audiosocket` sends a call UUID an AudioSocket server can tell calls apart by: a
//! fresh one on every dial, or the one given with `--uuid`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One dial against a server that reads the UUID message, hangs up and closes: the UUID it got
/// (`8-4-4-4-12` hex) and the dial's report.
fn dialed_uuid(out: &Path, extra: &[&str]) -> (String, serde_json::Value) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut msg = [0u8; 19];
        s.read_exact(&mut msg).unwrap();
        assert_eq!(
            &msg[..3],
            &[0x01, 0x00, 0x10],
            "not a UUID message: {msg:?}"
        );
        s.write_all(&[0x00, 0x00, 0x00]).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        let h: String = msg[3..].iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    });
    let run = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["dial", "audiosocket", &addr, "--json", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let uuid = server.join().unwrap();
    (uuid, serde_json::from_slice(&run.stdout).unwrap())
}

#[test]
fn each_dial_sends_a_fresh_uuid_unless_one_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let (a, report_a) = dialed_uuid(&dir.path().join("a"), &[]);
    let (b, report_b) = dialed_uuid(&dir.path().join("b"), &[]);
    assert_ne!(a, b, "two calls with one UUID");
    // The report names the call as the server saw it.
    assert_eq!(report_a["uuid"], a.as_str(), "{report_a:#}");
    assert_eq!(report_b["uuid"], b.as_str(), "{report_b:#}");
    for u in [&a, &b] {
        // A random (version 4, RFC 4122 variant) UUID.
        assert_eq!(&u[14..15], "4", "{u}");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
    }
    let given = "3f2504e0-4f89-41d3-9a0c-0305e82c3301";
    assert_eq!(
        dialed_uuid(&dir.path().join("c"), &["--uuid", given]).0,
        given
    );
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["dial", "audiosocket", "127.0.0.1:9", "--uuid", "not-a-uuid"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--uuid \"not-a-uuid\" is not a UUID"), "{err}");
}
