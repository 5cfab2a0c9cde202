//! Figures of the code generated for the built-in schemas, printed and ratcheted.
//!
//! The generator is being redesigned so that generated code holds only the format's data
//! and small functions, with the engine loops in the runtime. This test measures how far
//! the generated code is from that, so that every change can see (and cannot worsen) it.
//!
//! The schemas are loaded as `formats/build.rs` loads them (the files of its `SCHEMAS`
//! list, together, in its order) and generated as it writes them ([`generate_file`]:
//! formatted with `prettyplease`). The output is parsed with `syn` and split on its
//! top-level `pub mod <format>` modules; lines are those of the formatted text (token
//! spans, with `proc-macro2`'s `span-locations`). Per `.fmt` file (a file holding several
//! formats counts their modules together) and in total, it measures:
//!
//! - `.fmt`: the non-empty lines of the schema file;
//! - `generated`: the non-empty generated lines (the total also counts what lies outside
//!   the modules: the header and `REGISTRY`);
//! - `ratio`: generated lines per `.fmt` line;
//! - `longest fn`: the longest generated function, from its `fn` line to its closing
//!   brace (free functions, methods in impls and traits, and functions nested in
//!   function bodies, whose lines also count in their parent's);
//! - `>150`: how many functions are longer than [`TARGET_FN_LINES`];
//! - `closures`: immediately-called closures, `(|| { ... })()` or `(move |x| ...)(a)`;
//! - `allows`: `#[allow(...)]` / `#![allow(...)]` attributes;
//! - `(((`: occurrences of triple parentheses in the generated text.
//!
//! The targets: no function longer than 150 lines, at most 4 generated lines per `.fmt`
//! line, and code that reads like hand-written code (no immediately-called closures, no
//! `#[allow]`, no `(((`). They are not met yet; the `MAX_*` constants record today's
//! figures and the test fails when a figure gets worse than its constant. When a figure
//! improves, lower its constant to the new value (the test prints which), so that the
//! figures can only improve until they reach the targets.
//!
//! Run `cargo test -p tensorfmt-codegen --test figures -- --nocapture` to see the table;
//! with `FIGURES_OUT=<path>`, the generated text measured is also written to that file.
//!
//! [`generate_file`]: tensorfmt_codegen::generate_file

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;

/// Target: no generated function longer than this many lines.
const TARGET_FN_LINES: usize = 150;
/// Target: at most this many generated lines per `.fmt` line.
const TARGET_RATIO: f64 = 4.0;

// The ratchet: today's figures, never to be exceeded. Lower them when the code improves.
/// The longest generated function, in lines.
const MAX_LONGEST_FN: usize = 93;
/// Generated functions longer than [`TARGET_FN_LINES`].
const MAX_FNS_OVER_TARGET: usize = 0;
/// Generated lines per `.fmt` line, in total (rounded up to one decimal).
const MAX_RATIO: f64 = 3.9;
/// Immediately-called closures.
const MAX_CLOSURES: usize = 0;
/// `#[allow(...)]` attributes.
const MAX_ALLOWS: usize = 0;
/// `(((` in the generated text.
const MAX_TRIPLE_PARENS: usize = 0;

/// The targets, for the table and the assertion messages.
fn targets() -> String {
    format!(
        "targets: no function over {TARGET_FN_LINES} lines, at most {TARGET_RATIO} generated \
         lines per .fmt line, zero immediately-called closures, zero #[allow] attributes, \
         zero `(((`"
    )
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The schema files `formats/build.rs` compiles, in its order: the first element of each
/// tuple of its `SCHEMAS` constant, relative to `formats/`.
fn built_in_schemas() -> Vec<String> {
    let path = root().join("formats/build.rs");
    let src = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let file = syn::parse_file(&src).expect("formats/build.rs parses");
    let list = file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Const(c) if c.ident == "SCHEMAS" => Some(&*c.expr),
            _ => None,
        })
        .expect("formats/build.rs has a `const SCHEMAS`");
    let syn::Expr::Reference(syn::ExprReference { expr: list, .. }) = list else {
        panic!("SCHEMAS is `&[(path, feature), ...]`");
    };
    let syn::Expr::Array(list) = &**list else {
        panic!("SCHEMAS is `&[(path, feature), ...]`");
    };
    let mut paths: Vec<String> = Vec::new();
    for entry in &list.elems {
        let syn::Expr::Tuple(t) = entry else {
            panic!("SCHEMAS entries are `(path, feature)` tuples");
        };
        let Some(syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        })) = t.elems.first()
        else {
            panic!("SCHEMAS entries start with a string literal");
        };
        if !paths.contains(&s.value()) {
            paths.push(s.value());
        }
    }
    paths
}

