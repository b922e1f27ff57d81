//! `varroa`: parse, run, exit with the code of the outcome (0 success, 1 failure, 2 usage,
//! 3 timeout).

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = varroa_cli::cli::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(varroa_cli::error::EXIT_FAILURE);
        }
    };
    match runtime.block_on(varroa_cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
