//! WAL checkpoints beside the committer.
//!
//! A checkpoint copies committed pages from the WAL into the database file
//! and syncs it. SQLite's auto-checkpoint runs it on the committing
//! connection, right after a commit, so the commit pipeline stood still for
//! every page the WAL had gathered (7 % of the committer's CPU in a profile
//! under load). This thread runs PASSIVE checkpoints on its own connection while
//! commits go on: they never block the writer and copy only what is
//! committed. The committer keeps its auto-checkpoint as the bound on the
//! WAL's size (only a checkpoint that has copied everything when the next
//! write starts lets that write restart the WAL from its beginning), and
//! when it comes due it finds almost every page already copied.
//!
//! Durability is unchanged: a checkpoint copies pages whose commit already
//! synced the WAL, syncs the WAL again before copying and the database file
//! after; a crash at any point leaves the WAL to be replayed.

use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::store::StoreError;

/// Least time between two background checkpoints: each syncs the WAL and the
/// database file, so they are spaced rather than run after every commit.
const INTERVAL: Duration = Duration::from_millis(100);

/// The handle the committing store keeps: pokes the thread after commits,
/// and stops it (waiting for a checkpoint in progress) when dropped.
pub(super) struct Checkpointer {
    poke: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens a connection of its own to `path` and starts the thread.
    pub(super) fn start(path: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path).map_err(|source| StoreError::Open { path: path.into(), source })?;
        // The checkpoint's own syncs follow its connection's setting.
        conn.pragma_update(None, "synchronous", "FULL")?;
        let (poke, pokes) = std::sync::mpsc::sync_channel(1);
        let path = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn(move || run(conn, &path, pokes))?;
        Ok(Checkpointer { poke: Some(poke), thread: Some(thread) })
    }

    /// A commit is done: a checkpoint is due within the interval.
    pub(super) fn committed(&self) {
        if let Some(poke) = &self.poke {
            // Full means a poke is already waiting; it stands for this one.
            let _ = poke.try_send(());
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.poke = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(conn: Connection, path: &Path, pokes: Receiver<()>) {
    // A poke that came during the pause: commits since the last checkpoint.
    let mut due = false;
    loop {
        if !due && pokes.recv().is_err() {
            return;
        }
        checkpoint(&conn, path);
        due = false;
        let until = Instant::now() + INTERVAL;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // A dropped sender ends the thread without waiting out the pause.
            match pokes.recv_timeout(left) {
                Ok(()) => due = true,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

fn checkpoint(conn: &Connection, path: &Path) {
    let _span = tracing::debug_span!("store.checkpoint", path = %path.display()).entered();
    let result = conn
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)));
    match result {
        Ok((wal_frames, copied)) => tracing::debug!(wal_frames, copied, "checkpoint"),
        // Nothing is lost: the committer's own checkpoint still bounds the
        // WAL, and the next poke tries again.
        Err(e) => tracing::warn!(error = %e, "background WAL checkpoint failed"),
    }
}
