//! Authentication and authorization, as the apiserver's filter chain does them:
//! - who: the admin bearer token (user `admin`, group `system:masters`), service-account
//!   tokens (from TokenRequest: `system:serviceaccount:<ns>:<name>`), and anonymous requests
//!   (`system:anonymous`); a token that does not verify is 401;
//! - impersonation headers (`kubectl --as`), each checked with the `impersonate` verb;
//! - RBAC: Roles, ClusterRoles and their bindings decide, `system:masters` always may; a denial
//!   is 403 with the real message.
//!
//! Service-account tokens are JWTs signed with HMAC-SHA256 by a per-cluster key (kept in the data
//! directory): clients treat them as opaque, as they do the RS256 tokens of a real cluster.

pub mod rbac;

use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult};
use crate::meta;
use crate::registry::GroupResource;
use base64::Engine;
use rbac::{Attributes, Decision, Policy, UserInfo};
use serde_json::{Value, json};

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

/// The admin user of the kubeconfig.
pub fn admin() -> UserInfo {
    UserInfo::new("admin", &[rbac::SYSTEM_MASTERS, rbac::ALL_AUTHENTICATED])
}

pub fn anonymous() -> UserInfo {
    UserInfo::new(rbac::ANONYMOUS, &[rbac::ALL_UNAUTHENTICATED])
}

/// Issue a token for a service account (what TokenRequest returns). `expiration_seconds`
/// is clamped to [600, 2^32) as upstream requires at least 10 minutes.
pub fn issue_token(
    cl: &Cluster,
    ns: &str,
    sa: &str,
    sa_uid: &str,
    audiences: &[String],
    expiration_seconds: i64,
) -> (String, i64) {
    let now = jiff::Timestamp::now().as_second();
    let exp = now + expiration_seconds.max(600);
    let aud: Vec<String> = if audiences.is_empty() { vec![ISSUER.to_string()] } else { audiences.to_vec() };
    let header = json!({"alg": "HS256", "kid": "devcluster", "typ": "JWT"});
    let claims = json!({
        "aud": aud, "exp": exp, "iat": now, "nbf": now, "iss": ISSUER, "jti": meta::new_uid(),
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": sa, "uid": sa_uid}},
        "sub": rbac::service_account_username(ns, sa),
    });
    let signing_input = format!(
        "{}.{}",
        b64(&serde_json::to_vec(&header).unwrap_or_default()),
        b64(&serde_json::to_vec(&claims).unwrap_or_default())
    );
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &cl.creds.sa_key);
    let sig = ring::hmac::sign(&key, signing_input.as_bytes());
    (format!("{signing_input}.{}", b64(sig.as_ref())), exp)
}

/// The user of a service-account token, if it verifies, has not expired, and its service
/// account still exists with the same uid.
fn verify_sa_token(cl: &Cluster, token: &str) -> Option<UserInfo> {
    let mut parts = token.split('.');
    let (h, c, s) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).ok()?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &cl.creds.sa_key);
    ring::hmac::verify(&key, format!("{h}.{c}").as_bytes(), &sig).ok()?;
    let claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(c).ok()?).ok()?;
    if claims.get("exp").and_then(Value::as_i64)? <= jiff::Timestamp::now().as_second() {
        return None;
    }
    let ns = claims.pointer("/kubernetes.io/namespace")?.as_str()?;
    let name = claims.pointer("/kubernetes.io/serviceaccount/name")?.as_str()?;
    let uid = claims.pointer("/kubernetes.io/serviceaccount/uid")?.as_str()?;
    let sa = cl.store.get(&GroupResource::new("", "serviceaccounts"), ns, name)?;
    if meta::uid(&sa) != uid {
        return None;
    }
    let mut groups = rbac::service_account_groups(ns);
    if !groups.iter().any(|g| g == rbac::ALL_AUTHENTICATED) {
        groups.push(rbac::ALL_AUTHENTICATED.to_string());
    }
    let mut extra = std::collections::BTreeMap::new();
    if let Some(jti) = claims.get("jti").and_then(Value::as_str) {
        extra.insert("authentication.kubernetes.io/credential-id".to_string(), vec![format!("JTI={jti}")]);
    }
    Some(UserInfo { name: rbac::service_account_username(ns, name), uid: uid.to_string(), groups, extra })
}

