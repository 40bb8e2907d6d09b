//! Log lines gathered in memory and written to stderr in batches.
//!
//! One log line per request means tens of thousands of lines a second under
//! load. Handing each line to a writer thread over a channel
//! (`tracing-appender`) costs a wake-up of that thread and a `write(2)` per
//! line, which on a loaded machine shows in the requests' tail latency
//! (`bench/RESULTS.md`, "The house redesign against the build before it").
//! Here a line is appended to a shared buffer under a mutex; a background
//! thread wakes when the buffer stops being empty, waits [`FLUSH_DELAY`] for
//! more lines to join it, and writes them all with one `write`. That is a
//! few wake-ups and writes per second instead of one per line.
//!
//! Nothing is dropped: past [`MAX_BUFFER`] bytes the logging call writes
//! the buffer itself (back-pressure, as a blocking writer would), and
//! dropping the [`FlushGuard`] writes what is left. Lines reach stderr at
//! most [`FLUSH_DELAY`] after they were logged, in the order they were
//! logged; a SIGKILL can lose that last fraction of a second of lines.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long the writer thread lets lines gather before writing them.
const FLUSH_DELAY: Duration = Duration::from_millis(10);

/// Above this many buffered bytes, the logging call writes the buffer itself.
const MAX_BUFFER: usize = 4 << 20;

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Held while a batch is written, so batches reach stderr in order.
    /// Taken only while `state` is held (lock order: `state`, then `out`).
    out: Mutex<()>,
}

#[derive(Default)]
struct State {
    buf: Vec<u8>,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the buffer half-written
        // in a way that matters for log output: keep going.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The writer handed to `tracing_subscriber` (one [`LineWriter`] per event).
#[derive(Clone)]
pub(crate) struct BufferedStderr {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BufferedStderr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferedStderr").finish_non_exhaustive()
    }
}

/// Writes what is still buffered and stops the writer thread when dropped.
#[derive(Debug)]
#[must_use = "dropping the guard stops log output"]
pub(crate) struct FlushGuard {
    writer: BufferedStderr,
    thread: Option<JoinHandle<()>>,
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        self.writer.shared.lock().closed = true;
        self.writer.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Lines logged after the thread stopped (none in practice).
        let rest = std::mem::take(&mut self.writer.shared.lock().buf);
        write_out(&rest);
    }
}

fn write_out(bytes: &[u8]) {
    if !bytes.is_empty() {
        // Nowhere to report a failed write to stderr.
        let _ = io::stderr().lock().write_all(bytes);
    }
}

/// A buffered stderr and the guard that flushes it. Falls back to writing
/// each line directly if the writer thread cannot be started.
pub(crate) fn stderr() -> (BufferedStderr, FlushGuard) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
        out: Mutex::new(()),
    });
    let writer = BufferedStderr {
        shared: shared.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("gatehouse-log".into())
        .spawn(move || flush_loop(&shared))
        .ok();
    if thread.is_none() {
        writer.shared.lock().closed = true;
    }
    let guard = FlushGuard {
        writer: writer.clone(),
        thread,
    };
    (writer, guard)
}

fn flush_loop(shared: &Shared) {
    let mut spare = Vec::new();
    loop {
        let mut state = shared.lock();
        while state.buf.is_empty() && !state.closed {
            state = shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.buf.is_empty() {
            return;
        }
        if !state.closed {
            // Let the lines of the next few milliseconds join this write.
            drop(state);
            std::thread::sleep(FLUSH_DELAY);
            state = shared.lock();
        }
        // Swap buffers so logging never waits for the write.
        let out = shared.out.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::swap(&mut state.buf, &mut spare);
        let closed = state.closed;
        drop(state);
        write_out(&spare);
        drop(out);
        spare.clear();
        if closed && shared.lock().buf.is_empty() {
            return;
        }
    }
}

/// One event's output: `tracing_subscriber` formats a whole line and writes
/// it with one `write_all`, so a line is never split between batches.
pub(crate) struct LineWriter<'a> {
    shared: &'a Shared,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut state = self.shared.lock();
        if state.closed {
            // No writer thread: write through, as stderr would.
            drop(state);
            write_out(bytes);
            return Ok(bytes.len());
        }
        let was_empty = state.buf.is_empty();
        if state.buf.len() + bytes.len() > MAX_BUFFER {
            // The writer thread is behind: write in this thread rather than
            // grow without bound or drop lines.
            // Waits for a batch being written, which is older.
            let _out = self
                .shared
                .out
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let full = std::mem::take(&mut state.buf);
            write_out(&full);
        }
        state.buf.extend_from_slice(bytes);
        drop(state);
        if was_empty {
            self.shared.wake.notify_one();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BufferedStderr {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            shared: &self.shared,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_written_before_the_guard_drops_are_flushed_in_order() {
        let (writer, guard) = stderr();
        for i in 0..1000 {
            let line = format!("line {i}\n");
            writer.make_writer().write_all(line.as_bytes()).ok();
        }
        drop(guard);
        assert!(writer.shared.lock().buf.is_empty());
        assert!(writer.shared.lock().closed);
    }

    #[test]
    fn after_close_lines_are_written_through() {
        let (writer, guard) = stderr();
        drop(guard);
        writer.make_writer().write_all(b"late line\n").ok();
        assert!(writer.shared.lock().buf.is_empty());
    }
}
