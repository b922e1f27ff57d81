//! Build claims: a queued build asks whether it may run, and with which number
//! (docs/varroa/plugin-protocol.md, "Build claims"; docs/varroa/data-plane.md).
//!
//! The round trip is plugin -> mite -> gateway -> the ledger (in `varroa-recorder`, backed by
//! PostgreSQL) -> back, and each hop has its own shape:
//!
//! - [`ClaimRequest`]: what the plugin posts to the mite (`POST /v1/claims`), JSON.
//!   [`parse_request`] parses and validates it, naming the field that is wrong; the mite checks it
//!   before it forwards it and the gateway checks it again.
//! - On the gRPC stream: `ClaimRequest` / `ClaimAnswer` of `proto/varroa/link/v1/link.proto`.
//! - [`LedgerRequest`]: what the gateway asks the ledger with a NATS request on [`subject`]
//!   (`varroa.claims.<cluster>.<ns>.<ctrl>`), stamped with the cluster, the namespace and the
//!   controller of the mite's certificate and the cell of its stream, never from the claim. The
//!   ledger's replicas answer in the queue group [`QUEUE_GROUP`] with a [`LedgerAnswer`].
//! - [`Answer`]: what the mite answers the plugin.
//!
//! The ledger decides exactly one of: granted with the build number (one gap-free sequence per
//! job across every cell of a controller), refused (another cell holds this trigger), or retry
//! (it cannot decide now). The same claim id asked twice gets the same answer. One timeout
//! budget ([`ClaimRequest::budget`]) is shared by every hop: each hop keeps a share
//! ([`forward_budget`]) for its own answer and hands the rest on; an answer that arrives after
//! the budget is spent is not used. Because answers are idempotent on the claim id, a grant whose
//! answer was lost is granted again, with the same number, when the plugin asks again.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::builds::{MAX_ID, MAX_JOB, valid_id};
use crate::kv::ControllerKey;

/// The subjects of claim requests: `varroa.claims.<cluster>.<namespace>.<controller>`.
pub const SUBJECT_PREFIX: &str = "varroa.claims";
/// The NATS queue group the ledger's replicas answer in (each request reaches one of them).
pub const QUEUE_GROUP: &str = "varroa-ledger";
/// The claim version this code reads and writes (`v`).
pub const VERSION: u32 = 1;
/// The budget when the plugin names none.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(5);
/// The smallest budget a claim may ask for.
pub const MIN_BUDGET: Duration = Duration::from_millis(100);
/// The largest budget a claim may ask for.
pub const MAX_BUDGET: Duration = Duration::from_secs(30);
/// The longest trigger.
pub const MAX_TRIGGER: usize = 256;
/// The largest claim request body, as JSON bytes.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024;
/// The shortest and longest delay a `retry` asks for.
pub const MIN_RETRY_AFTER: Duration = Duration::from_millis(100);
/// See [`MIN_RETRY_AFTER`].
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// A claim, as the plugin sends it to the mite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The version, [`VERSION`].
    pub v: u32,
    /// The claim id (the plugin's, stable for the queue item): the same id asked again gets the
    /// same answer. The rule of build event ids.
    pub id: String,
    /// The job's full name (`folder/job`).
    pub job: String,
    /// What caused the build, the same on every cell of the controller (`timer:<tick>`,
    /// `scm:<revision>`, `webhook:<delivery>`, `user:<name>:<queue id>`): the ledger gives each
    /// trigger of a job to one cell.
    pub trigger: String,
    /// How long the plugin waits for the answer, in milliseconds ([`MIN_BUDGET`] to
    /// [`MAX_BUDGET`]; [`DEFAULT_BUDGET`] when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_ms: Option<u64>,
}

/// Why a claim is refused as malformed: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ClaimError {
    /// The field (`id`, `job`, `trigger`, `budget_ms`, or `claim` for the whole).
    pub field: String,
    /// What is wrong, and the fix where it is not obvious.
    pub reason: String,
}

fn err(field: &str, reason: impl Into<String>) -> ClaimError {
    ClaimError { field: field.to_owned(), reason: reason.into() }
}

fn check_text(field: &str, value: &str, max: usize) -> Result<(), ClaimError> {
    if value.is_empty() {
        return Err(err(field, "must not be empty"));
    }
    if value.chars().count() > max {
        return Err(err(field, format!("longer than {max} characters")));
    }
    if value.chars().any(char::is_control) {
        return Err(err(field, "must not contain control characters"));
    }
    Ok(())
}

