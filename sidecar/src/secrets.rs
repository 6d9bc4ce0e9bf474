//! A task's secrets: read on this machine when the attempt starts, given to
//! its worker's environment only, and redacted by value from everything
//! the sidecar relays about the attempt (progress, status, questions, the
//! result's error, summary and log tails, the worker log an operator
//! reads) and, once the attempt is over, from its log on this machine's
//! disk ([`Redactor::redact_file`]): the worktree and its `.swarm/logs/`
//! pass to the next task's worker. The controller only ever sees where a
//! secret comes from.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use swarm_core::plan::SecretSource;

use crate::report::{Event, Progress};

/// Largest secret read from a file.
const MAX_SECRET_BYTES: u64 = 64 * 1024;
/// Shorter values are not redacted: they would mask ordinary text.
const MIN_REDACTED: usize = 4;

/// Reads every secret; an error names the secret and its source, never a
/// value.
pub fn read_all(refs: &[(String, SecretSource)]) -> Result<(Vec<(String, String)>, Redactor), String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut vars = Vec::with_capacity(refs.len());
    for (name, source) in refs {
        let value = match source {
            SecretSource::Env(var) => std::env::var(var)
                .map_err(|_| format!("secret {name}: {source} is not set on this sidecar"))?,
            SecretSource::File(path) => {
                let path = match (path.strip_prefix("~/"), &home) {
                    (Some(rest), Some(h)) => h.join(rest),
                    _ => PathBuf::from(path),
                };
                read_file(&path).map_err(|e| format!("secret {name}: {source} cannot be read: {e}"))?
            }
        };
        vars.push((name.clone(), value));
    }
    let redactor = Redactor {
        values: vars
            .iter()
            .filter(|(_, v)| v.len() >= MIN_REDACTED)
            .map(|(n, v)| (v.clone(), n.clone()))
            .collect(),
    };
    Ok((vars, redactor))
}

fn read_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)?.take(MAX_SECRET_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_SECRET_BYTES {
        return Err(std::io::Error::other(format!("longer than {MAX_SECRET_BYTES} bytes")));
    }
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

/// Replaces every secret's value with `[redacted NAME]`.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// (value, name)
    values: Vec<(String, String)>,
}

impl Redactor {
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn redact(&self, text: &mut String) {
        for (value, name) in &self.values {
            if text.contains(value.as_str()) {
                *text = text.replace(value.as_str(), &format!("[redacted {name}]"));
            }
        }
    }

    /// The same on raw bytes (a log chunk, which may end mid-character).
    pub fn redact_bytes(&self, data: &mut Vec<u8>) {
        for (value, name) in &self.values {
            let needle = value.as_bytes();
            if !data.windows(needle.len()).any(|w| w == needle) {
                continue;
            }
            let mark = format!("[redacted {name}]");
            let mut out = Vec::with_capacity(data.len());
            let mut i = 0;
            while i < data.len() {
                if data[i..].starts_with(needle) {
                    out.extend_from_slice(mark.as_bytes());
                    i += needle.len();
                } else {
                    out.push(data[i]);
                    i += 1;
                }
            }
            *data = out;
        }
    }

