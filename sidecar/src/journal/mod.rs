//! The sidecar's durable outbox: every state-changing report is appended and
//! fsynced here *before* it is sent, and stays until the controller acks it.
//!
//! Format: JSON lines. A torn last line (a crash mid-append) is ignored.
//! Compaction rewrites the file (temp + fsync + rename) keeping the acked
//! sequence, the attempt in hand and the unacked reports.
//!
//! Entries:
//! - `event{seq,v,event}`: a journaled report (seq ≥ 1), the sidecar's own
//!   record of it in version `v` (see [`record`]).
//! - `report{seq,msg}`: a journaled report as sidecars before versioned
//!   records wrote it, the hex of its `SidecarMessage`; read, never written.
//! - `assign{msg}`: the `Assign` now in hand, as received (hex of its
//!   encoding).
//! - `pid{pid,restarts}`: the worker's supervisor (also its process group)
//!   for the attempt in hand, and how many idle restarts came before it; a
//!   restarted sidecar re-adopts it (see [`crate::supervisor`]).
//! - `release`: the attempt in hand is no longer held (its result is journaled,
//!   or the controller dropped it).
//! - `ack{seq}`: the controller durably applied everything up to `seq`.
//! - `secret{secret}`: the resume secret of the last Welcome, which proves
//!   this sidecar's claim on its worker id after a restart.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use prost::Message;
use serde::{Deserialize, Serialize};
use swarm_proto::v1;

use crate::report::Event;

mod record;
#[cfg(test)]
mod tests;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("journal {path} line {line}: {reason}")]
    Corrupt { path: PathBuf, line: usize, reason: String },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum Entry {
    Event {
        seq: u64,
        v: u32,
        event: record::EventRecord,
    },
    Report {
        seq: u64,
        msg: String,
    },
    Assign {
        msg: String,
    },
    Pid {
        pid: u32,
        #[serde(default)]
        restarts: u32,
    },
    Release,
    Ack {
        seq: u64,
    },
    Secret {
        secret: String,
    },
}

/// The attempt the sidecar holds, as journaled.
#[derive(Debug, Clone, PartialEq)]
pub struct InHand {
    pub assign: v1::Assign,
    pub pid: Option<u32>,
    /// Idle restarts before the journaled worker was started.
    pub restarts: u32,
}

#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    acked: u64,
    next_seq: u64,
    unacked: Vec<(u64, Event)>,
    in_hand: Option<InHand>,
    resume_secret: String,
    /// Entries appended since the file was last rewritten.
    appended: usize,
}

/// Acks are appended (not fsynced) and the file is rewritten once this many
/// entries have piled up, rather than on every ack: an ack lost to a crash
/// only means the controller re-acks a replayed report.
const COMPACT_AFTER: usize = 64;

