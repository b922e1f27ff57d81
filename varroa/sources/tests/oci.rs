//! OCI inputs against a real registry: Debian's `docker-registry` (CNCF distribution), started
//! per test on a free loopback port with storage in a temporary directory.

mod common;

use std::sync::Arc;

use common::{Registry, Repo, file_layer, files, git_source, oci_source, tar_gz_layer};
use varroa_sources::{FetchOptions, Fetcher, SourceError, files_digest};

#[tokio::test]
async fn oras_files_by_tag_and_by_digest() {
    let registry = Registry::start();
    let digest = registry
        .push(
            "team/casc:v1",
            vec![
                file_layer("jenkins.yaml", "jenkins:\n  systemMessage: one\n"),
                file_layer("plugins.yaml", "plugins: [git]\n"),
            ],
        )
        .await;
    let expected = files(&[("jenkins.yaml", "jenkins:\n  systemMessage: one\n"), ("plugins.yaml", "plugins: [git]\n")]);

    let fetcher = registry.fetcher();
    let by_tag = fetcher.fetch(&oci_source(&format!("{}/team/casc:v1", registry.addr))).await.expect("by tag");
    assert_eq!(by_tag.revision, digest);
    assert_eq!(by_tag.files, expected);
    assert_eq!(by_tag.digest, files_digest(&expected));

    // By digest, with a fetcher that has not seen it: downloaded and verified.
    let by_digest_source = oci_source(&format!("{}/team/casc@{digest}", registry.addr));
    let other = registry.fetcher();
    let by_digest = other.fetch(&by_digest_source).await.expect("by digest");
    assert_eq!(by_digest.revision, digest);
    assert_eq!(by_digest.files, expected);
    assert_eq!(other.stats().downloads, 1);

    // The first fetcher knows that manifest: served from its cache.
    let cached = fetcher.fetch(&by_digest_source).await.expect("cached");
    assert!(Arc::ptr_eq(&cached, &by_tag));
    let again = fetcher.fetch(&oci_source(&format!("{}/team/casc:v1", registry.addr))).await.expect("tag again");
    assert!(Arc::ptr_eq(&again, &by_tag));
    let stats = fetcher.stats();
    assert_eq!((stats.downloads, stats.cache_hits), (1, 2), "{stats:?}");
}

#[tokio::test]
async fn a_moved_tag_gives_the_new_manifest_and_content() {
    let registry = Registry::start();
    let reference = format!("{}/team/casc:stable", registry.addr);
    let first = registry.push("team/casc:stable", vec![file_layer("jenkins.yaml", "one")]).await;
    let fetcher = registry.fetcher();
    let before = fetcher.fetch(&oci_source(&reference)).await.expect("before");
    assert_eq!(before.revision, first);

    let second = registry.push("team/casc:stable", vec![file_layer("jenkins.yaml", "two")]).await;
    assert_ne!(first, second);
    let after = fetcher.fetch(&oci_source(&reference)).await.expect("after");
    assert_eq!(after.revision, second);
    assert_eq!(after.files, files(&[("jenkins.yaml", "two")]));
    assert_ne!(after.digest, before.digest);
}

#[tokio::test]
async fn a_missing_tag_or_repository_is_ref_not_found() {
    let registry = Registry::start();
    registry.push("team/casc:v1", vec![file_layer("jenkins.yaml", "one")]).await;
    let fetcher = registry.fetcher();
    for (reference, named) in [
        (format!("{}/team/casc:nope", registry.addr), "\"nope\""),
        (format!("{}/team/absent:v1", registry.addr), "\"v1\""),
        (format!("{}/team/casc@sha256:{}", registry.addr, "0".repeat(64)), "sha256:0000"),
    ] {
        let fetched = fetcher.fetch_or_last_good(&oci_source(&reference)).await;
        assert!(fetched.artifact.is_none());
        let error = fetched.error.expect("error");
        assert!(matches!(error, SourceError::RefNotFound { .. }), "{reference}: {error:?}");
        let message = error.to_string();
        assert!(message.contains(&reference), "{message}");
        assert!(message.contains(named), "{message}");
    }
}

