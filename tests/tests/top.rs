//! `swarmctl top` in a pseudo-terminal, its output read through a terminal
//! emulator: what the screen shows as a real swarm moves, an answer typed
//! into it reaching the worker, the controller followed across a restart,
//! any terminal size survived, and `q` leaving the terminal as it was.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::{Read as _, Write as _};
use std::num::NonZeroU16;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, MasterPty, PtySize, SlavePty};
use swarm_proto::v1::TaskState;
use swarm_tests::{
    Cluster, Gate, Needs, PlanBuilder, TempRepo, WAIT, binary, create_swarm, current_test, skip_for,
    spawn_controller, task, wait_task_state, worker_script,
};

const ROWS: u16 = 40;
const COLS: u16 = 150;

/// `swarmctl top` running in a pty whose output feeds a `vt100` screen.
struct Top {
    screen: Arc<Mutex<vt100::Parser>>,
    writer: Box<dyn std::io::Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    master: Box<dyn MasterPty + Send>,
    /// Kept open so a command can run in the same terminal after `top`.
    slave: Box<dyn SlavePty + Send>,
}

impl Top {
    /// Starts `swarmctl top` against `url`, or says why it cannot (no pty
    /// on this machine) and returns None.
    fn start(url: &str, dir: &Path, args: &[&str]) -> Option<Top> {
        let size = PtySize { rows: ROWS, cols: COLS, pixel_width: 0, pixel_height: 0 };
        let pair = match portable_pty::native_pty_system().openpty(size) {
            Ok(pair) => pair,
            Err(e) => {
                skip_for(&current_test(), Needs::Kernel, &format!("cannot open a pseudo-terminal here: {e}"));
                return None;
            }
        };
        let mut cmd = CommandBuilder::new(binary("swarmctl"));
        cmd.arg("top");
        cmd.args(args);
        cmd.env("SWARM_CONTROLLER", url);
        cmd.env("TERM", "xterm-256color");
        cmd.cwd(dir);
        let child = pair.slave.spawn_command(cmd).unwrap();
        let screen = Arc::new(Mutex::new(vt100::Parser::new(nz(ROWS), nz(COLS), 0)));
        let mut reader = pair.master.try_clone_reader().unwrap();
        let feed = screen.clone();
        // Ends when the pty closes (the test drops both ends).
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                feed.lock().unwrap().process(&buf[..n]);
            }
        });
        let writer = pair.master.take_writer().unwrap();
        Some(Top { screen, writer, child, master: pair.master, slave: pair.slave })
    }

    fn text(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    /// Waits until a line of the screen holds every one of `words`;
    /// returns that line.
    fn line_with(&self, words: &[&str]) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = self.text();
            if let Some(line) = text.lines().find(|l| words.iter().all(|w| l.contains(w))) {
                return line.to_string();
            }
            assert!(Instant::now() < deadline, "no line with {words:?} on the screen:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn keys(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    fn resize(&self, rows: u16, cols: u16) {
        self.master.resize(PtySize { rows, cols, pixel_width: 0, pixel_height: 0 }).unwrap();
    }

    /// Waits for `top` to exit; its exit code.
    fn exit_code(&mut self) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.exit_code();
            }
            assert!(Instant::now() < deadline, "top did not exit:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What `stty -a` says about the terminal `top` ran in.
    fn stty(&self) -> String {
        let mut cmd = CommandBuilder::new("stty");
        cmd.arg("-a");
        let mut child = self.slave.spawn_command(cmd).unwrap();
        child.wait().unwrap();
        self.line_with(&["icanon"])
    }
}

