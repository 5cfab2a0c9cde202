//! The expansion of `#[derive(StateDict)]` (the `tensorfmt-derive` crate only forwards
//! here; the `tensorfmt` crate re-exports the derive as `tensorfmt::StateDict`).
//!
//! A struct's fields become entries under dotted keys: each field calls the field type's
//! own `StateDict` implementation with the struct's key and the field's part added.
//!
//! ```ignore
//! #[derive(tensorfmt::StateDict)]
//! #[state(prefix = "model")]          // every key under `model.`
//! struct Block {
//!     #[state(rename = "self_attn")]  // the key part instead of the field's name
//!     attn: Attention,
//!     #[state(flatten)]               // its entries at this struct's level
//!     mlp: Mlp,
//!     #[state(skip)]                  // not stored; `Default` when loaded
//!     cache: Vec<f32>,
//! }
//! ```
//!
//! A fresh load evaluates every field before building the struct, so that the report
//! names every missing key, not the first. Generated code names the `tensorfmt` crate
//! (`::tensorfmt::state`), or the path `#[state(crate = "..")]` gives.

use proc_macro2::TokenStream;
use quote::quote;

/// Expands `#[derive(StateDict)]` on `input` (the item's tokens). Never panics: an enum,
/// a union or a bad `#[state(..)]` attribute becomes a `compile_error!` where it is.
pub fn expand(input: TokenStream) -> TokenStream {
    expand_inner(input).unwrap_or_else(|e| e.to_compile_error())
}

/// How a field is stored.
enum How {
    /// Under this key part (dots nest).
    Part(String),
    /// At the struct's own level.
    Flatten,
    /// Not at all.
    Skip,
}

struct Field {
    /// `self.name` / `self.0`.
    member: syn::Member,
    ty: syn::Type,
    how: How,
}

