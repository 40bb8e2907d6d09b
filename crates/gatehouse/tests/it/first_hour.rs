//! What a newcomer does first: `gatehouse init`, serving it, and the
//! commands it prints; `schema scaffold --out`; registrations without a
//! schema.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::{gatehouse, repo, stderr, stdout};

/// A `gatehouse serve` started in a directory, killed on drop.
pub struct Running {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Running {
    /// Starts `gatehouse serve ARGS` in `dir` (a port-0 listener is the
    /// caller's to ask for) and waits for its address.
    pub fn start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        cmd.arg("serve")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars() {
            if k.starts_with("GATEHOUSE_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let mut base = None;
        while out.read_line(&mut line).unwrap_or(0) > 0 {
            if let Some(rest) = line.trim().strip_prefix("gatehouse listening on ") {
                base = Some(rest.to_string());
                break;
            }
            line.clear();
        }
        std::thread::spawn(move || {
            let mut sink = String::new();
            while out.read_line(&mut sink).unwrap_or(0) > 0 {
                sink.clear();
            }
        });
        let Some(base) = base else {
            let _ = child.kill();
            panic!(
                "the server did not start:\n{}",
                logs.lock().unwrap().join("\n")
            );
        };
        Running { child, base, logs }
    }

    /// Every log line so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `script` with `sh -e`; panics with its output when it fails.
pub fn sh(dir: &Path, script: &str) -> String {
    let o = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "`{script}` failed:\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

#[test]
fn init_writes_a_service_that_answers_the_commands_it_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let o = gatehouse(tmp.path(), &["init", "notes"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let printed = stdout(&o);
    let commands: Vec<&str> = printed
        .lines()
        .filter_map(|l| l.strip_prefix("$ "))
        .collect();
    assert_eq!(commands.len(), 3, "{printed}");
    assert_eq!(commands[0], "cd notes && gatehouse serve");
    assert!(
        printed.contains("GATEHOUSE_SECRET") || {
            let config = std::fs::read_to_string(tmp.path().join("notes/gatehouse.toml")).unwrap();
            config.contains("export GATEHOUSE_SECRET=")
        }
    );
    let dir = tmp.path().join("notes");
    let o = gatehouse(&dir, &["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let server = Running::start(&dir, &["--listen", "127.0.0.1:0"], &[]);
    let addr = server.base.trim_start_matches("http://");
    // The token, then the mutation, exactly as printed (on the real port).
    let script = format!("{}\n{}", commands[1], commands[2]).replace("127.0.0.1:8080", addr);
    let answer = sh(&dir, &script);
    let v: serde_json::Value = serde_json::from_str(&answer)
        .unwrap_or_else(|e| panic!("{e}: {answer}\nlogs:\n{}", server.logs().join("\n")));
    assert_eq!(v["data"]["createNote"]["title"], "hello", "{v}");
    // A second init into the same directory refuses to overwrite it.
    let o = gatehouse(tmp.path(), &["init", "notes"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
}

#[test]
fn serve_warns_when_nobody_can_get_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let schema = repo().join("examples/library/schema");
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let server = Running::start(
        dir.path(),
        &[
            "--schema",
            schema.to_str().unwrap(),
            "--database",
            &db,
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    // The warnings are logged before the listening line, but the log
    // writer batches its lines on another thread: wait for them.
    let mut logs = server.logs().join("\n");
    for _ in 0..100 {
        if logs.contains("no user is registered") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        logs = server.logs().join("\n");
    }
    assert!(logs.contains("no OAuth client is registered"), "{logs}");
    assert!(logs.contains("gatehouse client add"), "{logs}");
    assert!(logs.contains("no user is registered"), "{logs}");
    assert!(logs.contains("gatehouse user add"), "{logs}");
}

#[test]
fn scaffold_writes_out_and_ignores_an_empty_file_in_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("schema");
    std::fs::create_dir(&schema).unwrap();
    std::fs::write(
        schema.join("types.graphql"),
        "type Team { id: ID! name: String! }\n",
    )
    .unwrap();
    // What `> schema/root.graphql` leaves behind before the command runs.
    std::fs::write(schema.join("root.graphql"), "").unwrap();
    let o = gatehouse(dir.path(), &["schema", "scaffold", "--schema", "schema"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("type Query"), "{}", stdout(&o));

    let o = gatehouse(
        dir.path(),
        &[
            "schema",
            "scaffold",
            "--schema",
            "schema",
            "--out",
            "schema/root.graphql",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Again, with the written file in place: it is replaced, not read.
    let o = gatehouse(
        dir.path(),
        &[
            "schema",
            "scaffold",
            "--schema",
            "schema",
            "--out",
            "schema/root.graphql",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = gatehouse(dir.path(), &["check", "--schema", "schema"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn registrations_do_not_need_a_schema() {
    // No ./schema, no config: only a database.
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let o = gatehouse(dir.path(), &["user", "list", "--database", &db]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = gatehouse(
        dir.path(),
        &[
            "client",
            "add",
            "app",
            "--grants",
            "client_credentials",
            "--scopes",
            "read",
            "--database",
            &db,
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = gatehouse(dir.path(), &["client", "list", "--database", &db]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("app\t"), "{}", stdout(&o));
    let o = gatehouse(dir.path(), &["consumer", "list", "--database", &db]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn serve_in_an_empty_directory_points_at_init() {
    let dir = tempfile::tempdir().unwrap();
    let o = gatehouse(dir.path(), &["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("gatehouse init"), "{err}");
    assert!(!dir.path().join("data").exists(), "nothing is created");
}
