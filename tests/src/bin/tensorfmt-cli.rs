//! The `tensorfmt` command line built inside the test crate, so that its integration
//! tests can run it as a child process (`CARGO_BIN_EXE_tensorfmt-cli`) and measure it:
//! the same entry point as `formats/src/main.rs`.

fn main() -> std::process::ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    tensorfmt::cli::run(std::env::args_os(), &mut out)
}
