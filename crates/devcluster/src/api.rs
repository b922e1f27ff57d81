//! The HTTP face of the API server: authentication, routing, content negotiation, and the mapping
//! of methods to verbs. Everything it does to objects goes through `ops`.

use crate::auth::rbac::{Attributes, UserInfo};
use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult};
use crate::ops::{self, DeleteOpts, FieldValidation, ListOpts, WriteOpts};
use crate::registry::ResourceDef;
use crate::request::{self, Body, BodyFormat, Output, PathKind, Query, ResourcePath};
use crate::runtime::Runtime;
use crate::watch::{self, Start, WatchParams};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// The DER of the leaf certificate a client presented in the TLS handshake (a request
/// extension `server` adds).
#[derive(Debug, Clone)]
pub struct PeerCertificate(pub Arc<Vec<u8>>);

/// Request bodies larger than this are refused (413), like the apiserver's 3 MiB limit.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never: Infallible| match never {}).boxed()
}

fn json_response(code: u16, v: &Value, output: Output, warnings: &[String]) -> Response<Body> {
    let (ct, bytes) = match output {
        Output::Yaml => match serde_saphyr::to_string(v) {
            Ok(y) => ("application/yaml", y.into_bytes()),
            Err(_) => ("application/json", serde_json::to_vec(v).unwrap_or_default()),
        },
        Output::AggregatedDiscovery { v2beta1 } => (
            if v2beta1 {
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            } else {
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            },
            serde_json::to_vec(v).unwrap_or_default(),
        ),
        _ => ("application/json", serde_json::to_vec(v).unwrap_or_default()),
    };
    let mut resp = Response::new(full(bytes));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    for w in warnings {
        let text = format!("299 - {}", serde_json::to_string(w).unwrap_or_default());
        if let Ok(h) = HeaderValue::from_str(&text) {
            resp.headers_mut().append(header::WARNING, h);
        }
    }
    resp
}

pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.to_status(), Output::Json, &[]);
    if let Some(s) = e.retry_after
        && let Ok(h) = HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, h);
    }
    r
}

/// The plain-text 404 of paths no handler serves (Go's http.NotFound).
fn page_not_found() -> Response<Body> {
    let mut r = Response::new(full("404 page not found\n"));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    r
}

/// Answer a ready Status body with its own code.
fn status_body_response(body: &Value) -> Response<Body> {
    let code = body.get("code").and_then(Value::as_u64).unwrap_or(500) as u16;
    json_response(code, body, Output::Json, &[])
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Serve one request. Never fails: errors become `Status` responses. The pods' `log`, `exec`
/// and `portforward` are answered by the node's process runtime `rt`, as the apiserver hands
/// them to the kubelet.
pub async fn handle(cl: Arc<Cluster>, rt: Arc<Runtime>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let uri = req.uri().clone();
    let resp = match serve(cl, &rt, req).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    tracing::debug!(%method, %uri, status = resp.status().as_u16(), elapsed_us = started.elapsed().as_micros() as u64, "request");
    Ok(resp)
}

async fn read_body(body: Incoming) -> ApiResult<Bytes> {
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                Err(ApiError::too_large())
            } else {
                Err(ApiError::bad_request(format!("reading the request body: {e}")))
            }
        }
    }
}

