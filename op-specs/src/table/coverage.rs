//! `docs/COVERAGE.md`, generated from the table.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::registry;
use super::spec::{gate_label, Layout, OpSpec, Precision, ShapeRule};

pub const PATH_IN_REPO: &str = "docs/COVERAGE.md";

pub fn markdown() -> String {
    let specs = registry::all();
    let mut families: BTreeMap<&str, Vec<&OpSpec>> = BTreeMap::new();
    for spec in &specs {
        families.entry(spec.family()).or_default().push(spec);
    }
    let distinct = |list: &[&OpSpec]| {
        let mut ops: Vec<(&str, &str)> = list.iter().map(|s| (s.domain, s.op)).collect();
        ops.dedup();
        ops.len()
    };

    let mut out = String::new();
    out.push_str("# Op coverage\n\n");
    out.push_str(
        "Generated from the op table by `cargo run -p op-specs --bin gen-coverage`; a test fails \
         when this file is stale. Each row is one `#[onnx_op]` declaration. A node outside a row's \
         types, or with an attribute the row does not name, is declined with that reason and runs \
         on ORT's CPU EP. Opsets older than a row's first one (the legacy `consumed_inputs` and \
         `broadcast`/`axis` attribute forms) are not claimed.\n\n\
         String ops stay on ORT's CPU EP by design: MLX has no string type (StringNormalizer, \
         RegexFullMatch, CategoryMapper, the string forms of LabelEncoder and of the classifiers' \
         labels), and ZipMap, CastMap and DictVectorizer read or write maps, which ORT never passes \
         across a fused node.\n\n\
         Two ops run on MLX without a row: ORT's CPU EP has no kernel for \
         NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, so ORT replaces each with its ONNX \
         function body before partitioning, and the body's nodes are claimed (CONFORMANCE.md shows \
         every case of both on MLX). Not claimed because ORT's CPU EP does not run them either: \
         ImageDecoder (no kernel in ORT 1.31; MLX has no image codecs, so this EP could not decode \
         as ORT would) and the opset-27 ops such as CausalConvWithState and LinearAttention (ORT \
         1.31 refuses opset 27 models).\n\n\
         With the `precision` option (`fp16` or `bf16`) a session computes its float32 values \
         in that half type: each node's float32 inputs are rounded to it where its row allows \
         the type, except in the entries each family lists as computing in float32 \
         (accumulations, float32 state written in place, float inputs read as parameters), \
         whose float32 inputs reach them in float32. Outputs leave in float32.\n\n",
    );
    let _ = writeln!(
        out,
        "**{} entries, {} ops.**\n",
        specs.len(),
        distinct(&specs)
    );
    let mut domains: BTreeMap<&str, Vec<&OpSpec>> = BTreeMap::new();
    for spec in &specs {
        domains
            .entry(domain_name(spec.domain))
            .or_default()
            .push(spec);
    }
    out.push_str("| domain | entries | ops |\n|---|---|---|\n");
    for (domain, list) in &domains {
        let _ = writeln!(out, "| {domain} | {} | {} |", list.len(), distinct(list));
    }
    out.push('\n');
    out.push_str("| family | entries | ops |\n|---|---|---|\n");
    for (family, list) in &families {
        let _ = writeln!(out, "| {family} | {} | {} |", list.len(), distinct(list));
    }
    for (family, list) in &families {
        let _ = writeln!(out, "\n## {family}\n");
        out.push_str("| domain | op | opsets | types | attributes | shape | also declines |\n");
        out.push_str("|---|---|---|---|---|---|---|\n");
        for spec in list {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                domain_name(spec.domain),
                spec.op,
                spec.opsets(),
                types(spec),
                attributes(spec),
                shape(spec),
                if spec.declines.is_empty() {
                    "—"
                } else {
                    spec.declines
                },
            );
        }
        numerics(&mut out, list);
        float32_under_half_precision(&mut out, list);
        channels_last(&mut out, list);
    }
    out
}

/// The family's entries that keep activations channels-last (see `Layout`).
fn channels_last(out: &mut String, list: &[&OpSpec]) {
    marked(out, list, "Kept channels-last between convolutions", |s| {
        s.layout != Layout::ChannelsFirst
    });
}

/// The family's entries that compute in float32 under the `precision` option, or take the
/// half type and accumulate in float32 within.
fn float32_under_half_precision(out: &mut String, list: &[&OpSpec]) {
    marked(out, list, "In float32 under `precision=fp16|bf16`", |s| {
        s.precision == Precision::Float32
    });
    marked(
        out,
        list,
        "In the half type, accumulating in float32, under `precision=fp16|bf16`",
        |s| s.precision == Precision::Widens,
    );
}

/// One line naming the family's ops whose entries `mark` holds for, if any.
fn marked(out: &mut String, list: &[&OpSpec], label: &str, mark: impl Fn(&OpSpec) -> bool) {
    let mut ops: Vec<&str> = list.iter().filter(|s| mark(s)).map(|s| s.op).collect();
    ops.dedup();
    if !ops.is_empty() {
        let _ = writeln!(out, "\n{label}: {}.", ops.join(", "));
    }
}

/// The family's notes on how its answers round compared with ORT's CPU EP, one per entry
/// that has one.
fn numerics(out: &mut String, list: &[&OpSpec]) {
    let noted: Vec<_> = list.iter().filter(|s| !s.numerics.is_empty()).collect();
    if noted.is_empty() {
        return;
    }
    out.push_str("\nNumerics against ORT's CPU EP:\n\n");
    for spec in noted {
        let _ = writeln!(
            out,
            "- **{}** {}: {}",
            spec.op,
            spec.opsets(),
            spec.numerics
        );
    }
}

fn types(spec: &OpSpec) -> String {
    spec.type_vars
        .iter()
        .map(|t| {
            let mut listed = t.always.describe();
            for gate in t.gates {
                let sep = if listed.is_empty() { "" } else { ", " };
                let label = gate_label(gate.since, gate.until);
                listed = format!("{listed}{sep}{}{label}", gate.set.describe());
            }
            format!("{}: {listed}", t.name)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn attributes(spec: &OpSpec) -> String {
    if spec.attributes.is_empty() {
        return "—".into();
    }
    spec.attributes
        .iter()
        .map(|a| {
            let written = match (a.ignored, a.required, a.default) {
                (true, _, _) => format!("{} (ignored)", a.name),
                (false, true, _) => format!("{} (required)", a.name),
                (false, false, "") => a.name.to_owned(),
                (false, false, d) => format!("{}={}", a.name, d.replace(' ', "")),
            };
            // An attribute that later opsets turned into an input of the same name.
            let became_input = spec
                .inputs
                .iter()
                .find(|p| p.since > 0 && p.name.eq_ignore_ascii_case(a.name));
            match became_input {
                Some(port) => format!("{written} (≤{}, then an input)", port.since - 1),
                None => format!("{written}{}", gate_label(a.since, a.until)),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn shape(spec: &OpSpec) -> String {
    match spec.shape {
        ShapeRule::Fixed(s) => format!("{s:?}"),
        ShapeRule::OfNode(_) => "per node".into(),
    }
}

/// The domain as ONNX names it (the default domain is `ai.onnx`).
fn domain_name(domain: &str) -> &str {
    if domain.is_empty() {
        "ai.onnx"
    } else {
        domain
    }
}
