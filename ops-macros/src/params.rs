//! What each parameter of a lowering function is: the context, an ONNX input, or an attribute.

use syn::spanned::Spanned;
use syn::{Expr, FnArg, GenericArgument, Ident, ItemFn, LitStr, Pat, PathArguments, Type};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Required,
    Optional,
    Variadic,
    /// A `Sequence` parameter: one input holding a sequence of tensors.
    Sequence,
}

pub struct Input {
    pub binding: Ident,
    pub kind: InputKind,
    /// `#[host]`: the value is read on the host (`Vec<i64>`, `i64`, or an `Option` of those).
    pub host: Option<Type>,
    /// When the slot exists and what it was before (`#[host(...)]` / `#[input(...)]`).
    pub gate: InputGate,
}

/// An input's opset history inside its row, from `#[host(...)]` or `#[input(...)]`:
/// `since = N` (a slot new at opset N: absent before), `attr_until = N` (up to opset N the value
/// is the attribute of the same name, or `name = "..."`, which later opsets turned into this
/// input; an array input names the attribute's type with `attr = f32`), `required_until = N`
/// (an optional input that was required up to opset N).
#[derive(Default)]
pub struct InputGate {
    pub since: Option<syn::LitInt>,
    pub attr_until: Option<(syn::LitInt, String)>,
    pub attr_type: Option<Type>,
    pub required_until: Option<syn::LitInt>,
}

impl InputGate {
    /// The first opset with the slot, when not the row's first.
    pub fn first_opset(&self) -> syn::Result<Option<i64>> {
        if let Some(n) = &self.since {
            return Ok(Some(n.base10_parse()?));
        }
        match &self.attr_until {
            Some((until, _)) => Ok(Some(until.base10_parse::<i64>()? + 1)),
            None => Ok(None),
        }
    }
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
                let (value_type, kind) = match generic_inner(&param.ty, "Option") {
                    Some(inner) => (inner.clone(), InputKind::Optional),
                    None => ((*param.ty).clone(), InputKind::Required),
                };
                let gate = parse_input_gate(&marker, &binding, kind, true)?;
                inputs.push(Input {
                    binding,
                    kind,
                    host: Some(value_type),
                    gate,
                });
                continue;
            }
            let input_marker = param.attrs.iter().position(|a| a.path().is_ident("input"));
            let input_marker = input_marker.map(|index| param.attrs.remove(index));
            if let Some(other) = param.attrs.first() {
                return Err(syn::Error::new(
                    other.span(),
                    "unknown parameter marker; expected `#[attr(...)]`, `#[host]` or `#[input(...)]`",
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
            let gate = match &input_marker {
                Some(marker) => parse_input_gate(marker, &binding, kind, false)?,
                None => InputGate::default(),
            };
            inputs.push(Input {
                binding,
                kind,
                host: None,
                gate,
            });
        }
        Ok(Signature { inputs, attrs })
    }
}

/// `#[host]`, `#[host(...)]` or `#[input(...)]`: see [`InputGate`].
fn parse_input_gate(
    marker: &syn::Attribute,
    binding: &Ident,
    kind: InputKind,
    host: bool,
) -> syn::Result<InputGate> {
    let mut gate = InputGate::default();
    if matches!(marker.meta, syn::Meta::Path(_)) {
        return if host {
            Ok(gate)
        } else {
            Err(syn::Error::new(
                marker.span(),
                "`#[input(...)]` needs `since`, `attr_until` or `required_until`",
            ))
        };
    }
    let mut name = binding.to_string();
    marker.parse_nested_meta(|meta| {
        if meta.path.is_ident("attr_until") {
            gate.attr_until = Some((meta.value()?.parse()?, String::new()));
        } else if meta.path.is_ident("name") {
            name = meta.value()?.parse::<LitStr>()?.value();
        } else if meta.path.is_ident("since") {
            gate.since = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("required_until") && !host {
            gate.required_until = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("attr") && !host {
            gate.attr_type = Some(meta.value()?.parse()?);
        } else {
            return Err(meta.error(if host {
                "expected `attr_until = N`, `name = \"...\"` or `since = N`"
            } else {
                "expected `since = N`, `attr_until = N`, `attr = Type`, `name = \"...\"` or `required_until = N`"
            }));
        }
        Ok(())
    })?;
    if let Some((_, slot)) = &mut gate.attr_until {
        *slot = name;
    }
    let fail = |message: &str| Err(syn::Error::new(marker.span(), message));
    if gate.attr_until.is_some() && gate.since.is_some() {
        return fail("`attr_until = N` already says the slot exists from N + 1; drop `since`");
    }
    if !host && gate.attr_until.is_some() != gate.attr_type.is_some() {
        return fail("an array input that was an attribute needs both `attr_until = N` and `attr = Type` (f32, Vec<f32>, i64, Vec<i64>)");
    }
    if gate.required_until.is_some() && kind != InputKind::Optional {
        return fail("`required_until` is for an `Option<Array>` input that became optional");
    }
    if gate.since.is_some() && kind == InputKind::Required {
        return fail("a slot new at an opset is absent before it: take it as `Option<...>`");
    }
    Ok(gate)
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
    if matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "Sequence" && s.arguments.is_none()))
    {
        return Some(InputKind::Sequence);
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
