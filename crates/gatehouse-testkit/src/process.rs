//! The `gatehouse` binary as a child process.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a start may take before the test fails.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A command running `program` with none of the test environment's
/// `GATEHOUSE_*` variables (a developer's or CI's settings would change
/// what the binary does). Pass `env!("CARGO_BIN_EXE_gatehouse")`.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GATEHOUSE_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// A running server process with its output captured, killed on drop.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    /// `http://127.0.0.1:PORT` or `https://...`.
    pub base: String,
    /// `http://ADDR/metrics` when the process serves metrics.
    pub metrics_url: Option<String>,
    /// The stderr lines (the logs).
    logs: Arc<Mutex<Vec<String>>>,
    /// The stdout lines.
    out: Arc<Mutex<Vec<String>>>,
    /// A directory the process uses, removed after the process ends.
    dir: Option<tempfile::TempDir>,
}

impl ServerProcess {
    /// Spawns `cmd` (a `gatehouse serve`, built with [`command`]) and waits
    /// for the address it listens on: stdout's `gatehouse listening on URL`
    /// line, or the `listening` event's `url` of JSON logs on stderr.
    /// Panics with the logs when the process ends or stays silent instead.
    pub fn start(mut cmd: Command) -> ServerProcess {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::new(Mutex::new(Vec::new()));
        let (found, addresses) = mpsc::channel::<(&str, String)>();
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        let tell = found.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) {
                    for (message, key) in [("listening", "base"), ("serving metrics", "metrics")] {
                        if event["message"] == message
                            && let Some(url) = event["url"].as_str()
                        {
                            let _ = tell.send((key, url.to_string()));
                        }
                    }
                }
                sink.lock().unwrap().push(line);
            }
            let _ = tell.send(("closed", String::new()));
        });
        let stdout = child.stdout.take().unwrap();
        let sink = out.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.trim().strip_prefix("gatehouse metrics on ") {
                    let _ = found.send(("metrics", rest.to_string()));
                }
                if let Some(rest) = line.trim().strip_prefix("gatehouse listening on ") {
                    let _ = found.send(("base", rest.to_string()));
                }
                sink.lock().unwrap().push(line);
            }
            let _ = found.send(("closed", String::new()));
        });
        let mut base = None;
        let mut metrics_url = None;
        let mut closed = 0;
        while base.is_none() && closed < 2 {
            match addresses.recv_timeout(START_LIMIT) {
                Ok(("base", url)) => base = Some(url),
                Ok(("metrics", url)) => metrics_url = Some(url),
                Ok(_) => closed += 1,
                Err(_) => break,
            }
        }
        let Some(base) = base else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the server did not start:\n{}",
                logs.lock().unwrap().join("\n")
            );
        };
        // A JSON `serving metrics` event comes before `listening`; its URL
        // may still be in the channel.
        while let Ok((key, url)) = addresses.try_recv() {
            if key == "metrics" {
                metrics_url = Some(url);
            }
        }
        ServerProcess {
            child,
            base,
            metrics_url,
            logs,
            out,
            dir: None,
        }
    }

    /// Keeps `dir` (the process's configuration or working directory)
    /// until the process has been killed.
    pub fn with_dir(mut self, dir: tempfile::TempDir) -> ServerProcess {
        self.dir = Some(dir);
        self
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        self.base.split("://").nth(1).unwrap().to_string()
    }

    /// Every stdout line so far.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.out.lock().unwrap().clone()
    }

    /// Every log (stderr) line so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// Waits up to `limit` for a log line containing `needle`; the logs so
    /// far. The binary writes its logs in batches from another thread, so
    /// a line logged before `listening` may be read after it.
    pub fn wait_for_log(&self, needle: &str, limit: Duration) -> Vec<String> {
        let start = Instant::now();
        loop {
            let logs = self.logs();
            if logs.iter().any(|l| l.contains(needle)) || start.elapsed() >= limit {
                return logs;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` (e.g. `TERM`, `HUP`) to the process.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits up to `limit` for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the log reader catch the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// SIGTERM, then asserts a clean exit; returns the logs.
    pub fn stop(mut self) -> Vec<String> {
        self.signal("TERM");
        let status = self.wait_exit(Duration::from_secs(10));
        assert!(
            status.is_some_and(|s| s.success()),
            "exit status {status:?}; logs:\n{}",
            self.logs().join("\n")
        );
        self.logs()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.dir.take());
    }
}
