//! `gatehouse init [DIR]`: a starter service in a directory: a schema of
//! one type, a config with a local-only client and user, and the three
//! commands to try next.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

/// The starter type. The root fields come from `schema scaffold`, so they
/// always follow the binding conventions of this version.
const NOTE_TYPE: &str = "\
# A note. Add fields, or more types, then run `gatehouse schema scaffold
# --schema schema --out schema/root.graphql` to regenerate the root fields.
type Note {
  id: ID!
  title: String!
  body: String
  done: Boolean
}
";

/// What `init` wrote and generated, for the message printed after.
#[derive(Debug)]
pub(crate) struct Created {
    pub dir: PathBuf,
    pub client_id: &'static str,
    pub client_secret: String,
    pub username: &'static str,
    pub password: String,
}

/// Writes the starter files into `dir` (created when missing). Refuses to
/// overwrite an existing `gatehouse.toml` or `schema` directory.
pub(crate) fn write(dir: &Path) -> anyhow::Result<Created> {
    let config = dir.join("gatehouse.toml");
    let schema = dir.join("schema");
    for existing in [&config, &schema] {
        if existing.exists() {
            anyhow::bail!(
                "{} already exists; `gatehouse init` only writes into a directory without one",
                existing.display()
            );
        }
    }
    let random = gatehouse_auth::SystemRandom;
    let created = Created {
        dir: dir.to_path_buf(),
        client_id: "local-app",
        client_secret: gatehouse_auth::generate_client_secret(&random),
        username: "me",
        password: gatehouse_auth::generate_client_secret(&random),
    };
    let key_secret = gatehouse_auth::generate_server_secret(&random);

    let model = gatehouse_schema::load_sources_with(
        &[gatehouse_schema::Source {
            path: "note.graphql".into(),
            text: NOTE_TYPE.into(),
        }],
        gatehouse_schema::LoadOptions {
            require_query: false,
        },
    )
    .map_err(|d| anyhow::anyhow!("the starter schema does not load:\n{d}"))?;
    let root = gatehouse_schema::scaffold_file(&model);

    std::fs::create_dir_all(&schema).with_context(|| format!("creating {}", schema.display()))?;
    let files = [
        (schema.join("note.graphql"), NOTE_TYPE.to_string()),
        (schema.join("root.graphql"), root),
    ];
    for (path, text) in files {
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    // It holds a client secret, a password and a GATEHOUSE_SECRET value.
    crate::auth::write_private(&config, &config_text(&created, &key_secret))?;
    Ok(created)
}

fn config_text(c: &Created, key_secret: &str) -> String {
    format!(
        r#"# A starter gatehouse service, written by `gatehouse init`.
#
# FOR LOCAL USE ONLY. The client secret and the password below were
# generated for this directory and sit here in clear text; the service
# listens on 127.0.0.1 only. Before anyone else can reach it, register
# clients and users with `gatehouse client add` / `gatehouse user add`
# (their secrets are stored hashed) and delete the [[bootstrap.*]] entries.
#
# The token signing keys are encrypted with the GATEHOUSE_SECRET environment
# variable when it is set (16 characters or more; every instance on one
# database needs the same value), else with a key file created beside the
# database. A value generated for you, to keep in your secret store:
#
#   export GATEHOUSE_SECRET={key_secret}

listen = "127.0.0.1:8080"
database = "sqlite://data/gatehouse.db"   # relative to this file
schema = ["schema"]                        # relative to this file

[[bootstrap.clients]]
client_id = "{client_id}"
client_secret = "{client_secret}"
grants = ["password", "client_credentials", "refresh_token"]
scopes = ["read", "write", "offline_access"]

[[bootstrap.users]]
username = "{username}"
password = "{password}"
scopes = ["read", "write", "offline_access"]
"#,
        client_id = c.client_id,
        client_secret = c.client_secret,
        username = c.username,
        password = c.password,
    )
}

/// The three commands to try next, as printed (one per line, after `$ `).
pub(crate) fn next_commands(c: &Created) -> [String; 3] {
    let cd = if c.dir == Path::new(".") {
        String::new()
    } else {
        format!("cd {} && ", shell_word(&c.dir.display().to_string()))
    };
    [
        format!("{cd}gatehouse serve"),
        format!(
            "TOKEN=$(curl -s -u {}:{} -d grant_type=password -d username={} -d password={} \
             -d 'scope=read write' http://127.0.0.1:8080/oauth/token \
             | sed -E 's/.*\"access_token\":\"([^\"]+)\".*/\\1/')",
            c.client_id, c.client_secret, c.username, c.password
        ),
        "curl -s -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \
         -d '{\"query\":\"mutation { createNote(input: {title: \\\"hello\\\"}) { id title } }\"}' \
         http://127.0.0.1:8080/graphql"
            .to_string(),
    ]
}

/// `DIR` quoted for a POSIX shell when it needs it.
fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_'))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Runs `gatehouse init [DIR]`.
pub(crate) fn run(dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let dir = dir.unwrap_or_else(|| PathBuf::from("."));
    let created = write(&dir)?;
    let [serve, token, query] = next_commands(&created);
    println!(
        "Wrote {config}, {schema}/note.graphql and {schema}/root.graphql.\n\
         \n\
         Next, in one terminal, start the service:\n\
         \n\
         $ {serve}\n\
         \n\
         In another, get a token for the user `{user}` through the client `{client}`\n\
         (both only in gatehouse.toml, for local use), then create a note:\n\
         \n\
         $ {token}\n\
         $ {query}\n\
         \n\
         GraphiQL is at http://127.0.0.1:8080/graphql: paste {{\"Authorization\": \"Bearer <token>\"}}\n\
         into its Headers tab. Register real clients and users with `gatehouse client add`\n\
         and `gatehouse user add`.",
        config = dir.join("gatehouse.toml").display(),
        schema = dir.join("schema").display(),
        user = created.username,
        client = created.client_id,
    );
    Ok(ExitCode::SUCCESS)
}
