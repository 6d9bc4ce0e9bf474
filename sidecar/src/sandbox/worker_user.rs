//! `--worker-user USER`: a root sidecar's workers run as an unprivileged
//! user instead of root.
//!
//! Dropping every capability (`privileges`) already keeps a root worker
//! from `ptrace`, the host's network and the like, but a worker that is
//! still uid 0 owns every root-owned file Landlock lets it reach, and its
//! processes count against nobody's `RLIMIT_NPROC`. With a worker user the
//! trampoline, after everything that needs root (joining the attempt's
//! cgroup, setting rlimits, Landlock, clearing the bounding set), sets the
//! user's supplementary groups, then its gid, then its uid (real, effective
//! and saved), checks that `setuid(0)` now fails, and only then clears
//! what is left of the capability sets and execs the command.
//!
//! The supplementary groups are the user's own, from the group database
//! (`getgrouplist`, as a login of that user gets them): an operator who
//! adds the user to a group (a shared cache's) means its workers to have
//! it, so a dedicated user should be in no group it must not pass on (not
//! `docker`, never one with gid 0, which is refused).
//!
//! USER is a name or a numeric uid that the user database knows (its
//! home and groups come from there); root, uid 0, and a user whose groups
//! include gid 0 are refused. Only a sidecar that may change uids (root,
//! or one holding `CAP_SETUID` and `CAP_SETGID`) can do this; any other
//! refuses to start, unless USER is itself, when there is nothing to do.
//! The directories the worker writes are handed to the user before it
//! starts (see [`super::ownership`]); the directories above them must be
//! searchable by it, which the sidecar checks at start.

use std::ffi::CString;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::unistd::{Gid, Uid, User};
use serde::{Deserialize, Serialize};

use super::{Confinement, Policy};

/// The ids a worker runs under, as the trampoline's policy carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
    /// The supplementary groups, the primary one among them.
    pub groups: Vec<u32>,
}

/// The user `--worker-user` names, looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerUser {
    pub name: String,
    pub ids: Ids,
    /// The user's home directory: the worker's `HOME`.
    pub home: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerUserError {
    #[error("empty: name a user or a numeric uid")]
    Empty,
    #[error("no user {0:?} in the user database")]
    Unknown(String),
    #[error("looking up user {spec:?}: {source}")]
    Lookup { spec: String, source: nix::Error },
    #[error("{0:?} is root (uid 0): workers must run as an unprivileged user")]
    Root(String),
    #[error("user {0:?} has root's group (gid 0) among its groups: workers must not hold it")]
    RootGroup(String),
    #[error(
        "--worker-user {user}: this sidecar runs as uid {own} without CAP_SETUID and CAP_SETGID, so it cannot run workers as uid {target}; run it as root, or drop --worker-user"
    )]
    CannotSwitch { user: String, own: u32, target: u32 },
    #[error(
        "--worker-user {user}: it cannot reach {path}: the directory {dir} (mode {mode:04o}, owner {owner}:{group}) is not searchable by uid {uid}; give it search permission (for example chmod o+x) or put the repository and its worktrees where that user can reach them"
    )]
    Unreachable { user: String, path: PathBuf, dir: PathBuf, mode: u32, owner: u32, group: u32, uid: u32 },
    #[error("--worker-user {user}: cannot inspect {dir}: {source}")]
    Inspect { user: String, dir: PathBuf, source: std::io::Error },
}

impl std::str::FromStr for WorkerUser {
    type Err = WorkerUserError;

    /// Looks the user up by name, or by uid when `spec` is all digits.
    fn from_str(spec: &str) -> Result<WorkerUser, WorkerUserError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(WorkerUserError::Empty);
        }
        let lookup = |source| WorkerUserError::Lookup { spec: spec.to_string(), source };
        let found = if spec.bytes().all(|b| b.is_ascii_digit()) {
            let uid: u32 = spec.parse().map_err(|_| WorkerUserError::Unknown(spec.to_string()))?;
            if uid == 0 {
                return Err(WorkerUserError::Root(spec.to_string()));
            }
            User::from_uid(Uid::from_raw(uid)).map_err(lookup)?
        } else {
            User::from_name(spec).map_err(lookup)?
        };
        let user = found.ok_or_else(|| WorkerUserError::Unknown(spec.to_string()))?;
        if user.uid.is_root() {
            return Err(WorkerUserError::Root(spec.to_string()));
        }
        let name = CString::new(user.name.clone()).map_err(|_| WorkerUserError::Unknown(spec.to_string()))?;
        let mut groups: Vec<u32> = nix::unistd::getgrouplist(&name, user.gid)
            .map_err(lookup)?
            .into_iter()
            .map(Gid::as_raw)
            .chain([user.gid.as_raw()])
            .collect();
        groups.sort_unstable();
        groups.dedup();
        if groups.contains(&0) {
            return Err(WorkerUserError::RootGroup(user.name));
        }
        let ids = Ids { uid: user.uid.as_raw(), gid: user.gid.as_raw(), groups };
        Ok(WorkerUser { name: user.name, ids, home: user.dir })
    }
}

