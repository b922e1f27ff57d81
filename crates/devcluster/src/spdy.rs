//! `kubectl port-forward`'s protocol: SPDY/3 streams (draft-mbelshe-httpbis-spdy-00, as Go's
//! `moby/spdystream` speaks it) carrying the `portforward.k8s.io` sub-protocol, as the kubelet
//! serves it (pkg/kubelet/cri/streaming/portforward/httpstream.go).
//!
//! kubectl 1.31+ sends the SPDY bytes inside WebSocket binary messages (sub-protocol
//! `SPDY/3.1+portforward.k8s.io`, the `PortForwardWebsockets` tunnel) and falls back to a plain
//! `Upgrade: SPDY/3.1` connection; both carry the same byte stream, which [`portforward`] serves.
//!
//! Per forwarded connection the client opens two streams with the headers `streamtype` (`error`
//! or `data`), `port` and `requestid`; the server replies to each (SYN_REPLY), and once both of a
//! request are there it dials the port on the pod's address and copies bytes both ways. A dial
//! that fails is reported on the error stream with the kubelet's message. Flow control
//! (WINDOW_UPDATE) is neither sent nor enforced, as spdystream does not enforce it.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use futures::{Stream, StreamExt};
use std::collections::HashMap;
use std::net::IpAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

const VERSION: u16 = 3;
const FLAG_FIN: u8 = 0x01;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
/// RST_STREAM status PROTOCOL_ERROR and REFUSED_STREAM.
const PROTOCOL_ERROR: u32 = 1;
const REFUSED_STREAM: u32 = 3;
/// A frame larger than this is refused: spdystream writes data frames of at most 32 KiB (its
/// copy buffer) and header blocks are small; the length field would allow 16 MiB.
const MAX_FRAME: usize = 4 << 20;
/// Decompressed header blocks are bounded too.
const MAX_HEADERS: usize = 1 << 20;

/// The zlib dictionary of SPDY/3 header blocks (section 2.6.10.1): these words, each with a
/// 4-byte big-endian length, then [`DICTIONARY_TAIL`].
const DICTIONARY_WORDS: &[&str] = &[
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized",
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
);

fn dictionary() -> Vec<u8> {
    let mut d = Vec::with_capacity(1423);
    for w in DICTIONARY_WORDS {
        d.put_u32(w.len() as u32);
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    d
}

#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("SPDY: {0}")]
    Protocol(String),
}

fn protocol(msg: impl Into<String>) -> SpdyError {
    SpdyError::Protocol(msg.into())
}

/// A frame, as far as port-forwarding needs them; the others are `Other`.
#[derive(Debug, PartialEq)]
pub enum Frame {
    SynStream { id: u32, fin: bool, headers: Vec<(String, String)> },
    SynReply { id: u32, fin: bool, headers: Vec<(String, String)> },
    RstStream { id: u32, status: u32 },
    Ping(u32),
    GoAway { last: u32, status: u32 },
    Data { id: u32, fin: bool, data: Bytes },
    Other { kind: u16 },
}

/// One direction's header-block compression context (zlib with the dictionary, one stream for
/// the whole connection, each block ended with a sync flush).
pub struct Headers {
    inflate: Decompress,
    deflate: Compress,
    dictionary: Vec<u8>,
    deflate_primed: bool,
}

impl Default for Headers {
    fn default() -> Self {
        Headers {
            inflate: Decompress::new(true),
            deflate: Compress::new(Compression::default(), true),
            dictionary: dictionary(),
            deflate_primed: false,
        }
    }
}

