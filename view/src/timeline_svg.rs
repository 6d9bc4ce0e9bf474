//! A [`Timeline`] drawn as one SVG element: a row per sidecar, the merge
//! queue and the operator, a time axis, a legend, and a `<title>` on every
//! bar for a hover. Colours are presentation attributes, not `style`, so a
//! page whose Content-Security-Policy forbids inline style still shows
//! them; no script, so it works pasted into any page or file.

use std::fmt::Write as _;

use crate::timeline::{Bar, BarKind, RowKind, Timeline};

const LABEL_W: f64 = 170.0;
const PLOT_W: f64 = 900.0;
const LANE_H: f64 = 16.0;
const ROW_GAP: f64 = 8.0;
const AXIS_H: f64 = 28.0;
const LEGEND_H: f64 = 46.0;
const IDLE_FILL: &str = "#e8e8e8";
const CRITICAL_STROKE: &str = "#111111";

/// The fill of a kind: setup, work and verify shades of one family so an
/// attempt reads as one bar; waits in warm colours that stand out.
pub fn fill(kind: BarKind) -> &'static str {
    match kind {
        BarKind::Setup => "#9ecae1",
        BarKind::Work => "#3182bd",
        BarKind::Verify => "#31a354",
        BarKind::Queue => "#fd8d3c",
        BarKind::OperatorWait => "#de2d26",
        BarKind::MergeCar => "#756bb1",
    }
}

/// `850 ms`, `12.3 s`, `4 m 05 s`, `1 h 02 m`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} m {:02} s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{} h {:02} m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// The one-line answer to "where did the time go".
pub fn summary(t: &Timeline) -> String {
    let total = |k: BarKind| t.totals.iter().find(|x| x.kind == k).map_or(0, |x| x.ms);
    let path = if t.critical_path.is_empty() { "-".to_string() } else { t.critical_path.join(" → ") };
    format!(
        "{} wall clock; critical path {path}; work {}, setup {}, verify {}, waiting in the merge queue {}, \
         merge cars {}, waiting for the operator {}, sidecars idle {}",
        duration(t.end_ms - t.start_ms),
        duration(total(BarKind::Work)),
        duration(total(BarKind::Setup)),
        duration(total(BarKind::Verify)),
        duration(total(BarKind::Queue)),
        duration(total(BarKind::MergeCar)),
        duration(total(BarKind::OperatorWait)),
        duration(t.idle_ms),
    )
}

/// Each bar's lane within its row: the first lane free at its start, so
/// bars that overlap (queue waits, several cars) stack instead of hiding.
fn lanes(bars: &[Bar]) -> (Vec<usize>, usize) {
    let mut ends: Vec<i64> = Vec::new();
    let mut at = Vec::with_capacity(bars.len());
    for b in bars {
        let lane = match ends.iter().position(|&e| e <= b.start_ms) {
            Some(l) => l,
            None => {
                ends.push(i64::MIN);
                ends.len() - 1
            }
        };
        ends[lane] = b.end_ms.max(b.start_ms + 1);
        at.push(lane);
    }
    (at, ends.len().max(1))
}

/// A tick spacing giving at most about ten ticks.
fn tick_step(span_ms: i64) -> i64 {
    const STEPS: [i64; 19] = [
        100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000,
        900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 86_400_000,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| span_ms / s <= 10)
        .unwrap_or(86_400_000 * (span_ms / 86_400_000 / 10).max(1))
}

/// The timeline as a standalone `<svg>` element.
pub fn render(t: &Timeline) -> String {
    let span = (t.end_ms - t.start_ms).max(1);
    let x = |ms: i64| LABEL_W + (ms - t.start_ms).clamp(0, span) as f64 * PLOT_W / span as f64;
    let packed: Vec<(Vec<usize>, usize)> = t.rows.iter().map(|r| lanes(&r.bars)).collect();
    let rows_h: f64 = packed.iter().map(|(_, n)| *n as f64 * LANE_H + ROW_GAP).sum();
    let width = LABEL_W + PLOT_W + 20.0;
    let height = AXIS_H + rows_h + LEGEND_H;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" id="timeline" data-swarm="{}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" role="img" aria-label="{}">"#,
        escape_xml(&t.swarm),
        escape_xml(&format!("timeline of swarm {}", t.swarm)),
    );
    let _ = write!(s, "<title>{}</title>", escape_xml(&summary(t)));
    axis(&mut s, t, span, height - LEGEND_H, &x);
    let mut y = AXIS_H;
    for (row, (lane_of, n)) in t.rows.iter().zip(&packed) {
        let h = *n as f64 * LANE_H;
        let kind = match row.kind {
            RowKind::Worker => "worker",
            RowKind::Verifier => "verifier",
            RowKind::Queue => "queue",
            RowKind::Operator => "operator",
        };
        let _ = write!(
            s,
            r##"<g class="row" data-row="{}" data-row-kind="{kind}"><text x="4" y="{:.1}" fill="#333">{}</text>"##,
            escape_xml(&row.id),
            y + LANE_H * 0.75,
            escape_xml(&row_label(&row.id, kind)),
        );
        for idle in &row.idle {
            let (x0, x1) = (x(idle.start_ms), x(idle.end_ms));
            let _ = write!(
                s,
                r#"<rect class="idle" data-kind="idle" x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{IDLE_FILL}"><title>{} idle {}</title></rect>"#,
                (x1 - x0).max(0.5),
                escape_xml(&row.id),
                duration(idle.end_ms - idle.start_ms),
            );
        }
        for (bar, lane) in row.bars.iter().zip(lane_of) {
            bar_rect(&mut s, bar, x(bar.start_ms), x(bar.end_ms), y + *lane as f64 * LANE_H);
        }
        s.push_str("</g>");
        y += h + ROW_GAP;
    }
    legend(&mut s, t, height - LEGEND_H + 14.0);
    s.push_str("</svg>");
    s
}

