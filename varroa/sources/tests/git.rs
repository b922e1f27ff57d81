//! Git inputs against real local repositories made with the `git` program (`file://` URLs).

mod common;

use std::sync::Arc;

use common::{Repo, files, git_source};
use varroa_sources::{FetchOptions, Fetcher, SourceError, files_digest};

fn fetcher() -> Fetcher {
    Fetcher::new(common::options(), None)
}

/// A repository with a `casc` directory, a README at the root, a lightweight tag `v1`, an
/// annotated tag `release` and the branch `main`, all on one commit.
fn casc_repo() -> (Repo, String) {
    let repo = Repo::new();
    repo.write(&[
        ("README.md", "readme"),
        ("casc/jenkins.yaml", "jenkins:\n  systemMessage: one\n"),
        ("casc/plugins/plugins.yaml", "plugins: [git]\n"),
    ]);
    let sha = repo.commit("one");
    repo.git(&["tag", "v1"]);
    repo.git(&["tag", "-a", "release", "-m", "release"]);
    (repo, sha)
}

#[tokio::test]
async fn branch_tag_annotated_tag_and_commit_give_the_same_files() {
    let (repo, sha) = casc_repo();
    let fetcher = fetcher();
    let expected =
        files(&[("jenkins.yaml", "jenkins:\n  systemMessage: one\n"), ("plugins/plugins.yaml", "plugins: [git]\n")]);
    for reference in ["main", "v1", "release", "refs/heads/main", "refs/tags/release", "HEAD", sha.as_str()] {
        let artifact = fetcher
            .fetch(&git_source(&repo.url(), reference, "casc"))
            .await
            .unwrap_or_else(|e| panic!("{reference}: {e}"));
        assert_eq!(artifact.revision, sha, "{reference}");
        assert_eq!(artifact.files, expected, "{reference}");
        assert_eq!(artifact.digest, files_digest(&expected), "{reference}");
    }

    // The root, written as "" or "." or with slashes, holds everything.
    for path in ["", ".", "/", "./casc/.."] {
        let source = git_source(&repo.url(), "main", path);
        let result = fetcher.fetch(&source).await;
        if path == "./casc/.." {
            assert!(
                matches!(result, Err(SourceError::InvalidReference { ref field, .. }) if field == "path"),
                "{result:?}"
            );
            continue;
        }
        let artifact = result.expect("root");
        assert_eq!(
            artifact.files.keys().collect::<Vec<_>>(),
            ["README.md", "casc/jenkins.yaml", "casc/plugins/plugins.yaml"]
        );
    }
    // A plain path works as well as a file:// URL.
    let plain = fetcher.fetch(&git_source(&repo.path().display().to_string(), "v1", "casc")).await.expect("plain path");
    assert_eq!(plain.files, expected);
}

#[tokio::test]
async fn a_moved_tag_gives_the_new_revision_and_content() {
    let (repo, first) = casc_repo();
    let fetcher = fetcher();
    let source = git_source(&repo.url(), "v1", "casc");
    let before = fetcher.fetch(&source).await.expect("first fetch");
    assert_eq!(before.revision, first);

    repo.write(&[("casc/jenkins.yaml", "jenkins:\n  systemMessage: two\n")]);
    let second = repo.commit("two");
    repo.git(&["tag", "-f", "v1"]);
    repo.git(&["tag", "-f", "-a", "release", "-m", "moved"]);

    let after = fetcher.fetch(&source).await.expect("after the move");
    assert_eq!(after.revision, second);
    assert_eq!(after.files["jenkins.yaml"], b"jenkins:\n  systemMessage: two\n".to_vec());
    assert_ne!(after.digest, before.digest);
    let annotated = fetcher.fetch(&git_source(&repo.url(), "release", "casc")).await.expect("annotated tag moved");
    assert_eq!(annotated.revision, second);
    assert_eq!(fetcher.stats().downloads, 2, "{:?}", fetcher.stats());
}