/// A generated function: its path (`module::Type::method`, `module::outer::inner`) and
/// its lines.
#[derive(Debug, Clone, PartialEq)]
struct Function {
    name: String,
    lines: usize,
}

/// The figures of some generated code.
#[derive(Debug, Clone, Default)]
struct Figures {
    fmt_lines: usize,
    generated_lines: usize,
    functions: Vec<Function>,
    closures: usize,
    allows: usize,
    triple_parens: usize,
}

impl Figures {
    /// The figures of `items`, which lie on the (1-based) `lines` of `text`.
    fn measure(text: &str, lines: RangeInclusive<usize>, items: &[syn::Item]) -> Figures {
        let text_lines: Vec<&str> = text
            .lines()
            .skip(lines.start() - 1)
            .take(lines.end() + 1 - lines.start())
            .collect();
        let mut f = Figures {
            generated_lines: text_lines.iter().filter(|l| !l.trim().is_empty()).count(),
            triple_parens: text_lines.iter().map(|l| l.matches("(((").count()).sum(),
            ..Figures::default()
        };
        item_functions(items, "", &mut f.functions);
        for item in items {
            f.scan_tokens(item.to_token_stream());
        }
        f
    }

    /// Counts the immediately-called closures and `allow` attributes in `tokens`.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tts: Vec<TokenTree> = tokens.into_iter().collect();
        for (i, tt) in tts.iter().enumerate() {
            let TokenTree::Group(g) = tt else { continue };
            let called = matches!(tts.get(i + 1), Some(TokenTree::Group(args))
                if args.delimiter() == Delimiter::Parenthesis);
            if g.delimiter() == Delimiter::Parenthesis && called && is_closure(g.stream()) {
                self.closures += 1;
            }
            let is_punct = |back: usize, c: char| {
                let t = i.checked_sub(back).and_then(|j| tts.get(j));
                matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c)
            };
            // `#[...]` or `#![...]`.
            let attribute = is_punct(1, '#') || (is_punct(1, '!') && is_punct(2, '#'));
            let first = g.stream().into_iter().next();
            if g.delimiter() == Delimiter::Bracket
                && attribute
                && matches!(first, Some(TokenTree::Ident(id)) if id == "allow")
            {
                self.allows += 1;
            }
            self.scan_tokens(g.stream());
        }
    }

    fn add(&mut self, other: Figures) {
        self.fmt_lines += other.fmt_lines;
        self.generated_lines += other.generated_lines;
        self.functions.extend(other.functions);
        self.closures += other.closures;
        self.allows += other.allows;
        self.triple_parens += other.triple_parens;
    }

    fn ratio(&self) -> f64 {
        self.generated_lines as f64 / self.fmt_lines as f64
    }

    /// The longest function (the first of the longest ones).
    fn longest(&self) -> Option<&Function> {
        self.functions
            .iter()
            .rev()
            .max_by_key(|f| f.lines)
            .filter(|f| f.lines > 0)
    }

    fn longest_lines(&self) -> usize {
        self.longest().map_or(0, |f| f.lines)
    }

    fn functions_over(&self, limit: usize) -> usize {
        self.functions.iter().filter(|f| f.lines > limit).count()
    }
}

/// Whether a parenthesized group holds a closure: `|..| ...`, `move |..| ...`.
fn is_closure(tokens: TokenStream) -> bool {
    let first = tokens
        .into_iter()
        .find(|t| !matches!(t, TokenTree::Ident(id) if id == "move" || id == "async"));
    matches!(first, Some(TokenTree::Punct(p)) if p.as_char() == '|')
}

