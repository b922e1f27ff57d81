#!/usr/bin/env bash
# Install what `make test` and `make demo` need and a fresh machine may lack. Safe to run again:
# each step checks first.
set -euo pipefail

need_apt=()
command -v kubectl >/dev/null 2>&1 || { echo "kubectl is required (expected at /usr/bin/kubectl)" >&2; exit 1; }

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required: install Rust with rustup (the toolchain is pinned in rust-toolchain.toml)" >&2
  exit 1
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "installing cargo-nextest"
  cargo install cargo-nextest --locked
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi
