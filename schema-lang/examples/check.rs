//! Loads and checks schema files, printing every error.
fn main() {
    let paths: Vec<std::path::PathBuf> = std::env::args().skip(1).map(Into::into).collect();
    match tensorfmt_schema::load(&paths) {
        Ok(s) => println!("ok: {} formats", s.formats().count()),
        Err(d) => {
            println!("{d}");
            std::process::exit(1);
        }
    }
}