impl ClaimRequest {
    /// Checks every field against docs/varroa/plugin-protocol.md.
    pub fn validate(&self) -> Result<(), ClaimError> {
        if self.v != VERSION {
            return Err(err("v", format!("version {} is not known; this side reads version {VERSION}", self.v)));
        }
        check_fields(&self.id, &self.job, &self.trigger)?;
        if let Some(ms) = self.budget_ms
            && !(MIN_BUDGET.as_millis()..=MAX_BUDGET.as_millis()).contains(&u128::from(ms))
        {
            return Err(err(
                "budget_ms",
                format!("{ms} is outside {} to {}", MIN_BUDGET.as_millis(), MAX_BUDGET.as_millis()),
            ));
        }
        Ok(())
    }

    /// The plugin's budget ([`DEFAULT_BUDGET`] when it named none).
    pub fn budget(&self) -> Duration {
        self.budget_ms.map_or(DEFAULT_BUDGET, Duration::from_millis)
    }
}

/// Checks a claim's id, job and trigger (the rules every hop applies again).
pub fn check_fields(id: &str, job: &str, trigger: &str) -> Result<(), ClaimError> {
    if !valid_id(id) {
        return Err(err("id", format!("must be 1 to {MAX_ID} of A-Z a-z 0-9 . _ : # / @ + -")));
    }
    check_text("job", job, MAX_JOB)?;
    check_text("trigger", trigger, MAX_TRIGGER)
}

/// Parses and validates a claim from the plugin's JSON body.
pub fn parse_request(bytes: &[u8]) -> Result<ClaimRequest, ClaimError> {
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(err("claim", format!("larger than {MAX_REQUEST_BYTES} bytes")));
    }
    let raw: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| err("claim", format!("not JSON: {e}")))?;
    let Some(obj) = raw.as_object() else {
        return Err(err("claim", "must be a JSON object"));
    };
    for field in ["v", "id", "job", "trigger"] {
        if !obj.contains_key(field) {
            return Err(err(field, "missing"));
        }
    }
    if let Some(unknown) = obj.keys().find(|k| !["v", "id", "job", "trigger", "budget_ms"].contains(&k.as_str())) {
        return Err(err(unknown, "is not a field of a claim (v, id, job, trigger, budget_ms)"));
    }
    for (field, ok) in [
        ("v", obj["v"].is_u64()),
        ("id", obj["id"].is_string()),
        ("job", obj["job"].is_string()),
        ("trigger", obj["trigger"].is_string()),
        ("budget_ms", obj.get("budget_ms").is_none_or(|b| b.is_u64() || b.is_null())),
    ] {
        if !ok {
            let want = if matches!(field, "v" | "budget_ms") { "a non-negative integer" } else { "a string" };
            return Err(err(field, format!("must be {want}")));
        }
    }
    let claim: ClaimRequest = serde_json::from_value(raw).map_err(|e| err("claim", e.to_string()))?;
    claim.validate()?;
    Ok(claim)
}

/// How much of `remaining` a hop hands on to the next one: it keeps a tenth (at least 20 ms, at
/// most 250 ms) to send its own answer in time. `None` when nothing would be left to hand on.
pub fn forward_budget(remaining: Duration) -> Option<Duration> {
    let keep = (remaining / 10).clamp(Duration::from_millis(20), Duration::from_millis(250));
    remaining.checked_sub(keep).filter(|d| *d >= Duration::from_millis(10))
}

/// What the gateway asks the ledger, on [`subject`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRequest {
    /// The cluster name (the gateway's `--cluster`).
    pub cluster: String,
    /// The controller's namespace, from the mite's certificate.
    pub namespace: String,
    /// The controller's name, from the mite's certificate.
    pub controller: String,
    /// The asking cell (the stream's hello).
    pub cell: u32,
    /// The claim id.
    pub id: String,
    /// The job's full name.
    pub job: String,
    /// The trigger.
    pub trigger: String,
    /// What is left of the budget as the gateway sends it (milliseconds): the ledger answers
    /// `retry` rather than decide later than that.
    pub budget_ms: u64,
}