fn row_label(id: &str, kind: &str) -> String {
    let short: String = id.chars().take(22).collect();
    match kind {
        "verifier" => format!("{short} (verifier)"),
        _ => short,
    }
}

fn bar_rect(s: &mut String, b: &Bar, x0: f64, x1: f64, y: f64) {
    let stroke = if b.critical {
        format!(r#" stroke="{CRITICAL_STROKE}" stroke-width="1.5""#)
    } else {
        r##" stroke="#ffffff" stroke-width="0.5""##.to_string()
    };
    let took = duration(b.end_ms - b.start_ms);
    let open = if b.open { ", still going" } else { "" };
    let critical = if b.critical { ", on the critical path" } else { "" };
    let _ = write!(
        s,
        r#"<rect class="bar" data-kind="{}" data-task="{}" data-attempt="{}" data-critical="{}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"{stroke}><title>{}: {took}{open}{critical}</title></rect>"#,
        b.kind.name(),
        escape_xml(&b.task),
        b.attempt,
        b.critical,
        y + 1.0,
        // Wide enough to see and to hover, however short.
        (x1 - x0).max(2.0),
        LANE_H - 2.0,
        fill(b.kind),
        escape_xml(&b.label),
    );
}

fn axis(s: &mut String, t: &Timeline, span: i64, bottom: f64, x: &impl Fn(i64) -> f64) {
    let step = tick_step(span);
    s.push_str(r#"<g class="axis">"#);
    let mut at = 0;
    // At most span/step + 1 ticks, which tick_step keeps near ten.
    while at <= span {
        let px = x(t.start_ms + at);
        let _ = write!(
            s,
            r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{bottom:.1}" stroke="#cccccc" stroke-width="0.5"/><text x="{px:.1}" y="{:.1}" fill="#555" text-anchor="middle">{}</text>"##,
            AXIS_H - 6.0,
            AXIS_H - 10.0,
            if at == 0 { "0".to_string() } else { format!("+{}", duration(at)) },
        );
        at += step;
    }
    s.push_str("</g>");
}

fn legend(s: &mut String, t: &Timeline, y: f64) {
    s.push_str(r#"<g class="legend">"#);
    let mut x = 4.0;
    let mut swatch = |s: &mut String, key: &str, fill: &str, stroke: &str, text: &str| {
        let _ = write!(
            s,
            r##"<rect data-legend="{key}" x="{x:.1}" y="{:.1}" width="12" height="12" fill="{fill}"{stroke}/><text x="{:.1}" y="{:.1}" fill="#333">{text}</text>"##,
            y - 10.0,
            x + 16.0,
            y,
        );
        x += 22.0 + text.len() as f64 * 6.2;
    };
    for kind in BarKind::ALL {
        let text = match kind {
            BarKind::Setup => "setup",
            BarKind::Work => "work",
            BarKind::Verify => "verify",
            BarKind::Queue => "merge queue wait",
            BarKind::OperatorWait => "operator wait",
            BarKind::MergeCar => "merge car",
        };
        swatch(s, kind.name(), fill(kind), "", text);
    }
    swatch(s, "idle", IDLE_FILL, "", "idle");
    let stroke = format!(r#" stroke="{CRITICAL_STROKE}" stroke-width="1.5""#);
    swatch(s, "critical", "#ffffff", &stroke, "critical path");
    let _ = write!(
        s,
        r##"<text class="summary" x="4" y="{:.1}" fill="#333">{}</text>"##,
        y + 18.0,
        escape_xml(&summary(t))
    );
    s.push_str("</g>");
}

/// Text made safe inside XML or HTML, in an element or a quoted attribute.
pub fn escape_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Not allowed in XML 1.0 at all: dropped rather than break the document.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}
