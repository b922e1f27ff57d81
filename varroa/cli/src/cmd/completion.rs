//! `completion bash|zsh|fish`: a completion script on stdout.
//!
//! ```sh
//! source <(varroa completion bash)                          # bash, this shell
//! varroa completion zsh > "${fpath[1]}/_varroa"             # zsh
//! varroa completion fish > ~/.config/fish/completions/varroa.fish
//! ```

use clap_complete::Shell;

/// Print the script for `shell`.
pub fn run(shell: Shell) {
    let mut cmd = crate::cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "varroa", &mut script);
    out!("{}", String::from_utf8_lossy(&script));
}
