//! The double over real HTTP: every endpoint, the security answers and every fault switch.

use reqwest::{Client, StatusCode, redirect::Policy};
use std::time::{Duration, Instant};
use varroa_jenkins_double::{JenkinsDouble, Options, Plugin};

const TOKEN: &str = "11aa22bb33cc44dd55ee66ff77889900aa";

fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder().redirect(Policy::none()).timeout(Duration::from_secs(10)).build().unwrap()
}

async fn start(opts: Options) -> JenkinsDouble {
    JenkinsDouble::start(Options { api_token: Some(TOKEN.into()), ..opts }).await.unwrap()
}

async fn get_json(c: &Client, d: &JenkinsDouble, path: &str) -> (reqwest::header::HeaderMap, serde_json::Value) {
    let r = c.get(format!("{}{path}", d.url())).basic_auth("admin", Some(TOKEN)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    let h = r.headers().clone();
    (h, r.json().await.unwrap())
}

async fn post(c: &Client, d: &JenkinsDouble, path: &str, body: &str) -> reqwest::Response {
    c.post(format!("{}{path}", d.url())).basic_auth("admin", Some(TOKEN)).body(body.to_string()).send().await.unwrap()
}

#[tokio::test]
async fn api_json_reports_version_mode_and_state() {
    let d = start(Options { jobs: vec!["build".into()], version: "2.492.1".into(), ..Default::default() }).await;
    let c = client();
    let (h, v) = get_json(&c, &d, "/api/json").await;
    assert_eq!(h["x-jenkins"], "2.492.1");
    assert_eq!(v["_class"], "hudson.model.Hudson");
    assert_eq!(v["mode"], "NORMAL");
    assert_eq!(v["numExecutors"], 2);
    assert_eq!(v["quietingDown"], false);
    assert_eq!(v["useSecurity"], true);
    assert_eq!(v["jobs"][0]["name"], "build");
    d.set_version("2.500");
    d.set_quieting_down(true);
    let (h, v) = get_json(&c, &d, "/api/json/").await;
    assert_eq!(h["x-jenkins"], "2.500");
    assert_eq!(v["quietingDown"], true);
}

#[tokio::test]
async fn login_is_open_but_everything_else_needs_credentials() {
    let d = start(Options::default()).await;
    let c = client();
    let r = c.get(format!("{}/login", d.url())).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers().contains_key("x-jenkins"));

    let r = c.get(format!("{}/api/json", d.url())).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(r.headers()["x-you-are-authenticated-as"], "anonymous");
    assert_eq!(r.headers()["x-required-permission"], "hudson.model.Hudson.Read");
    assert!(r.text().await.unwrap().contains("Authentication required"));

    let r = c.get(format!("{}/api/json", d.url())).basic_auth("admin", Some("wrong")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Basic realm=\"Jenkins\"");
    let r = c.get(format!("{}/api/json", d.url())).basic_auth("someone", Some(TOKEN)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn token_file_is_reread_on_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "first\n").unwrap();
    let d = JenkinsDouble::start(Options { token_file: Some(file.clone()), ..Default::default() }).await.unwrap();
    let c = client();
    let status = |t: &'static str| {
        let c = c.clone();
        let url = format!("{}/api/json", d.url());
        async move { c.get(url).basic_auth("admin", Some(t)).send().await.unwrap().status() }
    };
    assert_eq!(status("first").await, StatusCode::OK);
    std::fs::write(&file, "second").unwrap();
    assert_eq!(status("first").await, StatusCode::UNAUTHORIZED);
    assert_eq!(status("second").await, StatusCode::OK);
}

#[tokio::test]
async fn plugin_manager_needs_depth_one_for_details() {
    let d = start(Options::default()).await;
    let c = client();
    d.set_plugins(vec![
        Plugin::new("git", "5.7.0"),
        Plugin { enabled: false, active: false, ..Plugin::new("job-dsl", "1.90") },
    ]);
    let (_, v) = get_json(&c, &d, "/pluginManager/api/json").await;
    assert_eq!(v["plugins"], serde_json::json!([{}, {}]));
    let (_, v) = get_json(&c, &d, "/pluginManager/api/json?depth=1").await;
    assert_eq!(v["_class"], "hudson.LocalPluginManager");
    assert_eq!(v["plugins"][0]["shortName"], "git");
    assert_eq!(v["plugins"][0]["version"], "5.7.0");
    assert_eq!(v["plugins"][0]["active"], true);
    assert_eq!(v["plugins"][1]["enabled"], false);
}

