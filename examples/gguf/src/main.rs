//! `tensorfmt-gguf`: the `tensorfmt` command line, over the built-in formats and GGUF.

fn main() -> std::process::ExitCode {
    let registry = tensorfmt_example_gguf::registry();
    let mut out = std::io::stdout().lock();
    tensorfmt::cli::run_with(&registry, std::env::args_os(), &mut out)
}
