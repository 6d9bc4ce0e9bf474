//! One frame: header, swarms, tabs, the tab's table, recent events, the
//! status or prompt line and the help line. Every part takes what room is
//! left and draws nothing where there is none, so no terminal size (0×0
//! included) makes it fail.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Tabs};

use super::input::{Prompt, Tab, Ui};
use super::model::{Link, Model};
use super::panes;
use crate::output::{UsageView, swarm_state};

/// Swarm lines shown at most; the rest are one filter away.
const MAX_SWARM_LINES: u16 = 6;
/// The recent-events strip, under the tabs other than Events, once the
/// terminal is tall enough to spare it.
const RECENT_LINES: u16 = 5;
const RECENT_MIN_HEIGHT: u16 = 24;
/// Task names of the critical path shown; its length says the rest.
const PATH_NAMES: usize = 5;

pub fn draw(frame: &mut Frame, model: &Model, ui: &Ui, url: &str) {
    let area = frame.area();
    let swarms = model.swarm_rows(&ui.filter);
    let swarm_lines = (swarms.len().max(1) as u16).min(MAX_SWARM_LINES);
    let recent = if ui.tab != Tab::Events && area.height >= RECENT_MIN_HEIGHT { RECENT_LINES + 1 } else { 0 };
    let [header, swarm_area, tabs, body, recent_area, status, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(swarm_lines),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(recent),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_header(frame, header, model, ui, url);
    draw_swarms(frame, swarm_area, model, &swarms);
    draw_tabs(frame, tabs, model, ui);
    panes::draw(frame, body, model, ui, ui.tab);
    if recent_area.height > 1 {
        let [rule, lines] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(recent_area);
        frame.render_widget(Line::from("recent events").style(dim().add_modifier(Modifier::BOLD)), rule);
        panes::draw_recent(frame, lines, model, ui);
    }
    draw_status(frame, status, ui);
    // A prompt takes the status line; why its input was refused shows below it.
    let refused = ui.status.as_ref().filter(|s| s.error && ui.prompt.is_some());
    match refused {
        Some(s) => frame.render_widget(Line::from(s.text.clone()).style(Style::new().fg(Color::Red)), help),
        None => frame.render_widget(Line::from(help_text(ui)).style(dim()), help),
    }
}

fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

fn draw_header(frame: &mut Frame, area: Rect, model: &Model, ui: &Ui, url: &str) {
    let (mark, link, style) = match &model.link {
        Link::Connecting => ("○", "connecting".to_string(), Style::new().fg(Color::Yellow)),
        Link::Live => ("●", "live".to_string(), Style::new().fg(Color::Green)),
        Link::Retrying { reason, in_ms } => {
            ("○", format!("reconnecting in {in_ms} ms: {reason}"), Style::new().fg(Color::Red))
        }
    };
    let mut spans = vec![
        Span::styled("swarm top ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!("{url} ")),
        Span::styled(format!("{mark} {link}"), style),
        Span::raw(format!("  event #{}", model.last_event)),
    ];
    if let Some(e) = &model.list_error {
        spans.push(Span::styled(format!("  lists: {e}"), Style::new().fg(Color::Red)));
    }
    if !ui.filter_line.is_empty() {
        spans.push(Span::styled(format!("  filter: {}", ui.filter_line), Style::new().fg(Color::Magenta)));
    }
    frame.render_widget(Line::from(spans), area);
}

fn draw_swarms(frame: &mut Frame, area: Rect, model: &Model, swarms: &[&swarm_proto::v1::Swarm]) {
    if swarms.is_empty() {
        let text = if model.loaded { "no swarms" } else { "loading…" };
        frame.render_widget(Line::from(text).style(dim()), area);
        return;
    }
    let lines: Vec<Line> = swarms.iter().map(|s| swarm_line(model, s)).collect();
    frame.render_widget(Paragraph::new(lines), area);
}

/// `auth ACTIVE 3/8 merged · critical path 3: b → c → d · RUNNING 2 · READY 1 · $0.42`
fn swarm_line<'a>(model: &Model, s: &swarm_proto::v1::Swarm) -> Line<'a> {
    let mut counts: std::collections::BTreeMap<i32, u32> = Default::default();
    for t in model.tasks.iter().filter(|t| t.swarm_id == s.id) {
        *counts.entry(t.state).or_default() += 1;
    }
    let total: u32 = counts.values().sum();
    let merged = counts.get(&(swarm_proto::v1::TaskState::Merged as i32)).copied().unwrap_or(0);
    let mut spans = vec![
        Span::styled(format!("{} ", s.id), Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!("{} {merged}/{total} merged", swarm_state(s.state))),
    ];
    let path = model.critical_path(&s.id);
    if !path.is_empty() {
        let mut shown = path.iter().take(PATH_NAMES).cloned().collect::<Vec<_>>().join(" → ");
        if path.len() > PATH_NAMES {
            shown.push_str(" → …");
        }
        spans.push(Span::styled(
            format!(" · critical path {}: {shown}", path.len()),
            Style::new().fg(Color::Cyan),
        ));
    }
    for (state, n) in counts.iter().filter(|(s, _)| **s != swarm_proto::v1::TaskState::Merged as i32) {
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(
            format!("{} {n}", crate::output::task_state(*state)),
            panes::state_style(*state),
        ));
    }
    let cost = UsageView::from(s.usage.as_ref()).cost();
    if cost != "-" {
        spans.push(Span::raw(format!(" · {cost}")));
    }
    if let Some(f) = s.forge.as_ref().filter(|f| f.pull_number > 0) {
        // The forge's text, shown on a terminal: no control sequence gets through.
        let url: String = f.pull_url.chars().filter(|c| !c.is_control()).take(200).collect();
        spans.push(Span::styled(
            format!(" · PR #{} {} {url}", f.pull_number, f.pull_state),
            Style::new().fg(Color::Cyan),
        ));
    }
    Line::from(spans)
}

fn draw_tabs(frame: &mut Frame, area: Rect, model: &Model, ui: &Ui) {
    let titles = Tab::ALL.iter().enumerate().map(|(i, tab)| {
        let n = match tab {
            Tab::Tasks => model.task_rows(&ui.filter).len(),
            Tab::Workers => model.worker_rows(&ui.filter).len(),
            Tab::Questions => model.question_rows(&ui.filter).len(),
            Tab::Events => model.event_rows(&ui.filter).len(),
        };
        let style =
            if *tab == Tab::Questions && n > 0 { Style::new().fg(Color::Yellow) } else { Style::new() };
        Line::from(format!("{} {} ({n})", i + 1, tab.title())).style(style)
    });
    let selected = Tab::ALL.iter().position(|t| *t == ui.tab);
    let tabs = Tabs::new(titles)
        .select(selected)
        .highlight_style(Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD));
    frame.render_widget(tabs, area);
}

