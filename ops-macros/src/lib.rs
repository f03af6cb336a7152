//! `#[onnx_op(...)]`: declares one ONNX op (for one opset range) from its MLX lowering.
//!
//! ```ignore
//! /// Elementwise sum with numpy broadcasting.
//! #[onnx_op(op = "Add", since = 14, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
//! fn add(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
//!     Ok(ops::add(&a, &b, cx.stream())?)
//! }
//! ```
//!
//! Arguments: `op`, `domain` (default: the ONNX domain), `since = N` or `opset = A..=B`,
//! `types(T = SET | SET | since(N, SET | ...) | until(N, ...), ...)` (sets from
//! `op_specs::dtypes`; a `since`/`until` set is allowed only in those opsets of the row),
//! `ignores(name: Type [since N] [until N], ...)` (attributes accepted and validated by kind but
//! never read: training-only knobs and hints), `inputs(Name: T, ...)`,
//! `outputs(Name: T, ...)`, `shape = Shapeless | ShapeKeyed | Eager | function_of_node`,
//! `heterogeneous(Name, ...)` (variadic ports whose instances each bind the type variable on
//! their own, as ONNX's heterogeneous variadics: If's outputs, Loop's carried values),
//! optionally `claim = function_of_node` (extra checks, each decline with a reason) and
//! `declines = "..."` (what the custom claim declines, for the coverage doc).
//! `numerics = "..."` (how the answer's rounding compares with ORT's CPU EP, where it differs
//! from computing in the node's type: for the coverage doc).
//! `precision = Float32` (the op computes in float32 when a session runs float32 graphs in
//! half precision: accumulations, in-place float32 state, float inputs read as parameters;
//! the default, `Follows`, computes in the session's half type where the row allows it;
//! `Widens`, takes the half type and accumulates in float32 inside its own lowering).
//!
//! Parameters after the context bind, in order, to the declared inputs: `Array` (required),
//! `Option<Array>` (optional), `Vec<Array>` (variadic, last), `Sequence` (an input declared
//! `Name: [T]`, a sequence of tensors of type `T`; `Name: ?T` declares an optional tensor, which
//! binds as the tensor it holds), or `#[host] v: Vec<i64>` / `i64`
//! (optionally in an `Option`) for an input whose value the lowering needs on the host (a
//! constant, or computed from shapes; else the value is read back from MLX, which a compiled
//! trace cannot do, so such plans fall back to eager). An input's opset history inside its row:
//! `#[host(attr_until = N)]` an integer input that was an attribute of the same name up to opset
//! N (`name = "..."` if it differs); `#[input(attr_until = N, attr = f32)]` the same for an array
//! input (the attribute becomes a scalar or 1-D array); `#[host(since = N)]` /
//! `#[input(since = N)]` an optional slot new at opset N; `#[input(required_until = N)]` an
//! optional input that was required up to opset N. One row then covers every form. `outputs(Name...: T)` declares a
//! variadic output, `outputs(Name?: T)` an optional one. Parameters marked `#[attr]`,
//! `#[attr(default = ...)]` or `#[attr(name = "onnx_name", ...)]` read node attributes; an
//! `Option<T>` attribute may be absent; `since = N` / `until = N` in `#[attr(...)]` say in which
//! opsets of the row the attribute exists (outside them it is refused on a node, and the
//! default applies). The generated claim checks all of these against the node's opset. The function returns `Result<Array>` or
//! `Result<Vec<Array>>`.
//!
//! The expansion keeps the function, adds an adapter from the node's inputs and attributes, and
//! submits an `op_specs::OpSpec` (with the doc comment) to the `inventory` registry.

mod args;
mod params;

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{ItemFn, LitStr};

use args::{OpArgs, Shape};
use params::{InputKind, Signature};

