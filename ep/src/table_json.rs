//! The op table as the loaded library sees it, as JSON: for tests (the table inside the cdylib
//! must equal the one `op-specs` tests see) and tools.

use op_specs::table::spec::ShapeRule;
use op_specs::{all, AttrKind, AttrSpec, OpSpec, Port, PortKind, TypeVar};
use serde::ser::{Serialize, Serializer};

/// One row per entry, in the registry's order; keys in each object in declaration order so that
/// the text reads like the declaration.
pub fn table_json() -> String {
    let entries: Vec<Entry> = all().into_iter().map(Entry::of).collect();
    // Serialising borrowed strings, integers and booleans cannot fail; "[]" keeps the export's
    // contract (always a JSON array) should it ever.
    serde_json::to_string(&entries).unwrap_or_else(|_| "[]".into())
}

#[derive(serde::Serialize)]
struct Entry {
    domain: &'static str,
    op: &'static str,
    since: i64,
    until: Option<i64>,
    family: &'static str,
    doc: &'static str,
    types: Types,
    /// Dtypes only some opsets of the row allow: `{"T": [{"types": [...], "since": 12,
    /// "until": null}]}` (`since` 0: from the row's start); absent type variables have none.
    type_gates: TypeGates,
    inputs: Vec<PortRow>,
    outputs: Vec<PortRow>,
    attributes: Vec<AttrRow>,
    shape: String,
    /// `Follows` or `Float32`: what the entry computes in under the `precision` option.
    precision: String,
    /// `ChannelsFirst`, `Elementwise` or `ChannelsLast`: how the entry meets channels-last
    /// activations.
    layout: String,
    /// The file declaring the entry, from the workspace root (`op-specs/src/pool.rs`): where its
    /// Rust tests sit and what its spec file in tests/ops/specs is named after.
    source: &'static str,
}

impl Entry {
    fn of(spec: &OpSpec) -> Entry {
        Entry {
            domain: spec.domain,
            op: spec.op,
            since: spec.since,
            until: spec.until,
            family: spec.family(),
            doc: spec.doc,
            types: Types(spec.type_vars),
            type_gates: TypeGates(spec.type_vars),
            inputs: spec.inputs.iter().map(PortRow::of).collect(),
            outputs: spec.outputs.iter().map(PortRow::of).collect(),
            attributes: spec.attributes.iter().map(AttrRow::of).collect(),
            shape: match spec.shape {
                ShapeRule::Fixed(s) => format!("{s:?}"),
                ShapeRule::OfNode(_) => "per node".into(),
            },
            precision: format!("{:?}", spec.precision),
            layout: format!("{:?}", spec.layout),
            source: spec.source,
        }
    }
}

/// `{"T": ["float", ...], ...}`: type variable name to ONNX element type names, in the
/// declaration's order (a derived map would sort them).
struct Types(&'static [TypeVar]);

impl Serialize for Types {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|t| {
            let names: Vec<&'static str> = t.allowed.iter().map(|e| e.onnx_name()).collect();
            (t.name, names)
        }))
    }
}

struct TypeGates(&'static [TypeVar]);

#[derive(serde::Serialize)]
struct GateRow {
    types: Vec<&'static str>,
    since: i64,
    until: Option<i64>,
}

impl Serialize for TypeGates {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().filter(|t| !t.gates.is_empty()).map(|t| {
            let gates: Vec<GateRow> = t
                .gates
                .iter()
                .map(|g| GateRow {
                    types: g.set.iter().map(|e| e.onnx_name()).collect(),
                    since: g.since,
                    until: g.until,
                })
                .collect();
            (t.name, gates)
        }))
    }
}

#[derive(serde::Serialize)]
struct PortRow {
    name: &'static str,
    type_var: &'static str,
    kind: &'static str,
    /// The first opset with this slot (0: all of the row's); before it absent or an attribute.
    since: i64,
    /// An optional input that was required up to this opset.
    required_until: Option<i64>,
    /// A sequence of tensors of the type variable's type.
    sequence: bool,
    /// An optional tensor of the type variable's type.
    optional_value: bool,
}

impl PortRow {
    fn of(p: &Port) -> PortRow {
        PortRow {
            name: p.name,
            type_var: p.type_var,
            kind: match p.kind {
                PortKind::Required => "required",
                PortKind::Optional => "optional",
                PortKind::Variadic => "variadic",
            },
            since: p.since,
            required_until: p.required_until,
            sequence: p.sequence,
            optional_value: p.optional_value,
        }
    }
}

#[derive(serde::Serialize)]
struct AttrRow {
    name: &'static str,
    kind: &'static str,
    required: bool,
    /// As written in the declaration; empty when there is none.
    default: &'static str,
    /// The opsets of the row in which the attribute exists (`since` 0: from the row's start).
    since: i64,
    until: Option<i64>,
    /// Accepted but never read (it does not change an inference result).
    ignored: bool,
}

impl AttrRow {
    fn of(a: &AttrSpec) -> AttrRow {
        AttrRow {
            name: a.name,
            kind: match a.kind {
                AttrKind::Int => "int",
                AttrKind::Float => "float",
                AttrKind::String => "string",
                AttrKind::Ints => "ints",
                AttrKind::Floats => "floats",
                AttrKind::Strings => "strings",
                AttrKind::Tensor => "tensor",
                AttrKind::Graph => "graph",
            },
            required: a.required,
            default: a.default,
            since: a.since,
            until: a.until,
            ignored: a.ignored,
        }
    }
}
