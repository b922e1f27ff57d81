//! The real `/usr/bin/kubectl` against what devcluster runs as a cluster: workloads (deployments,
//! replica sets, stateful sets, the simulated kubelet and scheduler), namespace lifecycle, RBAC
//! with service-account tokens, events, Pod Security admission and node cordoning. Every command's
//! exit status and the output lines a user reads are checked.
//!
//! `/usr/bin/kubectl` dispatches on the server's version: against devcluster (v1.33.0) it runs the
//! kubectl 1.33 client.

mod support;

use devcluster::DevCluster;
use support::kubectl::Kubectl;

async fn cluster() -> (DevCluster, Kubectl) {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let k = Kubectl::new(&dc);
    (dc, k)
}

/// One table as kubectl prints it: a header whose column names are separated by at least two
/// spaces (names like `LAST SEEN` hold one), rows aligned under them by tabwriter.
#[derive(Debug)]
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn parse(text: &str) -> Table {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let head = lines.next().unwrap_or_else(|| panic!("no table header in {text:?}"));
        let mut starts = vec![];
        let mut header = vec![];
        let bytes = head.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b' ' {
                i += 1;
                continue;
            }
            let start = i;
            // A name ends at two spaces in a row (or the end of the line).
            while i < bytes.len() && !(bytes[i] == b' ' && bytes.get(i + 1).is_none_or(|b| *b == b' ')) {
                i += 1;
            }
            starts.push(start);
            header.push(head[start..i].to_string());
        }
        let rows = lines
            .map(|l| {
                (0..starts.len())
                    .map(|c| {
                        let from = starts[c].min(l.len());
                        let to = if c + 1 < starts.len() { starts[c + 1].min(l.len()) } else { l.len() };
                        l.get(from..to).unwrap_or("").trim().to_string()
                    })
                    .collect()
            })
            .collect();
        Table { header, rows }
    }

    /// The sections of `kubectl get a,b,c`, separated by blank lines.
    fn sections(text: &str) -> Vec<Table> {
        text.split("\n\n").filter(|s| !s.trim().is_empty()).map(Table::parse).collect()
    }

    fn col(&self, name: &str) -> usize {
        self.header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name} in {:?}", self.header))
    }

    /// The row whose first column is `name`.
    fn row(&self, name: &str) -> &[String] {
        self.rows
            .iter()
            .find(|r| r.first().map(String::as_str) == Some(name))
            .unwrap_or_else(|| panic!("no row {name} in {self:?}"))
    }

    fn cell(&self, name: &str, col: &str) -> &str {
        &self.row(name)[self.col(col)]
    }

    fn column(&self, col: &str) -> Vec<&str> {
        let c = self.col(col);
        self.rows.iter().map(|r| r[c].as_str()).collect()
    }
}

/// `kubectl describe` output: the value of `Key:` at the start of a line (first match).
fn described<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"))
}

/// The lines of a section of `kubectl describe` (`Conditions:`, `Events:`), up to the next line
/// that is not indented.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(title));
    let first = lines.next().unwrap_or_else(|| panic!("no {title} section in:\n{text}"));
    let mut out = vec![first];
    out.extend(lines.take_while(|l| l.starts_with(' ') || l.starts_with('\t')));
    out
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Create `web` (2 replicas of nginx:1.27) and wait until it is rolled out.
fn create_web(k: &Kubectl) {
    assert_eq!(
        k.ok(&["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2"]).trim(),
        "deployment.apps/web created"
    );
    assert_eq!(
        k.ok(&["rollout", "status", "deployment/web", "--timeout=30s"]).lines().last(),
        Some("deployment \"web\" successfully rolled out")
    );
}

/// ReplicaSets of `app=web` as (name, image, revision annotation).
fn web_replica_sets(k: &Kubectl) -> Vec<(String, String, String)> {
    let out = k.ok(&[
        "get",
        "rs",
        "-l",
        "app=web",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\.kubernetes\.io/revision}{"\n"}{end}"#,
    ]);
    out.lines()
        .map(|l| {
            let w = words(l);
            assert_eq!(w.len(), 3, "{out}");
            (w[0].to_string(), w[1].to_string(), w[2].to_string())
        })
        .collect()
}

fn rs_for_image(k: &Kubectl, image: &str) -> String {
    let all = web_replica_sets(k);
    all.iter()
        .find(|(_, i, _)| i == image)
        .map(|(n, _, _)| n.clone())
        .unwrap_or_else(|| panic!("no rs for {image}: {all:?}"))
}