fn expand_inner(input: TokenStream) -> syn::Result<TokenStream> {
    let item: syn::DeriveInput = syn::parse2(input)?;
    let mut prefix: Option<String> = None;
    let mut krate: syn::Path = syn::parse_quote!(::tensorfmt);
    for attr in item.attrs.iter().filter(|a| a.path().is_ident("state")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("prefix") {
                prefix = Some(meta.value()?.parse::<syn::LitStr>()?.value());
                Ok(())
            } else if meta.path.is_ident("crate") {
                krate = meta.value()?.parse::<syn::LitStr>()?.parse()?;
                Ok(())
            } else {
                Err(meta.error("unknown #[state] attribute on a struct: expected `prefix = \"..\"` or `crate = \"..\"`"))
            }
        })?;
    }
    let syn::Data::Struct(data) = &item.data else {
        return Err(syn::Error::new(
            item.ident.span(),
            "#[derive(StateDict)] takes a struct (its fields are the entries)",
        ));
    };
    let mut fields = Vec::new();
    for (i, f) in data.fields.iter().enumerate() {
        let member = match &f.ident {
            Some(id) => syn::Member::Named(id.clone()),
            None => syn::Member::Unnamed(syn::Index::from(i)),
        };
        let mut how = How::Part(match &f.ident {
            Some(id) => id.to_string().trim_start_matches("r#").to_string(),
            None => i.to_string(),
        });
        for attr in f.attrs.iter().filter(|a| a.path().is_ident("state")) {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("rename") {
                    let name = meta.value()?.parse::<syn::LitStr>()?;
                    if name.value().split('.').all(str::is_empty) {
                        return Err(syn::Error::new(name.span(), "a key part cannot be empty"));
                    }
                    how = How::Part(name.value());
                    Ok(())
                } else if meta.path.is_ident("flatten") {
                    how = How::Flatten;
                    Ok(())
                } else if meta.path.is_ident("skip") {
                    how = How::Skip;
                    Ok(())
                } else {
                    Err(meta.error(
                        "unknown #[state] attribute on a field: expected `rename = \"..\"`, `flatten` or `skip`",
                    ))
                }
            })?;
        }
        fields.push(Field {
            member,
            ty: f.ty.clone(),
            how,
        });
    }
    let st = quote!(#krate::state);
    let name = &item.ident;
    let (impl_generics, ty_generics, where_clause) = item.generics.split_for_impl();
    let base = match &prefix {
        Some(p) => quote!(let key = &key.field(#p);),
        None => quote!(),
    };
    let key_of = |how: &How| match how {
        How::Part(p) => quote!(&key.field(#p)),
        How::Flatten | How::Skip => quote!(key),
    };
    let vars: Vec<syn::Ident> = (0..fields.len())
        .map(|i| quote::format_ident!("f{}", i))
        .collect();
    let loads = fields.iter().zip(&vars).map(|(f, v)| {
        let ty = &f.ty;
        match &f.how {
            How::Skip => quote!(let #v = ::core::option::Option::Some(<#ty as ::core::default::Default>::default());),
            how => {
                let k = key_of(how);
                quote!(let #v = <#ty as #st::StateDict>::load_state(cx, #k);)
            }
        }
    });
    let build = fields.iter().zip(&vars).map(|(f, v)| {
        let m = &f.member;
        quote!(#m: #v?)
    });
    let updates = fields.iter().filter_map(|f| {
        let (m, ty) = (&f.member, &f.ty);
        match &f.how {
            How::Skip => None,
            how => {
                let k = key_of(how);
                Some(quote!(<#ty as #st::StateDict>::update_state(&mut self.#m, cx, #k);))
            }
        }
    });
    let saves = fields.iter().filter_map(|f| {
        let (m, ty) = (&f.member, &f.ty);
        match &f.how {
            How::Skip => None,
            how => {
                let k = key_of(how);
                Some(quote!(<#ty as #st::StateDict>::save_state(&self.#m, cx, #k)?;))
            }
        }
    });
    Ok(quote! {
        impl #impl_generics #st::StateDict for #name #ty_generics #where_clause {
            fn load_state(cx: &mut #st::LoadCx<'_>, key: &#st::Key) -> ::core::option::Option<Self> {
                #base
                #(#loads)*
                ::core::option::Option::Some(Self { #(#build),* })
            }

            fn update_state(&mut self, cx: &mut #st::LoadCx<'_>, key: &#st::Key) {
                #base
                #(#updates)*
            }

            fn save_state<'a>(&'a self, cx: &mut #st::SaveCx<'a>, key: &#st::Key) -> #krate::Result<()> {
                #base
                #(#saves)*
                ::core::result::Result::Ok(())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expanded(input: TokenStream) -> String {
        let file: syn::File = syn::parse2(expand(input)).expect("the expansion parses");
        prettyplease::unparse(&file)
    }

    fn pretty(tokens: TokenStream) -> String {
        prettyplease::unparse(&syn::parse2(tokens).expect("the expected code parses"))
    }

    #[test]
    fn each_field_is_an_entry_under_its_name() {
        let got = expanded(quote! {
            struct Linear { weight: Tensor, bias: Option<Tensor> }
        });
        let want = pretty(quote! {
            impl ::tensorfmt::state::StateDict for Linear {
                fn load_state(cx: &mut ::tensorfmt::state::LoadCx<'_>, key: &::tensorfmt::state::Key) -> ::core::option::Option<Self> {
                    let f0 = <Tensor as ::tensorfmt::state::StateDict>::load_state(cx, &key.field("weight"));
                    let f1 = <Option<Tensor> as ::tensorfmt::state::StateDict>::load_state(cx, &key.field("bias"));
                    ::core::option::Option::Some(Self { weight: f0?, bias: f1? })
                }
                fn update_state(&mut self, cx: &mut ::tensorfmt::state::LoadCx<'_>, key: &::tensorfmt::state::Key) {
                    <Tensor as ::tensorfmt::state::StateDict>::update_state(&mut self.weight, cx, &key.field("weight"));
                    <Option<Tensor> as ::tensorfmt::state::StateDict>::update_state(&mut self.bias, cx, &key.field("bias"));
                }
                fn save_state<'a>(&'a self, cx: &mut ::tensorfmt::state::SaveCx<'a>, key: &::tensorfmt::state::Key) -> ::tensorfmt::Result<()> {
                    <Tensor as ::tensorfmt::state::StateDict>::save_state(&self.weight, cx, &key.field("weight"))?;
                    <Option<Tensor> as ::tensorfmt::state::StateDict>::save_state(&self.bias, cx, &key.field("bias"))?;
                    ::core::result::Result::Ok(())
                }
            }
        });
        assert_eq!(got, want);
    }

    #[test]
    fn attributes_rename_flatten_skip_and_prefix() {
        let got = expanded(quote! {
            #[state(prefix = "model", crate = "::tf")]
            struct Block<T> {
                #[state(rename = "self_attn")] attn: T,
                #[state(flatten)] mlp: Mlp,
                #[state(skip)] cache: Vec<f32>,
            }
        });
        let want = pretty(quote! {
            impl<T> ::tf::state::StateDict for Block<T> {
                fn load_state(cx: &mut ::tf::state::LoadCx<'_>, key: &::tf::state::Key) -> ::core::option::Option<Self> {
                    let key = &key.field("model");
                    let f0 = <T as ::tf::state::StateDict>::load_state(cx, &key.field("self_attn"));
                    let f1 = <Mlp as ::tf::state::StateDict>::load_state(cx, key);
                    let f2 = ::core::option::Option::Some(<Vec<f32> as ::core::default::Default>::default());
                    ::core::option::Option::Some(Self { attn: f0?, mlp: f1?, cache: f2? })
                }
                fn update_state(&mut self, cx: &mut ::tf::state::LoadCx<'_>, key: &::tf::state::Key) {
                    let key = &key.field("model");
                    <T as ::tf::state::StateDict>::update_state(&mut self.attn, cx, &key.field("self_attn"));
                    <Mlp as ::tf::state::StateDict>::update_state(&mut self.mlp, cx, key);
                }
                fn save_state<'a>(&'a self, cx: &mut ::tf::state::SaveCx<'a>, key: &::tf::state::Key) -> ::tf::Result<()> {
                    let key = &key.field("model");
                    <T as ::tf::state::StateDict>::save_state(&self.attn, cx, &key.field("self_attn"))?;
                    <Mlp as ::tf::state::StateDict>::save_state(&self.mlp, cx, key)?;
                    ::core::result::Result::Ok(())
                }
            }
        });
        assert_eq!(got, want);
    }

    #[test]
    fn tuple_structs_are_keyed_by_position() {
        let got = expanded(quote! { struct Pair(Tensor, Tensor); });
        let want = pretty(quote! {
            impl ::tensorfmt::state::StateDict for Pair {
                fn load_state(cx: &mut ::tensorfmt::state::LoadCx<'_>, key: &::tensorfmt::state::Key) -> ::core::option::Option<Self> {
                    let f0 = <Tensor as ::tensorfmt::state::StateDict>::load_state(cx, &key.field("0"));
                    let f1 = <Tensor as ::tensorfmt::state::StateDict>::load_state(cx, &key.field("1"));
                    ::core::option::Option::Some(Self { 0: f0?, 1: f1? })
                }
                fn update_state(&mut self, cx: &mut ::tensorfmt::state::LoadCx<'_>, key: &::tensorfmt::state::Key) {
                    <Tensor as ::tensorfmt::state::StateDict>::update_state(&mut self.0, cx, &key.field("0"));
                    <Tensor as ::tensorfmt::state::StateDict>::update_state(&mut self.1, cx, &key.field("1"));
                }
                fn save_state<'a>(&'a self, cx: &mut ::tensorfmt::state::SaveCx<'a>, key: &::tensorfmt::state::Key) -> ::tensorfmt::Result<()> {
                    <Tensor as ::tensorfmt::state::StateDict>::save_state(&self.0, cx, &key.field("0"))?;
                    <Tensor as ::tensorfmt::state::StateDict>::save_state(&self.1, cx, &key.field("1"))?;
                    ::core::result::Result::Ok(())
                }
            }
        });
        assert_eq!(got, want);
    }

    #[test]
    fn what_cannot_be_derived_is_a_compile_error() {
        for (input, says) in [
            (quote! { enum E { A } }, "takes a struct"),
            (
                quote! { struct S { #[state(rename = "")] a: T } },
                "cannot be empty",
            ),
            (
                quote! { struct S { #[state(bogus)] a: T } },
                "unknown #[state] attribute on a field",
            ),
            (
                quote! { #[state(nest)] struct S { a: T } },
                "unknown #[state] attribute on a struct",
            ),
        ] {
            let out = expand(input).to_string();
            assert!(out.contains("compile_error") && out.contains(says), "{out}");
        }
    }
}