/// The user a client certificate names (CN the user, O the groups, plus
/// `system:authenticated`), with the credential id the apiserver records
/// (`X509SHA256=<hex>`).
fn cert_user(id: crate::tls::ClientIdentity) -> UserInfo {
    let mut groups = id.groups;
    if !groups.iter().any(|g| g == rbac::ALL_AUTHENTICATED) {
        groups.push(rbac::ALL_AUTHENTICATED.to_string());
    }
    let mut extra = std::collections::BTreeMap::new();
    extra.insert(
        "authentication.kubernetes.io/credential-id".to_string(),
        vec![format!("X509SHA256={}", id.fingerprint)],
    );
    UserInfo { name: id.user, uid: String::new(), groups, extra }
}

/// Who a request is, as the apiserver's union of authenticators decides: a client certificate
/// signed by the cluster CA first, then the bearer token; anonymous with neither. Err(401) when
/// a credential was presented and none verified (an untrusted certificate with a good token
/// authenticates by the token, as upstream).
pub fn authenticate(cl: &Cluster, authorization: Option<&str>, client_cert: Option<&[u8]>) -> ApiResult<UserInfo> {
    let cert_error = match client_cert.map(|der| cl.creds.verify_client_cert(der)) {
        Some(Ok(id)) => return Ok(cert_user(id)),
        Some(Err(e)) => {
            tracing::debug!(error = %e, "client certificate not accepted");
            true
        }
        None => false,
    };
    let Some(auth) = authorization else {
        return if cert_error { Err(ApiError::unauthorized()) } else { Ok(anonymous()) };
    };
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(ApiError::unauthorized)?;
    if constant_time_eq(token.as_bytes(), cl.creds.admin_token.as_bytes()) {
        return Ok(admin());
    }
    verify_sa_token(cl, token).ok_or_else(ApiError::unauthorized)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The RBAC objects in force.
pub struct PolicySnapshot {
    cluster_roles: Vec<std::sync::Arc<Value>>,
    cluster_role_bindings: Vec<std::sync::Arc<Value>>,
    roles: Vec<std::sync::Arc<Value>>,
    role_bindings: Vec<std::sync::Arc<Value>>,
}

impl PolicySnapshot {
    pub fn read(cl: &Cluster) -> Self {
        // The stored objects are shared, not copied: every request of a non-admin user reads
        // the whole policy.
        let list = |r: &str| cl.store.list(&GroupResource::new("rbac.authorization.k8s.io", r), None).0;
        PolicySnapshot {
            cluster_roles: list("clusterroles"),
            cluster_role_bindings: list("clusterrolebindings"),
            roles: list("roles"),
            role_bindings: list("rolebindings"),
        }
    }

    pub fn policy(&self) -> Policy<'_> {
        Policy {
            cluster_roles: &self.cluster_roles,
            cluster_role_bindings: &self.cluster_role_bindings,
            roles: &self.roles,
            role_bindings: &self.role_bindings,
        }
    }
}

/// Authorize a request; Err(403 Status body) when denied.
pub fn authorize(cl: &Cluster, attrs: &Attributes) -> Result<(), Value> {
    if rbac::privileged(&attrs.user) {
        return Ok(());
    }
    let snap = PolicySnapshot::read(cl);
    match rbac::authorize_chain(attrs, &snap.policy()) {
        Decision::Allow { .. } => Ok(()),
        d => Err(rbac::forbidden_status(attrs, d.reason())),
    }
}