fn pod_names(k: &Kubectl, selector: &str) -> Vec<String> {
    k.ok(&["get", "pods", "-l", selector, "-o", "jsonpath={.items[*].metadata.name}"])
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn deployment_rolls_out_updates_and_keeps_history() {
    let (_dc, k) = cluster().await;
    // `kubectl create` sends a protobuf body (visible in its request log at -v=9).
    let (out, log) = k.ok2(&["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2", "-v=9"]);
    assert_eq!(out.trim(), "deployment.apps/web created");
    assert!(log.contains("Content-Type: application/vnd.kubernetes.protobuf"), "{log}");
    assert!(log.contains("/apis/apps/v1/namespaces/default/deployments") && log.contains("201 Created"), "{log}");
    assert_eq!(
        k.ok(&["rollout", "status", "deployment/web", "--timeout=30s"]).lines().last(),
        Some("deployment \"web\" successfully rolled out")
    );
    let old_rs = rs_for_image(&k, "nginx:1.27");
    let old_hash = old_rs.strip_prefix("web-").expect("a ReplicaSet named after its deployment").to_string();

    assert_eq!(
        k.ok(&["set", "image", "deployment/web", "nginx=nginx:1.28"]).trim(),
        "deployment.apps/web image updated"
    );
    assert_eq!(
        k.ok(&["rollout", "status", "deployment/web", "--timeout=30s"]).lines().last(),
        Some("deployment \"web\" successfully rolled out")
    );
    let new_rs = rs_for_image(&k, "nginx:1.28");
    assert_ne!(new_rs, old_rs);
    // The replaced pods go (on a real cluster after their grace period).
    k.ok(&["wait", "--for=delete", "pod", "-l", &format!("pod-template-hash={old_hash}"), "--timeout=30s"]);

    let history = k.ok(&["rollout", "history", "deployment/web"]);
    let mut lines = history.lines().filter(|l| !l.trim().is_empty());
    assert_eq!(lines.next().map(str::trim), Some("deployment.apps/web"), "{history}");
    let table = Table::parse(&lines.collect::<Vec<_>>().join("\n"));
    assert_eq!(table.header, ["REVISION", "CHANGE-CAUSE"], "{history}");
    assert_eq!(table.rows, [["1", "<none>"], ["2", "<none>"]], "{history}");
    let rev2 = k.ok(&["rollout", "history", "deployment/web", "--revision=2"]);
    assert_eq!(rev2.lines().next(), Some("deployment.apps/web with revision #2"), "{rev2}");
    assert!(rev2.lines().any(|l| words(l) == ["Image:", "nginx:1.28"]), "{rev2}");
    assert!(
        rev2.lines().any(|l| l.trim() == format!("pod-template-hash={}", new_rs.trim_start_matches("web-"))),
        "{rev2}"
    );

    // deploy,rs,pods: one section each, names with their kind.
    let out = k.ok(&["get", "deploy,rs,pods"]);
    let sections = Table::sections(&out);
    assert_eq!(sections.len(), 3, "{out}");
    let (d, rs, pods) = (&sections[0], &sections[1], &sections[2]);
    assert_eq!(d.header, ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], "{out}");
    assert_eq!(d.rows.len(), 1, "{out}");
    assert_eq!(&d.row("deployment.apps/web")[..4], ["deployment.apps/web", "2/2", "2", "2"], "{out}");
    assert_eq!(rs.header, ["NAME", "DESIRED", "CURRENT", "READY", "AGE"], "{out}");
    assert_eq!(rs.rows.len(), 2, "{out}");
    assert_eq!(&rs.row(&format!("replicaset.apps/{new_rs}"))[1..4], ["2", "2", "2"], "{out}");
    assert_eq!(&rs.row(&format!("replicaset.apps/{old_rs}"))[1..4], ["0", "0", "0"], "{out}");
    assert_eq!(pods.header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "{out}");
    assert_eq!(pods.rows.len(), 2, "{out}");
    for row in &pods.rows {
        assert!(row[0].starts_with(&format!("pod/{new_rs}-")), "{out}");
        assert_eq!(&row[1..4], ["1/1", "Running", "0"], "{out}");
    }

    // -o wide: each pod has an IP from its node's pod CIDR and the node's name.
    let out = k.ok(&["get", "pods", "-o", "wide"]);
    let wide = Table::parse(&out);
    assert_eq!(
        wide.header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
        "{out}"
    );
    assert_eq!(wide.rows.len(), 2, "{out}");
    let mut ips = vec![];
    for name in wide.column("NAME") {
        assert_eq!(wide.cell(name, "NODE"), "devcluster-node-1", "{out}");
        assert_eq!(wide.cell(name, "NOMINATED NODE"), "<none>", "{out}");
        let ip = wide.cell(name, "IP");
        let parts: Vec<u8> = ip.split('.').map(|p| p.parse().expect("an IPv4 octet")).collect();
        assert_eq!(&parts[..3], [10, 244, 0], "pod IP {ip} outside the node's podCIDR 10.244.0.0/24");
        ips.push(ip.to_string());
    }
    ips.dedup();
    assert_eq!(ips.len(), 2, "pods share an IP: {out}");
}

