//! Metric handles kept per thread, so a hot path records into an atomic
//! instead of registering its labels with the recorder every time
//! (building the key, allocating and hashing it, a lock in the registry:
//! several percent of a small request).
//!
//! A handle belongs to the recorder it was registered with; when another
//! recorder is installed (none at first, then the Prometheus one; tests
//! install their own), handles are registered again.

/// The address of the recorder metrics go to now.
pub fn recorder_id() -> usize {
    metrics::with_recorder(|r| std::ptr::from_ref(r).cast::<()>() as usize)
}

/// Handles of one metric by the values of two static labels, for one
/// thread (keep it in a `thread_local!`). Meant for a handful of label
/// combinations: lookup is a linear scan.
#[derive(Debug)]
pub struct Handles<H> {
    recorder: usize,
    handles: Vec<(&'static str, &'static str, H)>,
}

impl<H> Handles<H> {
    /// No handles yet.
    pub const fn new() -> Self {
        Handles {
            recorder: 0,
            handles: Vec::new(),
        }
    }

    /// The handle for labels `(a, b)`, registered by `register` the first
    /// time on this thread for the current recorder.
    pub fn get(&mut self, a: &'static str, b: &'static str, register: impl FnOnce() -> H) -> &H {
        let recorder = recorder_id();
        if self.recorder != recorder {
            self.recorder = recorder;
            self.handles.clear();
        }
        let at = match self.handles.iter().position(|(x, y, _)| *x == a && *y == b) {
            Some(at) => at,
            None => {
                self.handles.push((a, b, register()));
                self.handles.len() - 1
            }
        };
        &self.handles[at].2
    }
}

impl<H> Default for Handles<H> {
    fn default() -> Self {
        Self::new()
    }
}
