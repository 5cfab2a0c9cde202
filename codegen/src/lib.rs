//! # tensorfmt-codegen
//!
//! Compiles checked `.fmt` schemas into Rust: one module per format with its tables,
//! dicts, layouts (reader and writer), tensor mapping (and its inverse), detector,
//! indexer, streaming writer and registry descriptor. The generated code is specialized
//! (the schema's logic is compiled in, no interpreter) and reaches the runtime only
//! through the runtime's `gen` module: `::tensorfmt_runtime::gen` as [`generate`] writes
//! it, `::tensorfmt::runtime::gen` (the re-export of the crate users depend on) from
//! [`compile`] and the derive, or any path a [`Compiler`] is given.
//!
//! - [`generate`]: a checked [`Schema`] → a [`TokenStream`];
//! - [`generate_file`]: the same, formatted, with a `@generated` header;
//! - [`compile`] and [`Compiler`]: for build scripts — load (with the built-in schemas the
//!   files `use`), check, generate, write to `$OUT_DIR`;
//! - [`derive::expand`]: what `#[derive(TensorFormat)]` expands to.
//!
//! Every engine is generated from the typed IR (`tensorfmt_schema::ir`, with its write
//! plans `ir::plan`) through one lowering of expressions (`lower.rs`): dicts,
//! layouts (their structs, readers and writers), the `file` engine (its tensor mapping, the
//! mapping's inverse and its writer, or pickles read back to back), the `zip` engine (around
//! pickles, over another format's layout, or mapping no tensor), `protobuf` and `kv`.
//!
//! Generation cannot fail, as `pest_generator`'s cannot: what a writer cannot do and what
//! an engine cannot mean are reported by the checker (`tensorfmt_schema`'s engine rules),
//! at their span with a help line, so [`generate`] returns code. The lowering's error type
//! (`lower::Unlowered`) has no value; an `unreachable!` in the generator names the checker
//! rule that keeps a construct out of its engine.
#![warn(missing_docs)]

use std::path::{Path, PathBuf};

use proc_macro2::TokenStream;
use quote::quote;
use tensorfmt_schema::ir::Engine;
use tensorfmt_schema::{Diagnostic, Diagnostics, Schema};

pub mod derive;
mod engine;
mod file;
mod inverse;
mod kv;
mod lower;
mod model;
mod pickle;
mod proto;
mod read;
mod schemas;
mod table;
mod union;
mod values;
mod write;

use model::{docs, Model};

/// Generates the code of every format of `schema`: `pub mod <format>` each, then
/// `pub static REGISTRY` listing every format's descriptor in file-load order. The code
/// reaches the runtime through `::tensorfmt_runtime::gen` (the runtime crate); a build
/// script's [`Compiler`] roots it elsewhere.
///
/// It cannot fail: what an engine cannot mean, the checker rejected when it built
/// `schema`, at its span with a help line.
pub fn generate(schema: &Schema) -> TokenStream {
    generate_rooted(schema, &runtime_crate_path(), 0)
}

/// The path of the runtime's `gen` module that the generators name.
const RUNTIME_CRATE: &str = "::tensorfmt_runtime::gen";

/// [`RUNTIME_CRATE`] as a path.
fn runtime_crate_path() -> syn::Path {
    syn::parse_str(RUNTIME_CRATE).expect("a path")
}

