//! What a newcomer does first: `gatehouse init`, serving it, and the
//! commands it prints; `schema scaffold --out`; registrations without a
//! schema.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use gatehouse_testkit::repo_root;

use crate::{gatehouse, serve, stderr, stdout};

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

    let server = serve(&dir, &["--listen", "127.0.0.1:0"], &[]);
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
    let schema = repo_root().join("examples/library/schema");
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let server = serve(
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
    let logs = server
        .wait_for_log("no user is registered", Duration::from_secs(5))
        .join("\n");
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

/// `schema scaffold --out` runs again and again: it replaces the file it
/// wrote, keeps one a person edited (unless `--force`), and when the types
/// come to name an input that file declares, says how to split it instead
/// of failing with the load's errors alone.
#[test]
fn scaffold_out_can_be_run_again_and_keeps_what_was_written_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("schema");
    std::fs::create_dir(&schema).unwrap();
    let types = "type Team { id: ID! name: String! members: [Member!]! }\n\
                 type Member { id: ID! team: Team! name: String! }\n";
    std::fs::write(schema.join("types.graphql"), types).unwrap();
    let args = [
        "schema",
        "scaffold",
        "--schema",
        "schema",
        "--out",
        "schema/root.graphql",
    ];
    let root = schema.join("root.graphql");
    for _ in 0..2 {
        let o = gatehouse(dir.path(), &args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let written = std::fs::read_to_string(&root).unwrap();
    assert!(
        written.starts_with("# Generated by `gatehouse schema scaffold`"),
        "{written}"
    );

    // Edited by hand: kept, and the message says what to do.
    let edited = written.replace("  teams(", "  # the main list\n  teams(");
    std::fs::write(&root, &edited).unwrap();
    let o = gatehouse(dir.path(), &args);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("was edited since"), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&root).unwrap(), edited);
    let mut forced = args.to_vec();
    forced.push("--force");
    let o = gatehouse(dir.path(), &forced);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&root).unwrap(), written);

    // The types come to name an input the generated file declares.
    let naming = types.replace(
        "members: [Member!]!",
        "members(where: MemberWhere): [Member!]!",
    );
    std::fs::write(schema.join("types.graphql"), &naming).unwrap();
    let o = gatehouse(dir.path(), &args);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("MemberWhere"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("into a file of their own"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&root).unwrap(), written);
    // Split as it says: the input is kept as written and reused.
    std::fs::write(
        schema.join("inputs.graphql"),
        "input MemberWhere { name: String name_contains: String }\n",
    )
    .unwrap();
    let o = gatehouse(dir.path(), &args);
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

/// `check --explain` names each cascade that reaches a type whose own
/// rules would not let the caller touch its rows, and only those.
#[test]
fn check_explain_warns_where_a_cascade_passes_a_stricter_rule() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.graphql"),
        "type Query { projects: [Project!]! }\n\
         type Project @policy(all: {owner: \"$sub\"}) { id: ID! owner: String! files: [File!]! notes: [Note!]! }\n\
         type File @policy(read: {project: {owner: \"$sub\"}}, delete: {uploader: \"$sub\"}) {\n\
           id: ID! uploader: String! project: Project! @relation(onDelete: CASCADE) }\n\
         type Note { id: ID! project: Project! @relation(onDelete: CASCADE) }\n",
    )
    .unwrap();
    let o = gatehouse(dir.path(), &["check", "--schema", "s.graphql", "--explain"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("warning: deleting a Project deletes the File rows that reference it (File.project, onDelete: CASCADE) whatever File's delete rule would allow the caller"),
        "{out}"
    );
    assert!(!out.contains("deletes the Note rows"), "{out}");
}