impl LedgerRequest {
    /// Checks the fields (the ledger trusts nothing on the bus either) and that the subject it
    /// came on names the same cluster, namespace and controller.
    pub fn validate(&self, subject: &str) -> Result<(), ClaimError> {
        let key =
            ControllerKey::new(&self.namespace, &self.controller).map_err(|e| err("controller", e.to_string()))?;
        if self.cluster.is_empty() || self.cluster.contains(['.', '*', '>', ' ']) {
            return Err(err("cluster", "must be a DNS-1123 label"));
        }
        let expected = self::subject(&self.cluster, &key);
        if subject != expected {
            return Err(err("subject", format!("{subject:?} does not name the claim's controller ({expected:?})")));
        }
        check_fields(&self.id, &self.job, &self.trigger)?;
        if self.budget_ms == 0 {
            return Err(err("budget_ms", "must be positive"));
        }
        Ok(())
    }
}

/// The ledger's answer to a [`LedgerRequest`], JSON with a `decision` tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum LedgerAnswer {
    /// The build may run, with this number.
    Granted {
        /// The build number: the next of the job's sequence, or the one this claim was given
        /// before.
        build: u64,
    },
    /// Another cell holds this trigger.
    Refused {
        /// The holding cell.
        holder: u32,
    },
    /// The ledger cannot decide now (its database is away or slower than the budget).
    Retry {
        /// Ask again after this many milliseconds.
        after_ms: u64,
        /// Why, for the logs.
        reason: String,
    },
    /// The request is malformed (never sent by a correct gateway).
    Rejected {
        /// The field and what is wrong.
        error: String,
    },
}

/// The subject of a controller's claims.
pub fn subject(cluster: &str, controller: &ControllerKey) -> String {
    format!("{SUBJECT_PREFIX}.{cluster}.{controller}")
}

/// What the controller wants when no decision can be had from the ledger within the budget
/// (Controller `spec.claims.whenLedgerDown`; the mite reads it from
/// `VARROA_CLAIMS_WHEN_LEDGER_DOWN`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum WhenLedgerDown {
    /// The build waits in the queue and asks again (`retry`): numbers stay gap-free and no
    /// trigger runs twice, but builds stop while the ledger is away. The default.
    #[default]
    #[serde(rename = "failClosed")]
    FailClosed,
    /// The build runs at once with Jenkins' own number (`ungated`): builds go on, but a trigger
    /// may run on several cells and numbers may repeat or leave gaps until the ledger is back.
    #[serde(rename = "failOpen")]
    FailOpen,
}

impl WhenLedgerDown {
    /// The spelling in the Controller spec and the environment.
    pub fn as_str(self) -> &'static str {
        match self {
            WhenLedgerDown::FailClosed => "failClosed",
            WhenLedgerDown::FailOpen => "failOpen",
        }
    }
}

impl std::str::FromStr for WhenLedgerDown {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "failClosed" => Ok(WhenLedgerDown::FailClosed),
            "failOpen" => Ok(WhenLedgerDown::FailOpen),
            other => Err(format!("{other:?} is not failClosed or failOpen")),
        }
    }
}

/// What the mite answers the plugin (`200`, JSON with a `decision` tag).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Answer {
    /// Run the build with this number.
    Granted {
        /// The build number.
        build: u64,
    },
    /// Drop the queue item: another cell runs this trigger.
    Refused {
        /// The cell that holds it.
        holder: u32,
    },
    /// Keep the build queued and ask again, with the same id, after `after_ms`.
    Retry {
        /// Milliseconds to wait.
        after_ms: u64,
        /// Why (the ledger's database is away, the ledger did not answer in time, ...).
        reason: String,
    },
    /// Run the build with Jenkins' own number: the gate is off (no build record store), or the
    /// ledger could not be asked and the controller is `failOpen`.
    Ungated {
        /// Why.
        reason: String,
    },
}

