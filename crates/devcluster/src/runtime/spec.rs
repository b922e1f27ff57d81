//! From a container spec to a process: argv, environment, working directory, with `$(VAR)`
//! expansion and the path translation (see the module docs of `runtime`).
//!
//! Follows pkg/kubelet/kubelet_pods.go (`makeEnvironmentVariables`, `getServiceEnvVarMap`),
//! pkg/kubelet/envvars/envvars.go (the Service variables), third_party/forked/golang/expansion
//! (`$(VAR)`), pkg/kubelet/kuberuntime/kuberuntime_container.go (command and args against the
//! image's ENTRYPOINT/CMD) and pkg/fieldpath (the downward API).

use crate::cluster::Cluster;
use crate::registry::GroupResource;
use base64::Engine;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a container process is started with.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// mountPath -> host directory (for exec commands).
    pub mounts: Vec<(String, PathBuf)>,
    /// The program the container's `command[0]` names (the mapped executable), for exec.
    pub program: Option<(String, PathBuf)>,
}

/// Expand `$(VAR)` as Kubernetes does: `$$` is a literal `$`, references to unknown variables
/// and unterminated ones stay as written.
pub fn expand(input: &str, vars: &dyn Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            match b[i + 1] {
                b'$' => {
                    out.push_str(&input[last..i]);
                    out.push('$');
                    i += 2;
                    last = i;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        out.push_str(&input[last..i]);
                        match vars(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        last = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&input[last..]);
    out
}

/// argv from the mapped executable and the container's `command`/`args` (the image's
/// ENTRYPOINT is `[exe]`, its CMD `[]`).
pub fn argv(exe: &Path, command: &[String], args: &[String]) -> Vec<String> {
    let mut v = vec![exe.to_string_lossy().into_owned()];
    if let Some((_, rest)) = command.split_first() {
        v.extend(rest.iter().cloned());
    }
    v.extend(args.iter().cloned());
    v
}

/// Rewrite paths under a volume mount to the pod's directory of that volume: a mount path that
/// starts the string or follows a separator (`=`, `:`, `,`, space, quote) and is followed by
/// the end, `/` or a separator.
pub fn translate(s: &str, mounts: &[(String, PathBuf)]) -> String {
    if mounts.is_empty() || !s.contains('/') {
        return s.to_string();
    }
    let mut sorted: Vec<&(String, PathBuf)> = mounts.iter().collect();
    sorted.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    let is_sep = |c: char| matches!(c, '=' | ':' | ',' | ' ' | '"' | '\'' | ';' | '@');
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    'outer: while i < s.len() {
        let at_start = i == 0 || s[..i].chars().next_back().is_some_and(is_sep);
        if at_start && s[i..].starts_with('/') {
            for (mount, host) in &sorted {
                let m = mount.trim_end_matches('/');
                if m.is_empty() || !s[i..].starts_with(m) {
                    continue;
                }
                let rest = &s[i + m.len()..];
                if rest.is_empty() || rest.starts_with('/') || rest.starts_with(is_sep) {
                    out.push_str(&host.to_string_lossy());
                    i += m.len();
                    continue 'outer;
                }
            }
        }
        let ch = s[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The network translation of an arg or env value (docs/devcluster.md, "Network"): there is no
/// network namespace, so
/// - a wildcard listen address (`0.0.0.0:PORT`, `[::]:PORT`) becomes `POD_IP:PORT`: in a pod, a
///   wildcard binds the pod's own network namespace; here it would bind every loopback address
///   and collide with other pods (and the host);
/// - a loopback address (`127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT`) whose port one of the
///   pod's containers declares (`pod_ports`) becomes `POD_IP:PORT`: in a pod, containers talk to
///   each other over the pod's loopback; here every pod shares the host's, so the pod's own
///   loopback address stands for it (still reachable from this host only). A loopback port no
///   container of the pod declares is left alone (it may be a service on the host).
pub fn bind_address(s: &str, pod_ip: &str, pod_ports: &[u16]) -> String {
    const WILDCARDS: [&str; 2] = ["0.0.0.0:", "[::]:"];
    const LOOPBACKS: [&str; 3] = ["127.0.0.1:", "localhost:", "[::1]:"];
    if pod_ip.is_empty() || !WILDCARDS.iter().chain(&LOOPBACKS).any(|w| s.contains(w)) {
        return s.to_string();
    }
    let is_sep = |c: char| matches!(c, '=' | ',' | ' ' | '"' | '\'' | ';' | '/' | '@');
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let at_start = i == 0 || s[..i].chars().next_back().is_some_and(is_sep);
        if at_start {
            let digits = |from: usize| {
                let rest = &s[from..];
                let n = rest.bytes().take_while(u8::is_ascii_digit).count();
                (n > 0).then(|| rest[..n].parse::<u16>().ok()).flatten()
            };
            let wild = WILDCARDS.into_iter().find(|w| s[i..].starts_with(w)).filter(|w| digits(i + w.len()).is_some());
            let lo = LOOPBACKS
                .into_iter()
                .find(|w| s[i..].starts_with(w))
                .filter(|w| digits(i + w.len()).is_some_and(|p| pod_ports.contains(&p)));
            if let Some(w) = wild.or(lo) {
                out.push_str(pod_ip);
                out.push(':');
                i += w.len();
                continue;
            }
        }
        let ch = s[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The ports the pod's containers (and init containers) declare.
pub fn declared_ports(pod: &Value) -> Vec<u16> {
    let mut ports = Vec::new();
    for list in ["/spec/containers", "/spec/initContainers"] {
        for c in pod.pointer(list).and_then(Value::as_array).into_iter().flatten() {
            for p in c.get("ports").and_then(Value::as_array).into_iter().flatten() {
                if let Some(n) = p.get("containerPort").and_then(Value::as_u64).and_then(|n| u16::try_from(n).ok()) {
                    ports.push(n);
                }
            }
        }
    }
    ports
}

/// A lookup of a ConfigMap's or Secret's data, decoded.
fn data_of(cl: &Cluster, resource: &str, ns: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
    let obj = cl.store.get(&GroupResource::new("", resource), ns, name)?;
    let mut out = BTreeMap::new();
    if resource == "secrets" {
        for (k, v) in obj.get("data").and_then(Value::as_object).into_iter().flatten() {
            let b = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or("")).unwrap_or_default();
            out.insert(k.clone(), b);
        }
        for (k, v) in obj.get("stringData").and_then(Value::as_object).into_iter().flatten() {
            out.insert(k.clone(), v.as_str().unwrap_or("").as_bytes().to_vec());
        }
    } else {
        for (k, v) in obj.get("data").and_then(Value::as_object).into_iter().flatten() {
            out.insert(k.clone(), v.as_str().unwrap_or("").as_bytes().to_vec());
        }
        for (k, v) in obj.get("binaryData").and_then(Value::as_object).into_iter().flatten() {
            let b = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or("")).unwrap_or_default();
            out.insert(k.clone(), b);
        }
    }
    Some(out)
}

pub(crate) fn configmap_data(cl: &Cluster, ns: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
    data_of(cl, "configmaps", ns, name)
}

pub(crate) fn secret_data(cl: &Cluster, ns: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
    data_of(cl, "secrets", ns, name)
}

/// The value of a downward API field path (pkg/fieldpath `ExtractFieldPathAsString`, plus the
/// status and spec fields the kubelet resolves itself).
pub fn field_ref(pod: &Value, path: &str) -> Result<String, String> {
    let s = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    let map_lines = |p: &str| {
        let mut lines: Vec<String> = pod
            .pointer(p)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", serde_json::to_string(v.as_str().unwrap_or("")).unwrap_or_default()))
            .collect();
        lines.sort();
        lines.join("\n")
    };
    let subscript = |prefix: &str| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_prefix("['")?.strip_suffix("']")?;
        Some(rest.to_string())
    };
    if let Some(k) = subscript("metadata.labels") {
        return Ok(pod
            .pointer("/metadata/labels")
            .and_then(|l| l.get(&k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .into());
    }
    if let Some(k) = subscript("metadata.annotations") {
        return Ok(pod
            .pointer("/metadata/annotations")
            .and_then(|l| l.get(&k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .into());
    }
    let ips = |p: &str| {
        pod.pointer(p)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|i| i.get("ip").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(",")
    };
    Ok(match path {
        "metadata.name" => s("/metadata/name"),
        "metadata.namespace" => s("/metadata/namespace"),
        "metadata.uid" => s("/metadata/uid"),
        "metadata.labels" => map_lines("/metadata/labels"),
        "metadata.annotations" => map_lines("/metadata/annotations"),
        "spec.nodeName" => s("/spec/nodeName"),
        "spec.serviceAccountName" => s("/spec/serviceAccountName"),
        "status.hostIP" => s("/status/hostIP"),
        "status.hostIPs" => ips("/status/hostIPs"),
        "status.podIP" => s("/status/podIP"),
        "status.podIPs" => ips("/status/podIPs"),
        _ => return Err(format!("unsupported fieldPath: {path}")),
    })
}

/// The value of a resourceFieldRef (pkg/api/v1/resource `ExtractContainerResourceValue`): the
/// container's limit or request, divided by the divisor and rounded up; a missing limit is the
/// node's allocatable (here: the machine's CPUs, 64Gi of memory and ephemeral storage).
pub fn resource_field(pod: &Value, default_container: &str, r: &Value) -> Result<String, String> {
    let cname = r.get("containerName").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(default_container);
    let resource = r.get("resource").and_then(Value::as_str).unwrap_or("");
    let container = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(pod.pointer("/spec/initContainers").and_then(Value::as_array).into_iter().flatten())
        .find(|c| c.get("name").and_then(Value::as_str) == Some(cname))
        .ok_or_else(|| format!("container {cname} not found"))?;
    let (section, res) =
        resource.split_once('.').ok_or_else(|| format!("unsupported container resource: {resource}"))?;
    let section = match section {
        "limits" | "requests" => section,
        _ => return Err(format!("unsupported container resource: {resource}")),
    };
    let set = container.pointer(&format!("/resources/{section}/{res}")).and_then(Value::as_str).map(str::to_string);
    let set = set.or_else(|| {
        if section == "requests" {
            container.pointer(&format!("/resources/limits/{res}")).and_then(Value::as_str).map(str::to_string)
        } else {
            None
        }
    });
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).to_string();
    let value = match (set, section, res) {
        (Some(v), _, _) => v,
        (None, "limits", "cpu") => cpus,
        (None, "limits", _) => "64Gi".to_string(),
        (None, "requests", _) => "0".to_string(),
        _ => "0".to_string(),
    };
    let q = k8s_quantity::parse_quantity(&value).map_err(|e| format!("{resource}: {e}"))?;
    let divisor = r.get("divisor").map(|d| match d {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let d = k8s_quantity::parse_quantity(divisor.as_deref().filter(|s| !s.is_empty()).unwrap_or("1"))
        .map_err(|e| format!("divisor: {e}"))?;
    // ceil(value / divisor), in milli units to keep CPU precision.
    let (num, den) = (q.milli_value() as i128, d.milli_value().max(1) as i128);
    Ok((((num + den - 1) / den).max(if num > 0 { 1 } else { 0 })).to_string())
}

/// Service environment variables of a pod (pkg/kubelet/envvars `FromServices`): the Services of
/// its namespace with a ClusterIP (all of them unless `enableServiceLinks` is false) and the
/// `kubernetes` Service, which names this devcluster.
pub fn service_env(cl: &Cluster, pod: &Value) -> Vec<(String, String)> {
    let ns = crate::meta::namespace(pod);
    let links = pod.pointer("/spec/enableServiceLinks").and_then(Value::as_bool) != Some(false);
    let mut out = vec![];
    let mut services: Vec<std::sync::Arc<Value>> = vec![];
    if links {
        services.extend(cl.store.list(&GroupResource::new("", "services"), Some(ns)).0);
    }
    services.sort_by(|a, b| crate::meta::name(a).cmp(crate::meta::name(b)));
    for svc in &services {
        let name = crate::meta::name(svc);
        if ns == "default" && name == "kubernetes" {
            continue;
        }
        let ip = svc.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or("");
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let ports: Vec<(String, i64, String)> = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| {
                (
                    p.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                    p.get("port").and_then(Value::as_i64).unwrap_or(0),
                    p.get("protocol").and_then(Value::as_str).unwrap_or("TCP").to_string(),
                )
            })
            .collect();
        push_service_vars(&mut out, name, ip, &ports);
    }
    // The API server: this devcluster's own address, where in-cluster clients reach it.
    let (host, port) = api_host_port(cl);
    push_service_vars(&mut out, "kubernetes", &host, &[("https".into(), port, "TCP".into())]);
    out
}

/// The address and port of this devcluster's API.
pub(crate) fn api_host_port(cl: &Cluster) -> (String, i64) {
    let url = cl.server_url().trim_start_matches("https://").to_string();
    match url.rsplit_once(':') {
        Some((h, p)) => (h.trim_start_matches('[').trim_end_matches(']').to_string(), p.parse().unwrap_or(443)),
        None => (url, 443),
    }
}

fn push_service_vars(out: &mut Vec<(String, String)>, name: &str, ip: &str, ports: &[(String, i64, String)]) {
    let n = name.to_uppercase().replace('-', "_");
    let Some((_, first, first_proto)) = ports.first() else { return };
    out.push((format!("{n}_SERVICE_HOST"), ip.to_string()));
    out.push((format!("{n}_SERVICE_PORT"), first.to_string()));
    for (pname, port, _) in ports {
        if !pname.is_empty() {
            out.push((format!("{n}_SERVICE_PORT_{}", pname.to_uppercase().replace('-', "_")), port.to_string()));
        }
    }
    out.push((format!("{n}_PORT"), format!("{}://{ip}:{first}", first_proto.to_lowercase())));
    for (_, port, proto) in ports {
        let p = format!("{n}_PORT_{port}_{}", proto.to_uppercase());
        out.push((p.clone(), format!("{}://{ip}:{port}", proto.to_lowercase())));
        out.push((format!("{p}_PROTO"), proto.to_lowercase()));
        out.push((format!("{p}_PORT"), port.to_string()));
        out.push((format!("{p}_ADDR"), ip.to_string()));
    }
}

/// A C identifier-ish environment variable name as upstream accepts them
/// (`IsEnvVarName`: `[-._a-zA-Z][-._a-zA-Z0-9]*`).
fn valid_env_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || "-._".contains(c))
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// The container's environment, in the kubelet's order: envFrom, then env (each `$(VAR)`
/// expanded against what came before and the Service variables), then the Service variables
/// not already set. Errors are the kubelet's CreateContainerConfigError messages.
pub fn environment(cl: &Cluster, pod: &Value, container: &Value) -> Result<Vec<(String, String)>, String> {
    let ns = crate::meta::namespace(pod);
    let cname = container.get("name").and_then(Value::as_str).unwrap_or("");
    let mut env: Vec<(String, String)> = vec![];
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        if let Some(e) = env.iter_mut().find(|(n, _)| *n == k) {
            e.1 = v;
        } else {
            env.push((k, v));
        }
    };
    for from in container.get("envFrom").and_then(Value::as_array).into_iter().flatten() {
        let prefix = from.get("prefix").and_then(Value::as_str).unwrap_or("");
        let (kind, r, data) = if let Some(r) = from.get("configMapRef") {
            let name = r.get("name").and_then(Value::as_str).unwrap_or("");
            ("configmap", r, configmap_data(cl, ns, name))
        } else if let Some(r) = from.get("secretRef") {
            let name = r.get("name").and_then(Value::as_str).unwrap_or("");
            ("secret", r, secret_data(cl, ns, name))
        } else {
            continue;
        };
        let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        match data {
            Some(d) => {
                for (k, v) in d {
                    let key = format!("{prefix}{k}");
                    if valid_env_name(&key) {
                        set(&mut env, key, String::from_utf8_lossy(&v).into_owned());
                    }
                }
            }
            None if optional => {}
            None => return Err(format!("{kind} \"{name}\" not found")),
        }
    }
    let services = service_env(cl, pod);
    for e in container.get("env").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = e.get("name").and_then(Value::as_str) else { continue };
        let value = if let Some(v) = e.get("value").and_then(Value::as_str) {
            let lookup = |k: &str| {
                env.iter()
                    .rev()
                    .find(|(n, _)| n == k)
                    .or_else(|| services.iter().find(|(n, _)| n == k))
                    .map(|(_, v)| v.clone())
            };
            expand(v, &lookup)
        } else if let Some(vf) = e.get("valueFrom") {
            match value_from(cl, pod, cname, vf)? {
                Some(v) => v,
                None => continue,
            }
        } else {
            String::new()
        };
        set(&mut env, name.to_string(), value);
    }
    for (k, v) in services {
        if !env.iter().any(|(n, _)| *n == k) {
            env.push((k, v));
        }
    }
    Ok(env)
}

/// `valueFrom`: Ok(None) for an optional reference that is missing.
fn value_from(cl: &Cluster, pod: &Value, cname: &str, vf: &Value) -> Result<Option<String>, String> {
    let ns = crate::meta::namespace(pod);
    let key_ref = |r: &Value, kind: &str, data: Option<BTreeMap<String, Vec<u8>>>| -> Result<Option<String>, String> {
        let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        let key = r.get("key").and_then(Value::as_str).unwrap_or("");
        match data {
            None if optional => Ok(None),
            None => Err(format!("{kind} \"{name}\" not found")),
            Some(d) => match d.get(key) {
                Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
                None if optional => Ok(None),
                None => Err(format!(
                    "couldn't find key {key} in {} {ns}/{name}",
                    if kind == "configmap" { "ConfigMap" } else { "Secret" }
                )),
            },
        }
    };
    if let Some(r) = vf.get("configMapKeyRef") {
        return key_ref(r, "configmap", configmap_data(cl, ns, r.get("name").and_then(Value::as_str).unwrap_or("")));
    }
    if let Some(r) = vf.get("secretKeyRef") {
        return key_ref(r, "secret", secret_data(cl, ns, r.get("name").and_then(Value::as_str).unwrap_or("")));
    }
    if let Some(r) = vf.get("fieldRef") {
        return field_ref(pod, r.get("fieldPath").and_then(Value::as_str).unwrap_or("")).map(Some);
    }
    if let Some(r) = vf.get("resourceFieldRef") {
        return resource_field(pod, cname, r).map(Some);
    }
    Ok(None)
}

/// The mounts of a container: mountPath -> the host directory of its volume (and subPath).
pub fn mounts(container: &Value, volume_dirs: &BTreeMap<String, PathBuf>) -> Vec<(String, PathBuf)> {
    container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let vol = m.get("name").and_then(Value::as_str)?;
            let path = m.get("mountPath").and_then(Value::as_str)?;
            let dir = volume_dirs.get(vol)?;
            let sub = m.get("subPath").and_then(Value::as_str).unwrap_or("");
            Some((path.to_string(), if sub.is_empty() { dir.clone() } else { super::join_inside(dir, sub) }))
        })
        .collect()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

/// Everything a container process starts with. `pod_dir` is the working directory unless
/// `workingDir` is under a mount.
pub fn launch(
    cl: &Cluster,
    pod: &Value,
    container: &Value,
    exe: &Path,
    volume_dirs: &BTreeMap<String, PathBuf>,
    pod_dir: &Path,
    kubeconfig: Option<&Path>,
) -> Result<Launch, String> {
    let env = environment(cl, pod, container)?;
    let mounts = mounts(container, volume_dirs);
    let lookup = |k: &str| env.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let command: Vec<String> = strings(container.get("command")).iter().map(|s| expand(s, &lookup)).collect();
    let args: Vec<String> = strings(container.get("args")).iter().map(|s| expand(s, &lookup)).collect();
    let pod_ip = pod.pointer("/status/podIP").and_then(Value::as_str).unwrap_or("");
    let ports = declared_ports(pod);
    let mut argv = argv(exe, &command, &args);
    for a in argv.iter_mut().skip(1) {
        *a = bind_address(&translate(a, &mounts), pod_ip, &ports);
    }
    let mut env: Vec<(String, String)> =
        env.into_iter().map(|(k, v)| (k, bind_address(&translate(&v, &mounts), pod_ip, &ports))).collect();
    if let Some(kc) = kubeconfig {
        env.retain(|(k, _)| k != "KUBECONFIG");
        env.push(("KUBECONFIG".into(), kc.to_string_lossy().into_owned()));
    }
    if !env.iter().any(|(k, _)| k == "HOSTNAME") {
        env.push(("HOSTNAME".into(), crate::meta::name(pod).to_string()));
    }
    if !env.iter().any(|(k, _)| k == "HOME") {
        env.push(("HOME".into(), pod_dir.to_string_lossy().into_owned()));
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())));
    }
    let cwd = match container.get("workingDir").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(w) => {
            let t = PathBuf::from(translate(w, &mounts));
            if t.is_dir() { t } else { pod_dir.to_path_buf() }
        }
        None => pod_dir.to_path_buf(),
    };
    let program = command.first().map(|c| (c.clone(), exe.to_path_buf()));
    Ok(Launch { argv, env, cwd, mounts, program })
}

