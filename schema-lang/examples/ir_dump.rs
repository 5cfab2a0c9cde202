//! Prints the IR dump of the schema files given on the command line.

fn main() {
    let paths: Vec<std::path::PathBuf> = std::env::args().skip(1).map(Into::into).collect();
    match tensorfmt_schema::load(&paths) {
        Ok(s) => print!("{}", tensorfmt_schema::ir::dump(&s.ir())),
        Err(d) => {
            eprintln!("{}", d.render_with(|_| None));
            std::process::exit(1);
        }
    }
}