/// The functions of `items` (and of the modules, impls and traits among them), each with
/// the functions nested in its body.
fn item_functions(items: &[syn::Item], prefix: &str, out: &mut Vec<Function>) {
    for item in items {
        match item {
            syn::Item::Fn(f) => function(prefix, &f.sig, &f.block, out),
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    let prefix = format!("{prefix}{}::", m.ident.unraw());
                    item_functions(items, &prefix, out);
                }
            }
            syn::Item::Impl(i) => {
                let ty = match &*i.self_ty {
                    syn::Type::Path(p) => p
                        .path
                        .segments
                        .last()
                        .map_or_else(String::new, |s| s.ident.unraw().to_string()),
                    other => other.to_token_stream().to_string(),
                };
                let prefix = format!("{prefix}{ty}::");
                for item in &i.items {
                    if let syn::ImplItem::Fn(f) = item {
                        function(&prefix, &f.sig, &f.block, out);
                    }
                }
            }
            syn::Item::Trait(t) => {
                let prefix = format!("{prefix}{}::", t.ident.unraw());
                for item in &t.items {
                    if let syn::TraitItem::Fn(syn::TraitItemFn {
                        sig,
                        default: Some(block),
                        ..
                    }) = item
                    {
                        function(&prefix, sig, block, out);
                    }
                }
            }
            _ => {}
        }
    }
}

/// One function, from its `fn` line to its closing brace, then those nested in its body.
fn function(prefix: &str, sig: &syn::Signature, block: &syn::Block, out: &mut Vec<Function>) {
    let name = format!("{prefix}{}", sig.ident.unraw());
    let start = sig.fn_token.span.start().line;
    let end = block.brace_token.span.close().end().line;
    out.push(Function {
        name: name.clone(),
        lines: end + 1 - start,
    });
    nested_functions(&block.to_token_stream(), &name, out);
}

/// The functions nested (at any depth) in a function body's tokens: `fn name ... { .. }`.
fn nested_functions(tokens: &TokenStream, parent: &str, out: &mut Vec<Function>) {
    let tts: Vec<TokenTree> = tokens.clone().into_iter().collect();
    let mut i = 0;
    while i < tts.len() {
        match (&tts[i], tts.get(i + 1)) {
            (TokenTree::Ident(kw), Some(TokenTree::Ident(name))) if kw == "fn" => {
                // The body: the first brace group before a `;` (a declaration has none).
                let body = tts[i + 2..].iter().enumerate().find_map(|(j, t)| match t {
                    TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => Some(Some((j, g))),
                    TokenTree::Punct(p) if p.as_char() == ';' => Some(None),
                    _ => None,
                });
                if let Some(Some((j, g))) = body {
                    let name = format!("{parent}::{}", name.unraw());
                    let start = kw.span().start().line;
                    let end = g.span().end().line;
                    out.push(Function {
                        name: name.clone(),
                        lines: end + 1 - start,
                    });
                    nested_functions(&g.stream(), &name, out);
                    i += 2 + j + 1;
                    continue;
                }
            }
            (TokenTree::Group(g), _) => nested_functions(&g.stream(), parent, out),
            _ => {}
        }
        i += 1;
    }
}

/// The first and last lines of an item (its attributes and doc comments included).
fn item_lines(item: &syn::Item) -> RangeInclusive<usize> {
    let tokens: Vec<TokenTree> = item.to_token_stream().into_iter().collect();
    let first = tokens.first().expect("an item has tokens").span();
    let last = tokens.last().expect("an item has tokens").span();
    first.start().line..=last.end().line
}

/// A `.fmt` file's row of the table.
struct Row {
    file: String,
    formats: Vec<String>,
    figures: Figures,
}

