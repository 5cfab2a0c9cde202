//! The `kv` engine: a key-value database of records (`engine kv(backend = B);`), each
//! record's key matched against the format's entries in order (`entry blob
//! "{name}#%{chunk}" { value BlobProto; }`), its value read in place as the entry's
//! protobuf message, and the format's mappings run over the entries' values; parts of
//! one tensor in several records (`segment = ...`) are joined by name; `value` mappings
//! give the pieces of values that are not tensors, kept beside them (`map_db`, a
//! `rt::kv::Mapped`). The generated code holds the entries (`ENTRIES`: pattern, and
//! whether a record's tensors are the items of a list), a function per entry that reads
//! one record and maps its items, and the write rule as `<entry>_value`; the runtime's
//! `rt::kv::map_records` and `rt::kv::encode_parts` run the loops. Backends: `records`
//! (a file of records whose layout the format declares as `Record`: Caffe2's MiniDB),
//! and `lmdb` and `leveldb` (the runtime's, opened as the engine's arguments say:
//! `map_size = N` becomes the constant `OPEN` that `open_db` passes the runtime). A format
//! may take another's entries and mappings: `engine kv(backend = lmdb, schema =
//! caffe2_minidb);`. The functions named after an entry carry a fixed prefix or suffix
//! (`record_<entry>`, `<entry>_value`), as those of `proto.rs` do, so that no entry,
//! message or field name makes two items of one name, or one the locals named after
//! entries would hide.

use proc_macro2::TokenStream;
use quote::quote;
use tensorfmt_schema::ir::{
    self, Content, Expr, ExprKind, FormatId, Ir, KvBackend, MappingId, Member, TensorKey, Type,
};

use crate::lower::R;
use crate::model::rs_ident;
use crate::proto::{self, Built, Origin, Output, WriteCx};

/// The backend's name, as `rt::kv` and the registry name it.
fn backend_name(b: KvBackend) -> &'static str {
    match b {
        KvBackend::Records => "records",
        KvBackend::Lmdb => "lmdb",
        KvBackend::Leveldb => "leveldb",
    }
}