impl Headers {
    fn decode(&mut self, input: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
        let mut out: Vec<u8> = Vec::with_capacity(256);
        let mut chunk = [0u8; 4096];
        let mut pos = 0;
        loop {
            let (before_in, before_out) = (self.inflate.total_in(), self.inflate.total_out());
            let res = self.inflate.decompress(&input[pos..], &mut chunk, FlushDecompress::Sync);
            let consumed = (self.inflate.total_in() - before_in) as usize;
            let produced = (self.inflate.total_out() - before_out) as usize;
            pos += consumed;
            out.extend_from_slice(&chunk[..produced]);
            match res {
                // The client compressed with the SPDY dictionary: zlib asks for it first.
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(&self.dictionary)
                        .map_err(|e| protocol(format!("header dictionary: {e}")))?;
                    continue;
                }
                Err(e) => return Err(protocol(format!("header block: {e}"))),
                Ok(_) => {}
            }
            if out.len() > MAX_HEADERS {
                return Err(protocol("header block too large"));
            }
            if pos >= input.len() && produced < chunk.len() {
                break;
            }
            if consumed == 0 && produced == 0 {
                return Err(protocol("header block does not decompress"));
            }
        }
        parse_header_block(&out)
    }

    fn encode(&mut self, headers: &[(&str, &str)]) -> Result<Vec<u8>, SpdyError> {
        if !self.deflate_primed {
            self.deflate.set_dictionary(&self.dictionary).map_err(|e| protocol(format!("header dictionary: {e}")))?;
            self.deflate_primed = true;
        }
        let mut raw = Vec::new();
        raw.put_u32(headers.len() as u32);
        for (k, v) in headers {
            raw.put_u32(k.len() as u32);
            raw.extend_from_slice(k.as_bytes());
            raw.put_u32(v.len() as u32);
            raw.extend_from_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut input: &[u8] = &raw;
        loop {
            out.reserve(256);
            let before_in = self.deflate.total_in();
            self.deflate
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(|e| protocol(format!("compressing headers: {e}")))?;
            input = &input[(self.deflate.total_in() - before_in) as usize..];
            // Room left after a sync flush: all of it is out.
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

fn parse_header_block(b: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let mut b = b;
    let need = |b: &[u8], n: usize| if b.len() < n { Err(protocol("truncated header block")) } else { Ok(()) };
    need(b, 4)?;
    let n = b.get_u32() as usize;
    if n > 1024 {
        return Err(protocol("too many headers"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        need(b, 4)?;
        let kl = b.get_u32() as usize;
        need(b, kl)?;
        let k = String::from_utf8_lossy(&b[..kl]).to_ascii_lowercase();
        b.advance(kl);
        need(b, 4)?;
        let vl = b.get_u32() as usize;
        need(b, vl)?;
        let v = String::from_utf8_lossy(&b[..vl]).into_owned();
        b.advance(vl);
        out.push((k, v));
    }
    Ok(out)
}

/// Take one frame off the front of `buf`, if a whole one is there.
pub fn parse(buf: &mut BytesMut, headers: &mut Headers) -> Result<Option<Frame>, SpdyError> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) as usize;
    if len > MAX_FRAME {
        return Err(protocol(format!("frame of {len} bytes")));
    }
    if buf.len() < 8 + len {
        return Ok(None);
    }
    let head = buf.split_to(8);
    let mut body = buf.split_to(len).freeze();
    let flags = head[4];
    let fin = flags & FLAG_FIN != 0;
    if head[0] & 0x80 == 0 {
        let id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff;
        return Ok(Some(Frame::Data { id, fin, data: body }));
    }
    let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
    if version != VERSION {
        return Err(protocol(format!("version {version}, expected {VERSION}")));
    }
    let kind = u16::from_be_bytes([head[2], head[3]]);
    let need =
        |b: &Bytes, n: usize| if b.len() < n { Err(protocol(format!("short frame of type {kind}"))) } else { Ok(()) };
    Ok(Some(match kind {
        SYN_STREAM => {
            need(&body, 10)?;
            let id = body.get_u32() & 0x7fff_ffff;
            body.advance(6);
            Frame::SynStream { id, fin, headers: headers.decode(&body)? }
        }
        SYN_REPLY => {
            need(&body, 4)?;
            let id = body.get_u32() & 0x7fff_ffff;
            Frame::SynReply { id, fin, headers: headers.decode(&body)? }
        }
        RST_STREAM => {
            need(&body, 8)?;
            Frame::RstStream { id: body.get_u32() & 0x7fff_ffff, status: body.get_u32() }
        }
        PING => {
            need(&body, 4)?;
            Frame::Ping(body.get_u32())
        }
        GOAWAY => {
            need(&body, 8)?;
            Frame::GoAway { last: body.get_u32() & 0x7fff_ffff, status: body.get_u32() }
        }
        // HEADERS carry a header block that must go through the shared inflater.
        8 => {
            need(&body, 4)?;
            body.advance(4);
            headers.decode(&body)?;
            Frame::Other { kind }
        }
        kind => Frame::Other { kind },
    }))
}

fn control(kind: u16, flags: u8, body: &[u8]) -> Bytes {
    let mut f = BytesMut::with_capacity(8 + body.len());
    f.put_u16(0x8000 | VERSION);
    f.put_u16(kind);
    f.put_u8(flags);
    f.put_uint(body.len() as u64, 3);
    f.put_slice(body);
    f.freeze()
}

/// Encode a frame the server sends.
pub fn encode(frame: &Frame, headers: &mut Headers) -> Result<Bytes, SpdyError> {
    let flag = |fin: bool| if fin { FLAG_FIN } else { 0 };
    Ok(match frame {
        Frame::SynReply { id, fin, headers: h } => {
            let pairs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut body = id.to_be_bytes().to_vec();
            body.extend_from_slice(&headers.encode(&pairs)?);
            control(SYN_REPLY, flag(*fin), &body)
        }
        Frame::SynStream { id, fin, headers: h } => {
            let pairs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut body = id.to_be_bytes().to_vec();
            body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
            body.extend_from_slice(&headers.encode(&pairs)?);
            control(SYN_STREAM, flag(*fin), &body)
        }
        Frame::RstStream { id, status } => {
            let mut body = id.to_be_bytes().to_vec();
            body.extend_from_slice(&status.to_be_bytes());
            control(RST_STREAM, 0, &body)
        }
        Frame::Ping(id) => control(PING, 0, &id.to_be_bytes()),
        Frame::GoAway { last, status } => {
            let mut body = last.to_be_bytes().to_vec();
            body.extend_from_slice(&status.to_be_bytes());
            control(GOAWAY, 0, &body)
        }
        Frame::Data { id, fin, data } => {
            let mut f = BytesMut::with_capacity(8 + data.len());
            f.put_u32(id & 0x7fff_ffff);
            f.put_u8(flag(*fin));
            f.put_uint(data.len() as u64, 3);
            f.put_slice(data);
            f.freeze()
        }
        Frame::Other { kind } => return Err(protocol(format!("cannot send frame type {kind}"))),
    })
}

/// Where forwarded connections go and how errors name the pod.
#[derive(Debug, Clone)]
pub struct Target {
    pub ip: IpAddr,
    /// The kubelet's "full name" of the pod: `<name>_<namespace>`.
    pub pod: String,
    pub uid: String,
}

#[derive(Default)]
struct Request {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
    started: bool,
}

/// Serve one port-forward connection: `input` is the client's byte stream (however it is
/// framed on the wire), every frame for the client is sent to `output`. Returns when the client
/// goes away or breaks the protocol (after a GOAWAY).
pub async fn portforward(
    mut input: impl Stream<Item = std::io::Result<Bytes>> + Unpin,
    output: mpsc::Sender<Bytes>,
    target: Target,
) {
    // Frames for the client go through one writer, which owns the header compressor.
    let (frames_tx, mut frames_rx) = mpsc::channel::<Frame>(64);
    let writer = tokio::spawn(async move {
        let mut headers = Headers::default();
        while let Some(f) = frames_rx.recv().await {
            let Ok(bytes) = encode(&f, &mut headers) else { break };
            if output.send(bytes).await.is_err() {
                break;
            }
        }
    });
    let mut headers = Headers::default();
    let mut buf = BytesMut::new();
    let mut requests: HashMap<String, Request> = HashMap::new();
    // Bytes from the client for a data stream, to its TCP connection (None: the client is done).
    let mut to_tcp: HashMap<u32, mpsc::Sender<Option<Bytes>>> = HashMap::new();
    let mut last_id = 0;
    'read: while let Some(chunk) = input.next().await {
        let Ok(chunk) = chunk else { break };
        buf.extend_from_slice(&chunk);
        loop {
            let frame = match parse(&mut buf, &mut headers) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "port-forward: protocol error");
                    let _ = frames_tx.send(Frame::GoAway { last: last_id, status: PROTOCOL_ERROR }).await;
                    break 'read;
                }
            };
            match frame {
                Frame::SynStream { id, headers: h, .. } => {
                    last_id = last_id.max(id);
                    let get = |k: &str| h.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
                    let (kind, port, request_id) = (get("streamtype"), get("port"), get("requestid"));
                    let port = port.parse::<u16>().ok().filter(|p| *p > 0);
                    let (Some(port), "error" | "data") = (port, kind.as_str()) else {
                        let _ = frames_tx.send(Frame::RstStream { id, status: REFUSED_STREAM }).await;
                        continue;
                    };
                    let _ = frames_tx.send(Frame::SynReply { id, fin: false, headers: vec![] }).await;
                    let req = requests.entry(request_id.clone()).or_default();
                    req.port = port;
                    if kind == "error" {
                        req.error = Some(id);
                    } else {
                        req.data = Some(id);
                    }
                    if let (Some(error), Some(data), false) = (req.error, req.data, req.started) {
                        req.started = true;
                        let (tx, rx) = mpsc::channel(32);
                        to_tcp.insert(data, tx);
                        tokio::spawn(forward(target.clone(), port, error, data, rx, frames_tx.clone()));
                    }
                }
                Frame::Data { id, fin, data } => {
                    if let Some(tx) = to_tcp.get(&id) {
                        if !data.is_empty() && tx.send(Some(data)).await.is_err() {
                            to_tcp.remove(&id);
                        } else if fin {
                            let _ = tx.send(None).await;
                            to_tcp.remove(&id);
                        }
                    }
                }
                Frame::RstStream { id, .. } => {
                    to_tcp.remove(&id);
                }
                Frame::Ping(n) => {
                    let _ = frames_tx.send(Frame::Ping(n)).await;
                }
                Frame::GoAway { .. } => break 'read,
                Frame::SynReply { .. } | Frame::Other { .. } => {}
            }
        }
    }
    drop(to_tcp);
    drop(frames_tx);
    let _ = writer.await;
}