async fn serve(cl: Arc<Cluster>, rt: &Runtime, req: Request<Incoming>) -> ApiResult<Response<Body>> {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = Query::parse(parts.uri.query());
    let accept = header_str(&parts.headers, header::ACCEPT).map(str::to_string);
    match path.as_str() {
        "/healthz" | "/readyz" | "/livez" => {
            let mut r = Response::new(full("ok"));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            return Ok(r);
        }
        "/version" | "/version/" => return Ok(json_response(200, &crate::discovery::version(), Output::Json, &[])),
        _ => {}
    }
    let peer_cert = parts.extensions.get::<PeerCertificate>().map(|c| c.0.as_slice());
    let requester = crate::auth::authenticate(&cl, header_str(&parts.headers, header::AUTHORIZATION), peer_cert)?;
    let impersonation: Vec<(String, String)> = parts
        .headers
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("impersonate-"))
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let user = match crate::auth::impersonate(&cl, requester, &impersonation) {
        Ok(u) => u,
        Err(crate::auth::rbac::ImpersonationError::Forbidden(body)) => return Ok(status_body_response(&body)),
        Err(crate::auth::rbac::ImpersonationError::Malformed(msg)) => {
            let mut r = Response::new(full(crate::auth::rbac::internal_error_body(&parts.uri.to_string(), &msg)));
            *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            return Ok(r);
        }
    };
    // Non-resource requests (discovery, OpenAPI) are authorized by path.
    if !matches!(request::parse_path(&path), PathKind::Resource(_)) {
        let attrs = Attributes {
            user: user.clone(),
            verb: crate::auth::rbac::non_resource_verb(parts.method.as_str()),
            path: path.clone(),
            resource_request: false,
            ..Default::default()
        };
        if let Err(body) = crate::auth::authorize(&cl, &attrs) {
            return Ok(status_body_response(&body));
        }
    }
    if let Some(gv) = path.strip_prefix("/openapi/v3/") {
        let doc = crate::openapi::document(&cl.registry, gv.trim_end_matches('/'))?;
        return Ok(json_response(200, &doc, Output::Json, &[]));
    }
    if path == "/openapi/v3" || path == "/openapi/v3/" {
        return Ok(json_response(200, &crate::openapi::index(&cl.registry), Output::Json, &[]));
    }
    match request::parse_path(&path) {
        PathKind::Discovery { group: Some(g), version, .. }
            if !cl
                .registry
                .groups()
                .iter()
                .any(|x| x.name == g && version.as_ref().is_none_or(|v| x.versions.contains(v))) =>
        {
            Ok(page_not_found())
        }
        PathKind::Discovery { group: None, version: Some(v), legacy_core: true } if v != "v1" => Ok(page_not_found()),
        PathKind::Discovery { group, version, legacy_core } => {
            let output = request::negotiate(accept.as_deref(), true)?;
            if parts.method != Method::GET {
                return Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ));
            }
            let v = match (legacy_core, group.as_deref(), version.as_deref(), output) {
                (true, None, None, Output::AggregatedDiscovery { v2beta1 }) => {
                    crate::discovery::aggregated(&cl.registry, true, v2beta1)
                }
                (false, None, None, Output::AggregatedDiscovery { v2beta1 }) => {
                    crate::discovery::aggregated(&cl.registry, false, v2beta1)
                }
                (true, None, None, _) => crate::discovery::api_versions(&cl.server_url().replace("https://", "")),
                (false, None, None, _) => crate::discovery::api_group_list(&cl.registry),
                (true, None, Some(v), _) => crate::discovery::resource_list(&cl.registry, "", v)?,
                (false, Some(g), None, _) => crate::discovery::api_group(&cl.registry, g)?,
                (false, Some(g), Some(v), _) => crate::discovery::resource_list(&cl.registry, g, v)?,
                _ => return Err(ApiError::not_found_path()),
            };
            let out = match output {
                Output::AggregatedDiscovery { .. } if group.is_none() && version.is_none() => output,
                Output::Yaml => Output::Yaml,
                _ => Output::Json,
            };
            Ok(json_response(200, &v, out, &[]))
        }
        PathKind::Resource(rp) if cl.registry.group_version(&rp.group, &rp.version).is_empty() => Ok(page_not_found()),
        PathKind::Resource(rp) => {
            let headers = parts.headers.clone();
            // pods/exec and pods/portforward answer with a WebSocket upgrade.
            let stream = Upgrade {
                on: parts.extensions.remove::<hyper::upgrade::OnUpgrade>(),
                query: parts.uri.query().map(str::to_string),
            };
            resource(cl, rt, parts.method, rp, query, &headers, accept.as_deref(), body, &user, stream).await
        }
        PathKind::Other(_) => Ok(page_not_found()),
    }
}

