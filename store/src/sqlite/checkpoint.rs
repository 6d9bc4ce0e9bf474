//! WAL checkpoints beside the committer.
//!
//! A checkpoint copies committed pages from the WAL into the database file
//! and syncs both. SQLite's auto-checkpoint runs it on the committing
//! connection right after a commit, so the whole commit pipeline stood
//! still while it copied everything the WAL had gathered: in the durable
//! benchmark, a commit of a few hundred rows took 27-38 ms instead of ~5
//! whenever one came due, several times a second.
//!
//! Here a thread with a connection of its own runs PASSIVE checkpoints once
//! the WAL holds [`BACKGROUND_AT`] pages. A passive checkpoint never blocks
//! the writer and copies only committed frames. The committer keeps the
//! auto-checkpoint's bound ([`BOUND`]) itself: a checkpoint that finishes
//! while commits go on leaves newer frames behind, and only a WAL copied to
//! its end when a write starts lets that write restart it from the
//! beginning. When the bound comes due, most pages are already copied.
//!
//! Below [`BACKGROUND_AT`] nothing changes: a small WAL is checkpointed
//! only by the committer, as before, so a store on a nearly full disk still
//! has to grow its WAL to commit, and says so with `SQLITE_FULL`.
//!
//! Durability is unchanged: a checkpoint syncs the WAL before it copies and
//! the database file after, and a crash at any point leaves the WAL to be
//! replayed.

use std::cell::Cell;
use std::ffi::c_int;
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender};
use std::thread::JoinHandle;

use rusqlite::Connection;
use rusqlite::hooks::Wal;

use crate::StoreError;

/// WAL pages from which the background thread checkpoints (~8 MiB).
pub(super) const BACKGROUND_AT: c_int = 2_000;

/// WAL pages at which the committer checkpoints itself, as SQLite's
/// auto-checkpoint would (~40 MiB): under load, checkpoints every 4 MiB
/// (SQLite's default) were a sixth of the writer's time.
pub(super) const BOUND: c_int = 10_000;

thread_local! {
    /// The WAL's size in pages after this thread's last commit, as SQLite
    /// reports it to the commit hook.
    static WAL_PAGES: Cell<c_int> = const { Cell::new(0) };
}

/// Installs the committer's WAL hook on `conn`, in place of SQLite's
/// auto-checkpoint (which is itself a WAL hook).
pub(super) fn install_hook(conn: &Connection) {
    conn.wal_hook(Some(after_commit));
}

/// The WAL's size after the last commit made on this thread.
pub(super) fn wal_pages_after_commit() -> c_int {
    WAL_PAGES.get()
}

fn after_commit(wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    WAL_PAGES.set(pages);
    if pages >= BOUND {
        // As SQLite's own auto-checkpoint: the commit has happened, and an
        // error here (busy, since the background thread is copying) would
        // report it as failed. The next commit tries again.
        let _ = wal.checkpoint();
    }
    Ok(())
}

/// The committing store's handle: pokes the thread when the WAL has grown,
/// and stops it (after a checkpoint in progress) when dropped.
pub(super) struct Checkpointer {
    poke: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens a connection of its own to `path` and starts the thread.
    pub(super) fn start(path: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path).map_err(|source| StoreError::Open { path: path.into(), source })?;
        // A checkpoint's own syncs follow its connection's setting.
        conn.pragma_update(None, "synchronous", "FULL")?;
        let (poke, pokes) = std::sync::mpsc::sync_channel(1);
        let path = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn(move || run(&conn, &path, &pokes))?;
        Ok(Checkpointer { poke: Some(poke), thread: Some(thread) })
    }

    /// A commit left the WAL at `pages`: past [`BACKGROUND_AT`], a
    /// checkpoint is due.
    pub(super) fn committed(&self, pages: c_int) {
        if pages < BACKGROUND_AT {
            return;
        }
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

fn run(conn: &Connection, path: &Path, pokes: &Receiver<()>) {
    while pokes.recv().is_ok() {
        let _span = tracing::debug_span!("store.checkpoint", path = %path.display()).entered();
        let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match result {
            Ok((wal_frames, copied)) => tracing::debug!(wal_frames, copied, "checkpoint"),
            // Nothing is lost: the committer's own checkpoint still bounds
            // the WAL, and the next poke tries again.
            Err(e) => tracing::warn!(error = %e, path = %path.display(), "background WAL checkpoint failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The WAL's frame count, read from its file: 32 bytes of header, then
    /// frames of a 24-byte header and one page each.
    fn wal_frames(db: &Path, page_size: u64) -> u64 {
        let wal = std::fs::metadata(format!("{}-wal", db.display())).map(|m| m.len()).unwrap_or(0);
        wal.saturating_sub(32) / (24 + page_size)
    }

    #[test]
    fn the_committer_checkpoints_itself_at_the_bound_and_the_wal_restarts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bound.db");
        let conn = Connection::open(&path).expect("open");
        // Small pages, so the bound is a few megabytes.
        conn.execute_batch("PRAGMA page_size = 512; PRAGMA journal_mode = WAL; CREATE TABLE t (v BLOB);")
            .expect("schema");
        install_hook(&conn);
        let row = vec![0u8; 400];
        let mut insert = conn.prepare("INSERT INTO t (v) VALUES (?1)").expect("prepare");
        let mut most = 0;
        // Each commit adds about a page; well past the bound, it must have
        // been checkpointed (and the WAL reused) rather than grown.
        for _ in 0..(BOUND as usize * 3 / 2) {
            insert.execute([&row]).expect("insert");
            most = most.max(wal_pages_after_commit());
        }
        assert!(most >= BOUND, "the WAL reached {most} pages, never the bound");
        assert!(
            wal_pages_after_commit() < BOUND,
            "after {} pages the WAL did not restart",
            wal_pages_after_commit()
        );
        let frames = wal_frames(&path, 512);
        assert!(frames <= BOUND as u64 + 10, "the WAL file holds {frames} frames, past the bound");
    }
}
