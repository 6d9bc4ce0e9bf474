//! The four tabs' tables: tasks, workers, questions, events.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Row, Table, TableState};
use swarm_proto::v1;

use super::input::{Tab, Ui};
use super::model::{Model, worker_state};
use crate::output::{UsageView, clock, duration_text, task_state};

/// Draws `tab`'s table into `area`, the selected row highlighted and kept
/// in view.
pub fn draw(frame: &mut Frame, area: Rect, model: &Model, ui: &Ui, tab: Tab) {
    let f = &ui.filter;
    let now = now_ms();
    let (header, widths, rows): (&[&str], Vec<Constraint>, Vec<Row>) = match tab {
        Tab::Tasks => {
            let tasks = model.task_rows(f);
            let id_width = id_width(tasks.iter().map(|t| t.swarm_id.len() + 1 + t.id.len()));
            let widths = vec![
                Constraint::Length(id_width),
                Constraint::Length(10),
                Constraint::Fill(2),
                Constraint::Length(4),
                Constraint::Length(7),
                Constraint::Length(10),
                Constraint::Length(7),
                Constraint::Fill(3),
            ];
            let rows = tasks.iter().map(|t| task_row(model, t, now)).collect();
            (&["TASK", "STATE", "STEP", "%", "ELAPSED", "WORKER", "COST", "NOTE"], widths, rows)
        }
        Tab::Workers => {
            let widths = vec![
                Constraint::Length(id_width(model.workers.iter().map(|w| w.id.len()))),
                Constraint::Length(12),
                Constraint::Length(9),
                Constraint::Fill(2),
                Constraint::Fill(1),
                Constraint::Fill(2),
            ];
            let rows = model.worker_rows(f).iter().map(|w| worker_row(model, w)).collect();
            (&["WORKER", "STATE", "HEARTBEAT", "ATTEMPT", "HOST", "LABELS"], widths, rows)
        }
        Tab::Questions => {
            let tasks = model.question_rows(f);
            let widths = vec![
                Constraint::Length(id_width(tasks.iter().map(|t| t.swarm_id.len() + 1 + t.id.len()))),
                Constraint::Length(10),
                Constraint::Length(6),
                Constraint::Fill(1),
            ];
            let rows = tasks
                .iter()
                .map(|t| {
                    let asked = age(now, model.asked_at(t));
                    Row::new([full_id(t), task_state(t.state), asked, t.pending_question.clone()])
                })
                .collect();
            (&["TASK", "STATE", "ASKED", "QUESTION"], widths, rows)
        }
        Tab::Events => {
            let widths = vec![
                Constraint::Length(7),
                Constraint::Length(12),
                Constraint::Length(22),
                Constraint::Length(20),
                Constraint::Fill(1),
            ];
            let rows = model.event_rows(f).into_iter().rev().map(event_row).collect();
            (&["ID", "TIME", "SUBJECT", "KIND", "MESSAGE"], widths, rows)
        }
    };
    let ids = ui.row_ids(model, tab);
    let mut state = TableState::default().with_selected(ui.selected_index(tab, &ids));
    let empty = rows.is_empty();
    let table = Table::new(rows, widths)
        .header(Row::new(header.iter().copied()).style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    frame.render_stateful_widget(table, area, &mut state);
    if empty && area.height > 1 {
        let why = if !model.loaded {
            "loading…"
        } else if !ui.filter.is_empty() {
            "nothing matches the filter (Esc clears it)"
        } else {
            "nothing yet"
        };
        let below = Rect { y: area.y + 1, height: 1, ..area };
        frame.render_widget(Line::from(format!("  {why}")).style(Style::new().fg(Color::DarkGray)), below);
    }
}

/// The recent-events strip under the other tabs: newest first, no header.
pub fn draw_recent(frame: &mut Frame, area: Rect, model: &Model, ui: &Ui) {
    let lines: Vec<Line> = model
        .event_rows(&ui.filter)
        .into_iter()
        .rev()
        .take(usize::from(area.height))
        .map(|e| Line::from(crate::output::EventView::from(e).line()))
        .collect();
    frame.render_widget(ratatui::widgets::Paragraph::new(lines), area);
}

fn task_row<'a>(model: &Model, t: &v1::Task, now: i64) -> Row<'a> {
    let running = t.state == v1::TaskState::Running as i32;
    let elapsed = if running {
        age(now, model.running_since(t))
    } else if t.first_started_at_unix_ms > 0 && t.last_ended_at_unix_ms >= t.first_started_at_unix_ms {
        duration_text((t.last_ended_at_unix_ms - t.first_started_at_unix_ms) as u64)
    } else {
        "-".into()
    };
    let note =
        if !t.pending_question.is_empty() { format!("? {}", t.pending_question) } else { t.reason.clone() };
    let state = task_state(t.state);
    let style = state_style(t.state);
    Row::new([
        Cell::from(full_id(t)),
        Cell::from(state).style(style),
        Cell::from(if running { t.step.clone() } else { String::new() }),
        Cell::from(if running { format!("{}%", t.percent) } else { String::new() }),
        Cell::from(elapsed),
        Cell::from(dash(&t.worker_id)),
        Cell::from(UsageView::from(t.usage.as_ref()).cost()),
        Cell::from(note),
    ])
}

fn worker_row<'a>(model: &Model, w: &v1::Worker) -> Row<'a> {
    let state = worker_state(w);
    let style = match state {
        "disconnected" => Style::new().fg(Color::Red),
        "draining" | "rate-limited" => Style::new().fg(Color::Yellow),
        "busy" => Style::new().fg(Color::Green),
        _ => Style::new(),
    };
    let mut labels: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    Row::new([
        Cell::from(w.id.clone()),
        Cell::from(state).style(style),
        Cell::from(duration_text(model.heartbeat_age_ms(w))),
        Cell::from(dash(&w.attempt)),
        Cell::from(dash(&w.host)),
        Cell::from(labels.join(",")),
    ])
}

fn event_row<'a>(e: &v1::Event) -> Row<'a> {
    let mut subject = e.swarm_id.clone();
    if !e.task_id.is_empty() {
        subject = format!("{subject}/{}", e.task_id);
    }
    if e.attempt > 0 {
        subject = format!("{subject}#{}", e.attempt);
    }
    Row::new([e.id.to_string(), clock(e.at_unix_ms), subject, e.kind.clone(), e.message.clone()])
}

/// A colour per state, so what needs the operator stands out.
pub fn state_style(state: i32) -> Style {
    use v1::TaskState as S;
    match S::try_from(state) {
        Ok(S::Running | S::Merging | S::Succeeded) => Style::new().fg(Color::Cyan),
        Ok(S::Merged) => Style::new().fg(Color::Green),
        Ok(S::Failed | S::Conflict | S::Rejected) => Style::new().fg(Color::Red),
        Ok(S::Blocked | S::Escalated | S::Review) => Style::new().fg(Color::Yellow),
        _ => Style::new(),
    }
}

fn full_id(t: &v1::Task) -> String {
    format!("{}/{}", t.swarm_id, t.id)
}

/// The id column: as wide as the widest id, within reason.
fn id_width(lens: impl Iterator<Item = usize>) -> u16 {
    lens.max().unwrap_or(4).clamp(6, 32) as u16
}

fn dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.to_string() }
}

fn age(now: i64, at: i64) -> String {
    if at <= 0 { "-".into() } else { duration_text(now.saturating_sub(at).max(0) as u64) }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