/// After a rollout the Deployment carries the revision of its current ReplicaSet
/// (`deployment.kubernetes.io/revision`, set by the deployment controller's `getNewReplicaSet`
/// in pkg/controller/deployment/sync.go), and `rollout undo` makes the old ReplicaSet current
/// again under the next revision number, so history lists revisions 2 and 3.
#[tokio::test]
async fn rollout_undo_restores_the_previous_template_as_a_new_revision() {
    let (_dc, k) = cluster().await;
    create_web(&k);
    let rev = r"jsonpath={.metadata.annotations.deployment\.kubernetes\.io/revision}";
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", rev]), "1");
    k.ok(&["set", "image", "deployment/web", "nginx=nginx:1.28"]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=30s"]);
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", rev]), "2");
    let describe = k.ok(&["describe", "deployment", "web"]);
    assert_eq!(described(&describe, "Annotations"), "deployment.kubernetes.io/revision: 2", "{describe}");

    assert_eq!(k.ok(&["rollout", "undo", "deployment/web"]).trim(), "deployment.apps/web rolled back");
    k.ok(&["rollout", "status", "deployment/web", "--timeout=30s"]);
    assert_eq!(
        k.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"]),
        "nginx:1.27"
    );
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", rev]), "3");
    let history = k.ok(&["rollout", "history", "deployment/web"]);
    let table = Table::parse(&history.lines().skip(1).collect::<Vec<_>>().join("\n"));
    assert_eq!(table.rows, [["2", "<none>"], ["3", "<none>"]], "{history}");
    let rev3 = k.ok(&["rollout", "history", "deployment/web", "--revision=3"]);
    assert!(rev3.lines().any(|l| words(l) == ["Image:", "nginx:1.27"]), "{rev3}");
}

#[tokio::test]
async fn deleting_a_namespace_waits_for_its_contents() {
    let (_dc, k) = cluster().await;
    assert_eq!(k.ok(&["create", "namespace", "tmp"]).trim(), "namespace/tmp created");
    assert_eq!(
        k.ok(&["-n", "tmp", "create", "configmap", "settings", "--from-literal=a=b"]).trim(),
        "configmap/settings created"
    );
    assert_eq!(
        k.ok(&["-n", "tmp", "create", "deployment", "app", "--image=nginx:1.27"]).trim(),
        "deployment.apps/app created"
    );
    k.ok(&["-n", "tmp", "rollout", "status", "deployment/app", "--timeout=30s"]);
    assert_eq!(pod_names(&k, "app=app").len(), 0, "the pods live in tmp, not default");
    assert_eq!(
        k.ok(&["-n", "tmp", "get", "pods", "-l", "app=app", "-o", "jsonpath={.items[*].status.phase}"]),
        "Running"
    );

    assert_eq!(k.ok(&["delete", "namespace", "tmp", "--wait", "--timeout=30s"]).trim(), "namespace \"tmp\" deleted");
    let err = k.fails(&["get", "namespace", "tmp"]);
    assert_eq!(err.trim(), "Error from server (NotFound): namespaces \"tmp\" not found");
    // kubectl (1.31+) looks the namespace up after a 404 and names it.
    let err = k.fails(&["-n", "tmp", "get", "configmap", "settings"]);
    assert_eq!(err.trim(), "Error from server (NotFound): namespaces \"tmp\" not found");
    // Nothing of it is left anywhere.
    let left = k.ok(&["get", "pods,rs,deploy,cm", "-A", "--field-selector", "metadata.namespace=tmp", "-o", "name"]);
    assert_eq!(left.trim(), "", "left behind: {left}");
}

#[tokio::test]
async fn auth_can_i_follows_roles_and_bindings() {
    let (_dc, k) = cluster().await;
    let robot = "system:serviceaccount:default:robot";
    assert_eq!(k.ok(&["auth", "can-i", "create", "deployments"]).trim(), "yes");
    assert_eq!(k.ok(&["create", "serviceaccount", "robot"]).trim(), "serviceaccount/robot created");
    assert_eq!(k.exit_1(&["auth", "can-i", "create", "pods", "--as", robot]).trim(), "no");

    // Both are sent as protobuf by kubectl create.
    let (out, log) = k.ok2(&["create", "role", "pod-maker", "--verb=create,get,list", "--resource=pods", "-v=9"]);
    assert_eq!(out.trim(), "role.rbac.authorization.k8s.io/pod-maker created");
    assert!(log.contains("Content-Type: application/vnd.kubernetes.protobuf"), "{log}");
    let (out, log) =
        k.ok2(&["create", "rolebinding", "robot-pods", "--role=pod-maker", "--serviceaccount=default:robot", "-v=9"]);
    assert_eq!(out.trim(), "rolebinding.rbac.authorization.k8s.io/robot-pods created");
    assert!(log.contains("Content-Type: application/vnd.kubernetes.protobuf"), "{log}");
    assert_eq!(
        k.ok(&[
            "get",
            "rolebinding",
            "robot-pods",
            "-o",
            "jsonpath={.roleRef.kind}/{.roleRef.name} {.subjects[0].kind}"
        ]),
        "Role/pod-maker ServiceAccount"
    );

    assert_eq!(k.ok(&["auth", "can-i", "create", "pods", "--as", robot]).trim(), "yes");
    assert_eq!(k.exit_1(&["auth", "can-i", "delete", "pods", "--as", robot]).trim(), "no");
    // A Role grants only in its namespace.
    assert_eq!(k.exit_1(&["auth", "can-i", "create", "pods", "-n", "kube-system", "--as", robot]).trim(), "no");

    let out = k.ok(&["auth", "can-i", "--list", "--as", robot]);
    let list = Table::parse(&out);
    assert_eq!(list.header, ["Resources", "Non-Resource URLs", "Resource Names", "Verbs"], "{out}");
    assert_eq!(list.row("pods"), ["pods", "[]", "[]", "[create get list]"], "{out}");
    // What every authenticated user may do (system:basic-user, system:discovery).
    assert_eq!(list.row("selfsubjectaccessreviews.authorization.k8s.io")[3], "[create]", "{out}");
    assert_eq!(list.row("selfsubjectrulesreviews.authorization.k8s.io")[3], "[create]", "{out}");
    assert!(list.rows.iter().any(|r| r[0].is_empty() && r[1] == "[/api]" && r[3] == "[get]"), "{out}");
    assert!(!list.rows.iter().any(|r| r[0] == "secrets"), "{out}");

    // SelfSubjectReview (authentication.k8s.io/v1).
    let out = k.ok(&["auth", "whoami"]);
    let who = Table::parse(&out);
    assert_eq!(who.header, ["ATTRIBUTE", "VALUE"], "{out}");
    assert_eq!(who.cell("Username", "VALUE"), "admin", "{out}");
    assert_eq!(who.cell("Groups", "VALUE"), "[system:masters system:authenticated]", "{out}");
    // Impersonating a service account gives it its groups (plugin/pkg/auth/.../impersonation.go:
    // serviceaccount.MakeGroupNames, then system:authenticated).
    let out = k.ok(&["auth", "whoami", "--as", robot]);
    let who = Table::parse(&out);
    assert_eq!(who.cell("Username", "VALUE"), robot, "{out}");
    assert_eq!(
        who.cell("Groups", "VALUE"),
        "[system:serviceaccounts system:serviceaccounts:default system:authenticated]",
        "{out}"
    );
}

/// A token from `kubectl create token robot` authenticates as the service account and gets
/// exactly what its bindings grant.
fn token_for_robot_that_reads_configmaps(k: &Kubectl) -> String {
    k.ok(&["create", "serviceaccount", "robot"]);
    k.ok(&["create", "role", "cm-reader", "--verb=get,list,watch", "--resource=configmaps"]);
    k.ok(&["create", "rolebinding", "robot-cm", "--role=cm-reader", "--serviceaccount=default:robot"]);
    let out = k.ok(&["create", "token", "robot"]);
    // Only the token: kubectl adds a newline only when writing to a terminal.
    let token = out.clone();
    assert!(!token.is_empty() && !token.contains(char::is_whitespace), "{out:?}");
    let segments: Vec<&str> = token.split('.').collect();
    assert_eq!(segments.len(), 3, "a JWT: {token}");
    assert!(
        segments
            .iter()
            .all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')),
        "base64url segments: {token}"
    );
    token
}

#[tokio::test]
async fn service_account_token_gets_what_its_role_grants() {
    let (_dc, k) = cluster().await;
    let token = token_for_robot_that_reads_configmaps(&k);

    let out = k.ok(&["--token", &token, "get", "configmaps"]);
    let cms = Table::parse(&out);
    assert_eq!(cms.header, ["NAME", "DATA", "AGE"], "{out}");
    assert_eq!(cms.cell("kube-root-ca.crt", "DATA"), "1", "{out}");
    assert_eq!(
        k.fails(&["--token", &token, "get", "secrets"]).trim(),
        "Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:default:robot\" \
         cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(
        k.fails(&["--token", &token, "-n", "kube-system", "get", "configmaps"]).trim(),
        "Error from server (Forbidden): configmaps is forbidden: User \"system:serviceaccount:default:robot\" \
         cannot list resource \"configmaps\" in API group \"\" in the namespace \"kube-system\""
    );
    assert_eq!(
        k.fails(&["--token", &token, "create", "configmap", "x"]).trim(),
        "error: failed to create configmap: configmaps is forbidden: User \"system:serviceaccount:default:robot\" \
         cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(k.ok(&["--token", &token, "auth", "can-i", "list", "configmaps"]).trim(), "yes");
    assert_eq!(k.exit_1(&["--token", &token, "auth", "can-i", "list", "secrets"]).trim(), "no");

    let uid = k.ok(&["get", "serviceaccount", "robot", "-o", "jsonpath={.metadata.uid}"]);
    let out = k.ok(&["--token", &token, "auth", "whoami"]);
    let who = Table::parse(&out);
    assert_eq!(who.cell("Username", "VALUE"), "system:serviceaccount:default:robot", "{out}");
    assert_eq!(who.cell("UID", "VALUE"), uid, "{out}");
    assert_eq!(
        who.cell("Groups", "VALUE"),
        "[system:serviceaccounts system:serviceaccounts:default system:authenticated]",
        "{out}"
    );

    // A token that does not verify is 401, and one for a deleted service account stops working.
    assert_eq!(
        k.fails(&["--token", "not-a-token", "get", "configmaps"]).trim(),
        "error: You must be logged in to the server (Unauthorized)"
    );
    assert_eq!(
        k.fails(&["create", "token", "nobody"]).trim(),
        "error: failed to create token: serviceaccounts \"nobody\" not found"
    );
    k.ok(&["delete", "serviceaccount", "robot", "--wait"]);
    assert_eq!(
        k.fails(&["--token", &token, "get", "configmaps"]).trim(),
        "error: You must be logged in to the server (Unauthorized)"
    );
}

/// Tokens of the TokenRequest API carry a `jti`, and the authenticator reports it as the
/// credential id in the user's extra (`authentication.kubernetes.io/credential-id: JTI=<jti>`,
/// staging/src/k8s.io/apiserver/pkg/authentication/serviceaccount/util.go, feature
/// ServiceAccountTokenJTI, on by default since 1.30).
#[tokio::test]
async fn whoami_with_a_service_account_token_shows_its_credential_id() {
    let (_dc, k) = cluster().await;
    let token = token_for_robot_that_reads_configmaps(&k);
    let out = k.ok(&["--token", &token, "auth", "whoami", "-o", "json"]);
    let review: serde_json::Value = serde_json::from_str(&out).expect("a SelfSubjectReview in JSON");
    let ids = review
        .pointer("/status/userInfo/extra/authentication.kubernetes.io~1credential-id")
        .and_then(serde_json::Value::as_array)
        .unwrap_or_else(|| panic!("no credential-id in the user's extra: {out}"));
    assert_eq!(ids.len(), 1, "{out}");
    assert!(ids[0].as_str().is_some_and(|s| s.starts_with("JTI=") && s.len() > 4), "{out}");
    let table = k.ok(&["--token", &token, "auth", "whoami"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("Extra: authentication.kubernetes.io/credential-id") && l.contains("[JTI=")),
        "{table}"
    );
}

/// The deployment controller records ScalingReplicaSet events (pkg/controller/deployment/sync.go:
/// "Scaled up replica set %s from %d to %d"). Core/v1 Events are not name-validated beyond path
/// segments (pkg/apis/core/validation/events.go: ValidateEventCreate skips ValidateObjectMeta for
/// v1), so the recorder's `<object>.` names are accepted.
#[tokio::test]
async fn events_record_deployment_scaling() {
    let (_dc, k) = cluster().await;
    create_web(&k);
    let rs = rs_for_image(&k, "nginx:1.27");
    let message = format!("Scaled up replica set {rs} from 0 to 2");

    let out = k.ok(&["get", "events"]);
    let events = Table::parse(&out);
    assert_eq!(events.header, ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], "{out}");
    let (t, r, o, m) = (events.col("TYPE"), events.col("REASON"), events.col("OBJECT"), events.col("MESSAGE"));
    assert!(
        events.rows.iter().any(|row| row[t] == "Normal"
            && row[r] == "ScalingReplicaSet"
            && row[o] == "deployment/web"
            && row[m] == message),
        "{out}"
    );

    let out = k.ok(&["get", "events", "--field-selector", "involvedObject.kind=Deployment"]);
    let events = Table::parse(&out);
    assert!(!events.rows.is_empty(), "{out}");
    assert!(events.column("OBJECT").iter().all(|o| *o == "deployment/web"), "{out}");
    assert!(events.column("REASON").iter().all(|r| *r == "ScalingReplicaSet"), "{out}");
    let out = k.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=Deployment,involvedObject.name=other",
        "-o",
        "name",
    ]);
    assert_eq!(out.trim(), "");

    // describe shows the same event under Events.
    let describe = k.ok(&["describe", "deployment", "web"]);
    let ev = section(&describe, "Events:");
    assert_eq!(words(ev[1]), ["Type", "Reason", "Age", "From", "Message"], "{describe}");
    assert!(
        ev.iter().any(|l| {
            let w = words(l);
            w.len() > 4
                && w[0] == "Normal"
                && w[1] == "ScalingReplicaSet"
                && w[3] == "deployment-controller"
                && l.trim_end().ends_with(&message)
        }),
        "{describe}"
    );
}

