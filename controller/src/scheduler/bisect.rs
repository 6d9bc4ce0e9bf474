//! The merge queue's decisions, as pure logic: which tasks are verified
//! together and on top of what, what lands, who is the culprit, and how
//! big the next batch is. No I/O and no ids beyond the caller's, so every
//! rule is tested here and the scheduler only carries the decisions out.
//!
//! Rules (Zuul's dependent pipeline, with bors' batches):
//! - Waiting items are taken in order into cars of up to `size` items.
//!   Each car is merged onto the car ahead of it (the first onto the
//!   integration head), so up to `limit` cars are verified at once, each on
//!   exactly what will be under it when it lands.
//! - Cars land in order, one compare-and-swap each: a passing car lands
//!   once every car ahead of it has; the size then grows by one (up to the
//!   maximum).
//! - A failing car invalidates the cars behind it (their trees hold its
//!   change): they go back to waiting, untested, and no car is formed until
//!   it is decided. Once every car ahead of it has landed, a car of one is
//!   the culprit; a larger one goes back to the front and the size halves,
//!   so its halves are verified next, stacked and at once: bisection in
//!   parallel. Once the first half lands, the second is known to fail on
//!   the new head without a verdict of its own: a single suspect is then
//!   the culprit, found without being verified alone, so one verifier
//!   finds one culprit among N in at most ⌈log2 N⌉ + 1 verifications.
//! - A failing car whose predecessor then fails is not trusted (the
//!   predecessor may be the cause) and goes back to waiting.
//! - Isolating (`isolating(true)`), a failed car of several decided at the
//!   front leaves the train instead: it becomes a suspect group, bisected
//!   beside the train by probes, each verifying the first half of a group
//!   alone on the integration head. A failing half holds a culprit (one
//!   item: the culprit) and the rest goes back to the queue; a passing half
//!   lands at once if nothing is on the train (it was verified on the
//!   head), and then the rest is known to fail as on the train, else it
//!   goes back to the queue and the rest stays suspect. So the train goes
//!   on while culprits are sought, several at once, where bisecting on the
//!   train stops it for every round of every culprit. An item that fails
//!   alone on the head is a culprit; a group is known to fail only on the
//!   head it failed on, so after any other landing its last item is probed
//!   alone, not named. Items a probe passed that fail in a car again (with
//!   another item: a pair that breaks only together) are bisected on the
//!   train, which finds such a pair.

use std::collections::VecDeque;

/// Items verified together, on top of the cars ahead of them.
#[derive(Debug, Clone)]
pub struct Car<T> {
    pub id: u64,
    pub items: Vec<T>,
    verdict: Option<bool>,
    landing: bool,
}

/// A group known (or suspected) to hold a culprit, waiting for a probe.
#[derive(Debug, Clone)]
struct Suspect<T> {
    items: Vec<T>,
    /// The landing count at which it was known to fail on the head.
    known_at: Option<u64>,
    /// A piece of a group split several ways: probed whole.
    whole: bool,
}

/// A probe: `items` (the first half of a suspect group) verified alone on
/// the integration head; `rest` is the group's other half.
#[derive(Debug, Clone)]
pub struct Probe<T> {
    pub id: u64,
    pub items: Vec<T>,
    rest: Vec<T>,
    known_at: Option<u64>,
    /// The landing count when it was formed: the head it is verified on.
    at: u64,
}

/// What a verdict or a removal settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled<T> {
    /// Cars taken off the train: their verifications no longer count.
    pub dropped: Vec<u64>,
    /// Items found to break the tree on their own.
    pub culprits: Vec<T>,
}

impl<T> Default for Settled<T> {
    fn default() -> Self {
        Settled { dropped: Vec::new(), culprits: Vec::new() }
    }
}

/// The queue of one integration branch.
#[derive(Debug, Clone)]
pub struct MergeQueue<T> {
    waiting: VecDeque<T>,
    /// In landing order; `cars[0]` is merged onto the integration head.
    cars: Vec<Car<T>>,
    /// The halves of the last failed car that was split: once the first
    /// lands, the second is known to fail.
    halves: Option<(Vec<T>, Vec<T>)>,
    size: usize,
    max: usize,
    /// Whether a failed car's culprits are sought off the train.
    isolate: bool,
    suspects: VecDeque<Suspect<T>>,
    probes: Vec<Probe<T>>,
    /// A probe that passed and lands as the front car (its id), and the
    /// rest of its group, known to fail once it lands if the group was.
    awaiting: Option<(u64, Vec<T>, bool)>,
    /// Items a probe passed, while queued: failing in a car again, they
    /// are bisected on the train.
    cleared: Vec<T>,
    /// Landings so far: which head a probe and a suspect were verified on.
    landings: u64,
}