/// The items of a `kv` format's module: the format's records kept by `backend`, mapped by
/// the entries and mappings of `schema` (this format's own when `None`), the database
/// opened as `options` say (the fields of its `ir::Engine::Kv`); `runtime`: the path of
/// the runtime's `gen` module, which the messages' prost derives name.
pub(crate) fn gen_kv(
    ir: &Ir,
    fid: FormatId,
    backend: KvBackend,
    schema: Option<FormatId>,
    options: ir::KvOpen,
    runtime: &syn::Path,
) -> R<TokenStream> {
    let fmt = ir.format(fid);
    let backend = backend_name(backend);
    if let Some(schema_id) = schema {
        // Another format's entries and mappings over this backend's records.
        let schema = &ir.format(schema_id).name;
        let other = rs_ident(schema);
        let detect_doc =
            format!(" True when the source is a database folder read by the `{backend}` backend.");
        let index_doc = format!(
            " Lists the tensors of the database: its records mapped as `{schema}` maps its own."
        );
        if backend == "records" {
            // A file of this format's records, mapped and written as `schema` does.
            let prefix = quote!(super::#other::);
            let body = gen_records_backend(&prefix);
            let desc = crate::engine::desc_full(
                Some(records_writer(&prefix)),
                " This format for the registry: name, extensions, detector, indexer, writer and database operations.",
                false,
                false,
                Some(quote!(rt::kv::DbDesc {
                    backend: #backend,
                    open: open_db,
                    encode: super::#other::encode_parts,
                    split: super::#other::SPLIT,
                    map: map_db,
                })),
            );
            return Ok(quote! {
                #body
                #desc
            });
        }
        let (open, open_items) = open_fn(backend, &options);
        let desc = crate::engine::desc_full_max_name(
            None,
            " This format for the registry: name, extensions, detector, indexer and database operations.",
            false,
            false,
            Some(quote!(rt::kv::DbDesc {
                backend: #backend,
                open: #open,
                encode: super::#other::encode_parts,
                split: super::#other::SPLIT,
                map: map_db,
            })),
            max_name(ir, schema_id, backend),
        );
        let folder = backend_fns(backend, &quote!(super::#other::), &detect_doc, &index_doc);
        return Ok(quote! {
            #open_items
            #folder
            #desc
        });
    }

    let mut items = vec![proto::gen_messages(ir, fid, runtime)];
    let (parts, parts_items) = proto::parts_fns(ir, fid)?;
    items.extend(parts_items);

    // Per entry: a struct of its record (its key's captures and its value), the function
    // that reads a record of it, and the item functions of the mappings over it.
    let mut arms = Vec::new();
    let mut entries = Vec::new();
    let [src, r, limits, out, value] =
        ["src", "r", "limits", "out", "value"].map(|w| proto::word(ir, w));
    for (i, &eid) in fmt.entries.iter().enumerate() {
        let en = ir.entry(eid);
        // The checker gives every entry of a kv format a message of it.
        let Content::Value(Type::Message(mid)) = en.content else {
            continue;
        };
        let st = proto::entry_struct(ir, &en.name);
        let msg = rs_ident(&proto::view_name(ir, mid));
        let caps: Vec<_> = en.pattern.captures.iter().map(|c| rs_ident(c)).collect();
        let doc = format!(
            " A record of entry `{}` (key pattern `{}`): its key's captures and its value.",
            en.name, en.pattern.text
        );
        items.push(quote! {
            #[doc = #doc]
            pub struct #st<'k, 'v> {
                #(
                    #[doc = " A capture of the key."]
                    pub #caps: &'k str,
                )*
                /// The value, read in place.
                pub value: &'v #msg<'v>,
            }
        });
        let mut calls = Vec::new();
        let mut listed = false;
        let mut reads_entry = false;
        let tensors = fmt.mappings.iter().map(|&m| (m, Output::Chunks));
        let values = fmt.values.iter().map(|&m| (m, Output::Values));
        for (map, output) in tensors.chain(values) {
            let source = proto::mapping_source(ir, map);
            if source.origin == Origin::Entry(eid) {
                listed |= output == Output::Chunks && source.steps.iter().any(|s| s.2);
                let m = proto::gen_mapping(ir, map, &parts, output)?;
                reads_entry |= m.entries.contains(&eid);
                items.push(m.item_fn);
                calls.push(m.call);
            }
        }
        entries.push((en.pattern.text.clone(), listed));
        let calls = quote!(#(#calls)*);
        let id = rs_ident(&en.name);
        let idx = (0..caps.len()).map(proc_macro2::Literal::usize_unsuffixed);
        let record = if reads_entry {
            quote!(let #id = #st { #(#caps: &#r.captures[#idx],)* value: &#value };)
        } else {
            quote!()
        };
        let strict = if en.strict {
            let nums = ir
                .message(mid)
                .fields
                .iter()
                .map(|f| proc_macro2::Literal::u32_unsuffixed(f.tag));
            quote! {
                if !rt::protobuf::only_fields(#r.value, #r.base, &[#(#nums),*]) {
                    return Ok(false);
                }
            }
        } else {
            quote!()
        };
        let what = &ir.message(mid).name;
        let read = if calls.is_empty() {
            quote!(#r.read(#what, |b, at| rt::protobuf::read::<#msg>(b, at, 0, #limits))?;)
        } else {
            quote!(let #value: #msg<'_> = #r.read(#what, |b, at| rt::protobuf::read(b, at, 0, #limits))?;)
        };
        let (mut params, mut args) = (Vec::new(), Vec::new());
        if proto::mentions(&calls, &src.to_string()) {
            params.push(quote!(#src: &rt::Source));
            args.push(quote!(#src));
        }
        params.push(quote!(#r: &rt::kv::Matched<'_>));
        params.push(quote!(#limits: &rt::Limits));
        args.push(quote!(#r));
        args.push(quote!(#limits));
        if !calls.is_empty() {
            params.push(quote!(#out: &mut rt::kv::Found));
            args.push(quote!(#out));
        }
        let f = rs_ident(&format!("record_{}", en.name));
        let doc = format!(
            " A record of entry `{}` (`{}`), its value read as a `{}`: the parts of its tensors (`false`: the record is not of this entry).",
            en.name, en.pattern.text, what
        );
        items.push(quote! {
            #[doc = #doc]
            fn #f(#(#params),*) -> rt::Result<bool> {
                #strict
                #read
                #record
                #calls
                Ok(true)
            }
        });
        arms.push((i, quote!(#f(#(#args),*))));
    }
    let found = if arms
        .iter()
        .any(|(_, call)| proto::mentions(call, &out.to_string()))
    {
        quote!(#out)
    } else {
        quote!(_)
    };
    let dispatch = match arms.as_slice() {
        [] => quote!(|_, _| Ok(true)),
        [(_, call)] => quote!(|#r, #found| #call),
        _ => {
            let last = arms.len() - 1;
            let arms = arms.iter().map(|(i, call)| {
                if *i == last {
                    quote!(_ => #call,)
                } else {
                    let i = proc_macro2::Literal::usize_unsuffixed(*i);
                    quote!(#i => #call,)
                }
            });
            quote!(|#r, #found| match #r.entry { #(#arms)* })
        }
    };
    let entries = entries
        .iter()
        .map(|(pattern, items)| quote!(rt::kv::Entry { pattern: #pattern, items: #items }));
    let map_doc = " Maps the records of a database (keys, and where their values are in `src`): each record's key is matched against the entries in order, its value read as the entry's message, the mappings run over it, and the parts of each tensor joined.";
    items.push(quote! {
        /// The entries, in the order records are matched against them: key pattern, and whether the tensors of a record are the items of a list.
        pub const ENTRIES: &[rt::kv::Entry] = &[#(#entries),*];

        #[doc = #map_doc]
        pub fn map_records(#src: &rt::Source, records: &[rt::kv::Record], #limits: &rt::Limits) -> rt::Result<rt::kv::Mapped> {
            rt::kv::map_records(#src, records, #limits, ENTRIES, #dispatch)
        }
    });

    items.push(gen_encode(ir, fid)?);
    let (open, open_items) = match backend {
        "records" => (quote!(open_db), quote!()),
        b => open_fn(b, &options),
    };
    items.push(open_items);
    let db = quote!(rt::kv::DbDesc {
        backend: #backend,
        open: #open,
        encode: encode_parts,
        split: SPLIT,
        map: map_db,
    });
    let make = (backend == "records").then(|| records_writer(&quote!()));
    let desc = crate::engine::desc_full_max_name(
        make,
        " This format for the registry: name, extensions, detector, indexer, writer and database operations.",
        false,
        false,
        Some(db),
        max_name(ir, fid, backend),
    );
    match backend {
        "records" => items.push(gen_records_backend(&quote!())),
        b => {
            let detect_doc =
                format!(" True when the source is a database folder read by the `{b}` backend.");
            items.push(backend_fns(
                b,
                &quote!(),
                &detect_doc,
                " Lists the tensors of the database.",
            ));
        }
    }
    items.push(desc);
    Ok(quote!(#(#items)*))
}

/// The function that opens a database folder of backend `backend` (`lmdb`, `leveldb`),
/// and the items it needs: the runtime's, with the backend's defaults, when the engine
/// has no open arguments; else `open_db`, passing them as the constant `OPEN`.
fn open_fn(backend: &str, options: &ir::KvOpen) -> (TokenStream, TokenStream) {
    let given = options.given();
    let (plain, with) = match backend {
        "lmdb" => (quote!(rt::kv::open_lmdb), quote!(rt::kv::open_lmdb_with)),
        _ => (
            quote!(rt::kv::open_leveldb),
            quote!(rt::kv::open_leveldb_with),
        ),
    };
    if given.is_empty() {
        return (plain, quote!());
    }
    let names = given.iter().map(|(n, _)| rs_ident(n));
    let values = given
        .iter()
        .map(|(_, v)| proc_macro2::Literal::u64_unsuffixed(*v));
    let items = quote! {
        /// How the format opens its databases: its engine's arguments.
        pub const OPEN: rt::kv::OpenOptions = rt::kv::OpenOptions {
            #(#names: Some(#values),)*
            ..rt::kv::OpenOptions::DEFAULT
        };

        /// Opens a database of the format as [`OPEN`] says.
        pub fn open_db(path: &::std::path::Path, mode: rt::kv::Mode) -> rt::kv::OpenResult {
            #with(path, mode, &OPEN)
        }
    };
    (quote!(open_db), items)
}

/// The write rule of the mapping that has one: `encode_parts`, a tensor as records of
/// its entry (keys from the entry's pattern: the capture the mapping names tensors by
/// gets the name, the other the part's index), `SPLIT` elements at most per record by
/// default (the entry's `split`).
fn gen_encode(ir: &Ir, fid: FormatId) -> R<TokenStream> {
    let fmt = ir.format(fid);
    let Some(written) = fmt.mappings.iter().find_map(|&m| written(ir, m)) else {
        // No write rule: the database is read-only.
        let msg = format!(
            "{} has no write rule: its databases are read-only",
            fmt.public_name
        );
        return Ok(quote! {
            /// No part size: the format's databases are read-only.
            pub const SPLIT: u64 = 1;

            /// Refuses: the format has no write rule.
            pub fn encode_parts(
                meta: &rt::TensorMeta,
                all: &[u8],
                split: ::std::option::Option<u64>,
                put: &mut rt::kv::PutFn<'_>,
            ) -> rt::Result<()> {
                let _ = (meta, all, split, put);
                Err(rt::Error::from(rt::ErrorKind::Unsupported(#msg.to_string())))
            }
        });
    };
    let Written {
        rule,
        entry: en,
        name_cap,
        split,
    } = written;
    let entry = &en.name;
    let split = proc_macro2::Literal::u64_unsuffixed(split);
    let value = match WriteCx::new(ir, false, true).build(rule, true)? {
        Built::Encoded(ts) => ts,
        Built::Msg(ts) => quote!(rt::protobuf::prost::Message::encode_to_vec(&#ts)),
    };
    let pattern = &en.pattern.text;
    let doc = format!(
        " Writes a tensor as records of entry `{entry}` (`{pattern}`): parts of at most `split` elements (by default `SPLIT`; an empty tensor is one part), each encoded by `{entry}_value`, keyed by the pattern with the tensor's name as `{name_cap}` and the part's index as the other capture."
    );
    // The value's statements: a block's own, its last expression returned; `Ok(x?)` is `x`.
    let tokens: Vec<_> = value.clone().into_iter().collect();
    let body = match tokens.as_slice() {
        [proc_macro2::TokenTree::Group(g)] if g.delimiter() == proc_macro2::Delimiter::Brace => {
            let tts: Vec<_> = g.stream().into_iter().collect();
            let semi = tts
                .iter()
                .rposition(|t| matches!(t, proc_macro2::TokenTree::Punct(p) if p.as_char() == ';'))
                .map_or(0, |i| i + 1);
            let (stmts, last) = tts.split_at(semi);
            match last.split_last() {
                Some((proc_macro2::TokenTree::Punct(p), x)) if p.as_char() == '?' => {
                    quote!(#(#stmts)* #(#x)*)
                }
                _ => quote!(#(#stmts)* Ok(#(#last)*)),
            }
        }
        [x @ .., proc_macro2::TokenTree::Punct(p)] if p.as_char() == '?' => quote!(#(#x)*),
        _ => quote!(Ok(#value)),
    };
    let param = |n: &str| {
        let id = rs_ident(n);
        if proto::mentions(&body, n) {
            quote!(#id)
        } else {
            let id = rs_ident(&format!("_{n}"));
            quote!(#id)
        }
    };
    let (begin, end) = (param("begin"), param("end"));
    let value_fn = rs_ident(&format!("{entry}_value"));
    let value_doc = format!(
        " The value of one record of entry `{entry}`: the mapping's write rule for the elements `begin` to `end` of `meta`, whose bytes are `data`."
    );
    Ok(quote! {
        /// Elements per record when a tensor is split into several (the entry's `split`).
        pub const SPLIT: u64 = #split;

        #[doc = #doc]
        pub fn encode_parts(
            meta: &rt::TensorMeta,
            all: &[u8],
            split: Option<u64>,
            put: &mut rt::kv::PutFn<'_>,
        ) -> rt::Result<()> {
            rt::kv::encode_parts(meta, all, split.unwrap_or(SPLIT), #pattern, #name_cap, put, #value_fn)
        }

        #[doc = #value_doc]
        fn #value_fn(meta: &rt::TensorMeta, data: &[u8], #begin: u64, #end: u64) -> rt::Result<Vec<u8>> {
            #body
        }
    })
}

/// What the mapping with a write rule gives `encode_parts`.
struct Written<'a> {
    /// The write rule: the entry's message.
    rule: &'a Expr,
    /// The entry the mapping iterates.
    entry: &'a ir::Entry,
    /// The capture the tensor's name goes to (`name = entry.capture`).
    name_cap: String,
    /// Elements per record (the entry's `split`).
    split: u64,
}

/// The `rt::NameLimit` of a format over `backend` whose keys the write rule of format
/// `keys` makes: LMDB bounds its keys, and so the names in them; the other backends bound
/// keys by the size of the file only. `None` too for a format without a write rule.
fn max_name(ir: &Ir, keys: FormatId, backend: &str) -> Option<TokenStream> {
    if backend != "lmdb" {
        return None;
    }
    let written = ir
        .format(keys)
        .mappings
        .iter()
        .find_map(|&m| written(ir, m))?;
    let pattern = &written.entry.pattern.text;
    let why = format!("an LMDB key, `{pattern}`, is at most 511 bytes");
    Some(quote!(rt::NameLimit::in_pattern(
        rt::kv::LMDB_MAX_KEY_BYTES,
        #pattern,
        #why
    )))
}

/// Mapping `m`'s write rule with what it writes, when it has one. The checker sees that
/// a written mapping of a kv format iterates an entry's value, names its tensors by a
/// capture of that entry, and that the entry has a positive constant `split`.
fn written(ir: &Ir, m: MappingId) -> Option<Written<'_>> {
    let map = ir.mapping(m);
    let rule = map.write.as_ref()?;
    let Some(ExprKind::Member {
        member: Member::Capture(eid, name_cap),
        ..
    }) = map.key(TensorKey::Name).map(|e| &e.kind)
    else {
        return None;
    };
    let entry = ir.entry(*eid);
    let split = match entry.split.as_ref().map(|e| &e.kind) {
        Some(ExprKind::Const(ir::Const::Int(n))) => u64::try_from(*n).ok()?,
        _ => return None,
    };
    Some(Written {
        rule,
        entry,
        name_cap: name_cap.clone(),
        split,
    })
}

/// A file of records whose layout the format declares as `Record` (the checker sees to
/// its `key` and `value` fields): `records` lists them, `detect` reads those in the
/// file's first bytes; mapped and written by module `schema` (`quote!()`: this one).
fn gen_records_backend(schema: &TokenStream) -> TokenStream {
    quote! {
        /// Every record of the file, in file order: its key and where its value is.
        pub fn records(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::kv::Record>> {
            rt::kv::read_records(src, limits, |c, limits| {
                Record::read(c, limits).map(|r| (r.key, r.value))
            })
        }

        /// Writes one record (the `Record` layout).
        pub fn write_record(w: &mut dyn ::std::io::Write, key: &[u8], value: &[u8]) -> rt::Result<u64> {
            Record::write(w, key, rt::Payload::Bytes(value), value.len() as u64)
        }

        /// Opens a file of records (`New` atomic, `Write` appends, `Read` mapped).
        pub fn open_db(path: &::std::path::Path, mode: rt::kv::Mode) -> rt::kv::OpenResult {
            let codec = rt::kv::RecordCodec { read: records, write: write_record };
            Ok(::std::boxed::Box::new(rt::kv::open_record_file(path, mode, codec)?))
        }

        /// True when the source's first bytes read as records (`rt::kv::detect_records`).
        pub fn detect(src: &rt::Source, limits: &rt::Limits) -> bool {
            src.records().is_none() && rt::kv::detect_records(src, limits, records)
        }

        /// Maps the file's records: its tensors, the records holding them, its values.
        pub fn map_db(src: &rt::Source, limits: &rt::Limits) -> rt::Result<rt::kv::Mapped> {
            let records = records(src, limits).map_err(|e| src.in_file(e))?;
            #schema map_records(src, &records, limits)
        }

        /// Lists the tensors of the file.
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            map_db(src, limits).map(|m| m.tensors)
        }
    }
}

/// The writer constructor's body of a file of records: the runtime's `RecordWriter`
/// with this format's record writer and `encode_parts` (of module `schema`).
fn records_writer(schema: &TokenStream) -> TokenStream {
    quote!(Ok(::std::boxed::Box::new(rt::kv::RecordWriter::new(w, options, write_record, #schema encode_parts))))
}

/// `detect` and `index` of a database folder read by backend `backend`, mapped by
/// module `schema` (`quote!()`: this one).
fn backend_fns(
    backend: &str,
    schema: &TokenStream,
    detect_doc: &str,
    index_doc: &str,
) -> TokenStream {
    quote! {
        #[doc = #detect_doc]
        pub fn detect(src: &rt::Source, _limits: &rt::Limits) -> bool {
            rt::kv::is_backend(src, #backend)
        }

        /// Maps the database's records: its tensors, the records holding them, its values.
        pub fn map_db(src: &rt::Source, limits: &rt::Limits) -> rt::Result<rt::kv::Mapped> {
            #schema map_records(src, rt::kv::backend_records(src, #backend)?, limits)
        }

        #[doc = #index_doc]
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            map_db(src, limits).map(|m| m.tensors)
        }
    }
}
