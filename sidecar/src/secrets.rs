//! A task's secrets: read on this machine when the attempt starts, given to
//! its worker's environment only, and redacted by value from everything
//! the sidecar relays about the attempt (progress, status, questions, the
//! result's error, summary and log tails, the worker log an operator
//! reads). The controller only ever sees where a secret comes from.

use std::path::PathBuf;

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