impl Drop for Top {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The number right after `prefix` on the screen.
fn number_after(text: &str, prefix: &str) -> u64 {
    let at =
        text.find(prefix).unwrap_or_else(|| panic!("no {prefix:?} on the screen:\n{text}")) + prefix.len();
    let digits: String = text[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no number after {prefix:?}:\n{text}"))
}

fn nz(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn top_shows_the_swarm_move_answers_a_question_and_quits_cleanly() {
    let gate = Gate::new();
    let ask = r#"if [ "$SWARM_ATTEMPT" = 1 ]; then
  printf '%s\n' '{"status":"question","message":"need a decision","question":{"id":"colour","text":"Which colour should it be?","category":"design"}}' > "$SWARM_STATUS_FILE"
  exit 4
fi
grep -o "colour is [a-z]*" "$SWARM_TASK_FILE" > ask.txt || echo "no answer" > ask.txt"#;
    let a = format!("{}\necho a > a.txt", gate.wait_sh());
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("a", &a), ("ask", ask)]))]);
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    let Some(mut top) = Top::start(&url, repo.path(), &[]) else { return };
    top.line_with(&["swarm top", "live"]);

    let plan = PlanBuilder::new("t").task(task("a")).task(task("ask").deps(&["a"])).build();
    create_swarm(&url, &plan).await;
    let running = top.line_with(&["t/a ", "RUNNING", "w1"]);
    assert!(running.contains("t/a"), "{running}");
    top.line_with(&["t ACTIVE 0/2 merged", "critical path 2: a → ask"]);
    gate.open();
    top.line_with(&["t/a ", "MERGED"]);

    // The question shows in its tab; answering it through the keys
    // reaches the worker's next attempt.
    top.line_with(&["3 Questions (1)"]);
    top.keys("3");
    top.line_with(&["t/ask", "Which colour should it be?"]);
    top.keys("a");
    top.line_with(&["answer t/ask", "Which colour should it be?"]);
    top.keys("the colour is teal\r");
    wait_task_state(&url, "t", "ask", TaskState::Merged).await;
    let answered = repo.file("swarm/t/integration", "ask.txt").unwrap_or_default();
    assert_eq!(answered.trim(), "colour is teal", "the worker got the typed answer");
    top.keys("1");
    top.line_with(&["t/ask", "MERGED"]);
    top.line_with(&["t COMPLETED 2/2 merged"]);

    // No size is too small to survive, 0×0 included.
    for (rows, cols) in [(0, 0), (1, 1), (3, 10), (ROWS, COLS)] {
        top.resize(rows, cols);
        std::thread::sleep(Duration::from_millis(150));
        assert!(top.child.try_wait().unwrap().is_none(), "top died at {rows}x{cols}:\n{}", top.text());
    }
    top.line_with(&["swarm top", "live"]);

    top.keys("q");
    assert_eq!(top.exit_code(), 0, "{}", top.text());
    // The reader thread may still be parsing top's last bytes on a busy machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let screen = loop {
        let screen = top.screen.lock().unwrap().screen().clone();
        if !screen.alternate_screen() || std::time::Instant::now() > deadline {
            break screen;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!screen.alternate_screen(), "top left the alternate screen");
    assert!(!screen.hide_cursor(), "the cursor is shown again");
    let modes = top.stty();
    assert!(!modes.contains("-icanon") && !modes.contains("-echo "), "raw mode is off: {modes}");
}

#[tokio::test(flavor = "multi_thread")]
async fn top_follows_the_controller_across_a_restart() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    // No sidecars: the tasks wait READY, and the operator makes the events.
    let mut controller = spawn_controller(repo.path(), &[]);
    let url = controller.url();
    create_swarm(&url, &PlanBuilder::new("k").task(task("a")).task(task("b")).build()).await;
    let Some(mut top) = Top::start(&url, repo.path(), &[]) else { return };
    top.line_with(&["k/a ", "READY"]);

    controller.restart_after_kill9();
    let url = controller.url();
    // Made after the restart: only a `top` whose Watch stream resumed
    // shows the event.
    let out = swarm_tests::swarmctl(&url, &["cancel", "k/b"]);
    assert_eq!(out.status.code(), Some(0), "{}", swarm_tests::stderr(&out));
    top.line_with(&["k/b ", "CANCELLED"]);
    top.keys("4");
    top.line_with(&["k/b", "task.state", "READY -> CANCELLED"]);
    // Event ids are dense from 1: as many events in the pane as the last
    // id means none was missed or shown twice across the restart.
    let text = top.text();
    let last = number_after(&text, "event #");
    assert_eq!(number_after(&text, "4 Events ("), last, "every event once:\n{text}");
    top.keys("q");
    assert_eq!(top.exit_code(), 0, "{}", top.text());
}
