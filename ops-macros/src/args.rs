//! Parsing of `#[onnx_op(...)]`'s arguments.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, Lit, LitInt, LitStr, Path, Token};

/// One `Name: TypeVar` entry of `inputs(...)` / `outputs(...)`; `Name...: TypeVar` marks a
/// variadic output and `Name?: TypeVar` an optional one (inputs take their kind from the
/// parameter's type); `Name: [TypeVar]` a sequence of tensors of that type, `Name: ?TypeVar`
/// an optional tensor (ONNX's `optional(tensor)`).
pub struct Port {
    pub name: Ident,
    pub variadic: bool,
    pub optional: bool,
    pub sequence: bool,
    pub optional_value: bool,
    pub type_var: Ident,
}

impl Parse for Port {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name = input.parse()?;
        let variadic = input.parse::<Option<Token![...]>>()?.is_some();
        let optional = input.parse::<Option<Token![?]>>()?.is_some();
        input.parse::<Token![:]>()?;
        let optional_value = input.parse::<Option<Token![?]>>()?.is_some();
        let (sequence, type_var) = if input.peek(syn::token::Bracket) {
            let content;
            syn::bracketed!(content in input);
            (true, content.parse()?)
        } else {
            (false, input.parse()?)
        };
        Ok(Port {
            name,
            variadic,
            optional,
            sequence,
            optional_value,
            type_var,
        })
    }
}

/// `T = FLOAT | INT | since(12, I8 | U8)`: a type variable, the dtype sets it always unions, and
/// sets that only some opsets of the row allow.
pub struct TypeVar {
    pub name: Ident,
    pub sets: Vec<Ident>,
    pub gated: Vec<GatedSets>,
}

/// `since(N, SETS)` / `until(N, SETS)` (nestable): dtype sets allowed only from / up to opset N.
pub struct GatedSets {
    pub gate: Gate,
    pub sets: Vec<Ident>,
}

/// An opset interval inside a row's range, for an attribute or a dtype.
#[derive(Clone, Default)]
pub struct Gate {
    pub since: Option<LitInt>,
    pub until: Option<LitInt>,
}

impl Gate {
    /// `None` when the gate is open on both ends.
    pub fn is_open(&self) -> bool {
        self.since.is_none() && self.until.is_none()
    }

    /// Parses `since N` / `until N` keywords (in any order) until something else comes.
    pub fn parse_keywords(input: ParseStream) -> syn::Result<Gate> {
        let mut gate = Gate::default();
        while input.peek(Ident) {
            let fork = input.fork();
            let word: Ident = fork.parse()?;
            let slot = match word.to_string().as_str() {
                "since" => &mut gate.since,
                "until" => &mut gate.until,
                _ => break,
            };
            input.parse::<Ident>()?;
            if slot.is_some() {
                return Err(syn::Error::new(
                    word.span(),
                    format!("`{word}` is given twice"),
                ));
            }
            *slot = Some(input.parse()?);
        }
        Ok(gate)
    }
}

/// `ignores(momentum: f32, spatial: i64 until 8)`: an attribute the op accepts and does not need
/// for inference (training-only knobs, hints): validated by kind, never read.
pub struct Ignored {
    pub name: Ident,
    pub ty: syn::Type,
    pub gate: Gate,
}

impl Parse for Ignored {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name = input.parse()?;
        input.parse::<Token![:]>()?;
        let ty = input.parse()?;
        let gate = Gate::parse_keywords(input)?;
        Ok(Ignored { name, ty, gate })
    }
}

pub enum Shape {
    /// `Shapeless`, `ShapeKeyed` or `Eager`.
    Fixed(Ident),
    /// A function of the node.
    Dynamic(Path),
}

pub struct OpArgs {
    pub op: LitStr,
    pub domain: Option<LitStr>,
    pub since: LitInt,
    pub until: Option<LitInt>,
    pub types: Vec<TypeVar>,
    pub ignores: Vec<Ignored>,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    /// Variadic ports whose instances each bind the type variable on their own.
    pub heterogeneous: Vec<Ident>,
    pub shape: Shape,
    pub claim: Option<Path>,
    pub declines: Option<LitStr>,
    pub numerics: Option<LitStr>,
    /// `precision = Float32 | Widens`: how the op computes under a half-precision session.
    pub precision: Option<Ident>,
    /// `layout = Elementwise | ChannelsLast`: how the op meets channels-last activations.
    pub layout: Option<Ident>,
}

const SHAPE_KINDS: [&str; 3] = ["Shapeless", "ShapeKeyed", "Eager"];
const PRECISION_KINDS: [&str; 3] = ["Follows", "Float32", "Widens"];
const LAYOUT_KINDS: [&str; 3] = ["ChannelsFirst", "Elementwise", "ChannelsLast"];