/// Whether `attrs` may also `create`: an update or apply that would create the object needs it
/// (apiserver handlers/update.go and patch.go authorize the create with the same attributes and
/// verb `create`). The 403 to answer when not.
pub fn create_denied(cl: &Cluster, attrs: &Attributes) -> Option<crate::errors::ApiError> {
    if rbac::privileged(&attrs.user) {
        return None;
    }
    let create = Attributes { verb: "create".into(), ..attrs.clone() };
    let snap = PolicySnapshot::read(cl);
    match rbac::authorize_chain(&create, &snap.policy()) {
        Decision::Allow { .. } => None,
        d => Some(crate::errors::ApiError::forbidden_message(
            &create.api_group,
            &create.resource,
            &create.name,
            rbac::forbidden_status_message(&create, d.reason()),
        )),
    }
}

/// Apply impersonation headers: Ok(the user to act as), or the error response.
pub fn impersonate(
    cl: &Cluster,
    requester: UserInfo,
    headers: &[(String, String)],
) -> Result<UserInfo, rbac::ImpersonationError> {
    if !headers.iter().any(|(k, _)| k.to_ascii_lowercase().starts_with("impersonate-")) {
        return Ok(requester);
    }
    let snap = PolicySnapshot::read(cl);
    Ok(rbac::authorize_impersonation(&requester, headers, &snap.policy())?.unwrap_or(requester))
}

/// The reviews served by the authorization.k8s.io and authentication.k8s.io groups: nothing
/// is stored; the answer is the request with its status filled in.
pub fn review(
    cl: &Cluster,
    user: &UserInfo,
    group: &str,
    resource: &str,
    ns: &str,
    mut body: Value,
) -> ApiResult<Value> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let snap = PolicySnapshot::read(cl);
    let status = match (group, resource) {
        ("authorization.k8s.io", "selfsubjectaccessreviews") => {
            let attrs = rbac::access_review_attributes(user, &spec);
            rbac::access_review_status(&rbac::authorize_chain(&attrs, &snap.policy()))
        }
        ("authorization.k8s.io", "subjectaccessreviews") | ("authorization.k8s.io", "localsubjectaccessreviews") => {
            let subject = rbac::access_review_user(&spec);
            let mut attrs = rbac::access_review_attributes(&subject, &spec);
            if resource == "localsubjectaccessreviews" {
                attrs.namespace = ns.to_string();
            }
            rbac::access_review_status(&rbac::authorize_chain(&attrs, &snap.policy()))
        }
        ("authorization.k8s.io", "selfsubjectrulesreviews") => {
            let namespace = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            rbac::self_subject_rules_review_status(user, namespace, &snap.policy()).map_err(ApiError::bad_request)?
        }
        ("authentication.k8s.io", "selfsubjectreviews") => json!({"userInfo": user_json(user)}),
        ("authentication.k8s.io", "tokenreviews") => token_review_status(cl, &spec),
        _ => return Err(ApiError::not_found_path()),
    };
    if let Some(m) = body.as_object_mut() {
        m.insert("status".into(), status);
        let md = m.entry("metadata").or_insert_with(|| json!({}));
        if let Some(mm) = md.as_object_mut() {
            mm.insert("creationTimestamp".into(), Value::Null);
        }
    }
    Ok(body)
}

/// The audiences a service-account token was issued for (`aud`, a list or one string), if it
/// verifies.
fn sa_token_audiences(cl: &Cluster, token: &str) -> Option<(UserInfo, Vec<String>)> {
    let user = verify_sa_token(cl, token)?;
    let claims = token.split('.').nth(1)?;
    let claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims).ok()?).ok()?;
    let auds = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => vec![],
    };
    Some((user, auds))
}

