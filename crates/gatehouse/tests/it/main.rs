//! End-to-end tests of the `gatehouse` binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli;
mod copy;
mod first_hour;
mod ops;
mod readme;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the binary with `args` in `cwd`, with no `GATEHOUSE_*` variables set.
pub fn gatehouse(cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    cmd.args(args).current_dir(cwd);
    for (k, _) in std::env::vars() {
        if k.starts_with("GATEHOUSE_") {
            cmd.env_remove(k);
        }
    }
    cmd.output().expect("the binary runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
