//! How big the next car is, and whether it goes now: a pure decision from
//! what waits and what the verifiers are doing, so every rule is a unit
//! test here and `mod.rs` only gathers the figures.
//!
//! - A verifier nobody else needs ("free": idle, and no READY task could
//!   use it instead) is spent at once: what waits is spread over the free
//!   verifiers, so each verifies a car of ⌈waiting / free⌉ (up to the
//!   queue's batch size). Small cars find a culprit sooner and a failure
//!   sends fewer tasks back, and the verifier would idle otherwise.
//! - A verifier that READY tasks could use instead (a sidecar that both
//!   works and verifies) is taken from them only when they can spare it
//!   (the caller's `spare`: delaying them by a verification does not
//!   lengthen the critical path), and only for a full car or one whose
//!   oldest task waited `fill_ms`: a verification then costs the work one
//!   slot for as many tasks as it can carry.
//! - With no verifier to take, the car waits and fills; it is formed when
//!   one is free.
//! - A suspect group (a failed car's items, see `bisect.rs`) is probed
//!   before any car, on a free verifier or a spare one, without waiting to
//!   fill: its size is its own, and the culprit it finds goes back to its
//!   owner sooner, while its innocent items go back to the train. It is
//!   split one way per verifier it may take now, its pieces probed at once
//!   (a round of verification each time instead of one per halving); with
//!   one verifier, halves, the second decided by the first's verdict.

/// What the decision is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// Tasks waiting for a car.
    pub waiting: usize,
    /// The largest car the queue allows now (its maximum, halved while it
    /// bisects a failure).
    pub size: usize,
    /// Idle verifiers that no car has claimed and no READY task could use.
    pub free: usize,
    /// Idle verifiers READY tasks could use but can spare.
    pub spare: usize,
    /// How long the oldest waiting task has waited, ms.
    pub waited_ms: u64,
    /// The bound on how long a car waits to fill before it takes a spare
    /// verifier, ms.
    pub fill_ms: u64,
    /// Suspect groups waiting for a probe.
    pub suspects: usize,
}

/// What goes to a verifier next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The first suspect group's probe.
    Probe,
    /// A car of this many waiting tasks.
    Car(usize),
}

/// How many ways the suspect group probed next is split.
pub fn probe_ways(f: &Fit) -> usize {
    (f.free + f.spare).max(1)
}

/// The next probe or car, or `None` to wait.
pub fn next(f: &Fit) -> Option<Next> {
    if f.suspects > 0 && (f.free > 0 || f.spare > 0) {
        return Some(Next::Probe);
    }
    car_size(f).map(Next::Car)
}

/// The next car's size, or `None` to wait.
pub fn car_size(f: &Fit) -> Option<usize> {
    let size = f.size.max(1);
    if f.waiting == 0 {
        return None;
    }
    if f.free > 0 {
        return Some(f.waiting.div_ceil(f.free).clamp(1, size));
    }
    if f.spare > 0 && (f.waiting >= size || f.waited_ms >= f.fill_ms) {
        return Some(f.waiting.min(size));
    }
    None
}