/// The ReplicaSet controller records SuccessfulCreate ("Created pod: %v",
/// pkg/controller/replicaset/replica_set.go) for each pod it creates.
#[tokio::test]
async fn events_record_replica_set_pod_creation() {
    let (_dc, k) = cluster().await;
    create_web(&k);
    let rs = rs_for_image(&k, "nginx:1.27");
    let out = k.ok(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.kind=ReplicaSet,involvedObject.name={rs}"),
    ]);
    let events = Table::parse(&out);
    let mut created: Vec<String> = events
        .rows
        .iter()
        .filter(|r| r[events.col("REASON")] == "SuccessfulCreate")
        .map(|r| r[events.col("MESSAGE")].clone())
        .collect();
    created.sort();
    let mut want: Vec<String> = pod_names(&k, "app=web").iter().map(|p| format!("Created pod: {p}")).collect();
    want.sort();
    assert_eq!(created, want, "{out}");
}

const STATEFULSET: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: db
        image: postgres:16
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
"#;

#[tokio::test]
async fn statefulset_scales_up_with_claims_and_down_to_zero() {
    let (_dc, k) = cluster().await;
    let sts = k.write("sts.yaml", STATEFULSET);
    assert_eq!(k.ok(&["apply", "-f", &sts]).trim(), "statefulset.apps/db created");
    // kubectl's StatefulSetStatusViewer: RollingUpdate with the defaulted partition 0.
    assert_eq!(
        k.ok(&["rollout", "status", "statefulset/db", "--timeout=30s"]).lines().last(),
        Some("partitioned roll out complete: 1 new pods have been updated...")
    );
    assert_eq!(k.ok(&["scale", "statefulset", "db", "--replicas=3"]).trim(), "statefulset.apps/db scaled");
    assert_eq!(
        k.ok(&["rollout", "status", "statefulset/db", "--timeout=30s"]).lines().last(),
        Some("partitioned roll out complete: 3 new pods have been updated...")
    );
    let out = k.ok(&["get", "statefulset", "db"]);
    let table = Table::parse(&out);
    assert_eq!(table.header, ["NAME", "READY", "AGE"], "{out}");
    assert_eq!(table.cell("db", "READY"), "3/3", "{out}");

    let out = k.ok(&["get", "pods", "-l", "app=db"]);
    let pods = Table::parse(&out);
    assert_eq!(pods.column("NAME"), ["db-0", "db-1", "db-2"], "{out}");
    assert!(pods.rows.iter().all(|r| r[1] == "1/1" && r[2] == "Running"), "{out}");
    // Each pod mounts its own claim.
    assert_eq!(
        k.ok(&[
            "get",
            "pod",
            "db-2",
            "-o",
            "jsonpath={.spec.volumes[?(@.name==\"data\")].persistentVolumeClaim.claimName}"
        ]),
        "data-db-2"
    );

    let out = k.ok(&["get", "pvc"]);
    let pvcs = Table::parse(&out);
    assert_eq!(
        pvcs.header,
        ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE"],
        "{out}"
    );
    assert_eq!(pvcs.column("NAME"), ["data-db-0", "data-db-1", "data-db-2"], "{out}");
    assert_eq!(pvcs.column("STATUS"), ["Bound", "Bound", "Bound"], "{out}");
    assert_eq!(
        k.ok(&["get", "pvc", "data-db-1", "-o", "jsonpath={.metadata.labels.app} {.spec.resources.requests.storage}"]),
        "db 1Gi"
    );

    assert_eq!(k.ok(&["scale", "statefulset", "db", "--replicas=0"]).trim(), "statefulset.apps/db scaled");
    assert_eq!(
        k.ok(&["rollout", "status", "statefulset/db", "--timeout=30s"]).lines().last(),
        Some("partitioned roll out complete: 0 new pods have been updated...")
    );
    k.ok(&["wait", "--for=delete", "pod/db-0", "pod/db-1", "pod/db-2", "--timeout=30s"]);
    assert_eq!(Table::parse(&k.ok(&["get", "statefulset", "db"])).cell("db", "READY"), "0/0");
    assert_eq!(k.ok(&["get", "pods", "-l", "app=db", "-o", "name"]).trim(), "");
    // The default persistentVolumeClaimRetentionPolicy (whenScaled: Retain) keeps the claims.
    assert_eq!(
        k.ok(&["get", "pvc", "-o", "name"]).lines().collect::<Vec<_>>(),
        ["persistentvolumeclaim/data-db-0", "persistentvolumeclaim/data-db-1", "persistentvolumeclaim/data-db-2"]
    );
}

