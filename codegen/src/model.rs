//! The schema as the generator sees it: each format's declaration with its module name and
//! extensions.

use proc_macro2::Ident as RsIdent;
use tensorfmt_schema::ast::*;

/// One format: its declaration, module name and extensions.
pub(crate) struct Fmt<'s> {
    /// Index of the file defining it.
    pub file: usize,
    /// The declaration.
    pub ast: &'s Format,
    /// The generated module's name.
    pub module: RsIdent,
    /// `extensions [...]`.
    pub extensions: Vec<&'s StrLit>,
}

impl<'s> Fmt<'s> {
    fn new(file: usize, ast: &'s Format) -> Self {
        let mut f = Fmt {
            file,
            ast,
            module: rs_ident(&ast.name.name),
            extensions: Vec::new(),
        };
        for item in &ast.items {
            match item {
                Item::Extensions(x) => f.extensions.extend(x.iter()),
                // Generated from the IR (messages and enums by the engines over messages,
                // to which the checker keeps them).
                Item::Engine(_)
                | Item::ReadOnly(_)
                | Item::Detect(_)
                | Item::Table(_)
                | Item::Dict(_)
                | Item::Layout(_)
                | Item::Entry(_)
                | Item::Tensor(_)
                | Item::Value(_)
                | Item::Pickle(_)
                | Item::Message(_)
                | Item::Enum(_) => {}
            }
        }
        f
    }

    /// The public name (`"caffe2-minidb"`), or the identifier.
    pub fn public_name(&self) -> &str {
        self.ast
            .public_name
            .as_ref()
            .map(|s| s.value.as_str())
            .unwrap_or(&self.ast.name.name)
    }
}

/// Every format of a schema, in file-load order.
pub(crate) struct Model<'s> {
    /// The files.
    pub files: &'s [SchemaFile],
    /// The formats.
    pub formats: Vec<Fmt<'s>>,
}

impl<'s> Model<'s> {
    /// Sorts the items of every format of `files`.
    pub fn new(files: &'s [SchemaFile]) -> Self {
        let formats = files
            .iter()
            .enumerate()
            .flat_map(|(i, f)| f.formats.iter().map(move |fmt| Fmt::new(i, fmt)))
            .collect();
        Model { files, formats }
    }
}

/// The Rust name of a mapping's binding: its name, or `__`-prefixed where it is spelled
/// like a local of the engines' mapping code (`parts`, `path`, `meta`), so that the binding
/// is not hidden by one. (The checker refuses bindings spelled like a tensor property.)
pub(crate) fn binding_ident(name: &str) -> RsIdent {
    const LOCALS: &[&str] = &["parts", "path", "meta"];
    if LOCALS.contains(&name) {
        quote::format_ident!("__{name}")
    } else {
        rs_ident(name)
    }
}

/// `snake_case` words run together, each with its first letter upper case: `kv_value` →
/// `KvValue` (the rest of each word as written).
pub(crate) fn upper_camel(name: &str) -> String {
    name.split('_')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|h| h.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// A Rust identifier for a schema name, raw when it is a keyword.
pub(crate) fn rs_ident(name: &str) -> RsIdent {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let clean = if clean.starts_with(|c: char| c.is_ascii_digit()) || clean.is_empty() {
        format!("_{clean}")
    } else {
        clean
    };
    match syn::parse_str::<syn::Ident>(&clean) {
        Ok(id) => id,
        Err(_) if matches!(clean.as_str(), "self" | "Self" | "super" | "crate") => {
            RsIdent::new(&format!("{clean}_"), proc_macro2::Span::call_site())
        }
        Err(_) => RsIdent::new_raw(&clean, proc_macro2::Span::call_site()),
    }
}

/// `/// doc` attributes for the lines of a schema doc comment.
pub(crate) fn docs(lines: &[String]) -> proc_macro2::TokenStream {
    let lines = lines.iter().map(|l| {
        let l = if l.is_empty() || l.starts_with(' ') {
            l.clone()
        } else {
            format!(" {l}")
        };
        quote::quote!(#[doc = #l])
    });
    quote::quote!(#(#lines)*)
}
