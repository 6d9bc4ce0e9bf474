//! Remote mode: the sidecar has its own clone, so base commits come in with
//! `FetchPack` and result commits go out with `PushPack`.

use std::path::Path;

use swarm_proto::convert::AttemptRef;
use swarm_proto::v1;

use crate::link::{ControllerLink, LinkSession};

/// Chunk size for uploads.
const CHUNK: usize = 1 << 20;
/// Largest pack accepted from the controller.
pub const MAX_PACK_BYTES: usize = 1 << 30;

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("rpc: {0}")]
    Rpc(#[from] tonic::Status),
    #[error("git: {0}")]
    Git(String),
    #[error("pack for {0} is larger than {MAX_PACK_BYTES} bytes")]
    TooLarge(String),
}

/// Pack transfer over the controller's SidecarService, on the session's link.
#[derive(Debug, Clone)]
pub struct Remote {
    link: ControllerLink,
}

impl Remote {
    pub fn new(link: ControllerLink) -> Remote {
        Remote { link }
    }

    /// Fetches `commit` (and what it needs) unless the repository has it.
    pub async fn ensure_commit(&self, repo: &Path, commit: &str) -> Result<(), RemoteError> {
        let (r, c) = (repo.to_path_buf(), commit.to_string());
        let (present, haves) = tokio::task::spawn_blocking(move || {
            let present = crate::worktree::has_commit(&r, &c)?;
            let haves = if present { Vec::new() } else { crate::worktree::local_tips(&r)? };
            Ok::<_, crate::worktree::WorktreeError>((present, haves))
        })
        .await
        .map_err(|e| RemoteError::Git(e.to_string()))?
        .map_err(|e| RemoteError::Git(e.to_string()))?;
        if present {
            return Ok(());
        }
        let LinkSession { mut client, secret } = self.link.session()?;
        let mut stream = client
            .fetch_pack(
                self.link.request(&secret, v1::FetchPackRequest { want: commit.to_string(), have: haves }),
            )
            .await?
            .into_inner();
        let mut pack = Vec::new();
        while let Some(chunk) = stream.message().await? {
            pack.extend_from_slice(&chunk.data);
            if pack.len() > MAX_PACK_BYTES {
                return Err(RemoteError::TooLarge(commit.to_string()));
            }
        }
        let (r, c) = (repo.to_path_buf(), commit.to_string());
        tokio::task::spawn_blocking(move || swarm_git::receive_pack(&r, &pack, &c, MAX_PACK_BYTES))
            .await
            .map_err(|e| RemoteError::Git(e.to_string()))?
            .map_err(|e| RemoteError::Git(e.to_string()))?;
        Ok(())
    }

    /// Uploads `tip` (with everything `base` lacks) for `attempt`.
    pub async fn push(
        &self,
        repo: &Path,
        attempt: &AttemptRef,
        tip: &str,
        base: &str,
    ) -> Result<(), RemoteError> {
        let attempt = &v1::AttemptRef::from(attempt);
        let (r, t, haves) = (repo.to_path_buf(), tip.to_string(), vec![base.to_string()]);
        let pack = tokio::task::spawn_blocking(move || swarm_git::build_pack(&r, &t, &haves))
            .await
            .map_err(|e| RemoteError::Git(e.to_string()))?
            .map_err(|e| RemoteError::Git(e.to_string()))?;
        let mut chunks = Vec::new();
        let mut first = true;
        for data in pack.chunks(CHUNK) {
            chunks.push(push_chunk(first, attempt, tip, data.to_vec()));
            first = false;
        }
        if chunks.is_empty() {
            chunks.push(push_chunk(true, attempt, tip, Vec::new()));
        }
        let LinkSession { mut client, secret } = self.link.session()?;
        let resp =
            client.push_pack(self.link.request(&secret, tokio_stream::iter(chunks))).await?.into_inner();
        if resp.tip != tip {
            return Err(RemoteError::Git(format!("controller stored tip {:?}, expected {tip}", resp.tip)));
        }
        Ok(())
    }
}

fn push_chunk(first: bool, attempt: &v1::AttemptRef, tip: &str, data: Vec<u8>) -> v1::PushPackChunk {
    if first {
        v1::PushPackChunk { attempt: Some(attempt.clone()), tip: tip.to_string(), data }
    } else {
        v1::PushPackChunk { attempt: None, tip: String::new(), data }
    }
}
