//! Merge bases over a cache of parsed commits that lives as long as the [`crate::Integrator`].
//!
//! Without a commit-graph file, finding the merge base of an integration head and a task commit walks
//! every merge the integration branch has taken since the task forked (git's date-ordered
//! "paint down to common"). gix's walk re-parses those commits on every call, which made a merge queue
//! quadratic in parsing (~5 ms per merge after 1,000 merges). This cache keeps each commit's parents and
//! date, so the walk is hash lookups. It answers only the unambiguous cases (no base, or exactly one);
//! criss-cross histories with several bases fall back to gix's own merge (virtual merge bases).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::GitError;

const P1: u8 = 1;
const P2: u8 = 2;
const STALE: u8 = 4;
const RESULT: u8 = 8;
/// Cached commits before the cache is dropped and rebuilt (~100 bytes each).
const MAX_CACHED: usize = 250_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bases {
    /// Unrelated histories.
    None,
    One(gix::ObjectId),
    /// More than one candidate: let gix compute (virtual) merge bases.
    Many,
}

struct Node {
    parents: Vec<gix::ObjectId>,
    time: i64,
}

#[derive(Default)]
pub(crate) struct CommitCache {
    nodes: HashMap<gix::ObjectId, Node>,
}

impl CommitCache {
    fn load(&mut self, repo: &gix::Repository, id: gix::ObjectId) -> Result<(), GitError> {
        if self.nodes.contains_key(&id) {
            return Ok(());
        }
        if self.nodes.len() >= MAX_CACHED {
            self.nodes.clear();
        }
        let commit = repo.find_commit(id).map_err(GitError::gix_any("read commit"))?;
        let parents = commit.parent_ids().map(|p| p.detach()).collect();
        let time = commit.time().map_err(GitError::gix("read commit time"))?.seconds;
        self.nodes.insert(id, Node { parents, time });
        Ok(())
    }

    /// Whether `id` is a commit this cache has parsed.
    pub(crate) fn knows(&self, id: &gix::ObjectId) -> bool {
        self.nodes.contains_key(id)
    }

    fn time(&self, id: &gix::ObjectId) -> i64 {
        self.nodes.get(id).map_or(i64::MIN, |n| n.time)
    }

    /// git's `paint_down_to_common` followed by dropping stale results.
    pub(crate) fn merge_bases(
        &mut self,
        repo: &gix::Repository,
        one: gix::ObjectId,
        two: gix::ObjectId,
    ) -> Result<Bases, GitError> {
        if one == two {
            return Ok(Bases::One(one));
        }
        self.load(repo, one)?;
        self.load(repo, two)?;
        let mut flags: HashMap<gix::ObjectId, u8> = HashMap::new();
        let mut queue: BinaryHeap<(i64, Reverse<u64>, gix::ObjectId)> = BinaryHeap::new();
        let mut seq = 0u64;
        flags.insert(one, P1);
        flags.insert(two, P2);
        for id in [one, two] {
            queue.push((self.time(&id), Reverse(seq), id));
            seq += 1;
        }
        let mut results = Vec::new();
        let flag =
            |flags: &HashMap<gix::ObjectId, u8>, id: &gix::ObjectId| flags.get(id).copied().unwrap_or(0);
        while queue.iter().any(|(_, _, id)| flag(&flags, id) & STALE == 0) {
            let Some((_, _, commit)) = queue.pop() else { break };
            let mut paint = flag(&flags, &commit) & (P1 | P2 | STALE);
            if paint & (P1 | P2) == (P1 | P2) {
                let entry = flags.entry(commit).or_default();
                if *entry & RESULT == 0 {
                    *entry |= RESULT;
                    results.push(commit);
                }
                paint |= STALE;
            }
            self.load(repo, commit)?;
            let parents = self.nodes.get(&commit).map(|n| n.parents.clone()).unwrap_or_default();
            for parent in parents {
                let entry = flags.entry(parent).or_default();
                if *entry & paint == paint {
                    continue;
                }
                *entry |= paint;
                self.load(repo, parent)?;
                queue.push((self.time(&parent), Reverse(seq), parent));
                seq += 1;
            }
        }
        let bases: Vec<gix::ObjectId> =
            results.into_iter().filter(|id| flag(&flags, id) & STALE == 0).collect();
        Ok(match bases.as_slice() {
            [] => Bases::None,
            [only] => Bases::One(*only),
            _ => Bases::Many,
        })
    }
}