#[tokio::test]
async fn a_missing_ref_is_reported_and_the_last_good_artifact_kept() {
    let (repo, sha) = casc_repo();
    let fetcher = fetcher();

    // Never fetched: no artifact, the error names the ref and what was looked for.
    let never = fetcher.fetch_or_last_good(&git_source(&repo.url(), "no-such-branch", "casc")).await;
    assert!(never.artifact.is_none());
    let error = never.error.expect("error");
    assert!(matches!(error, SourceError::RefNotFound { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("\"no-such-branch\""), "{message}");
    assert!(message.contains(&repo.url()), "{message}");
    assert!(message.contains("refs/heads/no-such-branch"), "{message}");

    // Fetched once, then the tag is deleted: the last good artifact comes with the error.
    let source = git_source(&repo.url(), "v1", "casc");
    let good = fetcher.fetch_or_last_good(&source).await;
    assert!(good.error.is_none(), "{:?}", good.error);
    let good = good.artifact.expect("artifact");
    assert_eq!(good.revision, sha);

    repo.git(&["tag", "-d", "v1"]);
    let kept = fetcher.fetch_or_last_good(&source).await;
    assert!(kept.is_stale());
    assert!(Arc::ptr_eq(kept.artifact.as_ref().expect("kept"), &good));
    let error = kept.error.expect("error");
    assert!(matches!(&error, SourceError::RefNotFound { reference, .. } if reference == "ref \"v1\""), "{error:?}");
    assert!(error.to_string().contains("v1"), "{error}");

    // A commit that no branch or tag reaches.
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let error = fetcher.fetch(&git_source(&repo.url(), missing, "")).await.expect_err("missing commit");
    assert!(matches!(error, SourceError::RefNotFound { .. }), "{error:?}");
    assert!(error.to_string().contains(missing), "{error}");
    assert_eq!(fetcher.stats().failures, 3);
}

#[tokio::test]
async fn a_path_that_is_not_a_directory_is_reported() {
    let (repo, sha) = casc_repo();
    let fetcher = fetcher();
    for path in ["nope", "casc/jenkins.yaml"] {
        let error = fetcher.fetch(&git_source(&repo.url(), "main", path)).await.expect_err(path);
        match &error {
            SourceError::PathNotFound { path: p, revision, .. } => {
                assert_eq!(p, path);
                assert_eq!(revision, &sha);
            }
            other => panic!("{path}: {other:?}"),
        }
        assert!(error.to_string().contains(path), "{error}");
    }
}

#[tokio::test]
async fn the_same_revision_is_served_from_the_cache() {
    let (repo, sha) = casc_repo();
    let fetcher = fetcher();

    // A branch that did not move: resolved again, but not downloaded again.
    let branch = git_source(&repo.url(), "main", "casc");
    let first = fetcher.fetch(&branch).await.expect("first");
    let second = fetcher.fetch(&branch).await.expect("second");
    assert!(Arc::ptr_eq(&first, &second));
    let stats = fetcher.stats();
    assert_eq!((stats.downloads, stats.cache_hits), (1, 1), "{stats:?}");

    // A full sha needs no server at all once fetched: it survives the repository's deletion.
    let pinned = git_source(&repo.url(), &sha, "casc");
    let by_sha = fetcher.fetch(&pinned).await.expect("by sha");
    assert!(Arc::ptr_eq(&first, &by_sha), "same url, commit and path");
    drop(repo);
    let again = fetcher.fetch(&pinned).await.expect("cached sha after deletion");
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(fetcher.stats().downloads, 1);

    // The branch needs the server, which is gone: unreachable, last good kept.
    let gone = fetcher.fetch_or_last_good(&branch).await;
    assert!(matches!(gone.error, Some(SourceError::Unreachable { .. })), "{:?}", gone.error);
    assert!(Arc::ptr_eq(&gone.artifact.expect("last good"), &first));
}

#[tokio::test]
async fn an_on_disk_cache_serves_known_commits_without_the_server() {
    let (repo, sha) = casc_repo();
    let cache = tempfile::tempdir().expect("cache dir");
    let source = git_source(&repo.url(), "main", "casc");
    let first = Fetcher::new(common::options(), Some(cache.path().to_path_buf()));
    let artifact = first.fetch(&source).await.expect("fetch");

    // New commits arrive incrementally in the same clone.
    repo.write(&[("casc/more.yaml", "more: true\n")]);
    let second_sha = repo.commit("more");
    let updated = first.fetch(&source).await.expect("update");
    assert_eq!(updated.revision, second_sha);
    assert_eq!(updated.files.len(), 3);

    // A new fetcher (empty memory cache) on the same directory reads a known commit from disk.
    drop(repo);
    let fresh = Fetcher::new(common::options(), Some(cache.path().to_path_buf()));
    let from_disk = fresh.fetch(&git_source(&source_url(&source), &sha, "casc")).await.expect("from the disk cache");
    assert_eq!(from_disk.files, artifact.files);
    assert_eq!(from_disk.revision, sha);
}

fn source_url(source: &varroa_sources::Source) -> String {
    match source {
        varroa_sources::Source::Git(g) => g.url.clone(),
        varroa_sources::Source::Oci(_) => unreachable!(),
    }
}

#[tokio::test]
async fn symlinks_leaving_the_path_are_refused_and_others_left_out() {
    let repo = Repo::new();
    repo.write(&[("casc/jenkins.yaml", "a"), ("secret.txt", "secret")]);
    std::os::unix::fs::symlink("jenkins.yaml", repo.path().join("casc/inside")).expect("link");
    let sha = repo.commit("inside link");
    let fetcher = fetcher();
    let artifact = fetcher.fetch(&git_source(&repo.url(), &sha, "casc")).await.expect("inside link is fine");
    assert_eq!(artifact.files, files(&[("jenkins.yaml", "a")]));

    std::os::unix::fs::symlink("../secret.txt", repo.path().join("casc/escape")).expect("link");
    repo.commit("escaping link");
    let error = fetcher.fetch(&git_source(&repo.url(), "main", "casc")).await.expect_err("escaping link");
    match &error {
        SourceError::UnsafeContent { path, reason, .. } => {
            assert_eq!(path, "escape");
            assert!(reason.contains("../secret.txt"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // From the root, the same link stays inside the input.
    fetcher.fetch(&git_source(&repo.url(), "main", "")).await.expect("link inside the root");
}

#[tokio::test]
async fn content_over_the_limit_is_refused() {
    let repo = Repo::new();
    repo.write(&[("a.yaml", &"x".repeat(600)), ("b.yaml", &"y".repeat(600))]);
    repo.commit("big");
    let fetcher = Fetcher::new(FetchOptions { max_bytes: 1000, ..common::options() }, None);
    let error = fetcher.fetch(&git_source(&repo.url(), "main", "")).await.expect_err("too large");
    assert!(matches!(error, SourceError::TooLarge { limit: 1000, .. }), "{error:?}");
}

#[tokio::test]
async fn bad_inputs_are_rejected_before_any_fetch() {
    let fetcher = fetcher();
    for (url, reference, path, field) in [
        ("", "main", "", "url"),
        ("file:///tmp/x", "", "", "ref"),
        ("file:///tmp/x", "bad..name", "", "ref"),
        ("file:///tmp/x", "main", "../etc", "path"),
    ] {
        let error = fetcher.fetch(&git_source(url, reference, path)).await.expect_err(reference);
        match &error {
            SourceError::InvalidReference { field: f, .. } => assert_eq!(f, field, "{error}"),
            other => panic!("{other:?}"),
        }
    }
    let missing = tempfile::tempdir().expect("dir");
    let url = format!("file://{}/none", missing.path().display());
    let error = fetcher.fetch(&git_source(&url, "main", "")).await.expect_err("no repository");
    assert!(matches!(error, SourceError::Unreachable { .. }), "{error:?}");
    assert!(error.to_string().contains(&url), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fetches_of_one_source_download_once() {
    let (repo, sha) = casc_repo();
    let fetcher = fetcher();
    let source = git_source(&repo.url(), "main", "casc");
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (fetcher, source) = (fetcher.clone(), source.clone());
            tokio::spawn(async move { fetcher.fetch(&source).await })
        })
        .collect();
    let mut artifacts = Vec::new();
    for task in tasks {
        artifacts.push(task.await.expect("join").expect("fetch"));
    }
    assert!(artifacts.iter().all(|a| Arc::ptr_eq(a, &artifacts[0])));
    assert_eq!(artifacts[0].revision, sha);
    let stats = fetcher.stats();
    assert_eq!((stats.downloads, stats.cache_hits), (1, 3), "{stats:?}");
}

#[tokio::test]
async fn https_goes_through_rustls() {
    // Nothing listens on this port: the TLS client is built (rustls, ring provider) and the
    // connection is refused, reported as unreachable rather than a panic.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let url = format!("https://127.0.0.1:{port}/team/casc.git");
    let error = fetcher().fetch(&git_source(&url, "main", "")).await.expect_err("nothing listens");
    assert!(matches!(error, SourceError::Unreachable { .. }), "{error:?}");
    assert!(error.to_string().contains("Connection refused"), "{error}");
}
