use proptest::prelude::*;

use super::*;

/// A queue of `items` with batches of up to `max`.
fn queue<T: Clone + PartialEq>(items: &[T], max: usize) -> MergeQueue<T> {
    let mut q = MergeQueue::new(max);
    for i in items {
        q.push(i.clone());
    }
    q
}

fn formed<T: Clone + PartialEq>(q: &mut MergeQueue<T>, id: u64, limit: usize) -> Option<Vec<T>> {
    q.form(id, limit).map(<[T]>::to_vec)
}

#[test]
fn up_to_limit_cars_are_verified_at_once_and_land_in_order_whatever_order_verdicts_come_in() {
    let mut q = queue(&['a', 'b', 'c', 'd', 'e', 'f', 'g'], 2);
    assert_eq!(formed(&mut q, 1, 3), Some(vec!['a', 'b']));
    assert_eq!(formed(&mut q, 2, 3), Some(vec!['c', 'd']));
    assert_eq!(formed(&mut q, 3, 3), Some(vec!['e', 'f']));
    assert_eq!(formed(&mut q, 4, 3), None, "three cars are the limit");
    // The last passes first: nothing lands before the cars ahead of it.
    assert_eq!(q.verdict(3, true), Settled::default());
    assert_eq!(q.ready_to_land(), None);
    q.verdict(2, true);
    assert_eq!(q.ready_to_land(), None);
    q.verdict(1, true);
    assert_eq!(q.ready_to_land().map(|(id, items)| (id, items.to_vec())), Some((1, vec!['a', 'b'])));
    assert_eq!(q.ready_to_land(), None, "a landing is handed out once");
    q.landed(1);
    assert_eq!(q.ready_to_land().map(|(id, _)| id), Some(2));
    q.landed(2);
    assert_eq!(q.ready_to_land().map(|(id, _)| id), Some(3));
    q.landed(3);
    assert_eq!(formed(&mut q, 5, 3), Some(vec!['g']));
}

#[test]
fn a_failing_car_sends_the_cars_behind_it_back_untested_and_is_split_once_at_the_front() {
    let mut q = queue(&[1u32, 2, 3, 4, 5, 6, 7, 8], 2);
    for id in 1..=4 {
        formed(&mut q, id, 4);
    }
    // Car 2 fails while car 1 is still out: 3 and 4 are dropped, and no
    // car is formed until car 2 is decided.
    let settled = q.verdict(2, false);
    assert_eq!(settled.dropped, vec![3, 4]);
    assert_eq!(q.waiting().copied().collect::<Vec<_>>(), vec![5, 6, 7, 8]);
    assert_eq!(formed(&mut q, 5, 4), None);
    // Car 1 passes and lands: car 2 is at the front, split in halves.
    q.verdict(1, true);
    q.ready_to_land();
    let settled = q.landed(1);
    assert!(settled.culprits.is_empty());
    assert_eq!(q.batch_size(), 1);
    assert_eq!(formed(&mut q, 6, 4), Some(vec![3]));
    assert_eq!(formed(&mut q, 7, 4), Some(vec![4]));
    q.verdict(7, false);
    q.verdict(6, true);
    q.ready_to_land();
    let settled = q.landed(6);
    assert_eq!(settled.culprits, vec![4], "a car of one that fails at the front is the culprit");
    assert_eq!(formed(&mut q, 8, 4), Some(vec![5, 6]), "the size grows again after a landing");
}

#[test]
fn a_failure_behind_a_failing_car_is_not_trusted() {
    let mut q = queue(&['a', 'b', 'c'], 1);
    for id in 1..=3 {
        formed(&mut q, id, 3);
    }
    q.verdict(3, false);
    let settled = q.verdict(1, false);
    assert_eq!(settled.culprits, vec!['a']);
    assert_eq!(settled.dropped, vec![2, 3]);
    // c's failure may have been a's doing: c is verified again.
    assert_eq!(q.waiting().copied().collect::<Vec<_>>(), vec!['b', 'c']);
}

