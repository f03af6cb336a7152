//! The op table as the loaded library sees it, as JSON: for tests (the table inside the cdylib
//! must equal the one `op-specs` tests see) and tools.

use std::fmt::Write as _;

use op_specs::{all, AttrKind, OpSpec, PortKind};

use crate::diagnostics::json_string;

pub fn table_json() -> String {
    let entries: Vec<String> = all().into_iter().map(entry).collect();
    format!("[{}]", entries.join(",\n"))
}

fn entry(spec: &OpSpec) -> String {
    let types: Vec<String> = spec
        .type_vars
        .iter()
        .map(|t| {
            let names: Vec<String> = t
                .allowed
                .iter()
                .map(|e| json_string(e.onnx_name()))
                .collect();
            format!("{}: [{}]", json_string(t.name), names.join(", "))
        })
        .collect();
    let ports = |ports: &[op_specs::Port]| -> String {
        let items: Vec<String> = ports
            .iter()
            .map(|p| {
                let kind = match p.kind {
                    PortKind::Required => "required",
                    PortKind::Optional => "optional",
                    PortKind::Variadic => "variadic",
                };
                format!(
                    "{{\"name\": {}, \"type_var\": {}, \"kind\": \"{kind}\"}}",
                    json_string(p.name),
                    json_string(p.type_var)
                )
            })
            .collect();
        format!("[{}]", items.join(", "))
    };
    let attributes: Vec<String> = spec
        .attributes
        .iter()
        .map(|a| {
            let kind = match a.kind {
                AttrKind::Int => "int",
                AttrKind::Float => "float",
                AttrKind::String => "string",
                AttrKind::Ints => "ints",
                AttrKind::Floats => "floats",
                AttrKind::Strings => "strings",
                AttrKind::Tensor => "tensor",
            };
            format!(
                "{{\"name\": {}, \"kind\": \"{kind}\", \"required\": {}, \"default\": {}}}",
                json_string(a.name),
                a.required,
                json_string(a.default)
            )
        })
        .collect();
    let shape = match spec.shape {
        op_specs::table::spec::ShapeRule::Fixed(s) => format!("{s:?}"),
        op_specs::table::spec::ShapeRule::OfNode(_) => "per node".into(),
    };
    let mut out = String::new();
    let _ = write!(
        out,
        "{{\"domain\": {}, \"op\": {}, \"since\": {}, \"until\": {}, \"family\": {}, \"doc\": {}, \"types\": {{{}}}, \
         \"inputs\": {}, \"outputs\": {}, \"attributes\": [{}], \"shape\": {}}}",
        json_string(spec.domain),
        json_string(spec.op),
        spec.since,
        spec.until.map_or("null".into(), |u| u.to_string()),
        json_string(spec.family()),
        json_string(spec.doc),
        types.join(", "),
        ports(spec.inputs),
        ports(spec.outputs),
        attributes.join(", "),
        json_string(&shape),
    );
    out
}
