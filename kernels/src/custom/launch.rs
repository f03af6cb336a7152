//! Launching a kernel body through MLX's custom-kernel primitive: `fast::cuda_kernel` on the
//! CUDA backend, `fast::metal_kernel` on Metal. The two mlx-c APIs differ only in their names
//! and in the last arguments of `*_new`, so one macro writes both owners.

use super::{c_string, Launch, Names, TemplateArg};
use crate::error::{capture, check, Error, Result};
use crate::{sys, Array, Stream, VectorArray};

macro_rules! kernel_owner {
    (
        $(#[$doc:meta])*
        $kernel:ident, $config:ident, $backend:literal,
        handle: $handle:ty, config: $config_raw:ty,
        new: |$n:ident, $i:ident, $o:ident, $src:ident, $hdr:ident| $new:expr,
        free: $free:path,
        config_new: $config_new:path, config_free: $config_free:path,
        add_output: $add_output:path, set_grid: $set_grid:path,
        set_thread_group: $set_thread_group:path, add_int: $add_int:path,
        add_dtype: $add_dtype:path, apply: $apply:path $(,)?
    ) => {
        $(#[$doc])*
        pub(super) struct $kernel {
            raw: $handle,
        }

        impl $kernel {
            pub(super) fn new(
                name: &str,
                inputs: &[&str],
                outputs: &[&str],
                source: &str,
            ) -> Result<$kernel> {
                crate::init();
                let (name, source, header) = (c_string(name)?, c_string(source)?, c_string("")?);
                let (inputs, outputs) = (Names::new(inputs)?, Names::new(outputs)?);
                let ($n, $i, $o, $src, $hdr) = (
                    name.as_ptr(),
                    inputs.raw,
                    outputs.raw,
                    source.as_ptr(),
                    header.as_ptr(),
                );
                // SAFETY: every pointer is alive for the call; mlx-c copies what it keeps. A
                // failure is reported through the error handler, which `capture` reads.
                let raw = capture(|| unsafe { $new })?;
                if raw.ctx.is_null() {
                    return Err(Error::Mlx(format!("MLX could not create a {} kernel", $backend)));
                }
                Ok($kernel { raw })
            }

            pub(super) fn apply(
                &self,
                inputs: &[&Array],
                launch: &Launch<'_>,
                stream: &Stream,
            ) -> Result<Vec<Array>> {
                let inputs = VectorArray::from_arrays(
                    &inputs.iter().map(|&a| a.clone()).collect::<Vec<_>>(),
                )?;
                let config = $config::new();
                for (shape, dtype) in launch.outputs {
                    // SAFETY: `shape` outlives the call; the config copies it.
                    check(unsafe {
                        $add_output(config.raw, shape.as_ptr(), shape.len(), dtype.to_sys())
                    })?;
                }
                let total = launch.total_threads($backend)?;
                // SAFETY: plain values into a live config.
                check(unsafe { $set_grid(config.raw, total, 1, 1) })?;
                // SAFETY: as above.
                check(unsafe { $set_thread_group(config.raw, launch.threads, 1, 1) })?;
                for (name, value) in launch.template {
                    let name = c_string(name)?;
                    // SAFETY: `name` outlives the call; the config copies it.
                    check(unsafe {
                        match value {
                            TemplateArg::Int(v) => $add_int(config.raw, name.as_ptr(), *v),
                            TemplateArg::Type(d) => $add_dtype(config.raw, name.as_ptr(), d.to_sys()),
                        }
                    })?;
                }
                // SAFETY: an owned empty vector, filled in place and owned by `outputs`.
                let mut raw = unsafe { sys::mlx_vector_array_new() };
                let (kernel, config_raw) = (self.raw, config.raw);
                // SAFETY: all handles are live.
                let status = unsafe { $apply(&mut raw, kernel, inputs.raw(), config_raw, stream.raw()) };
                let outputs = VectorArray::from_raw(raw);
                check(status)?;
                launch.declared(outputs.to_vec()?, concat!("a ", $backend, " kernel"))
            }
        }

        impl Drop for $kernel {
            fn drop(&mut self) {
                // SAFETY: each owner holds one handle, freed exactly once.
                unsafe { $free(self.raw) };
            }
        }

        /// An owned launch configuration.
        struct $config {
            raw: $config_raw,
        }

        impl $config {
            fn new() -> $config {
                // SAFETY: returns an owned config, freed by Drop.
                $config { raw: unsafe { $config_new() } }
            }
        }

        impl Drop for $config {
            fn drop(&mut self) {
                // SAFETY: each owner holds one handle, freed exactly once.
                unsafe { $config_free(self.raw) };
            }
        }
    };
}

kernel_owner! {
    /// A CUDA kernel: MLX's handle over its name, argument names and body (rows of inputs made
    /// contiguous first; no dynamic shared memory).
    CudaKernel, CudaConfig, "CUDA",
    handle: sys::mlx_fast_cuda_kernel, config: sys::mlx_fast_cuda_kernel_config,
    new: |name, inputs, outputs, source, header| sys::mlx_fast_cuda_kernel_new(
        name, inputs, outputs, source, header, true, 0,
    ),
    free: sys::mlx_fast_cuda_kernel_free,
    config_new: sys::mlx_fast_cuda_kernel_config_new,
    config_free: sys::mlx_fast_cuda_kernel_config_free,
    add_output: sys::mlx_fast_cuda_kernel_config_add_output_arg,
    set_grid: sys::mlx_fast_cuda_kernel_config_set_grid,
    set_thread_group: sys::mlx_fast_cuda_kernel_config_set_thread_group,
    add_int: sys::mlx_fast_cuda_kernel_config_add_template_arg_int,
    add_dtype: sys::mlx_fast_cuda_kernel_config_add_template_arg_dtype,
    apply: sys::mlx_fast_cuda_kernel_apply,
}

kernel_owner! {
    /// A Metal kernel: the same over a Metal body (rows of inputs made contiguous first; plain,
    /// not atomic, outputs).
    MetalKernel, MetalConfig, "Metal",
    handle: sys::mlx_fast_metal_kernel, config: sys::mlx_fast_metal_kernel_config,
    new: |name, inputs, outputs, source, header| sys::mlx_fast_metal_kernel_new(
        name, inputs, outputs, source, header, true, false,
    ),
    free: sys::mlx_fast_metal_kernel_free,
    config_new: sys::mlx_fast_metal_kernel_config_new,
    config_free: sys::mlx_fast_metal_kernel_config_free,
    add_output: sys::mlx_fast_metal_kernel_config_add_output_arg,
    set_grid: sys::mlx_fast_metal_kernel_config_set_grid,
    set_thread_group: sys::mlx_fast_metal_kernel_config_set_thread_group,
    add_int: sys::mlx_fast_metal_kernel_config_add_template_arg_int,
    add_dtype: sys::mlx_fast_metal_kernel_config_add_template_arg_dtype,
    apply: sys::mlx_fast_metal_kernel_apply,
}
