//! Understanding a request: which resource and verb a path names (as the apiserver's
//! RequestInfoFactory does), its query parameters, and what the client accepts; and the body
//! type of every answer.

use crate::errors::{ApiError, ApiResult};
use std::collections::HashMap;

/// The body of every response, whoever answers (the API front, or the process runtime for a
/// pod's logs and streams): a boxed stream of byte frames.
pub type Body = http_body_util::combinators::BoxBody<bytes::Bytes, std::io::Error>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// What a resource path names. `namespace` is set for namespaced paths (and for
/// `/api/v1/namespaces/{name}`, like the real server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The legacy `/watch/` path prefix was used.
    pub legacy_watch: bool,
}

/// A path is either a resource request or something else (discovery, OpenAPI, health).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathKind {
    Resource(ResourcePath),
    /// `/api`, `/apis`, `/api/v1`, `/apis/{group}`, `/apis/{group}/{version}`
    Discovery {
        group: Option<String>,
        version: Option<String>,
        legacy_core: bool,
    },
    Other(String),
}

/// Split a request path the way the apiserver does.
pub fn parse_path(path: &str) -> PathKind {
    let trimmed = path.trim_matches('/');
    let parts: Vec<&str> = if trimmed.is_empty() { vec![] } else { trimmed.split('/').collect() };
    let (group, version, rest, legacy_core) = match parts.as_slice() {
        ["api"] => return PathKind::Discovery { group: None, version: None, legacy_core: true },
        ["apis"] => return PathKind::Discovery { group: None, version: None, legacy_core: false },
        ["api", v] => return PathKind::Discovery { group: None, version: Some(v.to_string()), legacy_core: true },
        ["apis", g] => return PathKind::Discovery { group: Some(g.to_string()), version: None, legacy_core: false },
        ["apis", g, v] => {
            return PathKind::Discovery {
                group: Some(g.to_string()),
                version: Some(v.to_string()),
                legacy_core: false,
            };
        }
        ["api", v, rest @ ..] => ("", *v, rest, true),
        ["apis", g, v, rest @ ..] => (*g, *v, rest, false),
        _ => return PathKind::Other(path.to_string()),
    };
    let _ = legacy_core;
    let mut rest: Vec<&str> = rest.to_vec();
    let mut legacy_watch = false;
    if rest.first() == Some(&"watch") {
        legacy_watch = true;
        rest.remove(0);
    }
    let mut namespace = None;
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = Some(rest[1].to_string());
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest.drain(0..2);
        }
    }
    if rest.is_empty() || rest.len() > 3 || rest.iter().any(|p| p.is_empty()) {
        return PathKind::Other(path.to_string());
    }
    PathKind::Resource(ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        namespace,
        resource: rest[0].to_string(),
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
        legacy_watch,
    })
}

/// Decoded query parameters (last value wins, like Go's url.Values.Get uses the first; the
/// apiserver takes the first: we do too).
#[derive(Debug, Clone, Default)]
pub struct Query {
    params: HashMap<String, String>,
}

impl Query {
    pub fn parse(q: Option<&str>) -> Query {
        let mut params = HashMap::new();
        if let Some(q) = q {
            for (k, v) in form_urlencoded::parse(q.as_bytes()) {
                params.entry(k.into_owned()).or_insert_with(|| v.into_owned());
            }
        }
        Query { params }
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.params.get(k).map(String::as_str).filter(|s| !s.is_empty())
    }

    /// A boolean parameter: `1`, `true`, `t` (any case) are true, as Go's strconv.ParseBool.
    pub fn flag(&self, k: &str) -> ApiResult<bool> {
        match self.get(k) {
            None => Ok(false),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "t" | "true" => Ok(true),
                "0" | "f" | "false" => Ok(false),
                _ => {
                    Err(ApiError::bad_request(format!("invalid value {v:?} for parameter {k}: must be true or false")))
                }
            },
        }
    }

    pub fn int(&self, k: &str) -> ApiResult<Option<i64>> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!("invalid value {v:?} for parameter {k}: must be an integer"))
            }),
        }
    }

    /// `dryRun=All` (the only value the apiserver accepts).
    pub fn dry_run(&self) -> ApiResult<bool> {
        match self.params.get("dryRun").map(String::as_str) {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => {
                Err(ApiError::bad_request(format!("Invalid dry run value: {other:?}: supported values: \"All\"")))
            }
        }
    }
}

/// What the client asked to receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    Table,
    PartialObjectMetadata,
    PartialObjectMetadataList,
    /// Aggregated discovery (`as=APIGroupDiscoveryList`), version v2 or v2beta1.
    AggregatedDiscovery {
        v2beta1: bool,
    },
}

