//! The leader lease: one row in the store's database with an epoch, a
//! holder, the holder's advertised URL and an expiry.
//!
//! Expiry is measured by the database's clock (`clock_timestamp()`), the
//! one clock every controller shares, so no two controllers' clocks are
//! compared. Winning bumps the epoch; the store checks that epoch in every
//! commit, so a deposed leader's writes fail even if it has not noticed.

use std::time::Duration;

use ::postgres::Client;

use crate::{StoreError, postgres as pg};

/// One controller's hand in the election.
pub struct Lease {
    /// Always `Some` until drop (see `Drop`).
    client: Option<Client>,
    url: String,
    /// Unique per process: a restarted controller is a new candidate.
    holder: String,
    advertise: String,
    ttl: Duration,
}

/// What one try at the lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This controller leads, with this epoch.
    Won(i64),
    /// Another controller leads; it advertised this URL.
    Held { leader_url: String },
}

impl Lease {
    /// Connects and migrates the schema (the lease row is part of it).
    pub fn connect(url: &str, advertise: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let client = pg::prepare(url)?;
        let holder = format!("{}-{}-{:016x}", hostname(), std::process::id(), rand::random::<u64>());
        Ok(Lease {
            client: Some(client),
            url: url.to_string(),
            holder,
            advertise: advertise.to_string(),
            ttl,
        })
    }

    /// A new connection for the same holder, after the old one failed.
    pub fn reconnect(&mut self) -> Result<(), StoreError> {
        let old = self.client.replace(pg::connect(&self.url)?);
        close(old);
        Ok(())
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Takes the lease if it has expired (or was released).
    #[tracing::instrument(level = "debug", skip_all, fields(holder = %self.holder))]
    pub fn try_acquire(&mut self) -> Result<Claim, StoreError> {
        let (holder, advertise, ttl) = (self.holder.clone(), self.advertise.clone(), self.ttl_secs());
        let won = self.client()?.query_opt(
            "UPDATE swarm_leader SET epoch = epoch + 1, holder = $1, url = $2,
               expires_at = clock_timestamp() + make_interval(secs => $3)
             WHERE id = 1 AND expires_at < clock_timestamp() RETURNING epoch",
            &[&holder, &advertise, &ttl],
        )?;
        if let Some(row) = won {
            let epoch: i64 = row.try_get(0)?;
            tracing::info!(epoch, holder = %self.holder, "won the leader lease");
            return Ok(Claim::Won(epoch));
        }
        let row = self.client()?.query_one("SELECT url FROM swarm_leader WHERE id = 1", &[])?;
        Ok(Claim::Held { leader_url: row.try_get(0)? })
    }

    /// Extends the lease of `epoch`; false when another controller took it.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn renew(&mut self, epoch: i64) -> Result<bool, StoreError> {
        let (holder, ttl) = (self.holder.clone(), self.ttl_secs());
        let n = self.client()?.execute(
            "UPDATE swarm_leader SET expires_at = clock_timestamp() + make_interval(secs => $2)
             WHERE id = 1 AND epoch = $1 AND holder = $3",
            &[&epoch, &ttl, &holder],
        )?;
        Ok(n == 1)
    }

    /// Lets a standby take over at once instead of after the TTL: a clean
    /// stop of the leader.
    pub fn release(&mut self, epoch: i64) -> Result<(), StoreError> {
        let holder = self.holder.clone();
        self.client()?.execute(
            "UPDATE swarm_leader SET expires_at = '-infinity' WHERE id = 1 AND epoch = $1 AND holder = $2",
            &[&epoch, &holder],
        )?;
        tracing::info!(epoch, "released the leader lease");
        Ok(())
    }

    fn client(&mut self) -> Result<&mut Client, StoreError> {
        self.client.as_mut().ok_or_else(|| StoreError::Corrupt {
            table: "swarm_leader",
            key: self.holder.clone(),
            reason: "the lease's connection was closed".into(),
        })
    }

    fn ttl_secs(&self) -> f64 {
        self.ttl.as_secs_f64()
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into())
}

impl Drop for Lease {
    fn drop(&mut self) {
        close(self.client.take());
    }
}

/// Drops a client off the async threads: `postgres::Client` closes by
/// blocking on its own runtime, which panics on a thread that drives tasks.
fn close(client: Option<Client>) {
    if let Some(client) = client
        && tokio::runtime::Handle::try_current().is_ok()
    {
        let _ = std::thread::Builder::new().name("lease-close".into()).spawn(move || drop(client));
    }
}
