//! The identity a mite certificate names, and its URI encoding.

use std::fmt;

use crate::PkiError;

/// The SPIFFE-style trust domain of mite identities: URIs are `spiffe://varroa.dev/...`.
pub const TRUST_DOMAIN: &str = "varroa.dev";

/// Who a mite is: the Controller it runs next to.
///
/// Certificates are issued per Controller (`cell: None`): all cells of a controller share the
/// Controller's certificate, and each mite reports its cell in its hello message to the gateway.
/// The `cell` field is kept for a possible future per-cell certificate; [`identity_of`] reads a
/// `/cell/<n>` URI suffix into it, but [`CertificateAuthority::issue_mite`] refuses to issue one.
///
/// [`identity_of`]: crate::identity_of
/// [`CertificateAuthority::issue_mite`]: crate::CertificateAuthority::issue_mite
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MiteIdentity {
    /// The Controller's namespace (a DNS-1123 label).
    pub namespace: String,
    /// The Controller's name (a DNS-1123 subdomain).
    pub controller: String,
    /// The cell; `None` for the per-Controller certificate, the only kind issued today.
    pub cell: Option<u32>,
}

impl MiteIdentity {
    /// The identity of the mites of Controller `namespace/controller` (all cells).
    pub fn new(namespace: impl Into<String>, controller: impl Into<String>) -> Self {
        Self { namespace: namespace.into(), controller: controller.into(), cell: None }
    }

    /// The URI SAN encoding: `spiffe://varroa.dev/ns/<namespace>/controller/<controller>`, with
    /// `/cell/<n>` appended when `cell` is set.
    pub fn uri(&self) -> String {
        let mut uri = format!("spiffe://{TRUST_DOMAIN}/ns/{}/controller/{}", self.namespace, self.controller);
        if let Some(cell) = self.cell {
            uri.push_str(&format!("/cell/{cell}"));
        }
        uri
    }

    /// Parses [`MiteIdentity::uri`]'s encoding back; `None` when `uri` is not a Varroa mite URI
    /// or names are not valid Kubernetes names.
    pub fn from_uri(uri: &str) -> Option<Self> {
        let path = uri.strip_prefix("spiffe://")?.strip_prefix(TRUST_DOMAIN)?.strip_prefix('/')?;
        let parts: Vec<&str> = path.split('/').collect();
        let (namespace, controller, cell) = match parts.as_slice() {
            ["ns", ns, "controller", name] => (*ns, *name, None),
            ["ns", ns, "controller", name, "cell", cell] => {
                // Plain decimal only: no sign, no leading zeros, so one cell has one URI.
                if cell.is_empty()
                    || !cell.bytes().all(|b| b.is_ascii_digit())
                    || (cell.len() > 1 && cell.starts_with('0'))
                {
                    return None;
                }
                (*ns, *name, Some(cell.parse().ok()?))
            }
            _ => return None,
        };
        let id = Self { namespace: namespace.to_owned(), controller: controller.to_owned(), cell };
        id.validate().ok()?;
        Some(id)
    }

    /// Checks the names: `namespace` a DNS-1123 label (at most 63 characters), `controller` a
    /// DNS-1123 subdomain (at most 253), as Kubernetes requires; so they are also safe in a URI.
    pub fn validate(&self) -> Result<(), PkiError> {
        check_name("namespace", &self.namespace, 63, false)?;
        check_name("controller", &self.controller, 253, true)
    }

    /// The subject common name: `<namespace>/<controller>`, cut to the 64 characters X.509
    /// allows. Informational only; the URI SAN is authoritative.
    pub(crate) fn common_name(&self) -> String {
        let mut cn = format!("{}/{}", self.namespace, self.controller);
        cn.truncate(64); // ASCII (validated), so any byte index is a char boundary
        cn
    }
}

impl fmt::Display for MiteIdentity {
    /// `namespace/controller`, or `namespace/controller/cell/<n>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.controller)?;
        if let Some(cell) = self.cell {
            write!(f, "/cell/{cell}")?;
        }
        Ok(())
    }
}

fn check_name(field: &'static str, value: &str, max: usize, dots: bool) -> Result<(), PkiError> {
    let kind = if dots { "DNS-1123 subdomain" } else { "DNS-1123 label" };
    let bad = |why: &str| PkiError::InvalidIdentity {
        field,
        value: value.to_owned(),
        reason: format!("{why}; fix: use the Controller's {field} as Kubernetes stores it (a {kind})"),
    };
    if value.is_empty() {
        return Err(bad("empty"));
    }
    if value.len() > max {
        return Err(bad(&format!("longer than {max} characters")));
    }
    let labels: Vec<&str> = if dots { value.split('.').collect() } else { vec![value] };
    for label in labels {
        let ok_chars = label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok_chars {
            return Err(bad(if dots {
                "only lowercase letters, digits, '-' and '.' are allowed"
            } else {
                "only lowercase letters, digits and '-' are allowed"
            }));
        }
        let alnum = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
        if !alnum(label.as_bytes().first()) || !alnum(label.as_bytes().last()) {
            return Err(bad("must start and end with a letter or digit (each dot-separated part too)"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_round_trips() {
        let id = MiteIdentity::new("team-a", "ci.main");
        assert_eq!(id.uri(), "spiffe://varroa.dev/ns/team-a/controller/ci.main");
        assert_eq!(MiteIdentity::from_uri(&id.uri()), Some(id.clone()));
        let cell = MiteIdentity { cell: Some(3), ..id };
        assert_eq!(cell.uri(), "spiffe://varroa.dev/ns/team-a/controller/ci.main/cell/3");
        assert_eq!(MiteIdentity::from_uri(&cell.uri()), Some(cell));
    }

    #[test]
    fn foreign_uris_are_not_identities() {
        for uri in [
            "spiffe://example.org/ns/a/controller/b",
            "spiffe://varroa.dev/ns/a/controller",
            "spiffe://varroa.dev/ns/a/controller/b/extra",
            "spiffe://varroa.dev/ns/A/controller/b",
            "spiffe://varroa.dev/ns/a/controller/b/cell/+1",
            "spiffe://varroa.dev/ns/a/controller/b/cell/01",
            "https://varroa.dev/ns/a/controller/b",
        ] {
            assert_eq!(MiteIdentity::from_uri(uri), None, "{uri}");
        }
    }

    #[test]
    fn names_are_validated_with_the_fix() {
        let err = MiteIdentity::new("Team_A", "ci").validate().unwrap_err().to_string();
        assert!(err.contains("namespace") && err.contains("DNS-1123 label"), "{err}");
        let err = MiteIdentity::new("a", "ci/x").validate().unwrap_err().to_string();
        assert!(err.contains("controller"), "{err}");
        assert!(MiteIdentity::new("a", "").validate().is_err());
        assert!(MiteIdentity::new("a", "x.").validate().is_err());
        assert!(MiteIdentity::new("n".repeat(64), "x").validate().is_err());
    }

    #[test]
    fn common_name_fits_x509() {
        let id = MiteIdentity::new("ns", "c".repeat(200));
        assert_eq!(id.common_name().len(), 64);
        assert_eq!(MiteIdentity::new("ns", "ci").common_name(), "ns/ci");
    }
}