/// Whether READY tasks can spare a verifier: delaying the most critical of
/// them (`ready_path_ms`, its remaining critical path) by one verification
/// (`verify_ms`) still finishes within what the swarm needs anyway, the
/// longer of its longest chain (`chain_ms`) and its remaining work spread
/// over its slots (`work_ms / slots`). A car whose tasks unblock a longer
/// chain than the READY task's (`car_path_ms`, the path below the car's
/// tasks) is worth the slot regardless.
pub fn can_spare(
    ready_path_ms: u64,
    car_path_ms: u64,
    verify_ms: u64,
    chain_ms: u64,
    work_ms: u64,
    slots: usize,
) -> bool {
    if car_path_ms > ready_path_ms {
        return true;
    }
    let bound = chain_ms.max(work_ms / slots.max(1) as u64);
    ready_path_ms.saturating_add(verify_ms) <= bound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(waiting: usize, free: usize, spare: usize, waited_ms: u64) -> Fit {
        Fit { waiting, size: 8, free, spare, waited_ms, fill_ms: 1_000, suspects: 0 }
    }

    #[test]
    fn a_suspect_group_is_probed_first_on_any_verifier_it_may_take() {
        let suspect = |f: Fit| Fit { suspects: 1, ..f };
        assert_eq!(next(&suspect(fit(8, 1, 0, 0))), Some(Next::Probe), "before a full car");
        assert_eq!(next(&suspect(fit(0, 0, 2, 0))), Some(Next::Probe), "a spare verifier, no filling");
        assert_eq!(next(&suspect(fit(8, 0, 0, 60_000))), None, "no verifier to take");
        assert_eq!(next(&fit(8, 1, 0, 0)), Some(Next::Car(8)), "no suspect: the car as fitted");
        assert_eq!(next(&fit(3, 0, 2, 0)), None);
    }

    #[test]
    fn a_suspect_group_is_split_one_way_per_verifier_it_may_take() {
        assert_eq!(probe_ways(&fit(0, 4, 0, 0)), 4);
        assert_eq!(probe_ways(&fit(0, 1, 2, 0)), 3, "free and spare alike");
        assert_eq!(probe_ways(&fit(0, 1, 0, 0)), 1, "one verifier: halves");
        assert_eq!(probe_ways(&fit(0, 0, 0, 0)), 1);
    }

    #[test]
    fn nothing_waiting_forms_nothing() {
        assert_eq!(car_size(&fit(0, 6, 6, 10_000)), None);
    }

    #[test]
    fn free_verifiers_go_at_once_and_share_what_waits() {
        assert_eq!(car_size(&fit(1, 3, 0, 0)), Some(1), "one task, a free verifier: at once");
        assert_eq!(car_size(&fit(6, 6, 0, 0)), Some(1), "six tasks over six free verifiers");
        assert_eq!(car_size(&fit(7, 3, 0, 0)), Some(3), "seven over three: cars of at most three");
        assert_eq!(car_size(&fit(48, 6, 0, 0)), Some(8));
        assert_eq!(car_size(&fit(100, 2, 0, 0)), Some(8), "never above the queue's batch size");
        let bisecting = Fit { size: 2, ..fit(10, 1, 0, 0) };
        assert_eq!(car_size(&bisecting), Some(2), "a halved size holds while the queue bisects");
    }

    #[test]
    fn a_verifier_ready_tasks_need_is_taken_only_for_a_full_or_aged_car() {
        assert_eq!(car_size(&fit(3, 0, 2, 0)), None, "three of eight, just queued: fill first");
        assert_eq!(car_size(&fit(3, 0, 2, 999)), None, "still within the fill bound");
        assert_eq!(car_size(&fit(3, 0, 2, 1_000)), Some(3), "the bound is reached: go with what waits");
        assert_eq!(car_size(&fit(9, 0, 2, 0)), Some(8), "a full car goes at once");
    }

    #[test]
    fn without_a_verifier_to_take_the_car_waits_however_long() {
        assert_eq!(car_size(&fit(8, 0, 0, 60_000)), None);
    }

    #[test]
    fn a_free_verifier_wins_over_a_spare_one() {
        assert_eq!(car_size(&fit(2, 1, 4, 0)), Some(2), "free: no waiting to fill");
    }

    #[test]
    fn ready_tasks_spare_a_slot_only_when_the_delay_fits_in_the_bound() {
        // 42 s of work left on 6 slots: 7 s; a 1 s task delayed 2 s fits.
        assert!(can_spare(1_000, 0, 2_000, 1_000, 42_000, 6));
        // 6 s left on 6 slots: the delayed task would finish past the bound.
        assert!(!can_spare(1_000, 0, 2_000, 1_000, 6_000, 6));
        // A long chain bounds the swarm: a short task has slack beside it.
        assert!(can_spare(1_000, 0, 2_000, 10_000, 0, 6));
        // The READY task is the long chain: no slack.
        assert!(!can_spare(10_000, 0, 2_000, 10_000, 0, 6));
        // The car's tasks unblock more than the READY task is worth.
        assert!(can_spare(1_000, 5_000, 2_000, 1_000, 0, 6));
        assert!(can_spare(1_000, 0, 2_000, 1_000, 6_000, 0), "no slots counts as one: 6 s of work left");
    }
}