fn draw_status(frame: &mut Frame, area: Rect, ui: &Ui) {
    let line = match &ui.prompt {
        Some(Prompt::Filter { text }) => Line::from(format!("filter (swarm:S state:A,B words): {text}▏")),
        Some(Prompt::Answer { task, question, options, text }) => {
            let choices = if options.is_empty() {
                String::new()
            } else {
                let listed: Vec<String> =
                    options.iter().enumerate().map(|(i, o)| format!("{} {o}", i + 1)).collect();
                format!(" [{}; Tab picks]", listed.join(" | "))
            };
            Line::from(format!("answer {task} — {question}{choices} > {text}▏"))
                .style(Style::new().fg(Color::Yellow))
        }
        Some(Prompt::Confirm { op }) => {
            Line::from(format!("{}? y to confirm, any other key to keep it", op.describe()))
                .style(Style::new().fg(Color::Yellow))
        }
        None => match &ui.status {
            Some(s) if s.error => Line::from(s.text.clone()).style(Style::new().fg(Color::Red)),
            Some(s) => Line::from(s.text.clone()),
            None => Line::default(),
        },
    };
    frame.render_widget(line, area);
}

fn help_text(ui: &Ui) -> &'static str {
    match (&ui.prompt, ui.tab) {
        (Some(Prompt::Confirm { .. }), _) => "y confirm  any other key: cancel",
        (Some(_), _) => "Enter send  Esc cancel  Backspace delete",
        (None, Tab::Workers) => "q quit  Tab/1-4 pane  ↑↓ move  d drain  / filter  Esc clear",
        (None, Tab::Events) => "q quit  Tab/1-4 pane  ↑↓ move  / filter  Esc clear",
        (None, _) => "q quit  Tab/1-4 pane  ↑↓ move  a answer  r retry  c cancel  / filter  Esc clear",
    }
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use swarm_proto::v1;

    use super::*;
    use crate::top::filter::Filter;
    use crate::top::model::Snapshot;

    fn busy_model() -> Model {
        let mut m = Model::default();
        let tasks = (0..30)
            .map(|i| v1::Task {
                swarm_id: "s".into(),
                id: format!("task-with-a-long-name-{i}"),
                state: i % 11 + 1,
                step: "compiling ".repeat(8),
                pending_question: if i % 4 == 0 { "which way?".into() } else { String::new() },
                deps: if i > 0 { vec![format!("task-with-a-long-name-{}", i - 1)] } else { vec![] },
                ..Default::default()
            })
            .collect();
        let workers = (0..5).map(|i| v1::Worker { id: format!("w{i}"), ..Default::default() }).collect();
        let swarms = vec![v1::Swarm { id: "s".into(), ..Default::default() }];
        m.apply_snapshot(Snapshot { swarms, tasks, workers });
        m.refresh();
        m
    }

    #[test]
    fn every_terminal_size_draws_without_panicking() {
        let model = busy_model();
        for tab in Tab::ALL {
            let mut ui = Ui::new(String::new(), Filter::default());
            ui.tab = tab;
            ui.prompt = Some(Prompt::Answer {
                task: "s/x".into(),
                question: "q?".into(),
                options: vec!["ä".repeat(30), "b".into()],
                text: "é".repeat(50),
            });
            for (w, h) in [(0, 0), (1, 1), (0, 30), (80, 0), (3, 2), (20, 5), (40, 12), (80, 24), (200, 60)] {
                let mut term = Terminal::new(TestBackend::new(w, h)).expect("test backend");
                term.draw(|f| draw(f, &model, &ui, "http://127.0.0.1:7420")).expect("draw");
            }
        }
    }

    #[test]
    fn the_frame_shows_swarm_counts_the_critical_path_and_running_tasks() {
        let model = busy_model();
        let ui = Ui::new(String::new(), Filter::default());
        let mut term = Terminal::new(TestBackend::new(160, 40)).expect("test backend");
        term.draw(|f| draw(f, &model, &ui, "url")).expect("draw");
        let screen: String = term.backend().buffer().content().iter().map(|c| c.symbol()).collect();
        assert!(screen.contains("critical path"), "{screen}");
        assert!(screen.contains("RUNNING"), "{screen}");
        assert!(screen.contains("3 Questions (8)"), "{screen}");
    }
}
