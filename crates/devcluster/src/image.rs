//! Container images as a node sees them: a reference normalized as container runtimes report it
//! (`nginx:1.27` -> `docker.io/library/nginx:1.27`, with an image ID), the container IDs a
//! runtime hands out, and the process runtime's `IMAGE=EXECUTABLE` rules (`--run`,
//! `Options::run`) that match images as written or normalized. Plain data and functions: the
//! options name the rules, and both the simulated kubelet (src/controllers/kubelet.rs) and the
//! process runtime (src/runtime/) report images and containers the same way.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Lower-case hex of the SHA-256 of a string.
fn hex_sha256(data: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// `nginx:1.27` -> (`docker.io/library/nginx`, `:1.27` or `@sha256:...` suffix), as container
/// runtimes normalize image references.
pub(crate) fn normalize_image(image: &str) -> (String, String) {
    let (name, suffix) = match image.find('@') {
        Some(i) => (&image[..i], image[i..].to_string()),
        None => {
            let last_slash = image.rfind('/').map_or(0, |i| i + 1);
            match image[last_slash..].find(':') {
                Some(c) => (&image[..last_slash + c], image[last_slash + c..].to_string()),
                None => (image, ":latest".to_string()),
            }
        }
    };
    let first = name.split('/').next().unwrap_or("");
    let has_registry = name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    (full, suffix)
}

/// The image and imageID a runtime reports for a container image.
pub(crate) fn image_and_id(image: &str) -> (String, String) {
    let (repo, suffix) = normalize_image(image);
    let id = if let Some(digest) = suffix.strip_prefix('@') {
        format!("{repo}@{digest}")
    } else {
        format!("{repo}@sha256:{}", hex_sha256(image))
    };
    (format!("{repo}{suffix}"), id)
}

/// The ID a runtime reports for a container instance: `containerd://` and a digest of the pod,
/// container and instance (the restart count), stable for one instance.
pub(crate) fn container_id(pod_uid: &str, name: &str, instance: i64) -> String {
    format!("containerd://{}", hex_sha256(&format!("{pod_uid}/{name}/{instance}")))
}

/// `IMAGE=EXECUTABLE`: containers of IMAGE (a prefix when it ends in `*`) run EXECUTABLE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRule {
    pub image: String,
    pub executable: PathBuf,
}

impl RunRule {
    pub fn new(image: impl Into<String>, executable: impl Into<PathBuf>) -> RunRule {
        RunRule { image: image.into(), executable: executable.into() }
    }

    fn matches_one(&self, image: &str) -> bool {
        match self.image.strip_suffix('*') {
            Some(prefix) => image.starts_with(prefix),
            None => image == self.image,
        }
    }

    /// Whether the rule matches an image as written or in its normalized form
    /// (`nginx` -> `docker.io/library/nginx:latest`).
    pub fn matches(&self, image: &str) -> bool {
        self.matches_one(image) || self.matches_one(&image_and_id(image).0)
    }
}

impl fmt::Display for RunRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.image, self.executable.display())
    }
}

impl FromStr for RunRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (image, exe) = s.split_once('=').ok_or_else(|| {
            format!("run rule {s:?}: expected IMAGE=EXECUTABLE, e.g. example.com/app:*=/usr/local/bin/app")
        })?;
        if image.is_empty() {
            return Err(format!("run rule {s:?}: the image pattern is empty"));
        }
        if exe.is_empty() {
            return Err(format!("run rule {s:?}: the executable is empty"));
        }
        Ok(RunRule::new(image, exe))
    }
}

/// The executable of the first rule matching an image.
pub fn find(rules: &[RunRule], image: &str) -> Option<PathBuf> {
    rules.iter().find(|r| r.matches(image)).map(|r| r.executable.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_normalize_like_container_runtimes() {
        assert_eq!(normalize_image("nginx:1.27"), ("docker.io/library/nginx".into(), ":1.27".into()));
        assert_eq!(normalize_image("nginx"), ("docker.io/library/nginx".into(), ":latest".into()));
        assert_eq!(normalize_image("ghcr.io/a/b:v1"), ("ghcr.io/a/b".into(), ":v1".into()));
        assert_eq!(normalize_image("team/app:v1"), ("docker.io/team/app".into(), ":v1".into()));
        assert_eq!(normalize_image("localhost:5000/app"), ("localhost:5000/app".into(), ":latest".into()));
        let (img, id) = image_and_id("ghcr.io/a/b@sha256:abc");
        assert_eq!((img.as_str(), id.as_str()), ("ghcr.io/a/b@sha256:abc", "ghcr.io/a/b@sha256:abc"));
        let (_, id) = image_and_id("nginx:1.27");
        assert!(
            id.starts_with("docker.io/library/nginx@sha256:")
                && id.len() == "docker.io/library/nginx@sha256:".len() + 64
        );
    }

    #[test]
    fn rules_parse_and_match_written_and_normalized_images() {
        let r: RunRule = "example.com/app*=/bin/app".parse().unwrap();
        assert!(r.matches("example.com/app:v1"));
        assert!(!r.matches("example.org/app:v1"));
        let n: RunRule = "docker.io/library/busybox:latest=/bin/true".parse().unwrap();
        assert!(n.matches("busybox"));
        assert!(!n.matches("busybox:1.36"));
        assert!("=x".parse::<RunRule>().is_err());
        assert!("img".parse::<RunRule>().is_err());
        assert!("img=".parse::<RunRule>().is_err());
        assert_eq!(find(&[r, n], "busybox"), Some(PathBuf::from("/bin/true")));
    }
}