/// `kind` when it is one of `kinds` (the first being the default), else an error naming them.
fn one_of(argument: &str, kinds: &[&str], kind: Ident) -> syn::Result<Ident> {
    if kinds.contains(&kind.to_string().as_str()) {
        return Ok(kind);
    }
    let quoted: Vec<String> = kinds.iter().map(|k| format!("`{k}`")).collect();
    let listed = match quoted.as_slice() {
        [default, middle @ .., last] => {
            let middle: String = middle.iter().map(|k| format!(", {k}")).collect();
            format!("{default} (the default){middle} or {last}")
        }
        _ => quoted.join(", "),
    };
    Err(syn::Error::new(
        kind.span(),
        format!("{argument} is {listed}"),
    ))
}

impl OpArgs {
    pub fn parse(tokens: proc_macro2::TokenStream) -> syn::Result<OpArgs> {
        let mut op = None;
        let mut domain = None;
        let mut range: Option<(LitInt, Option<LitInt>)> = None;
        let mut types = None;
        let mut ignores = Vec::new();
        let mut heterogeneous = Vec::new();
        let mut inputs = None;
        let mut outputs = None;
        let mut shape = None;
        let mut claim = None;
        let mut declines = None;
        let mut numerics = None;
        let mut precision = None;
        let mut layout = None;

        let parser = syn::meta::parser(|meta| {
            let key = meta
                .path
                .get_ident()
                .map(Ident::to_string)
                .unwrap_or_default();
            match key.as_str() {
                "op" => op = Some(meta.value()?.parse::<LitStr>()?),
                "domain" => domain = Some(meta.value()?.parse::<LitStr>()?),
                "declines" => declines = Some(meta.value()?.parse::<LitStr>()?),
                "numerics" => numerics = Some(meta.value()?.parse::<LitStr>()?),
                "since" => {
                    reject_duplicate(&range, &meta.path, "an opset (`since` or `opset`)")?;
                    range = Some((meta.value()?.parse()?, None));
                }
                "opset" => {
                    reject_duplicate(&range, &meta.path, "an opset (`since` or `opset`)")?;
                    range = Some(parse_range(meta.value()?)?);
                }
                "types" => {
                    let mut vars = Vec::new();
                    meta.parse_nested_meta(|var| {
                        let name = var.path.require_ident()?.clone();
                        let (mut sets, mut gated) = (Vec::new(), Vec::new());
                        union_members(
                            &var.value()?.parse::<Expr>()?,
                            &Gate::default(),
                            &mut sets,
                            &mut gated,
                        )?;
                        vars.push(TypeVar {
                            name,
                            sets,
                            gated: merge_equal_gates(gated),
                        });
                        Ok(())
                    })?;
                    types = Some(vars);
                }
                "ignores" => {
                    let content;
                    syn::parenthesized!(content in meta.input);
                    ignores = Punctuated::<Ignored, Token![,]>::parse_terminated(&content)?
                        .into_iter()
                        .collect();
                }
                "heterogeneous" => {
                    let content;
                    syn::parenthesized!(content in meta.input);
                    heterogeneous = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?
                        .into_iter()
                        .collect();
                }
                "inputs" | "outputs" => {
                    let content;
                    syn::parenthesized!(content in meta.input);
                    let ports: Vec<Port> =
                        Punctuated::<Port, Token![,]>::parse_terminated(&content)?
                            .into_iter()
                            .collect();
                    if key == "inputs" {
                        inputs = Some(ports)
                    } else {
                        outputs = Some(ports)
                    }
                }
                "shape" => {
                    let path: Path = meta.value()?.parse()?;
                    shape = Some(match path.get_ident() {
                        Some(id) if SHAPE_KINDS.contains(&id.to_string().as_str()) => {
                            Shape::Fixed(id.clone())
                        }
                        _ => Shape::Dynamic(path),
                    });
                }
                "claim" => claim = Some(meta.value()?.parse::<Path>()?),
                "precision" => {
                    precision = Some(one_of("precision", &PRECISION_KINDS, meta.value()?.parse()?)?)
                }
                "layout" => layout = Some(one_of("layout", &LAYOUT_KINDS, meta.value()?.parse()?)?),
                _ => return Err(meta.error(
                    "unknown onnx_op argument; expected one of: op, domain, since, opset, types, \
                         ignores, inputs, outputs, heterogeneous, shape, claim, declines, numerics, \
                         precision, layout",
                )),
            }
            Ok(())
        });
        syn::parse::Parser::parse2(parser, tokens)?;

        let missing =
            |what: &str| syn::Error::new(Span::call_site(), format!("onnx_op needs `{what}`"));
        let (since, until) = range.ok_or_else(|| missing("since = N` or `opset = A..=B"))?;
        let args = OpArgs {
            op: op.ok_or_else(|| missing("op = \"Name\""))?,
            domain,
            since,
            until,
            types: types.ok_or_else(|| missing("types(T = ...)"))?,
            ignores,
            inputs: inputs.unwrap_or_default(),
            outputs: outputs.ok_or_else(|| missing("outputs(Name: T, ...)"))?,
            heterogeneous,
            shape: shape
                .ok_or_else(|| missing("shape = Shapeless | ShapeKeyed | Eager | function"))?,
            claim,
            declines,
            numerics,
            precision,
            layout,
        };
        args.check_type_vars()?;
        Ok(args)
    }

