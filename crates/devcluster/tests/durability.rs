//! `devcluster serve --data-dir`: what was acknowledged survives a restart, even `kill -9`, and
//! resourceVersions keep increasing.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the binary and wait until it has written its kubeconfig.
fn serve(data_dir: &Path, kubeconfig: &Path) -> Server {
    let _ = std::fs::remove_file(kubeconfig);
    let child = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("devcluster binary starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubeconfig.exists() || std::fs::metadata(kubeconfig).map(|m| m.len()).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "devcluster did not write its kubeconfig");
        std::thread::sleep(Duration::from_millis(20));
    }
    Server { child }
}

async fn client(kubeconfig: &Path) -> kube::Client {
    let yaml = std::fs::read_to_string(kubeconfig).unwrap();
    devcluster::client_for(&yaml).await.unwrap()
}

#[tokio::test]
async fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let kc = dir.path().join("kubeconfig");
    let mut last_rv = 0u64;
    {
        let mut server = serve(&data, &kc);
        let api: Api<ConfigMap> = Api::default_namespaced(client(&kc).await);
        let mut tasks = vec![];
        for i in 0..40 {
            let api = api.clone();
            tasks.push(tokio::spawn(async move {
                let cm = ConfigMap {
                    metadata: kube::api::ObjectMeta { name: Some(format!("cm-{i}")), ..Default::default() },
                    data: Some([("i".to_string(), i.to_string())].into()),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm).await.unwrap()
            }));
        }
        for t in tasks {
            let cm = t.await.unwrap();
            last_rv = last_rv.max(cm.metadata.resource_version.unwrap().parse().unwrap());
        }
        // kill -9: no chance to flush anything that was not already durable.
        server.child.kill().unwrap();
        server.child.wait().unwrap();
    }
    let _server = serve(&data, &kc);
    let api: Api<ConfigMap> = Api::default_namespaced(client(&kc).await);
    for i in 0..40 {
        let cm = api.get(&format!("cm-{i}")).await.unwrap();
        assert_eq!(cm.data.unwrap()["i"], i.to_string());
    }
    let next = api
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: kube::api::ObjectMeta { name: Some("after".into()), ..Default::default() },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let rv: u64 = next.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv > last_rv, "resourceVersion {rv} after restart must exceed {last_rv}");
}
