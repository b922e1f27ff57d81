//! `completion bash|zsh|fish`: a completion script on stdout.
//!
//! ```sh
//! source <(vesperctl completion bash)                        # bash, this shell
//! vesperctl completion zsh > "${fpath[1]}/_vesperctl"          # zsh
//! vesperctl completion fish > ~/.config/fish/completions/vesperctl.fish
//! ```

use clap_complete::Shell;

pub fn run(shell: Shell, plugin: bool) {
    let bin = if plugin { crate::cli::PLUGIN_NAME } else { "vesperctl" };
    out!("{}", clikit::cli::completion_script(shell, &mut crate::cli::command(plugin), bin));
}
