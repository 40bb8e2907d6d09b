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

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
