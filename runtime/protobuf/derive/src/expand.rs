//! The expansion of `#[derive(View)]`: the attributes read into a description of the view
//! ([`Attrs`], [`Held`]), then the `View` impl written from it.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, Ident, LitInt, LitStr, Path, Token};

/// How a field's values lie on the wire: the name of its `Field` accessor, and whether it
/// is an embedded message (read one level deeper) or a `bool` (a varint compared to 0).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Varint,
    Bool,
    Zigzag,
    Fixed32,
    Sfixed32,
    Fixed64,
    Float,
    Double,
    String,
    Bytes,
    Message,
}

const KINDS: &str =
    "varint, bool, zigzag, fixed32, sfixed32, fixed64, float, double, string, bytes or message";

impl Kind {
    fn parse(id: &Ident) -> syn::Result<Kind> {
        Ok(match id.to_string().as_str() {
            "varint" => Kind::Varint,
            "bool" => Kind::Bool,
            "zigzag" => Kind::Zigzag,
            "fixed32" => Kind::Fixed32,
            "sfixed32" => Kind::Sfixed32,
            "fixed64" => Kind::Fixed64,
            "float" => Kind::Float,
            "double" => Kind::Double,
            "string" => Kind::String,
            "bytes" => Kind::Bytes,
            "message" => Kind::Message,
            other => {
                return Err(syn::Error::new(
                    id.span(),
                    format!("unknown wire kind `{other}`: expected {KINDS}"),
                ))
            }
        })
    }
}

/// How the struct field holds the values.
#[derive(Clone, Copy, PartialEq)]
enum Hold {
    /// `Option<T>`: the last occurrence.
    Last,
    /// `Option<Box<T>>`: the last occurrence, boxed.
    Boxed,
    /// `Vec<T>`: every occurrence, in order.
    Repeated,
}

/// A declared field the view holds.
struct Held {
    ident: Ident,
    number: LitInt,
    kind: Kind,
    hold: Hold,
}

/// What the attributes say of the view.
struct Attrs {
    name: String,
    krate: Path,
    span: Ident,
    held: Vec<Held>,
}

fn parse(input: &DeriveInput) -> syn::Result<Attrs> {
    let mut name = input.ident.to_string();
    let mut krate: Path = syn::parse_quote!(::tensorfmt_runtime::gen::protobuf);
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("view")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("name") {
                name = meta.value()?.parse::<LitStr>()?.value();
            } else if meta.path.is_ident("crate") {
                krate = meta.value()?.parse::<LitStr>()?.parse()?;
            } else {
                return Err(meta.error("expected `name = \"..\"` or `crate = \"..\"`"));
            }
            Ok(())
        })?;
    }
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(
            Span::call_site(),
            "`View` derives for a struct",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new(
            Span::call_site(),
            "`View` derives for a struct with named fields",
        ));
    };
    let mut span = None;
    let mut held = Vec::new();
    for f in &fields.named {
        let ident = f.ident.clone().expect("named field");
        let mut attrs = f.attrs.iter().filter(|a| a.path().is_ident("view"));
        let Some(attr) = attrs.next() else {
            return Err(syn::Error::new(
                ident.span(),
                "a view's field needs `#[view(span)]` or `#[view(NUMBER, KIND)]`",
            ));
        };
        if let Some(extra) = attrs.next() {
            return Err(syn::Error::new_spanned(
                extra,
                "one `#[view(..)]` per field",
            ));
        }
        let args = attr.parse_args_with(
            syn::punctuated::Punctuated::<syn::Expr, Token![,]>::parse_terminated,
        )?;
        let args: Vec<&syn::Expr> = args.iter().collect();
        match args.as_slice() {
            [syn::Expr::Path(p)] if p.path.is_ident("span") => {
                if span.replace(ident.clone()).is_some() {
                    return Err(syn::Error::new(ident.span(), "a second `#[view(span)]`"));
                }
            }
            [syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(number),
                ..
            }), kind, rest @ ..] => {
                let kind = Kind::parse(word(kind)?)?;
                let hold = match rest {
                    [] => Hold::Last,
                    [h] => match word(h)?.to_string().as_str() {
                        "repeated" => Hold::Repeated,
                        "boxed" => Hold::Boxed,
                        _ => {
                            return Err(syn::Error::new_spanned(
                                h,
                                "expected `repeated` or `boxed`",
                            ))
                        }
                    },
                    [_, extra, ..] => {
                        return Err(syn::Error::new_spanned(extra, "unexpected argument"))
                    }
                };
                number.base10_parse::<u32>()?;
                held.push(Held {
                    ident,
                    number: number.clone(),
                    kind,
                    hold,
                });
            }
            _ => {
                return Err(syn::Error::new_spanned(
                    attr,
                    "expected `#[view(span)]` or `#[view(NUMBER, KIND)]`",
                ))
            }
        }
    }
    let span = span.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            "a view needs a field `#[view(span)]` holding the message's bytes",
        )
    })?;
    Ok(Attrs {
        name,
        krate,
        span,
        held,
    })
}

