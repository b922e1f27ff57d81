//! `devcluster-testpod`: a tiny program the process runtime's tests run as a pod (map an image to
//! it with `--run`). It prints its argv, serves HTTP on `$POD_IP:$PORT` (default 8080), and does
//! what its requests ask:
//!
//! - `GET /healthz`: 200; `GET /ready`: 200 or 503 as set by `GET /set-ready?v=0|1`; `GET /live`:
//!   200 or 500 as set by `GET /set-live?v=0|1`
//! - `GET /env`: its environment, `KEY=VALUE` per line
//! - `GET /file?path=P`: the content of file P
//! - `GET /exit?code=N`: answers, then exits with N
//!
//! Flags: `--print-file P` prints a file at start; `--watch-file P` prints it again whenever it
//! changes (`file P: CONTENT`); `--exit-after-ms N --exit-code C` exits by itself;
//! `kube-list-pods` lists the pods of its namespace with `kube::Client::try_default()` (as an
//! in-cluster program would) and exits 0 (printing their names) or 1 (printing the error).
//! On SIGTERM it prints `got SIGTERM` and exits 0, unless `IGNORE_SIGTERM=1`.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static TERM: AtomicBool = AtomicBool::new(false);
static READY: AtomicBool = AtomicBool::new(true);
static LIVE: AtomicBool = AtomicBool::new(true);

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

fn query(target: &str, key: &str) -> Option<String> {
    let q = target.split_once('?')?.1;
    q.split('&').find_map(|kv| kv.strip_prefix(&format!("{key}="))).map(|v| v.replace("%2F", "/"))
}

fn respond(mut s: &TcpStream, code: u16, body: &str) {
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let _ = write!(s, "HTTP/1.1 {code} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    let _ = s.flush();
}

fn handle(stream: TcpStream) {
    let mut line = String::new();
    let mut reader = BufReader::new(&stream);
    if reader.read_line(&mut line).is_err() {
        return;
    }
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).map(|n| n == 0).unwrap_or(true) || h == "\r\n" {
            break;
        }
    }
    let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let path = target.split('?').next().unwrap_or("/");
    match path {
        "/healthz" => respond(&stream, 200, "ok"),
        "/ready" => respond(&stream, if READY.load(Ordering::SeqCst) { 200 } else { 503 }, "ready"),
        "/live" => respond(&stream, if LIVE.load(Ordering::SeqCst) { 200 } else { 500 }, "live"),
        "/set-ready" => {
            READY.store(query(&target, "v").as_deref() == Some("1"), Ordering::SeqCst);
            respond(&stream, 200, "set");
        }
        "/set-live" => {
            LIVE.store(query(&target, "v").as_deref() == Some("1"), Ordering::SeqCst);
            respond(&stream, 200, "set");
        }
        "/env" => {
            let mut vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
            vars.sort();
            respond(&stream, 200, &(vars.join("\n") + "\n"));
        }
        "/file" => match query(&target, "path").map(std::fs::read_to_string) {
            Some(Ok(c)) => respond(&stream, 200, &c),
            _ => respond(&stream, 404, "no such file"),
        },
        "/exit" => {
            let code: i32 = query(&target, "code").and_then(|c| c.parse().ok()).unwrap_or(0);
            respond(&stream, 200, "bye");
            println!("exiting with {code}");
            let _ = std::io::stdout().flush();
            std::process::exit(code);
        }
        _ => respond(&stream, 404, "not found"),
    }
}

fn kube_list_pods() -> i32 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            println!("error: {e}");
            return 1;
        }
    };
    rt.block_on(async {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                println!("error: {e}");
                return 1;
            }
        };
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
        match pods.list(&Default::default()).await {
            Ok(list) => {
                for p in list.items {
                    println!("pod {}", p.metadata.name.unwrap_or_default());
                }
                0
            }
            Err(e) => {
                println!("error: {e}");
                1
            }
        }
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    println!("starting argv={:?}", &args[1..]);
    eprintln!("stderr: hello");
    let _ = std::io::stdout().flush();
    if args.get(1).map(String::as_str) == Some("kube-list-pods") {
        std::process::exit(kube_list_pods());
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
    }
    if let Some(p) = arg(&args, "--print-file") {
        println!("file {p}: {}", std::fs::read_to_string(&p).unwrap_or_else(|e| format!("<{e}>")));
    }
    if let Some(p) = arg(&args, "--watch-file") {
        std::thread::spawn(move || {
            let mut last = None;
            loop {
                let now = std::fs::read_to_string(&p).ok();
                if now != last {
                    println!("file {p}: {}", now.clone().unwrap_or_default());
                    let _ = std::io::stdout().flush();
                    last = now;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
    }
    if let Some(ms) = arg(&args, "--exit-after-ms").and_then(|m| m.parse::<u64>().ok()) {
        let code: i32 = arg(&args, "--exit-code").and_then(|c| c.parse().ok()).unwrap_or(0);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(ms));
            println!("exiting with {code}");
            let _ = std::io::stdout().flush();
            std::process::exit(code);
        });
    }
    let ip = std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".into());
    let listener = match TcpListener::bind(format!("{ip}:{port}")) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("binding {ip}:{port}: {e}");
            std::process::exit(2);
        }
    };
    println!("listening on {ip}:{port}");
    let _ = std::io::stdout().flush();
    let _ = listener.set_nonblocking(true);
    let ignore_term = std::env::var("IGNORE_SIGTERM").as_deref() == Ok("1");
    let mut said = false;
    loop {
        if TERM.load(Ordering::SeqCst) && !said {
            said = true;
            println!("got SIGTERM");
            let _ = std::io::stdout().flush();
            if !ignore_term {
                std::process::exit(0);
            }
        }
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                std::thread::spawn(move || handle(s));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}
