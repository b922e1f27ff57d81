//! Container logs: written per container instance in the CRI log format
//! (`<RFC3339Nano> <stdout|stderr> <F|P> <text>`, as containerd writes them for the kubelet),
//! capped at `MAX_FILE` bytes per file with one rotated file kept (`N.log.1`), so a container
//! instance keeps at most 2 × 10 MiB; the current and the previous instance are kept.
//!
//! `pods/log` answers as the apiserver and kubelet do (pkg/registry/core/pod/rest/log.go,
//! pkg/kubelet/kuberuntime/logs): `container`, `follow`, `previous`, `tailLines`,
//! `sinceSeconds`/`sinceTime`, `timestamps`, `limitBytes`, with their validation and error
//! messages.

use super::worker;
use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult};
use crate::field::FieldError;
use crate::request::Body;
use crate::request::Query;
use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Bytes per log file before it is rotated.
pub const MAX_FILE: u64 = 10 * 1024 * 1024;

/// A container instance's log being written.
pub struct LogFile {
    path: PathBuf,
    file: File,
    size: u64,
}

fn rotated(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".1");
    PathBuf::from(s)
}

impl LogFile {
    pub fn create(path: &Path) -> io::Result<LogFile> {
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)?;
        }
        let file = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
        Ok(LogFile { path: path.to_path_buf(), file, size: 0 })
    }

    /// Append one record; rotate first when it would pass the cap.
    pub fn append(&mut self, stream: &str, text: &[u8], partial: bool) {
        let ts = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%fZ").to_string();
        let mut rec = Vec::with_capacity(text.len() + 48);
        rec.extend_from_slice(ts.as_bytes());
        rec.push(b' ');
        rec.extend_from_slice(stream.as_bytes());
        rec.extend_from_slice(if partial { b" P " } else { b" F " });
        rec.extend_from_slice(text);
        rec.push(b'\n');
        if self.size > 0 && self.size + rec.len() as u64 > MAX_FILE {
            let _ = std::fs::rename(&self.path, rotated(&self.path));
            if let Ok(f) = File::create(&self.path) {
                self.file = f;
                self.size = 0;
            }
        }
        if self.file.write_all(&rec).is_ok() {
            self.size += rec.len() as u64;
        }
    }
}

/// One log record read back.
struct Record {
    ts: String,
    text: Vec<u8>,
    partial: bool,
}

fn parse_records(data: &[u8], out: &mut Vec<Record>) {
    for line in data.split(|b| *b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let mut parts = line.splitn(4, |b| *b == b' ');
        let (Some(ts), Some(_stream), Some(tag)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let text = parts.next().unwrap_or(b"").to_vec();
        out.push(Record { ts: String::from_utf8_lossy(ts).into_owned(), text, partial: tag == b"P" });
    }
}

/// Records -> lines (partial records joined), each with the timestamp of its first part.
fn lines_of(records: Vec<Record>) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = vec![];
    let mut open = false;
    for r in records {
        if open && let Some(last) = out.last_mut() {
            last.1.extend_from_slice(&r.text);
        } else {
            out.push((r.ts, r.text));
        }
        open = r.partial;
    }
    out
}

struct Opts {
    follow: bool,
    timestamps: bool,
    tail: Option<usize>,
    since: Option<i64>,
    limit: Option<usize>,
}

fn format_line(o: &Opts, ts: &str, text: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(text.len() + 40);
    if o.timestamps {
        v.extend_from_slice(ts.as_bytes());
        v.push(b' ');
    }
    v.extend_from_slice(text);
    v.push(b'\n');
    v
}

fn ts_seconds(ts: &str) -> i64 {
    crate::duration::parse_rfc3339(ts).map(|(s, _)| s).unwrap_or(0)
}

fn read_all(path: &Path) -> Vec<u8> {
    let mut v = std::fs::read(rotated(path)).unwrap_or_default();
    v.extend(std::fs::read(path).unwrap_or_default());
    v
}

fn text_response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

/// The "simulated pod" error of pods/log, exec and port-forward.
pub fn simulated(name: &str) -> ApiError {
    ApiError::bad_request(format!("pod {name} is simulated: it runs no process; map its image with --run"))
}