/// What a streaming subresource (exec, port-forward) needs of the raw request.
struct Upgrade {
    on: Option<hyper::upgrade::OnUpgrade>,
    query: Option<String>,
}

fn field_manager(q: &Query, headers: &HeaderMap) -> String {
    crate::patch::apply::manager_or_user_agent(
        q.get("fieldManager").unwrap_or(""),
        header_str(headers, header::USER_AGENT).unwrap_or(""),
    )
}

/// Decode a create/update body: JSON, YAML, or Kubernetes protobuf (what kubectl's typed
/// clients send for built-in kinds).
fn decode_object(def: &ResourceDef, headers: &HeaderMap, bytes: &[u8]) -> ApiResult<Value> {
    let ct = header_str(headers, header::CONTENT_TYPE);
    match request::body_format(ct)? {
        BodyFormat::Json => request::decode_object(bytes, false, &def.kind),
        BodyFormat::Yaml => request::decode_object(bytes, true, &def.kind),
        BodyFormat::Protobuf => {
            crate::protobuf::decode_with_defaults(bytes, &def.api_version(), &def.kind).map_err(|e| {
                if e.is_unsupported() {
                    ApiError::unsupported_media_type(ct.unwrap_or("")).with_message(format!("{e}"))
                } else {
                    ApiError::bad_request(e.to_string())
                }
            })
        }
        _ => Err(ApiError::unsupported_media_type(ct.unwrap_or(""))),
    }
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    cl: Arc<Cluster>,
    rt: &Runtime,
    method: Method,
    rp: ResourcePath,
    q: Query,
    headers: &HeaderMap,
    accept: Option<&str>,
    body: Incoming,
    user: &UserInfo,
    stream: Upgrade,
) -> ApiResult<Response<Body>> {
    // Authorize first: a user who may not know a resource exists gets 403, not 404.
    let is_watch_req = rp.legacy_watch || q.get("watch").is_some_and(crate::auth::rbac::watch_param);
    let mut attrs = Attributes {
        user: user.clone(),
        verb: if rp.legacy_watch {
            "watch"
        } else {
            crate::auth::rbac::verb_for(method.as_str(), rp.name.is_some(), is_watch_req)
        }
        .to_string(),
        namespace: rp.namespace.clone().unwrap_or_default(),
        api_group: rp.group.clone(),
        api_version: rp.version.clone(),
        resource: rp.resource.clone(),
        subresource: rp.subresource.clone().unwrap_or_default(),
        name: rp.name.clone().unwrap_or_default(),
        resource_request: true,
        path: String::new(),
    };
    // A WebSocket GET of exec, attach or port-forward needs `create`, as upstream's
    // AuthorizePodWebsocketUpgradeCreatePermission (on by default since 1.31) requires.
    if rp.group.is_empty()
        && rp.resource == "pods"
        && matches!(rp.subresource.as_deref(), Some("exec" | "attach" | "portforward"))
    {
        attrs.verb = "create".to_string();
    }
    if attrs.name.is_empty()
        && let Some(fs) = q.get("fieldSelector")
        && let Ok(sel) = crate::selector::FieldSelector::parse(fs)
        && let Some(r) =
            sel.requirements().iter().find(|r| r.field == "metadata.name" && r.op == crate::selector::FieldOp::Equals)
    {
        attrs.name = r.value.clone();
    }
    if let Err(body) = crate::auth::authorize(&cl, &attrs) {
        return Ok(status_body_response(&body));
    }
    let def = cl.registry.get(&rp.group, &rp.version, &rp.resource).ok_or_else(ApiError::not_found_path)?;
    // plugin/pkg/admission/certificates/approval: approving or denying a request needs `approve`
    // on its signer (`signers`, named by signerName or `<domain>/*`).
    if def.group == "certificates.k8s.io"
        && def.plural == "certificatesigningrequests"
        && rp.subresource.as_deref() == Some("approval")
        && matches!(method, Method::PUT | Method::PATCH)
        && let Some(name) = rp.name.as_deref()
        && let Some(cur) = cl.store.get(&def.storage, "", name)
    {
        let signer = cur.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("").to_string();
        let domain = signer.split('/').next().unwrap_or("").to_string();
        let may = |n: String| {
            let a = Attributes {
                verb: "approve".into(),
                api_group: "certificates.k8s.io".into(),
                api_version: "*".into(),
                resource: "signers".into(),
                subresource: String::new(),
                namespace: String::new(),
                name: n,
                ..attrs.clone()
            };
            crate::auth::authorize(&cl, &a).is_ok()
        };
        if !may(signer.clone()) && !may(format!("{domain}/*")) {
            return Err(ApiError::forbidden(
                &def.group,
                &def.plural,
                name,
                &format!("user not permitted to approve requests with signerName {signer:?}"),
            ));
        }
    }
    // Read-only resources (ComponentStatus) answer reads only.
    if !def.review && !def.verbs.contains(&"create") && method != Method::GET {
        return Err(ApiError::method_not_allowed("the server does not allow this method on the requested resource"));
    }
    if def.review {
        if method != Method::POST || rp.name.is_some() {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        let bytes = read_body(body).await?;
        let obj = decode_object(&def, headers, &bytes)?;
        let ns = rp.namespace.clone().unwrap_or_default();
        let answer = crate::auth::review(&cl, user, &def.group, &def.plural, &ns, obj)?;
        return Ok(json_response(201, &answer, Output::Json, &[]));
    }
    if def.group.is_empty()
        && def.plural == "serviceaccounts"
        && rp.subresource.as_deref() == Some("token")
        && method == Method::POST
    {
        let (Some(ns), Some(name)) = (rp.namespace.as_deref(), rp.name.as_deref()) else {
            return Err(ApiError::not_found_path());
        };
        let bytes = read_body(body).await?;
        let req = if bytes.iter().all(u8::is_ascii_whitespace) {
            serde_json::json!({})
        } else {
            match request::body_format(header_str(headers, header::CONTENT_TYPE))? {
                BodyFormat::Protobuf => {
                    crate::protobuf::decode_with_defaults(&bytes, "authentication.k8s.io/v1", "TokenRequest")
                        .map_err(|e| ApiError::bad_request(e.to_string()))?
                }
                BodyFormat::Yaml => request::decode_body(&bytes, true)?,
                _ => request::decode_body(&bytes, false)?,
            }
        };
        let answer = crate::auth::token_request(&cl, ns, name, &req)?;
        return Ok(json_response(201, &answer, Output::Json, &[]));
    }
    if def.group.is_empty() && def.plural == "pods" {
        match (rp.namespace.as_deref(), rp.name.as_deref(), rp.subresource.as_deref()) {
            (Some(ns), Some(name), Some("log")) if method == Method::GET => {
                return crate::runtime::logs::serve(&cl, rt, ns, name, &q);
            }
            (Some(ns), Some(name), Some(sub @ ("exec" | "portforward")))
                if matches!(method, Method::GET | Method::POST) =>
            {
                return crate::runtime::stream::serve(
                    &cl,
                    rt,
                    crate::runtime::stream::StreamRequest {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        subresource: sub.to_string(),
                        raw_query: stream.query,
                        headers: headers.clone(),
                        on_upgrade: stream.on,
                    },
                );
            }
            (Some(ns), Some(name), Some("eviction")) if method == Method::POST => {
                let bytes = read_body(body).await?;
                let ct = header_str(headers, header::CONTENT_TYPE);
                let (code, answer) = crate::eviction::serve(&cl, ns, name, &q, ct, &bytes, user)?;
                return Ok(json_response(code, &answer, Output::Json, &[]));
            }
            (_, _, Some("log" | "exec" | "portforward" | "eviction")) => {
                return Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ));
            }
            _ => {}
        }
    }
    crate::hooks::check_subresource(&def, rp.subresource.as_deref())?;
    let output = request::negotiate(accept, false)?;
    // Cluster-scoped resources take no namespace, except /api/v1/namespaces/{name}.
    let ns: Option<String> = if def.namespaced {
        rp.namespace.clone()
    } else {
        if rp.namespace.is_some() && !(def.group.is_empty() && def.plural == "namespaces") {
            return Err(ApiError::not_found_path());
        }
        None
    };
    let name = rp.name.clone();
    let ns_str = ns.clone().unwrap_or_default();
    let need_ns = || -> ApiResult<()> {
        if def.namespaced && ns.is_none() {
            return Err(ApiError::not_found_path());
        }
        Ok(())
    };
    let is_watch = rp.legacy_watch || q.flag("watch")?;
    let write_opts = || -> ApiResult<WriteOpts> {
        Ok(WriteOpts {
            dry_run: q.dry_run()?,
            field_manager: field_manager(&q, headers),
            field_validation: FieldValidation::parse(q.get("fieldValidation"))?,
            subresource: rp.subresource.clone(),
            force: q.flag("force")?,
            is_apply: false,
            trusted: false,
            create_denied: None,
            user: Some(user.clone()),
        })
    };
    // An update or patch may create the object (PUT where the kind allows it, an apply): that
    // needs `create` too, decided now with the request's attributes.
    let create_denied = if matches!(method, Method::PUT | Method::PATCH) && rp.subresource.is_none() {
        crate::auth::create_denied(&cl, &attrs)
    } else {
        None
    };
    let write_opts =
        || -> ApiResult<WriteOpts> { Ok(WriteOpts { create_denied: create_denied.clone(), ..write_opts()? }) };
    match (method, name) {
        (Method::GET, None) if is_watch => {
            let list_opts = ListOpts::parse(&def, q.get("labelSelector"), q.get("fieldSelector"))?;
            watch_response(cl, def, ns, &q, list_opts, output)
        }
        (Method::GET, None) => {
            if let Some(m) = q.get("resourceVersionMatch") {
                let rv = q.get("resourceVersion");
                let err = match (m, rv) {
                    ("Exact", Some("0")) => {
                        Some("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".to_string())
                    }
                    ("Exact" | "NotOlderThan", None) => {
                        Some("resourceVersionMatch is forbidden unless resourceVersion is provided".to_string())
                    }
                    ("Exact" | "NotOlderThan", _) => None,
                    (other, _) => Some(format!(
                        "{other:?} is not a valid resourceVersionMatch: supported values: \"Exact\", \"NotOlderThan\""
                    )),
                };
                if let Some(e) = err {
                    return Err(ApiError::invalid(
                        "meta.k8s.io",
                        "ListOptions",
                        "",
                        &[crate::field::FieldError::forbidden("resourceVersionMatch", e)],
                    ));
                }
            }
            let mut list_opts = ListOpts::parse(&def, q.get("labelSelector"), q.get("fieldSelector"))?;
            list_opts.limit = q.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
            list_opts.continue_token = q.get("continue").map(str::to_string);
            if output == Output::Json {
                let page = ops::list_stored(&cl, &def, ns.as_deref(), &list_opts)?;
                if let Some(body) = ops::list_json(&def, &page) {
                    let mut resp = Response::new(full(body));
                    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    return Ok(resp);
                }
            }
            let r = ops::list(&cl, &def, ns.as_deref(), &list_opts)?;
            let v = match output {
                Output::Table => {
                    let mut md = serde_json::Map::new();
                    md.insert("resourceVersion".into(), r.resource_version.to_string().into());
                    if let Some(c) = &r.continue_token {
                        md.insert("continue".into(), c.clone().into());
                    }
                    crate::table::to_table(&def, &r.items, true, Some(Value::Object(md)))
                }
                Output::PartialObjectMetadataList | Output::PartialObjectMetadata => {
                    let mut md = serde_json::Map::new();
                    md.insert("resourceVersion".into(), r.resource_version.to_string().into());
                    if let Some(c) = &r.continue_token {
                        md.insert("continue".into(), c.clone().into());
                    }
                    crate::table::partial_metadata_list(&r.items, Value::Object(md))
                }
                _ => ops::list_object(&def, r),
            };
            Ok(json_response(200, &v, output, &[]))
        }
        (Method::GET, Some(name)) => {
            need_ns()?;
            let obj = match rp.subresource.as_deref() {
                Some("scale") => crate::scale::get(&cl, &def, &ns_str, &name)?,
                _ => ops::get(&cl, &def, &ns_str, &name)?,
            };
            Ok(json_response(200, &render_one(&def, obj, output), output, &[]))
        }
        (Method::POST, None) => {
            need_ns()?;
            let bytes = read_body(body).await?;
            let obj = decode_object(&def, headers, &bytes)?;
            let w = ops::create(&cl, &def, &ns_str, obj, &write_opts()?)?;
            Ok(json_response(201, &render_one(&def, w.object, output), output, &w.warnings))
        }
        (Method::PUT, Some(name)) => {
            need_ns()?;
            let bytes = read_body(body).await?;
            // The scale subresource is its own storage over the parent (upstream's ScaleREST).
            let w = if rp.subresource.as_deref() == Some("scale") {
                let obj = decode_scale(headers, &bytes)?;
                crate::scale::update(&cl, &def, &ns_str, &name, obj, &write_opts()?)?
            } else {
                let obj = decode_object(&def, headers, &bytes)?;
                ops::update(&cl, &def, &ns_str, &name, obj, &write_opts()?)?
            };
            Ok(json_response(
                if w.created { 201 } else { 200 },
                &render_one(&def, w.object, output),
                output,
                &w.warnings,
            ))
        }
        (Method::PATCH, Some(name)) => {
            need_ns()?;
            let bytes = read_body(body).await?;
            let format = request::body_format(header_str(headers, header::CONTENT_TYPE))?;
            let w = if rp.subresource.as_deref() == Some("scale") {
                crate::scale::patch(&cl, &def, &ns_str, &name, format, &bytes, &write_opts()?)?
            } else {
                ops::patch(&cl, &def, &ns_str, &name, format, &bytes, &write_opts()?)?
            };
            Ok(json_response(
                if w.created { 201 } else { 200 },
                &render_one(&def, w.object, output),
                output,
                &w.warnings,
            ))
        }
        (Method::DELETE, Some(name)) => {
            need_ns()?;
            let bytes = read_body(body).await?;
            let opts = DeleteOpts { user: Some(user.clone()), ..delete_opts(&q, headers, &bytes)? };
            let d = ops::delete(&cl, &def, &ns_str, &name, &opts)?;
            // An object that stays (finalizers, grace) is answered; one that is gone answers
            // itself or a Success Status naming it, per registry (registry.Store.finalizeDelete).
            let code = ops::delete_status_code(&d, &opts);
            let v = if !d.finished || def.return_deleted_object {
                d.object
            } else {
                let (group, kind) = (def.group.clone(), def.plural.clone());
                crate::errors::success_status(&name, &group, &kind, crate::meta::uid(&d.object))
            };
            Ok(json_response(code, &v, Output::Json, &d.warnings))
        }
        (Method::DELETE, None) => {
            let bytes = read_body(body).await?;
            let opts = DeleteOpts { user: Some(user.clone()), ..delete_opts(&q, headers, &bytes)? };
            let list_opts = ListOpts::parse(&def, q.get("labelSelector"), q.get("fieldSelector"))?;
            let r = ops::delete_collection(&cl, &def, ns.as_deref(), &list_opts, &opts)?;
            Ok(json_response(200, &ops::list_object(&def, r), Output::Json, &[]))
        }
        (Method::POST, Some(name)) if rp.subresource.as_deref() == Some("binding") => {
            need_ns()?;
            let bytes = read_body(body).await?;
            let binding = request::decode_body(&bytes, false)?;
            let node = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or("").to_string();
            ops::bind(&cl, &def, &ns_str, &name, &node)?;
            Ok(json_response(201, &crate::errors::success_status("", "", "", ""), Output::Json, &[]))
        }
        (Method::POST, Some(_)) | (Method::PUT, None) | (Method::PATCH, None) | (_, _) => {
            Err(ApiError::method_not_allowed("the server does not allow this method on the requested resource"))
        }
    }
}