/// A StatefulSet's containers mount the claims of its volumeClaimTemplates by name: upstream does
/// not validate the template's pod spec volumes (pkg/apis/apps/validation/validation.go,
/// ValidatePodTemplateSpecForStatefulSet: "TODO: Add validation for PodSpec, currently this will
/// check volumes, which we know will fail").
#[tokio::test]
async fn statefulset_containers_mount_their_claim_templates() {
    let (_dc, k) = cluster().await;
    let manifest = STATEFULSET.replace(
        "        image: postgres:16\n",
        "        image: postgres:16\n        volumeMounts: [{name: data, mountPath: /var/lib/postgresql/data}]\n",
    );
    let sts = k.write("sts.yaml", &manifest);
    assert_eq!(k.ok(&["apply", "-f", &sts]).trim(), "statefulset.apps/db created");
    k.ok(&["rollout", "status", "statefulset/db", "--timeout=30s"]);
    assert_eq!(
        k.ok(&["get", "pod", "db-0", "-o", "jsonpath={.spec.containers[0].volumeMounts[0].mountPath} {.spec.volumes[0].persistentVolumeClaim.claimName}"]),
        "/var/lib/postgresql/data data-db-0"
    );
}

/// A Bound claim names its volume: the PV controller binds by setting spec.volumeName (and a
/// dynamic provisioner creates that PersistentVolume), and `kubectl get pvc` shows VOLUME,
/// CAPACITY and ACCESS MODES only when spec.volumeName is set (printPersistentVolumeClaim in
/// pkg/printers/internalversion/printers.go).
#[tokio::test]
async fn bound_claims_show_their_volume() {
    let (_dc, k) = cluster().await;
    let sts = k.write("sts.yaml", STATEFULSET);
    k.ok(&["apply", "-f", &sts]);
    k.ok(&["rollout", "status", "statefulset/db", "--timeout=30s"]);
    let out = k.ok(&["get", "pvc", "data-db-0"]);
    let pvcs = Table::parse(&out);
    assert_eq!(pvcs.cell("data-db-0", "STATUS"), "Bound", "{out}");
    let volume = pvcs.cell("data-db-0", "VOLUME");
    assert!(volume.starts_with("pvc-"), "{out}");
    assert_eq!(pvcs.cell("data-db-0", "CAPACITY"), "1Gi", "{out}");
    assert_eq!(pvcs.cell("data-db-0", "ACCESS MODES"), "RWO", "{out}");
    let out = k.ok(&["get", "pv", volume]);
    let pv = Table::parse(&out);
    assert_eq!(pv.cell(volume, "STATUS"), "Bound", "{out}");
    assert_eq!(pv.cell(volume, "CLAIM"), "default/data-db-0", "{out}");
}

