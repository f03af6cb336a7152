//! ONNX element types and the named sets that type constraints are written with.

use mlx_kernels::Dtype;

/// ONNX `TensorProto.DataType` (the same codes as ORT's `ONNXTensorElementDataType`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[repr(u8)]
pub enum ElemType {
    Float = 1,
    Uint8 = 2,
    Int8 = 3,
    Uint16 = 4,
    Int16 = 5,
    Int32 = 6,
    Int64 = 7,
    String = 8,
    Bool = 9,
    Float16 = 10,
    Double = 11,
    Uint32 = 12,
    Uint64 = 13,
    Complex64 = 14,
    Complex128 = 15,
    BFloat16 = 16,
    Float8E4M3FN = 17,
    Float8E4M3FNUZ = 18,
    Float8E5M2 = 19,
    Float8E5M2FNUZ = 20,
    Uint4 = 21,
    Int4 = 22,
    Float4E2M1 = 23,
}

impl ElemType {
    pub const ALL: [ElemType; 23] = [
        ElemType::Float,
        ElemType::Uint8,
        ElemType::Int8,
        ElemType::Uint16,
        ElemType::Int16,
        ElemType::Int32,
        ElemType::Int64,
        ElemType::String,
        ElemType::Bool,
        ElemType::Float16,
        ElemType::Double,
        ElemType::Uint32,
        ElemType::Uint64,
        ElemType::Complex64,
        ElemType::Complex128,
        ElemType::BFloat16,
        ElemType::Float8E4M3FN,
        ElemType::Float8E4M3FNUZ,
        ElemType::Float8E5M2,
        ElemType::Float8E5M2FNUZ,
        ElemType::Uint4,
        ElemType::Int4,
        ElemType::Float4E2M1,
    ];

    pub fn from_code(code: i64) -> Option<ElemType> {
        ElemType::ALL.into_iter().find(|t| *t as i64 == code)
    }

    /// The short name used in docs and messages (`f32`, `i64`, `bool`, ...).
    pub fn short_name(self) -> &'static str {
        match self {
            ElemType::Float => "f32",
            ElemType::Uint8 => "u8",
            ElemType::Int8 => "i8",
            ElemType::Uint16 => "u16",
            ElemType::Int16 => "i16",
            ElemType::Int32 => "i32",
            ElemType::Int64 => "i64",
            ElemType::String => "string",
            ElemType::Bool => "bool",
            ElemType::Float16 => "f16",
            ElemType::Double => "f64",
            ElemType::Uint32 => "u32",
            ElemType::Uint64 => "u64",
            ElemType::Complex64 => "c64",
            ElemType::Complex128 => "c128",
            ElemType::BFloat16 => "bf16",
            ElemType::Float8E4M3FN => "f8e4m3fn",
            ElemType::Float8E4M3FNUZ => "f8e4m3fnuz",
            ElemType::Float8E5M2 => "f8e5m2",
            ElemType::Float8E5M2FNUZ => "f8e5m2fnuz",
            ElemType::Uint4 => "u4",
            ElemType::Int4 => "i4",
            ElemType::Float4E2M1 => "f4e2m1",
        }
    }

    /// The lower-case name of `onnx.TensorProto.DataType` (`float`, `int64`, `bfloat16`, ...).
    pub fn onnx_name(self) -> &'static str {
        match self {
            ElemType::Float => "float",
            ElemType::Uint8 => "uint8",
            ElemType::Int8 => "int8",
            ElemType::Uint16 => "uint16",
            ElemType::Int16 => "int16",
            ElemType::Int32 => "int32",
            ElemType::Int64 => "int64",
            ElemType::String => "string",
            ElemType::Bool => "bool",
            ElemType::Float16 => "float16",
            ElemType::Double => "double",
            ElemType::Uint32 => "uint32",
            ElemType::Uint64 => "uint64",
            ElemType::Complex64 => "complex64",
            ElemType::Complex128 => "complex128",
            ElemType::BFloat16 => "bfloat16",
            ElemType::Float8E4M3FN => "float8e4m3fn",
            ElemType::Float8E4M3FNUZ => "float8e4m3fnuz",
            ElemType::Float8E5M2 => "float8e5m2",
            ElemType::Float8E5M2FNUZ => "float8e5m2fnuz",
            ElemType::Uint4 => "uint4",
            ElemType::Int4 => "int4",
            ElemType::Float4E2M1 => "float4e2m1",
        }
    }

    /// The MLX dtype holding the same values exactly, if there is one.
    pub fn to_mlx(self) -> Option<Dtype> {
        Some(match self {
            ElemType::Float => Dtype::F32,
            ElemType::Uint8 => Dtype::U8,
            ElemType::Int8 => Dtype::I8,
            ElemType::Uint16 => Dtype::U16,
            ElemType::Int16 => Dtype::I16,
            ElemType::Int32 => Dtype::I32,
            ElemType::Int64 => Dtype::I64,
            ElemType::Bool => Dtype::Bool,
            ElemType::Float16 => Dtype::F16,
            ElemType::Double => Dtype::F64,
            ElemType::Uint32 => Dtype::U32,
            ElemType::Uint64 => Dtype::U64,
            ElemType::Complex64 => Dtype::Complex64,
            ElemType::BFloat16 => Dtype::BF16,
            _ => return None,
        })
    }

    /// The MLX dtype values of this type live in inside the EP: [`ElemType::to_mlx`], or for
    /// the types narrower than a byte the dtype that carries them exactly (see `narrow`).
    pub fn carrier(self) -> Option<Dtype> {
        self.to_mlx().or_else(|| super::narrow::carrier(self))
    }

    /// Whether ORT's bytes of this type differ from its carrier's (4-bit packing, float8 codes).
    pub fn is_narrow(self) -> bool {
        super::narrow::carrier(self).is_some()
    }

    /// Bytes ORT stores `count` values of this type in; `None` for types the EP cannot carry.
    pub fn bytes_for(self, count: usize) -> Option<usize> {
        if self.is_narrow() {
            return Some(super::narrow::packed_len(self, count));
        }
        count.checked_mul(self.to_mlx()?.size_in_bytes())
    }

    pub fn from_mlx(dtype: Dtype) -> ElemType {
        match dtype {
            Dtype::F32 => ElemType::Float,
            Dtype::U8 => ElemType::Uint8,
            Dtype::I8 => ElemType::Int8,
            Dtype::U16 => ElemType::Uint16,
            Dtype::I16 => ElemType::Int16,
            Dtype::I32 => ElemType::Int32,
            Dtype::I64 => ElemType::Int64,
            Dtype::Bool => ElemType::Bool,
            Dtype::F16 => ElemType::Float16,
            Dtype::F64 => ElemType::Double,
            Dtype::U32 => ElemType::Uint32,
            Dtype::U64 => ElemType::Uint64,
            Dtype::Complex64 => ElemType::Complex64,
            Dtype::BF16 => ElemType::BFloat16,
        }
    }
}