/// `GET .../pods/NAME/log`.
pub fn serve(cl: &Cluster, rt: &super::Runtime, ns: &str, name: &str, q: &Query) -> ApiResult<Response<Body>> {
    let pod = cl
        .store
        .get(&crate::registry::GroupResource::new("", "pods"), ns, name)
        .ok_or_else(|| ApiError::not_found("", "pods", name))?;
    let mut errs = vec![];
    let tail = q.int("tailLines")?;
    if let Some(t) = tail
        && t < 0
    {
        errs.push(FieldError::invalid("tailLines", t, "must be greater than or equal to 0"));
    }
    let limit = q.int("limitBytes")?;
    if let Some(l) = limit
        && l < 1
    {
        errs.push(FieldError::invalid("limitBytes", l, "must be greater than 0"));
    }
    let since_s = q.int("sinceSeconds")?;
    if let Some(s) = since_s
        && s < 1
    {
        errs.push(FieldError::invalid("sinceSeconds", s, "must be greater than 0"));
    }
    let since_time = match q.get("sinceTime") {
        Some(t) => Some(crate::duration::parse_rfc3339(t).map(|(s, _)| s).ok_or_else(|| {
            ApiError::bad_request(format!("parsing time \"{t}\" as \"2006-01-02T15:04:05Z07:00\": cannot parse"))
        })?),
        None => None,
    };
    if since_s.is_some() && since_time.is_some() {
        errs.push(FieldError::forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified"));
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid("", "PodLogOptions", name, &errs));
    }
    let container = worker::pick_container(&pod, q.get("container")).map_err(ApiError::bad_request)?;
    let Some(run) = rt.pod(ns, name).filter(|r| r.uid == crate::meta::uid(&pod)) else {
        if pod.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
            )));
        }
        return Err(simulated(name));
    };
    let Some(c) = worker::container(&run, &container) else {
        return Err(ApiError::bad_request(format!("container {container} is not valid for pod {name}")));
    };
    if !c.runs {
        return Err(simulated(name));
    }
    let previous = q.flag("previous")?;
    let instance = if previous {
        if c.instances.len() < 2 {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        c.instances[c.instances.len() - 2].clone()
    } else {
        match c.instances.last() {
            Some(i) => i.clone(),
            None => {
                let reason = c.state.pointer("/waiting/reason").and_then(Value::as_str).unwrap_or("ContainerCreating");
                return Err(ApiError::bad_request(format!(
                    "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
                )));
            }
        }
    };
    let now = jiff::Timestamp::now().as_second();
    let o = Opts {
        follow: q.flag("follow")? && !previous,
        timestamps: q.flag("timestamps")?,
        tail: tail.map(|t| t as usize),
        since: since_s.map(|s| now - s).or(since_time),
        limit: limit.map(|l| l as usize),
    };
    let data = read_all(&instance.log);
    let consumed = std::fs::metadata(&instance.log).map(|m| m.len()).unwrap_or(0);
    let mut records = vec![];
    parse_records(&data, &mut records);
    let mut lines = lines_of(records);
    if let Some(s) = o.since {
        lines.retain(|(ts, _)| ts_seconds(ts) >= s);
    }
    if let Some(t) = o.tail
        && lines.len() > t
    {
        lines.drain(..lines.len() - t);
    }
    let mut out: Vec<u8> = vec![];
    for (ts, text) in &lines {
        out.extend(format_line(&o, ts, text));
    }
    if let Some(l) = o.limit {
        out.truncate(l);
    }
    if !o.follow || o.limit.is_some_and(|l| out.len() >= l) {
        return Ok(text_response(http_body_util::Full::new(Bytes::from(out)).map_err(|never| match never {}).boxed()));
    }
    // Follow: what is there, then what gets written, until the instance ends.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, io::Error>>(16);
    let path = instance.log.clone();
    let done = instance.done.clone();
    tokio::spawn(async move {
        let mut sent = out.len();
        if !out.is_empty() && tx.send(Ok(Frame::data(Bytes::from(out)))).await.is_err() {
            return;
        }
        let mut offset = consumed;
        let mut carry: Vec<u8> = vec![];
        let mut ino = file_id(&path);
        loop {
            let finished = done.load(Ordering::SeqCst);
            // A rotation: the rest of the old file is in .1, then the new file from 0.
            let now_ino = file_id(&path);
            let mut chunk = vec![];
            if now_ino != ino {
                chunk.extend(read_from(&rotated(&path), offset));
                offset = 0;
                ino = now_ino;
            }
            let fresh = read_from(&path, offset);
            offset += fresh.len() as u64;
            chunk.extend(fresh);
            if !chunk.is_empty() {
                carry.extend(chunk);
                let complete = carry.iter().rposition(|b| *b == b'\n').map(|i| i + 1).unwrap_or(0);
                let ready: Vec<u8> = carry.drain(..complete).collect();
                let mut records = vec![];
                parse_records(&ready, &mut records);
                let mut bytes = vec![];
                for (ts, text) in lines_of(records) {
                    bytes.extend(format_line(&o, &ts, &text));
                }
                if let Some(l) = o.limit {
                    bytes.truncate(l.saturating_sub(sent));
                }
                sent += bytes.len();
                if !bytes.is_empty() && tx.send(Ok(Frame::data(Bytes::from(bytes)))).await.is_err() {
                    return;
                }
                if o.limit.is_some_and(|l| sent >= l) {
                    return;
                }
                continue;
            }
            if finished {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    Ok(text_response(BodyExt::boxed(StreamBody::new(stream))))
}

fn file_id(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.ino()).unwrap_or(0)
}

fn read_from(path: &Path, offset: u64) -> Vec<u8> {
    let mut v = vec![];
    if let Ok(mut f) = File::open(path)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_end(&mut v);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_log_rotates_once_and_reads_across_both_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("0.log");
        let mut f = LogFile::create(&p).unwrap();
        let line = vec![b'x'; 1024 * 1024 - 64];
        for _ in 0..25 {
            f.append("stdout", &line, false);
        }
        f.append("stdout", b"last", false);
        let cur = std::fs::metadata(&p).unwrap().len();
        let old = std::fs::metadata(rotated(&p)).unwrap().len();
        assert!(cur <= MAX_FILE && old <= MAX_FILE, "{cur} {old}");
        let mut r = vec![];
        parse_records(&read_all(&p), &mut r);
        let lines = lines_of(r);
        // At most two files are kept: older lines are gone, the newest are there in order.
        assert!(lines.len() < 26 && lines.len() >= 10, "{}", lines.len());
        assert_eq!(lines.last().unwrap().1, b"last".to_vec());
    }

    #[test]
    fn records_round_trip_with_partial_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("0.log");
        let mut f = LogFile::create(&p).unwrap();
        f.append("stdout", b"hello", false);
        f.append("stderr", b"par", true);
        f.append("stderr", b"tial", false);
        let mut r = vec![];
        parse_records(&read_all(&p), &mut r);
        let lines = lines_of(r);
        assert_eq!(lines.iter().map(|l| l.1.clone()).collect::<Vec<_>>(), vec![b"hello".to_vec(), b"partial".to_vec()]);
        assert!(lines[0].0.ends_with('Z') && lines[0].0.contains('T'));
    }
}