    /// Every port names a declared type variable.
    fn check_type_vars(&self) -> syn::Result<()> {
        for port in self.inputs.iter().chain(&self.outputs) {
            if !self.types.iter().any(|t| t.name == port.type_var) {
                return Err(syn::Error::new(
                    port.type_var.span(),
                    format!(
                        "type variable `{}` is not declared in `types(...)`",
                        port.type_var
                    ),
                ));
            }
        }
        // Whether a listed port is variadic is known only with the parameters (inputs take
        // their kind from them): `expand` checks that; here, that it is a port at all.
        if let Some(unknown) = self.heterogeneous.iter().find(|name| {
            !self
                .inputs
                .iter()
                .chain(&self.outputs)
                .any(|p| &p.name == *name)
        }) {
            return Err(syn::Error::new(
                unknown.span(),
                format!("`{unknown}` in `heterogeneous(...)` is not a declared port"),
            ));
        }
        Ok(())
    }
}

fn reject_duplicate<T>(slot: &Option<T>, path: &Path, what: &str) -> syn::Result<()> {
    match slot {
        Some(_) => Err(syn::Error::new_spanned(
            path,
            format!("{what} is given twice"),
        )),
        None => Ok(()),
    }
}

/// `A..=B` with integer literals; open or exclusive ranges are refused.
fn parse_range(input: ParseStream) -> syn::Result<(LitInt, Option<LitInt>)> {
    let start: LitInt = input.parse()?;
    if input.peek(Token![..]) && !input.peek(Token![..=]) {
        return Err(input.error("use an inclusive range `A..=B` (or `since = A` for an open one)"));
    }
    input.parse::<Token![..=]>()?;
    let end: LitInt = input.parse()?;
    if end.base10_parse::<i64>()? < start.base10_parse::<i64>()? {
        return Err(syn::Error::new(
            end.span(),
            "opset range ends before it starts",
        ));
    }
    Ok((start, Some(end)))
}

/// One entry per distinct gate, its sets in the order written.
fn merge_equal_gates(gated: Vec<GatedSets>) -> Vec<GatedSets> {
    let bounds = |g: &Gate| {
        let value = |n: &Option<LitInt>| n.as_ref().map(|n| n.base10_digits().to_owned());
        (value(&g.since), value(&g.until))
    };
    let mut merged: Vec<GatedSets> = Vec::new();
    for entry in gated {
        match merged
            .iter_mut()
            .find(|m| bounds(&m.gate) == bounds(&entry.gate))
        {
            Some(existing) => existing.sets.extend(entry.sets),
            None => merged.push(entry),
        }
    }
    merged
}

/// `FLOAT | INT | since(12, I8 | U8)` → always [FLOAT, INT], gated [(since 12: I8, U8)].
fn union_members(
    expr: &Expr,
    gate: &Gate,
    always: &mut Vec<Ident>,
    gated: &mut Vec<GatedSets>,
) -> syn::Result<()> {
    match expr {
        Expr::Binary(bin) if matches!(bin.op, syn::BinOp::BitOr(_)) => {
            union_members(&bin.left, gate, always, gated)?;
            union_members(&bin.right, gate, always, gated)
        }
        Expr::Path(p) if p.path.get_ident().is_some() => {
            let set = p.path.get_ident().cloned().unwrap();
            if gate.is_open() {
                always.push(set);
            } else {
                gated.push(GatedSets {
                    gate: gate.clone(),
                    sets: vec![set],
                });
            }
            Ok(())
        }
        Expr::Call(call) if call.args.len() == 2 => {
            let word = match &*call.func {
                Expr::Path(p) => p.path.get_ident().map(Ident::to_string),
                _ => None,
            };
            let bound = match &call.args[0] {
                Expr::Lit(ExprLit {
                    lit: Lit::Int(n), ..
                }) => n.clone(),
                other => return Err(syn::Error::new_spanned(other, "expected an opset number")),
            };
            let mut inner = gate.clone();
            match word.as_deref() {
                Some("since") => inner.since = Some(bound),
                Some("until") => inner.until = Some(bound),
                _ => {
                    return Err(syn::Error::new_spanned(
                        &call.func,
                        "expected `since(N, SETS)` or `until(N, SETS)`",
                    ))
                }
            }
            union_members(&call.args[1], &inner, always, gated)
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Err(syn::Error::new(
            s.span(),
            "dtype sets are names such as FLOAT | INT, not strings",
        )),
        other => Err(syn::Error::new_spanned(
            other,
            "expected dtype set names joined by `|`, or `since(N, SETS)` / `until(N, SETS)`",
        )),
    }
}
