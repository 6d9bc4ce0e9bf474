//! One sync of one swarm: push its integration head to the remote branch,
//! then (on a forge) make sure one pull request shows it, with the report
//! as its body, a draft while work remains.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::Digest as _;
use swarm_core::SwarmId;
use swarm_core::plan::ForgeSpec;
use swarm_core::plan::forge::{Provider, PullScope};
use swarm_forge::{Forge, GitHub, GitHubConfig, NewPull, PullState, Remote, Token};
use tokio::time::Instant;
use tracing::Instrument as _;

use super::failed::{Failed, Retry};
use super::pull::{is_open, pull_state_name, record};
use super::secrets::{self, SecretPolicy};
use super::{body, watch};
use crate::api::operator::OperatorApi;
use crate::scheduler::views::ForgeTarget;
use crate::scheduler::{ForgeState, SwarmState, now_ms};

/// What a sync leaves: the state to record (when it changed), when to
/// try again if it failed in a way time may mend, and whether there is an
/// open pull request to keep watching.
pub(super) struct Outcome {
    /// `ok`, `retrying` or `refused`, for the metrics.
    pub result: &'static str,
    pub state: Option<ForgeState>,
    pub retry: Option<Instant>,
    pub watching: bool,
}

fn unix_ms(at: Instant) -> i64 {
    now_ms().saturating_add(at.saturating_duration_since(Instant::now()).as_millis() as i64)
}

pub(super) struct Syncer {
    repo: PathBuf,
    secrets: SecretPolicy,
    reads: Arc<OperatorApi>,
    dashboard: Option<String>,
    /// The first back-off and its cap.
    backoff: (Duration, Duration),
    /// The scheduler, for feedback the pull request gives.
    scheduler: flume::Sender<crate::scheduler::Command>,
    /// Feedback sent this run (the scheduler keeps what it took for good).
    seen: watch::Seen,
    /// Checks seen failing this run, to tell a flaky one.
    failed: watch::Seen,
    /// Each login's role on the repository, asked once a run.
    permissions: HashMap<String, swarm_forge::Permission>,
    /// One client per swarm, kept so its ETag cache and quota carry over.
    clients: HashMap<SwarmId, (String, Arc<dyn Forge>)>,
}

impl Syncer {
    pub fn new(
        repo: PathBuf,
        config: &super::ForgeConfig,
        reads: Arc<OperatorApi>,
        scheduler: flume::Sender<crate::scheduler::Command>,
    ) -> Syncer {
        Syncer {
            scheduler,
            seen: watch::Seen::default(),
            failed: watch::Seen::default(),
            permissions: HashMap::new(),
            repo,
            secrets: config.secrets.clone(),
            reads,
            dashboard: config.dashboard.clone(),
            backoff: (config.first_backoff, config.max_backoff),
            clients: HashMap::new(),
        }
    }

    /// Syncs `target`, whose last `failures` syncs failed in a row.
    pub async fn sync(&mut self, target: &ForgeTarget, failures: u32) -> Outcome {
        let span = tracing::info_span!("forge.sync", swarm = %target.swarm, head = %target.integration_head,
            provider = target.spec.provider.as_str());
        let mut state = target.forge.clone();
        let result = self.push_and_pull(target, &mut state).instrument(span.clone()).await;
        let _span = span.entered();
        let retry = match result {
            Ok(changed) => {
                if changed {
                    state.synced_at = now_ms();
                }
                state.error.clear();
                state.error_at = 0;
                state.retry_at = 0;
                None
            }
            Err(failed) => {
                tracing::warn!(error = %failed.message, retry = ?failed.retry, "forge sync failed");
                if state.error != failed.message {
                    state.error = failed.message;
                    state.error_at = now_ms();
                }
                let at = failed.retry.map(|r| self.retry_at(r, failures));
                state.retry_at = at.map_or(0, unix_ms);
                at
            }
        };
        let watching = target.spec.provider == Provider::Github && state.pull.as_ref().is_some_and(is_open);
        let result = match (&retry, state.error.is_empty()) {
            (Some(_), _) => "retrying",
            (None, false) => "refused",
            (None, true) => "ok",
        };
        Outcome { result, state: (state != target.forge).then_some(state), retry, watching }
    }

    /// Back-off doubling from the first, capped; a forge's own reset is
    /// kept unless it is sooner than the first back-off.
    fn retry_at(&self, retry: Retry, failures: u32) -> Instant {
        let first = self.backoff.0;
        match retry {
            Retry::Backoff => {
                Instant::now() + first.saturating_mul(1 << failures.min(16)).min(self.backoff.1)
            }
            Retry::At(at) => at.max(Instant::now() + first),
        }
    }

