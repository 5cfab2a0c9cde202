//! The language reference embeds every schema verbatim; this keeps the copies true.

use std::path::PathBuf;

#[test]
fn reference_embeds_every_schema_verbatim() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/fmt-language.md")).unwrap();
    let mut n = 0;
    for dir in ["formats/fmt", "docs/formats"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "fmt") {
                let text = std::fs::read_to_string(&p).unwrap();
                assert!(
                    doc.contains(text.trim_end()),
                    "docs/fmt-language.md does not contain {} verbatim",
                    p.display()
                );
                n += 1;
            }
        }
    }
    assert_eq!(n, 11);
}
