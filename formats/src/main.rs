//! The `tensorfmt` command-line tool: inspect, convert, verify and diff tensor files.

fn main() -> std::process::ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    tensorfmt::cli::run(std::env::args_os(), &mut out)
}
