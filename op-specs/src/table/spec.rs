//! The table's row type, filled in by `#[onnx_op]`.

use super::dtypes::{DtypeSet, ElemType};
use super::lower::{Lower, Lowered, OpError, Result, Value};
use super::node::Node;
use mlx_kernels::Stream;

/// Whether a node can live inside a compiled MLX closure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ShapeSafety {
    /// Safe in a shape-agnostic compiled closure.
    Shapeless,
    /// Needs concrete input shapes: safe in a closure that retraces per shape.
    ShapeKeyed,
    /// Needs data on the host mid-graph or has a data-dependent output shape: runs eagerly.
    Eager,
}

/// What an op computes in when a session runs its float32 graphs in half precision (the
/// `precision` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// In the session's half type, wherever the row allows that type for its float32 inputs.
    Follows,
    /// In float32 always: what accumulates (softmax, normalisations, sums), what writes
    /// float32 state in place (KV caches), and whatever reads a float input as a parameter
    /// rather than as data (scales, sizes, thresholds), which rounding would change.
    Float32,
    /// Takes its first input (the data) in the session's half type, any other float inputs
    /// (a norm's scale and bias: parameters) in float32, and accumulates in float32 inside its
    /// own lowering (as it does for a 16-bit graph), rounding its answer once: the values of
    /// computing it in float32 and rounding where a half-type node reads it, without the
    /// float32 copies of its input and output in between (softmax over attention scores:
    /// twice their bytes; a layer norm's activations, two launches each).
    Widens,
}

/// How an op meets activations kept channels-last (`[N, d.., C]` for ONNX's `[N, C, d..]`)
/// between the ops that prefer them: MLX convolves channels-last, so a chain of convolutions and
/// what lies between them stays so, and ONNX's layout is only a lazy transpose of it (which
/// nothing evaluates unless an op that needs it reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Reads and writes ONNX's channels-first layout only.
    ChannelsFirst,
    /// Elementwise with numpy broadcasting (attributes name no axis): the plan may run it over
    /// the channels-last forms of its inputs, every operand permuted alike, when one of them
    /// has that form and a consumer wants it.
    Elementwise,
    /// Its lowering reads the channels-last form of its first input when the plan has one
    /// (`Lower::channels_last_of`) and leaves one of its output (`Lower::set_channels_last`).
    ChannelsLast,
}

#[derive(Debug, Clone, Copy)]
pub enum ShapeRule {
    Fixed(ShapeSafety),
    OfNode(fn(&Node) -> ShapeSafety),
}

/// A claim decision, always with a reason when it is a no.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Claim,
    Decline { reason: String },
}

impl Verdict {
    pub fn decline(reason: impl Into<String>) -> Verdict {
        Verdict::Decline {
            reason: reason.into(),
        }
    }

    pub fn is_claim(&self) -> bool {
        matches!(self, Verdict::Claim)
    }
}

/// A type variable of a row: the dtypes every opset of the row allows, plus gated sets.
#[derive(Debug, Clone, Copy)]
pub struct TypeVar {
    pub name: &'static str,
    /// Allowed in every opset of the row.
    pub always: DtypeSet,
    /// Allowed only in some opsets of the row (`since(12, I8 | U8)`).
    pub gates: &'static [DtypeGate],
    /// Everything some opset of the row allows (`always` and every gate's set).
    pub allowed: DtypeSet,
}

/// Dtypes a row allows only from `since` (0: from the row's start) up to `until`.
#[derive(Debug, Clone, Copy)]
pub struct DtypeGate {
    pub set: DtypeSet,
    pub since: i64,
    pub until: Option<i64>,
}

impl TypeVar {
    /// The dtypes allowed at opset `version`.
    pub fn allowed_at(&self, version: i64) -> DtypeSet {
        self.gates
            .iter()
            .filter(|g| covers(g.since, g.until, version))
            .fold(self.always, |set, g| set.union(g.set))
    }
}

fn covers(since: i64, until: Option<i64>, version: i64) -> bool {
    since <= version && until.is_none_or(|u| version <= u)
}