/// One forwarded connection: dial, then copy both ways; a failed dial is written to the error
/// stream with the kubelet's message.
async fn forward(
    target: Target,
    port: u16,
    error: u32,
    data: u32,
    mut from_client: mpsc::Receiver<Option<Bytes>>,
    frames: mpsc::Sender<Frame>,
) {
    let conn =
        tokio::time::timeout(std::time::Duration::from_secs(10), tokio::net::TcpStream::connect((target.ip, port)))
            .await
            .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "i/o timeout")));
    let conn = match conn {
        Ok(c) => c,
        Err(e) => {
            // As Go renders a failed dial: "dial tcp IP:PORT: connect: connection refused".
            let why = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => "connect: connection refused".to_string(),
                std::io::ErrorKind::TimedOut => "i/o timeout".to_string(),
                _ => e.to_string().split(" (os error").next().unwrap_or_default().to_lowercase(),
            };
            let msg = format!(
                "error forwarding port {port} to pod {}, uid {}: dial tcp {}:{port}: {why}",
                target.pod, target.uid, target.ip
            );
            let _ = frames.send(Frame::Data { id: error, fin: true, data: Bytes::from(msg) }).await;
            let _ = frames.send(Frame::Data { id: data, fin: true, data: Bytes::new() }).await;
            return;
        }
    };
    let _ = conn.set_nodelay(true);
    let (mut r, mut w) = conn.into_split();
    let up = async move {
        while let Some(Some(bytes)) = from_client.recv().await {
            if w.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = w.shutdown().await;
    };
    let frames_down = frames.clone();
    let down = async move {
        let mut chunk = vec![0u8; 32 * 1024];
        loop {
            match r.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let frame = Frame::Data { id: data, fin: false, data: Bytes::copy_from_slice(&chunk[..n]) };
                    if frames_down.send(frame).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = frames_down.send(Frame::Data { id: data, fin: true, data: Bytes::new() }).await;
    };
    tokio::join!(up, down);
    let _ = frames.send(Frame::Data { id: error, fin: true, data: Bytes::new() }).await;
}

/// Port-forward over a WebSocket whose binary messages carry the SPDY bytes (kubectl's
/// `SPDY/3.1+portforward.k8s.io` tunnel).
pub async fn over_websocket<S>(ws: S, target: Target)
where
    S: Stream<Item = Result<tokio_tungstenite::tungstenite::Message, tokio_tungstenite::tungstenite::Error>>
        + futures::Sink<tokio_tungstenite::tungstenite::Message>
        + Unpin
        + Send
        + 'static,
{
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let (mut sink, stream) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Bytes>(64);
    let writer = tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            if sink.send(Message::Binary(b)).await.is_err() {
                return;
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    });
    let input =
        stream.take_while(|m| std::future::ready(!matches!(m, Ok(Message::Close(_)) | Err(_)))).filter_map(|m| {
            std::future::ready(match m {
                Ok(Message::Binary(b)) => Some(Ok(b)),
                _ => None,
            })
        });
    portforward(Box::pin(input), tx, target).await;
    let _ = writer.await;
}

