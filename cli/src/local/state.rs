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
use swarm_sidecar::worktree::Workspaces;
use swarm_sidecar::worktree::relocate::{Moved, relocate_all};

/// The directory of the local sidecars' worktrees.
const WORKSPACES: &str = "workspaces";
/// The checkout a state directory belongs to, for whoever finds it.
const REPO_FILE: &str = "repo";

/// The local sidecars' workspaces directory for `repo`, made private, with
/// what an older swarmctl left under `<repo>/.git/workspaces/` moved into it.
pub fn workspaces(repo: &Path) -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let base = state_home(std::env::var_os("XDG_STATE_HOME").map(PathBuf::from), home)?;
    let dir = base.join("swarm").join(super::controller::repo_key(repo));
    let ws = dir.join(WORKSPACES);
    super::controller::private_dir(&[&dir, &ws], "it holds the worktrees of the local sidecars")?;
    let record = dir.join(REPO_FILE);
    std::fs::write(&record, format!("{}\n", repo.display()))
        .with_context(|| format!("writing {}", record.display()))?;
    move_old_worktrees(repo, &ws)?;
    Ok(ws)
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