#[tokio::test]
async fn describe_deployment_and_pod_show_conditions_and_events() {
    let (_dc, k) = cluster().await;
    create_web(&k);
    let rs = rs_for_image(&k, "nginx:1.27");

    let d = k.ok(&["describe", "deployment", "web"]);
    assert_eq!(described(&d, "Name"), "web", "{d}");
    assert_eq!(described(&d, "Namespace"), "default", "{d}");
    assert_eq!(described(&d, "Selector"), "app=web", "{d}");
    assert_eq!(described(&d, "Replicas"), "2 desired | 2 updated | 2 total | 2 available | 0 unavailable", "{d}");
    assert_eq!(described(&d, "StrategyType"), "RollingUpdate", "{d}");
    assert_eq!(described(&d, "RollingUpdateStrategy"), "25% max unavailable, 25% max surge", "{d}");
    assert!(d.lines().any(|l| words(l) == ["Image:", "nginx:1.27"]), "{d}");
    let cond = section(&d, "Conditions:");
    assert_eq!(words(cond[1]), ["Type", "Status", "Reason"], "{d}");
    assert!(cond.iter().any(|l| words(l) == ["Available", "True", "MinimumReplicasAvailable"]), "{d}");
    assert!(cond.iter().any(|l| words(l) == ["Progressing", "True", "NewReplicaSetAvailable"]), "{d}");
    assert_eq!(described(&d, "NewReplicaSet"), format!("{rs} (2/2 replicas created)"), "{d}");
    assert_eq!(described(&d, "OldReplicaSets"), "<none>", "{d}");
    section(&d, "Events:");

    let pods = pod_names(&k, "app=web");
    let name = pods.first().expect("a web pod");
    let p = k.ok(&["describe", "pod", name]);
    assert_eq!(described(&p, "Name"), name.as_str(), "{p}");
    assert_eq!(described(&p, "Node"), "devcluster-node-1/10.0.0.1", "{p}");
    assert_eq!(described(&p, "Status"), "Running", "{p}");
    let ip = k.ok(&["get", "pod", name, "-o", "jsonpath={.status.podIP}"]);
    assert_eq!(described(&p, "IP"), ip, "{p}");
    assert_eq!(described(&p, "Controlled By"), format!("ReplicaSet/{rs}"), "{p}");
    assert!(p.lines().any(|l| words(l) == ["Image:", "nginx:1.27"]), "{p}");
    assert!(p.lines().any(|l| words(l) == ["State:", "Running"]), "{p}");
    assert!(p.lines().any(|l| words(l) == ["Ready:", "True"]), "{p}");
    assert!(p.lines().any(|l| words(l) == ["Restart", "Count:", "0"]), "{p}");
    let cond = section(&p, "Conditions:");
    assert_eq!(words(cond[1]), ["Type", "Status"], "{p}");
    for t in ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"] {
        assert!(cond.iter().any(|l| words(l) == [t, "True"]), "{t}: {p}");
    }
    assert_eq!(described(&p, "QoS Class"), "BestEffort", "{p}");
    section(&p, "Events:");
}

