//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does it.
//!
//! Mirrors `k8s.io/client-go/tools/leaderelection` with a `LeaseLock`, so replicas of our
//! operators and Go controllers read one Lease the same way:
//!
//! - **The record** is the Lease's spec: `holderIdentity`, `leaseDurationSeconds`, `acquireTime`
//!   and `renewTime` (MicroTime), `leaseTransitions`.
//! - **Acquire** ([`LeaderElector::try_acquire_or_renew`]): read the Lease; create it if absent;
//!   take it when its holder is empty or the record has not changed for `leaseDurationSeconds`
//!   (the holder's own duration, from the record) as measured on *our* clock since we first saw
//!   it, never by comparing `renewTime` with our clock, so clock skew between replicas does not
//!   matter. Taking it from another holder sets `acquireTime` and adds one to `leaseTransitions`.
//! - **Fencing**: every write is an update with the `resourceVersion` that was read (or a
//!   create), so when two candidates race, the API server accepts one and answers the other
//!   `409 Conflict`: never two holders.
//! - **Renew**: the leader rewrites `renewTime` every `retry_period` (first with the object it
//!   last wrote, as client-go's fast path does, then with a fresh read). If no renewal succeeds
//!   within `renew_deadline` of the start of the last successful one, it stops leading at once,
//!   even with a request still in flight. Since `renew_deadline < lease_duration` and other
//!   candidates count `lease_duration` from when they *observed* that renewal, the old leader has
//!   stepped down before anyone else may take the Lease.
//! - **Release** on shutdown: the leader first stops leading, then writes the record with an empty
//!   `holderIdentity` (`leaseDurationSeconds: 1`, transitions kept), as client-go's
//!   `ReleaseOnCancel` does, so another candidate takes over at its next try instead of waiting
//!   for expiry.
//!
//! One difference from client-go's `Run`: after losing the Lease, [`LeaderElector::run`] goes
//! back to being a candidate instead of returning, and the `watch` channel from
//! [`LeaderElector::subscribe`] says which side of that it is on. Callers gate their controllers
//! on it: start reconciling when it turns `true`, stop at once when it turns `false`.
//!
//! The Lease API counts its duration in whole seconds, so `lease_duration` is rounded up to whole
//! seconds when written (at least one second); `renew_deadline` and `retry_period` may be
//! milliseconds.
//!
//! RBAC: `get`, `create` and `update` on `leases` in group `coordination.k8s.io` in the Lease's
//! namespace.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, Result};

/// client-go's `JitterFactor`: a candidate waits between `retry_period` and 2.2 × `retry_period`.
const JITTER_FACTOR: f64 = 1.2;

/// The three durations of client-go's `LeaderElectionConfig`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long candidates wait, after they last saw the record change, before taking the
    /// Lease from its holder. Written to `leaseDurationSeconds`, rounded up to whole seconds.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a renewal before it stops leading.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews.
    pub retry_period: Duration,
}

