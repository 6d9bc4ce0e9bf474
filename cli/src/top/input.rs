//! Keys: what the operator is looking at (tab, selection, filter, an open
//! prompt) and what each key does to it.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::actions::Op;
use super::filter::Filter;
use super::model::Model;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Tasks,
    Workers,
    Questions,
    Events,
}

impl Tab {
    pub const ALL: [Tab; 4] = [Tab::Tasks, Tab::Workers, Tab::Questions, Tab::Events];

    fn index(self) -> usize {
        Tab::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }

    pub fn title(self) -> &'static str {
        match self {
            Tab::Tasks => "Tasks",
            Tab::Workers => "Workers",
            Tab::Questions => "Questions",
            Tab::Events => "Events",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    Filter {
        text: String,
    },
    /// `options`: the choices offered with the question; Tab fills in the
    /// next one, and a number picks one.
    Answer {
        task: String,
        question: String,
        options: Vec<String>,
        text: String,
    },
    Confirm {
        op: Op,
    },
}

#[derive(Debug, Default)]
pub struct Status {
    pub text: String,
    pub error: bool,
}

#[derive(Debug)]
pub struct Ui {
    pub tab: Tab,
    /// The selected row's id in each tab: selection follows the row when
    /// the list reorders under it.
    selected: [Option<String>; 4],
    pub prompt: Option<Prompt>,
    pub filter: Filter,
    pub filter_line: String,
    pub status: Option<Status>,
}

pub enum Action {
    None,
    Quit,
    Run(Op),
}

impl Ui {
    pub fn new(filter_line: String, filter: Filter) -> Ui {
        Ui { tab: Tab::Tasks, selected: Default::default(), prompt: None, filter, filter_line, status: None }
    }

    pub fn say(&mut self, text: String, error: bool) {
        self.status = Some(Status { text, error });
    }

    /// The ids of the rows `tab` shows, in order.
    pub fn row_ids(&self, model: &Model, tab: Tab) -> Vec<String> {
        let f = &self.filter;
        match tab {
            Tab::Tasks => model.task_rows(f).iter().map(|t| format!("{}/{}", t.swarm_id, t.id)).collect(),
            Tab::Questions => {
                model.question_rows(f).iter().map(|t| format!("{}/{}", t.swarm_id, t.id)).collect()
            }
            Tab::Workers => model.worker_rows(f).iter().map(|w| w.id.clone()).collect(),
            Tab::Events => model.event_rows(f).iter().rev().map(|e| e.id.to_string()).collect(),
        }
    }

    /// The selected row's position in `ids` (the first row when the
    /// selected one is gone).
    pub fn selected_index(&self, tab: Tab, ids: &[String]) -> Option<usize> {
        if ids.is_empty() {
            return None;
        }
        let sel = self.selected[tab.index()].as_ref();
        Some(sel.and_then(|s| ids.iter().position(|id| id == s)).unwrap_or(0))
    }

    fn selected_id(&self, model: &Model) -> Option<String> {
        let ids = self.row_ids(model, self.tab);
        self.selected_index(self.tab, &ids).map(|i| ids[i].clone())
    }

    fn select_by(&mut self, model: &Model, delta: isize) {
        let ids = self.row_ids(model, self.tab);
        let Some(cur) = self.selected_index(self.tab, &ids) else { return };
        let next = cur.saturating_add_signed(delta).min(ids.len() - 1);
        self.selected[self.tab.index()] = Some(ids[next].clone());
    }

    pub fn handle_key(&mut self, model: &Model, key: KeyEvent) -> Action {
        if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
            return Action::Quit;
        }
        match self.prompt.take() {
            Some(prompt) => self.prompt_key(prompt, key),
            None => self.normal_key(model, key),
        }
    }