/// `(12+)`, `(≤8)` or `(9–13)`: a gate for docs and messages; empty when open.
pub fn gate_label(since: i64, until: Option<i64>) -> String {
    match (since, until) {
        (0, None) => String::new(),
        (s, None) => format!(" ({s}+)"),
        (0, Some(u)) => format!(" (≤{u})"),
        (s, Some(u)) => format!(" ({s}–{u})"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    Required,
    Optional,
    Variadic,
}

#[derive(Debug, Clone, Copy)]
pub struct Port {
    pub name: &'static str,
    pub type_var: &'static str,
    pub kind: PortKind,
    /// The first opset with this slot (0: every opset of the row); before it the slot is absent
    /// (or its value was an attribute of the same name).
    pub since: i64,
    /// An optional input that was required up to this opset.
    pub required_until: Option<i64>,
    /// A variadic port whose instances each bind the type variable on their own (ONNX's
    /// heterogeneous variadics: If's outputs, Loop's carried values).
    pub heterogeneous: bool,
    /// The port holds a sequence of tensors of its type variable's type (`seq(tensor(T))`).
    pub sequence: bool,
    /// The port holds an optional tensor (`optional(tensor(T))`), which may be empty.
    pub optional_value: bool,
}

impl Port {
    /// Whether a node at opset `version` must connect this slot.
    pub fn required_at(&self, version: i64) -> bool {
        version >= self.since
            && (self.kind == PortKind::Required
                || self.required_until.is_some_and(|u| version <= u))
    }
}

/// The declared port for slot `index`, following a variadic last port.
pub(crate) fn port_for(ports: &[Port], index: usize) -> Option<&Port> {
    ports
        .get(index)
        .or_else(|| ports.last().filter(|p| p.kind == PortKind::Variadic))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKind {
    Int,
    Float,
    String,
    Ints,
    Floats,
    Strings,
    Tensor,
    Graph,
}

#[derive(Debug, Clone, Copy)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: AttrKind,
    pub required: bool,
    /// The default as written in the declaration (empty when none), for docs.
    pub default: &'static str,
    /// The opsets of the row in which the attribute exists (`since` 0: from the row's start).
    pub since: i64,
    pub until: Option<i64>,
    /// Accepted (checked by kind) but never read: it does not change an inference result.
    pub ignored: bool,
}

impl AttrSpec {
    /// Whether the attribute is part of the op's schema at opset `version`.
    pub fn exists_at(&self, version: i64) -> bool {
        covers(self.since, self.until, version)
    }
}

pub type LowerFn = fn(&mut Lower<'_>, &[Option<Value>]) -> Result<Vec<Value>>;

/// One row of the op table: an ONNX op over one opset range.
#[derive(Clone, Copy)]
pub struct OpSpec {
    /// `""` for the default ONNX domain.
    pub domain: &'static str,
    pub op: &'static str,
    pub since: i64,
    /// Last opset covered (inclusive); `None` for "and later".
    pub until: Option<i64>,
    /// Rust module of the declaration; its last segment is the op family.
    pub module: &'static str,
    /// The source file of the declaration (`op-specs/src/pool.rs`), where its tests sit too.
    pub source: &'static str,
    pub function: &'static str,
    pub doc: &'static str,
    pub type_vars: &'static [TypeVar],
    pub inputs: &'static [Port],
    pub outputs: &'static [Port],
    pub attributes: &'static [AttrSpec],
    pub shape: ShapeRule,
    pub custom_claim: Option<fn(&Node) -> Verdict>,
    /// What the custom claim declines, in words (for the coverage doc).
    pub declines: &'static str,
    /// How the answer's rounding compares with ORT's CPU EP where the two compute differently
    /// (for the coverage doc); empty when they compute alike.
    pub numerics: &'static str,
    pub precision: Precision,
    pub layout: Layout,
    pub lower: LowerFn,
}

impl OpSpec {
    pub fn family(&self) -> &'static str {
        self.module.rsplit("::").next().unwrap_or(self.module)
    }

    /// Whether `node` computes in `half` (float16 or bfloat16) when its session runs float32
    /// graphs in half precision: the row follows the session's precision and allows `half`
    /// wherever the node takes a float32 tensor; a widening row needs that of its first input
    /// only, which must be float32. Otherwise its float32 inputs stay float32.
    pub fn computes_in(&self, node: &Node, half: ElemType) -> bool {
        let version = node.since_version();
        let allows_half = |i: usize| {
            port_for(self.inputs, i)
                .and_then(|port| self.type_var(port.type_var))
                .is_some_and(|var| var.allowed_at(version).contains(half))
        };
        match self.precision {
            Precision::Follows => (0..node.input_count())
                .filter(|&i| node.input_type(i) == Some(ElemType::Float))
                .all(allows_half),
            Precision::Widens => node.input_type(0) == Some(ElemType::Float) && allows_half(0),
            Precision::Float32 => false,
        }
    }

    /// Whether a node computing in a half type takes float input `index` in that type (else
    /// in float32): a widening row takes only its first input so.
    pub fn takes_half_at(&self, index: usize) -> bool {
        self.precision != Precision::Widens || index == 0
    }

    pub fn covers(&self, since_version: i64) -> bool {
        covers(self.since, self.until, since_version)
    }

    pub fn shape_safety(&self, node: &Node) -> ShapeSafety {
        match self.shape {
            ShapeRule::Fixed(s) => s,
            ShapeRule::OfNode(f) => f(node),
        }
    }

    /// Lowers `node` through this entry's generated adapter; the result has one array per
    /// output slot of the node up to its last connected one (at least), and the run-time
    /// checks the lowering registered.
    pub fn lower_node(
        &self,
        stream: &Stream,
        node: &Node,
        inputs: &[Option<Value>],
    ) -> Result<Lowered> {
        self.lower_in(Lower::new(stream, node), inputs)
    }

    /// [`OpSpec::lower_node`] in a context the caller made (a plan's, which knows its
    /// constants).
    /// `inputs` holds an array per input slot, then one per implicit input (what the node's
    /// bodies read from the enclosing scopes), which the lowering finds by name.
    pub fn lower_in(&self, mut cx: Lower, inputs: &[Option<Value>]) -> Result<Lowered> {
        let node = cx.node();
        let (own, implicit) = inputs.split_at(node.input_count().min(inputs.len()));
        cx.set_enclosing(&node.implicit_inputs, implicit)?;
        let outputs = (self.lower)(&mut cx, own)?;
        // Trailing slots left unnamed (`["y", "", "", ""]`, as exporters write them) need no array.
        let needed = (0..node.output_count())
            .rev()
            .find(|&i| node.output_present(i))
            .map_or(0, |last| last + 1);
        if outputs.len() < needed {
            return Err(OpError::new(format!(
                "the lowering produced {} output(s) for {needed} connected output slot(s)",
                outputs.len(),
            )));
        }
        let (checks, written_rows, host_keys) = cx.into_records();
        Ok(Lowered {
            outputs,
            checks,
            written_rows,
            host_keys,
        })
    }

    pub fn type_var(&self, name: &str) -> Option<&TypeVar> {
        self.type_vars.iter().find(|t| t.name == name)
    }

    /// `7..=12` or `14+`.
    pub fn opsets(&self) -> String {
        match self.until {
            Some(u) if u == self.since => format!("{u}"),
            Some(u) => format!("{}–{u}", self.since),
            None => format!("{}+", self.since),
        }
    }
}

impl std::fmt::Debug for OpSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OpSpec({}{}{} opset {})",
            self.domain,
            if self.domain.is_empty() { "" } else { "." },
            self.op,
            self.opsets()
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::table::dtypes::ElemType::{BFloat16, Float, Float16, Int64};
    use crate::table::node::Node;
    use crate::table::registry::lookup;

    fn computes_in_half(op: &str, opset: i64, inputs: &[crate::ElemType]) -> (bool, bool) {
        let spec = lookup("", op, opset).expect("a row");
        let node = inputs
            .iter()
            .fold(Node::new(op, opset), |node, &t| node.input(t))
            .output(inputs[0]);
        (
            spec.computes_in(&node, Float16),
            spec.computes_in(&node, BFloat16),
        )
    }

    #[test]
    fn rows_follow_the_half_type_unless_marked_or_without_it() {
        assert_eq!(computes_in_half("Add", 14, &[Float, Float]), (true, true));
        // Variadic: the third input binds to the port of the first.
        assert_eq!(computes_in_half("Sum", 13, &[Float; 3]), (true, true));
        // Marked `precision = Widens`: half in, float32 inside.
        assert_eq!(computes_in_half("Softmax", 13, &[Float]), (true, true));
        // Widens with parameters: its data in the half type, its scale and bias in float32.
        assert_eq!(
            computes_in_half("LayerNormalization", 17, &[Float; 3]),
            (true, true)
        );
        let layer_norm = lookup("", "LayerNormalization", 17).expect("a row");
        assert!(layer_norm.takes_half_at(0));
        assert!(!layer_norm.takes_half_at(1) && !layer_norm.takes_half_at(2));
        // Marked `precision = Float32`.
        assert_eq!(
            computes_in_half("RMSNormalization", 23, &[Float; 2]),
            (false, false)
        );
        assert_eq!(
            computes_in_half("ReduceSum", 13, &[Float, Int64]),
            (false, false)
        );
        // Unique's row takes float32 but no half type: float32, unmarked.
        assert_eq!(computes_in_half("Unique", 11, &[Float]), (false, false));
    }
}
