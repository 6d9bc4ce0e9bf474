//! The wire's size limits, shared by both ends so that a sidecar never
//! journals a report the controller would refuse.
//!
//! A refused report is worse than a truncated one: the sidecar replays its
//! journal after every reconnect, so a report over a limit would be sent,
//! refused and sent again forever. The sidecar therefore trims each report
//! with [`fit_report`] before journaling it; the controller checks the same
//! limits at its edge and refuses anything over them.

use swarm_core::names::{MAX_PATH_LEN, check_path, truncate};

use crate::v1;
use crate::v1::sidecar_message::Body;

/// Largest message either side decodes.
pub const MAX_MESSAGE_BYTES: usize = 8 << 20;
/// Largest report a sidecar sends: half the decoding limit leaves room for
/// framing and for a peer with a smaller limit.
pub const MAX_REPORT_BYTES: usize = 4 << 20;
/// Free text (summaries, errors, questions, tier output).
pub const MAX_TEXT: usize = 64 * 1024;
/// Lines of a log tail, and the length of each.
pub const MAX_LINES: usize = 200;
pub const MAX_LINE: usize = 4096;
/// Paths in one list (files changed, files modified).
pub const MAX_PATHS: usize = 100_000;
/// A progress step.
pub const MAX_STEP: usize = 1024;
/// An escalation or question category.
pub const MAX_CATEGORY: usize = 100;
/// Choices offered with a question, and the length of each.
pub const MAX_OPTIONS: usize = 16;
pub const MAX_OPTION: usize = 200;
/// A verify tier's name.
pub const MAX_TIER_NAME: usize = 64;
/// An agent's reply on a pull request thread.
pub const MAX_REPLY: usize = 8 * 1024;
/// The kinds of pull request thread a task's feedback names, which its
/// agent may answer: a review comment (answered in its thread), a review,
/// a `/swarm retry` comment (answered in the conversation).
pub const REPLY_THREADS: &[&str] = &["review-comment", "review", "retry"];

/// Checks a reply's thread as a task's feedback names it: `KIND:ID`, KIND
/// one of [`REPLY_THREADS`], ID the forge's decimal id. The rule, when not.
pub fn check_reply_thread(thread: &str) -> Result<(&str, u64), String> {
    let rule =
        || format!("must be KIND:ID as the feedback names it, KIND one of {}", REPLY_THREADS.join(", "));
    let (kind, id) = thread.split_once(':').ok_or_else(rule)?;
    let id = (!id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()))
        .then(|| id.parse::<u64>().ok())
        .flatten()
        .filter(|id| *id > 0)
        .ok_or_else(rule)?;
    let kind = REPLY_THREADS.iter().find(|k| **k == kind).ok_or_else(rule)?;
    Ok((kind, id))
}

/// Metadata naming the worker a pack transfer is for, and the resume
/// secret of its live session, which proves the caller holds it.
pub const WORKER_HEADER: &str = "x-swarm-worker";
pub const SECRET_HEADER: &str = "x-swarm-resume-secret";

/// Trims a report in place so the controller accepts it: text is cut at a
/// character boundary, log tails keep their last lines, paths the
/// controller would refuse are dropped, and path lists shrink until the
/// encoded message fits [`MAX_REPORT_BYTES`]. Returns what was cut, for a
/// log line; empty when nothing was.
pub fn fit_report(msg: &mut v1::SidecarMessage) -> Vec<String> {
    let mut cut = Vec::new();
    match msg.body.as_mut() {
        Some(Body::Result(r)) => {
            cut_text("result.summary", &mut r.summary, MAX_TEXT, &mut cut);
            cut_text("result.error", &mut r.error, MAX_TEXT, &mut cut);
            cut_text("result.category", &mut r.category, MAX_CATEGORY, &mut cut);
            cut_lines("result.log_tail", &mut r.log_tail, &mut cut);
            for t in &mut r.tiers {
                cut_text("result.tiers.name", &mut t.name, MAX_TIER_NAME, &mut cut);
                cut_text("result.tiers.output_tail", &mut t.output_tail, MAX_TEXT, &mut cut);
            }
            cut_paths("result.files_changed", &mut r.files_changed, &mut cut);
        }
        Some(Body::Progress(p)) => {
            cut_text("progress.step", &mut p.step, MAX_STEP, &mut cut);
            cut_lines("progress.log_tail", &mut p.log_tail, &mut cut);
            cut_paths("progress.files_modified", &mut p.files_modified, &mut cut);
        }
        Some(Body::Status(s)) => cut_text("status.message", &mut s.message, MAX_TEXT, &mut cut),
        Some(Body::Question(q)) => {
            cut_text("question.text", &mut q.text, MAX_TEXT, &mut cut);
            cut_text("question.category", &mut q.category, MAX_CATEGORY, &mut cut);
            if q.options.len() > MAX_OPTIONS {
                q.options.truncate(MAX_OPTIONS);
                cut.push("question.options".into());
            }
            for (i, o) in q.options.iter_mut().enumerate() {
                cut_text(&format!("question.options[{i}]"), o, MAX_OPTION, &mut cut);
            }
        }
        Some(Body::Orphans(o)) => cut_lines("orphans.worktrees", &mut o.worktrees, &mut cut),
        Some(Body::ForgeReply(r)) => cut_text("forge_reply.text", &mut r.text, MAX_REPLY, &mut cut),
        _ => {}
    }
    // Path lists are what can still be large; halve them until it fits.
    while prost::Message::encoded_len(msg) > MAX_REPORT_BYTES {
        let list = match msg.body.as_mut() {
            Some(Body::Result(r)) if !r.files_changed.is_empty() => &mut r.files_changed,
            Some(Body::Progress(p)) if !p.files_modified.is_empty() => &mut p.files_modified,
            _ => break,
        };
        let keep = list.len() / 2;
        cut.push(format!(
            "path list cut from {} to {keep} entries to fit {MAX_REPORT_BYTES} bytes",
            list.len()
        ));
        list.truncate(keep);
    }
    cut
}