#[tokio::test]
async fn plugins_dir_is_scanned_on_each_request() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(Options { plugins_dir: Some(dir.path().into()), ..Default::default() }).await;
    let c = client();
    let (_, v) = get_json(&c, &d, "/pluginManager/api/json?depth=1").await;
    assert_eq!(v["plugins"], serde_json::json!([]));
    std::fs::write(dir.path().join("git.jpi"), "Short-Name: git\nPlugin-Version: 5.7.0\n").unwrap();
    let (_, v) = get_json(&c, &d, "/pluginManager/api/json?depth=1").await;
    assert_eq!(v["plugins"][0]["shortName"], "git");
    assert_eq!(v["plugins"][0]["version"], "5.7.0");
}

#[tokio::test]
async fn queue_and_computers_follow_the_switches() {
    let d = start(Options::default()).await;
    let c = client();
    let (_, q) = get_json(&c, &d, "/queue/api/json").await;
    assert_eq!(q["items"], serde_json::json!([]));
    let (_, v) = get_json(&c, &d, "/computer/api/json").await;
    assert_eq!((v["busyExecutors"].as_u64(), v["totalExecutors"].as_u64()), (Some(0), Some(2)));
    assert_eq!(v["computer"][0]["idle"], true);
    d.set_queue_length(3);
    d.set_busy_executors(5);
    let (_, q) = get_json(&c, &d, "/queue/api/json").await;
    assert_eq!(q["items"].as_array().unwrap().len(), 3);
    assert_eq!(q["items"][0]["_class"], "hudson.model.Queue$WaitingItem");
    let (_, v) = get_json(&c, &d, "/computer/api/json").await;
    assert_eq!(v["busyExecutors"], 2, "busy executors are capped at the executors there are");
    assert_eq!(v["computer"][0]["idle"], false);
    assert_eq!(v["computer"][0]["offline"], false);
}

