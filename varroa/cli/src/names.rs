//! Names checked before they are looked up: a controller and a namespace are DNS-1123 labels
//! (Kubernetes requires it of namespaces, and of a Controller's name, which names its
//! StatefulSet and Service); a job name is what the plugin may report (1 to 512 characters, no
//! control characters). A name that cannot exist gets an error naming it and the rule, rather
//! than an empty list.

use crate::error::{Error, Result};

/// The longest job name the plugin reports (varroa-link's `MAX_JOB`).
pub const MAX_JOB: usize = 512;

/// The rule a DNS-1123 label breaks, if any.
fn label_problem(value: &str) -> Option<&'static str> {
    if value.is_empty() {
        return Some("it is empty");
    }
    if value.len() > 63 {
        return Some("it is longer than 63 characters");
    }
    if !value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        return Some("only lowercase letters, digits and '-' are allowed");
    }
    if value.starts_with('-') || value.ends_with('-') {
        return Some("it must start and end with a letter or digit");
    }
    None
}

/// A controller's name: a DNS-1123 label.
pub fn controller(value: &str) -> Result<()> {
    match label_problem(value) {
        None => Ok(()),
        Some(why) => Err(Error::Failed(format!(
            "invalid controller name {value:?}: {why} (a controller's name is a DNS-1123 label; `varroa get controllers` lists them)"
        ))),
    }
}

/// A namespace (`-n`): a DNS-1123 label.
pub fn namespace(value: &str) -> Result<()> {
    match label_problem(value) {
        None => Ok(()),
        Some(why) => {
            Err(Error::Failed(format!("invalid namespace {value:?} (-n): {why} (a namespace is a DNS-1123 label)")))
        }
    }
}

/// A job's full name (`team/app`). `what` names where it came from (`--job`, `JOB`).
pub fn job(what: &str, value: &str) -> Result<()> {
    let why = if value.is_empty() {
        "it is empty"
    } else if value.chars().count() > MAX_JOB {
        "it is longer than 512 characters"
    } else if value.chars().any(char::is_control) {
        "it contains control characters"
    } else if value.starts_with('/') || value.ends_with('/') || value.contains("//") {
        "folders are separated by single '/', with none at either end"
    } else {
        return Ok(());
    };
    Err(Error::Failed(format!(
        "invalid job name {value:?} ({what}): {why}; give the job's full name with its folders, e.g. team/app"
    )))
}

/// A cluster name (`--cluster`): a DNS-1123 label, as the gateway's `--cluster` is.
pub fn cluster(value: &str) -> Result<()> {
    match label_problem(value) {
        None => Ok(()),
        Some(why) => Err(Error::Failed(format!(
            "invalid --cluster {value:?}: {why} (a cluster name is a DNS-1123 label, as the gateway's --cluster)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_dns_1123() {
        for ok in ["ci", "team-a", "a", "0x", &"a".repeat(63)] {
            assert!(controller(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("Team", "lowercase"),
            ("team_a", "lowercase"),
            ("-a", "start and end"),
            ("a-", "start and end"),
            ("a.b", "lowercase"),
            (&"a".repeat(64), "63"),
        ] {
            let e = controller(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("invalid controller name {bad:?}")) && e.contains(why), "{e}");
        }
        assert!(namespace("Team").unwrap_err().to_string().contains("(-n)"));
        assert!(cluster("eu_west").unwrap_err().to_string().contains("--cluster"));
    }

    #[test]
    fn job_names_have_folders() {
        for ok in ["app", "team/app", "team/sub folder/app", "ünïcode"] {
            assert!(job("--job", ok).is_ok(), "{ok}");
        }
        for bad in ["", "/app", "team/", "team//app", "a\nb", &"x".repeat(513)] {
            let e = job("--job", bad).unwrap_err().to_string();
            assert!(e.contains("(--job)") && e.contains("team/app"), "{e}");
        }
    }
}