impl Default for LeaseTiming {
    /// client-go's and controller-runtime's defaults: 15 s, 10 s, 2 s.
    fn default() -> Self {
        LeaseTiming {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseTiming {
    /// The checks of client-go's `NewLeaderElector`: `lease_duration > renew_deadline >
    /// 1.2 × retry_period > 0`, and a lease of at least one second.
    pub fn validate(&self) -> Result<()> {
        if self.retry_period.is_zero() {
            return Err(Error::InvalidTiming("retry_period must be greater than zero".into()));
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(Error::InvalidTiming(format!(
                "lease_duration {:?} is shorter than one second, the Lease API's unit",
                self.lease_duration
            )));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(Error::InvalidTiming(format!(
                "lease_duration {:?} must be greater than renew_deadline {:?}",
                self.lease_duration, self.renew_deadline
            )));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(Error::InvalidTiming(format!(
                "renew_deadline {:?} must be greater than {JITTER_FACTOR} × retry_period {:?}",
                self.renew_deadline, self.retry_period
            )));
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written: whole seconds, rounded up.
    pub fn lease_duration_seconds(&self) -> i32 {
        let secs = self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX).max(1)
    }
}

/// The result of one [`LeaderElector::try_acquire_or_renew`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We created the Lease or took it over: we lead now.
    Acquired,
    /// We held the Lease and renewed it.
    Renewed,
    /// Someone else holds an unexpired Lease.
    HeldBy(String),
    /// Another writer changed the Lease between our read and our write (`409`): try again later.
    Conflict,
}

impl Attempt {
    /// Whether we hold the Lease after this attempt.
    pub fn is_leader(&self) -> bool {
        matches!(self, Attempt::Acquired | Attempt::Renewed)
    }
}

/// What we last saw of the Lease, and when.
struct Observed {
    lease: Lease,
    at: Instant,
}

/// One candidate for one Lease. See the [module documentation](self).
pub struct LeaderElector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timing: LeaseTiming,
    observed: Option<Observed>,
    /// When the last successful acquire or renew was *sent*.
    renewed_at: Option<Instant>,
    leading: watch::Sender<bool>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lease", &format!("{}/{}", self.namespace, self.name))
            .field("identity", &self.identity)
            .field("timing", &self.timing)
            .field("leading", &*self.leading.borrow())
            .finish()
    }
}

impl Drop for LeaderElector {
    /// A dropped elector (a cancelled task) leads no more: subscribers see `false`.
    fn drop(&mut self) {
        self.leading.send_replace(false);
    }
}

impl LeaderElector {
    /// A candidate called `identity` (unique per replica: see [`default_identity`]) for the Lease
    /// `namespace/lease_name`.
    pub fn new(
        client: Client,
        namespace: &str,
        lease_name: &str,
        identity: &str,
        timing: LeaseTiming,
    ) -> Result<LeaderElector> {
        timing.validate()?;
        for (field, v) in [("namespace", namespace), ("lease name", lease_name), ("identity", identity)] {
            if v.is_empty() {
                return Err(Error::invalid(field, "must not be empty"));
            }
        }
        let (leading, _) = watch::channel(false);
        Ok(LeaderElector {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: lease_name.to_string(),
            identity: identity.to_string(),
            timing,
            observed: None,
            renewed_at: None,
            leading,
        })
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn timing(&self) -> LeaseTiming {
        self.timing
    }

    /// `true` while [`LeaderElector::run`] holds the Lease. Turns `false` before the Lease is
    /// released or may expire, and when the elector is dropped.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// The current value of the [`LeaderElector::subscribe`] channel.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// The holder we last saw in the Lease (client-go's `GetLeader`); `None` when unknown or empty.
    pub fn observed_leader(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .and_then(|o| o.lease.spec.as_ref())
            .and_then(|s| s.holder_identity.as_deref())
            .filter(|h| !h.is_empty())
    }

    /// Campaign until `until` completes: acquire, renew, go back to campaigning when the Lease is
    /// lost; on `until`, stop leading and release the Lease. API errors are logged and retried.
    pub async fn run(&mut self, until: impl Future<Output = ()>) {
        tokio::pin!(until);
        let lease = format!("{}/{}", self.namespace, self.name);
        'campaign: loop {
            // Candidate: try every retry_period (jittered) until we hold the Lease.
            tracing::info!(%lease, identity = %self.identity, "attempting to acquire leader lease");
            loop {
                let attempt = tokio::select! {
                    () = &mut until => break 'campaign,
                    a = self.try_acquire_or_renew() => a,
                };
                match attempt {
                    Ok(a) if a.is_leader() => break,
                    Ok(a) => tracing::debug!(%lease, ?a, "lease not acquired"),
                    Err(e) => tracing::warn!(%lease, error = %e, "acquiring the lease failed"),
                }
                tokio::select! {
                    () = &mut until => break 'campaign,
                    () = tokio::time::sleep(jittered(self.timing.retry_period)) => {}
                }
            }
            tracing::info!(%lease, identity = %self.identity, "successfully acquired lease: leading");
            self.leading.send_replace(true);

            // Leader: renew every retry_period; give up renew_deadline after the last success.
            loop {
                tokio::select! {
                    () = &mut until => break 'campaign,
                    () = tokio::time::sleep(self.timing.retry_period) => {}
                }
                match self.renew_within_deadline(&mut until).await {
                    Renewal::Renewed => {}
                    Renewal::Stop => break 'campaign,
                    Renewal::Lost(why) => {
                        self.leading.send_replace(false);
                        tracing::warn!(%lease, identity = %self.identity, "stopped leading: {why}");
                        continue 'campaign;
                    }
                }
            }
        }
        let was_leading = self.leading.send_replace(false);
        if !was_leading {
            // An acquisition cut short by `until` may still have landed: look before leaving.
            match self.api.get_opt(&self.name).await {
                Ok(Some(l)) => self.observed = Some(Observed { lease: l, at: Instant::now() }),
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(%lease, error = %e, "reading the lease at shutdown failed");
                    return;
                }
            }
        }
        match self.release().await {
            Ok(true) => tracing::info!(%lease, identity = %self.identity, "released the lease"),
            Ok(false) if was_leading => tracing::info!(%lease, identity = %self.identity, "lease already taken over"),
            Ok(false) => {}
            Err(e) => tracing::warn!(%lease, error = %e, "releasing the lease failed; it will expire"),
        }
    }

