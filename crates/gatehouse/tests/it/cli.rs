use gatehouse_testkit::repo_root;

use crate::{gatehouse, stderr, stdout};

#[test]
fn check_accepts_the_example() {
    let o = gatehouse(
        &repo_root(),
        &["check", "--schema", "examples/library/schema"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "ok: 9 types, 13 queries, 20 mutations, 4 subscriptions\n"
    );
}

#[test]
fn check_explain_prints_relation_rules_with_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("orgs.graphql"),
        r#"
enum Role { OWNER MEMBER }
type Org @policy(read: {members_some: {user: "$sub"}}, create: {createdBy: "$sub"}) {
  id: ID! name: String! createdBy: String! members: [Member!]! }
type Member @policy(write: {org: {OR: [{createdBy: "$sub"}, {members_some: {user: "$sub", role: OWNER}}]}}) {
  id: ID! org: Org! user: String! role: Role! }
"#,
    )
    .unwrap();
    let o = gatehouse(dir.path(), &["check", "--schema", ".", "--explain"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for line in [
        "  read    {members_some: {user: \"$sub\"}}\n",
        "  create  {createdBy: \"$sub\"}\n",
        "  update  {org: {OR: [{createdBy: \"$sub\"}, {members_some: {AND: [{user: \"$sub\"}, {role: \"OWNER\"}]}}]}}\n",
        "  note    `_some`/`_every`/`_none` read the rows they reach without those rows' policies, and leave out the row being created or updated\n",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
}

#[test]
fn check_reads_the_schema_from_the_config() {
    let o = gatehouse(
        &repo_root(),
        &["check", "--config", "examples/library/gatehouse.toml"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn extending_query_in_a_second_file_fails_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo_root().join("examples/library/schema")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    std::fs::write(
        dir.path().join("more.graphql"),
        "extend type Query {\n  bookByTitle(title: String!): Book\n}\n",
    )
    .unwrap();
    let o = gatehouse(dir.path(), &["check", "--schema", "."]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("./more.graphql:1:1: error: `extend type Query` in ./more.graphql")
            && err.contains("is defined in ./root.graphql"),
        "{err}"
    );
    assert!(err.ends_with("error: the schema has 1 problem\n"), "{err}");
}

#[test]
fn check_reports_every_problem_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.graphqls"),
        "scalar Money\ntype Book { id: ID! price: Money }\ntype Query { books(sort: String): [Book!]! }\n",
    )
    .unwrap();
    let o = gatehouse(dir.path(), &["check", "--schema", "s.graphqls"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("s.graphqls:1:1: error: custom scalar `Money` is not supported"),
        "{err}"
    );
    assert!(
        err.contains("s.graphqls:3:20: error: argument `sort` of `Query.books` binds to nothing"),
        "{err}"
    );
    assert!(err.contains("  = hint: "), "{err}");
}

#[test]
fn check_of_a_missing_directory_exits_1() {
    let o = gatehouse(&repo_root(), &["check", "--schema", "no/such/dir"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no/such/dir: error: cannot read file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn schema_print_is_standalone_sdl() {
    let o = gatehouse(
        &repo_root(),
        &["schema", "print", "--schema", "examples/library/schema"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let sdl = stdout(&o);
    assert!(
        sdl.contains("directive @relation(field: String, onDelete: OnDelete, through: String) on FIELD_DEFINITION")
    );
    assert!(sdl.contains("enum OnDelete"));
    assert!(sdl.contains("scalar Date"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("printed.graphql"), &sdl).unwrap();
    let again = gatehouse(dir.path(), &["check", "--schema", "printed.graphql"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
}

#[test]
fn schema_scaffold_from_types_alone_makes_a_valid_schema() {
    let dir = tempfile::tempdir().unwrap();
    let types = "type Team { id: ID! name: String! @unique members: [Member!]! }\ntype Member { id: ID! email: String! joined: Date team: Team! }\n";
    std::fs::write(dir.path().join("types.graphql"), types).unwrap();
    let o = gatehouse(
        dir.path(),
        &["schema", "scaffold", "--schema", "types.graphql"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let scaffold = stdout(&o);
    assert!(scaffold.contains(
        "teams(first: Int, offset: Int, where: TeamWhere, orderBy: [TeamOrderBy!]): [Team!]!"
    ));
    std::fs::write(dir.path().join("root.graphql"), &scaffold).unwrap();
    let o = gatehouse(dir.path(), &["check", "--schema", "."]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn bad_config_is_reported_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gatehouse.toml"),
        "[limits]\nmax_depht = 3\n",
    )
    .unwrap();
    let o = gatehouse(dir.path(), &["check"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("max_depht"), "{}", stderr(&o));
}

#[test]
fn consumer_add_list_remove() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("data/t.db").display());
    let schema = repo_root().join("examples/library/schema");
    let schema = schema.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--database", db.as_str(), "--schema", schema]);
        gatehouse(dir.path(), &all)
    };
    let o = run(&[
        "consumer",
        "add",
        "printer",
        "--scopes",
        "read write",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["consumer_key"], "printer");
    let secret = v["consumer_secret"].as_str().unwrap().to_string();
    assert_eq!(secret.len(), 43);

    let o = run(&["consumer", "add", "printer"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));

    // Users, clients and consumers share one namespace of names.
    let o = run(&["client", "add", "printer", "--grants", "client_credentials"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("\"printer\" is already taken by a consumer"),
        "{}",
        stderr(&o)
    );

    let o = run(&["consumer", "list", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v[0]["consumer_key"], "printer");
    assert_eq!(v[0]["scopes"], serde_json::json!(["read", "write"]));
    assert!(!stdout(&o).contains(&secret));

    // The secret is sealed at rest, never stored as text.
    let bytes = std::fs::read(dir.path().join("data/t.db")).unwrap();
    let wal = std::fs::read(dir.path().join("data/t.db-wal")).unwrap_or_default();
    for file in [&bytes, &wal] {
        assert!(!file.windows(secret.len()).any(|w| w == secret.as_bytes()));
    }

    let o = run(&["consumer", "remove", "printer"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["consumer", "remove", "printer"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn client_add_registers_code_flow_clients() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("data/t.db").display());
    let schema = repo_root().join("examples/library/schema");
    let schema = schema.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--database", db.as_str(), "--schema", schema]);
        gatehouse(dir.path(), &all)
    };
    // A public first-party app: no secret shown; grants default to the
    // code flow's.
    let o = run(&[
        "client",
        "add",
        "spa",
        "--redirect-uri",
        "https://app.example/cb",
        "--redirect-uri",
        "http://127.0.0.1/cb",
        "--public",
        "--first-party",
        "--scopes",
        "read",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v, serde_json::json!({"client_id": "spa"}));
    let o = run(&["client", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v[0]["grants"],
        serde_json::json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(v[0]["public"], true);
    assert_eq!(v[0]["first_party"], true);
    assert_eq!(
        v[0]["redirect_uris"],
        serde_json::json!(["https://app.example/cb", "http://127.0.0.1/cb"])
    );
    // A confidential one gets a secret.
    let o = run(&[
        "client",
        "add",
        "web",
        "--redirect-uri",
        "https://web.example/cb",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["client_secret"].as_str().unwrap().len(), 43);
    // Unsafe redirect URIs and secret-bound grants of public clients are refused.
    for bad in [
        vec!["--redirect-uri", "http://app.example/cb"],
        vec!["--redirect-uri", "https://app.example/cb#x"],
        vec!["--redirect-uri", "javascript:alert(1)"],
        vec!["--grants", "password", "--public"],
        vec!["--grants", "authorization_code"],
    ] {
        let mut args = vec!["client", "add", "bad"];
        args.extend(bad.iter().copied());
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{bad:?}: {}", stdout(&o));
    }
}

#[test]
fn user_claims_are_added_replaced_cleared_and_listed() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("data/t.db").display());
    // Users kept in the server's tables: no account type.
    let schema = crate::library_schema_without_accounts();
    let args = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(["--database".into(), db.clone()]);
        for file in &schema {
            all.extend(["--schema".into(), file.display().to_string()]);
        }
        all
    };
    let run = |a: &[&str]| {
        let all = args(a);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        gatehouse(dir.path(), &all)
    };
    let json = |o: &std::process::Output| -> serde_json::Value {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
        serde_json::from_str(&stdout(o)).unwrap()
    };

    // `user add` reads the password from stdin.
    let mut child = crate::bin()
        .args(args(&[
            "user", "add", "alice", "--claim", "org=acme", "--claim", "level=2", "--json",
        ]))
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"alice-password\n")
        .unwrap();
    let v = json(&child.wait_with_output().unwrap());
    // Command-line values are strings.
    assert_eq!(
        v["claims"],
        serde_json::json!({"org": "acme", "level": "2"})
    );

    let v = json(&run(&["user", "show", "alice", "--json"]));
    assert_eq!(
        v["claims"],
        serde_json::json!({"org": "acme", "level": "2"})
    );

    // Replaced as a whole.
    let v = json(&run(&["user", "set-claims", "alice", "team=x", "--json"]));
    assert_eq!(v["claims"], serde_json::json!({"team": "x"}));
    let v = json(&run(&["user", "list", "--json"]));
    assert_eq!(v[0]["claims"], serde_json::json!({"team": "x"}));
    let o = run(&["user", "list"]);
    assert!(
        stdout(&o).contains("claims={\"team\":\"x\"}"),
        "{}",
        stdout(&o)
    );

    // Refused with a clear message, and nothing changes.
    for (pair, needle) in [
        ("sub=bob", "reserved"),
        ("9lives=x", "invalid claim name"),
        ("org", "NAME=VALUE"),
    ] {
        let o = run(&["user", "set-claims", "alice", pair]);
        assert_eq!(o.status.code(), Some(1), "{pair}");
        assert!(stderr(&o).contains(needle), "{pair}: {}", stderr(&o));
    }
    let o = run(&["user", "add", "bob", "--claim", "exp=1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("reserved"), "{}", stderr(&o));
    let v = json(&run(&["user", "show", "alice", "--json"]));
    assert_eq!(v["claims"], serde_json::json!({"team": "x"}));

    // No pairs: cleared.
    let o = run(&["user", "set-claims", "alice"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("removed the claims of alice"));
    let v = json(&run(&["user", "show", "alice", "--json"]));
    assert_eq!(v["claims"], serde_json::json!({}));

    let o = run(&["user", "set-claims", "nobody", "org=x"]);
    assert_eq!(o.status.code(), Some(1));
}

/// `gatehouse migrate` creates the OAuth tables beside the Model's, so a
/// deployment that migrates before starting its servers has them all;
/// `--plan` creates nothing.
#[test]
fn migrate_creates_the_oauth_tables_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let url = format!("sqlite://{}", path.display());
    let args = [
        "--schema",
        "examples/library/schema",
        "--database",
        url.as_str(),
    ];
    let tables = || {
        let c = rusqlite::Connection::open(&path).unwrap();
        let mut q = c
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                 AND name LIKE '\\_gatehouse\\_oauth%' ESCAPE '\\' ORDER BY name",
            )
            .unwrap();
        q.query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    };
    let plan = gatehouse(&repo_root(), &[&["migrate", "--plan"][..], &args].concat());
    assert_eq!(plan.status.code(), Some(0), "{}", stderr(&plan));
    assert!(tables().is_empty(), "--plan created tables");
    let o = gatehouse(&repo_root(), &[&["migrate"][..], &args].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let made = tables();
    for t in [
        "_gatehouse_oauth_clients",
        "_gatehouse_oauth_keys",
        "_gatehouse_oauth_tokens",
    ] {
        assert!(made.iter().any(|m| m == t), "{t} missing: {made:?}");
    }
}