fn decode_scale(headers: &HeaderMap, bytes: &[u8]) -> ApiResult<Value> {
    match request::body_format(header_str(headers, header::CONTENT_TYPE))? {
        BodyFormat::Protobuf => crate::protobuf::decode_with_defaults(bytes, "autoscaling/v1", "Scale")
            .map_err(|e| ApiError::bad_request(e.to_string())),
        BodyFormat::Yaml => request::decode_body(bytes, true),
        _ => request::decode_body(bytes, false),
    }
}

fn delete_opts(q: &Query, headers: &HeaderMap, body: &[u8]) -> ApiResult<DeleteOpts> {
    let body_v = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else if request::body_format(header_str(headers, header::CONTENT_TYPE)).ok() == Some(BodyFormat::Protobuf) {
        Some(
            crate::protobuf::decode_with_defaults(body, "meta.k8s.io/v1", "DeleteOptions")
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
        )
    } else {
        Some(request::decode_body(body, false)?)
    };
    let mut opts = DeleteOpts::from_body(body_v.as_ref())?;
    if let Some(p) = q.get("propagationPolicy") {
        opts.propagation_policy = Some(p.to_string());
    }
    if q.get("orphanDependents").is_some() && opts.propagation_policy.is_none() {
        opts.propagation_policy = Some(if q.flag("orphanDependents")? { "Orphan" } else { "Background" }.into());
    }
    if let Some(g) = q.int("gracePeriodSeconds")? {
        opts.grace_period_seconds = Some(g);
    }
    opts.dry_run = opts.dry_run || q.dry_run()?;
    Ok(opts)
}