fn print_table(rows: &[Row], other: &Figures, total: &Figures) {
    println!(
        "{:<30} {:<28} {:>5} {:>9} {:>6}  {:<44} {:>5} {:>8} {:>6} {:>4}",
        "file",
        "formats",
        ".fmt",
        "generated",
        "ratio",
        "longest fn (lines)",
        ">150",
        "closures",
        "allows",
        "((("
    );
    let line = |name: &str, formats: &str, f: &Figures, fmt: String, ratio: String| {
        let longest = f
            .longest()
            .map_or_else(|| "-".to_string(), |l| format!("{} ({})", l.name, l.lines));
        println!(
            "{:<30} {:<28} {:>5} {:>9} {:>6}  {:<44} {:>5} {:>8} {:>6} {:>4}",
            name,
            formats,
            fmt,
            f.generated_lines,
            ratio,
            longest,
            f.functions_over(TARGET_FN_LINES),
            f.closures,
            f.allows,
            f.triple_parens
        );
    };
    for r in rows {
        let f = &r.figures;
        let fmt = f.fmt_lines.to_string();
        line(
            &r.file,
            &r.formats.join(", "),
            f,
            fmt,
            format!("{:.1}", f.ratio()),
        );
    }
    line(
        "(outside the modules)",
        "header, REGISTRY",
        other,
        "-".into(),
        "-".into(),
    );
    let fmt = total.fmt_lines.to_string();
    line("total", "", total, fmt, format!("{:.2}", total.ratio()));
    println!("functions over {TARGET_FN_LINES} lines:");
    for f in total.functions.iter().filter(|f| f.lines > TARGET_FN_LINES) {
        println!("  {} ({})", f.name, f.lines);
    }
    println!("{}", targets());
}

