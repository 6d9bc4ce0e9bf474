//! The sidecar's durable outbox: every state-changing report is appended and
//! fsynced here *before* it is sent, and stays until the controller acks it.
//!
//! Format: JSON lines. Prost messages are stored as hex of their encoding so
//! that a line is self-contained. A torn last line (a crash mid-append) is
//! ignored. Compaction rewrites the file (temp + fsync + rename) keeping the
//! acked sequence, the attempt in hand and the unacked reports.
//!
//! Entries:
//! - `report{seq,msg}`: a journaled `SidecarMessage` (seq ≥ 1).
//! - `assign{msg}`: the `Assign` now in hand.
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
    unacked: Vec<(u64, v1::SidecarMessage)>,
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
            Entry::Report { seq, msg } => {
                let m = v1::SidecarMessage::decode(unhex(&msg)?.as_slice()).map_err(|e| e.to_string())?;
                self.next_seq = self.next_seq.max(seq + 1);
                if seq > self.acked {
                    self.unacked.push((seq, m));
                }
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

    /// Appends a state-changing report, giving it the next sequence number;
    /// durable when this returns.
    pub fn append_report(
        &mut self,
        body: v1::sidecar_message::Body,
    ) -> Result<v1::SidecarMessage, JournalError> {
        self.append(body, false)
    }

    /// Appends an attempt's result and releases the attempt in hand, with
    /// one write and one fsync: the two lines are durable together (a torn
    /// `release` is ignored on reopen, as if the crash came between them).
    pub fn append_result(
        &mut self,
        body: v1::sidecar_message::Body,
    ) -> Result<v1::SidecarMessage, JournalError> {
        self.append(body, true)
    }

    fn append(
        &mut self,
        body: v1::sidecar_message::Body,
        release: bool,
    ) -> Result<v1::SidecarMessage, JournalError> {
        let seq = self.next_seq;
        let mut msg = v1::SidecarMessage { seq, body: Some(body) };
        // Trimmed before it is journaled: a report the controller refuses
        // would otherwise be replayed after every reconnect, forever.
        let cut = swarm_proto::limits::fit_report(&mut msg);
        if !cut.is_empty() {
            tracing::warn!(seq, cut = ?cut, "report trimmed to the controller's limits");
        }
        let report = Entry::Report { seq, msg: hex(&msg.encode_to_vec()) };
        let release = release && self.in_hand.is_some();
        if release {
            self.write_all(&[&report, &Entry::Release], true)?;
            self.in_hand = None;
        } else {
            self.write(&report)?;
        }
        self.next_seq += 1;
        self.unacked.push((seq, msg.clone()));
        Ok(msg)
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
        for (seq, m) in &self.unacked {
            entries.push(Entry::Report { seq: *seq, msg: hex(&m.encode_to_vec()) });
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
        for (s, m) in &mut self.unacked {
            next += 1;
            *s = next;
            m.seq = next;
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
    pub fn unacked(&self) -> &[(u64, v1::SidecarMessage)] {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat_like(n: u64) -> v1::sidecar_message::Body {
        v1::sidecar_message::Body::Status(v1::Status {
            attempt: None,
            status: v1::WorkerStatus::Working as i32,
            message: format!("step {n}"),
        })
    }

    #[test]
    fn append_replay_and_compact_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.journal");
        let mut j = Journal::open(&path).expect("open");
        let assign = v1::Assign { branch: "swarm/s/t".into(), ..Default::default() };
        j.set_in_hand(&assign).expect("assign");
        j.set_pid(42, 1).expect("pid");
        for n in 0..3 {
            assert_eq!(j.append_report(heartbeat_like(n)).expect("append").seq, n + 1);
        }
        drop(j);
        let mut j = Journal::open(&path).expect("reopen");
        assert_eq!(j.unacked().len(), 3);
        assert_eq!(j.in_hand().expect("in hand").pid, Some(42));
        assert_eq!(j.in_hand().expect("in hand").restarts, 1);
        j.ack(2).expect("ack");
        assert_eq!(j.unacked().iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![3]);
        j.release().expect("release");
        drop(j);
        let mut j = Journal::open(&path).expect("reopen 2");
        assert_eq!(j.acked(), 2);
        assert!(j.in_hand().is_none());
        assert_eq!(j.unacked().len(), 1);
        j.ack(3).expect("ack all");
        drop(j);
        let mut j = Journal::open(&path).expect("reopen 3");
        assert!(j.unacked().is_empty());
        assert_eq!(j.append_report(heartbeat_like(9)).expect("append").seq, 4, "seq never goes back");
    }

    #[test]
    fn torn_last_line_is_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.journal");
        let mut j = Journal::open(&path).expect("open");
        j.append_report(heartbeat_like(1)).expect("append");
        j.append_report(heartbeat_like(2)).expect("append");
        drop(j);
        let mut f = OpenOptions::new().append(true).open(&path).expect("open raw");
        f.write_all(br#"{"t":"report","seq":3,"msg":"0a0"#).expect("torn write");
        drop(f);
        let mut j = Journal::open(&path).expect("reopen");
        assert_eq!(j.unacked().len(), 2);
        assert_eq!(j.append_report(heartbeat_like(3)).expect("append").seq, 3);
        drop(j);
        assert_eq!(Journal::open(&path).expect("reopen").unacked().len(), 3);
    }

    #[test]
    fn the_resume_secret_survives_compaction_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.journal");
        let mut j = Journal::open(&path).expect("open");
        assert_eq!(j.resume_secret(), "");
        j.set_resume_secret("00ff").expect("secret");
        j.append_report(heartbeat_like(1)).expect("append");
        j.ack(1).expect("ack compacts");
        drop(j);
        assert_eq!(Journal::open(&path).expect("reopen").resume_secret(), "00ff");
    }

    #[test]
    fn reports_are_renumbered_for_a_controller_that_applied_less() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.journal");
        let mut j = Journal::open(&path).expect("open");
        for n in 0..5 {
            j.append_report(heartbeat_like(n)).expect("append");
        }
        j.ack(3).expect("ack");
        // A controller whose store was replaced has applied nothing.
        j.applied_up_to(0).expect("rebase");
        let seqs: Vec<u64> = j
            .unacked()
            .iter()
            .map(|(s, m)| {
                assert_eq!(*s, m.seq, "the message carries its new number");
                *s
            })
            .collect();
        assert_eq!(seqs, vec![1, 2]);
        assert_eq!(j.append_report(heartbeat_like(9)).expect("append").seq, 3);
        drop(j);
        let j = Journal::open(&path).expect("reopen");
        assert_eq!(j.unacked().iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![1, 2, 3]);
    }

    #[test]
    fn a_result_releases_its_attempt_in_the_same_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.journal");
        let mut j = Journal::open(&path).expect("open");
        j.set_in_hand(&v1::Assign { branch: "swarm/s/t".into(), ..Default::default() }).expect("assign");
        j.set_pid(7, 0).expect("pid");
        let result = v1::sidecar_message::Body::Result(v1::AttemptResult::default());
        assert_eq!(j.append_result(result).expect("result").seq, 1);
        assert!(j.in_hand().is_none());
        drop(j);
        let j = Journal::open(&path).expect("reopen");
        assert!(j.in_hand().is_none(), "released with the result");
        assert_eq!(j.unacked().len(), 1);
    }

    #[test]
    fn acks_are_appended_and_the_file_stays_small() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.journal");
        let mut j = Journal::open(&path).expect("open");
        for n in 1..=500 {
            assert_eq!(j.append_report(heartbeat_like(n)).expect("append").seq, n);
            j.ack(n).expect("ack");
        }
        drop(j);
        let lines = std::fs::read_to_string(&path).expect("read").lines().count();
        assert!(lines <= COMPACT_AFTER + 2, "{lines} lines: compaction keeps the journal bounded");
        let mut j = Journal::open(&path).expect("reopen");
        assert!(j.unacked().is_empty());
        assert_eq!(j.acked(), 500);
        assert_eq!(j.append_report(heartbeat_like(0)).expect("append").seq, 501);
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex(&hex(&[0, 1, 254, 255])).expect("hex"), vec![0, 1, 254, 255]);
    }
}
