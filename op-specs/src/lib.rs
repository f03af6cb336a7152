//! The op table: one `#[onnx_op]` declaration per ONNX op and opset range.
//!
//! `table/` holds the machinery (row type, generic claim rules, lowering context, registry,
//! coverage doc); every other module is one op family. The EP reads only [`decide`] and the
//! [`OpSpec`] it returns, so an op author touches one family file and nothing else.

// The macro's expansion names `::op_specs::...`, which must resolve inside this crate too.
extern crate self as op_specs;

pub mod table;

mod activation;
mod arithmetic;
mod attention;
mod cast;
mod compare;
mod contrib;
mod contrib_norm;
mod control;
mod conv;
mod detection;
mod generate;
mod indexing;
mod layout;
mod linalg;
mod logic;
mod math;
mod ml;
mod moe;
mod normalization;
mod optional;
mod packing;
mod patches;
mod pool;
mod qdq;
mod quantized;
mod quantized_int;
mod random;
mod recurrent;
mod reduce;
mod resize;
mod select;
mod sequence;
mod shape;
mod signal;
mod softmax;
mod text;
mod unique;
mod vision;

pub use ops_macros::onnx_op;
pub use table::body::BodiesReport;
pub use table::dtypes::sets as dtypes;
pub use table::dtypes::{DtypeSet, ElemType};
pub use table::lower::{
    ConstantInputs, FromAttr, FromHost, HostKey, IntoOutputs, Lower, Lowered, OpError, Prepared,
    Result, RuntimeCheck, Sequence, SharedDerivations, Value,
};
pub use table::node::{AttrValue, Graph, Node, TensorValue, ValueInfo};
pub use table::registry::{all, decide, lookup, overlaps, Decision};
pub use table::spec::{
    AttrKind, AttrSpec, DtypeGate, Layout, OpSpec, Port, PortKind, Precision, ShapeSafety, TypeVar,
    Verdict,
};

/// What the `#[onnx_op]` expansion refers to. Not for hand-written code.
#[doc(hidden)]
pub mod __private {
    pub use crate::table::dtypes::DtypeSet;
    pub use crate::table::lower::{
        host_input, optional_host_input, optional_input, required_input, sequence_input,
        variadic_inputs,
    };
    pub use crate::table::lower::{AttrArray, FromAttr, IntoOutputs, Lower, Result, Value};
    pub use crate::table::spec::{
        AttrSpec, DtypeGate, Layout, OpSpec, Port, PortKind, Precision, ShapeRule, ShapeSafety,
        TypeVar,
    };
    pub use inventory;
    pub use mlx_kernels::Array;
}