/// A set of element types, as a bit mask over their codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DtypeSet(u32);

impl DtypeSet {
    pub const EMPTY: DtypeSet = DtypeSet(0);

    pub const fn of(types: &[ElemType]) -> DtypeSet {
        let mut bits = 0;
        let mut i = 0;
        while i < types.len() {
            bits |= 1 << types[i] as u32;
            i += 1;
        }
        DtypeSet(bits)
    }

    pub const fn union(self, other: DtypeSet) -> DtypeSet {
        DtypeSet(self.0 | other.0)
    }

    pub const fn contains(self, t: ElemType) -> bool {
        self.0 & (1 << t as u32) != 0
    }

    pub fn iter(self) -> impl Iterator<Item = ElemType> {
        ElemType::ALL.into_iter().filter(move |t| self.contains(*t))
    }

    /// `f32, f16, bf16`-style listing for docs and messages.
    pub fn describe(self) -> String {
        self.iter()
            .map(ElemType::short_name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The named sets used in `types(T = ...)`. Float64 is in none of the general sets: MLX's GPU
/// backends have no float64, and a claim must hold on every backend.
pub mod sets {
    use super::{DtypeSet, ElemType as E};

    pub const F32: DtypeSet = DtypeSet::of(&[E::Float]);
    pub const F16: DtypeSet = DtypeSet::of(&[E::Float16]);
    pub const BF16: DtypeSet = DtypeSet::of(&[E::BFloat16]);
    pub const FLOAT: DtypeSet = DtypeSet::of(&[E::Float, E::Float16, E::BFloat16]);
    pub const I8: DtypeSet = DtypeSet::of(&[E::Int8]);
    pub const I16: DtypeSet = DtypeSet::of(&[E::Int16]);
    pub const I32: DtypeSet = DtypeSet::of(&[E::Int32]);
    pub const I64: DtypeSet = DtypeSet::of(&[E::Int64]);
    pub const INT: DtypeSet = DtypeSet::of(&[E::Int8, E::Int16, E::Int32, E::Int64]);
    pub const U8: DtypeSet = DtypeSet::of(&[E::Uint8]);
    pub const U32: DtypeSet = DtypeSet::of(&[E::Uint32]);
    pub const U64: DtypeSet = DtypeSet::of(&[E::Uint64]);
    pub const UINT: DtypeSet = DtypeSet::of(&[E::Uint8, E::Uint16, E::Uint32, E::Uint64]);
    pub const BOOL: DtypeSet = DtypeSet::of(&[E::Bool]);
    // Narrow types, carried in int8, uint8 and float16 (see `narrow`); in no general set.
    pub const I4: DtypeSet = DtypeSet::of(&[E::Int4]);
    pub const U4: DtypeSet = DtypeSet::of(&[E::Uint4]);
    pub const FLOAT8: DtypeSet = DtypeSet::of(&[
        E::Float8E4M3FN,
        E::Float8E4M3FNUZ,
        E::Float8E5M2,
        E::Float8E5M2FNUZ,
    ]);
    pub const F4: DtypeSet = DtypeSet::of(&[E::Float4E2M1]);
    pub const SIGNED: DtypeSet = FLOAT.union(INT);
    pub const INTEGER: DtypeSet = INT.union(UINT);
    pub const NUMERIC: DtypeSet = FLOAT.union(INT).union(UINT);
    pub const ANY: DtypeSet = NUMERIC.union(BOOL);
}