fn cut_text(field: &str, s: &mut String, max: usize, cut: &mut Vec<String>) {
    if s.len() > max {
        cut.push(format!("{field} cut from {} to {max} bytes", s.len()));
        *s = truncate(s, max).to_string();
    }
}

fn cut_lines(field: &str, lines: &mut Vec<String>, cut: &mut Vec<String>) {
    if lines.len() > MAX_LINES {
        cut.push(format!("{field} cut to its last {MAX_LINES} lines"));
        lines.drain(..lines.len() - MAX_LINES);
    }
    for l in lines.iter_mut() {
        if l.len() > MAX_LINE {
            *l = truncate(l, MAX_LINE).to_string();
        }
    }
}

fn cut_paths(field: &str, paths: &mut Vec<String>, cut: &mut Vec<String>) {
    let before = paths.len();
    paths.retain(|p| p.len() <= MAX_PATH_LEN && check_path(p).is_ok());
    if paths.len() != before {
        cut.push(format!("{field}: dropped {} path(s) the controller refuses", before - paths.len()));
    }
    if paths.len() > MAX_PATHS {
        cut.push(format!("{field} cut from {} to {MAX_PATHS} paths", paths.len()));
        paths.truncate(MAX_PATHS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(r: v1::AttemptResult) -> v1::SidecarMessage {
        v1::SidecarMessage { seq: 1, body: Some(Body::Result(r)) }
    }

    #[test]
    fn an_oversized_result_is_trimmed_under_the_report_limit() {
        let mut m = result(v1::AttemptResult {
            summary: "é".repeat(MAX_TEXT),
            log_tail: (0..1000).map(|i| format!("line {i} {}", "x".repeat(5000))).collect(),
            files_changed: (0..MAX_PATHS).map(|i| format!("dir/{i}/{}", "p".repeat(200))).collect(),
            ..Default::default()
        });
        let cut = fit_report(&mut m);
        assert!(!cut.is_empty());
        assert!(prost::Message::encoded_len(&m) <= MAX_REPORT_BYTES);
        let Some(Body::Result(r)) = &m.body else { panic!("result") };
        assert!(r.summary.len() <= MAX_TEXT);
        assert_eq!(r.log_tail.len(), MAX_LINES);
        assert!(r.log_tail[0].starts_with("line 800 "), "keeps the last lines");
        assert!(r.log_tail.iter().all(|l| l.len() <= MAX_LINE));
        assert!(!r.files_changed.is_empty());
    }

    #[test]
    fn paths_the_controller_refuses_are_dropped() {
        let mut m = result(v1::AttemptResult {
            files_changed: vec!["ok.rs".into(), "bad\u{1b}[2J".into(), "../escape".into(), "nul\0".into()],
            ..Default::default()
        });
        assert_eq!(fit_report(&mut m).len(), 1);
        let Some(Body::Result(r)) = &m.body else { panic!("result") };
        assert_eq!(r.files_changed, vec!["ok.rs".to_string()]);
    }

    #[test]
    fn a_report_within_limits_is_untouched() {
        let mut m = result(v1::AttemptResult { summary: "done".into(), ..Default::default() });
        let before = m.clone();
        assert!(fit_report(&mut m).is_empty());
        assert_eq!(m, before);
    }

    #[test]
    fn a_reply_thread_is_a_known_kind_and_a_decimal_id() {
        assert_eq!(check_reply_thread("review-comment:42"), Ok(("review-comment", 42)));
        assert_eq!(check_reply_thread("retry:7"), Ok(("retry", 7)));
        for bad in [
            "",
            "review-comment",
            "review-comment:",
            "review:0",
            "review:-1",
            "check:3",
            "review:1x",
            "review: 1",
            "review:99999999999999999999999",
        ] {
            let err = check_reply_thread(bad).expect_err(bad);
            assert!(err.contains("KIND:ID"), "{bad}: {err}");
        }
    }
}