#[tokio::test]
async fn posts_need_a_crumb_unless_authenticated_by_token() {
    let d = JenkinsDouble::start(Options {
        api_token: Some(TOKEN.into()),
        password: Some("s3cret".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let c = client();
    let url = |p: &str| format!("{}{p}", d.url());

    let r = c.post(url("/quietDown")).basic_auth("admin", Some("s3cret")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("No valid crumb was included in the request"));
    assert!(!d.quieting_down());

    let crumb: serde_json::Value = c
        .get(url("/crumbIssuer/api/json"))
        .basic_auth("admin", Some("s3cret"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(crumb["crumbRequestField"], "Jenkins-Crumb");
    let value = crumb["crumb"].as_str().unwrap().to_string();
    let r = c
        .post(url("/quietDown?message=maintenance"))
        .basic_auth("admin", Some("s3cret"))
        .header("Jenkins-Crumb", &value)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    assert!(d.quieting_down());
    let (_, v) = get_json(&c, &d, "/api/json").await;
    assert_eq!(v["quietDownReason"], "maintenance");

    d.rotate_crumbs();
    let r = c
        .post(url("/cancelQuietDown"))
        .basic_auth("admin", Some("s3cret"))
        .header("Jenkins-Crumb", &value)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "a rotated crumb is no longer valid");

    // An API token is exempt (ApiCrumbExclusion).
    let r = post(&c, &d, "/cancelQuietDown", "").await;
    assert_eq!(r.status(), StatusCode::FOUND);
    assert!(!d.quieting_down());

    // Anonymous POSTs fail at the crumb filter first.
    let r = c.post(url("/quietDown")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = c.get(url("/quietDown")).basic_auth("admin", Some(TOKEN)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn casc_check_refuses_unknown_roots_with_the_plugins_message() {
    let d = start(Options::default()).await;
    let c = client();
    let r = post(&c, &d, "/configuration-as-code/check", "jenkins:\n  systemMessage: hi\nx-common: &c 1\n").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap(), serde_json::json!([]));

    let r = post(&c, &d, "/configuration-as-code/check", "jenkins: {}\nalice:\n  hello: bob\n").await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v[0]["line"], -1);
    let msg = v[0]["message"].as_str().unwrap();
    assert!(msg.starts_with("No configurator found for the following root element: alice."), "{msg}");

    let r = post(&c, &d, "/configuration-as-code/check", "jobs: []\n").await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "jobs needs job-dsl");
    d.set_plugins(vec![Plugin::new("job-dsl", "1.90")]);
    let r = post(&c, &d, "/configuration-as-code/check", "jobs: []\n").await;
    assert_eq!(r.status(), StatusCode::OK);

    let r = post(&c, &d, "/configuration-as-code/check", "jenkins: [unclosed\n").await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(d.check_count(), 5);
}

#[tokio::test]
async fn reload_replaces_the_live_configuration_only_when_valid() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), "jenkins:\n  systemMessage: first\n").unwrap();
    std::fs::write(dir.path().join("b.yml"), "jenkins:\n  numExecutors: 4\n").unwrap();
    std::fs::write(dir.path().join(".hidden.yaml"), "bogus: 1\n").unwrap();
    let d = start(Options { casc_config: Some(dir.path().display().to_string()), ..Default::default() }).await;
    let c = client();
    assert_eq!(d.live_config()["jenkins"]["systemMessage"], "first", "loaded at start");
    let (_, v) = get_json(&c, &d, "/computer/api/json").await;
    assert_eq!(v["totalExecutors"], 4);

    std::fs::write(dir.path().join("a.yaml"), "jenkins:\n  systemMessage: second\n").unwrap();
    let r = post(&c, &d, "/configuration-as-code/reload", "").await;
    assert_eq!(r.status(), StatusCode::FOUND);
    assert!(r.headers()["location"].to_str().unwrap().ends_with("/configuration-as-code/"));
    assert_eq!(d.live_config()["jenkins"]["systemMessage"], "second");

    std::fs::write(dir.path().join("c.yaml"), "alice: 1\n").unwrap();
    let r = post(&c, &d, "/configuration-as-code/reload", "").await;
    assert_eq!(r.status(), StatusCode::OK, "the plugin renders error.jelly with 200");
    let page = r.text().await.unwrap();
    assert!(page.contains("Error loading configuration"), "{page}");
    assert!(page.contains("No configurator found for the following root element: alice"), "{page}");
    assert_eq!(d.live_config()["jenkins"]["systemMessage"], "second", "the last good configuration stays");
    let reloads = d.reloads();
    assert_eq!(reloads.len(), 2);
    assert!(reloads[0].ok && !reloads[1].ok);
    assert_eq!(d.applied_count(), 1);

    std::fs::remove_file(dir.path().join("c.yaml")).unwrap();
    std::fs::write(dir.path().join("d.yaml"), "jenkins:\n  systemMessage: conflict\n").unwrap();
    let r = post(&c, &d, "/configuration-as-code/reload", "").await;
    assert!(r.text().await.unwrap().contains("Found conflicting configuration"));
}

#[tokio::test]
async fn export_is_the_live_configuration_with_drift() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jenkins.yaml");
    std::fs::write(&file, "jenkins:\n  systemMessage: hello\n").unwrap();
    let d = start(Options { casc_config: Some(file.display().to_string()), ..Default::default() }).await;
    let c = client();
    let r = post(&c, &d, "/configuration-as-code/export", "").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "application/x-yaml; charset=utf-8");
    assert_eq!(r.headers()["content-disposition"], "attachment; filename=jenkins.yaml");
    let v: serde_json::Value = serde_saphyr::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["jenkins"]["systemMessage"], "hello");
    assert_eq!(v["jenkins"]["mode"], "NORMAL", "export carries defaults too");

    d.drift("jenkins:\n  systemMessage: clicked in the UI\n").unwrap();
    let r = post(&c, &d, "/configuration-as-code/export", "").await;
    let v: serde_json::Value = serde_saphyr::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["jenkins"]["systemMessage"], "clicked in the UI");
    let r = c
        .get(format!("{}/configuration-as-code/export", d.url()))
        .basic_auth("admin", Some(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn slow_and_failing_switches() {
    let d = start(Options::default()).await;
    let c = client();
    d.set_delay(Duration::from_millis(300));
    let t = Instant::now();
    get_json(&c, &d, "/api/json").await;
    assert!(t.elapsed() >= Duration::from_millis(300));
    d.set_delay(Duration::ZERO);
    d.set_fail_500(true);
    let r = c.get(format!("{}/api/json", d.url())).basic_auth("admin", Some(TOKEN)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.headers().contains_key("x-jenkins"));
    d.set_fail_500(false);
    get_json(&c, &d, "/api/json").await;
}

#[tokio::test]
async fn refusing_connections_closes_the_listener_and_reopens_it() {
    let d = start(Options::default()).await;
    let c = client();
    get_json(&c, &d, "/api/json").await;
    d.refuse_connections();
    let mut refused = false;
    for _ in 0..100 {
        match tokio::net::TcpStream::connect(d.addr()).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(refused, "connections are refused");
    let r = c.get(format!("{}/api/json", d.url())).basic_auth("admin", Some(TOKEN)).send().await;
    assert!(r.is_err_and(|e| e.is_connect()));
    d.accept_connections();
    let mut ok = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(d.addr()).await.is_ok() {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok);
    get_json(&c, &d, "/api/json").await;
}

#[tokio::test]
async fn admin_endpoints_set_the_switches() {
    let d = start(Options::default()).await;
    let c = client();
    let admin = |p: &str| format!("{}/__double/{p}", d.url());
    let r = c.post(admin("jenkins")).body(r#"{"version":"2.600","queueLength":2,"busyExecutors":1,"quietingDown":true,"plugins":[{"shortName":"git","version":"1.0"}]}"#).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (h, v) = get_json(&c, &d, "/api/json").await;
    assert_eq!(h["x-jenkins"], "2.600");
    assert_eq!(v["quietingDown"], true);
    let (_, v) = get_json(&c, &d, "/pluginManager/api/json?depth=1").await;
    assert_eq!(v["plugins"][0]["shortName"], "git");

    let r = c.post(admin("drift")).body("jenkins:\n  systemMessage: by hand\n").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(d.live_config()["jenkins"]["systemMessage"], "by hand");

    let r = c.post(admin("faults")).body(r#"{"fail500":true}"#).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = c.get(format!("{}/api/json", d.url())).basic_auth("admin", Some(TOKEN)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let state: serde_json::Value = c.get(admin("state")).send().await.unwrap().json().await.unwrap();
    assert_eq!(state["faults"]["fail500"], true, "admin endpoints are not failed by the faults");
    assert_eq!(state["queueLength"], 2);
    c.post(admin("faults")).body(r#"{"fail500":false}"#).send().await.unwrap();

    let r = c.post(admin("refuse")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "refuse needs a duration");
    let r = c.post(admin("refuse?seconds=0.5")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let c2 = client();
    let mut saw_refusal = false;
    let mut back = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match c2.get(format!("{}/login", d.url())).send().await {
            Err(_) => saw_refusal = true,
            Ok(_) if saw_refusal => {
                back = true;
                break;
            }
            Ok(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_refusal && back, "refused for a while, then back");
}

#[tokio::test]
async fn an_invalid_initial_configuration_fails_the_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("jenkins.yaml"), "bogus: 1\n").unwrap();
    let err =
        JenkinsDouble::start(Options { casc_config: Some(dir.path().display().to_string()), ..Default::default() })
            .await
            .err()
            .unwrap();
    assert!(err.to_string().contains("No configurator found for the following root element: bogus"), "{err}");
}

#[tokio::test]
async fn the_binary_serves_with_its_env() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), TOKEN).unwrap();
    std::fs::write(dir.path().join("jenkins.yaml"), "jenkins:\n  systemMessage: from env\n").unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-jenkins-double"))
        .env("JENKINS_DOUBLE_LISTEN", "127.0.0.1:0")
        .env("VARROA_MITE_TOKEN_FILE", dir.path().join("token"))
        .env("CASC_JENKINS_CONFIG", dir.path().join("jenkins.yaml"))
        .env("JENKINS_DOUBLE_VERSION", "2.479.9")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(i) = line.find("url=") {
                return line[i + 4..].split_whitespace().next().unwrap().to_string();
            }
        }
        panic!("no url logged");
    })
    .await
    .unwrap();
    let c = client();
    let r = c.get(format!("{url}/login")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-jenkins"], "2.479.9");
    let r =
        c.post(format!("{url}/configuration-as-code/export")).basic_auth("admin", Some(TOKEN)).send().await.unwrap();
    assert!(r.text().await.unwrap().contains("from env"));
    child.kill().await.unwrap();
}
