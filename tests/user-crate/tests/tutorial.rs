//! `docs/your-own-format.md` shows this crate's files and the checker's reports of the
//! mistakes it describes: this keeps the page true. Each block after `<!-- file: PATH -->`
//! is the file at PATH (from the repository root); each one-line block after
//! `<!-- mistake -->` replaces the line of `fmt/tta.fmt` that declares the same field,
//! and the `text` block after it is what the checker then reports.
//! `UPDATE_EXPECT=1` rewrites those `text` blocks from the checker.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced block that starts at or after line `from`: its first content line's index
/// and its lines.
fn block(lines: &[&str], from: usize) -> (usize, usize, Vec<String>) {
    let open = (from..lines.len())
        .find(|&i| lines[i].starts_with("```"))
        .expect("a fenced block");
    let close = (open + 1..lines.len())
        .find(|&i| lines[i].starts_with("```"))
        .expect("the block's end");
    (
        open,
        close,
        lines[open + 1..close]
            .iter()
            .map(|l| l.to_string())
            .collect(),
    )
}

/// What the checker reports for `fmt/tta.fmt` with `line` in place of the line declaring
/// the same field.
fn report(tta: &str, line: &str) -> String {
    let field = |l: &str| l.trim().split(':').next().unwrap_or("").to_string();
    let want = field(line);
    let mut found = 0;
    let text: Vec<&str> = tta
        .lines()
        .map(|l| {
            if !l.trim_start().starts_with("//") && field(l) == want {
                found += 1;
                line
            } else {
                l
            }
        })
        .collect();
    assert_eq!(found, 1, "fmt/tta.fmt declares '{want}' once");
    let text = text.join("\n") + "\n";
    let path = Path::new("fmt/tta.fmt");
    let file = tensorfmt_schema::parse(path, &text).expect("the mistake parses");
    let files = [file];
    let d = tensorfmt_schema::check(&files);
    assert!(!d.is_empty(), "no error for `{}`", line.trim());
    d.with_sources(&files).trim_end().to_string()
}

#[test]
fn the_tutorial_shows_the_crate_and_the_checker_as_they_are() {
    let doc_path = root().join("docs/your-own-format.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let tta = std::fs::read_to_string(root().join("tests/user-crate/fmt/tta.fmt")).unwrap();
    let lines: Vec<&str> = doc.lines().collect();
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut out: Vec<String> = Vec::new();
    let (mut files, mut mistakes) = (0, 0);
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        out.push(l.to_string());
        if let Some(path) = l
            .strip_prefix("<!-- file: ")
            .and_then(|r| r.strip_suffix(" -->"))
        {
            let (open, close, got) = block(&lines, i + 1);
            let want = std::fs::read_to_string(root().join(path)).unwrap();
            assert_eq!(
                got.join("\n"),
                want.trim_end(),
                "docs/your-own-format.md does not show {path} as it is"
            );
            out.extend(lines[i + 1..=close].iter().map(|l| l.to_string()));
            let _ = open;
            files += 1;
            i = close + 1;
            continue;
        }
        if l == "<!-- mistake -->" {
            let (_, close, got) = block(&lines, i + 1);
            assert_eq!(got.len(), 1, "a mistake is one line");
            out.extend(lines[i + 1..=close].iter().map(|l| l.to_string()));
            let want = report(&tta, &got[0]);
            // The report: the next `text` block (or, to be filled in, a placeholder line).
            let next = (close + 1..lines.len())
                .find(|&j| !lines[j].trim().is_empty())
                .expect("the report after a mistake");
            out.extend(lines[close + 1..next].iter().map(|l| l.to_string()));
            let end = if lines[next].starts_with("```text") {
                let (_, end, shown) = block(&lines, next);
                if !update {
                    assert_eq!(
                        shown.join("\n"),
                        want,
                        "docs/your-own-format.md: the report of `{}` (UPDATE_EXPECT=1 refreshes it)",
                        got[0].trim()
                    );
                }
                end
            } else {
                assert!(
                    update,
                    "no `text` block after the mistake `{}`",
                    got[0].trim()
                );
                next
            };
            out.push("```text".to_string());
            out.push(want);
            out.push("```".to_string());
            mistakes += 1;
            i = end + 1;
            continue;
        }
        i += 1;
    }
    assert_eq!((files, mistakes), (4, 3));
    if update {
        std::fs::write(&doc_path, out.join("\n") + "\n").unwrap();
    }
}