    /// Whether anything was pushed or changed on the forge.
    async fn push_and_pull(&mut self, t: &ForgeTarget, state: &mut ForgeState) -> Result<bool, Failed> {
        let spec = &t.spec;
        // LANDING: every task merged, the work waits on its pull request;
        // COMPLETED: a push-only remote's swarm, or one whose pull request merged.
        let ready = matches!(t.state, SwarmState::Landing | SwarmState::Completed);
        let wanted = (ready || (spec.pr == PullScope::Task && t.merged > 0 && t.state.is_live()))
            && !t.integration_head.is_empty();
        // An open pull request is read even while its swarm reworks a
        // task: reviewers and CI keep talking meanwhile.
        let open = spec.provider == Provider::Github && state.pull.as_ref().is_some_and(is_open);
        if !wanted && !open {
            return Ok(false);
        }
        let url = self.remote_url(spec)?;
        let token = match &spec.token {
            Some(source) => Some(
                secrets::read(&self.secrets, source)
                    .and_then(|t| Token::new(&t).map_err(|e| e.to_string()))
                    .map_err(|m| Failed::settled(format!("forge.token: {m}")))?,
            ),
            None => None,
        };
        let branch = spec.branch.clone().unwrap_or_else(|| t.integration_branch.clone());
        let mut changed = false;
        if wanted && state.pushed != t.integration_head {
            self.push(t, &url, &branch, token.clone()).await?;
            state.pushed = t.integration_head.clone();
            changed = true;
        }
        if spec.provider == Provider::Git {
            return Ok(changed);
        }
        let Some(token) = token else { return Err(Failed::settled("forge.token: a forge needs a token")) };
        let forge = self.client(t, &url, token.clone())?;
        let draft = !ready;
        let shown = state.pull.as_ref().is_some_and(|p| p.state == pull_state_name(PullState::Open, draft));
        if wanted && (changed || !shown) {
            self.open_or_update(t, state, forge.as_ref(), branch, draft).await?;
            changed = true;
        }
        if state.pull.as_ref().is_some_and(is_open) {
            let mut watch = watch::Watch {
                seen: &mut self.seen,
                failed: &mut self.failed,
                permissions: &mut self.permissions,
                scheduler: &self.scheduler,
                secrets: &[token.expose()],
            };
            changed |= watch.pull_request(t, state, forge.as_ref()).await?;
        }
        Ok(changed)
    }

    /// Opens the pull request, or brings its title, body and draft state
    /// up to date.
    async fn open_or_update(
        &self,
        t: &ForgeTarget,
        state: &mut ForgeState,
        forge: &dyn Forge,
        branch: String,
        draft: bool,
    ) -> Result<(), Failed> {
        let spec = &t.spec;
        let body =
            body::body(&self.reads, t.swarm.as_str(), self.dashboard.as_deref()).await.map_err(|s| {
                Failed { message: format!("the report: {}", s.message()), retry: Some(Retry::Backoff) }
            })?;
        let want = NewPull {
            title: body::title(t.swarm.as_str(), t.merged, t.total),
            body,
            head: branch,
            base: spec.base.clone().unwrap_or_else(|| t.target_branch.clone()),
            draft,
        };
        let (pull, ensured) = swarm_forge::ensure_pull(forge, &want).await?;
        tracing::info!(number = pull.number, url = %pull.url, ?ensured, "pull request");
        state.pull = Some(record(&pull));
        Ok(())
    }

    async fn push(
        &self,
        t: &ForgeTarget,
        url: &str,
        branch: &str,
        token: Option<Token>,
    ) -> Result<(), Failed> {
        // The integration head as recorded, not the ref: a push never
        // carries a commit the store has not committed.
        let span = tracing::info_span!("forge.push", swarm = %t.swarm, branch, commit = %t.integration_head);
        // The token is the API's and an https remote's; over ssh (a GitHub
        // `git@github.com:o/r.git` origin) the controller's own keys push.
        let token = token.filter(|_| url.starts_with("https://") || url.starts_with("http://"));
        let pushed = swarm_forge::push(&self.repo, url, &t.integration_head, branch, token.as_ref())
            .instrument(span)
            .await?;
        tracing::info!(outcome = ?pushed, "pushed");
        Ok(())
    }

    /// The remote's URL: the plan's, or that of the controller's
    /// repository's remote of that name.
    fn remote_url(&self, spec: &ForgeSpec) -> Result<String, Failed> {
        remote_url(spec, &self.repo)
            .map_err(|(message, retry)| Failed { message, retry: retry.then_some(Retry::Backoff) })
    }

    fn client(&mut self, t: &ForgeTarget, url: &str, token: Token) -> Result<Arc<dyn Forge>, Failed> {
        let remote = Remote::parse(url).map_err(|e| Failed::settled(format!("forge.remote: {e}")))?;
        let api = t.spec.api_url.clone().unwrap_or_else(|| remote.api_url());
        // A rotated token makes a new client; the key holds only its digest.
        let digest = sha2::Sha256::digest(token.expose().as_bytes());
        let key = format!("{api} {}/{} {digest:x}", remote.owner, remote.repo);
        if let Some((k, forge)) = self.clients.get(&t.swarm)
            && *k == key
        {
            return Ok(forge.clone());
        }
        let config = GitHubConfig::new(&api, &remote.owner, &remote.repo, token);
        let forge: Arc<dyn Forge> =
            Arc::new(GitHub::new(config).map_err(|e| Failed::settled(e.to_string()))?);
        self.clients.insert(t.swarm.clone(), (key, forge.clone()));
        Ok(forge)
    }
}

/// The URL of `spec`'s remote: the plan's, or that of the controller's
/// repository's remote of that name. The error says whether time may
/// mend it (the repository could not be opened) or only a person.
pub(super) fn remote_url(spec: &ForgeSpec, repo: &std::path::Path) -> Result<String, (String, bool)> {
    if spec.remote_is_url() {
        return Ok(spec.remote.clone());
    }
    let repo =
        git2::Repository::open(repo).map_err(|e| (format!("the repository: {}", e.message()), true))?;
    let remote = repo.find_remote(&spec.remote).map_err(|_| {
        (format!("forge.remote: the repository has no remote {:?} (git remote add)", spec.remote), false)
    })?;
    let url = remote.pushurl().or(remote.url()).unwrap_or_default().to_string();
    if url.is_empty() {
        return Err((format!("forge.remote: remote {:?} has no URL", spec.remote), false));
    }
    Ok(url)
}