/// Port-forward over a connection upgraded to `SPDY/3.1` (kubectl's fallback).
pub async fn over_connection<IO>(io: IO, target: Target)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (r, mut w) = tokio::io::split(io);
    let (tx, mut rx) = mpsc::channel::<Bytes>(64);
    let writer = tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            if w.write_all(&b).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    });
    let input = futures::stream::unfold(r, |mut r| async move {
        let mut buf = vec![0u8; 32 * 1024];
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), r))
            }
        }
    });
    portforward(Box::pin(input), tx, target).await;
    let _ = writer.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_the_specs() {
        let d = dictionary();
        // Length and Adler-32 of SPDY/3's dictionary (the checksum a zlib stream names it by).
        assert_eq!(d.len(), 1423);
        let (mut a, mut b) = (1u32, 0u32);
        for byte in &d {
            a = (a + u32::from(*byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 3_821_447_106);
    }

    #[test]
    fn header_blocks_share_one_zlib_stream_per_direction() {
        let (mut client, mut server) = (Headers::default(), Headers::default());
        let mut wire = BytesMut::new();
        for (id, request) in [(1u32, "0"), (3, "0"), (5, "1")] {
            let h = vec![
                ("streamtype".to_string(), if id == 3 { "data" } else { "error" }.to_string()),
                ("port".to_string(), "8080".to_string()),
                ("requestid".to_string(), request.to_string()),
            ];
            wire.extend_from_slice(
                &encode(&Frame::SynStream { id, fin: false, headers: h }, &mut client).expect("encode"),
            );
        }
        wire.extend_from_slice(
            &encode(&Frame::Data { id: 3, fin: true, data: Bytes::from_static(b"hello") }, &mut client).expect("data"),
        );
        wire.extend_from_slice(&encode(&Frame::Ping(7), &mut client).expect("ping"));
        let mut frames = vec![];
        // Arriving in pieces, as WebSocket messages or TCP reads cut them.
        let mut buf = BytesMut::new();
        for piece in wire.chunks(5) {
            buf.extend_from_slice(piece);
            while let Some(f) = parse(&mut buf, &mut server).expect("parses") {
                frames.push(f);
            }
        }
        assert_eq!(frames.len(), 5, "{frames:?}");
        let Frame::SynStream { id: 5, ref headers, .. } = frames[2] else { panic!("{:?}", frames[2]) };
        assert_eq!(headers[2], ("requestid".to_string(), "1".to_string()));
        assert_eq!(frames[3], Frame::Data { id: 3, fin: true, data: Bytes::from_static(b"hello") });
        assert_eq!(frames[4], Frame::Ping(7));
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        let mut h = Headers::default();
        // A SYN_STREAM whose header block is not zlib.
        let mut buf = BytesMut::from(&control(SYN_STREAM, 0, &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4])[..]);
        assert!(parse(&mut buf, &mut h).is_err());
        // Another version, a frame too large, a short body.
        for bytes in [
            &[0x80u8, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1][..],
            &[0x80, 3, 0, 6, 0, 0xff, 0xff, 0xff],
            &[0x80, 3, 0, 6, 0, 0, 0, 2, 0, 0],
        ] {
            assert!(parse(&mut BytesMut::from(bytes), &mut Headers::default()).is_err(), "{bytes:?}");
        }
    }
}