/// Admission on a real apiserver gives every pod its service account (ServiceAccount plugin:
/// `default`, and a projected `kube-api-access-<random>` volume mounted at
/// /var/run/secrets/kubernetes.io/serviceaccount), the not-ready/unreachable tolerations for 300s
/// (DefaultTolerationSeconds) and priority 0 (Priority).
#[tokio::test]
async fn describe_pod_shows_admission_defaults() {
    let (_dc, k) = cluster().await;
    create_web(&k);
    let pods = pod_names(&k, "app=web");
    let name = pods.first().expect("a web pod");
    let p = k.ok(&["describe", "pod", name]);
    assert_eq!(described(&p, "Service Account"), "default", "{p}");
    assert_eq!(described(&p, "Priority"), "0", "{p}");
    assert!(
        p.lines().any(|l| l.trim().starts_with("/var/run/secrets/kubernetes.io/serviceaccount from kube-api-access-")),
        "{p}"
    );
    assert_eq!(described(&p, "Tolerations"), "node.kubernetes.io/not-ready:NoExecute op=Exists for 300s", "{p}");
    assert!(p.lines().any(|l| l.trim() == "node.kubernetes.io/unreachable:NoExecute op=Exists for 300s"), "{p}");
}

#[tokio::test]
async fn pod_security_restricted_namespace_refuses_a_root_pod() {
    let (_dc, k) = cluster().await;
    assert_eq!(k.ok(&["create", "namespace", "x"]).trim(), "namespace/x created");
    assert_eq!(k.ok(&["-n", "x", "run", "early", "--image=nginx:1.27"]).trim(), "pod/early created");
    // Labelling warns about the pods already there (they stay).
    let (out, warn) = k.ok2(&["label", "namespace", "x", "pod-security.kubernetes.io/enforce=restricted"]);
    assert_eq!(out.trim(), "namespace/x labeled");
    assert_eq!(
        warn.lines().collect::<Vec<_>>(),
        [
            "Warning: existing pods in namespace \"x\" violate the new PodSecurity enforce level \"restricted:latest\"",
            "Warning: early: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
        ]
    );

    let err = k.fails(&["-n", "x", "run", "root", "--image=nginx:1.27"]);
    assert_eq!(
        err.trim(),
        "Error from server (Forbidden): pods \"root\" is forbidden: violates PodSecurity \"restricted:latest\": \
         allowPrivilegeEscalation != false (container \"root\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"root\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"root\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"root\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    assert_eq!(
        k.fails(&["-n", "x", "get", "pod", "root"]).trim(),
        "Error from server (NotFound): pods \"root\" not found"
    );

    // A pod that meets the profile is admitted.
    let ok = k.write(
        "ok.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: nonroot, namespace: x}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: app
    image: nginx:1.27
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
"#,
    );
    let (out, warn) = k.ok2(&["apply", "-f", &ok]);
    assert_eq!(out.trim(), "pod/nonroot created");
    assert_eq!(warn, "");
}

#[tokio::test]
async fn cordon_and_uncordon_show_in_get_nodes() {
    let (_dc, k) = cluster().await;
    let node = "devcluster-node-1";
    let out = k.ok(&["get", "nodes"]);
    let nodes = Table::parse(&out);
    assert_eq!(nodes.header, ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], "{out}");
    assert_eq!(nodes.cell(node, "STATUS"), "Ready", "{out}");

    assert_eq!(k.ok(&["cordon", node]).trim(), "node/devcluster-node-1 cordoned");
    assert_eq!(k.ok(&["cordon", node]).trim(), "node/devcluster-node-1 already cordoned");
    let out = k.ok(&["get", "nodes"]);
    assert_eq!(Table::parse(&out).cell(node, "STATUS"), "Ready,SchedulingDisabled", "{out}");
    assert_eq!(k.ok(&["get", "node", node, "-o", "jsonpath={.spec.unschedulable}"]), "true");

    // Nothing is scheduled there meanwhile.
    k.ok(&["run", "waiting", "--image=nginx:1.27"]);
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}=Unschedulable",
        "pod/waiting",
        "--timeout=30s",
    ]);
    let out = k.ok(&["get", "pod", "waiting", "-o", "wide"]);
    let pod = Table::parse(&out);
    assert_eq!(pod.cell("waiting", "STATUS"), "Pending", "{out}");
    assert_eq!(pod.cell("waiting", "NODE"), "<none>", "{out}");

    assert_eq!(k.ok(&["uncordon", node]).trim(), "node/devcluster-node-1 uncordoned");
    assert_eq!(k.ok(&["uncordon", node]).trim(), "node/devcluster-node-1 already uncordoned");
    let out = k.ok(&["get", "nodes"]);
    assert_eq!(Table::parse(&out).cell(node, "STATUS"), "Ready", "{out}");
    // And new pods land on it again.
    k.ok(&["run", "later", "--image=nginx:1.27"]);
    k.ok(&["wait", "--for=condition=Ready", "pod/later", "--timeout=30s"]);
    assert_eq!(k.ok(&["get", "pod", "later", "-o", "jsonpath={.spec.nodeName}"]), node);
}

