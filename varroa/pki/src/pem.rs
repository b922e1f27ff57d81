//! Reading certificates and keys out of PEM text, with errors that say what is wrong.

use base64::Engine as _;
use x509_parser::pem::Pem;

use crate::PkiError;

/// The PEM blocks of `text`, stopping at the first malformed one.
fn blocks(text: &str) -> (Vec<Pem>, Option<String>) {
    let mut out = Vec::new();
    for block in Pem::iter_from_buffer(text.as_bytes()) {
        match block {
            Ok(b) => out.push(b),
            Err(e) => return (out, Some(e.to_string())),
        }
    }
    (out, None)
}

fn detail(found: &[Pem], malformed: Option<String>) -> String {
    let mut parts = Vec::new();
    if !found.is_empty() {
        let labels: Vec<&str> = found.iter().map(|b| b.label.as_str()).collect();
        parts.push(format!("found {}", labels.join(", ")));
    }
    if let Some(e) = malformed {
        parts.push(format!("malformed PEM: {e}"));
    }
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join("; ")) }
}

/// The DER of the first `CERTIFICATE` block of `text` (a leaf comes first in a chain).
pub(crate) fn first_cert_der(what: &'static str, text: &str) -> Result<Vec<u8>, PkiError> {
    let (found, malformed) = blocks(text);
    match found.iter().position(|b| b.label == "CERTIFICATE") {
        Some(idx) => Ok(found[idx].contents.clone()),
        None => Err(PkiError::CertNotPem { what, detail: detail(&found, malformed) }),
    }
}

/// The PKCS#8 DER of the first private key block of `text`.
pub(crate) fn private_key_der(what: &'static str, text: &str) -> Result<Vec<u8>, PkiError> {
    let (found, malformed) = blocks(text);
    let Some(idx) = found.iter().position(|b| b.label.ends_with("PRIVATE KEY")) else {
        return Err(PkiError::KeyNotPem { what, detail: detail(&found, malformed) });
    };
    let block = &found[idx];
    let fix = match block.label.as_str() {
        "PRIVATE KEY" => return Ok(block.contents.clone()),
        "EC PRIVATE KEY" | "RSA PRIVATE KEY" => {
            "convert it to PKCS#8 with `openssl pkcs8 -topk8 -nocrypt -in tls.key -out tls.pkcs8.key`"
        }
        "ENCRYPTED PRIVATE KEY" => "decrypt it with `openssl pkcs8 -nocrypt -in tls.key -out tls.plain.key`",
        _ => "provide an unencrypted PKCS#8 key (-----BEGIN PRIVATE KEY-----)",
    };
    Err(PkiError::KeyFormat { what, label: block.label.clone(), fix })
}

/// PEM text of one DER certificate, 64 characters a line.
pub(crate) fn encode_cert(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 60);
    out.push_str("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII, so every chunk is valid UTF-8.
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}