    /// Rewrites the file at `path` with every value redacted, when it holds
    /// one; true when it did. The file is read without following a link
    /// (the worker can plant one where its log was: nothing is read or
    /// written through it) and streamed, never held whole; the redacted copy
    /// is written anew beside it and renamed over it.
    pub fn redact_file(&self, path: &Path) -> std::io::Result<bool> {
        use std::os::unix::fs::OpenOptionsExt as _;
        if self.is_empty() {
            return Ok(false);
        }
        let flags = nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC | nix::libc::O_NONBLOCK;
        let file = match std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        if !file.metadata()?.is_file() {
            return Ok(false);
        }
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".redacting");
        let tmp = path.with_file_name(name);
        let mut out = std::io::BufWriter::new(crate::worker_files::create(&tmp)?);
        let changed = self.redact_stream(file, &mut out).and_then(|changed| {
            out.flush()?;
            Ok(changed)
        });
        drop(out);
        match changed {
            Ok(true) => std::fs::rename(&tmp, path).map(|()| true),
            Ok(false) => std::fs::remove_file(&tmp).map(|()| false),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// Copies `from` into `to` with every value redacted; true when one was
    /// found. A value split across two reads is still found: the tail that
    /// could start one is kept for the next read. At a place where several
    /// values start, the longest is redacted.
    fn redact_stream(&self, mut from: impl Read, to: &mut impl Write) -> std::io::Result<bool> {
        let mut needles: Vec<(&[u8], String)> =
            self.values.iter().map(|(v, n)| (v.as_bytes(), format!("[redacted {n}]"))).collect();
        needles.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        let longest = needles.first().map_or(1, |(v, _)| v.len());
        let mut chunk = vec![0u8; 64 * 1024];
        let (mut buf, mut eof, mut changed) = (Vec::new(), false, false);
        while !eof {
            let n = from.read(&mut chunk)?;
            eof = n == 0;
            buf.extend_from_slice(&chunk[..n]);
            let (mut i, mut copied) = (0, 0);
            while i < buf.len() && (eof || buf.len() - i >= longest) {
                match needles.iter().find(|(v, _)| buf[i..].starts_with(v)) {
                    Some((value, mark)) => {
                        to.write_all(&buf[copied..i])?;
                        to.write_all(mark.as_bytes())?;
                        i += value.len();
                        copied = i;
                        changed = true;
                    }
                    None => i += 1,
                }
            }
            to.write_all(&buf[copied..i])?;
            buf.drain(..i);
        }
        Ok(changed)
    }

    fn all(&self, lines: &mut [String]) {
        lines.iter_mut().for_each(|l| self.redact(l));
    }

    /// Every text a worker can put into a report.
    pub fn report(&self, event: &mut Event) {
        if self.is_empty() {
            return;
        }
        match event {
            Event::Status { message, .. } => self.redact(message),
            Event::Question { text, category, .. } => {
                self.redact(text);
                self.redact(category);
            }
            Event::Result(r) => {
                self.redact(&mut r.error);
                self.redact(&mut r.summary);
                self.all(&mut r.log_tail);
                for t in &mut r.tiers {
                    self.redact(&mut t.output_tail);
                }
            }
            Event::ForgeReply { text, .. } => self.redact(text),
            Event::Started { .. } | Event::Orphans { .. } => {}
        }
    }

    pub fn progress(&self, p: &mut Progress) {
        if self.is_empty() {
            return;
        }
        self.redact(&mut p.step);
        self.all(&mut p.log_tail);
        self.all(&mut p.files_modified);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_and_redacted_by_name() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("key");
        std::fs::write(&file, "sk-very-secret\n").expect("write");
        let refs = vec![
            ("API_KEY".to_string(), SecretSource::File(file.display().to_string())),
            ("PATH_TOO".to_string(), SecretSource::Env("PATH".into())),
        ];
        let (vars, redactor) = read_all(&refs).expect("read");
        assert_eq!(vars[0], ("API_KEY".to_string(), "sk-very-secret".to_string()));
        let mut line = "curl -H 'x-api-key: sk-very-secret' (sk-very-secret)".to_string();
        redactor.redact(&mut line);
        assert_eq!(line, "curl -H 'x-api-key: [redacted API_KEY]' ([redacted API_KEY])");
        let task = swarm_core::TaskKey::new(
            swarm_core::SwarmId::new("s").expect("swarm"),
            swarm_core::TaskId::new("t").expect("task"),
        );
        let attempt = swarm_proto::convert::AttemptRef { task, number: 1, fencing_token: 1 };
        let mut result = Event::Result(crate::outcome::AttemptOutcome {
            log_tail: vec!["sk-very-secret".into()],
            ..crate::outcome::AttemptOutcome::error(attempt, "bad key sk-very-secret")
        });
        redactor.report(&mut result);
        let Event::Result(r) = result else { unreachable!() };
        assert!(!r.error.contains("sk-very") && !r.log_tail[0].contains("sk-very"), "{r:?}");
    }

    #[test]
    fn a_file_is_redacted_in_place_even_where_a_value_spans_two_reads() {
        let dir = tempfile::tempdir().expect("dir");
        let redactor =
            Redactor { values: vec![("sk-abcdef".into(), "KEY".into()), ("sk-abc".into(), "SHORT".into())] };
        let log = dir.path().join("t-1.log");
        // The value straddles the stream's 64 KiB reads, and ends the file.
        let pad = "x".repeat(64 * 1024 - 4);
        std::fs::write(&log, format!("{pad}sk-abcdef, then sk-abc; sk-abcdef")).expect("write");
        assert!(redactor.redact_file(&log).expect("redacted"));
        let after = std::fs::read_to_string(&log).expect("read");
        assert_eq!(after, format!("{pad}[redacted KEY], then [redacted SHORT]; [redacted KEY]"));
        assert!(!redactor.redact_file(&log).expect("again"), "nothing left to redact");
        assert!(!dir.path().join("t-1.log.redacting").exists());
        // A link planted in the log's place is neither read nor written through.
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "sk-abcdef").expect("write");
        let link = dir.path().join("t-2.log");
        std::os::unix::fs::symlink(&outside, &link).expect("link");
        assert!(redactor.redact_file(&link).is_err(), "a link is refused");
        assert_eq!(std::fs::read_to_string(&outside).expect("read"), "sk-abcdef");
        assert!(
            !redactor.redact_file(&dir.path().join("missing.log")).expect("no log"),
            "no log, nothing to do"
        );
    }

    #[test]
    fn a_missing_secret_is_named_without_a_value() {
        let refs = vec![("GH_TOKEN".to_string(), SecretSource::Env("SWARM_TEST_SURELY_UNSET_VAR".into()))];
        let e = read_all(&refs).expect_err("unset");
        assert_eq!(
            e,
            "secret GH_TOKEN: environment variable SWARM_TEST_SURELY_UNSET_VAR is not set on this sidecar"
        );
        let refs = vec![("K".to_string(), SecretSource::File("/nonexistent/k".into()))];
        let e = read_all(&refs).expect_err("missing file");
        assert!(e.starts_with("secret K: file /nonexistent/k cannot be read"), "{e}");
    }
}