/// One entry of an Accept header: `type/subtype;k=v;...`.
#[derive(Debug, Clone)]
struct MediaRange {
    mime: String,
    params: HashMap<String, String>,
}

fn parse_accept(accept: &str) -> Vec<MediaRange> {
    accept
        .split(',')
        .filter_map(|part| {
            let mut it = part.split(';');
            let mime = it.next()?.trim().to_ascii_lowercase();
            if mime.is_empty() {
                return None;
            }
            let params = it
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_string()))
                })
                .collect();
            Some(MediaRange { mime, params })
        })
        .collect()
}

/// Choose the representation: the first acceptable entry wins; protobuf is skipped (we answer
/// JSON to clients that list it first, as the real server does for kinds without protobuf).
pub fn negotiate(accept: Option<&str>, discovery: bool) -> ApiResult<Output> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else { return Ok(Output::Json) };
    let ranges = parse_accept(accept);
    for r in &ranges {
        let json_like = matches!(r.mime.as_str(), "application/json" | "*/*" | "application/*");
        let yaml = r.mime == "application/yaml";
        if !(json_like || yaml) {
            continue;
        }
        let as_ = r.params.get("as").map(String::as_str);
        let g = r.params.get("g").map(String::as_str);
        let v = r.params.get("v").map(String::as_str);
        match as_ {
            None => return Ok(if yaml { Output::Yaml } else { Output::Json }),
            Some("Table") if g == Some("meta.k8s.io") && matches!(v, Some("v1") | Some("v1beta1")) && !discovery => {
                return Ok(Output::Table);
            }
            Some("PartialObjectMetadata") if g == Some("meta.k8s.io") && !discovery => {
                return Ok(Output::PartialObjectMetadata);
            }
            Some("PartialObjectMetadataList") if g == Some("meta.k8s.io") && !discovery => {
                return Ok(Output::PartialObjectMetadataList);
            }
            Some("APIGroupDiscoveryList") if discovery && g == Some("apidiscovery.k8s.io") => match v {
                Some("v2") => return Ok(Output::AggregatedDiscovery { v2beta1: false }),
                Some("v2beta1") => return Ok(Output::AggregatedDiscovery { v2beta1: true }),
                _ => continue,
            },
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable(accept))
}

/// The format of a request body, from its Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    Json,
    Yaml,
    MergePatch,
    JsonPatch,
    StrategicMergePatch,
    ApplyPatch,
    /// `application/vnd.kubernetes.protobuf`: decoded by `crate::protobuf` for built-in kinds.
    Protobuf,
}

pub fn body_format(content_type: Option<&str>) -> ApiResult<BodyFormat> {
    let ct = content_type.unwrap_or("application/json");
    let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match mime.as_str() {
        "application/json" | "" | "*/*" => Ok(BodyFormat::Json),
        "application/yaml" => Ok(BodyFormat::Yaml),
        "application/merge-patch+json" => Ok(BodyFormat::MergePatch),
        "application/json-patch+json" => Ok(BodyFormat::JsonPatch),
        "application/strategic-merge-patch+json" => Ok(BodyFormat::StrategicMergePatch),
        "application/apply-patch+yaml" => Ok(BodyFormat::ApplyPatch),
        "application/vnd.kubernetes.protobuf" => Ok(BodyFormat::Protobuf),
        _ => Err(ApiError::unsupported_media_type(ct)),
    }
}

/// Parse a JSON or YAML body into a JSON value, with the apiserver's kind of message.
pub fn decode_body(bytes: &[u8], yaml: bool) -> ApiResult<serde_json::Value> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the body of the request was empty"));
    }
    if yaml {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}")))?;
        serde_saphyr::from_str::<serde_json::Value>(text)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}")))
    } else {
        serde_json::from_slice(bytes).map_err(|e| {
            ApiError::bad_request(format!(
                "json: error decoding the request body: {e}; send valid JSON, or YAML with Content-Type application/yaml"
            ))
        })
    }
}

/// Go's `encoding/json` wording for the common syntax errors.
fn go_json_error(e: &serde_json::Error) -> String {
    if e.is_eof() {
        "unexpected end of JSON input".to_string()
    } else {
        format!("invalid JSON at line {} column {}: {e}", e.line(), e.column())
    }
}

