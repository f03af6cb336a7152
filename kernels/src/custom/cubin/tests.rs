use std::sync::atomic::Ordering;

use super::super::emulator::emulate;
use super::super::{Backend, Kernel, Launch, TemplateArg};
use super::{cache, nvrtc, source, COMPILE_CHECKED};
use crate::{Array, Dtype, Stream};

const BODY: &str = "out[0] = x[0] + static_cast<T>(dst_shape[0] + N);";

fn kernel(cuda: &str) -> Kernel<'_> {
    Kernel {
        name: "sample",
        inputs: &["x", "dst"],
        outputs: &["out", "sum"],
        cuda,
        metal: None,
    }
}

fn operands() -> (Array, Array) {
    let x = Array::from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
    let dst = Array::from_slice(&[0u8; 6], &[6]).unwrap();
    (x, dst)
}

/// One block of 32 threads, two one-element float32 outputs, no constants.
fn small_launch() -> Launch<'static> {
    Launch {
        outputs: &[(&[1], Dtype::F32), (&[1], Dtype::F32)],
        blocks: 1,
        threads: 32,
        template: &[],
    }
}

#[test]
fn a_whole_source_declares_the_arrays_and_constants_as_mlx_does() {
    let (x, dst) = operands();
    let launch = Launch {
        outputs: &[(&[2, 3], Dtype::F16), (&[1], Dtype::F32)],
        blocks: 1,
        threads: 32,
        template: &[
            ("T", TemplateArg::Type(Dtype::F16)),
            ("N", TemplateArg::Int(4)),
        ],
    };
    let whole = source::whole(&kernel(BODY), &[&x, &dst], &launch).unwrap();
    let function = whole.text.split_once("extern").unwrap().1;
    assert_eq!(
        function,
        " \"C\" __global__ void sample(\n    const float* x,\n    const unsigned char* dst,\n    \
         __half* out,\n    float* sum,\n    int dst_shape_0) {\n  const int dst_shape[] = {dst_shape_0};\n  \
         using T = __half;\n  constexpr int N = 4;\n\n\
         out[0] = x[0] + static_cast<T>(dst_shape[0] + N);\n}\n"
    );
    assert_eq!(
        whole.scalars,
        [6],
        "the shape read, as the arguments after the arrays"
    );
    assert!(whole.text.starts_with("#include <cuda_fp16.h>"));
}

#[test]
fn a_body_reading_strides_or_ndim_is_refused() {
    let (x, dst) = operands();
    let launch = small_launch();
    for body in ["out[0] = x_strides[0];", "out[0] = dst_ndim;"] {
        let refused = source::whole(&kernel(body), &[&x, &dst], &launch).unwrap_err();
        assert!(refused.to_string().contains("not"), "{refused}");
    }
}

#[test]
fn the_disk_keeps_a_binary_for_later_processes_only_for_the_text_it_was_built_from() {
    let folder = std::env::temp_dir().join(format!("cubin-cache-test-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    // An identity new to this process, so that its own cache answers nothing at first.
    let identity = format!("// test {:?}\nsource", std::time::SystemTime::now());
    let mut builds = 0;
    for origin in [cache::Origin::Built, cache::Origin::Process] {
        let (binary, had) = cache::binary_in(Some(&folder), "k", &identity, || {
            builds += 1;
            Ok(b"cubin".to_vec())
        });
        assert_eq!((&*binary.unwrap(), had), (&b"cubin"[..], origin));
    }
    assert_eq!(builds, 1);
    let files = std::fs::read_dir(&folder).unwrap().count();
    assert_eq!(files, 2, "a cubin and its text, no temporary files");
    // What a later process reads: the binary, for the very text it was built from only.
    let stem = cache::stem(&folder, "k", &identity);
    assert_eq!(
        cache::read(&stem, &identity).as_deref(),
        Some(&b"cubin"[..])
    );
    assert_eq!(cache::read(&stem, &format!("{identity} ")), None);
    // Another text under the same name (as a hash collision would put it) is not taken.
    let other = format!("{identity}, changed");
    let colliding = cache::stem(&folder, "k", &other);
    for extension in ["cu", "cubin"] {
        std::fs::copy(
            stem.with_extension(extension),
            colliding.with_extension(extension),
        )
        .unwrap();
    }
    assert_eq!(cache::read(&colliding, &other), None);
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn a_failure_is_kept_so_a_source_is_compiled_once() {
    let identity = format!("// test {:?}\nbad", std::time::SystemTime::now());
    let mut builds = 0;
    for origin in [cache::Origin::Built, cache::Origin::Process] {
        let (failed, had) = cache::binary_in(None, "sample", &identity, || {
            builds += 1;
            Err("no".into())
        });
        assert_eq!((failed.unwrap_err().as_str(), had), ("no", origin));
    }
    assert_eq!(builds, 1);
}

#[test]
fn without_nvrtc_each_variant_is_left_to_mlx_once() {
    let text = format!("// {:?}", std::time::SystemTime::now());
    let (first, origin) = super::binary(Err("NVRTC is not loaded"), "sample", &text);
    assert_eq!(
        (first.unwrap_err().as_str(), origin),
        ("NVRTC is not loaded", cache::Origin::Built)
    );
    let (_, origin) = super::binary(Err("NVRTC is not loaded"), "sample", &text);
    assert_eq!(origin, cache::Origin::Process, "counted once");
}

/// With the tests' NVRTC (`make test` sets it up on x86-64 Linux), emulated CUDA launches are
/// compiled, and a source NVRTC rejects fails its launch.
#[test]
fn emulated_cuda_launches_are_compiled_by_nvrtc_when_the_tests_have_it() {
    let Some(compiler) = nvrtc::for_tests() else {
        eprintln!("ONNXRUNTIME_EP_MLX_TEST_NVRTC is not set: CUDA sources are not compiled");
        return;
    };
    let rejected = compiler
        .compile("this is not CUDA", "nonsense")
        .unwrap_err();
    assert!(rejected.contains("error"), "{rejected}");
    let cpu = Stream::cpu().unwrap();
    let src = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let dst = Array::from_slice(&[0u8; 12], &[12]).unwrap();
    let before = COMPILE_CHECKED.load(Ordering::Relaxed);
    emulate(Backend::Cuda, || {
        super::super::store_bytes(&src, &dst, &cpu)
    })
    .unwrap();
    assert!(COMPILE_CHECKED.load(Ordering::Relaxed) > before);
    let (x, dst) = operands();
    let launch = small_launch();
    let broken = emulate(Backend::Cuda, || {
        kernel("out[0] = undeclared;").apply(&[&x, &dst], &launch, &cpu)
    });
    assert!(broken.unwrap_err().to_string().contains("NVRTC rejects"));
}