/// [`generate`], with the runtime reached through `runtime` (a path to the runtime's `gen`
/// module) and `REGISTRY` listing the formats of the files from the `listed_from`-th on
/// (the files before are generated for the formats that use them).
fn generate_rooted(schema: &Schema, runtime: &syn::Path, listed_from: usize) -> TokenStream {
    let model = Model::new(&schema.files);
    let ir = schema.ir();
    let mut modules = Vec::new();
    for (i, fmt) in model.formats.iter().enumerate() {
        let fid = tensorfmt_schema::ir::FormatId(i as u32);
        let items = reroot(format_items(&model, fmt, &ir, fid), runtime);
        let m = &fmt.module;
        let mut doc = fmt.ast.docs.clone();
        let file_docs = &model.files[fmt.file].docs;
        if !file_docs.is_empty() {
            if !doc.is_empty() {
                doc.push(String::new());
            }
            doc.extend(file_docs.iter().cloned());
        }
        let doc = docs(&doc);
        modules.push(quote! {
            #doc
            pub mod #m {
                use #runtime as rt;
                #items
            }
        });
    }
    let descs = model
        .formats
        .iter()
        .filter(|f| f.file >= listed_from)
        .map(|f| {
            let m = &f.module;
            quote!(#m::DESC)
        });
    quote! {
        #(#modules)*

        /// Every format generated from the schema, in file-load order.
        pub static REGISTRY: &[#runtime::FormatDesc] = &[#(#descs),*];
    }
}

/// `tokens` with every path through the runtime crate's `gen` module (`::tensorfmt_runtime::gen`,
/// as the generators write it, in paths and in the `prost_path` strings of derives) rooted at
/// `runtime` instead.
fn reroot(tokens: TokenStream, runtime: &syn::Path) -> TokenStream {
    use proc_macro2::{Group, Literal, TokenTree};
    let to = quote!(#runtime).to_string().replace(' ', "");
    if to == RUNTIME_CRATE {
        return tokens;
    }
    let from: Vec<String> = [":", ":", "tensorfmt_runtime", ":", ":", "gen"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::with_capacity(trees.len());
    let mut i = 0;
    while i < trees.len() {
        let here = trees[i..].iter().take(from.len()).map(|t| t.to_string());
        if trees.len() - i >= from.len() && here.eq(from.iter().cloned()) {
            out.extend(quote!(#runtime));
            i += from.len();
            continue;
        }
        out.push(match &trees[i] {
            TokenTree::Group(g) => {
                let mut n = Group::new(g.delimiter(), reroot(g.stream(), runtime));
                n.set_span(g.span());
                TokenTree::Group(n)
            }
            TokenTree::Literal(l) => match syn::parse2::<syn::LitStr>(quote!(#l)) {
                Ok(s) if s.value().contains(RUNTIME_CRATE) => {
                    let mut n = Literal::string(&s.value().replace(RUNTIME_CRATE, &to));
                    n.set_span(l.span());
                    TokenTree::Literal(n)
                }
                _ => trees[i].clone(),
            },
            other => other.clone(),
        });
        i += 1;
    }
    out.into_iter().collect()
}

/// [`generate`], formatted with `prettyplease`, after a header naming the schema files:
/// `// @generated by tensorfmt-codegen from npy.fmt, npz.fmt. Do not edit.`
///
/// Fails only if the generated tokens do not parse as a Rust file (an internal error,
/// reported as a diagnostic of `<generated>`).
pub fn generate_file(schema: &Schema) -> Result<String, Diagnostics> {
    format_file(schema, generate(schema))
}

/// `tokens`, generated from `schema`, formatted as [`generate_file`] does.
fn format_file(schema: &Schema, tokens: TokenStream) -> Result<String, Diagnostics> {
    let names: Vec<String> = schema
        .files
        .iter()
        .map(|f| {
            f.path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| f.path.display().to_string())
        })
        .collect();
    let file = syn::parse2::<syn::File>(tokens).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            path: PathBuf::from("<generated>"),
            span: Default::default(),
            line: 1,
            column: 1,
            message: format!("internal error: the generated code does not parse: {e}"),
            help: None,
        }])
    })?;
    Ok(format!(
        "// @generated by tensorfmt-codegen from {}. Do not edit.\n\n{}",
        names.join(", "),
        prettyplease::unparse(&file)
    ))
}

/// For build scripts: loads and checks `fmt_files` together, generates their code and
/// writes it to `$OUT_DIR/<out_file_name>`, as [`Compiler::compile`] does with the
/// default settings: the code reaches the runtime through the `tensorfmt` crate
/// (`::tensorfmt::runtime::gen`), so a crate that uses it depends on `tensorfmt` alone,
/// and the files may `use` built-in formats (`use npy;`).
///
/// On failure, returns every diagnostic rendered with file, line, column and caret.
///
/// ```no_run
/// // build.rs (with `tensorfmt-codegen` among the build-dependencies)
/// if let Err(report) = tensorfmt_codegen::compile(&["fmt/myformat.fmt"], "formats.rs") {
///     eprintln!("{report}");
///     std::process::exit(1);
/// }
/// // lib.rs: pub mod generated { include!(concat!(env!("OUT_DIR"), "/formats.rs")); }
/// // then: tensorfmt::Registry::builtin().with_all(generated::REGISTRY)
/// ```
pub fn compile(fmt_files: &[impl AsRef<Path>], out_file_name: &str) -> Result<(), String> {
    Compiler::new().compile(fmt_files, out_file_name)
}

