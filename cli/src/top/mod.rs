//! `swarmctl top`: a full-screen live view of the controller — swarms with
//! their counts and critical path, tasks, workers, questions and events —
//! with keys to answer, retry, cancel and drain.
//!
//! [`feed`] follows the Watch stream and fetches the lists into
//! [`model`]; [`input`] turns keys into selection, prompts and [`actions`];
//! [`view`] and [`panes`] draw a frame. Frames are drawn when something
//! changed, at most [`FRAME_EVERY`] apart, and once a second for the ages.

mod actions;
mod feed;
mod filter;
mod graph;
mod input;
mod model;
mod panes;
mod view;

use std::io::IsTerminal as _;
use std::time::Duration;

use crossterm::event::{Event as TermEvent, EventStream, KeyEventKind};
use futures::StreamExt as _;
use ratatui::DefaultTerminal;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::feed::{Feeds, Update};
use self::filter::Filter;
use self::input::{Action, Ui};
use self::model::Model;
use crate::cli::TopArgs;
use crate::client::{self, Target};
use crate::exit::Usage;

/// At most ten frames a second, however fast events come.
const FRAME_EVERY: Duration = Duration::from_millis(100);
/// Without news, a frame a second keeps elapsed times and ages moving.
const IDLE_FRAME: Duration = Duration::from_secs(1);
/// Updates applied per frame at most, so a replay of a long history still
/// lets keys and frames through.
const UPDATES_PER_FRAME: usize = 5_000;
/// How long `q` waits for operator actions still in flight.
const ACTION_GRACE: Duration = Duration::from_secs(5);

pub async fn run(target: &Target, args: TopArgs) -> anyhow::Result<()> {
    let swarm = match &args.swarm {
        Some(s) => client::swarm_id(s)?,
        None => String::new(),
    };
    let filter_line = args.filter.unwrap_or_default();
    let filter = Filter::parse(&filter_line).map_err(|rule| Usage(format!("--filter: {rule}")))?;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Usage(
            "top needs a terminal on stdin and stdout; scripts use `swarmctl watch` or `get`".into(),
        )
        .into());
    }
    let (tx, rx) = mpsc::channel(1024);
    let cancel = CancellationToken::new();
    let feeds = Feeds::spawn(target.clone(), swarm, args.since, tx.clone(), cancel.clone());
    let screen = Screen::enter()?;
    let ui = Ui::new(filter_line, filter);
    let result = screen_loop(screen, target, ui, rx, tx, &feeds).await;
    cancel.cancel();
    // The feeds notice within one await; a stuck connect is cut short.
    let _ = tokio::time::timeout(Duration::from_secs(2), feeds.join()).await;
    result
}

/// The terminal in raw mode on the alternate screen, given back as it was
/// when dropped — on an error return too; ratatui's panic hook covers a
/// panic.
struct Screen {
    terminal: DefaultTerminal,
}

impl Screen {
    fn enter() -> anyhow::Result<Screen> {
        let terminal = ratatui::try_init().map_err(|e| anyhow::anyhow!("cannot set up the terminal: {e}"))?;
        Ok(Screen { terminal })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        let _ = ratatui::try_restore();
    }
}

/// The drawing loop's state: what it shows, and where updates come from.
struct Session<'a> {
    target: &'a Target,
    feeds: &'a Feeds,
    ui: Ui,
    model: Model,
    rx: mpsc::Receiver<Update>,
    tx: mpsc::Sender<Update>,
    /// Operator actions in flight, waited for before `top` exits.
    actions: JoinSet<()>,
}

async fn screen_loop(
    mut screen: Screen,
    target: &Target,
    ui: Ui,
    rx: mpsc::Receiver<Update>,
    tx: mpsc::Sender<Update>,
    feeds: &Feeds,
) -> anyhow::Result<()> {
    let mut session = Session { target, feeds, ui, model: Model::default(), rx, tx, actions: JoinSet::new() };
    let result = session.run(&mut screen).await;
    // An answer sent just before `q` still reaches the controller.
    let pending = async { while session.actions.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(ACTION_GRACE, pending).await;
    result
}

impl Session<'_> {
    async fn run(&mut self, screen: &mut Screen) -> anyhow::Result<()> {
        let mut keys = EventStream::new();
        let mut dirty = true;
        let mut last_frame = Instant::now() - FRAME_EVERY;
        loop {
            if dirty && last_frame.elapsed() >= FRAME_EVERY {
                self.model.refresh();
                screen.terminal.draw(|f| view::draw(f, &self.model, &self.ui, &self.target.url))?;
                last_frame = Instant::now();
                dirty = false;
            }
            let wake = last_frame + if dirty { FRAME_EVERY } else { IDLE_FRAME };
            tokio::select! {
                key = keys.next() => match key {
                    Some(Ok(TermEvent::Key(k))) if k.kind != KeyEventKind::Release => {
                        if self.key(k) == Flow::Quit {
                            return Ok(());
                        }
                    }
                    Some(Ok(_)) => {} // a resize, focus or paste: draw again
                    Some(Err(e)) => return Err(anyhow::anyhow!("reading the terminal: {e}")),
                    None => return Ok(()),
                },
                update = self.rx.recv() => {
                    let Some(update) = update else { return Ok(()) };
                    self.apply(update);
                    for _ in 1..UPDATES_PER_FRAME {
                        match self.rx.try_recv() {
                            Ok(update) => self.apply(update),
                            Err(_) => break,
                        }
                    }
                    while self.actions.try_join_next().is_some() {}
                }
                () = tokio::time::sleep_until(wake) => {}
            }
            dirty = true;
        }
    }

    fn key(&mut self, k: crossterm::event::KeyEvent) -> Flow {
        match self.ui.handle_key(&self.model, k) {
            Action::Quit => return Flow::Quit,
            Action::Run(op) => {
                self.ui.say(format!("{}: sending", op.describe()), false);
                actions::spawn(&mut self.actions, self.target.clone(), op, self.tx.clone());
            }
            Action::None => {}
        }
        Flow::Go
    }

    fn apply(&mut self, update: Update) {
        apply(&mut self.model, &mut self.ui, update, self.feeds);
    }
}

#[derive(PartialEq, Eq)]
enum Flow {
    Go,
    Quit,
}

fn apply(model: &mut Model, ui: &mut Ui, update: Update, feeds: &Feeds) {
    match update {
        Update::Event(e) => model.apply_event(e),
        Update::Link(link) => model.link = link,
        Update::Snapshot(s) => model.apply_snapshot(s),
        Update::Delta(d) => model.apply_delta(d),
        Update::ListError(e) => model.list_error = Some(e),
        Update::Done(result) => {
            match result {
                Ok(text) => ui.say(text, false),
                Err(text) => ui.say(text, true),
            }
            // Show what the action changed without waiting for the poll.
            feeds.refresh();
        }
    }
}
