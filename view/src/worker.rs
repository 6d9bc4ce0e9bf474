//! A worker: a sidecar the controller knows, connected or not. The
//! controller's scheduler builds `WorkerView`; the `From` pair here is its
//! only wire conversion.

use std::collections::BTreeMap;

use serde::Serialize;
use swarm_proto::v1;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerView {
    pub id: String,
    pub host: String,
    pub labels: BTreeMap<String, String>,
    pub connected: bool,
    pub draining: bool,
    /// The attempt it runs (`swarm/task#n`), if any.
    pub attempt: String,
    pub heartbeat_age_ms: u64,
    pub last_applied_seq: u64,
    /// The agent usage limit it shares, and until when it holds (0: none).
    pub rate_limit_key: String,
    pub rate_limited_until_unix_ms: i64,
}

impl From<&v1::Worker> for WorkerView {
    fn from(w: &v1::Worker) -> Self {
        WorkerView {
            id: w.id.clone(),
            host: w.host.clone(),
            labels: w.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            connected: w.connected,
            draining: w.draining,
            attempt: w.attempt.clone(),
            heartbeat_age_ms: w.heartbeat_age_ms,
            last_applied_seq: w.last_applied_seq,
            rate_limit_key: w.rate_limit_key.clone(),
            rate_limited_until_unix_ms: w.rate_limited_until_unix_ms,
        }
    }
}

impl From<WorkerView> for v1::Worker {
    fn from(w: WorkerView) -> Self {
        v1::Worker {
            id: w.id,
            host: w.host,
            labels: w.labels.into_iter().collect(),
            connected: w.connected,
            draining: w.draining,
            attempt: w.attempt,
            heartbeat_age_ms: w.heartbeat_age_ms,
            last_applied_seq: w.last_applied_seq,
            rate_limit_key: w.rate_limit_key,
            rate_limited_until_unix_ms: w.rate_limited_until_unix_ms,
        }
    }
}

impl WorkerView {
    /// `connected`, `draining` or `disconnected`.
    pub fn status(&self) -> &'static str {
        match (self.connected, self.draining) {
            (true, false) => "connected",
            (true, true) => "draining",
            (false, _) => "disconnected",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_goes_to_the_wire_and_back_unchanged() {
        let w = v1::Worker {
            id: "w1".into(),
            host: "h".into(),
            labels: [("gpu".to_string(), "yes".to_string())].into_iter().collect(),
            connected: true,
            attempt: "app/api#2".into(),
            heartbeat_age_ms: 40,
            last_applied_seq: 7,
            rate_limit_key: "claude".into(),
            rate_limited_until_unix_ms: 99,
            ..Default::default()
        };
        assert_eq!(v1::Worker::from(WorkerView::from(&w)), w);
    }
}
