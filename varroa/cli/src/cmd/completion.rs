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
    out!("{}", clikit::cli::completion_script(shell, &mut crate::cli::command(), "varroa"));
}