impl<T: Clone + PartialEq> MergeQueue<T> {
    /// A queue whose batches start at `max` items (optimistic, as Zuul's
    /// window starts open) and never exceed it; `max` 0 counts as 1.
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        MergeQueue {
            waiting: VecDeque::new(),
            cars: Vec::new(),
            halves: None,
            size: max,
            max,
            isolate: false,
            suspects: VecDeque::new(),
            probes: Vec::new(),
            awaiting: None,
            cleared: Vec::new(),
            landings: 0,
        }
    }

    /// Seeks a failed car's culprits off the train (see the rules above).
    pub fn isolating(mut self, on: bool) -> Self {
        self.isolate = on;
        self
    }

    pub fn push(&mut self, item: T) {
        if !self.contains(&item) {
            self.waiting.push_back(item);
        }
    }

    /// Queues `item` first: a task back from its owner after failing here
    /// (a culprit's next attempt), which has waited its turn once already
    /// and whose swarm's end waits on it.
    pub fn push_first(&mut self, item: T) {
        if !self.contains(&item) {
            self.waiting.push_front(item);
        }
    }

    pub fn contains(&self, item: &T) -> bool {
        self.waiting.contains(item)
            || self.cars.iter().any(|c| c.items.contains(item))
            || self.probes.iter().any(|p| p.items.contains(item) || p.rest.contains(item))
            || self.suspects.iter().any(|g| g.items.contains(item))
            || self.awaiting.as_ref().is_some_and(|(_, rest, _)| rest.contains(item))
    }

    /// The size the next car will have (fewer if fewer wait).
    pub fn batch_size(&self) -> usize {
        self.size
    }

    pub fn waiting(&self) -> impl Iterator<Item = &T> {
        self.waiting.iter()
    }

    pub fn cars(&self) -> &[Car<T>] {
        &self.cars
    }

    /// The probes out.
    pub fn probes(&self) -> &[Probe<T>] {
        &self.probes
    }

    /// Suspect groups waiting for a probe.
    pub fn suspects(&self) -> usize {
        self.suspects.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
            && self.cars.is_empty()
            && self.suspects.is_empty()
            && self.probes.is_empty()
            && self.awaiting.is_none()
    }

    /// Forms car `id` behind the last one from the first waiting items,
    /// unless `limit` cars are out already, nothing waits, or a failed car
    /// waits to be decided.
    #[cfg(test)]
    pub fn form(&mut self, id: u64, limit: usize) -> Option<&[T]> {
        self.form_sized(id, limit, usize::MAX)
    }

    /// As [`MergeQueue::form`], with at most `n` items (the fit the caller
    /// chose); a half of a split car keeps its own size.
    pub fn form_sized(&mut self, id: u64, limit: usize, n: usize) -> Option<&[T]> {
        // While a probe lands, the rest of its group is about to be known.
        let failed = self.cars.iter().any(|c| c.verdict == Some(false)) || self.awaiting.is_some();
        if self.cars.len() + self.probes.len() >= limit.max(1) || failed || self.waiting.is_empty() {
            return None;
        }
        // A half of a split car is a car of its own, so that the second
        // half is known to fail once the first lands.
        let starts_with = |half: &[T]| {
            half.len() <= self.waiting.len() && self.waiting.iter().zip(half).all(|(a, b)| a == b)
        };
        let n = match &self.halves {
            Some((first, _)) if starts_with(first) => first.len(),
            Some((_, second)) if starts_with(second) => second.len(),
            _ => self.size.min(n.max(1)).min(self.waiting.len()),
        };
        let items: Vec<T> = self.waiting.drain(..n).collect();
        self.cars.push(Car { id, items, verdict: None, landing: false });
        self.cars.last().map(|c| c.items.as_slice())
    }

    /// Probe `id` of the first suspect group, unless `limit` cars and
    /// probes are out or none waits: the group's first half (the rest is
    /// decided by its verdict), or, split `ways` ways (verifiers to spare),
    /// its first piece, the others probed whole next; or a single item not
    /// known to fail (a known one is named at once).
    pub fn form_probe(&mut self, id: u64, limit: usize, ways: usize) -> Option<&[T]> {
        if self.cars.len() + self.probes.len() >= limit.max(1) {
            return None;
        }
        let Suspect { mut items, known_at, whole } = self.suspects.pop_front()?;
        let known = known_at == Some(self.landings) && !whole;
        let mut rest = Vec::new();
        if !whole && items.len() > 1 && ways > 1 {
            let size = items.len().div_ceil(ways.min(items.len()));
            let mut pieces: Vec<Vec<T>> = items.chunks(size).map(<[T]>::to_vec).collect();
            items = pieces.remove(0);
            for piece in pieces.into_iter().rev() {
                self.suspects.push_front(Suspect { items: piece, known_at: None, whole: true });
            }
        } else if !whole && items.len() > 1 {
            rest = items.split_off(items.len().div_ceil(2));
        }
        let known_at = (known && !rest.is_empty()).then_some(self.landings);
        self.probes.push(Probe { id, items, rest, known_at, at: self.landings });
        self.probes.last().map(|p| p.items.as_slice())
    }

    /// The verdict on probe `id` (ignored for one no longer out).
    pub fn probe_verdict(&mut self, id: u64, passed: bool) -> Settled<T> {
        let mut settled = Settled::default();
        let Some(i) = self.probes.iter().position(|p| p.id == id) else { return settled };
        let Probe { mut items, rest, known_at, at, .. } = self.probes.remove(i);
        let on_head = at == self.landings;
        if !passed {
            // It fails on a head of landed, verified commits: known to
            // fail as of that head, and one item alone is the culprit
            // whichever head it was (the train may have moved meanwhile).
            self.requeue(rest);
            if items.len() == 1 {
                self.cleared.retain(|x| !items.contains(x));
                settled.culprits.append(&mut items);
            } else {
                self.suspect(items, Some(at), &mut settled);
            }
        } else if on_head && self.cars.is_empty() && self.awaiting.is_none() {
            // Verified on the head with nothing ahead: it lands as it is.
            if !rest.is_empty() {
                self.awaiting = Some((id, rest, known_at == Some(self.landings)));
            }
            self.cars.push(Car { id, items, verdict: Some(true), landing: false });
        } else {
            self.cleared.extend(items.iter().cloned());
            self.requeue(items);
            self.suspect(rest, None, &mut settled);
        }
        settled
    }

    /// `items` back to the front of the queue, in order.
    fn requeue(&mut self, items: Vec<T>) {
        for item in items.into_iter().rev() {
            self.waiting.push_front(item);
        }
    }

    /// A group that holds a culprit (known to fail on the head as of
    /// `known_at`), or may: a single known item is the culprit.
    fn suspect(&mut self, mut items: Vec<T>, known_at: Option<u64>, settled: &mut Settled<T>) {
        if items.len() == 1 && known_at == Some(self.landings) {
            self.cleared.retain(|x| !items.contains(x));
            settled.culprits.extend(items.pop());
        } else if !items.is_empty() {
            self.suspects.push_front(Suspect { items, known_at, whole: false });
        }
    }

    /// The verdict on car `id` (ignored for a car no longer on the train).
    pub fn verdict(&mut self, id: u64, passed: bool) -> Settled<T> {
        let mut settled = Settled::default();
        let Some(i) = self.cars.iter().position(|c| c.id == id && c.verdict.is_none()) else {
            return settled;
        };
        self.cars[i].verdict = Some(passed);
        if !passed {
            settled.dropped = self.drop_from(i + 1, None);
        }
        self.settle_front(&mut settled);
        settled
    }

    /// The front car, once it passed, to land now (at most once).
    pub fn ready_to_land(&mut self) -> Option<(u64, &[T])> {
        let front = self.cars.first_mut()?;
        if front.verdict != Some(true) || front.landing {
            return None;
        }
        front.landing = true;
        Some((front.id, front.items.as_slice()))
    }

    /// Car `id` landed: the next car's base is now the integration head.
    pub fn landed(&mut self, id: u64) -> Settled<T> {
        let mut settled = Settled::default();
        if !self.cars.first().is_some_and(|c| c.id == id && c.landing) {
            return settled;
        }
        let car = self.cars.remove(0);
        self.size = (self.size + 1).min(self.max);
        self.landings += 1;
        self.cleared.retain(|x| !car.items.contains(x));
        if let Some((probe, rest, known)) = self.awaiting.take() {
            if probe == id {
                let known_at = known.then_some(self.landings);
                self.suspect(rest, known_at, &mut settled);
            } else {
                self.awaiting = Some((probe, rest, known));
            }
        }
        if let Some((first, second)) = self.halves.take() {
            if car.items == first {
                self.second_half_fails(second, &mut settled);
            } else {
                self.halves = Some((first, second));
            }
        }
        self.settle_front(&mut settled);
        settled
    }

    /// The first half of a failed car landed, so `second` fails on the
    /// head: its car (if formed and not passed) fails without waiting for
    /// its verifier, or it is decided straight from the queue.
    fn second_half_fails(&mut self, second: Vec<T>, settled: &mut Settled<T>) {
        if let Some(front) = self.cars.first_mut() {
            if front.items == second && front.verdict != Some(true) {
                front.verdict = Some(false);
                settled.dropped.extend(self.drop_from(1, None));
            }
            return;
        }
        let at_front =
            second.len() <= self.waiting.len() && self.waiting.iter().zip(&second).all(|(a, b)| a == b);
        if at_front {
            self.waiting.drain(..second.len());
            self.split_failed(second, settled);
        }
    }

    /// Takes car `id` and every car behind it off the train, their items
    /// back to the front of the queue, to be verified again: it could not
    /// land (the ref moved), or could not be merged at all.
    pub fn drop_car(&mut self, id: u64) -> Settled<T> {
        let mut settled = Settled::default();
        if let Some(i) = self.probes.iter().position(|p| p.id == id) {
            // Not merged: its group is a suspect again, as it was.
            let Probe { mut items, rest, known_at, .. } = self.probes.remove(i);
            items.extend(rest);
            self.suspects.push_front(Suspect { items, known_at, whole: false });
            settled.dropped.push(id);
            return settled;
        }
        if let Some(i) = self.cars.iter().position(|c| c.id == id) {
            settled.dropped = self.drop_from(i, None);
        }
        settled
    }

    /// Takes `item` out of the queue (it conflicted, was cancelled, or
    /// landed by other means). The car holding it and every car behind it
    /// are verified afresh, unless that car is landing already: a landing
    /// lands exactly what was verified, and the caller decides the item.
    pub fn remove(&mut self, item: &T) -> Settled<T> {
        let mut settled = Settled::default();
        self.cleared.retain(|x| x != item);
        if let Some(i) = self.waiting.iter().position(|x| x == item) {
            self.waiting.remove(i);
            return settled;
        }
        // Without it, a group may no longer hold a culprit.
        for g in self.suspects.iter_mut().filter(|g| g.items.contains(item)) {
            g.items.retain(|x| x != item);
            g.known_at = None;
        }
        self.suspects.retain(|g| !g.items.is_empty());
        if let Some((_, rest, known)) = self.awaiting.as_mut().filter(|(_, rest, _)| rest.contains(item)) {
            rest.retain(|x| x != item);
            *known = false;
        }
        if let Some(i) = self.probes.iter().position(|p| p.items.contains(item) || p.rest.contains(item)) {
            let Probe { id, mut items, rest, .. } = self.probes.remove(i);
            items.extend(rest);
            items.retain(|x| x != item);
            if !items.is_empty() {
                self.suspects.push_front(Suspect { items, known_at: None, whole: false });
            }
            settled.dropped.push(id);
            return settled;
        }
        let Some(i) = self.cars.iter().position(|c| c.items.contains(item)) else { return settled };
        if self.cars[i].landing {
            return settled;
        }
        settled.dropped = self.drop_from(i, Some(item));
        self.settle_front(&mut settled);
        settled
    }

    /// Cars `from..` off the train, their items (but `except`) back to the
    /// front of the queue in order; their ids.
    fn drop_from(&mut self, from: usize, except: Option<&T>) -> Vec<u64> {
        let from = from.min(self.cars.len());
        let dropped: Vec<Car<T>> = self.cars.drain(from..).collect();
        // A passed probe that will not land now: the rest of its group is
        // suspect, not known.
        if let Some((_, rest, _)) = self.awaiting.take_if(|(id, ..)| dropped.iter().any(|c| c.id == *id)) {
            self.suspects.push_front(Suspect { items: rest, known_at: None, whole: false });
        }
        let items: Vec<T> = dropped.iter().flat_map(|c| c.items.iter().cloned()).collect();
        for item in items.into_iter().rev().filter(|x| Some(x) != except) {
            self.waiting.push_front(item);
        }
        dropped.into_iter().map(|c| c.id).collect()
    }

    /// A failed car with nothing ahead of it is decided.
    fn settle_front(&mut self, settled: &mut Settled<T>) {
        while self.cars.first().is_some_and(|c| c.verdict == Some(false)) {
            let car = self.cars.remove(0);
            settled.dropped.extend(self.drop_from(0, None));
            self.split_failed(car.items, settled);
        }
    }

    /// `items` fail on the head: one is the culprit; several go back to
    /// the front, to be verified as two halves.
    fn split_failed(&mut self, mut items: Vec<T>, settled: &mut Settled<T>) {
        if items.len() == 1 {
            self.cleared.retain(|x| !items.contains(x));
            settled.culprits.extend(items.pop());
            return;
        }
        let half = items.len().div_ceil(2);
        self.size = half.min(self.max).max(1);
        if self.isolate && !items.iter().any(|x| self.cleared.contains(x)) {
            self.suspects.push_back(Suspect { items, known_at: Some(self.landings), whole: false });
            return;
        }
        self.halves = Some((items[..half].to_vec(), items[half..].to_vec()));
        for item in items.into_iter().rev() {
            self.waiting.push_front(item);
        }
    }
}

#[cfg(test)]
#[path = "bisect_tests.rs"]
mod tests;
