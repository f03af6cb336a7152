//! Parsing of `#[onnx_op(...)]`'s arguments.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, Lit, LitInt, LitStr, Path, Token};

/// One `Name: TypeVar` entry of `inputs(...)` / `outputs(...)`; `Name...: TypeVar` marks a
/// variadic output and `Name?: TypeVar` an optional one (inputs take their kind from the
/// parameter's type).
pub struct Port {
    pub name: Ident,
    pub variadic: bool,
    pub optional: bool,
    pub type_var: Ident,
}

impl Parse for Port {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name = input.parse()?;
        let variadic = input.parse::<Option<Token![...]>>()?.is_some();
        let optional = input.parse::<Option<Token![?]>>()?.is_some();
        input.parse::<Token![:]>()?;
        Ok(Port {
            name,
            variadic,
            optional,
            type_var: input.parse()?,
        })
    }
}

/// `T = FLOAT | INT`: a type variable and the dtype sets it unions.
pub struct TypeVar {
    pub name: Ident,
    pub sets: Vec<Ident>,
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
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    pub shape: Shape,
    pub claim: Option<Path>,
    pub declines: Option<LitStr>,
}

const SHAPE_KINDS: [&str; 3] = ["Shapeless", "ShapeKeyed", "Eager"];

impl OpArgs {
    pub fn parse(tokens: proc_macro2::TokenStream) -> syn::Result<OpArgs> {
        let mut op = None;
        let mut domain = None;
        let mut range: Option<(LitInt, Option<LitInt>)> = None;
        let mut types = None;
        let mut inputs = None;
        let mut outputs = None;
        let mut shape = None;
        let mut claim = None;
        let mut declines = None;

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
                        let sets = union_members(&var.value()?.parse::<Expr>()?)?;
                        vars.push(TypeVar { name, sets });
                        Ok(())
                    })?;
                    types = Some(vars);
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
                _ => return Err(meta.error(
                    "unknown onnx_op argument; expected one of: op, domain, since, opset, types, \
                         inputs, outputs, shape, claim, declines",
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
            inputs: inputs.unwrap_or_default(),
            outputs: outputs.ok_or_else(|| missing("outputs(Name: T, ...)"))?,
            shape: shape
                .ok_or_else(|| missing("shape = Shapeless | ShapeKeyed | Eager | function"))?,
            claim,
            declines,
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

/// `FLOAT | INT | BOOL` → [FLOAT, INT, BOOL].
fn union_members(expr: &Expr) -> syn::Result<Vec<Ident>> {
    match expr {
        Expr::Binary(bin) if matches!(bin.op, syn::BinOp::BitOr(_)) => {
            let mut left = union_members(&bin.left)?;
            left.extend(union_members(&bin.right)?);
            Ok(left)
        }
        Expr::Path(p) if p.path.get_ident().is_some() => {
            Ok(vec![p.path.get_ident().cloned().unwrap()])
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Err(syn::Error::new(
            s.span(),
            "dtype sets are names such as FLOAT | INT, not strings",
        )),
        other => Err(syn::Error::new_spanned(
            other,
            "expected dtype set names joined by `|`",
        )),
    }
}
