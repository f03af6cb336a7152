//! A kernel body as a whole CUDA source for NVRTC: the `extern "C" __global__` function around
//! the body, as MLX's custom-kernel primitive would write it (each input a `const T*` under its
//! name, each output a `T*`, the template constants as `constexpr int` and `using` lines), so a
//! body reads the same names on either route. The one difference: a `{name}_shape` the body
//! reads comes in as integer arguments after the outputs (the precompiled primitive passes
//! scalars, not shapes) and is gathered into a local array of that name.

use std::fmt::Write as _;

use super::super::{Kernel, Launch, TemplateArg};
use crate::error::{Error, Result};
use crate::{Array, Dtype};

/// What the bodies use beyond CUDA's built-ins: the half types from CUDA's headers, and what
/// MLX's own JIT header brings in through C++'s standard library, which NVRTC lacks: `size_t`
/// and the float macros of `<cmath>` (by their bits, as CUDA's `math_constants.h` spells them).
const PRELUDE: &str = "#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef decltype(sizeof(0)) size_t;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
";

/// A whole source and the integer arguments it takes after its arrays.
#[derive(Debug, PartialEq)]
pub(super) struct Whole {
    pub text: String,
    pub scalars: Vec<i32>,
}

/// The whole source of `kernel`'s CUDA body applied to `inputs` with `launch`, its function
/// named [`Kernel::name`].
pub(super) fn whole(kernel: &Kernel<'_>, inputs: &[&Array], launch: &Launch<'_>) -> Result<Whole> {
    let mut params = Vec::new();
    let mut shapes = String::new();
    let mut shape_params = Vec::new();
    let mut scalars = Vec::new();
    for (name, array) in kernel.inputs.iter().zip(inputs) {
        params.push(format!("const {}* {name}", cuda_type(array.dtype())?));
        if super::super::reads_shape(kernel.cuda, name, array) {
            let dims: Vec<String> = (0..array.ndim())
                .map(|d| format!("{name}_shape_{d}"))
                .collect();
            for (d, &extent) in array.shape().iter().enumerate() {
                shape_params.push(format!("int {name}_shape_{d}"));
                scalars.push(i32::try_from(extent).map_err(|_| {
                    Error::Shape(format!(
                        "{}: a {name} dimension of {extent} exceeds 32 bits",
                        kernel.name
                    ))
                })?);
            }
            let _ = writeln!(
                shapes,
                "  const int {name}_shape[] = {{{}}};",
                dims.join(", ")
            );
        }
        for unsupported in ["strides", "ndim"] {
            if kernel.cuda.contains(&format!("{name}_{unsupported}")) {
                return Err(Error::Mlx(format!(
                    "{}: a body may read {name}_shape, not {name}_{unsupported}",
                    kernel.name
                )));
            }
        }
    }
    for (name, (_, dtype)) in kernel.outputs.iter().zip(launch.outputs) {
        params.push(format!("{}* {name}", cuda_type(*dtype)?));
    }
    params.extend(shape_params);
    let mut constants = String::new();
    for (name, value) in launch.template {
        let _ = match value {
            TemplateArg::Int(v) => writeln!(constants, "  constexpr int {name} = {v};"),
            TemplateArg::Type(d) => writeln!(constants, "  using {name} = {};", cuda_type(*d)?),
        };
    }
    let text = format!(
        "{PRELUDE}\nextern \"C\" __global__ void {name}(\n    {params}) {{\n{shapes}{constants}\n{body}\n}}\n",
        name = kernel.name,
        params = params.join(",\n    "),
        body = kernel.cuda,
    );
    Ok(Whole { text, scalars })
}

/// An element type's CUDA spelling, as MLX's custom kernels spell it (CUDA's built-in integer
/// types, since NVRTC has no `<cstdint>`).
fn cuda_type(dtype: Dtype) -> Result<&'static str> {
    Ok(match dtype {
        Dtype::Bool => "bool",
        Dtype::U8 => "unsigned char",
        Dtype::U16 => "unsigned short",
        Dtype::U32 => "unsigned int",
        Dtype::U64 => "unsigned long long",
        Dtype::I8 => "signed char",
        Dtype::I16 => "short",
        Dtype::I32 => "int",
        Dtype::I64 => "long long",
        Dtype::F16 => "__half",
        Dtype::F32 => "float",
        Dtype::F64 => "double",
        Dtype::BF16 => "__nv_bfloat16",
        Dtype::Complex64 => {
            return Err(Error::Dtype(
                "a hand-written kernel takes no complex64".into(),
            ))
        }
    })
}
