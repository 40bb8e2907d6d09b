//! End-to-end tests of the `gatehouse` binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod accounts;
mod cli;
mod copy;
mod errors;
mod example_groups;
mod first_hour;
mod mailflows;
mod ops;
mod providers;
mod readme;
mod webhooks;

use std::path::Path;
use std::process::{Command, Output};

use gatehouse_testkit::ServerProcess;

/// The binary, with no `GATEHOUSE_*` variables set.
pub fn bin() -> Command {
    gatehouse_testkit::command(env!("CARGO_BIN_EXE_gatehouse"))
}

/// Runs the binary with `args` in `cwd`, with no `GATEHOUSE_*` variables set.
pub fn gatehouse(cwd: &Path, args: &[&str]) -> Output {
    bin()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the binary runs")
}

/// Starts `gatehouse serve ARGS` in `cwd` with the variables `env` (a
/// port-0 listener is the caller's to ask for) and waits for its address.
pub fn serve(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> ServerProcess {
    let mut cmd = bin();
    cmd.arg("serve")
        .args(args)
        .current_dir(cwd)
        .envs(env.iter().copied());
    ServerProcess::start(cmd)
}

/// The example's schema without its account type (`accounts.graphql`,
/// and the root field that returns it), for tests of users kept in the
/// server's own tables with claims set by hand: a copy under the target
/// directory, written once per test process (each file by a rename, so
/// processes running at once never read half of one).
pub fn library_schema_without_accounts() -> Vec<std::path::PathBuf> {
    static COPY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let copy = COPY.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("library-without-accounts");
        std::fs::create_dir_all(&dir).unwrap();
        let from = gatehouse_testkit::repo_root().join("examples/library/schema");
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if name == "accounts.graphql" {
                continue;
            }
            let text: String = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .filter(|l| !l.contains("[User!]!") && !l.contains("The caller's own account"))
                .map(|l| format!("{l}\n"))
                .collect();
            let part = dir.join(format!(".{name}.{}", std::process::id()));
            std::fs::write(&part, text).unwrap();
            std::fs::rename(&part, dir.join(&name)).unwrap();
        }
        dir
    });
    let mut files: Vec<_> = std::fs::read_dir(copy)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "graphql"))
        .collect();
    files.sort();
    files
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