fn word(e: &syn::Expr) -> syn::Result<&Ident> {
    match e {
        syn::Expr::Path(p) => p
            .path
            .get_ident()
            .ok_or_else(|| syn::Error::new_spanned(e, "expected a word")),
        _ => Err(syn::Error::new_spanned(e, "expected a word")),
    }
}

/// The `View` impl of the struct `input`.
pub(crate) fn view(input: &DeriveInput) -> syn::Result<TokenStream> {
    let a = parse(input)?;
    let ty = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let lifetime = match input.generics.lifetimes().next() {
        Some(l) => l.lifetime.clone(),
        None => {
            return Err(syn::Error::new(
                Span::call_site(),
                "a view borrows its message: it needs a lifetime parameter",
            ))
        }
    };
    let krate = &a.krate;
    let name = &a.name;
    let span = &a.span;
    let nested = a.held.iter().any(|h| h.kind == Kind::Message);
    let arms = a.held.iter().map(|h| {
        let id = &h.ident;
        let number = &h.number;
        let field = id.to_string();
        let what = format!("{name}.{}", field.strip_prefix("r#").unwrap_or(&field));
        let value = match h.kind {
            Kind::Bool => quote!(f.varint(#what)? != 0),
            Kind::Message if h.hold == Hold::Repeated => {
                quote!(f.message_item(self.#id.len(), #what, depth, limits)?)
            }
            Kind::Message => quote!(f.message_once(self.#id.is_some(), #what, depth, limits)?),
            k => {
                let accessor = format_ident!(
                    "{}",
                    match k {
                        Kind::Varint => "varint",
                        Kind::Zigzag => "zigzag",
                        Kind::Fixed32 => "fixed32",
                        Kind::Sfixed32 => "sfixed32",
                        Kind::Fixed64 => "fixed64",
                        Kind::Float => "float",
                        Kind::Double => "double",
                        Kind::String => "str",
                        _ => "bytes",
                    }
                );
                quote!(f.#accessor(#what)?)
            }
        };
        let set = match h.hold {
            Hold::Last => quote!(self.#id = ::core::option::Option::Some(#value)),
            Hold::Boxed => quote!(
                self.#id = ::core::option::Option::Some(::std::boxed::Box::new(#value))
            ),
            Hold::Repeated => quote!(self.#id.push(#value)),
        };
        quote!(#number => #set,)
    });
    let (f, depth, limits) = match (a.held.is_empty(), nested) {
        (true, _) => (quote!(_f), quote!(_depth), quote!(_limits)),
        (false, false) => (quote!(f), quote!(_depth), quote!(_limits)),
        (false, true) => (quote!(f), quote!(depth), quote!(limits)),
    };
    let dispatch = if a.held.is_empty() {
        quote!()
    } else {
        quote!(match f.number { #(#arms)* _ => {} })
    };
    // `span` itself, in the shorthand.
    let init = if *span == "span" {
        quote!(span)
    } else {
        quote!(#span: span)
    };
    Ok(quote! {
        impl #impl_generics #krate::View<#lifetime> for #ty #ty_generics #where_clause {
            const NAME: &'static str = #name;

            #[inline]
            fn empty(span: #krate::Span<#lifetime>) -> Self {
                #ty { #init, ..::core::default::Default::default() }
            }

            #[inline]
            fn field(
                &mut self,
                #f: &#krate::Field<#lifetime>,
                #depth: u64,
                #limits: &#krate::__private::Limits,
            ) -> #krate::__private::Result<()> {
                #dispatch
                ::core::result::Result::Ok(())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(input: TokenStream) -> String {
        view(&syn::parse2(input).unwrap())
            .unwrap_or_else(syn::Error::into_compile_error)
            .to_string()
    }

    #[test]
    fn a_message_with_every_hold() {
        let got = expand(quote! {
            #[view(name = "TensorProto")]
            pub struct TensorProto<'a> {
                #[view(span)]
                pub span: rt::protobuf::Span<'a>,
                #[view(2, varint)]
                pub data_type: Option<i64>,
                #[view(6, bytes, repeated)]
                pub string_data: Vec<(&'a [u8], u64)>,
                #[view(8, string)]
                pub name: Option<&'a str>,
                #[view(13, message, repeated)]
                pub external_data: Vec<Entry<'a>>,
                #[view(3, message, boxed)]
                pub r#type: Option<Box<TensorProto<'a>>>,
                #[view(4, bool)]
                pub flag: Option<bool>,
            }
        });
        let want = quote! {
            impl<'a> ::tensorfmt_runtime::gen::protobuf::View<'a> for TensorProto<'a> {
                const NAME: &'static str = "TensorProto";

                #[inline]
                fn empty(span: ::tensorfmt_runtime::gen::protobuf::Span<'a>) -> Self {
                    TensorProto { span, ..::core::default::Default::default() }
                }

                #[inline]
                fn field(
                    &mut self,
                    f: &::tensorfmt_runtime::gen::protobuf::Field<'a>,
                    depth: u64,
                    limits: &::tensorfmt_runtime::gen::protobuf::__private::Limits,
                ) -> ::tensorfmt_runtime::gen::protobuf::__private::Result<()> {
                    match f.number {
                        2 => self.data_type = ::core::option::Option::Some(f.varint("TensorProto.data_type")?),
                        6 => self.string_data.push(f.bytes("TensorProto.string_data")?),
                        8 => self.name = ::core::option::Option::Some(f.str("TensorProto.name")?),
                        13 => self.external_data.push(f.message_item(self.external_data.len(), "TensorProto.external_data", depth, limits)?),
                        3 => self.r#type = ::core::option::Option::Some(::std::boxed::Box::new(
                            f.message_once(self.r#type.is_some(), "TensorProto.type", depth, limits)?
                        )),
                        4 => self.flag = ::core::option::Option::Some(f.varint("TensorProto.flag")? != 0),
                        _ => {}
                    }
                    ::core::result::Result::Ok(())
                }
            }
        };
        assert_eq!(got, want.to_string());
    }

    #[test]
    fn scalars_only_and_a_crate_path() {
        let got = expand(quote! {
            #[view(crate = "crate")]
            struct Pair<'b> {
                #[view(span)]
                at: Span<'b>,
                #[view(1, zigzag)]
                a: Option<i64>,
                #[view(2, fixed32)]
                b: Option<i64>,
                #[view(3, sfixed32)]
                c: Option<i64>,
                #[view(4, fixed64)]
                d: Option<i64>,
                #[view(5, float)]
                e: Option<f32>,
                #[view(6, double)]
                g: Option<f64>,
            }
        });
        let want = quote! {
            impl<'b> crate::View<'b> for Pair<'b> {
                const NAME: &'static str = "Pair";

                #[inline]
                fn empty(span: crate::Span<'b>) -> Self {
                    Pair { at: span, ..::core::default::Default::default() }
                }

                #[inline]
                fn field(
                    &mut self,
                    f: &crate::Field<'b>,
                    _depth: u64,
                    _limits: &crate::__private::Limits,
                ) -> crate::__private::Result<()> {
                    match f.number {
                        1 => self.a = ::core::option::Option::Some(f.zigzag("Pair.a")?),
                        2 => self.b = ::core::option::Option::Some(f.fixed32("Pair.b")?),
                        3 => self.c = ::core::option::Option::Some(f.sfixed32("Pair.c")?),
                        4 => self.d = ::core::option::Option::Some(f.fixed64("Pair.d")?),
                        5 => self.e = ::core::option::Option::Some(f.float("Pair.e")?),
                        6 => self.g = ::core::option::Option::Some(f.double("Pair.g")?),
                        _ => {}
                    }
                    ::core::result::Result::Ok(())
                }
            }
        };
        assert_eq!(got, want.to_string());
    }

    #[test]
    fn no_field_held() {
        let got = expand(quote! {
            struct Empty<'a> {
                #[view(span)]
                span: Span<'a>,
            }
        });
        let want = quote! {
            impl<'a> ::tensorfmt_runtime::gen::protobuf::View<'a> for Empty<'a> {
                const NAME: &'static str = "Empty";

                #[inline]
                fn empty(span: ::tensorfmt_runtime::gen::protobuf::Span<'a>) -> Self {
                    Empty { span, ..::core::default::Default::default() }
                }

                #[inline]
                fn field(
                    &mut self,
                    _f: &::tensorfmt_runtime::gen::protobuf::Field<'a>,
                    _depth: u64,
                    _limits: &::tensorfmt_runtime::gen::protobuf::__private::Limits,
                ) -> ::tensorfmt_runtime::gen::protobuf::__private::Result<()> {
                    ::core::result::Result::Ok(())
                }
            }
        };
        assert_eq!(got, want.to_string());
    }

    #[test]
    fn errors_at_the_attribute() {
        for (input, message) in [
            (
                quote!(
                    struct V<'a> {
                        #[view(1, string)]
                        k: Option<&'a str>,
                    }
                ),
                "a view needs a field `#[view(span)]`",
            ),
            (
                quote!(
                    struct V<'a> {
                        #[view(span)]
                        s: Span<'a>,
                        #[view(1, text)]
                        k: Option<&'a str>,
                    }
                ),
                "unknown wire kind `text`",
            ),
            (
                quote!(
                    struct V<'a> {
                        #[view(span)]
                        s: Span<'a>,
                        k: Option<&'a str>,
                    }
                ),
                "needs `#[view(span)]` or `#[view(NUMBER, KIND)]`",
            ),
            (
                quote!(
                    struct V<'a> {
                        #[view(span)]
                        s: Span<'a>,
                        #[view(1, string, twice)]
                        k: Option<&'a str>,
                    }
                ),
                "expected `repeated` or `boxed`",
            ),
            (
                quote!(
                    struct V {
                        #[view(span)]
                        s: Span<'static>,
                    }
                ),
                "needs a lifetime parameter",
            ),
            (
                quote!(
                    #[view(nmae = "V")]
                    struct V<'a> {
                        #[view(span)]
                        s: Span<'a>,
                    }
                ),
                "expected `name",
            ),
        ] {
            let got = expand(input);
            assert!(got.contains("compile_error"), "{got}");
            assert!(got.contains(message), "{got} lacks {message}");
        }
    }
}