#[test]
fn generated_code_figures_only_improve() {
    // Load and generate as formats/build.rs does.
    let files = built_in_schemas();
    assert!(!files.is_empty(), "formats/build.rs lists no schema");
    let paths: Vec<PathBuf> = files
        .iter()
        .map(|f| root().join("formats").join(f))
        .collect();
    let schema = tensorfmt_schema::load(&paths).unwrap_or_else(|d| panic!("{d}"));
    let text = tensorfmt_codegen::generate_file(&schema)
        .unwrap_or_else(|d| panic!("{}", d.with_sources(&schema.files)));
    if let Some(out) = std::env::var_os("FIGURES_OUT") {
        std::fs::write(&out, &text).expect("FIGURES_OUT is writable");
    }
    let file = syn::parse_file(&text).expect("the generated text parses");

    // The top-level `pub mod <format>` modules, by name.
    let modules: Vec<(String, &syn::Item)> = file
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) if m.content.is_some() => Some((m.ident.unraw().to_string(), item)),
            _ => None,
        })
        .collect();

    // One row per schema file, with its formats' modules.
    let mut rows = Vec::new();
    let mut found = Vec::new();
    for (path, f) in paths.iter().zip(&schema.files) {
        let mut figures = Figures {
            fmt_lines: f.source.lines().filter(|l| !l.trim().is_empty()).count(),
            ..Figures::default()
        };
        assert!(figures.fmt_lines > 0, "{} is empty", path.display());
        let mut formats = Vec::new();
        for format in &f.formats {
            let module: String = format
                .name
                .name
                .chars()
                .map(|c| {
                    if c.is_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let matching: Vec<&&syn::Item> = modules
                .iter()
                .filter(|(name, _)| *name == module)
                .map(|(_, item)| item)
                .collect();
            let [item] = matching[..] else {
                panic!(
                    "format `{}` of {}: expected one `pub mod {module}` in the generated code, \
                     found {}",
                    format.name.name,
                    path.display(),
                    matching.len()
                );
            };
            let m = Figures::measure(&text, item_lines(item), std::slice::from_ref(*item));
            assert!(m.generated_lines > 0, "`pub mod {module}` has no lines");
            assert!(
                !m.functions.is_empty(),
                "`pub mod {module}` has no functions"
            );
            figures.add(m);
            formats.push(module.clone());
            found.push(module);
        }
        let name = Path::new("formats").join(path.strip_prefix(root().join("formats")).unwrap());
        rows.push(Row {
            file: name.display().to_string(),
            formats,
            figures,
        });
    }
    assert_eq!(
        found.len(),
        modules.len(),
        "every top-level module of the generated code is a format of the schemas: \
         formats {found:?}, modules {:?}",
        modules.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );

    // The total: the whole text (the modules and what lies outside them).
    let mut total = Figures::measure(&text, 1..=text.lines().count(), &file.items);
    total.fmt_lines = rows.iter().map(|r| r.figures.fmt_lines).sum();
    let mut in_modules = Figures::default();
    for r in &rows {
        in_modules.add(r.figures.clone());
    }
    assert!(
        in_modules.generated_lines < total.generated_lines
            && in_modules.functions.len() <= total.functions.len()
            && in_modules.closures <= total.closures
            && in_modules.allows <= total.allows
            && in_modules.triple_parens <= total.triple_parens,
        "the modules' figures add up to more than the whole text's: {in_modules:?}"
    );
    let other = Figures {
        fmt_lines: 0,
        generated_lines: total.generated_lines - in_modules.generated_lines,
        functions: total
            .functions
            .iter()
            .filter(|f| !in_modules.functions.contains(f))
            .cloned()
            .collect(),
        closures: total.closures - in_modules.closures,
        allows: total.allows - in_modules.allows,
        triple_parens: total.triple_parens - in_modules.triple_parens,
    };
    assert!(total.fmt_lines > 0 && total.generated_lines > 0 && total.longest_lines() > 0);

    print_table(&rows, &other, &total);

    // The ratchet: each figure as measured, as it would be recorded, and its constant.
    let ratio_recorded = (total.ratio() * 10.0).ceil() / 10.0;
    let count = |n: usize| (n as f64, n as f64, n.to_string());
    let figures = [
        (
            "longest function (lines)",
            count(total.longest_lines()),
            MAX_LONGEST_FN as f64,
            "MAX_LONGEST_FN",
        ),
        (
            "functions over 150 lines",
            count(total.functions_over(TARGET_FN_LINES)),
            MAX_FNS_OVER_TARGET as f64,
            "MAX_FNS_OVER_TARGET",
        ),
        (
            "generated lines per .fmt line",
            (
                total.ratio(),
                ratio_recorded,
                format!("{:.3}", total.ratio()),
            ),
            MAX_RATIO,
            "MAX_RATIO",
        ),
        (
            "immediately-called closures",
            count(total.closures),
            MAX_CLOSURES as f64,
            "MAX_CLOSURES",
        ),
        (
            "#[allow] attributes",
            count(total.allows),
            MAX_ALLOWS as f64,
            "MAX_ALLOWS",
        ),
        (
            "`(((` occurrences",
            count(total.triple_parens),
            MAX_TRIPLE_PARENS as f64,
            "MAX_TRIPLE_PARENS",
        ),
    ];
    let mut worse = Vec::new();
    for (what, (now, recorded, shown), max, constant) in figures {
        if now > max {
            worse.push(format!("{what}: {shown}, worse than {constant} = {max}"));
        } else if recorded < max {
            println!("{what} improved to {shown}: lower {constant} from {max} to {recorded}");
        }
    }
    assert!(
        worse.is_empty(),
        "the generated code's figures got worse:\n  {}\nThe figures may only improve; when \
         one improves, lower its constant in codegen/tests/figures.rs to the new value. The {}.",
        worse.join("\n  "),
        targets()
    );
}

/// The measures themselves, on a snippet whose figures are known.
#[test]
fn the_measures_count_what_they_should() {
    let text = "\
#[allow(dead_code)]
fn outer() {
    let a = (|| 1)();
    let b = (move |x: u8| x)(2);
    fn inner() -> u8 {
        (((1)))
    }
    let c = (a)(b);
}

impl S {
    #![allow(unused)]
    pub fn method(&self) {}
}

trait T {
    fn declared(&self);
    fn provided(&self) {
        let f = |x: u8| x;
    }
}
";
    let file = syn::parse_file(text).expect("the snippet parses");
    let f = Figures::measure(text, 1..=text.lines().count(), &file.items);
    let functions: Vec<(&str, usize)> = f
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.lines))
        .collect();
    assert_eq!(
        functions,
        [
            ("outer", 8),
            ("outer::inner", 3),
            ("S::method", 1),
            ("T::provided", 3)
        ]
    );
    assert_eq!(f.generated_lines, 19);
    assert_eq!(f.closures, 2);
    assert_eq!(f.allows, 2);
    assert_eq!(f.triple_parens, 1);
    assert_eq!(f.longest(), Some(&f.functions[0]));
    assert_eq!(f.functions_over(3), 1);
}
