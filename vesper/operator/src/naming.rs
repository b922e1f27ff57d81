//! Names of a preview's namespace and host.
//!
//! A preview runs in a namespace named after the preview's namespace and name plus a hash of
//! both (`vesper-team-a-pr-42-3f9c2a1b`), and is served at `<name>-<namespace>-<hash>.<domain>`.
//! Both are valid DNS labels of at most 63 characters, whatever the preview is called: long
//! names are cut, the hash keeps them unique.

/// The longest DNS label.
const MAX_LABEL: usize = 63;

/// The first 8 hex digits of SHA-256 of `namespace/name`.
pub fn hash8(namespace: &str, name: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, format!("{namespace}/{name}").as_bytes());
    d.as_ref().iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// Lower-case, `[a-z0-9-]` only (dots and others become dashes), no leading or trailing dash.
fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').to_string()
}

/// `<prefix><middle>-<hash>` with `middle` cut so the whole fits in 63 characters.
fn label(prefix: &str, middle: &str, hash: &str) -> String {
    let room = MAX_LABEL - prefix.len() - 1 - hash.len();
    let mut m: String = middle.chars().take(room).collect();
    while m.ends_with('-') {
        m.pop();
    }
    if m.is_empty() { format!("{prefix}{hash}") } else { format!("{prefix}{m}-{hash}") }
}

/// The namespace a preview runs in: `vesper-<namespace>-<name>-<hash>`.
pub fn namespace_name(namespace: &str, name: &str) -> String {
    label("vesper-", &sanitize(&format!("{namespace}-{name}")), &hash8(namespace, name))
}

/// The first label of the preview's host: `<name>-<namespace>-<hash>`.
pub fn host_label(namespace: &str, name: &str) -> String {
    label("", &sanitize(&format!("{name}-{namespace}")), &hash8(namespace, name))
}

/// The preview's host under a domain.
pub fn host(namespace: &str, name: &str, domain: &str) -> String {
    format!("{}.{}", host_label(namespace, name), domain.trim_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn names_follow_the_documented_shape() {
        let ns = namespace_name("team-a", "pr-42");
        assert_eq!(ns, format!("vesper-team-a-pr-42-{}", hash8("team-a", "pr-42")));
        assert_eq!(
            host("team-a", "pr-42", "preview.example.com."),
            format!("pr-42-team-a-{}.preview.example.com", hash8("team-a", "pr-42"))
        );
        // Different previews, different namespaces, even when the cut parts collide.
        let long = "x".repeat(250);
        assert_ne!(namespace_name("a", &format!("{long}1")), namespace_name("a", &format!("{long}2")));
        assert!(is_dns_label(&namespace_name("Team.A", "My.Preview")));
    }

    proptest::proptest! {
        #[test]
        fn always_valid_dns_labels(ns in "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name in "[a-z0-9]([-a-z0-9.]{0,200}[a-z0-9])?") {
            let n = namespace_name(&ns, &name);
            proptest::prop_assert!(is_dns_label(&n), "{}", n);
            let h = host_label(&ns, &name);
            proptest::prop_assert!(is_dns_label(&h), "{}", h);
        }
    }
}
