//! `completion bash|zsh|fish`: a completion script on stdout.
//!
//! ```sh
//! source <(vesperctl completion bash)                        # bash, this shell
//! vesperctl completion zsh > "${fpath[1]}/_vesperctl"          # zsh
//! vesperctl completion fish > ~/.config/fish/completions/vesperctl.fish
//! ```

use clap_complete::Shell;

pub fn run(shell: Shell, plugin: bool) {
    let mut cmd = crate::cli::command(plugin);
    let bin = if plugin { crate::cli::PLUGIN_NAME } else { "vesperctl" };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, bin, &mut script);
    out!("{}", String::from_utf8_lossy(&script));
}
