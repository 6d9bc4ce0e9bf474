//! swarm's own directory for the local runs of one repository, beside the
//! user's checkout rather than in it: `$XDG_STATE_HOME/swarm/<repo hash>/`
//! (`~/.local/state/swarm/<repo hash>/` without it), mode 0700. Its
//! `workspaces/` holds the local sidecars' worktrees, their attempts'
//! private git and temporary directories, locks and journals.
//!
//! Why not under the checkout's `.git/`, where older versions kept them: a
//! worker may not read the checkout, yet tools walk up from their working
//! directory (cargo looks for a workspace `Cargo.toml` above a package and
//! fails on the unreadable one of the checkout), and Claude Code treats
//! every file under a `.git/` directory as sensitive, asking before each
//! edit even under `acceptEdits`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use swarm_sidecar::sandbox::WorkerUser;
use swarm_sidecar::worktree::Workspaces;
use swarm_sidecar::worktree::relocate::{Moved, relocate_all};

/// The directory of the local sidecars' worktrees.
const WORKSPACES: &str = "workspaces";
/// The checkout a state directory belongs to, for whoever finds it.
const REPO_FILE: &str = "repo";

/// The local sidecars' workspaces directory for `repo`, made private, with
/// what an older swarmctl left under `<repo>/.git/workspaces/` moved into it.
/// With a `--worker-user`, its group may search it and anyone may pass
/// through `swarm/` above it (the worker reaches its worktree by path), and
/// every directory above that must let the user pass.
pub fn workspaces(repo: &Path, worker_user: Option<&WorkerUser>) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let base = state_home(std::env::var_os("XDG_STATE_HOME").map(PathBuf::from), home)?;
    let dir = base.join("swarm").join(super::controller::repo_key(repo));
    let ws = dir.join(WORKSPACES);
    {
        use std::os::unix::fs::DirBuilderExt as _;
        let mut builder = std::fs::DirBuilder::new();
        builder
            .recursive(true)
            .mode(0o700)
            .create(&ws)
            .with_context(|| format!("creating {}", ws.display()))?;
    }
    for d in [&dir, &ws] {
        own_private(d, worker_user.map(|u| u.ids.gid))?;
    }
    if let Some(user) = worker_user {
        // Shared by the runs of every repository: any user may pass
        // through it, none list it.
        let swarm = base.join("swarm");
        if std::fs::symlink_metadata(&swarm).is_ok_and(|m| m.uid() == nix::unistd::getuid().as_raw()) {
            std::fs::set_permissions(&swarm, std::fs::Permissions::from_mode(0o711))
                .with_context(|| format!("setting the mode of {}", swarm.display()))?;
        }
        user.check_reaches(&[&ws]).map_err(|e| {
            anyhow::anyhow!(
                "{e}; the local worktrees live in {}: set XDG_STATE_HOME to a directory that user can reach",
                ws.display()
            )
        })?;
    }
    let record = dir.join(REPO_FILE);
    std::fs::write(&record, format!("{}\n", repo.display()))
        .with_context(|| format!("writing {}", record.display()))?;
    move_old_worktrees(repo, &ws)?;
    Ok(ws)
}

/// Makes `dir`, which must be this user's, mode 0700, or 0710 with group
/// `gid` (a worker user's) when given: as each run needs it, whatever an
/// earlier run with or without a worker user left.
fn own_private(dir: &Path, gid: Option<u32>) -> anyhow::Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let uid = nix::unistd::getuid().as_raw();
    let meta = std::fs::symlink_metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
    if meta.uid() != uid || !meta.is_dir() {
        anyhow::bail!(
            "{} must be a directory owned by uid {uid} (it holds the local worktrees)",
            dir.display()
        );
    }
    let (group, mode) = match gid {
        Some(g) => (Some(nix::unistd::Gid::from_raw(g)), 0o710),
        None => (None, 0o700),
    };
    if group.is_some() {
        nix::unistd::chown(dir, None, group)
            .with_context(|| format!("giving {} to group {gid:?}", dir.display()))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", dir.display()))
}

/// `$XDG_STATE_HOME` when it is an absolute path (the XDG rule for a
/// relative one: ignore it), else `$HOME/.local/state`.
fn state_home(xdg: Option<PathBuf>, home: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match (xdg.filter(|d| d.is_absolute()), home) {
        (Some(d), _) => Ok(d),
        (None, Some(h)) => Ok(h.join(".local").join("state")),
        (None, None) => {
            anyhow::bail!(
                "neither XDG_STATE_HOME nor HOME is set to an absolute path: no place for the worktrees"
            )
        }
    }
}

/// Moves the local sidecars' worktrees (`local-<n>`) that an older
/// swarmctl kept in the checkout's `.git/workspaces/`. Another sidecar's
/// (one started by hand on this repository) stay where they are.
fn move_old_worktrees(repo: &Path, ws: &Path) -> anyhow::Result<()> {
    let old = repo.join(".git").join(swarm_sidecar::worktree::WORKSPACES);
    if !old.is_dir() {
        return Ok(());
    }
    let to = Workspaces::new(repo, Some(ws)).with_context(|| format!("opening {}", repo.display()))?;
    let moved = relocate_all(&old, &to, |id| id.strip_prefix("local-").is_some_and(is_number))
        .with_context(|| format!("moving the worktrees in {} to {}", old.display(), ws.display()))?;
    for (id, how) in moved {
        let note = match how {
            Moved::Renamed | Moved::Copied => "moved".to_string(),
            Moved::Dropped => "had nothing uncommitted: dropped, made afresh at its next task".to_string(),
            Moved::Kept(why) => format!("left in {}: {why}", old.display()),
        };
        eprintln!("worktree {id}: {note} ({})", to.dir.display());
    }
    Ok(())
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_home_is_xdg_s_when_absolute_else_under_home() {
        let home = Some(PathBuf::from("/home/u"));
        let at = |xdg: Option<&str>, home: Option<PathBuf>| state_home(xdg.map(PathBuf::from), home);
        assert_eq!(at(Some("/s"), home.clone()).expect("a state home"), PathBuf::from("/s"));
        assert_eq!(
            at(Some("rel"), home.clone()).expect("a state home"),
            PathBuf::from("/home/u/.local/state")
        );
        assert_eq!(at(None, home).expect("a state home"), PathBuf::from("/home/u/.local/state"));
        assert!(at(None, None).expect_err("no home").to_string().contains("XDG_STATE_HOME"));
    }
}