/// Cordon `devcluster-node-1`, start pod `waiting` and wait until the scheduler gave up on it.
fn pod_waiting_on_a_cordoned_node(k: &Kubectl) {
    k.ok(&["cordon", "devcluster-node-1"]);
    k.ok(&["run", "waiting", "--image=nginx:1.27"]);
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}=Unschedulable",
        "pod/waiting",
        "--timeout=30s",
    ]);
}

/// The scheduler's FitError counts the nodes per reason (pkg/scheduler/framework/types.go:
/// "0/%v nodes are available" then " %d %s." per reason; the NodeUnschedulable plugin's reason
/// is "node(s) were unschedulable").
#[tokio::test]
async fn unschedulable_message_counts_the_cordoned_nodes() {
    let (_dc, k) = cluster().await;
    pod_waiting_on_a_cordoned_node(&k);
    let message =
        k.ok(&["get", "pod", "waiting", "-o", "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].message}"]);
    assert!(message.starts_with("0/1 nodes are available: 1 node(s) were unschedulable."), "{message}");
}

/// The scheduler retries unschedulable pods when a node changes (a Node update that clears
/// spec.unschedulable moves them back to the active queue), so a pod that waited on a cordoned
/// node starts once it is uncordoned.
#[tokio::test]
async fn pending_pod_is_scheduled_after_uncordon() {
    let (_dc, k) = cluster().await;
    let node = "devcluster-node-1";
    pod_waiting_on_a_cordoned_node(&k);
    k.ok(&["uncordon", node]);
    k.ok(&["wait", "--for=condition=Ready", "pod/waiting", "--timeout=30s"]);
    assert_eq!(k.ok(&["get", "pod", "waiting", "-o", "jsonpath={.spec.nodeName}"]), node);
}