#[proc_macro_attribute]
pub fn onnx_op(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand(attr: Tokens, item: Tokens) -> syn::Result<Tokens> {
    let args = OpArgs::parse(attr)?;
    let mut function: ItemFn = syn::parse2(item)?;
    let signature = Signature::analyse(&mut function)?;
    check_ports(&args, &signature, &function)?;
    check_gates(&args, &signature)?;

    let p = quote!(::op_specs::__private);
    let name = &function.sig.ident;
    let lower = format_ident!("__lower_{}", name);
    let doc = doc_comment(&function);
    let op = &args.op;
    let domain = args
        .domain
        .clone()
        .unwrap_or_else(|| LitStr::new("", op.span()));
    let since = &args.since;
    let until = match &args.until {
        Some(end) => quote!(::core::option::Option::Some(#end)),
        None => quote!(::core::option::Option::None),
    };

    let type_vars = args.types.iter().map(|var| {
        let var_name = var.name.to_string();
        let sets = &var.sets;
        let always = quote!(#p::DtypeSet::EMPTY #(.union(::op_specs::dtypes::#sets))*);
        let gate_sets: Vec<Tokens> = var
            .gated
            .iter()
            .map(|g| {
                let sets = &g.sets;
                quote!(#p::DtypeSet::EMPTY #(.union(::op_specs::dtypes::#sets))*)
            })
            .collect();
        let gates = var.gated.iter().zip(&gate_sets).map(|(g, set)| {
            let (since, until) = gate_bounds(&g.gate);
            quote!(#p::DtypeGate { set: #set, since: #since, until: #until })
        });
        quote!(#p::TypeVar {
            name: #var_name,
            always: #always,
            gates: &[#(#gates),*],
            allowed: #always #(.union(#gate_sets))*,
        })
    });
    let ports = |ports: &[args::Port], params: &[&params::Input]| -> Vec<Tokens> {
        ports
            .iter()
            .enumerate()
            .map(|(i, port)| {
                let param = params.get(i);
                // A slot new at an opset (or that was an attribute before it) and one that was
                // required before it turned optional.
                let first = param
                    .and_then(|p| p.gate.first_opset().ok().flatten())
                    .unwrap_or(0);
                let since = quote!(#first);
                let required_until = match param.and_then(|p| p.gate.required_until.as_ref()) {
                    Some(n) => quote!(::core::option::Option::Some(#n)),
                    None => quote!(::core::option::Option::None),
                };
                let (port_name, var) = (port.name.to_string(), port.type_var.to_string());
                let kind = match param.map(|p| p.kind) {
                    _ if port.variadic => quote!(Variadic),
                    _ if port.optional => quote!(Optional),
                    Some(InputKind::Optional) => quote!(Optional),
                    Some(InputKind::Variadic) => quote!(Variadic),
                    Some(InputKind::Required | InputKind::Sequence) | None => quote!(Required),
                };
                let heterogeneous = args.heterogeneous.contains(&port.name);
                let (sequence, optional_value) = (port.sequence, port.optional_value);
                quote!(#p::Port {
                    name: #port_name, type_var: #var, kind: #p::PortKind::#kind, since: #since,
                    required_until: #required_until, heterogeneous: #heterogeneous,
                    sequence: #sequence, optional_value: #optional_value,
                })
            })
            .collect()
    };
    let input_params: Vec<&params::Input> = signature.inputs.iter().collect();
    let inputs = ports(&args.inputs, &input_params);
    let outputs = ports(&args.outputs, &[]);

    let read_attrs = signature.attrs.iter().map(|a| {
        let (attr_name, ty) = (&a.onnx_name, &a.value_type);
        let required = a.default.is_none() && !a.optional;
        let default = a
            .default
            .as_ref()
            .map(|d| quote!(#d).to_string())
            .unwrap_or_default();
        let (since, until) = gate_bounds(&a.gate);
        quote!(#p::AttrSpec {
            name: #attr_name, kind: <#ty as #p::FromAttr>::KIND, required: #required,
            default: #default, since: #since, until: #until, ignored: false,
        })
    });
    let ignored_attrs = args.ignores.iter().map(|i| {
        let (attr_name, ty) = (i.name.to_string(), &i.ty);
        let (since, until) = gate_bounds(&i.gate);
        quote!(#p::AttrSpec {
            name: #attr_name, kind: <#ty as #p::FromAttr>::KIND, required: false,
            default: "", since: #since, until: #until, ignored: true,
        })
    });
    let input_attrs = signature.inputs.iter().filter_map(|input| {
        let (until, attr_name) = input.gate.attr_until.as_ref()?;
        let ty = input.host.as_ref().or(input.gate.attr_type.as_ref())?;
        let required = input.kind == InputKind::Required;
        Some(quote!(#p::AttrSpec {
            name: #attr_name, kind: <#ty as #p::FromAttr>::KIND, required: #required,
            default: "", since: 0, until: ::core::option::Option::Some(#until), ignored: false,
        }))
    });
    let attr_specs = read_attrs.chain(ignored_attrs).chain(input_attrs);

    let input_bindings = signature.inputs.iter().enumerate().map(|(index, input)| {
        let binding = &input.binding;
        let port = args.inputs[index].name.to_string();
        if let (Some(ty), Some((until, attr_name))) = (&input.gate.attr_type, &input.gate.attr_until) {
            // An array input that was an attribute up to opset `until`: the attribute as an array.
            return match input.kind {
                InputKind::Optional => quote! {
                    let #binding = if cx.node().since_version() <= #until {
                        cx.attr::<#ty>(#attr_name)?.map(#p::AttrArray::into_array).transpose()?
                    } else {
                        #p::optional_input(inputs, #index)
                    };
                },
                _ => quote! {
                    let #binding = if cx.node().since_version() <= #until {
                        #p::AttrArray::into_array(cx.required_attr::<#ty>(#attr_name)?)?
                    } else {
                        #p::required_input(inputs, #index, #port)?
                    };
                },
            };
        }
        if let (Some(ty), Some((until, attr_name))) = (&input.host, &input.gate.attr_until) {
            // The same value, an attribute before opset `until` + 1 and an input from then on.
            return match input.kind {
                InputKind::Optional => quote! {
                    let #binding: ::core::option::Option<#ty> = if cx.node().since_version() <= #until {
                        cx.attr::<#ty>(#attr_name)?
                    } else {
                        #p::optional_host_input(cx, inputs, #index, #port)?
                    };
                },
                _ => quote! {
                    let #binding: #ty = if cx.node().since_version() <= #until {
                        cx.required_attr::<#ty>(#attr_name)?
                    } else {
                        #p::host_input(cx, inputs, #index, #port)?
                    };
                },
            };
        }
        match (&input.host, input.kind) {
            (Some(ty), InputKind::Optional) => {
                quote!(let #binding: ::core::option::Option<#ty> = #p::optional_host_input(cx, inputs, #index, #port)?;)
            }
            (Some(ty), _) => quote!(let #binding: #ty = #p::host_input(cx, inputs, #index, #port)?;),
            (None, InputKind::Required) => quote!(let #binding = #p::required_input(inputs, #index, #port)?;),
            (None, InputKind::Optional) => quote!(let #binding = #p::optional_input(inputs, #index);),
            (None, InputKind::Variadic) => quote!(let #binding = #p::variadic_inputs(inputs, #index, #port)?;),
            (_, InputKind::Sequence) => quote!(let #binding = #p::sequence_input(inputs, #index, #port)?;),
        }
    });
    let attr_bindings = signature.attrs.iter().map(|a| {
        let (binding, attr_name, ty) = (&a.binding, &a.onnx_name, &a.value_type);
        if a.optional {
            quote!(let #binding: ::core::option::Option<#ty> = cx.attr::<#ty>(#attr_name)?;)
        } else if let Some(default) = &a.default {
            let default = if is_string(ty) {
                quote!(::std::string::String::from(#default))
            } else {
                quote!(#default)
            };
            quote!(let #binding: #ty = cx.attr::<#ty>(#attr_name)?.unwrap_or_else(|| #default);)
        } else {
            quote!(let #binding: #ty = cx.required_attr::<#ty>(#attr_name)?;)
        }
    });
    let call_args = signature
        .inputs
        .iter()
        .map(|i| &i.binding)
        .chain(signature.attrs.iter().map(|a| &a.binding));

    let shape = match &args.shape {
        Shape::Fixed(kind) => quote!(#p::ShapeRule::Fixed(#p::ShapeSafety::#kind)),
        Shape::Dynamic(f) => quote!(#p::ShapeRule::OfNode(#f)),
    };
    let claim = match &args.claim {
        Some(f) => quote!(::core::option::Option::Some(#f)),
        None => quote!(::core::option::Option::None),
    };
    let text = |lit: &Option<LitStr>| lit.as_ref().map(LitStr::value).unwrap_or_default();
    let (declines, numerics) = (text(&args.declines), text(&args.numerics));
    let precision = match &args.precision {
        Some(kind) => quote!(#p::Precision::#kind),
        None => quote!(#p::Precision::Follows),
    };
    let layout = match &args.layout {
        Some(kind) => quote!(#p::Layout::#kind),
        None => quote!(#p::Layout::ChannelsFirst),
    };

    Ok(quote! {
        #function

        #[doc(hidden)]
        #[allow(non_snake_case)]
        fn #lower(
            cx: &mut #p::Lower<'_>,
            inputs: &[::core::option::Option<#p::Value>],
        ) -> #p::Result<::std::vec::Vec<#p::Value>> {
            #(#input_bindings)*
            #(#attr_bindings)*
            // `self::` so that a parameter named like the function cannot shadow it.
            #p::IntoOutputs::into_outputs(self::#name(cx, #(#call_args),*)?)
        }

        #p::inventory::submit! {
            #p::OpSpec {
                domain: #domain,
                op: #op,
                since: #since,
                until: #until,
                module: ::core::module_path!(),
                source: ::core::file!(),
                function: ::core::stringify!(#name),
                doc: #doc,
                type_vars: &[#(#type_vars),*],
                inputs: &[#(#inputs),*],
                outputs: &[#(#outputs),*],
                attributes: &[#(#attr_specs),*],
                shape: #shape,
                custom_claim: #claim,
                declines: #declines,
                numerics: #numerics,
                precision: #precision,
                layout: #layout,
                lower: #lower,
            }
        }
    })
}

/// The attribute's port list and the function's input parameters must agree one to one.
fn check_ports(args: &OpArgs, signature: &Signature, function: &ItemFn) -> syn::Result<()> {
    let (declared, taken) = (args.inputs.len(), signature.inputs.len());
    if declared != taken {
        let span = args
            .inputs
            .get(taken)
            .map_or(function.sig.ident.span(), |p| p.name.span());
        return Err(syn::Error::new(
            span,
            format!(
                "`inputs(...)` declares {declared} input(s) but `{}` takes {taken}",
                function.sig.ident
            ),
        ));
    }
    if args.outputs.is_empty() {
        return Err(syn::Error::new(
            function.sig.ident.span(),
            "`outputs(...)` must name at least one output",
        ));
    }
    Ok(())
}

/// Every `since`/`until` on an attribute or a dtype set narrows the row's own opsets: a gate
/// outside them would never apply, or always would (write the row's range instead).
fn check_gates(args: &OpArgs, signature: &Signature) -> syn::Result<()> {
    let row_since = args.since.base10_parse::<i64>()?;
    let row_until = match &args.until {
        Some(u) => Some(u.base10_parse::<i64>()?),
        None => None,
    };
    // An input's history is gates too: a first opset, and last opsets as an attribute or as a
    // required input.
    let input_gates = signature.inputs.iter().flat_map(|input| {
        let g = &input.gate;
        let at = |since: Option<&syn::LitInt>, until: Option<&syn::LitInt>| args::Gate {
            since: since.cloned(),
            until: until.cloned(),
        };
        [
            at(g.since.as_ref(), None),
            at(None, g.attr_until.as_ref().map(|(n, _)| n)),
            at(None, g.required_until.as_ref()),
        ]
    });
    let declared = signature
        .attrs
        .iter()
        .map(|a| &a.gate)
        .chain(args.ignores.iter().map(|i| &i.gate))
        .chain(
            args.types
                .iter()
                .flat_map(|t| t.gated.iter().map(|g| &g.gate)),
        )
        .cloned();
    for gate in declared.chain(input_gates) {
        if let Some(since) = &gate.since {
            let n = since.base10_parse::<i64>()?;
            if n <= row_since || row_until.is_some_and(|u| n > u) {
                return Err(syn::Error::new(
                    since.span(),
                    format!("`since {n}` must fall after the row's first opset {row_since} and within its range"),
                ));
            }
        }
        if let Some(until) = &gate.until {
            let n = until.base10_parse::<i64>()?;
            if n < row_since || row_until.is_some_and(|u| n >= u) {
                return Err(syn::Error::new(
                    until.span(),
                    format!(
                        "`until {n}` must fall within the row's opsets and before its last one"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A gate's bounds as `i64` and `Option<i64>` tokens (`since` defaults to 0: always).
fn gate_bounds(gate: &args::Gate) -> (Tokens, Tokens) {
    let since = match &gate.since {
        Some(n) => quote!(#n),
        None => quote!(0),
    };
    let until = match &gate.until {
        Some(n) => quote!(::core::option::Option::Some(#n)),
        None => quote!(::core::option::Option::None),
    };
    (since, until)
}

fn doc_comment(function: &ItemFn) -> String {
    let lines: Vec<String> = function
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value().trim().to_owned()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    lines.join(" ").trim().to_owned()
}

fn is_string(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(p) if p.path.is_ident("String"))
}
