//! What each parameter of a lowering function is: the context, an ONNX input, or an attribute.

use syn::spanned::Spanned;
use syn::{Expr, FnArg, GenericArgument, Ident, ItemFn, LitStr, Pat, PathArguments, Type};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Required,
    Optional,
    Variadic,
}

pub struct Input {
    pub binding: Ident,
    pub kind: InputKind,
    /// `#[host]`: the value is read on the host (`Vec<i64>`, `i64`, or an `Option` of those).
    pub host: Option<Type>,
    /// `#[host(attr_until = N)]`: up to opset N the value is the attribute of the same name (or
    /// `name = "..."`), which later opsets turned into this input (Squeeze's axes, TopK's k).
    pub attr_until: Option<(syn::LitInt, String)>,
}

pub struct Attr {
    pub binding: Ident,
    pub onnx_name: String,
    /// The attribute's value type (`T` of `Option<T>` for optional attributes).
    pub value_type: Type,
    pub default: Option<Expr>,
    pub optional: bool,
    /// The opsets of the row in which the attribute exists (`since = N`, `until = N`).
    pub gate: crate::args::Gate,
}

pub struct Signature {
    pub inputs: Vec<Input>,
    pub attrs: Vec<Attr>,
}

impl Signature {
    /// Reads the function's parameters and strips our `#[attr]` markers from them.
    pub fn analyse(function: &mut ItemFn) -> syn::Result<Signature> {
        let mut params = function.sig.inputs.iter_mut();
        match params.next() {
            Some(FnArg::Typed(cx)) if matches!(*cx.ty, Type::Reference(_)) => {}
            other => {
                let span = other.map_or(function.sig.ident.span(), |p| p.span());
                return Err(syn::Error::new(
                    span,
                    "the first parameter must be the context: `cx: &mut Lower`",
                ));
            }
        }
        let mut inputs = Vec::new();
        let mut attrs = Vec::new();
        for param in params {
            let FnArg::Typed(param) = param else {
                return Err(syn::Error::new(
                    param.span(),
                    "lowering functions take no `self`",
                ));
            };
            let Pat::Ident(binding) = &*param.pat else {
                return Err(syn::Error::new(
                    param.pat.span(),
                    "use a plain name for each parameter",
                ));
            };
            let binding = binding.ident.clone();
            let marker = param.attrs.iter().position(|a| a.path().is_ident("attr"));
            if let Some(index) = marker {
                let marker = param.attrs.remove(index);
                attrs.push(parse_attr(binding, &marker, &param.ty)?);
                continue;
            }
            let host_marker = param.attrs.iter().position(|a| a.path().is_ident("host"));
            if let Some(index) = host_marker {
                let marker = param.attrs.remove(index);
                let attr_until = parse_host(&marker, &binding)?;
                let (value_type, kind) = match generic_inner(&param.ty, "Option") {
                    Some(inner) => (inner.clone(), InputKind::Optional),
                    None => ((*param.ty).clone(), InputKind::Required),
                };
                inputs.push(Input {
                    binding,
                    kind,
                    host: Some(value_type),
                    attr_until,
                });
                continue;
            }
            if let Some(other) = param.attrs.first() {
                return Err(syn::Error::new(
                    other.span(),
                    "unknown parameter marker; expected `#[attr(...)]` or `#[host]`",
                ));
            }
            let kind = input_kind(&param.ty).ok_or_else(|| {
                syn::Error::new(
                    param.ty.span(),
                    "an input must be `Array`, `Option<Array>` or `Vec<Array>`; mark attributes with `#[attr]`",
                )
            })?;
            if inputs
                .last()
                .is_some_and(|i: &Input| i.kind == InputKind::Variadic)
            {
                return Err(syn::Error::new(
                    param.ty.span(),
                    "only the last input may be variadic",
                ));
            }
            inputs.push(Input {
                binding,
                kind,
                host: None,
                attr_until: None,
            });
        }
        Ok(Signature { inputs, attrs })
    }
}

/// `#[host]` or `#[host(attr_until = N[, name = "onnx_name"])]`.
fn parse_host(
    marker: &syn::Attribute,
    binding: &Ident,
) -> syn::Result<Option<(syn::LitInt, String)>> {
    if matches!(marker.meta, syn::Meta::Path(_)) {
        return Ok(None);
    }
    let mut until = None;
    let mut name = binding.to_string();
    marker.parse_nested_meta(|meta| {
        if meta.path.is_ident("attr_until") {
            until = Some(meta.value()?.parse::<syn::LitInt>()?);
        } else if meta.path.is_ident("name") {
            name = meta.value()?.parse::<LitStr>()?.value();
        } else {
            return Err(meta.error("expected `attr_until = N` or `name = \"...\"`"));
        }
        Ok(())
    })?;
    match until {
        Some(until) => Ok(Some((until, name))),
        None => Err(syn::Error::new(
            marker.span(),
            "`#[host(...)]` needs `attr_until = N` (the last opset where the value is an attribute)",
        )),
    }
}

fn parse_attr(binding: Ident, marker: &syn::Attribute, ty: &Type) -> syn::Result<Attr> {
    let mut onnx_name = binding.to_string();
    let mut default = None;
    let mut gate = crate::args::Gate::default();
    if !matches!(marker.meta, syn::Meta::Path(_)) {
        marker.parse_nested_meta(|meta| {
            if meta.path.is_ident("default") {
                default = Some(meta.value()?.parse::<Expr>()?);
            } else if meta.path.is_ident("name") {
                onnx_name = meta.value()?.parse::<LitStr>()?.value();
            } else if meta.path.is_ident("since") {
                gate.since = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("until") {
                gate.until = Some(meta.value()?.parse()?);
            } else {
                return Err(meta.error(
                    "expected `default = ...`, `name = \"...\"`, `since = N` or `until = N`",
                ));
            }
            Ok(())
        })?;
    }
    let (value_type, optional) = match generic_inner(ty, "Option") {
        Some(inner) => (inner.clone(), true),
        None => (ty.clone(), false),
    };
    if optional && default.is_some() {
        return Err(syn::Error::new(
            ty.span(),
            "an `Option` attribute has no default; use the plain type",
        ));
    }
    Ok(Attr {
        binding,
        onnx_name,
        value_type,
        default,
        optional,
        gate,
    })
}

fn input_kind(ty: &Type) -> Option<InputKind> {
    if is_array(ty) {
        return Some(InputKind::Required);
    }
    if generic_inner(ty, "Option").is_some_and(is_array) {
        return Some(InputKind::Optional);
    }
    if generic_inner(ty, "Vec").is_some_and(is_array) {
        return Some(InputKind::Variadic);
    }
    None
}

fn is_array(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "Array" && s.arguments.is_none()))
}

/// `Wrapper<T>` → `T`.
fn generic_inner<'a>(ty: &'a Type, wrapper: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != wrapper {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        GenericArgument::Type(inner) if args.args.len() == 1 => Some(inner),
        _ => None,
    }
}