/// The environment variable that turns the gate on in the mite (`on`; anything else or unset:
/// off). The operator sets it when the installation has a build record store.
pub const ENV_CLAIMS: &str = "VARROA_CLAIMS";
/// The environment variable carrying [`WhenLedgerDown`] to the mite.
pub const ENV_WHEN_LEDGER_DOWN: &str = "VARROA_CLAIMS_WHEN_LEDGER_DOWN";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ClaimRequest, ClaimError> {
        parse_request(s.as_bytes())
    }

    #[test]
    fn a_claim_parses_and_its_budget_defaults() {
        let c = parse(r#"{"v":1,"id":"q-17","job":"team/app","trigger":"timer:2026-12-03T08:00Z"}"#).unwrap();
        assert_eq!(c.job, "team/app");
        assert_eq!(c.budget(), DEFAULT_BUDGET);
        let c = parse(r#"{"v":1,"id":"q-17","job":"a","trigger":"t","budget_ms":250}"#).unwrap();
        assert_eq!(c.budget(), Duration::from_millis(250));
    }

    #[test]
    fn malformed_claims_name_the_field() {
        for (body, field) in [
            (r#"[]"#, "claim"),
            (r#"{"v":1,"id":"x","job":"a"}"#, "trigger"),
            (r#"{"v":2,"id":"x","job":"a","trigger":"t"}"#, "v"),
            (r#"{"v":1,"id":"x y","job":"a","trigger":"t"}"#, "id"),
            (r#"{"v":1,"id":"x","job":"","trigger":"t"}"#, "job"),
            (r#"{"v":1,"id":"x","job":"a","trigger":"t\u0007"}"#, "trigger"),
            (r#"{"v":1,"id":"x","job":"a","trigger":7}"#, "trigger"),
            (r#"{"v":1,"id":"x","job":"a","trigger":"t","budget_ms":5}"#, "budget_ms"),
            (r#"{"v":1,"id":"x","job":"a","trigger":"t","budget_ms":-5}"#, "budget_ms"),
            (r#"{"v":1,"id":"x","job":"a","trigger":"t","cell":2}"#, "cell"),
            ("not json", "claim"),
        ] {
            let e = parse(body).expect_err(body);
            assert_eq!(e.field, field, "{body}: {e}");
        }
        let long = format!(r#"{{"v":1,"id":"x","job":"a","trigger":"{}"}}"#, "t".repeat(MAX_TRIGGER + 1));
        assert_eq!(parse(&long).unwrap_err().field, "trigger");
        assert_eq!(parse_request(&vec![b' '; MAX_REQUEST_BYTES + 1]).unwrap_err().field, "claim");
    }

    #[test]
    fn each_hop_keeps_a_share_of_the_budget() {
        assert_eq!(forward_budget(Duration::from_secs(5)), Some(Duration::from_millis(4750)));
        assert_eq!(forward_budget(Duration::from_secs(1)), Some(Duration::from_millis(900)));
        assert_eq!(forward_budget(Duration::from_millis(100)), Some(Duration::from_millis(80)));
        assert_eq!(forward_budget(Duration::from_millis(25)), None);
        // The plugin's budget survives two hops with something left for the ledger.
        let at_gateway = forward_budget(MIN_BUDGET).unwrap();
        assert!(forward_budget(at_gateway).is_some());
    }

    #[test]
    fn the_ledger_checks_the_subject_against_the_stamp() {
        let r = LedgerRequest {
            cluster: "prod".into(),
            namespace: "team-a".into(),
            controller: "ci".into(),
            cell: 1,
            id: "q-1".into(),
            job: "app".into(),
            trigger: "timer:1".into(),
            budget_ms: 4000,
        };
        assert_eq!(r.validate("varroa.claims.prod.team-a.ci"), Ok(()));
        assert_eq!(r.validate("varroa.claims.prod.team-b.ci").unwrap_err().field, "subject");
        let bad = LedgerRequest { namespace: "Team A".into(), ..r.clone() };
        assert_eq!(bad.validate("varroa.claims.prod.Team A.ci").unwrap_err().field, "controller");
    }

    #[test]
    fn answers_are_tagged_by_decision() {
        let a = serde_json::to_value(Answer::Granted { build: 42 }).unwrap();
        assert_eq!(a, serde_json::json!({"decision": "granted", "build": 42}));
        let l: LedgerAnswer = serde_json::from_str(r#"{"decision":"refused","holder":1}"#).unwrap();
        assert_eq!(l, LedgerAnswer::Refused { holder: 1 });
        assert_eq!("failOpen".parse::<WhenLedgerDown>(), Ok(WhenLedgerDown::FailOpen));
        assert!("open".parse::<WhenLedgerDown>().is_err());
        assert_eq!(
            serde_json::to_value(WhenLedgerDown::default()).unwrap(),
            serde_json::json!(WhenLedgerDown::FailClosed.as_str())
        );
    }
}