/// The argv of an exec (or exec probe) command in a container: path translation applied, and the
/// container's own program (its `command[0]`, or the mapped executable's name) run as the
/// mapped executable.
pub fn exec_argv(launch: &Launch, command: &[String]) -> Vec<String> {
    command
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i == 0 {
                if let Some((name, exe)) = &launch.program
                    && name == c
                {
                    return exe.to_string_lossy().into_owned();
                }
                if launch.argv.first().is_some_and(|a| a == c) {
                    return c.clone();
                }
            }
            translate(c, &launch.mounts)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(k: &str) -> Option<String> {
        match k {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expansion_follows_kubernetes() {
        assert_eq!(expand("$(A)-$(B)", &vars), "alpha-$(B)");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("$$$(A)", &vars), "$alpha");
        assert_eq!(expand("$(A", &vars), "$(A");
        assert_eq!(expand("x$(EMPTY)y", &vars), "xy");
        assert_eq!(expand("$", &vars), "$");
        assert_eq!(expand("a$b", &vars), "a$b");
    }

    #[test]
    fn argv_applies_command_and_args_as_kubernetes_with_the_mapped_entrypoint() {
        let exe = Path::new("/build/mite");
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(argv(exe, &[], &[]), s(&["/build/mite"]));
        assert_eq!(argv(exe, &[], &s(&["--v"])), s(&["/build/mite", "--v"]));
        assert_eq!(argv(exe, &s(&["/varroa-mite", "run"]), &[]), s(&["/build/mite", "run"]));
        assert_eq!(argv(exe, &s(&["/varroa-mite", "run"]), &s(&["--v"])), s(&["/build/mite", "run", "--v"]));
    }

    #[test]
    fn paths_under_mounts_are_translated() {
        let m = vec![
            ("/etc/app".to_string(), PathBuf::from("/tmp/p/volumes/cfg")),
            ("/etc/app/tls".to_string(), PathBuf::from("/tmp/p/volumes/tls")),
        ];
        assert_eq!(translate("/etc/app/config.yaml", &m), "/tmp/p/volumes/cfg/config.yaml");
        assert_eq!(translate("--config=/etc/app/c", &m), "--config=/tmp/p/volumes/cfg/c");
        assert_eq!(translate("/etc/app/tls/ca.crt", &m), "/tmp/p/volumes/tls/ca.crt");
        assert_eq!(translate("/etc/application", &m), "/etc/application");
        assert_eq!(translate("x/etc/app", &m), "x/etc/app");
        assert_eq!(translate("/etc/app", &m), "/tmp/p/volumes/cfg");
        assert_eq!(translate("a:/etc/app,b", &m), "a:/tmp/p/volumes/cfg,b");
    }

    #[test]
    fn wildcard_listen_addresses_bind_the_pod_ip() {
        let ip = "127.9.8.7";
        assert_eq!(bind_address("--metrics-addr=0.0.0.0:8080", ip, &[]), "--metrics-addr=127.9.8.7:8080");
        assert_eq!(bind_address("[::]:9090", ip, &[]), "127.9.8.7:9090");
        assert_eq!(bind_address("http://0.0.0.0:80/x", ip, &[]), "http://127.9.8.7:80/x");
        assert_eq!(bind_address("10.0.0.0:80", ip, &[]), "10.0.0.0:80");
        assert_eq!(bind_address("0.0.0.0:x", ip, &[]), "0.0.0.0:x");
        assert_eq!(bind_address("0.0.0.0:80", "", &[]), "0.0.0.0:80");
        // The pod's loopback: only ports a container of the pod declares.
        assert_eq!(bind_address("http://127.0.0.1:8787", ip, &[8787]), "http://127.9.8.7:8787");
        assert_eq!(bind_address("--listen=localhost:8787", ip, &[8787]), "--listen=127.9.8.7:8787");
        assert_eq!(bind_address("[::1]:8787", ip, &[8787]), "127.9.8.7:8787");
        assert_eq!(bind_address("postgres://u@127.0.0.1:5432/db", ip, &[8787]), "postgres://u@127.0.0.1:5432/db");
        assert_eq!(bind_address("127.0.0.1:87870", ip, &[8787]), "127.0.0.1:87870");
        assert_eq!(bind_address("x127.0.0.1:8787", ip, &[8787]), "x127.0.0.1:8787");
    }

    #[test]
    fn downward_api_fields() {
        let pod = serde_json::json!({"metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {"b": "2", "a": "1"}},
            "spec": {"nodeName": "node", "serviceAccountName": "sa"}, "status": {"podIP": "127.1.2.3", "podIPs": [{"ip": "127.1.2.3"}]}});
        assert_eq!(field_ref(&pod, "metadata.labels['a']").unwrap(), "1");
        assert_eq!(field_ref(&pod, "metadata.labels").unwrap(), "a=\"1\"\nb=\"2\"");
        assert_eq!(field_ref(&pod, "status.podIPs").unwrap(), "127.1.2.3");
        assert!(field_ref(&pod, "spec.bogus").is_err());
        let pod = serde_json::json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}}}]}});
        let r = |res: &str, div: &str| resource_field(&pod, "c", &serde_json::json!({"resource": res, "divisor": div}));
        assert_eq!(r("limits.memory", "1Mi").unwrap(), "64");
        assert_eq!(r("limits.cpu", "1").unwrap(), "1");
        assert_eq!(r("limits.cpu", "1m").unwrap(), "500");
    }
}
