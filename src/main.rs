//! The `virt-launcher` binary; everything lives in the library.

use std::panic;

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let code = match panic::catch_unwind(|| virt_launcher::launcher::main(argv)) {
        Ok(code) => code,
        Err(payload) => {
            eprintln!(
                "virt-launcher: internal error: {}",
                virt_launcher::threads::panic_message(&payload)
            );
            virt_launcher::exit::ExitCode::Internal.code()
        }
    };
    std::process::exit(code);
}
