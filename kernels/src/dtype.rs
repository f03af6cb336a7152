//! MLX element types and the host types that map onto them.

use crate::sys;

/// An MLX element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    Bool,
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F16,
    F32,
    F64,
    BF16,
    Complex64,
}

impl Dtype {
    pub const ALL: [Dtype; 14] = [
        Dtype::Bool,
        Dtype::U8,
        Dtype::U16,
        Dtype::U32,
        Dtype::U64,
        Dtype::I8,
        Dtype::I16,
        Dtype::I32,
        Dtype::I64,
        Dtype::F16,
        Dtype::F32,
        Dtype::F64,
        Dtype::BF16,
        Dtype::Complex64,
    ];

    pub fn size_in_bytes(self) -> usize {
        match self {
            Dtype::Bool | Dtype::U8 | Dtype::I8 => 1,
            Dtype::U16 | Dtype::I16 | Dtype::F16 | Dtype::BF16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::U64 | Dtype::I64 | Dtype::F64 | Dtype::Complex64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::F32 | Dtype::F64 | Dtype::BF16)
    }

    /// Signed or unsigned integers (not bool).
    pub fn is_integer(self) -> bool {
        use Dtype::*;
        matches!(self, I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64)
    }

    pub(crate) fn to_sys(self) -> sys::mlx_dtype {
        use sys::mlx_dtype as M;
        match self {
            Dtype::Bool => M::MLX_BOOL,
            Dtype::U8 => M::MLX_UINT8,
            Dtype::U16 => M::MLX_UINT16,
            Dtype::U32 => M::MLX_UINT32,
            Dtype::U64 => M::MLX_UINT64,
            Dtype::I8 => M::MLX_INT8,
            Dtype::I16 => M::MLX_INT16,
            Dtype::I32 => M::MLX_INT32,
            Dtype::I64 => M::MLX_INT64,
            Dtype::F16 => M::MLX_FLOAT16,
            Dtype::F32 => M::MLX_FLOAT32,
            Dtype::F64 => M::MLX_FLOAT64,
            Dtype::BF16 => M::MLX_BFLOAT16,
            Dtype::Complex64 => M::MLX_COMPLEX64,
        }
    }

    pub(crate) fn from_sys(raw: sys::mlx_dtype) -> Dtype {
        use sys::mlx_dtype as M;
        match raw {
            M::MLX_BOOL => Dtype::Bool,
            M::MLX_UINT8 => Dtype::U8,
            M::MLX_UINT16 => Dtype::U16,
            M::MLX_UINT32 => Dtype::U32,
            M::MLX_UINT64 => Dtype::U64,
            M::MLX_INT8 => Dtype::I8,
            M::MLX_INT16 => Dtype::I16,
            M::MLX_INT32 => Dtype::I32,
            M::MLX_INT64 => Dtype::I64,
            M::MLX_FLOAT16 => Dtype::F16,
            M::MLX_FLOAT32 => Dtype::F32,
            M::MLX_FLOAT64 => Dtype::F64,
            M::MLX_BFLOAT16 => Dtype::BF16,
            M::MLX_COMPLEX64 => Dtype::Complex64,
        }
    }
}

/// A plain host type with an exact MLX counterpart (16-bit floats travel as raw `u16` bits
/// with an explicit [`Dtype`], see [`crate::Array::from_bytes`]).
pub trait Element: Copy + Default + 'static {
    const DTYPE: Dtype;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => { $(impl Element for $t { const DTYPE: Dtype = Dtype::$d; })* };
}
element!(bool => Bool, u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, i16 => I16,
         i32 => I32, i64 => I64, f32 => F32, f64 => F64);
