#!/usr/bin/env bash
# install-vesperctl.sh: make vesperctl available to a CI job (used by action.yml).
#
# A vesperctl already on PATH is used as it is (a self-hosted runner or a job image may carry
# one). Otherwise the static Linux build of one pinned release is downloaded from the project's
# GitHub release and checked against the SHA-256 pinned by the caller (action.yml carries the
# version and its checksum) before it is made executable. There is no "latest": a release that
# changed after it was pinned is not installed.
#
# Settings, from the environment:
#   VESPERCTL_VERSION     the release, exactly: 0.1.0 or v0.1.0 (required)
#   VESPERCTL_SHA256      the SHA-256 of that release's vesperctl-x86_64-unknown-linux-musl, 64
#                         hex digits (required; SHA256SUMS of the release lists it)
#   VESPERCTL_REPOSITORY  the GitHub repository that publishes the releases (owner/name)
#   VESPERCTL_DOWNLOAD_URL  where releases are downloaded from (default https://github.com; a
#                         mirror of GitHub's release layout works too)
#   VESPERCTL_INSTALL_DIR where to put it (default $RUNNER_TEMP/vesperctl, else ~/.local/bin)
# Writes `path=<vesperctl>` to $GITHUB_OUTPUT and the directory to $GITHUB_PATH when they are set.
set -euo pipefail

log() { printf 'install-vesperctl: %s\n' "$*" >&2; }
die() {
  printf 'install-vesperctl: error: %s\n' "$*" >&2
  exit 1
}

found() {
  log "using $1 ($("$1" --version 2>/dev/null || echo 'version unknown'))"
  if [ -n "${GITHUB_OUTPUT:-}" ]; then
    printf 'path=%s\n' "$1" >>"$GITHUB_OUTPUT"
  fi
}

if existing=$(command -v vesperctl 2>/dev/null); then
  found "$existing"
  exit 0
fi

asset=vesperctl-x86_64-unknown-linux-musl
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64 | Linux/amd64) ;;
  *) die "no vesperctl release for $(uname -s)/$(uname -m) (only $asset): put vesperctl on PATH before this step (cargo install --path vesper/cli)" ;;
esac

repository=${VESPERCTL_REPOSITORY:?VESPERCTL_REPOSITORY (owner/name of the repository publishing vesperctl releases) is required}
download=${VESPERCTL_DOWNLOAD_URL:-https://github.com}
download=${download%/}
version=${VESPERCTL_VERSION:-}
version=${version#v}
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  die "VESPERCTL_VERSION must be one release, like 0.1.0 (got '${VESPERCTL_VERSION:-}'): pinned versions only, never latest"
sha256=${VESPERCTL_SHA256:-}
sha256=$(printf '%s' "$sha256" | tr 'A-F' 'a-f')
[[ "$sha256" =~ ^[0-9a-f]{64}$ ]] ||
  die "VESPERCTL_SHA256 must be the SHA-256 of $asset $version (64 hex digits, from the release's SHA256SUMS; got '${VESPERCTL_SHA256:-}')"
base="$download/$repository/releases/download/v$version"

dir=${VESPERCTL_INSTALL_DIR:-}
if [ -z "$dir" ]; then
  if [ -n "${RUNNER_TEMP:-}" ]; then dir="$RUNNER_TEMP/vesperctl"; else dir="$HOME/.local/bin"; fi
fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

log "downloading $asset $version from $base"
# --location: GitHub answers release downloads with a redirect to its storage.
curl --fail --silent --show-error --location --retry 3 --connect-timeout 10 -o "$tmp/$asset" "$base/$asset" ||
  die "could not download $base/$asset (is $version a release of $repository?)"

# The pinned checksum, in sha256sum's own format ("<hash>  <name>").
printf '%s  %s\n' "$sha256" "$asset" >"$tmp/expected"
(cd "$tmp" && sha256sum --check --status expected) ||
  die "the checksum of $asset $version ($(sha256sum "$tmp/$asset" | cut -d' ' -f1)) does not match the pinned VESPERCTL_SHA256 $sha256: not installed"

install -m 0755 "$tmp/$asset" "$dir/vesperctl"
if [ -n "${GITHUB_PATH:-}" ]; then
  printf '%s\n' "$dir" >>"$GITHUB_PATH"
fi
found "$dir/vesperctl"
