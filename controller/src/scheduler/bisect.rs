//! The merge queue's decisions, as pure logic: which tasks to verify
//! together next, what lands, who is the culprit, and how big the next
//! batch is. No I/O and no ids beyond the caller's items, so every rule is
//! unit-tested here and the scheduler only carries the decisions out.
//!
//! Rules (those of bors, Zuul and Mergify):
//! - A batch is the first `size` waiting items, verified together on the
//!   integration head. A passing batch lands in one step and the size grows
//!   by one (up to the maximum); a failing batch halves it.
//! - A failing batch of several is bisected. Its first half is verified on
//!   the head: if it passes, it lands and the culprit is in the second
//!   half, which is now known to fail on the new head, so it is split again
//!   without being verified whole; if it fails, the culprit is in the first
//!   half and the second half goes back to the front of the queue,
//!   untested. When one suspect is left it is the culprit, found without a
//!   verification of its own. A batch of N with one culprit thus costs at
//!   most ⌈log2 N⌉ + 1 verifications.

use std::collections::VecDeque;

/// What the queue decided after a verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision<T> {
    /// Verified on the head: move the integration ref over these, in order.
    Land(Vec<T>),
    /// Breaks the merged tree: hand it back to its owner.
    Culprit(T),
}

/// Why the items under verification are being verified.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Round<T> {
    /// A fresh batch, never verified.
    Batch,
    /// Bisecting a set known to fail on the head: `testing` is its first
    /// half, `rest` the other half.
    Bisect { rest: Vec<T> },
}

/// The queue of one integration branch.
#[derive(Debug, Clone)]
pub struct MergeQueue<T> {
    waiting: VecDeque<T>,
    /// Under verification, in landing order; empty when idle.
    testing: Vec<T>,
    round: Round<T>,
    size: usize,
    max: usize,
}

impl<T: Clone + PartialEq> MergeQueue<T> {
    /// A queue whose batches start at `max` items (optimistic, as Zuul's
    /// window starts open) and never exceed it; `max` 0 counts as 1.
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        MergeQueue { waiting: VecDeque::new(), testing: Vec::new(), round: Round::Batch, size: max, max }
    }

    pub fn push(&mut self, item: T) {
        if !self.contains(&item) {
            self.waiting.push_back(item);
        }
    }

    pub fn contains(&self, item: &T) -> bool {
        self.waiting.contains(item) || self.testing.contains(item) || self.rest().contains(item)
    }

    /// The size the next fresh batch will have.
    pub fn batch_size(&self) -> usize {
        self.size
    }

    pub fn waiting(&self) -> impl Iterator<Item = &T> {
        self.waiting.iter()
    }

    /// The items under verification now (empty when none is).
    #[cfg(test)]
    pub fn testing(&self) -> &[T] {
        &self.testing
    }

    /// Suspects known to fail that wait for the current half's verdict.
    pub fn rest(&self) -> &[T] {
        match &self.round {
            Round::Batch => &[],
            Round::Bisect { rest } => rest,
        }
    }

    pub fn is_bisecting(&self) -> bool {
        matches!(self.round, Round::Bisect { .. })
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.testing.is_empty()
    }

    /// The items to verify now, starting a fresh batch if nothing is under
    /// verification; `None` when the queue is empty.
    pub fn next(&mut self) -> Option<&[T]> {
        if self.testing.is_empty() {
            let n = self.size.min(self.waiting.len());
            if n == 0 {
                return None;
            }
            self.testing = self.waiting.drain(..n).collect();
            self.round = Round::Batch;
        }
        Some(&self.testing)
    }

    /// The verdict on [`Self::testing`].
    pub fn verdict(&mut self, passed: bool) -> Vec<Decision<T>> {
        let testing = std::mem::take(&mut self.testing);
        if testing.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let suspects = match (std::mem::replace(&mut self.round, Round::Batch), passed) {
            (Round::Batch, true) => {
                self.size = (self.size + 1).min(self.max);
                out.push(Decision::Land(testing));
                return out;
            }
            (Round::Batch, false) => {
                self.size = (self.size / 2).max(1);
                testing
            }
            (Round::Bisect { rest }, true) => {
                out.push(Decision::Land(testing));
                rest
            }
            (Round::Bisect { rest }, false) => {
                for item in rest.into_iter().rev() {
                    self.waiting.push_front(item);
                }
                testing
            }
        };
        self.bisect(suspects, &mut out);
        out
    }

    /// `suspects` fail on the head: one is the culprit; several are split.
    fn bisect(&mut self, mut suspects: Vec<T>, out: &mut Vec<Decision<T>>) {
        match suspects.len() {
            0 => {}
            1 => out.extend(suspects.pop().map(Decision::Culprit)),
            n => {
                let rest = suspects.split_off(n.div_ceil(2));
                self.testing = suspects;
                self.round = Round::Bisect { rest };
            }
        }
    }

    /// Puts `items` back at the front, in order, untested (a verified set
    /// that could not land: it is verified again on the head as it is).
    pub fn requeue_front(&mut self, items: Vec<T>) {
        for item in items.into_iter().rev() {
            if !self.contains(&item) {
                self.waiting.push_front(item);
            }
        }
    }

    /// Takes `item` out of the queue (it conflicted, was cancelled, or
    /// landed by other means). Removing it from the half under verification
    /// leaves the verification to be redone on what remains; the caller
    /// learns so from the return value. A set of suspects left with one
    /// item keeps bisecting correctly: it is still known to fail.
    pub fn remove(&mut self, item: &T) -> Removed {
        if let Some(i) = self.waiting.iter().position(|x| x == item) {
            self.waiting.remove(i);
            return Removed::Idle;
        }
        if let Round::Bisect { rest } = &mut self.round
            && let Some(i) = rest.iter().position(|x| x == item)
        {
            rest.remove(i);
            // The failing set lost a member: it may no longer fail, so its
            // remainder is verified as a fresh batch later.
            let rest = std::mem::take(rest);
            for x in rest.into_iter().rev() {
                self.waiting.push_front(x);
            }
            self.round = Round::Batch;
            return Removed::Idle;
        }
        if let Some(i) = self.testing.iter().position(|x| x == item) {
            self.testing.remove(i);
            // What was under verification changed: verify it afresh.
            let testing = std::mem::take(&mut self.testing);
            let rest = match std::mem::replace(&mut self.round, Round::Batch) {
                Round::Bisect { rest } => rest,
                Round::Batch => Vec::new(),
            };
            for x in testing.into_iter().chain(rest).rev() {
                self.waiting.push_front(x);
            }
            return Removed::Restart;
        }
        Removed::Absent
    }
}