    /// Retry the renewal every retry_period until it succeeds, the deadline passes, or `until`.
    async fn renew_within_deadline(&mut self, until: &mut std::pin::Pin<&mut impl Future<Output = ()>>) -> Renewal {
        let deadline = self.renewed_at.unwrap_or_else(Instant::now) + self.timing.renew_deadline;
        loop {
            let attempt = tokio::select! {
                () = until.as_mut() => return Renewal::Stop,
                a = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()) => a,
            };
            match attempt {
                Err(_) => return Renewal::Lost(format!("no renewal within {:?}", self.timing.renew_deadline)),
                Ok(Ok(a)) if a.is_leader() => return Renewal::Renewed,
                Ok(Ok(Attempt::HeldBy(holder))) => return Renewal::Lost(format!("the lease is held by {holder}")),
                Ok(Ok(a)) => tracing::debug!(identity = %self.identity, ?a, "renewal not accepted; retrying"),
                Ok(Err(e)) => {
                    tracing::warn!(identity = %self.identity, error = %e, "renewing the lease failed; retrying")
                }
            }
            let wake = (Instant::now() + self.timing.retry_period).min(deadline);
            tokio::select! {
                () = until.as_mut() => return Renewal::Stop,
                () = tokio::time::sleep_until(wake) => {}
            }
            if Instant::now() >= deadline {
                return Renewal::Lost(format!("no renewal within {:?}", self.timing.renew_deadline));
            }
        }
    }

    /// One round of client-go's `tryAcquireOrRenew`: create, take over or renew the Lease. Does not
    /// change the [`LeaderElector::subscribe`] flag; [`LeaderElector::run`] does.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt> {
        let started = Instant::now();
        let now = MicroTime(Timestamp::now());

        // Fast path: the leader updates the object it wrote last.
        if let Some(obs) = &self.observed
            && self.holds(&obs.lease)
        {
            let mut lease = obs.lease.clone();
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.renew_time = Some(now.clone());
            spec.lease_duration_seconds = Some(self.timing.lease_duration_seconds());
            match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                Ok(written) => {
                    self.observe(written, started);
                    return Ok(Attempt::Renewed);
                }
                Err(e) => {
                    tracing::debug!(identity = %self.identity, error = %e, "fast renewal failed; reading the lease")
                }
            }
        }

        // 1. Read the record, or create it.
        let current = self.api.get_opt(&self.name).await.map_err(|e| self.err("get", e))?;
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.timing.lease_duration_seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(written) => {
                    self.observe(written, started);
                    Ok(Attempt::Acquired)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(Attempt::Conflict),
                Err(e) => Err(self.err("create", e)),
            };
        };

        // 2. Note when the record last changed, on our clock; respect an unexpired holder.
        let changed = self.observed.as_ref().is_none_or(|o| o.lease.spec != current.spec);
        let at = match &self.observed {
            Some(o) if !changed => o.at,
            _ => Instant::now(),
        };
        self.observed = Some(Observed { lease: current.clone(), at });
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let i_hold = holder.as_deref() == Some(self.identity.as_str());
        if let Some(holder) = &holder
            && !i_hold
        {
            let secs = spec
                .lease_duration_seconds
                .map_or(self.timing.lease_duration, |s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
            if Instant::now() < at + secs {
                return Ok(Attempt::HeldBy(holder.clone()));
            }
            tracing::info!(identity = %self.identity, %holder, "lease expired: taking over");
        }

        // 3. Write our record with the resourceVersion we read.
        let transitions = spec.lease_transitions.unwrap_or(0);
        let mut lease = current;
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timing.lease_duration_seconds()),
            acquire_time: if i_hold { spec.acquire_time.clone() } else { Some(now.clone()) },
            renew_time: Some(now),
            lease_transitions: Some(if i_hold { transitions } else { transitions.saturating_add(1) }),
            ..spec
        });
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(written) => {
                self.observe(written, started);
                Ok(if i_hold { Attempt::Renewed } else { Attempt::Acquired })
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Attempt::Conflict),
            Err(e) => Err(self.err("update", e)),
        }
    }

    /// Give the Lease up if we hold it: stop leading, then write an empty holder. Returns whether
    /// a release was written (`false` when someone else holds the Lease).
    pub async fn release(&mut self) -> Result<bool> {
        self.leading.send_replace(false);
        for _ in 0..2 {
            let Some(obs) = &self.observed else { return Ok(false) };
            if !self.holds(&obs.lease) {
                return Ok(false);
            }
            let now = MicroTime(Timestamp::now());
            let mut lease = obs.lease.clone();
            let transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions);
            lease.spec = Some(LeaseSpec {
                holder_identity: Some(String::new()),
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: transitions,
                ..lease.spec.unwrap_or_default()
            });
            match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                Ok(written) => {
                    self.observe(written, Instant::now());
                    self.renewed_at = None;
                    return Ok(true);
                }
                // Our copy is stale (a renewal we gave up on landed, say): read and retry once.
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    let current = self.api.get_opt(&self.name).await.map_err(|e| self.err("get", e))?;
                    match current {
                        Some(l) => self.observed = Some(Observed { lease: l, at: Instant::now() }),
                        None => return Ok(false),
                    }
                }
                Err(e) => return Err(self.err("release", e)),
            }
        }
        Ok(false)
    }

    fn holds(&self, lease: &Lease) -> bool {
        lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(self.identity.as_str())
    }

    fn observe(&mut self, written: Lease, started: Instant) {
        if self.holds(&written) {
            self.renewed_at = Some(started);
        }
        self.observed = Some(Observed { lease: written, at: Instant::now() });
    }

    fn err(&self, verb: &str, e: kube::Error) -> Error {
        Error::kube(format!("{verb} Lease {}/{}", self.namespace, self.name), e)
    }
}