/// The build-script compiler of `.fmt` schemas, with its settings: where generated code
/// finds the runtime. [`compile`] is `Compiler::new().compile(..)`.
///
/// The schema files may `use` built-in formats (`use npy;` with `include npy.tensor(..)`)
/// without loading their schemas: the built-in schemas are embedded in this crate,
/// loaded for the `use`s no given file resolves, generated beside the given formats (as
/// the modules the given formats' code refers to) and left out of the generated
/// `REGISTRY`, which lists the given files' formats only.
///
/// ```no_run
/// // build.rs of a crate that depends on the runtime crate itself
/// tensorfmt_codegen::Compiler::new()
///     .runtime("::tensorfmt_runtime::gen")
///     .compile(&["fmt/myformat.fmt"], "formats.rs")
///     .unwrap_or_else(|report| panic!("{report}"));
/// ```
#[derive(Debug, Clone)]
pub struct Compiler {
    runtime: String,
}

impl Default for Compiler {
    fn default() -> Self {
        Self::new()
    }
}

impl Compiler {
    /// The path generated code reaches the runtime by, unless [`Compiler::runtime`] says
    /// otherwise: the `tensorfmt` crate's re-export of the runtime's `gen` module.
    ///
    /// ```
    /// assert_eq!(tensorfmt_codegen::Compiler::DEFAULT_RUNTIME, "::tensorfmt::runtime::gen");
    /// ```
    pub const DEFAULT_RUNTIME: &'static str = "::tensorfmt::runtime::gen";

    /// A compiler whose code reaches the runtime through [`Compiler::DEFAULT_RUNTIME`].
    ///
    /// ```no_run
    /// // build.rs
    /// tensorfmt_codegen::Compiler::new()
    ///     .compile(&["fmt/a.fmt", "fmt/b.fmt"], "formats.rs")
    ///     .unwrap_or_else(|report| panic!("{report}"));
    /// ```
    pub fn new() -> Self {
        Compiler {
            runtime: Self::DEFAULT_RUNTIME.to_string(),
        }
    }

    /// Generated code reaches the runtime through `path`, a path to the runtime's `gen`
    /// module: `::tensorfmt_runtime::gen` in a crate that depends on the runtime crate,
    /// `crate::runtime::gen` inside a crate that re-exports it.
    ///
    /// ```
    /// let compiler = tensorfmt_codegen::Compiler::new().runtime("crate::runtime::gen");
    /// # let _ = compiler;
    /// ```
    pub fn runtime(mut self, path: &str) -> Self {
        self.runtime = path.to_string();
        self
    }

    /// Loads and checks `fmt_files` together (with the built-in schemas their `use`s
    /// name), generates their code and writes it to `$OUT_DIR/<out_file_name>` (only when
    /// the content changed, so that dependents are not rebuilt needlessly). Prints
    /// `cargo:rerun-if-changed` for every file given.
    ///
    /// On failure, returns every diagnostic rendered with file, line, column and caret.
    ///
    /// ```no_run
    /// // build.rs; fmt/mine.fmt says `use npy;`: the built-in npy schema is loaded with it.
    /// if let Err(report) = tensorfmt_codegen::Compiler::new().compile(&["fmt/mine.fmt"], "mine.rs") {
    ///     eprintln!("{report}");
    ///     std::process::exit(1);
    /// }
    /// ```
    pub fn compile(
        &self,
        fmt_files: &[impl AsRef<Path>],
        out_file_name: &str,
    ) -> Result<(), String> {
        let paths: Vec<PathBuf> = fmt_files.iter().map(|p| p.as_ref().to_path_buf()).collect();
        for p in &paths {
            println!("cargo:rerun-if-changed={}", p.display());
        }
        let code = self.generate_file(&paths)?;
        let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| {
            "OUT_DIR is not set: call tensorfmt_codegen::compile from a build script".to_string()
        })?;
        let out = Path::new(&out_dir).join(out_file_name);
        if std::fs::read_to_string(&out).ok().as_deref() != Some(code.as_str()) {
            std::fs::write(&out, code)
                .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        }
        Ok(())
    }

    /// The formatted code [`Compiler::compile`] writes for `paths`.
    fn generate_file(&self, paths: &[PathBuf]) -> Result<String, String> {
        let runtime: syn::Path = syn::parse_str(&self.runtime)
            .map_err(|e| format!("runtime path `{}`: {e}", self.runtime))?;
        let loaded = schemas::load_with_builtins(paths)?;
        let tokens = generate_rooted(&loaded.schema, &runtime, loaded.builtin_files);
        format_file(&loaded.schema, tokens).map_err(|d| d.with_sources(&loaded.schema.files))
    }
}