    fn normal_key(&mut self, model: &Model, key: KeyEvent) -> Action {
        let tab = self.tab.index();
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Esc => {
                self.status = None;
                self.filter = Filter::default();
                self.filter_line.clear();
            }
            KeyCode::Tab | KeyCode::Right => self.tab = Tab::ALL[(tab + 1) % Tab::ALL.len()],
            KeyCode::BackTab | KeyCode::Left => {
                self.tab = Tab::ALL[(tab + Tab::ALL.len() - 1) % Tab::ALL.len()]
            }
            KeyCode::Char(c @ '1'..='4') => self.tab = Tab::ALL[usize::from(c as u8 - b'1')],
            KeyCode::Up | KeyCode::Char('k') => self.select_by(model, -1),
            KeyCode::Down | KeyCode::Char('j') => self.select_by(model, 1),
            KeyCode::PageUp => self.select_by(model, -10),
            KeyCode::PageDown => self.select_by(model, 10),
            KeyCode::Home | KeyCode::Char('g') => self.select_by(model, isize::MIN),
            KeyCode::End | KeyCode::Char('G') => self.select_by(model, isize::MAX),
            KeyCode::Char('/') => self.prompt = Some(Prompt::Filter { text: self.filter_line.clone() }),
            KeyCode::Char('a') => self.start_answer(model),
            KeyCode::Char('r') => {
                if let Some(task) = self.selected_task(model) {
                    return Action::Run(Op::Retry { task });
                }
            }
            KeyCode::Char('c') => {
                if let Some(task) = self.selected_task(model) {
                    self.prompt = Some(Prompt::Confirm { op: Op::Cancel { task } });
                }
            }
            KeyCode::Char('d') => match (self.tab, self.selected_id(model)) {
                (Tab::Workers, Some(worker)) => {
                    self.prompt = Some(Prompt::Confirm { op: Op::Drain { worker } })
                }
                _ => self.say("drain: select a worker in the Workers tab (2)".into(), true),
            },
            _ => {}
        }
        Action::None
    }

    /// The selected task, or why there is none in the status bar.
    fn selected_task(&mut self, model: &Model) -> Option<String> {
        let task = self.selected_id(model).filter(|_| matches!(self.tab, Tab::Tasks | Tab::Questions));
        if task.is_none() {
            self.say("select a task in the Tasks (1) or Questions (3) tab".into(), true);
        }
        task
    }

    fn start_answer(&mut self, model: &Model) {
        let Some(task) = self.selected_task(model) else { return };
        let (question, options) = model
            .tasks
            .iter()
            .find(|t| format!("{}/{}", t.swarm_id, t.id) == task)
            .map(|t| (t.pending_question.clone(), t.pending_options.clone()))
            .unwrap_or_default();
        if question.is_empty() {
            return self.say(format!("answer: {task} has no question waiting"), true);
        }
        self.prompt = Some(Prompt::Answer { task, question, options, text: String::new() });
    }

    fn prompt_key(&mut self, mut prompt: Prompt, key: KeyEvent) -> Action {
        if let Prompt::Confirm { op } = prompt {
            return match key.code {
                KeyCode::Char('y' | 'Y') | KeyCode::Enter => Action::Run(op),
                _ => {
                    self.say(format!("{}: not sent", op.describe()), false);
                    Action::None
                }
            };
        }
        if let (Prompt::Answer { options, text, .. }, KeyCode::Tab) = (&mut prompt, key.code)
            && !options.is_empty()
        {
            let next = options.iter().position(|o| o == text).map_or(0, |i| (i + 1) % options.len());
            *text = options[next].clone();
            self.prompt = Some(prompt);
            return Action::None;
        }
        let (Prompt::Filter { text } | Prompt::Answer { text, .. }) = &mut prompt else {
            return Action::None;
        };
        match key.code {
            KeyCode::Esc => {
                self.status = None;
                return Action::None;
            }
            KeyCode::Backspace => {
                text.pop();
            }
            // Ctrl-U clears the line, as in a shell; other chords type nothing.
            KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => text.clear(),
            KeyCode::Char(c)
                if !c.is_control()
                    && !key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT) =>
            {
                text.push(c)
            }
            KeyCode::Enter => return self.submit(prompt),
            _ => {}
        }
        self.prompt = Some(prompt);
        Action::None
    }

    /// Enter in a text prompt. Bad input keeps the prompt open with the
    /// reason in the status bar, and changes nothing.
    fn submit(&mut self, prompt: Prompt) -> Action {
        match prompt {
            Prompt::Filter { text } => match Filter::parse(&text) {
                Ok(filter) => {
                    self.filter = filter;
                    self.filter_line = text.trim().to_string();
                    self.status = None;
                }
                Err(rule) => {
                    self.say(format!("filter: {rule}"), true);
                    self.prompt = Some(Prompt::Filter { text });
                }
            },
            Prompt::Answer { task, question, options, text } => {
                if text.trim().is_empty() {
                    self.say("answer: the text must not be empty".into(), true);
                    self.prompt = Some(Prompt::Answer { task, question, options, text });
                } else {
                    // A number picks that option; the asker gets its label.
                    let text = match text.trim().parse::<usize>() {
                        Ok(n) if (1..=options.len()).contains(&n) => options[n - 1].clone(),
                        _ => text,
                    };
                    self.say(format!("answer {task}: sending"), false);
                    return Action::Run(Op::Answer { task, text });
                }
            }
            Prompt::Confirm { op } => return Action::Run(op),
        }
        Action::None
    }
}