fn render_one(def: &ResourceDef, obj: Value, output: Output) -> Value {
    match output {
        Output::Table => {
            let rv = obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
            crate::table::to_table(
                def,
                std::slice::from_ref(&obj),
                true,
                Some(serde_json::json!({"resourceVersion": rv})),
            )
        }
        Output::PartialObjectMetadata | Output::PartialObjectMetadataList => crate::table::partial_metadata(&obj),
        _ => obj,
    }
}

fn watch_response(
    cl: Arc<Cluster>,
    def: Arc<ResourceDef>,
    ns: Option<String>,
    q: &Query,
    list_opts: ListOpts,
    output: Output,
) -> ApiResult<Response<Body>> {
    let send_initial = match q.get("sendInitialEvents") {
        Some(_) => Some(q.flag("sendInitialEvents")?),
        None => None,
    };
    let allow_bookmarks = q.flag("allowWatchBookmarks")?;
    let rv_param = q.get("resourceVersion");
    // ValidateListOptions for watches.
    match (send_initial, q.get("resourceVersionMatch")) {
        (Some(_), m) if m != Some("NotOlderThan") => {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                &[crate::field::FieldError::forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                )],
            ));
        }
        (None, Some(_)) => {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                &[crate::field::FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                )],
            ));
        }
        _ => {}
    }
    let start = match (send_initial, rv_param) {
        (Some(true), _) => Start::InitialState,
        (Some(false), None) => Start::After(cl.store.current_rv()),
        (None, None) | (None, Some("0")) | (Some(false), Some("0")) => Start::InitialState,
        (_, Some(rv)) => Start::After(rv.parse().map_err(|_| {
            ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                &[crate::field::FieldError::invalid("resourceVersion", rv, "must be a valid resource version")],
            )
        })?),
    };
    let timeout = q
        .int("timeoutSeconds")?
        .filter(|t| *t > 0)
        .map(|t| Duration::from_secs(t as u64))
        .unwrap_or(Duration::from_secs(1800));
    let params = WatchParams {
        start,
        // The end of the initial events is marked only for clients that take bookmarks.
        send_initial_events: send_initial == Some(true) && allow_bookmarks,
        allow_bookmarks,
        timeout,
        namespace: ns,
        list_opts,
        output,
    };
    let rx = watch::start(cl, def, params);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::io::Error>(Frame::data(b)), rx))
    });
    let mut resp = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    let _ = json!({});
    Ok(resp)
}