/// `authenticator.Audiences.Intersect`: the items of `a` that `b` has, in `a`'s order.
fn intersect(a: &[String], b: &[String]) -> Vec<String> {
    a.iter().filter(|x| b.contains(x)).cloned().collect()
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quote_list(l: &[String]) -> String {
    let items: Vec<String> = l.iter().map(|s| crate::field::go_quote(s)).collect();
    format!("[{}]", items.join(" "))
}

/// The status of a TokenReview, as pkg/registry/authentication/tokenreview/storage.go writes it:
/// the review's audiences (the server's, the issuer, when it names none) are the target; a
/// service-account token authenticates for the intersection of its own audiences with them and
/// fails with the JWT authenticator's error when there is none (pkg/serviceaccount/jwt.go); the
/// admin token is audience-agnostic (authenticator.WrapAudienceAgnosticToken: authenticated for
/// the server's audiences among the target, else not at all, without an error). `status.user`
/// is always there, as Go writes the non-pointer struct.
fn token_review_status(cl: &Cluster, spec: &Value) -> Value {
    let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
    let requested: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let server = vec![ISSUER.to_string()];
    let target = if requested.is_empty() { server.clone() } else { requested };
    let authenticated =
        |u: &UserInfo, auds: Vec<String>| json!({"authenticated": true, "user": user_json(u), "audiences": auds});
    if !token.is_empty() && constant_time_eq(token.as_bytes(), cl.creds.admin_token.as_bytes()) {
        let auds = intersect(&server, &target);
        return if auds.is_empty() { json!({"user": {}}) } else { authenticated(&admin(), auds) };
    }
    match sa_token_audiences(cl, token) {
        Some((u, token_auds)) => {
            let auds = intersect(&token_auds, &target);
            if auds.is_empty() {
                json!({"user": {}, "error": format!(
                    "token audiences {} is invalid for the target audiences {}",
                    go_quote_list(&token_auds),
                    go_quote_list(&target)
                )})
            } else {
                authenticated(&u, auds)
            }
        }
        // A JWT of this issuer that does not verify is an error; any other token is simply not
        // one an authenticator claims (the JWT authenticator skips tokens of other issuers and
        // non-JWTs: pkg/serviceaccount/jwt.go hasCorrectIssuer).
        None if claims_issuer(token).as_deref() == Some(ISSUER) => {
            json!({"user": {}, "error": "invalid bearer token"})
        }
        None => json!({"user": {}}),
    }
}

/// The `iss` claim of a token that looks like a JWT (not verified).
fn claims_issuer(token: &str) -> Option<String> {
    let mut parts = token.split('.');
    let (_, c, _) = (parts.next()?, parts.next()?, parts.next()?);
    let claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(c).ok()?).ok()?;
    claims.get("iss").and_then(Value::as_str).map(str::to_string)
}

fn user_json(u: &UserInfo) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("username".into(), u.name.clone().into());
    if !u.uid.is_empty() {
        m.insert("uid".into(), u.uid.clone().into());
    }
    m.insert("groups".into(), json!(u.groups));
    if !u.extra.is_empty() {
        m.insert("extra".into(), json!(u.extra));
    }
    Value::Object(m)
}

/// `POST .../serviceaccounts/{name}/token`: a TokenRequest answered with a token.
pub fn token_request(cl: &Cluster, ns: &str, sa_name: &str, body: &Value) -> ApiResult<Value> {
    let sa = cl
        .store
        .get(&GroupResource::new("", "serviceaccounts"), ns, sa_name)
        .ok_or_else(|| ApiError::not_found("", "serviceaccounts", sa_name))?;
    let audiences: Vec<String> = body
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let seconds = body.pointer("/spec/expirationSeconds").and_then(Value::as_i64).unwrap_or(3600);
    if seconds < 600 {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            sa_name,
            &[crate::field::FieldError::invalid(
                "spec.expirationSeconds",
                seconds,
                "may not specify a duration less than 10 minutes",
            )],
        ));
    }
    let (token, exp) = issue_token(cl, ns, sa_name, meta::uid(&sa), &audiences, seconds);
    let exp_ts =
        jiff::Timestamp::from_second(exp).map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default();
    Ok(json!({
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": sa_name, "namespace": ns, "creationTimestamp": meta::now()},
        "spec": {"audiences": if audiences.is_empty() { json!([ISSUER]) } else { json!(audiences) },
            "expirationSeconds": seconds, "boundObjectRef": body.pointer("/spec/boundObjectRef").cloned().unwrap_or(Value::Null)},
        "status": {"token": token, "expirationTimestamp": exp_ts},
    }))
}