/// The items of one format's module (without the module itself).
fn format_items(
    model: &Model<'_>,
    fmt: &model::Fmt<'_>,
    ir: &tensorfmt_schema::ir::Ir,
    fid: tensorfmt_schema::ir::FormatId,
) -> TokenStream {
    use lower::lowered;
    let file = &model.files[fmt.file];
    let mut items = Vec::new();

    let name = fmt.public_name();
    let exts = fmt.extensions.iter().map(|e| &e.value);
    let name_doc = " The format's public name (CLI `--to`, JSON `format`).";
    items.push(quote! {
        #[doc = #name_doc]
        pub const NAME: &str = #name;
        /// File extensions (without the dot) that map to this format.
        pub const EXTENSIONS: &[&str] = &[#(#exts),*];
    });

    // The checker resolves every format's one engine (`format has no engine`, `second
    // engine`, `unknown engine`, `takes no arguments`): `Engine::Error` is not checked.
    let kind = &ir.format(fid).engine;
    // The protobuf and kv engines generate their own detectors.
    if matches!(kind, Engine::File | Engine::Zip) {
        items.push(engine::gen_detect(ir, fid, *kind == Engine::Zip));
    }
    for &t in &ir.format(fid).tables {
        items.push(table::gen_table(ir, t));
    }
    for &p in &ir.format(fid).pickles {
        items.push(pickle::gen_pickle(ir, p));
    }
    for &d in &ir.format(fid).dicts {
        items.push(lowered(read::gen_dict(ir, d)));
    }
    // Layouts around pickles are read by the pickle-file engine, not compiled alone.
    let pickle_file = *kind == Engine::File && pickle::is_pickle_file(ir, fid);
    let read_only = ir.format(fid).read_only;
    if !pickle_file {
        for &l in &ir.format(fid).layouts {
            items.push(lowered(read::gen_layout(ir, l, &file.source)));
            items.push(union::gen_unions(ir, l));
            // A read-only format's layouts have no write plan, and no writer.
            if !read_only {
                items.push(lowered(write::gen_writer(ir, l, &file.source)));
            }
        }
    }
    items.push(match kind {
        Engine::Protobuf { root } => lowered(proto::gen_protobuf(ir, fid, *root)),
        Engine::Kv {
            backend,
            schema,
            open,
        } => lowered(kv::gen_kv(ir, fid, *backend, *schema, *open)),
        Engine::File if pickle_file => lowered(pickle::gen_file_pickle(ir, fid)),
        Engine::File if ir.format(fid).mappings.is_empty() => {
            file::gen_file_without_tensors(ir, fid)
        }
        Engine::File if read_only => {
            let read = lowered(file::gen_file(ir, fid));
            let refusal = format!(
                "{} is read-only: its schema declares `read_only;`",
                ir.format(fid).public_name
            );
            let values = lowered(values::gen_values(ir, fid));
            let desc = engine::read_only_file_desc(&refusal, values::has_values(ir, fid));
            quote!(#read #values #desc)
        }
        Engine::File => {
            let read = lowered(file::gen_file(ir, fid));
            let values = lowered(values::gen_values(ir, fid));
            let write = lowered(inverse::gen_file_writer(ir, fid));
            quote!(#read #values #write)
        }
        Engine::Zip if pickle::is_pickle_zip(ir, fid) => lowered(pickle::gen_zip_pickle(ir, fid)),
        Engine::Zip => engine::gen_zip(ir, fid),
        Engine::Error => unreachable!("the checker resolves every format's engine"),
    });
    quote!(#(#items)*)
}