#[cfg(test)]
mod tests {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use swarm_proto::v1;

    use super::*;
    use crate::top::model::Snapshot;

    fn model() -> Model {
        let mut m = Model::default();
        let task = |id: &str, q: &str, options: &[&str]| v1::Task {
            swarm_id: "s".into(),
            id: id.into(),
            state: v1::TaskState::Escalated as i32,
            pending_question: q.into(),
            pending_options: options.iter().map(|o| o.to_string()).collect(),
            ..Default::default()
        };
        m.apply_snapshot(Snapshot {
            swarms: vec![v1::Swarm { id: "s".into(), ..Default::default() }],
            tasks: vec![
                task("a", "", &[]),
                task("b", "which?", &[]),
                task("c", "db?", &["SQLite", "Postgres"]),
            ],
            workers: Vec::new(),
        });
        m
    }

    fn press(ui: &mut Ui, m: &Model, keys: &str) -> Vec<Op> {
        let mut ops = Vec::new();
        for c in keys.chars() {
            let code = if c == '\r' { KeyCode::Enter } else { KeyCode::Char(c) };
            if let Action::Run(op) = ui.handle_key(m, KeyEvent::new(code, KeyModifiers::NONE)) {
                ops.push(op);
            }
        }
        ops
    }

    #[test]
    fn answering_takes_the_selected_tasks_question_and_refuses_empty_text() {
        let m = model();
        let mut ui = Ui::new(String::new(), Filter::default());
        assert!(press(&mut ui, &m, "a").is_empty());
        assert!(ui.status.as_ref().is_some_and(|s| s.error), "s/a has no question");
        assert!(press(&mut ui, &m, "ja  \r").is_empty(), "blank text is refused");
        assert!(matches!(ui.prompt, Some(Prompt::Answer { .. })), "and the prompt stays open");
        let ctrl_u = KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL);
        ui.handle_key(&m, ctrl_u);
        assert_eq!(press(&mut ui, &m, "tabs\r"), [Op::Answer { task: "s/b".into(), text: "tabs".into() }]);
    }

    #[test]
    fn an_option_is_picked_by_tab_or_by_its_number() {
        let m = model();
        let mut ui = Ui::new(String::new(), Filter::default());
        let tab = KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE);
        press(&mut ui, &m, "jja");
        for _ in 0..3 {
            ui.handle_key(&m, tab);
        }
        assert!(
            matches!(&ui.prompt, Some(Prompt::Answer { text, .. }) if text == "SQLite"),
            "Tab wraps around"
        );
        assert_eq!(press(&mut ui, &m, "\r"), [Op::Answer { task: "s/c".into(), text: "SQLite".into() }]);
        assert_eq!(press(&mut ui, &m, "a2\r"), [Op::Answer { task: "s/c".into(), text: "Postgres".into() }]);
        assert_eq!(
            press(&mut ui, &m, "a3\r"),
            [Op::Answer { task: "s/c".into(), text: "3".into() }],
            "a number past the options is the operator's own words"
        );
    }

    #[test]
    fn cancel_and_drain_wait_for_a_yes_and_a_bad_filter_changes_nothing() {
        let m = model();
        let mut ui = Ui::new(String::new(), Filter::default());
        assert!(press(&mut ui, &m, "cn").is_empty(), "n keeps the task");
        assert_eq!(press(&mut ui, &m, "cy"), [Op::Cancel { task: "s/a".into() }]);
        assert_eq!(press(&mut ui, &m, "r"), [Op::Retry { task: "s/a".into() }]);
        assert!(press(&mut ui, &m, "d").is_empty(), "no worker selected");
        press(&mut ui, &m, "/state:nope\r");
        assert!(ui.filter.is_empty() && matches!(ui.prompt, Some(Prompt::Filter { .. })));
        assert!(press(&mut ui, &m, "q").is_empty() && ui.prompt.is_some(), "q is text in a prompt");
    }
}