impl std::fmt::Display for WorkerUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (uid {})", self.name, self.ids.uid)
    }
}

impl WorkerUser {
    /// What this sidecar does with the user: None when it is the sidecar's
    /// own uid (its workers run as it already), an error when the sidecar
    /// may not switch to it.
    pub fn for_this_process(self) -> Result<Option<WorkerUser>, WorkerUserError> {
        let own = nix::unistd::geteuid().as_raw();
        if own == self.ids.uid {
            return Ok(None);
        }
        let holds = |cap| caps::has_cap(None, caps::CapSet::Effective, cap).unwrap_or(false);
        if !(holds(caps::Capability::CAP_SETUID) && holds(caps::Capability::CAP_SETGID)) {
            return Err(WorkerUserError::CannotSwitch { user: self.name, own, target: self.ids.uid });
        }
        Ok(Some(self))
    }

    /// Checks, at the sidecar's start, that the user reaches the directory
    /// of `worktree` and the shared objects of `repo`, which the worker's
    /// own git reads.
    pub fn check_reaches_worktree(&self, repo: &Path, worktree: &Path) -> Result<(), WorkerUserError> {
        let objects = git2::Repository::open(repo).map(|r| r.commondir().join("objects"));
        let mut paths = vec![worktree.parent().unwrap_or(worktree).to_path_buf()];
        paths.extend(objects.ok());
        self.check_reaches(&paths.iter().map(PathBuf::as_path).collect::<Vec<_>>())?;
        tracing::info!(user = %self.name, uid = self.ids.uid, gid = self.ids.gid, groups = ?self.ids.groups,
            "workers run as the worker user");
        Ok(())
    }

    /// Checks that the user may search every directory on the way to each
    /// of `paths` (what the worker opens by absolute path: its worktree's
    /// directory, the shared objects). Permission bits only: an ACL that
    /// grants more is not read.
    pub fn check_reaches(&self, paths: &[&Path]) -> Result<(), WorkerUserError> {
        for path in paths {
            for dir in path.ancestors().collect::<Vec<_>>().into_iter().rev() {
                let meta = match std::fs::metadata(dir) {
                    Ok(m) => m,
                    // Made later by the sidecar, as root, searchable.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(source) => {
                        return Err(WorkerUserError::Inspect {
                            user: self.name.clone(),
                            dir: dir.to_path_buf(),
                            source,
                        });
                    }
                };
                if !self.may_search(meta.mode(), meta.uid(), meta.gid()) {
                    return Err(WorkerUserError::Unreachable {
                        user: self.name.clone(),
                        path: path.to_path_buf(),
                        dir: dir.to_path_buf(),
                        mode: meta.mode() & 0o7777,
                        owner: meta.uid(),
                        group: meta.gid(),
                        uid: self.ids.uid,
                    });
                }
            }
        }
        Ok(())
    }

    /// The kernel's rule: the owner's bits if it owns the directory, else
    /// the group's if one of its groups does, else the others'.
    fn may_search(&self, mode: u32, owner: u32, group: u32) -> bool {
        if owner == self.ids.uid {
            mode & 0o100 != 0
        } else if self.ids.groups.contains(&group) {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        }
    }
}

