//! Reading SQLite's WAL index (the `-shm` file) to tell whether anything
//! was committed since a read snapshot began, without taking a lock.
//!
//! The WAL index's layout is part of SQLite's file format, shared by every
//! process and SQLite version using the database
//! (<https://sqlite.org/walformat.html>): it starts with the header
//! (48 bytes) twice, then the checkpoint's progress (`nBackfill`). Every
//! commit, by any connection of any process, rewrites the header (its
//! change counter, last frame and checksum) before it returns, and every
//! checkpoint that copies frames advances `nBackfill`. So while these
//! 100 bytes are unchanged, nothing was committed and nothing checkpointed.
//!
//! Opening the file is the delicate part: closing *any* descriptor of a file
//! releases every POSIX lock the process holds on it, SQLite's own included
//! (its read locks, and the lock telling other processes that the index is
//! in use). So each index (each inode: SQLite removes the file when the
//! database's last connection closes, and creates it anew) is opened once
//! for the process, shared by
//! every connection to that database, and closed only when the last of them
//! has closed: each connection holds an [`Index`] handle and drops it after
//! itself. A store takes its first handle before it opens a connection when
//! the index exists already (another store of the process may use it), and
//! once its write connection has created it otherwise.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The start of the WAL index, as read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WalState([u8; 100]);

/// The header's `iVersion` (in native byte order, as SQLite writes it).
const VERSION: u32 = 3_007_000;

/// An open WAL index: its inode (device, number), the file, and how many
/// handles use it.
type Entry = ((u64, u64), Arc<File>, usize);

/// The process's open WAL indexes.
static OPEN: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Descriptors that must never be closed (see [`Index::open`]).
static KEPT: Mutex<Vec<File>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<Entry>> {
    // Every update is a single push, count or removal: nothing half done.
    OPEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A handle on one database's WAL index, shared by its connections.
#[derive(Debug)]
pub(crate) struct Index {
    inode: (u64, u64),
    /// `None` only while being dropped.
    file: Option<Arc<File>>,
}

impl Index {
    /// A handle on the WAL index of the database at `db`; `None` if it does
    /// not exist (yet) or cannot be read.
    pub fn open(db: &Path) -> Option<Index> {
        // SQLite names it after the file the path resolves to.
        let mut name = std::fs::canonicalize(db).ok()?.into_os_string();
        name.push("-shm");
        let path = PathBuf::from(name);
        let mut open = registry();
        let inode = inode(&std::fs::metadata(&path).ok()?)?;
        if let Some(entry) = open.iter_mut().find(|e| e.0 == inode) {
            entry.2 += 1;
            return Some(Index {
                inode,
                file: Some(entry.1.clone()),
            });
        }
        let file = File::open(&path).ok()?;
        let opened = file.metadata().ok().as_ref().and_then(self::inode);
        if opened != Some(inode) {
            // Replaced between the two looks: this descriptor's inode may
            // carry our connections' locks, so it is never closed.
            if let Ok(mut kept) = KEPT.lock() {
                kept.push(file);
            }
            return None;
        }
        let file = Arc::new(file);
        open.push((inode, file.clone(), 1));
        Some(Index {
            inode,
            file: Some(file),
        })
    }
}

impl Clone for Index {
    fn clone(&self) -> Index {
        if let Some(entry) = registry().iter_mut().find(|e| e.0 == self.inode) {
            entry.2 += 1;
        }
        Index {
            inode: self.inode,
            file: self.file.clone(),
        }
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        let mut open = registry();
        if let Some(i) = open.iter().position(|e| e.0 == self.inode) {
            open[i].2 -= 1;
            if open[i].2 == 0 {
                open.swap_remove(i);
            }
        }
        // With the registry held: the last handle closes the file before
        // another store of the process can look for it.
        drop(self.file.take());
    }
}

impl Index {
    /// The index's current state, if it holds an initialised one.
    pub fn read(&self) -> Option<WalState> {
        read(self.file.as_deref()?)
    }
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(unix)]
fn read(file: &File) -> Option<WalState> {
    use std::os::unix::fs::FileExt;
    let mut bytes = [0u8; 100];
    file.read_exact_at(&mut bytes, 0).ok()?;
    let version = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    // `isInit` is byte 12 of the header.
    (version == VERSION && bytes[12] == 1).then_some(WalState(bytes))
}

// Elsewhere snapshots are not kept: each statement is its own transaction.
#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> Option<(u64, u64)> {
    None
}

#[cfg(not(unix))]
fn read(_: &File) -> Option<WalState> {
    None
}
