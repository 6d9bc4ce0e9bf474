//! `swarmctl report --html`: the progress report and the swarm's timeline
//! as one self-contained HTML file. The style is inline, the timeline is
//! inline SVG, and there is no script and no link to anything else, so
//! the file opens the same anywhere, offline, mailed or archived.

use std::fmt::Write as _;

use crate::report::Report;
use crate::timeline::Timeline;
use crate::timeline_svg::{escape_xml as esc, render, summary};

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;font-size:13px}\
th{background:#f3f3f3}.green{color:#2a7a2a}.yellow{color:#a07000}.red{color:#b02020}\
.summary{background:#f7f7f7;padding:.5em;border-left:3px solid #3182bd}\
.timeline-wrap{overflow-x:auto}code{background:#f3f3f3;padding:0 .2em}";

/// The whole page: `report` (with its child swarms' reports) and the
/// timeline of each swarm that has one in `timelines`.
pub fn page(report: &Report, timelines: &[Timeline]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Swarm {} report</title><style>{STYLE}</style></head><body>",
        esc(&report.swarm)
    );
    section(&mut h, report, timelines, 1);
    h.push_str("</body></html>\n");
    h
}

fn section(h: &mut String, r: &Report, timelines: &[Timeline], depth: usize) {
    let level = depth.min(5);
    let health = format!("{:?}", r.health).to_lowercase();
    let _ = write!(
        h,
        "<section class=\"swarm\" data-swarm=\"{0}\"><h{level}>Swarm <code>{0}</code> — {1}</h{level}><ul>\
         <li>Health: <span class=\"{health}\">{health}</span></li><li>Progress: {2}/{3} merged</li>\
         <li>Integration: <code>{4}</code> at <code>{5}</code></li>",
        esc(&r.swarm),
        esc(&r.state),
        r.done,
        r.total,
        esc(&r.integration_branch),
        esc(&crate::text::short_commit(&r.integration_head)),
    );
    if !r.paused_reason.is_empty() {
        let _ = write!(h, "<li>Paused: {}</li>", esc(&r.paused_reason));
    }
    let cost = r.usage.text();
    if !cost.is_empty() {
        let _ = write!(h, "<li>Cost: {}</li>", esc(&cost));
    }
    let _ = write!(h, "<li>Durations: {}</li>", esc(&r.durations.line()));
    h.push_str("</ul>");
    if let Some(t) = timelines.iter().find(|t| t.swarm == r.swarm) {
        let sub = level + 1;
        let _ = write!(
            h,
            "<h{sub}>Where the time went</h{sub}><p class=\"summary\">{}</p><div class=\"timeline-wrap\">{}</div>",
            esc(&summary(t)),
            render(t)
        );
    }
    branches(h, r, level + 1);
    for child in &r.children {
        section(h, child, timelines, depth + 1);
    }
    h.push_str("</section>");
}

fn branches(h: &mut String, r: &Report, level: usize) {
    let _ = write!(
        h,
        "<h{level}>Branches</h{level}><table class=\"branches\"><tr><th>task</th><th>state</th><th>progress</th>\
         <th>health</th><th>worker</th><th>attempts</th><th>merge</th><th>expected</th><th>actual</th></tr>"
    );
    for (i, b) in r.branches.iter().enumerate() {
        // A task far over what was expected reads red.
        let timing = r.durations.tasks.get(i);
        let expected = timing.map_or_else(|| "-".to_string(), |t| t.expected_text());
        let actual = timing.map_or_else(|| "-".to_string(), |t| t.actual_text());
        let over = if timing.is_some_and(|t| t.far_over) { " class=\"red over\"" } else { "" };
        let health = format!("{:?}", b.health).to_lowercase();
        let why = if b.health_reason.is_empty() { String::new() } else { format!(" ({})", b.health_reason) };
        let progress =
            if b.step.is_empty() { format!("{}%", b.percent) } else { format!("{}% {}", b.percent, b.step) };
        let _ = write!(
            h,
            "<tr data-task=\"{0}\"><td>{0}</td><td>{1}</td><td>{2}</td><td class=\"{health}\">{health}{3}</td>\
             <td>{4}</td><td>{5}</td><td>{6}</td><td>{7}</td><td{over}>{8}</td></tr>",
            esc(&b.task),
            esc(&b.state),
            esc(&progress),
            esc(&why),
            esc(if b.worker.is_empty() { "-" } else { &b.worker }),
            b.attempts,
            esc(if b.recommendation.is_empty() { "-" } else { &b.recommendation }),
            esc(&expected),
            esc(&actual),
        );
    }
    h.push_str("</table>");
    let _ = write!(h, "<h{level}>Integration queue</h{level}>");
    if r.integration_queue.is_empty() {
        h.push_str("<p>(empty)</p>");
        return;
    }
    h.push_str("<ol>");
    for (i, t) in r.integration_queue.iter().enumerate() {
        match r.integration_status.get(i).filter(|s| !s.is_empty()) {
            Some(status) => write!(h, "<li>{}: {}</li>", esc(t), esc(status)),
            None => write!(h, "<li>{}</li>", esc(t)),
        }
        .ok();
    }
    h.push_str("</ol>");
}
