//! The `tensorfmt` command line over the built-in formats and this crate's own.

fn main() -> std::process::ExitCode {
    let registry = tensorfmt_user_crate::registry();
    let mut out = std::io::stdout().lock();
    tensorfmt::cli::run_with(&registry, std::env::args_os(), &mut out)
}
