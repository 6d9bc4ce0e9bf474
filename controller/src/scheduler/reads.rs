//! The Operator API's reads: views of the model, a page at a time, answered
//! without waiting for a commit when nothing in the turn has changed yet.

use swarm_core::{TaskKey, TaskState};

use tokio::sync::oneshot;

use super::views::{SwarmView, TaskDetailView, TaskView, WorkerView};
use super::{Effects, Scheduler, now_ms};
use crate::error::SchedError;

/// A page when the caller names no size.
pub const DEFAULT_PAGE_SIZE: usize = 1_000;
/// The largest page: bounds the work one read costs the scheduler thread.
pub const MAX_PAGE_SIZE: usize = 10_000;

/// Which part of a list to return: up to `size` items after the item the
/// opaque `token` names (empty: from the start). Tokens are the sort key of
/// the last item returned, so a list that changes between pages neither
/// repeats nor skips what stayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub size: usize,
    pub token: String,
}

impl Default for Page {
    /// The first page, of the default size.
    fn default() -> Page {
        Page { size: DEFAULT_PAGE_SIZE, token: String::new() }
    }
}

impl Page {
    /// `size` 0 means the default; above the maximum is the caller's error.
    pub fn new(size: u32, token: String) -> Result<Page, SchedError> {
        let size = match size as usize {
            0 => DEFAULT_PAGE_SIZE,
            n if n > MAX_PAGE_SIZE => {
                return Err(SchedError::InvalidArgument {
                    field: "page_size".into(),
                    rule: format!("must be at most {MAX_PAGE_SIZE}"),
                });
            }
            n => n,
        };
        if token.len() > 256 || token.chars().any(char::is_control) {
            return Err(bad_token());
        }
        Ok(Page { size, token })
    }

    /// The items after the token, in key order, and the next page's token.
    fn take<T>(&self, mut keyed: Vec<(String, T)>) -> (Vec<T>, String) {
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let start = if self.token.is_empty() { 0 } else { keyed.partition_point(|(k, _)| *k <= self.token) };
        let rest = keyed.len().saturating_sub(start);
        let mut next = String::new();
        let page: Vec<T> = keyed
            .into_iter()
            .skip(start)
            .take(self.size)
            .enumerate()
            .map(|(i, (k, v))| {
                if i + 1 == self.size && rest > self.size {
                    next = k;
                }
                v
            })
            .collect();
        (page, next)
    }
}

fn bad_token() -> SchedError {
    SchedError::InvalidArgument {
        field: "page_token".into(),
        rule: "is not a token this list returned".into(),
    }
}

/// Replies to a read. The model is what the store holds until the turn's
/// first change (every turn starts from a committed state: replies and
/// acks of the previous turn left only after its commit), so a read that
/// comes first in its turn is answered at once; one after a change waits
/// for the commit like everything else, and never shows what may not last.
pub(super) fn reply_read<T: Send + 'static>(
    fx: &mut Effects,
    reply: oneshot::Sender<Result<T, SchedError>>,
    value: Result<T, SchedError>,
) {
    if fx.untouched() {
        let _ = reply.send(value);
    } else {
        fx.replies.push(Box::new(move || {
            let _ = reply.send(value);
        }));
    }
}

impl Scheduler {
    pub(super) fn list_swarms(&self, page: &Page) -> (Vec<SwarmView>, String) {
        // Zero-padded so that text order is (created, id) order.
        let keyed = self
            .shared
            .model
            .swarms()
            .values()
            .map(|s| {
                (
                    format!("{:020}/{}", s.created_at.max(0), s.id),
                    super::views::swarm_view(s, self.budgets.burn_rate(&s.id)),
                )
            })
            .collect();
        page.take(keyed)
    }

    pub(super) fn list_workers(&self, page: &Page) -> (Vec<WorkerView>, String) {
        let (mono, now) = (self.shared.mono_ms(), now_ms());
        let keyed = self
            .shared
            .model
            .workers()
            .values()
            .map(|w| (w.id.clone(), super::views::worker_view(w, mono, self.limits.limited_until(w, now))))
            .collect();
        page.take(keyed)
    }

    /// A swarm's tasks in plan order. The token is the plan position of the
    /// last task returned, so a page costs what it returns plus the tasks
    /// its state filter skips.
    pub(super) fn list_tasks(
        &self,
        swarm: &str,
        states: &[TaskState],
        page: &Page,
    ) -> Result<(Vec<TaskView>, String), SchedError> {
        let s = self.swarm(swarm)?;
        let start = match page.token.as_str() {
            "" => 0,
            t => {
                t.parse::<usize>().ok().filter(|i| *i < s.tasks.len()).map(|i| i + 1).ok_or_else(bad_token)?
            }
        };
        let mut views = Vec::new();
        let mut next = String::new();
        let mut last = 0;
        for (i, key) in s.tasks.iter().enumerate().skip(start) {
            let Some(t) = self.shared.model.tasks().get(key) else { continue };
            if !states.is_empty() && !states.contains(&t.state()) {
                continue;
            }
            if views.len() == page.size {
                next = last.to_string();
                break;
            }
            views.push(super::views::task_view(t, self.holder(key), &self.shared.model));
            last = i;
        }
        Ok((views, next))
    }

    pub(super) fn task_detail(&self, key: &TaskKey) -> Result<TaskDetailView, SchedError> {
        let t = self.task(key)?;
        Ok(super::views::task_detail_view(t, self.holder(key), &self.shared.model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_the_token_and_end_with_an_empty_one() {
        let items: Vec<(String, u32)> = (0..5).map(|i| (format!("k{i}"), i)).collect();
        let p = Page::new(2, String::new()).expect("page");
        let (a, t) = p.take(items.clone());
        assert_eq!((a, t.as_str()), (vec![0, 1], "k1"));
        let (b, t) = Page::new(2, t).expect("page").take(items.clone());
        assert_eq!((b, t.as_str()), (vec![2, 3], "k3"));
        let (c, t) = Page::new(2, t).expect("page").take(items.clone());
        assert_eq!((c, t.as_str()), (vec![4], ""));
        // Exactly a page left: no token pointing at an empty page.
        let (d, t) = Page::new(5, String::new()).expect("page").take(items);
        assert_eq!((d.len(), t.as_str()), (5, ""));
        assert!(Page::new(MAX_PAGE_SIZE as u32 + 1, String::new()).is_err());
        assert!(Page::new(1, "a\u{1b}".into()).is_err());
        assert_eq!(Page::new(0, String::new()).expect("page").size, DEFAULT_PAGE_SIZE);
    }

    #[test]
    fn a_read_before_any_change_is_answered_at_once_and_after_one_waits_for_the_commit() {
        let mut fx = Effects::default();
        let (reply, mut rx) = tokio::sync::oneshot::channel::<Result<u32, SchedError>>();
        reply_read(&mut fx, reply, Ok(1));
        assert!(matches!(rx.try_recv(), Ok(Ok(1))), "nothing changed yet: answered at once");
        fx.dirty_tasks.insert(TaskKey::parse("s/a").expect("key"));
        let (reply, mut rx) = tokio::sync::oneshot::channel::<Result<u32, SchedError>>();
        reply_read(&mut fx, reply, Ok(2));
        assert!(rx.try_recv().is_err(), "after a change the read waits for the commit");
        for r in std::mem::take(&mut fx.replies) {
            r();
        }
        assert!(matches!(rx.try_recv(), Ok(Ok(2))));
    }
}
