//! A swarm with a pull request, turn by turn: LANDING until the merge the
//! forge reports completes it, and agents' answers only on threads handed
//! to their own task.

use swarm_core::{Outcome, SwarmId};
use tokio::sync::oneshot;

use super::super::command::{Command, Report};
use super::super::model::messages::{FeedbackTaken, ForgeFeedback};
use super::super::model::{ForgeState, MAX_REPLIES_PER_ATTEMPT, PullRecord, SwarmState};
use super::Rig;

const FORGE: &str = "[forge]\nprovider = \"github\"\nremote = \"origin\"\ntoken = { env = \"T\" }\n";

fn rig(forge: &str) -> Rig {
    Rig::build_with(0, 64, forge, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n")
}

fn swarm() -> SwarmId {
    SwarmId::new("s".to_string()).expect("id")
}

impl Rig {
    fn state(&self) -> SwarmState {
        self.sched.shared.model.swarms().get(&swarm()).expect("swarm").state
    }

    fn merge_a(&mut self) {
        let a = self.take_assign().expect("a assigned");
        self.report(a, Outcome::Success);
    }

    fn synced(&mut self, pull_state: &str) {
        let pull = PullRecord {
            number: 7,
            url: "https://github.example/acme/app/pull/7".into(),
            state: pull_state.into(),
            merge_commit: if pull_state == "merged" { "c0ffee".into() } else { String::new() },
        };
        let state = ForgeState { pushed: self.base.clone(), pull: Some(pull), ..Default::default() };
        let (reply, mut rx) = oneshot::channel();
        self.sched.turn([Command::ForgeSynced { swarm: swarm(), state, reply }]).expect("turn");
        rx.try_recv().expect("replied").expect("recorded");
    }

    fn feedback(&mut self, key: &str) -> FeedbackTaken {
        let feedback = ForgeFeedback {
            key: key.into(),
            task: Some("a".into()),
            title: "Review comment by @alice on `a.txt:1`".into(),
            text: "please rename it".into(),
            is_check: false,
        };
        let (reply, mut rx) = oneshot::channel();
        self.sched.turn([Command::ForgeFeedback { swarm: swarm(), feedback, reply }]).expect("turn");
        rx.try_recv().expect("replied").expect("taken")
    }

    fn replies(&self) -> Vec<String> {
        let s = self.sched.shared.model.swarms().get(&swarm()).expect("swarm");
        s.control
            .feedback
            .as_deref()
            .map(|f| f.replies.iter().map(|r| r.thread.clone()).collect())
            .unwrap_or_default()
    }
}

#[test]
fn a_swarm_with_a_pull_request_is_landing_until_the_forge_reports_the_merge() {
    let mut rig = rig(FORGE);
    rig.merge_a();
    assert_eq!(rig.state(), SwarmState::Landing, "every task merged, the pull request not");
    rig.synced("open");
    assert_eq!(rig.state(), SwarmState::Landing);
    rig.synced("merged");
    assert_eq!(rig.state(), SwarmState::Completed, "the merge completes it");
}

#[test]
fn a_push_only_remote_completes_the_swarm_at_its_last_merge() {
    let mut rig = rig("[forge]\nprovider = \"git\"\nremote = \"origin\"\n");
    rig.merge_a();
    assert_eq!(rig.state(), SwarmState::Completed);
}

#[test]
fn an_agent_answers_only_threads_handed_to_its_task_and_only_so_often() {
    let mut rig = rig(FORGE);
    rig.merge_a();
    assert_eq!(rig.feedback("review-comment:5"), FeedbackTaken::Reopened);
    assert_eq!(rig.state(), SwarmState::Active, "reopened: ACTIVE again");
    let task = rig.sched.shared.model.tasks().get(&Rig::key()).expect("a");
    let named = task.notes.feedback.last().is_some_and(|f| f.contains("thread `review-comment:5`"));
    assert!(named, "the thread is named to the agent: {:?}", task.notes.feedback);
    let attempt = rig.take_assign().expect("a reassigned");
    let reply = |thread: &str| Report::ForgeReply {
        attempt: attempt.clone(),
        thread: thread.into(),
        text: "Renamed.".into(),
    };
    rig.send("w1", 1, reply("review-comment:6"));
    assert!(rig.replies().is_empty(), "a thread never handed to a is refused");
    for _ in 0..MAX_REPLIES_PER_ATTEMPT + 2 {
        rig.send("w1", 1, reply("review-comment:5"));
    }
    assert_eq!(rig.replies(), vec!["review-comment:5".to_string(); MAX_REPLIES_PER_ATTEMPT]);
}
