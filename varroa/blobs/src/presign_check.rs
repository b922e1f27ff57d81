//! A test fixture (cargo feature `testing`): an HTTP front for moto that checks presigned URLs
//! as S3 does.
//!
//! moto does not check SigV4 query signatures or their expiry: it takes any presigned `PUT`. So
//! that tests can show that an expired or altered URL is refused by the store, [`PresignCheck`]
//! sits in front of a moto server (point the store's `endpoint` at it) and, for every request
//! whose query has `X-Amz-Signature`, recomputes the signature with the secret key (AWS SigV4,
//! `UNSIGNED-PAYLOAD`, the signed headers `host`, as S3 does for a presigned URL) and checks
//! `X-Amz-Date` + `X-Amz-Expires` against the clock. A mismatch is `403 SignatureDoesNotMatch`,
//! an expired URL `403 AccessDenied` ("Request has expired"), both with S3's XML error body;
//! anything else (the gateway's own signed requests, with an `Authorization` header) is passed on
//! untouched. One connection per request (`Connection: close`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// The front (stops when dropped).
pub struct PresignCheck {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
}

impl PresignCheck {
    /// Listens on a free loopback port and passes on to `upstream` (moto), checking presigned
    /// requests with `secret` (the secret access key the store signs with).
    pub fn start(upstream: SocketAddr, secret: &str) -> std::io::Result<PresignCheck> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let (s, r, secret) = (stop.clone(), refused.clone(), secret.to_owned());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (r, secret) = (r.clone(), secret.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, upstream, &secret, &r);
                });
            }
        });
        Ok(PresignCheck { addr, stop, refused })
    }

    /// `http://127.0.0.1:<port>`: the endpoint to give the store.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many presigned requests it refused.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl Drop for PresignCheck {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(conn: TcpStream, upstream: SocketAddr, secret: &str, refused: &AtomicU64) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let request_line = line.trim_end().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(());
        }
        let h = h.trim_end().to_owned();
        if h.is_empty() {
            break;
        }
        headers.push(h);
    }
    let header = |name: &str| {
        headers.iter().find_map(|h| {
            let (k, v) = h.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let mut parts = request_line.split(' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let mut out = conn;
    if target.contains("X-Amz-Signature=") {
        let host = header("host").unwrap_or_default();
        if let Err((code, message)) = check(method, target, &host, secret) {
            refused.fetch_add(1, Ordering::Relaxed);
            let xml = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>"
            );
            write!(
                out,
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
                xml.len()
            )?;
            return out.flush();
        }
    }
    let mut up = TcpStream::connect(upstream)?;
    let mut head = format!("{request_line}\r\n");
    for h in &headers {
        let lower = h.to_ascii_lowercase();
        if !lower.starts_with("connection:") && !lower.starts_with("keep-alive:") {
            head.push_str(h);
            head.push_str("\r\n");
        }
    }
    head.push_str("Connection: close\r\n\r\n");
    up.write_all(head.as_bytes())?;
    up.write_all(&body)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    out.write_all(&answer)?;
    out.flush()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(x) => {
                        out.push(x);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn strict(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let inner: Vec<u8> = k.iter().map(|b| b ^ 0x36).chain(data.iter().copied()).collect();
    let inner = Sha256::digest(&inner);
    let outer: Vec<u8> = k.iter().map(|b| b ^ 0x5c).chain(inner.iter().copied()).collect();
    Sha256::digest(&outer).to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Seconds since the epoch of `YYYYMMDDTHHMMSSZ`.
fn amz_time(s: &str) -> Option<u64> {
    if s.len() != 16 || &s[8..9] != "T" || !s.ends_with('Z') {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<i64>().ok());
    let (y, m, d) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (hh, mm, ss) = (n(9..11)?, n(11..13)?, n(13..15)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

fn check(method: &str, target: &str, host: &str, secret: &str) -> Result<(), (&'static str, String)> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let bad = |m: &str| ("SignatureDoesNotMatch", m.to_owned());
    let signature = get("X-Amz-Signature").ok_or_else(|| bad("no signature"))?;
    let date = get("X-Amz-Date").ok_or_else(|| bad("no X-Amz-Date"))?;
    let expires: u64 = get("X-Amz-Expires").and_then(|e| e.parse().ok()).ok_or_else(|| bad("no X-Amz-Expires"))?;
    let credential = get("X-Amz-Credential").ok_or_else(|| bad("no X-Amz-Credential"))?;
    let signed = get("X-Amz-SignedHeaders").unwrap_or_default();
    let scope = credential.split_once('/').map(|(_, s)| s.to_owned()).ok_or_else(|| bad("bad credential"))?;
    let mut scope_parts = scope.split('/');
    let (day, region, service) = (
        scope_parts.next().unwrap_or_default().to_owned(),
        scope_parts.next().unwrap_or_default().to_owned(),
        scope_parts.next().unwrap_or_default().to_owned(),
    );
    if signed != "host" {
        return Err(bad("this check knows only the signed header host"));
    }
    params.retain(|(k, _)| k != "X-Amz-Signature");
    let mut canonical: Vec<(String, String)> = params.iter().map(|(k, v)| (strict(k), strict(v))).collect();
    canonical.sort_unstable();
    let canonical_query = canonical.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    let request = format!("{method}\n{path}\n{canonical_query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD");
    let to_sign = format!("AWS4-HMAC-SHA256\n{date}\n{scope}\n{}", hex(&Sha256::digest(request.as_bytes())));
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), day.as_bytes());
    for part in [region.as_str(), service.as_str(), "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    if hex(&hmac(&key, to_sign.as_bytes())) != signature {
        return Err(bad("The request signature we calculated does not match the signature you provided."));
    }
    let signed_at = amz_time(&date).ok_or_else(|| bad("bad X-Amz-Date"))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    if now > signed_at + expires {
        return Err(("AccessDenied", "Request has expired".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amz_times_and_hmac_are_right() {
        assert_eq!(amz_time("19700101T000000Z"), Some(0));
        assert_eq!(amz_time("20261203T080000Z"), Some(1_796_284_800));
        // RFC 4231 test case 2.
        assert_eq!(
            hex(&hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