#[tokio::test]
async fn a_corrupted_layer_is_a_digest_mismatch_and_the_last_good_artifact_is_kept() {
    let registry = Registry::start();
    let reference = format!("{}/team/casc:v1", registry.addr);
    registry.push("team/casc:v1", vec![file_layer("jenkins.yaml", "good")]).await;
    let fetcher = registry.fetcher();
    let good = fetcher.fetch(&oci_source(&reference)).await.expect("good");

    // The tag moves to content whose blob then rots in the registry's storage.
    let bad = file_layer("jenkins.yaml", "new content");
    let bad_digest = bad.sha256_digest();
    registry.push("team/casc:v1", vec![bad]).await;
    registry.corrupt_blob(&bad_digest);

    let fetched = fetcher.fetch_or_last_good(&oci_source(&reference)).await;
    assert!(fetched.is_stale());
    assert!(Arc::ptr_eq(fetched.artifact.as_ref().expect("kept"), &good));
    match fetched.error.expect("error") {
        SourceError::DigestMismatch { object, expected, actual, .. } => {
            assert!(object.contains("jenkins.yaml"), "{object}");
            assert_eq!(expected, bad_digest);
            assert_ne!(actual, bad_digest);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_manifest_that_does_not_match_its_digest_is_refused() {
    let registry = Registry::start();
    let digest = registry.push("team/casc:v1", vec![file_layer("jenkins.yaml", "one")]).await;
    // Still valid JSON, other bytes: the registry serves it under the old digest.
    let path = registry.blob_file(&digest);
    let mut manifest = std::fs::read(&path).expect("manifest");
    manifest.push(b' ');
    std::fs::write(&path, manifest).expect("write");

    for reference in [format!("{}/team/casc@{digest}", registry.addr), format!("{}/team/casc:v1", registry.addr)] {
        let error = registry.fetcher().fetch(&oci_source(&reference)).await.expect_err(&reference);
        match &error {
            SourceError::DigestMismatch { object, expected, .. } => {
                assert!(object.contains("manifest"), "{object}");
                assert_eq!(expected, &digest);
            }
            other => panic!("{reference}: {other:?}"),
        }
        assert!(error.to_string().contains(&reference), "{error}");
    }
}

#[tokio::test]
async fn a_tar_layer_is_unpacked_and_matches_the_same_files_from_git() {
    let registry = Registry::start();
    let entries =
        [("./jenkins.yaml", "jenkins:\n  systemMessage: one\n"), ("plugins/plugins.yaml", "plugins: [git]\n")];
    registry.push("team/tree:v1", vec![tar_gz_layer(&entries)]).await;
    let fetcher = registry.fetcher();
    let from_oci = fetcher.fetch(&oci_source(&format!("{}/team/tree:v1", registry.addr))).await.expect("tar layer");
    assert_eq!(
        from_oci.files,
        files(&[("jenkins.yaml", "jenkins:\n  systemMessage: one\n"), ("plugins/plugins.yaml", "plugins: [git]\n"),])
    );

    let repo = Repo::new();
    repo.write(&[
        ("casc/jenkins.yaml", "jenkins:\n  systemMessage: one\n"),
        ("casc/plugins/plugins.yaml", "plugins: [git]\n"),
    ]);
    repo.commit("same files");
    let from_git = fetcher.fetch(&git_source(&repo.url(), "main", "casc")).await.expect("git");
    assert_eq!(from_git.digest, from_oci.digest, "same files, same digest");

    // `oras push registry/repo:tag casc/`: a titled tar+gzip layer marked for unpacking, whose
    // entries keep the directory name.
    let directory = oci_client::client::ImageLayer {
        annotations: Some(std::collections::BTreeMap::from([
            ("org.opencontainers.image.title".to_string(), "casc".to_string()),
            ("io.deis.oras.content.unpack".to_string(), "true".to_string()),
        ])),
        ..tar_gz_layer(&[("casc/jenkins.yaml", "a"), ("casc/sub/plugins.yaml", "b")])
    };
    registry.push("team/dir:v1", vec![directory, file_layer("README.md", "c")]).await;
    let oras_dir = fetcher.fetch(&oci_source(&format!("{}/team/dir:v1", registry.addr))).await.expect("oras directory");
    assert_eq!(
        oras_dir.files,
        files(&[("README.md", "c"), ("casc/jenkins.yaml", "a"), ("casc/sub/plugins.yaml", "b")])
    );
}

#[tokio::test]
async fn unsafe_or_oversized_layers_are_refused() {
    let registry = Registry::start();
    registry.push("team/evil:v1", vec![tar_gz_layer(&[("../outside.yaml", "x")])]).await;
    let fetcher = registry.fetcher();
    let error = fetcher.fetch(&oci_source(&format!("{}/team/evil:v1", registry.addr))).await.expect_err("traversal");
    assert!(matches!(&error, SourceError::UnsafeContent { path, .. } if path == "../outside.yaml"), "{error:?}");

    registry.push("team/big:v1", vec![file_layer("big.yaml", &"x".repeat(2000))]).await;
    let small = Fetcher::new(
        FetchOptions { insecure_registries: vec![registry.addr.clone()], max_bytes: 1000, ..common::options() },
        None,
    );
    let error = small.fetch(&oci_source(&format!("{}/team/big:v1", registry.addr))).await.expect_err("too large");
    assert!(matches!(error, SourceError::TooLarge { limit: 1000, .. }), "{error:?}");
}

#[tokio::test]
async fn bad_references_and_unreachable_registries() {
    let fetcher = Fetcher::new(common::options(), None);
    for reference in ["", "reg.example/re po:tag", "reg.example/repo:", "reg.example/repo@sha256:abc"] {
        let error = fetcher.fetch(&oci_source(reference)).await.expect_err(reference);
        assert!(matches!(error, SourceError::InvalidReference { .. }), "{reference}: {error:?}");
    }
    // A port where nothing listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let addr = format!("127.0.0.1:{port}");
    let fetcher = Fetcher::new(FetchOptions { insecure_registries: vec![addr.clone()], ..common::options() }, None);
    let error = fetcher.fetch(&oci_source(&format!("{addr}/team/casc:v1"))).await.expect_err("nothing listens");
    assert!(matches!(error, SourceError::Unreachable { .. }), "{error:?}");
}
