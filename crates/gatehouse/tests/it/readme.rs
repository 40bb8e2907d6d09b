//! The README's five-minute tour, run as written against a real server: the
//! fenced `sh` blocks between `<!-- quickstart:begin -->` and
//! `<!-- quickstart:end -->` are one script. The `gatehouse serve` line is
//! what this test does itself (in the background, on a free port and a
//! fresh database); every other command runs in `sh -e` with `gatehouse`
//! on the PATH and the README's address replaced by the real one.

use std::path::Path;

use gatehouse_testkit::repo_root;

use crate::first_hour::sh;
use crate::serve;

/// The `sh` blocks of the quickstart section, in order.
fn quickstart_blocks(readme: &str) -> Vec<String> {
    let start = readme
        .find("<!-- quickstart:begin -->")
        .expect("the README marks its quickstart");
    let end = readme
        .find("<!-- quickstart:end -->")
        .expect("the README marks the end of its quickstart");
    let section = &readme[start..end];
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), text) => {
                block.push_str(text);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unclosed block in the quickstart");
    blocks
}

#[test]
fn readme_quickstart_runs_as_written() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = quickstart_blocks(&readme);
    assert!(blocks.len() >= 5, "{blocks:?}");
    let serve_line = "gatehouse serve --config examples/library/gatehouse.toml";
    assert_eq!(
        blocks[0].trim(),
        serve_line,
        "the tour starts by serving the example"
    );

    // `gatehouse serve --config examples/library/gatehouse.toml`, on a free
    // port and a fresh database.
    let data = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", data.path().join("library.db").display());
    let server = serve(
        &root,
        &[
            "--config",
            "examples/library/gatehouse.toml",
            "--listen",
            "127.0.0.1:0",
        ],
        &[
            ("GATEHOUSE_DATABASE", db.as_str()),
            ("GATEHOUSE_SECRET", "readme-test-key-secret-0123"),
        ],
    );
    let addr = server.base.trim_start_matches("http://").to_string();

    let bin_dir = Path::new(env!("CARGO_BIN_EXE_gatehouse")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!(
        "export PATH='{}'\n{}",
        path,
        blocks[1..].join("\n").replace("127.0.0.1:8080", &addr)
    );
    let out = sh(&root, &script);
    let logs = || server.logs().join("\n");

    // The token, then answers with the example's rows and the new book.
    for expected in [
        // the query
        "\"name\":\"Octavia E. Butler\"",
        "\"title\":\"The Dispossessed\"",
        // the subscription's event and the mutation's answer
        "event: next",
        "\"bookCreated\":{\"title\":\"Parable of the Sower\"",
        "\"createBook\":{\"id\":",
        // REST
        "\"title\":\"Kindred\"",
        "\"title\":\"A Wizard of Earthsea\"",
        // row policies: alice's note and pick; bob sees only the pick
        "\"createNote\":{\"owner\":",
        "\"createClubPick\":{\"club\":\"sf-readers\"",
        "{\"data\":{\"notes\":[],\"clubPicks\":[{\"comment\":\"for March\",\"book\":{\"title\":\"Kindred\"}}]}}",
        // GraphiQL's header
        "{\"Authorization\": \"Bearer ey",
    ] {
        assert!(
            out.contains(expected),
            "the tour's output lacks {expected}:\n{out}\nserver logs:\n{}",
            logs()
        );
    }
    assert!(!out.contains("\"errors\""), "{out}");
}

#[test]
fn the_example_loads_its_starter_rows_once() {
    let root = repo_root();
    let data = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", data.path().join("library.db").display());
    let env = [
        ("GATEHOUSE_DATABASE", db.as_str()),
        ("GATEHOUSE_SECRET", "readme-test-key-secret-0123"),
    ];
    let args = [
        "--config",
        "examples/library/gatehouse.toml",
        "--listen",
        "127.0.0.1:0",
    ];
    let count = |base: &str| {
        let script = format!(
            "T=$(curl -s -u demo-app:demo-secret-change-me -d grant_type=password \
             -d username=alice -d password=alice-password {base}/oauth/token \
             | sed -E 's/.*\"access_token\":\"([^\"]+)\".*/\\1/')\n\
             curl -s -H \"Authorization: Bearer $T\" '{base}/v1/books?fields=id'"
        );
        let out = sh(&root, &script);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_array().unwrap().len()
    };
    let server = serve(&root, &args, &env);
    assert_eq!(count(&server.base), 3);
    // Delete one; a restart does not put it back (the type has rows).
    sh(
        &root,
        &format!(
            "T=$(curl -s -u demo-app:demo-secret-change-me -d grant_type=password \
             -d username=alice -d password=alice-password -d 'scope=read write' {base}/oauth/token \
             | sed -E 's/.*\"access_token\":\"([^\"]+)\".*/\\1/')\n\
             curl -sf -X DELETE -H \"Authorization: Bearer $T\" {base}/v1/books/kindred",
            base = server.base
        ),
    );
    drop(server);
    let server = serve(&root, &args, &env);
    assert_eq!(count(&server.base), 2);
}