/// What [`MergeQueue::remove`] did to the verification in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// Not in the queue.
    Absent,
    /// Removed; the verification in flight (if any) stands.
    Idle,
    /// It was under verification: that verification no longer counts.
    Restart,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the queue to empty against a verifier that fails any set
    /// holding a culprit; returns (verifications, landed, culprits).
    fn run(items: &[u32], culprits: &[u32], max: usize) -> (usize, Vec<u32>, Vec<u32>) {
        let mut q = MergeQueue::new(max);
        for &i in items {
            q.push(i);
        }
        let (mut runs, mut landed, mut found) = (0, Vec::new(), Vec::new());
        while let Some(set) = q.next() {
            runs += 1;
            assert!(runs < 1000, "the queue must terminate");
            let passed = !set.iter().any(|x| culprits.contains(x));
            for d in q.verdict(passed) {
                match d {
                    Decision::Land(xs) => landed.extend(xs),
                    Decision::Culprit(x) => found.push(x),
                }
            }
        }
        (runs, landed, found)
    }

    #[test]
    fn a_batch_of_8_with_one_culprit_costs_at_most_log2_8_plus_1_verifications() {
        for culprit in 0..8u32 {
            let items: Vec<u32> = (0..8).collect();
            let mut q = MergeQueue::new(8);
            for &i in &items {
                q.push(i);
            }
            let mut runs = 0;
            let mut found = None;
            let mut landed = Vec::new();
            while found.is_none() {
                let set = q.next().expect("a culprit is found before the queue empties").to_vec();
                runs += 1;
                for d in q.verdict(!set.contains(&culprit)) {
                    match d {
                        Decision::Land(xs) => landed.extend(xs),
                        Decision::Culprit(x) => found = Some(x),
                    }
                }
            }
            assert_eq!(found, Some(culprit));
            assert!(runs <= 4, "culprit {culprit}: {runs} verifications");
            // Everything before the culprit landed in order; nothing after it did.
            assert_eq!(landed, (0..culprit).collect::<Vec<_>>(), "culprit {culprit}");
        }
    }

    #[test]
    fn the_last_suspect_is_the_culprit_without_being_verified() {
        let mut q = MergeQueue::new(2);
        q.push('a');
        q.push('b');
        assert_eq!(q.next(), Some(&['a', 'b'][..]));
        assert!(q.verdict(false).is_empty());
        assert_eq!(q.next(), Some(&['a'][..]));
        // `a` passes: `b` is the culprit, never verified alone.
        assert_eq!(q.verdict(true), vec![Decision::Land(vec!['a']), Decision::Culprit('b')]);
        assert_eq!(q.next(), None);
    }

    #[test]
    fn a_failing_first_half_sends_the_untested_second_half_back_to_the_front() {
        let mut q = MergeQueue::new(4);
        for c in ['a', 'b', 'c', 'd', 'e'] {
            q.push(c);
        }
        assert_eq!(q.next(), Some(&['a', 'b', 'c', 'd'][..]));
        assert!(q.verdict(false).is_empty());
        assert_eq!(q.next(), Some(&['a', 'b'][..]));
        assert!(q.verdict(false).is_empty());
        assert_eq!(q.waiting().copied().collect::<Vec<_>>(), vec!['c', 'd', 'e']);
        assert_eq!(q.next(), Some(&['a'][..]));
        assert_eq!(q.verdict(false), vec![Decision::Culprit('a')]);
        // b, c, d were never shown to fail: they come next, before e.
        assert_eq!(q.waiting().copied().collect::<Vec<_>>(), vec!['b', 'c', 'd', 'e']);
    }

    #[test]
    fn batch_size_grows_on_success_and_halves_on_failure() {
        let mut q = MergeQueue::new(8);
        assert_eq!(q.batch_size(), 8);
        for i in 0..20u32 {
            q.push(i);
        }
        q.next();
        assert!(q.verdict(false).is_empty());
        assert_eq!(q.batch_size(), 4);
        // Finish the bisection with everything passing but the last suspect.
        while q.is_bisecting() {
            q.verdict(true);
        }
        q.next();
        assert_eq!(q.testing().len(), 4);
        q.verdict(false);
        assert_eq!(q.batch_size(), 2);
        while q.is_bisecting() {
            q.verdict(true);
        }
        q.next();
        q.verdict(true);
        assert_eq!(q.batch_size(), 3, "grows by one on success");
        for _ in 0..20 {
            if q.next().is_none() {
                break;
            }
            q.verdict(true);
        }
        assert!(q.batch_size() <= 8, "never beyond the maximum");
        let mut one = MergeQueue::new(1);
        one.push(1u32);
        one.next();
        one.verdict(false);
        assert_eq!(one.batch_size(), 1, "never below one");
    }

    #[test]
    fn every_item_lands_or_is_a_culprit_exactly_once() {
        for culprits in [vec![], vec![3], vec![0, 7], vec![1, 2, 3], (0..10).collect::<Vec<u32>>()] {
            let items: Vec<u32> = (0..10).collect();
            let (_, landed, found) = run(&items, &culprits, 4);
            let mut all: Vec<u32> = landed.iter().chain(&found).copied().collect();
            all.sort();
            assert_eq!(all, items, "culprits {culprits:?}");
            let mut f = found.clone();
            f.sort();
            assert_eq!(f, culprits);
            // Landing keeps queue order.
            assert!(landed.windows(2).all(|w| w[0] < w[1]), "{landed:?}");
        }
    }

    #[test]
    fn removing_an_item_under_verification_restarts_that_verification() {
        let mut q = MergeQueue::new(4);
        for c in ['a', 'b', 'c'] {
            q.push(c);
        }
        q.next();
        assert_eq!(q.remove(&'b'), Removed::Restart);
        assert!(q.testing().is_empty());
        assert_eq!(q.next(), Some(&['a', 'c'][..]));
        assert_eq!(q.remove(&'z'), Removed::Absent);
        q.push('d');
        assert_eq!(q.remove(&'d'), Removed::Idle);
        assert!(!q.contains(&'d'));
    }

    #[test]
    fn pushing_an_item_already_queued_does_not_queue_it_twice() {
        let mut q = MergeQueue::new(4);
        q.push(1u32);
        q.push(1);
        assert_eq!(q.next(), Some(&[1][..]));
        q.push(1);
        assert_eq!(q.waiting().count(), 0);
    }
}