impl Journal {
    /// Opens (or creates) the journal and reads its state.
    pub fn open(path: impl AsRef<Path>) -> Result<Journal, JournalError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| JournalError::Io { path: path.clone(), source };
        let mut j = Journal {
            file: OpenOptions::new().create(true).append(true).read(true).open(&path).map_err(io)?,
            path: path.clone(),
            acked: 0,
            next_seq: 1,
            unacked: Vec::new(),
            in_hand: None,
            resume_secret: String::new(),
            appended: 0,
        };
        let reader = BufReader::new(File::open(&path).map_err(io)?);
        let lines: Vec<String> = reader.lines().collect::<Result<_, _>>().map_err(io)?;
        let n = lines.len();
        j.appended = n;
        let mut torn = false;
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let entry = match serde_json::from_str::<Entry>(line) {
                Ok(e) => e,
                Err(e) if i + 1 == n => {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring torn last journal line");
                    torn = true;
                    break;
                }
                Err(e) => {
                    return Err(JournalError::Corrupt { path, line: i + 1, reason: e.to_string() });
                }
            };
            j.apply(entry).map_err(|reason| JournalError::Corrupt {
                path: path.clone(),
                line: i + 1,
                reason,
            })?;
        }
        if torn {
            j.compact()?;
        }
        Ok(j)
    }

    fn apply(&mut self, entry: Entry) -> Result<(), String> {
        match entry {
            Entry::Event { seq, v, event } => {
                if v > record::VERSION {
                    return Err(format!(
                        "record version {v} is newer than this sidecar's {}",
                        record::VERSION
                    ));
                }
                self.replayed(seq, Event::try_from(event)?);
            }
            Entry::Report { seq, msg } => {
                let m = v1::SidecarMessage::decode(unhex(&msg)?.as_slice()).map_err(|e| e.to_string())?;
                let body = m.body.ok_or("a report without a body")?;
                let event = crate::wire::event_from_wire(&body).map_err(|e| e.to_string())?;
                self.replayed(seq, event);
            }
            Entry::Assign { msg } => {
                let a = v1::Assign::decode(unhex(&msg)?.as_slice()).map_err(|e| e.to_string())?;
                self.in_hand = Some(InHand { assign: a, pid: None, restarts: 0 });
            }
            Entry::Pid { pid, restarts } => {
                if let Some(h) = &mut self.in_hand {
                    h.pid = Some(pid);
                    h.restarts = restarts;
                }
            }
            Entry::Release => self.in_hand = None,
            Entry::Secret { secret } => self.resume_secret = secret,
            Entry::Ack { seq } => {
                self.acked = self.acked.max(seq);
                self.next_seq = self.next_seq.max(seq + 1);
                let acked = self.acked;
                self.unacked.retain(|(s, _)| *s > acked);
            }
        }
        Ok(())
    }

    fn replayed(&mut self, seq: u64, event: Event) {
        self.next_seq = self.next_seq.max(seq + 1);
        if seq > self.acked {
            self.unacked.push((seq, event));
        }
    }

    fn write(&mut self, entry: &Entry) -> Result<(), JournalError> {
        self.write_all(&[entry], true)
    }

    /// Appends `entries` in one write; durable when this returns if `sync`.
    fn write_all(&mut self, entries: &[&Entry], sync: bool) -> Result<(), JournalError> {
        let mut lines = String::new();
        for entry in entries {
            lines.push_str(&serde_json::to_string(entry).map_err(|e| JournalError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(e),
            })?);
            lines.push('\n');
        }
        let io = |source| JournalError::Io { path: self.path.clone(), source };
        self.file.write_all(lines.as_bytes()).map_err(io)?;
        self.appended += entries.len();
        if sync {
            self.file.sync_data().map_err(io)?;
        }
        Ok(())
    }

    /// Appends a state-changing report, giving it the next sequence number
    /// (returned); durable when this returns.
    pub fn append_report(&mut self, event: Event) -> Result<u64, JournalError> {
        self.append(event, false)
    }

    /// Appends an attempt's result and releases the attempt in hand, with
    /// one write and one fsync: the two lines are durable together (a torn
    /// `release` is ignored on reopen, as if the crash came between them).
    pub fn append_result(&mut self, event: Event) -> Result<u64, JournalError> {
        self.append(event, true)
    }

    fn append(&mut self, event: Event, release: bool) -> Result<u64, JournalError> {
        let seq = self.next_seq;
        let report = Entry::Event { seq, v: record::VERSION, event: (&event).into() };
        let release = release && self.in_hand.is_some();
        if release {
            self.write_all(&[&report, &Entry::Release], true)?;
            self.in_hand = None;
        } else {
            self.write(&report)?;
        }
        self.next_seq += 1;
        self.unacked.push((seq, event));
        Ok(seq)
    }

    /// Records the attempt now in hand.
    pub fn set_in_hand(&mut self, assign: &v1::Assign) -> Result<(), JournalError> {
        self.write(&Entry::Assign { msg: hex(&assign.encode_to_vec()) })?;
        self.in_hand = Some(InHand { assign: assign.clone(), pid: None, restarts: 0 });
        Ok(())
    }

    /// Records the worker's supervisor. Not fsynced by itself: the Started
    /// report written right after it is, and a machine crash that loses the
    /// line also ends the supervisor (a sidecar process crash loses nothing
    /// written; without the line a restarted sidecar looks the supervisor
    /// up in `/proc`).
    pub fn set_pid(&mut self, pid: u32, restarts: u32) -> Result<(), JournalError> {
        if self.in_hand.is_none() {
            return Ok(());
        }
        self.write_all(&[&Entry::Pid { pid, restarts }], false)?;
        if let Some(h) = &mut self.in_hand {
            h.pid = Some(pid);
            h.restarts = restarts;
        }
        Ok(())
    }

    /// The attempt in hand is finished or dropped.
    pub fn release(&mut self) -> Result<(), JournalError> {
        if self.in_hand.is_none() {
            return Ok(());
        }
        self.write(&Entry::Release)?;
        self.in_hand = None;
        Ok(())
    }

    /// Records an ack: appended without an fsync (see [`COMPACT_AFTER`]),
    /// and the file is compacted once enough entries have piled up.
    pub fn ack(&mut self, seq: u64) -> Result<(), JournalError> {
        if seq <= self.acked {
            return Ok(());
        }
        self.apply(Entry::Ack { seq }).map_err(|reason| JournalError::Corrupt {
            path: self.path.clone(),
            line: 0,
            reason,
        })?;
        if self.appended + 1 >= COMPACT_AFTER {
            return self.compact();
        }
        self.write_all(&[&Entry::Ack { seq }], false)
    }

    /// Rewrites the journal with only what is still needed.
    pub fn compact(&mut self) -> Result<(), JournalError> {
        let tmp = self.path.with_extension("journal.tmp");
        let io = |source| JournalError::Io { path: tmp.clone(), source };
        // The ack entry also keeps the sequence counter monotonic once
        // everything is acked: unacked reports carry the higher numbers.
        let mut entries = vec![Entry::Ack { seq: self.acked }];
        if !self.resume_secret.is_empty() {
            entries.push(Entry::Secret { secret: self.resume_secret.clone() });
        }
        if let Some(h) = &self.in_hand {
            entries.push(Entry::Assign { msg: hex(&h.assign.encode_to_vec()) });
            if let Some(pid) = h.pid {
                entries.push(Entry::Pid { pid, restarts: h.restarts });
            }
        }
        for (seq, event) in &self.unacked {
            entries.push(Entry::Event { seq: *seq, v: record::VERSION, event: event.into() });
        }
        let mut body = String::new();
        for e in &entries {
            body.push_str(&serde_json::to_string(e).map_err(|e| io(std::io::Error::other(e)))?);
            body.push('\n');
        }
        {
            let mut f = File::create(&tmp).map_err(io)?;
            f.write_all(body.as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent()
            && let Ok(d) = File::open(dir)
        {
            let _ = d.sync_all();
        }
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|source| JournalError::Io { path: self.path.clone(), source })?;
        self.appended = entries.len();
        Ok(())
    }

    /// Takes the controller's word (from Welcome) on what it has applied:
    /// entries up to `seq` are forgotten. A controller that has applied less
    /// than this journal was acked (its store was replaced) would refuse the
    /// unacked reports as a sequence gap, so they are renumbered to follow
    /// `seq`; the controller never applied them, and their order is kept.
    pub fn applied_up_to(&mut self, seq: u64) -> Result<(), JournalError> {
        if seq >= self.acked {
            self.ack(seq)?;
        }
        let contiguous = self.unacked.first().is_none_or(|(first, _)| Some(*first) == seq.checked_add(1));
        if seq >= self.acked && contiguous {
            return Ok(());
        }
        tracing::warn!(
            controller = seq,
            journal = self.acked,
            "controller is behind this journal; renumbering"
        );
        self.acked = seq;
        let mut next = seq;
        for (s, _) in &mut self.unacked {
            next += 1;
            *s = next;
        }
        self.next_seq = next + 1;
        self.compact()
    }

    /// Keeps the resume secret of a Welcome; durable when this returns.
    pub fn set_resume_secret(&mut self, secret: &str) -> Result<(), JournalError> {
        if secret == self.resume_secret {
            return Ok(());
        }
        self.write(&Entry::Secret { secret: secret.to_string() })?;
        self.resume_secret = secret.to_string();
        Ok(())
    }

    /// The secret to present in the next Hello; empty before any Welcome.
    pub fn resume_secret(&self) -> &str {
        &self.resume_secret
    }

    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// The sequence the next report will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Reports not yet acked, in sequence order.
    pub fn unacked(&self) -> &[(u64, Event)] {
        &self.unacked
    }

    pub fn in_hand(&self) -> Option<&InHand> {
        self.in_hand.as_ref()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("odd hex length".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("bad hex: {e}")))
        .collect()
}
