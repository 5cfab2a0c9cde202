//! Engines: what `detect`, `index` and the `Writer` of a format do with its layouts and
//! entries: the detector of `file` and `zip` formats, the registry descriptor every
//! engine shares, and the `zip` engine whose members each hold one layout of another
//! format.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ir::{self, Detect, EntriesMode, FormatId, Ir};

use crate::model::{docs, rs_ident};

/// `detect`: the format's detection rules over the first bytes or, for zip archives,
/// over the member names (the archive indexed once, and kept by the source).
pub(crate) fn gen_detect(ir: &Ir, fid: FormatId, zip: bool) -> TokenStream {
    let mut tests = Vec::new();
    // The tests that are a chain of `||`, parenthesized when ANDed with others.
    let mut ors = Vec::new();
    let mut rules = Vec::new();
    let mut described = Vec::new();
    if zip {
        described.push("a zip archive".to_string());
    }
    for d in &ir.format(fid).detects {
        match d {
            Detect::Magic { bytes, at, span } => {
                let b = Literal::byte_string(bytes);
                let at = Literal::u64_unsuffixed(*at);
                described.push(format!("the magic `{}`", ir.text(fid, *span)));
                tests.push(quote!(src.has_magic(#at, #b)));
            }
            Detect::MagicAny { alternatives, at } => {
                let at = Literal::u64_unsuffixed(*at);
                let bs = alternatives.iter().map(|(b, _)| Literal::byte_string(b));
                let written: Vec<String> = alternatives
                    .iter()
                    .map(|(_, span)| format!("`{}`", ir.text(fid, *span)))
                    .collect();
                described.push(format!("one of the magics {}", written.join(", ")));
                ors.push(tests.len());
                tests.push(quote!(#(src.has_magic(#at, #bs))||*));
            }
            Detect::Pickle { pickle, window } => {
                let pk = ir.pickle(*pickle);
                // The checker keeps `detect pickle` to the format's own declarations.
                let rules = format_ident!("{}_rules", pk.name.to_lowercase());
                let w = Literal::u64_unsuffixed(*window);
                described.push(format!(
                    "a pickle naming a call of `{}` in its first {window} bytes",
                    pk.name
                ));
                tests.push(quote!(rt::pickle::starts_naming(src, #w, #rules())));
            }
            // The checker keeps member rules to zip formats.
            Detect::Entries { mode, pattern } => {
                let p = &pattern.text;
                let (which, how) = match mode {
                    EntriesMode::None => (quote!(None), "no"),
                    EntriesMode::All => (quote!(All), "all"),
                    EntriesMode::Any => (quote!(Any), "some"),
                };
                rules.push(quote!((rt::zip::Members::#which, #p)));
                described.push(format!("{how} member names matching `{p}`"));
            }
        }
    }
    let uses_limits = zip && !rules.is_empty();
    if uses_limits {
        // The archive is indexed once (and kept by the source), for every entry rule.
        tests.push(quote!(rt::zip::members_match(src, limits, &[#(#rules),*])));
    } else if zip {
        // A cheap look at the first bytes.
        tests.push(quote!(rt::zip::starts_like_zip(src.data())));
    }
    let doc = if described.is_empty() {
        " Never true: this format is recognized by extension only.".to_string()
    } else {
        format!(
            " True when the source looks like this format: {}.",
            described.join(", ")
        )
    };
    if tests.is_empty() {
        return quote! {
            #[doc = #doc]
            pub fn detect(_: &rt::Source, _: &rt::Limits) -> bool {
                false
            }
        };
    }
    if tests.len() > 1 {
        for i in ors {
            let t = &tests[i];
            tests[i] = quote!((#t));
        }
    }
    let limits = if uses_limits {
        quote!(limits)
    } else {
        quote!(_limits)
    };
    quote! {
        #[doc = #doc]
        pub fn detect(src: &rt::Source, #limits: &rt::Limits) -> bool {
            #(#tests)&&*
        }
    }
}

/// The `DESC` constant, built from `rt::FormatDesc::new` by one call per property that
/// differs, the writer constructor a closure; `structure`: the format's
/// module has a `structure` reader (formats around a pickled object).
pub(crate) fn desc(structure: bool) -> TokenStream {
    desc_around(
        quote!(Ok(::std::boxed::Box::new(Writer::new(w, options)?))),
        " This format for the registry: name, extensions, detector, indexer and writer.",
        structure,
    )
}

/// [`desc`] of a format that bounds its tensors' names (`max_name`: an
/// `rt::NameLimit` expression): `.max_name(..)` is added.
pub(crate) fn desc_max_name(max_name: TokenStream) -> TokenStream {
    desc_with(
        Some(quote!(Ok(::std::boxed::Box::new(Writer::new(w, options)?)))),
        " This format for the registry: name, extensions, detector, indexer and writer.",
        Structure::None,
        false,
        None,
        (false, false),
        Some(max_name),
    )
}

/// `DESC` with a writer constructor whose body is `make` (given `w` and `options`, an
/// expression or statements).
pub(crate) fn desc_around(make: TokenStream, doc: &str, structure: bool) -> TokenStream {
    desc_full(Some(make), doc, structure, false, None)
}

/// [`desc_around`] of a `file` format whose mapping gives no `order`: it stores C order
/// only (`c_order_only` when `c_only`), so that a saver reorders other tensors first;
/// `structure` when it has `value` mappings (its module's `structure`); `aligns` when its
/// writer aligns the tensors' data as the save asks (`write_align`).
pub(crate) fn desc_ordered(
    make: TokenStream,
    doc: &str,
    c_only: bool,
    structure: bool,
    aligns: bool,
) -> TokenStream {
    desc_with(
        Some(make),
        doc,
        Structure::values(structure),
        false,
        None,
        (c_only, aligns),
        None,
    )
}

/// What a format's `DESC` says of its structure.
#[derive(Clone, Copy, PartialEq)]
enum Structure {
    /// It has none.
    None,
    /// An object the tensors are stored in (a pickle): `.structure(structure)`.
    Object,
    /// Values beside the tensors (a `file` format's `value` mappings): `.values(structure)`.
    Values,
}

impl Structure {
    fn object(yes: bool) -> Structure {
        if yes {
            Structure::Object
        } else {
            Structure::None
        }
    }

    fn values(yes: bool) -> Structure {
        if yes {
            Structure::Values
        } else {
            Structure::None
        }
    }
}

/// [`desc_around`], and `rewrite`: the module has a `rewrite` function (formats whose
/// documents can be rewritten with some tensors replaced); `db`: the `DbDesc` of a
/// database format; `make: None`: a database written as a folder, with no writer on one
/// file.
pub(crate) fn desc_full(
    make: Option<TokenStream>,
    doc: &str,
    structure: bool,
    rewrite: bool,
    db: Option<TokenStream>,
) -> TokenStream {
    desc_full_max_name(make, doc, structure, rewrite, db, None)
}

/// [`desc_full`] of a format that may bound its tensors' names (`max_name`: an
/// `rt::NameLimit` expression, added as `.max_name(..)`).
pub(crate) fn desc_full_max_name(
    make: Option<TokenStream>,
    doc: &str,
    structure: bool,
    rewrite: bool,
    db: Option<TokenStream>,
    max_name: Option<TokenStream>,
) -> TokenStream {
    desc_with(
        make,
        doc,
        Structure::object(structure),
        rewrite,
        db,
        (false, false),
        max_name,
    )
}

/// [`desc_full`], and `(c_order_only, aligns)`: the format stores C order only, its
/// writer aligns the tensors' data as the save asks; `max_name`: the longest name it
/// stores.
fn desc_with(
    make: Option<TokenStream>,
    doc: &str,
    structure: Structure,
    rewrite: bool,
    db: Option<TokenStream>,
    (c_order_only, aligns): (bool, bool),
    max_name: Option<TokenStream>,
) -> TokenStream {
    // What differs from `FormatDesc::new`'s defaults, one builder call each. The formats
    // that rewrite documents (protobuf) are those that store C order only.
    let mut set = Vec::new();
    if let Some(make) = make {
        // The constructor as a closure: its body an expression, or a block of statements.
        let body = match syn::parse2::<syn::Expr>(make.clone()) {
            Ok(_) => make,
            Err(_) => quote!({ #make }),
        };
        // A parameter the body does not use is `_`.
        let param = |name: &str| {
            let id = format_ident!("{}", if mentions(&body, name) { name } else { "_" });
            quote!(#id)
        };
        let (w, options) = (param("w"), param("options"));
        set.push(quote!(.writer(|#w, #options| #body)));
    } else {
        set.push(quote!(.writer(rt::kv::folder_writer)));
    }
    match structure {
        Structure::Object => set.push(quote!(.structure(structure))),
        Structure::Values => set.push(quote!(.values(structure))),
        Structure::None => {}
    }
    if c_order_only || rewrite {
        set.push(quote!(.c_order_only()));
    }
    if rewrite {
        set.push(quote!(.rewrite(rewrite)));
    }
    if let Some(d) = db {
        set.push(quote!(.db(#d)));
    }
    if aligns {
        set.push(quote!(.aligns()));
    }
    if let Some(limit) = max_name {
        set.push(quote!(.max_name(#limit)));
    }
    quote! {
        #[doc = #doc]
        pub const DESC: rt::FormatDesc = rt::FormatDesc::new(NAME, EXTENSIONS, detect, index)
            #(#set)*;
    }
}

/// `desc` (a `DESC` constant as [`desc_ordered`] makes it) with `.max_names_total(..)`:
/// the names of a file's tensors take at most `limit` bytes together, the size of the
/// header that holds them all.
pub(crate) fn with_names_total(desc: TokenStream, limit: u64, json: bool) -> TokenStream {
    let why = format!("its header, which holds every name, is at most {limit} bytes");
    let text = if json {
        quote!(rt::NameText::Json)
    } else {
        quote!(rt::NameText::Utf8)
    };
    let tokens: Vec<proc_macro2::TokenTree> = desc.into_iter().collect();
    // The constant's last token is its `;`: the builder call goes before it.
    let (semi, body) = tokens.split_last().expect("a DESC constant");
    quote! {
        #(#body)*
        .max_names_total(rt::NameLimit { bytes: #limit, why: #why, text: #text })
        #semi
    }
}

/// True when `tokens` hold the identifier `name`.
pub(crate) fn mentions(tokens: &TokenStream, name: &str) -> bool {
    tokens.clone().into_iter().any(|t| match t {
        proc_macro2::TokenTree::Ident(id) => id == name,
        proc_macro2::TokenTree::Group(g) => mentions(&g.stream(), name),
        _ => false,
    })
}

/// `impl rt::TensorWriter for Writer<W>`, each method the writer's own; `structure`: the
/// writer takes an object tree and views of storages.
pub(crate) fn tensor_writer_impl(structure: bool) -> TokenStream {
    let set_structure = if structure {
        quote! {
            fn set_structure(&mut self, tree: &rt::Node) -> rt::Result<rt::StructureKept> {
                Writer::set_structure(self, tree).map(Into::into)
            }

            fn add_view(
                &mut self,
                m: &rt::TensorMeta,
                view: &rt::StorageView,
                data: ::std::option::Option<rt::Payload<'_>>,
            ) -> rt::Result<bool> {
                Writer::add_view(self, m, view, data).map(|()| true)
            }
        }
    } else {
        quote!()
    };
    quote! {
        impl<W: rt::WriteSeek> rt::TensorWriter for Writer<W> {
            fn add(&mut self, m: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                Writer::add(self, m, data)
            }

            fn finish(self: ::std::boxed::Box<Self>) -> rt::Result<()> {
                Writer::finish(*self).map(drop)
            }

            #set_structure
        }
    }
}

/// `in_file`: sets the source's path on errors that lack a file.
pub(crate) fn in_file() -> TokenStream {
    quote! {
        let in_file = |e: rt::Error| src.in_file(e);
    }
}

/// `index` and `Writer` of the `zip` engine whose one entry is laid out by another
/// format's layout (npz): each member matching the entry's pattern is read by that
/// layout and mapped by that format's mapping, named by the pattern's capture; an entry
/// that is neither `repeated` nor `optional` needs one member at least.
///
/// The checker's zip rules (`check_engines.rs`) make a format that maps tensors one entry
/// of one capture, laid out by a `file` format's layout, and one mapping over it that
/// includes that format's mapping and sets the name, and nothing else; a format that maps
/// no tensor is [`gen_zip_without_tensors`].
pub(crate) fn gen_zip(ir: &Ir, fid: FormatId) -> TokenStream {
    let fmt = ir.format(fid);
    let (Some(eid), Some(_)) = (fmt.entries.first(), fmt.mappings.first()) else {
        return gen_zip_without_tensors(ir, fid);
    };
    let entry = ir.entry(*eid);
    let ir::Content::Layout(lid) = entry.content else {
        unreachable!("the checker gives a zip of another format's files a layout entry")
    };
    let layout = ir.layout(lid);
    let other_mod = rs_ident(&ir.format(layout.format).name);
    let l = rs_ident(&layout.name);
    let pattern = &entry.pattern.text;
    let mut methods: Vec<TokenStream> = entry
        .compression
        .iter()
        .map(|c| crate::pickle::compression(*c))
        .collect();
    if methods.is_empty() {
        methods.push(quote!(rt::Compression::Stored));
    }
    let align = crate::pickle::entry_align(entry).unwrap_or_else(|| Literal::u16_unsuffixed(1));
    let default = methods[0].clone();
    let all_methods = entry.compression.contains(&ir::Compression::Stored)
        && entry.compression.contains(&ir::Compression::Deflate);
    let public = &fmt.public_name;
    let (read_check, write_check) = if all_methods {
        (quote!(), quote!())
    } else {
        let msg = format!("{public} members may not be compressed with {{:?}}");
        (
            quote! {
                if !matches!(m.compression, #(#methods)|*) {
                    return Err(in_file(rt::Error::from(rt::ErrorKind::Unsupported(format!(#msg, m.compression))).in_entry(m.name.as_str())));
                }
            },
            quote! {
                if !matches!(compression, #(#methods)|*) {
                    return Err(rt::Error::from(rt::ErrorKind::Unsupported(format!(#msg, compression))));
                }
            },
        )
    };
    let pconst = format_ident!("{}_PATTERN", entry.name.to_uppercase());
    let mut pdoc = entry.docs.clone();
    for (_, d) in &entry.prop_docs {
        pdoc.push(String::new());
        pdoc.extend(d.iter().cloned());
    }
    let pdoc_head = format!(" The name pattern of `{}` members.", entry.name);
    let pdoc = docs(&pdoc);
    let in_file = in_file();
    let required = if entry.repeated || entry.optional {
        quote!()
    } else {
        let msg = format!("no member matches `{pattern}`");
        quote! {
            if tensors.is_empty() {
                return Err(in_file(rt::Error::from(rt::ErrorKind::Invalid(#msg.to_string()))));
            }
        }
    };
    let wdoc =
        format!(" Streaming writer of `{public}` archives: one `{pattern}` member per tensor.");
    let tr = tensor_writer_impl(false);
    let why = format!("a zip member name, `{pattern}`, is at most 65,535 bytes");
    let desc = desc_max_name(quote!(rt::NameLimit::in_pattern(
        rt::zip::MAX_NAME_BYTES,
        #pconst,
        #why
    )));
    quote! {
        #[doc = #pdoc_head]
        #[doc = ""]
        #pdoc
        pub const #pconst: &str = #pattern;

        /// Lists the tensors of `src` without reading their bytes: the header of each member
        /// whose name matches the pattern (others are skipped).
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            #in_file
            let zip = rt::zip::index(src, limits).map_err(in_file)?;
            let pattern = rt::Pattern::new(#pconst)?;
            let mut tensors = ::std::vec::Vec::new();
            for m in zip.members() {
                let Some(captures) = pattern.matches(&m.name) else {
                    continue;
                };
                let n = tensors.len() + 1;
                rt::expr::within(n, limits.max_tensors, "tensors").map_err(in_file)?;
                #read_check
                let content = rt::zip::member_source(src.data(), m, limits).map_err(in_file)?;
                let mut c = rt::Cursor::new(&*content, src.location().with_entry(m.name.as_str()));
                let f = super::#other_mod::#l::read(&mut c, limits).map_err(in_file)?;
                let t = super::#other_mod::tensor(&f, captures[0].clone(), &|skip, len| {
                    rt::zip::location(&zip, m, skip, len)
                })
                .map_err(|e| in_file(e.in_entry(m.name.as_str())))?;
                tensors.push(t);
            }
            #required
            Ok(tensors)
        }

        #[doc = #wdoc]
        pub struct Writer<W: ::std::io::Write + ::std::io::Seek> {
            zip: rt::ZipWriter<W>,
            compression: rt::Compression,
        }

        impl<W: ::std::io::Write + ::std::io::Seek> Writer<W> {
            /// A writer into `w`; members are compressed as `options` asks, by default as the schema's first listed method.
            pub fn new(w: W, options: &rt::WriteOptions) -> rt::Result<Self> {
                let compression = options.compression.unwrap_or(#default);
                #write_check
                Ok(Writer { zip: rt::ZipWriter::new(w), compression })
            }

            /// Adds one tensor as a member: `data` holds exactly `meta.nbytes()` bytes in `meta`'s order and byte order.
            pub fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                let name = rt::Pattern::new(#pconst)?.format(&[meta.name.as_str()])?;
                self.zip.start_member(&name, self.compression, #align)?;
                super::#other_mod::write_tensor(&mut self.zip, meta, data).map_err(|e| e.in_entry(name))?;
                Ok(())
            }

            /// Writes the central directory and returns the output.
            pub fn finish(self) -> rt::Result<W> {
                self.zip.finish()
            }
        }

        #tr
        #desc
    }
}

/// `index` and `Writer` of a `zip` format that maps no tensor (its entries are declared,
/// none is mapped): indexing an archive lists no tensor; the writer makes an archive
/// without members, and adding a tensor is an error naming the format.
fn gen_zip_without_tensors(ir: &Ir, fid: FormatId) -> TokenStream {
    let public = &ir.format(fid).public_name;
    let refusal = format!("{public} archives hold no tensor: the format maps none");
    let wdoc = format!(" Writer of `{public}` archives, which hold no tensor.");
    let in_file = in_file();
    let tr = tensor_writer_impl(false);
    let desc = desc(false);
    quote! {
        /// Lists the tensors of `src`: none, as the format maps none (the archive is still
        /// indexed, so that what is not a zip archive is an error).
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            #in_file
            rt::zip::index(src, limits).map_err(in_file)?;
            Ok(::std::vec::Vec::new())
        }

        #[doc = #wdoc]
        pub struct Writer<W: ::std::io::Write + ::std::io::Seek> {
            zip: rt::ZipWriter<W>,
        }

        impl<W: ::std::io::Write + ::std::io::Seek> Writer<W> {
            /// A writer into `w` (it writes no member, so `options` change nothing).
            pub fn new(w: W, options: &rt::WriteOptions) -> rt::Result<Self> {
                let _ = options;
                Ok(Writer { zip: rt::ZipWriter::new(w) })
            }

            /// Refuses: the format maps no tensor, so its archives hold none.
            pub fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                let _ = (meta, data);
                Err(rt::Error::from(rt::ErrorKind::Unsupported(#refusal.to_string())))
            }

            /// Writes the (empty) central directory and returns the output.
            pub fn finish(self) -> rt::Result<W> {
                self.zip.finish()
            }
        }

        #tr
        #desc
    }
}

/// The writer constructor of a format that is only read, which refuses with `message`,
/// and the `DESC` constant around it.
pub(crate) fn read_only_desc(message: &str, structure: bool) -> TokenStream {
    desc_around(
        quote!(Err(rt::Error::unsupported(#message))),
        " This format for the registry: name, extensions, detector and indexer (read-only).",
        structure,
    )
}

/// [`read_only_desc`] of a `file` format: `values` when it has `value` mappings.
pub(crate) fn read_only_file_desc(message: &str, values: bool) -> TokenStream {
    desc_with(
        Some(quote!(Err(rt::Error::unsupported(#message)))),
        " This format for the registry: name, extensions, detector and indexer (read-only).",
        Structure::values(values),
        false,
        None,
        (false, false),
        None,
    )
}
