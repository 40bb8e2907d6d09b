//! Files the binary writes: those holding secrets are created readable by
//! their owner only, whatever the umask (`docs/security.md`).
#![cfg(unix)]

use std::path::Path;

/// Runs `gatehouse ARGS` in `dir` under umask 022 (the usual default, under
/// which a plain `std::fs::write` makes a file readable by everyone).
fn gatehouse_under_umask_022(dir: &Path, args: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = gatehouse_testkit::command("sh");
    cmd.arg("-c")
        .arg(format!("umask 022; exec \"$0\" {args}"))
        .arg(env!("CARGO_BIN_EXE_gatehouse"))
        .current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "gatehouse {args}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

/// `gatehouse init` writes a client secret, a password and a
/// `GATEHOUSE_SECRET` value into `gatehouse.toml`: 0600, not 0644.
#[test]
fn init_writes_its_config_owner_only() {
    let tmp = tempfile::tempdir().unwrap();
    gatehouse_under_umask_022(tmp.path(), "init svc", &[]);
    let config = tmp.path().join("svc/gatehouse.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("client_secret = ") && text.contains("GATEHOUSE_SECRET="));
    assert_eq!(mode(&config), 0o600, "{}", config.display());
    // The schema holds no secret: the umask decides.
    assert_eq!(mode(&tmp.path().join("svc/schema/note.graphql")), 0o644);
}

/// The key-encryption key file made when `GATEHOUSE_SECRET` is not set,
/// and the SQLite database holding hashed secrets and sealed keys.
#[test]
fn key_file_and_database_are_owner_only() {
    let tmp = tempfile::tempdir().unwrap();
    gatehouse_under_umask_022(
        tmp.path(),
        "consumer add probe --database sqlite://data/g.db",
        &[],
    );
    for file in ["data/gatehouse.key", "data/g.db"] {
        let path = tmp.path().join(file);
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
}