#[test]
fn a_batch_of_8_with_one_culprit_is_found_with_every_other_item_landed_in_order() {
    for culprit in 0..8u32 {
        for limit in [1, 2, 6] {
            for (isolate, ways) in [(false, 1), (true, 1), (true, 3)] {
                let shape = (8, limit, isolate, ways);
                let (mut landed, culprits, runs) =
                    run(&(0..8).collect::<Vec<_>>(), &[culprit], shape, &mut |_| 0, &mut || false);
                assert_eq!(culprits, vec![culprit], "limit {limit}, isolating {isolate}");
                let others: Vec<u32> = (0..8).filter(|&i| i != culprit).collect();
                if isolate {
                    // A probe's half that passed may land after the train.
                    landed.sort();
                    assert!(runs <= 16, "{runs} verifications, culprit {culprit}, limit {limit}");
                }
                assert_eq!(landed, others, "culprit {culprit}, limit {limit}, isolating {isolate}");
            }
        }
    }
}

#[test]
fn removing_an_item_reforms_its_car_and_those_behind_but_not_one_landing() {
    let mut q = queue(&['a', 'b', 'c', 'd'], 2);
    formed(&mut q, 1, 2);
    formed(&mut q, 2, 2);
    let settled = q.remove(&'c');
    assert_eq!(settled.dropped, vec![2]);
    assert_eq!(q.waiting().copied().collect::<Vec<_>>(), vec!['d']);
    q.verdict(1, true);
    q.ready_to_land();
    assert_eq!(q.remove(&'a'), Settled::default(), "car 1 lands what was verified");
    assert!(q.contains(&'a'));
    q.push('d');
    assert_eq!(q.waiting().count(), 1, "an item is queued once");
    assert_eq!(q.remove(&'z'), Settled::default());
}