/// `confinement` for a worker of `user`: the user's ids in its policy.
/// Without a confinement (a plan's `sandbox = "off"`) the trampoline still
/// runs, with no Landlock, to switch the user and drop the capabilities:
/// the plan may opt out of the sandbox, not out of the operator's user.
pub fn run_as(
    confinement: Option<Confinement>,
    user: Option<&WorkerUser>,
    exe: &Path,
) -> Option<Confinement> {
    let Some(user) = user else { return confinement };
    let mut c = confinement.unwrap_or_else(|| Confinement {
        exe: exe.to_path_buf(),
        policy: Arc::new(Policy { unconfined: true, ..Policy::default() }),
    });
    Arc::make_mut(&mut c.policy).user = Some(user.ids.clone());
    Some(c)
}

/// What the `attempt.sandbox` report says of the worker user.
pub fn report_line(user: &WorkerUser) -> String {
    format!("worker user {user}")
}

/// Becomes the user `ids` names: groups, then gid, then uid (each needs
/// the privilege the next one gives up), all of real, effective and saved;
/// then proves there is no way back. Call with `CAP_SETUID` and
/// `CAP_SETGID` still effective, in a single-threaded process.
pub(super) fn become_user(ids: &Ids) -> Result<(), String> {
    let (uid, gid) = (Uid::from_raw(ids.uid), Gid::from_raw(ids.gid));
    let groups: Vec<Gid> = ids.groups.iter().copied().map(Gid::from_raw).collect();
    nix::unistd::setgroups(&groups).map_err(|e| format!("setting the groups {:?}: {e}", ids.groups))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("setting gid {gid}: {e}"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("setting uid {uid}: {e}"))?;
    let r = nix::unistd::getresuid().map_err(|e| format!("reading the uids back: {e}"))?;
    let g = nix::unistd::getresgid().map_err(|e| format!("reading the gids back: {e}"))?;
    if [r.real, r.effective, r.saved] != [uid; 3] || [g.real, g.effective, g.saved] != [gid; 3] {
        return Err(format!("the ids did not stick: uids {r:?}, gids {g:?}"));
    }
    if nix::unistd::setuid(Uid::from_raw(0)).is_ok() || nix::unistd::setgid(Gid::from_raw(0)).is_ok() {
        return Err(format!("uid {uid} could switch back to root"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_by_name_or_uid_and_unknown_users_are_refused_by_name() {
        for spec in ["root", "0", " 0 "] {
            let e = spec.parse::<WorkerUser>().expect_err(spec).to_string();
            assert!(e.contains("root (uid 0)"), "{spec}: {e}");
        }
        let e = "no-such-user-swarm".parse::<WorkerUser>().expect_err("unknown").to_string();
        assert_eq!(e, "no user \"no-such-user-swarm\" in the user database");
        assert!(matches!("4000000000".parse::<WorkerUser>(), Err(WorkerUserError::Unknown(_))));
        assert!(matches!("".parse::<WorkerUser>(), Err(WorkerUserError::Empty)));
    }

    #[test]
    fn a_user_is_found_by_name_and_by_uid_alike() {
        // `nobody` is in every Linux user database this project runs on;
        // where it is not, there is nothing to compare.
        let Ok(by_name) = "nobody".parse::<WorkerUser>() else { return };
        let by_uid: WorkerUser = by_name.ids.uid.to_string().parse().expect("by uid");
        assert_eq!(by_name, by_uid);
        assert!(by_name.ids.groups.contains(&by_name.ids.gid), "{by_name:?}");
    }

    #[test]
    fn search_permission_follows_the_owner_then_group_then_others_bits() {
        let u = WorkerUser {
            name: "w".into(),
            ids: Ids { uid: 1000, gid: 1000, groups: vec![1000, 2000] },
            home: PathBuf::from("/home/w"),
        };
        assert!(u.may_search(0o700, 1000, 0));
        assert!(!u.may_search(0o077, 1000, 1000), "the owner's bits alone count for the owner");
        assert!(u.may_search(0o710, 0, 2000));
        assert!(!u.may_search(0o701, 0, 2000), "the group's bits alone count for a member");
        assert!(u.may_search(0o711, 0, 0));
        assert!(!u.may_search(0o700, 0, 0));
        let dir = tempfile::tempdir().expect("tempdir");
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).expect("mkdir");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let own = nix::unistd::geteuid().as_raw();
        if own != 1000 {
            let e = u.check_reaches(&[&locked.join("wt")]).expect_err("locked").to_string();
            assert!(e.contains("--worker-user w: it cannot reach") && e.contains("mode 0700"), "{e}");
        }
    }
}
