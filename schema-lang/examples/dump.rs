//! Prints the AST of a schema file.
fn main() {
    let p = std::path::PathBuf::from(std::env::args().nth(1).expect("path"));
    let src = std::fs::read_to_string(&p).unwrap();
    match tensorfmt_schema::parse(&p, &src) {
        Ok(f) => println!("{f:#?}"),
        Err(d) => eprintln!("{}", d.render_with(|_| Some(src.as_str()))),
    }
}