enum Renewal {
    Renewed,
    Lost(String),
    Stop,
}

/// An identity unique to this process: `$POD_NAME` (or `$HOSTNAME`, or `unknown`) followed by `_`
/// and a random suffix, as client-go's examples build it (hostname plus a UUID).
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    format!("{host}_{:016x}", random_u64())
}

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

/// `d` plus up to `JITTER_FACTOR × d`, as client-go's `wait.Jitter`.
fn jittered(d: Duration) -> Duration {
    let fraction = (random_u64() >> 11) as f64 / (1u64 << 53) as f64;
    d + d.mul_f64(JITTER_FACTOR * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(lease: u64, renew: u64, retry: u64) -> LeaseTiming {
        LeaseTiming {
            lease_duration: Duration::from_millis(lease),
            renew_deadline: Duration::from_millis(renew),
            retry_period: Duration::from_millis(retry),
        }
    }

    #[test]
    fn timing_is_checked_as_client_go_does() {
        LeaseTiming::default().validate().unwrap();
        timing(1000, 300, 50).validate().unwrap();
        for bad in [timing(1000, 1000, 50), timing(1000, 60, 50), timing(1000, 300, 0), timing(900, 300, 50)] {
            assert!(matches!(bad.validate(), Err(Error::InvalidTiming(_))), "{bad:?}");
        }
    }

    #[test]
    fn lease_seconds_round_up() {
        assert_eq!(timing(1000, 300, 50).lease_duration_seconds(), 1);
        assert_eq!(timing(1500, 300, 50).lease_duration_seconds(), 2);
        assert_eq!(LeaseTiming::default().lease_duration_seconds(), 15);
    }

    #[test]
    fn jitter_stays_in_client_go_bounds() {
        let d = Duration::from_millis(100);
        for _ in 0..1000 {
            let j = jittered(d);
            assert!(j >= d && j <= d.mul_f64(1.0 + JITTER_FACTOR), "{j:?}");
        }
    }

    #[test]
    fn identities_are_unique() {
        assert_ne!(default_identity(), default_identity());
    }
}