#[test]
fn a_landing_that_fails_puts_the_whole_train_back_in_order() {
    let mut q = queue(&[1u32, 2, 3], 1);
    for id in 1..=3 {
        formed(&mut q, id, 3);
    }
    q.verdict(1, true);
    q.ready_to_land();
    let settled = q.drop_car(1);
    assert_eq!(settled.dropped, vec![1, 2, 3]);
    assert_eq!(q.waiting().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
}

/// Runs `items` through the queue to the end, against a verifier that
/// fails a car whose tree (the landed items, the cars ahead, the car)
/// holds a culprit. `pick` chooses which outstanding car's verdict comes
/// next (`usize` index into the unanswered ones), so verdicts arrive in
/// any order. Checks that every landing is of a car verified on exactly
/// the landed items. Returns (landed, culprits, verifications).
/// With `isolate`, probes are verified on the landed items and their own.
fn run(
    items: &[u32],
    culprits: &[u32],
    (max, limit, isolate, ways): (usize, usize, bool, usize),
    pick: &mut dyn FnMut(usize) -> usize,
    restart: &mut dyn FnMut() -> bool,
) -> (Vec<u32>, Vec<u32>, usize) {
    let mut q = queue(items, max).isolating(isolate);
    let mut landed: Vec<u32> = Vec::new();
    let mut found = Vec::new();
    // Each car's tree when it was formed: what it is verified on.
    let mut trees: Vec<(u64, Vec<u32>)> = Vec::new();
    let (mut next_id, mut runs) = (1u64, 0usize);
    loop {
        assert!(runs < 10_000, "the queue must terminate");
        if restart() {
            // A restarted controller: nothing of the queue is stored, every
            // task still MERGING queues again in order, verdicts on the old
            // cars go nowhere, job ids start over.
            let left: Vec<u32> =
                items.iter().copied().filter(|i| !landed.contains(i) && !found.contains(i)).collect();
            q = queue(&left, max).isolating(isolate);
            trees.clear();
            next_id = 1;
        }
        while q.form(next_id, limit).is_some() {
            let mut tree: Vec<u32> = landed.clone();
            for c in q.cars() {
                tree.extend(&c.items);
            }
            trees.push((next_id, tree));
            next_id += 1;
        }
        while let Some(probe) = q.form_probe(next_id, limit, ways) {
            let mut tree: Vec<u32> = landed.clone();
            tree.extend(probe);
            trees.push((next_id, tree));
            next_id += 1;
        }
        let probes: Vec<u64> = q.probes().iter().map(|p| p.id).collect();
        let mut open: Vec<u64> = q.cars().iter().filter(|c| c.verdict.is_none()).map(|c| c.id).collect();
        open.extend(&probes);
        if open.is_empty() {
            break;
        }
        let id = open[pick(open.len()) % open.len()];
        let tree = trees.iter().find(|t| t.0 == id).map(|t| t.1.clone()).unwrap_or_default();
        runs += 1;
        let passed = !tree.iter().any(|x| culprits.contains(x));
        let settled = if probes.contains(&id) { q.probe_verdict(id, passed) } else { q.verdict(id, passed) };
        found.extend(settled.culprits);
        while let Some((id, car)) = q.ready_to_land().map(|(id, c)| (id, c.to_vec())) {
            let tree = &trees.iter().find(|t| t.0 == id).expect("a formed car").1;
            let mut expected = landed.clone();
            expected.extend(&car);
            assert_eq!(tree, &expected, "car {id} lands on exactly the tree it was verified on");
            landed.extend(car);
            found.extend(q.landed(id).culprits);
        }
    }
    assert!(q.is_empty(), "everything is decided");
    (landed, found, runs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_item_lands_or_is_a_culprit_once_and_nothing_unverified_lands_through_restarts(
        n in 1u32..40,
        culprit_bits in proptest::collection::vec(any::<bool>(), 40),
        max in 1usize..9,
        limit in 1usize..7,
        picks in proptest::collection::vec(any::<usize>(), 400),
        restarts in proptest::collection::vec(0u8..20, 400),
        isolate in any::<bool>(),
        ways in 1usize..5,
    ) {
        let items: Vec<u32> = (0..n).collect();
        let culprits: Vec<u32> = items.iter().copied().filter(|&i| culprit_bits[i as usize] && i % 3 == 0).collect();
        let mut at = 0;
        let mut pick = |open: usize| { at += 1; picks[at % picks.len()] % open };
        // About one step in twenty restarts the controller.
        let mut step = 0;
        let mut restart = || { step += 1; restarts[step % restarts.len()] == 0 };
        let (landed, found, _) = run(&items, &culprits, (max, limit, isolate, ways), &mut pick, &mut restart);
        let mut all: Vec<u32> = landed.iter().chain(&found).copied().collect();
        all.sort();
        prop_assert_eq!(all, items);
        let mut f = found.clone();
        f.sort();
        prop_assert_eq!(f, culprits);
    }
}

#[test]
fn verifying_in_parallel_takes_fewer_rounds_than_one_car_at_a_time() {
    // Rounds of verification when every outstanding car is answered at
    // once: what wall-clock time is made of with enough verifiers.
    let rounds = |limit: usize| {
        let mut q = queue(&(0..48u32).collect::<Vec<_>>(), 4);
        let culprits = [5u32, 17, 30, 41];
        let (mut landed, mut rounds, mut id) = (Vec::<u32>::new(), 0, 1u64);
        while !q.is_empty() {
            let mut trees = Vec::new();
            let mut ahead: Vec<u32> = landed.clone();
            for c in q.cars() {
                ahead.extend(&c.items);
            }
            while let Some(car) = q.form(id, limit).map(<[u32]>::to_vec) {
                ahead.extend(car);
                trees.push((id, ahead.clone()));
                id += 1;
            }
            rounds += 1;
            for (id, tree) in trees {
                q.verdict(id, !tree.iter().any(|x| culprits.contains(x)));
                while let Some((id, car)) = q.ready_to_land().map(|(id, c)| (id, c.to_vec())) {
                    landed.extend(car);
                    q.landed(id);
                }
            }
            assert!(rounds < 500);
        }
        rounds
    };
    let (one, six) = (rounds(1), rounds(6));
    // 4 culprits in 48 keep invalidating the cars behind them, so the gain
    // is well short of six-fold; still, it must be a large one.
    assert!(six * 3 <= one * 2, "six cars at once: {six} rounds, one at a time: {one}");
}

fn waiting<T: Clone + PartialEq>(q: &MergeQueue<T>) -> Vec<T> {
    q.waiting().cloned().collect()
}

#[test]
fn isolating_bisects_a_failed_car_beside_the_train_while_it_goes_on() {
    let mut q = queue(&[1u32, 2, 3, 4, 5, 6, 7, 8], 4).isolating(true);
    formed(&mut q, 1, 6);
    formed(&mut q, 2, 6);
    q.verdict(1, false);
    // Car 1 failed at the front: car 2 goes back, [1, 2, 3, 4] is a
    // suspect, and the train goes on with what waits at the halved size.
    assert_eq!(q.suspects(), 1);
    assert_eq!(formed(&mut q, 3, 6), Some(vec![5, 6]));
    assert_eq!(q.form_probe(4, 6, 1).map(<[u32]>::to_vec), Some(vec![1, 2]), "its first half, alone");
    assert_eq!(q.form_probe(5, 6, 1), None, "one probe per group");
    assert!(q.contains(&3));
    // [1, 2] passes with a car out: back to the queue, [3, 4] suspect.
    assert_eq!(q.probe_verdict(4, true), Settled::default());
    assert_eq!(waiting(&q), vec![1, 2, 7, 8]);
    assert_eq!(q.form_probe(6, 6, 1).map(<[u32]>::to_vec), Some(vec![3]));
    assert_eq!(q.probe_verdict(6, true), Settled::default());
    // [4] is not named without a verification: [1, 2] did not land first.
    assert_eq!(q.form_probe(7, 6, 1).map(<[u32]>::to_vec), Some(vec![4]));
    assert_eq!(q.probe_verdict(7, false).culprits, vec![4], "it fails alone on the head");
    assert_eq!(q.probe_verdict(7, false), Settled::default(), "a probe is decided once");
    assert_eq!(waiting(&q), vec![3, 1, 2, 7, 8]);
}

#[test]
fn a_probe_that_passes_with_the_train_empty_lands_and_names_the_other_half() {
    let mut q = queue(&['a', 'b', 'c', 'd'], 4).isolating(true);
    formed(&mut q, 1, 4);
    q.verdict(1, false);
    assert_eq!(q.form_probe(2, 4, 1).map(<[char]>::to_vec), Some(vec!['a', 'b']));
    assert_eq!(q.probe_verdict(2, true), Settled::default());
    assert_eq!(q.ready_to_land().map(|(id, items)| (id, items.to_vec())), Some((2, vec!['a', 'b'])));
    assert_eq!(formed(&mut q, 3, 4), None, "the train waits for the rest to be known");
    q.landed(2);
    // [c, d] fails on the head that holds a and b: bisected further.
    assert_eq!(q.form_probe(4, 4, 1).map(<[char]>::to_vec), Some(vec!['c']));
    assert_eq!(q.probe_verdict(4, true), Settled::default());
    q.ready_to_land();
    assert_eq!(q.landed(4).culprits, vec!['d'], "found without a verification of its own");
    assert!(q.is_empty());
}

#[test]
fn a_failing_half_is_bisected_and_the_other_half_goes_back_to_the_train() {
    let mut q = queue(&['a', 'b', 'c', 'd'], 4).isolating(true);
    formed(&mut q, 1, 4);
    q.verdict(1, false);
    q.form_probe(2, 4, 1);
    assert_eq!(q.probe_verdict(2, false), Settled::default());
    assert_eq!(waiting(&q), vec!['c', 'd']);
    assert_eq!(q.form_probe(3, 4, 1).map(<[char]>::to_vec), Some(vec!['a']));
    q.probe_verdict(3, true);
    q.ready_to_land();
    assert_eq!(q.landed(3).culprits, vec!['b']);
}

#[test]
fn items_a_probe_passed_that_fail_together_again_are_bisected_on_the_train() {
    // 1 and 3 fail only together.
    let mut q = queue(&[1u32, 2, 3, 4, 5, 6], 4).isolating(true);
    formed(&mut q, 1, 4);
    q.verdict(1, false);
    assert_eq!(formed(&mut q, 2, 4), Some(vec![5, 6]));
    q.form_probe(3, 4, 1);
    q.probe_verdict(3, true);
    q.form_probe(4, 4, 1);
    q.probe_verdict(4, true);
    q.verdict(2, true);
    q.ready_to_land();
    q.landed(2);
    assert_eq!(waiting(&q), vec![3, 1, 2]);
    assert_eq!(formed(&mut q, 5, 4), Some(vec![3, 1, 2]));
    assert_eq!(q.suspects(), 1, "4, not known to fail after 1 and 2 passed without landing");
    q.verdict(5, false);
    assert_eq!(q.suspects(), 1, "bisected on the train, not probed again");
    assert_eq!(formed(&mut q, 6, 4), Some(vec![3, 1]));
    assert_eq!(formed(&mut q, 7, 4), Some(vec![2]));
}

#[test]
fn removing_an_item_of_a_probe_drops_the_probe_and_keeps_the_rest_suspect() {
    let mut q = queue(&['a', 'b', 'c', 'd'], 4).isolating(true);
    formed(&mut q, 1, 4);
    q.verdict(1, false);
    q.form_probe(2, 4, 1);
    assert_eq!(q.remove(&'a').dropped, vec![2]);
    assert_eq!(q.form_probe(3, 4, 1).map(<[char]>::to_vec), Some(vec!['b', 'c']));
    assert_eq!(q.drop_car(3).dropped, vec![3], "a probe that could not be merged is a suspect again");
    assert_eq!(q.remove(&'c'), Settled::default(), "a suspect not out: just forgotten");
    assert_eq!(q.form_probe(4, 4, 1).map(<[char]>::to_vec), Some(vec!['b']));
    assert!(!q.contains(&'c'));
}

#[test]
fn a_suspect_group_split_several_ways_is_probed_piece_by_piece_each_whole() {
    let mut q = queue(&[1u32, 2, 3, 4, 5, 6, 7, 8], 8).isolating(true);
    formed(&mut q, 1, 8);
    q.verdict(1, false);
    assert_eq!(q.form_probe(2, 8, 4).map(<[u32]>::to_vec), Some(vec![1, 2]));
    assert_eq!(q.form_probe(3, 8, 4).map(<[u32]>::to_vec), Some(vec![3, 4]), "a piece is not split again");
    assert_eq!(q.form_probe(4, 8, 4).map(<[u32]>::to_vec), Some(vec![5, 6]));
    assert_eq!(q.form_probe(5, 8, 4).map(<[u32]>::to_vec), Some(vec![7, 8]));
    // No piece is named without its own verdict.
    for id in [2, 3, 5] {
        assert_eq!(q.probe_verdict(id, true), Settled::default());
    }
    assert_eq!(q.probe_verdict(4, false), Settled::default());
    assert_eq!(q.form_probe(6, 8, 4).map(<[u32]>::to_vec), Some(vec![5]), "the failed piece, split again");
    assert_eq!(q.form_probe(7, 8, 4).map(<[u32]>::to_vec), Some(vec![6]));
    assert_eq!(q.probe_verdict(7, false).culprits, vec![6]);
}

#[test]
fn a_culprits_next_attempt_is_queued_first() {
    let mut q = queue(&['a', 'b'], 2);
    q.push_first('c');
    q.push_first('a');
    assert_eq!(waiting(&q), vec!['c', 'a', 'b'], "an item already queued keeps its place");
}