/// What the decoder prints of a body it cannot read (`summarizeData`): the first 30 bytes as
/// text when it looks like JSON, in hex otherwise.
fn summarize(data: &[u8]) -> String {
    const MAX: usize = 30;
    match data.first() {
        None => "<empty>".to_string(),
        Some(b'{') => {
            let head = String::from_utf8_lossy(&data[..data.len().min(MAX)]).into_owned();
            if data.len() > MAX { format!("{head} ...") } else { head }
        }
        Some(_) => {
            let hex: String = data[..data.len().min(MAX)].iter().map(|b| format!("{b:02x}")).collect();
            if data.len() > MAX { format!("{hex} ...") } else { hex }
        }
    }
}

/// Decode an object body (create, update), answering unreadable ones as the apiserver's
/// `transformDecodeError` does: `the object provided is unrecognized (must be of type X): ...`.
pub fn decode_object(bytes: &[u8], yaml: bool, kind: &str) -> ApiResult<serde_json::Value> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the body of the request was empty"));
    }
    let err = if yaml {
        match std::str::from_utf8(bytes)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_saphyr::from_str::<serde_json::Value>(t).map_err(|e| e.to_string()))
        {
            Ok(v) => return Ok(v),
            Err(e) => format!("yaml: {}", e.lines().next().unwrap_or("").trim_start_matches("error: ")),
        }
    } else {
        match serde_json::from_slice(bytes) {
            Ok(v) => return Ok(v),
            Err(e) => format!("couldn't get version/kind; json parse error: {}", go_json_error(&e)),
        }
    };
    Err(ApiError::bad_request(format!(
        "the object provided is unrecognized (must be of type {kind}): {err} ({})",
        summarize(bytes)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(p: &str) -> ResourcePath {
        match parse_path(p) {
            PathKind::Resource(r) => r,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn paths_split_like_the_apiserver() {
        let r = res("/api/v1/namespaces/default/pods/p1/status");
        assert_eq!(
            (r.namespace.as_deref(), r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            (Some("default"), "pods", Some("p1"), Some("status"))
        );
        let r = res("/api/v1/namespaces/kube-system");
        assert_eq!((r.resource.as_str(), r.name.as_deref()), ("namespaces", Some("kube-system")));
        let r = res("/api/v1/namespaces/x/status");
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            ("namespaces", Some("x"), Some("status"))
        );
        let r = res("/apis/apps/v1/deployments");
        assert_eq!((r.group.as_str(), r.namespace, r.name), ("apps", None, None));
        let r = res("/api/v1/watch/namespaces/default/configmaps");
        assert!(r.legacy_watch);
        assert!(matches!(parse_path("/apis/apps/v1"), PathKind::Discovery { .. }));
        assert!(matches!(parse_path("/healthz"), PathKind::Other(_)));
        assert!(matches!(parse_path("/api/v1/a/b/c/d"), PathKind::Other(_)));
    }

    proptest::proptest! {
        /// Request parsing never panics, whatever the path, query, headers or body.
        #[test]
        fn parsing_never_panics(path in ".{0,80}", query in ".{0,80}", accept in ".{0,80}", ct in ".{0,40}", body in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse_path(&path);
            let q = Query::parse(Some(&query));
            let _ = q.flag("watch");
            let _ = q.int("limit");
            let _ = q.dry_run();
            let _ = negotiate(Some(&accept), false);
            let _ = negotiate(Some(&accept), true);
            let _ = body_format(Some(&ct));
            let _ = decode_body(&body, false);
            let _ = decode_body(&body, true);
            let _ = decode_object(&body, true, "ConfigMap");
            let _ = decode_object(&body, false, "ConfigMap");
        }

        /// Every path made of resource-like segments splits into the parts it was made of.
        #[test]
        fn resource_paths_round_trip(ns in "[a-z][a-z0-9-]{0,10}", res in "[a-z]{1,12}", name in "[a-z][a-z0-9.-]{0,12}") {
            let path = format!("/apis/apps/v1/namespaces/{ns}/{res}/{name}");
            match parse_path(&path) {
                PathKind::Resource(r) if res != "status" && res != "finalize" => {
                    proptest::prop_assert_eq!(r.namespace.as_deref(), Some(ns.as_str()));
                    proptest::prop_assert_eq!(r.resource, res);
                    proptest::prop_assert_eq!(r.name.as_deref(), Some(name.as_str()));
                }
                _ => {}
            }
        }
    }

    #[test]
    fn negotiation_prefers_the_first_supported() {
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf, application/json"), false).unwrap(),
            Output::Json
        );
        assert_eq!(
            negotiate(Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"), false).unwrap(),
            Output::Table
        );
        assert_eq!(
            negotiate(
                Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"),
                true
            )
            .unwrap(),
            Output::AggregatedDiscovery { v2beta1: false }
        );
        assert!(negotiate(Some("text/html"), false).is_err());
    }
}
