//! MLX failures come back as values, and closures trace, compile and replay.

mod common;

use common::{array, stream};
use mlx_kernels::{ops, Array, Closure, Dtype, Error, Stream};

#[test]
fn mlx_error_is_an_err_with_mlx_message_and_the_process_lives_on() {
    let s = stream();
    let a = array(&[1.0; 6], &[2, 3]);
    let b = array(&[1.0; 8], &[4, 2]);
    let err = ops::matmul(&a, &b, &s).unwrap_err();
    let Error::Mlx(message) = &err else {
        panic!("expected an MLX error, got {err:?}")
    };
    assert!(
        message.contains("matmul"),
        "MLX's own message expected, got {message:?}"
    );
    let err = ops::add(&a, &b, &s).unwrap_err();
    assert!(
        matches!(&err, Error::Mlx(m) if m.contains("broadcast")),
        "{err:?}"
    );
    // The same thread keeps working, with no stale message attached to later results.
    let ok = ops::add(&a, &a, &s).unwrap();
    assert_eq!(ok.to_vec::<f32>(&s).unwrap(), vec![2.0; 6]);
}

#[test]
fn host_data_must_match_its_shape() {
    let err = Array::from_bytes(&[0u8; 5], &[2], Dtype::F32).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err:?}");
    let err = Array::from_slice::<f32>(&[], &[0, 1 << 31]).unwrap_err();
    assert!(
        matches!(&err, Error::Shape(m) if m.contains("i32")),
        "{err:?}"
    );
    let err = array(&[1.0], &[1]).to_vec::<i32>(&stream()).unwrap_err();
    assert!(matches!(err, Error::Dtype(_)), "{err:?}");
}

#[test]
fn no_gpu_on_the_cpu_backend_is_an_error_not_an_exit() {
    if Stream::gpu_available() {
        assert!(Stream::gpu().is_ok());
    } else {
        assert!(Stream::gpu().is_err());
        assert_eq!(Stream::best().unwrap().kind(), mlx_kernels::DeviceKind::Cpu);
    }
}

/// y = tanh(a * b + a) — several ops, so compilation has something to fuse.
fn body(inputs: &[Array]) -> mlx_kernels::Result<Vec<Array>> {
    let s = Stream::best()?;
    let prod = ops::multiply(&inputs[0], &inputs[1], &s)?;
    let sum = ops::add(&prod, &inputs[0], &s)?;
    Ok(vec![ops::tanh(&sum, &s)?])
}

fn reference(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(a, b)| (a * b + a).tanh()).collect()
}

#[test]
fn compiled_closure_applied_twice_with_different_inputs() {
    let s = stream();
    let compiled = Closure::new(body).compile(false).unwrap();
    let runs = [
        (vec![0.5f32, -1.0, 2.0, 0.0], vec![1.0f32, 3.0, -0.5, 9.0]),
        (vec![-0.25f32, 4.0, 1.5, -3.0], vec![2.0f32, 0.1, 0.2, 0.3]),
    ];
    for (a, b) in &runs {
        let out = compiled.apply(&[array(a, &[4]), array(b, &[4])]).unwrap();
        assert_eq!(out.len(), 1);
        common::assert_close(&out[0].to_vec::<f32>(&s).unwrap(), &reference(a, b), 1e-6);
    }
    // A new shape retraces (not shapeless) and still gives the right answer.
    let (a, b) = (vec![1.0f32; 6], vec![0.5f32; 6]);
    let out = compiled
        .apply(&[array(&a, &[2, 3]), array(&b, &[2, 3])])
        .unwrap();
    assert_eq!(out[0].shape(), vec![2, 3]);
    common::assert_close(&out[0].to_vec::<f32>(&s).unwrap(), &reference(&a, &b), 1e-6);
}

#[test]
fn closure_errors_and_panics_surface_from_apply() {
    let failing = Closure::new(|inputs: &[Array]| {
        let s = Stream::best()?;
        Ok(vec![ops::matmul(&inputs[0], &inputs[0], &s)?])
    });
    let err = failing.apply(&[array(&[1.0; 6], &[2, 3])]).unwrap_err();
    assert!(
        matches!(&err, Error::Mlx(m) if m.contains("matmul")),
        "{err:?}"
    );

    let panicking =
        Closure::new(|_: &[Array]| -> mlx_kernels::Result<Vec<Array>> { panic!("boom") });
    let err = panicking.apply(&[]).unwrap_err();
    assert!(
        matches!(&err, Error::Callback(m) if m.contains("boom")),
        "{err:?}"
    );
    // Compiling a failing body fails on the traced apply, cleanly.
    let err = failing
        .compile(false)
        .unwrap()
        .apply(&[array(&[1.0; 6], &[2, 3])])
        .unwrap_err();
    assert!(
        matches!(&err, Error::Mlx(m) if m.contains("matmul")),
        "{err:?}"
    );
}

/// The hand-written kernels need a GPU backend: on the CPU their `*_runs_on` say no, and a
/// call anyway (or with operands that do not fit) is an error, not a crash.
#[test]
fn hand_written_kernels_refuse_cleanly_where_they_cannot_run() {
    let s = Stream::cpu().unwrap();
    assert!(!mlx_kernels::custom::decode_attention_runs_on(&s));
    assert!(!mlx_kernels::custom::paged_prefill_attention_runs_on(&s));
    let q = array(&[0.5; 32], &[1, 2, 1, 16]);
    let kv = array(&[0.25; 64], &[1, 1, 4, 16]);
    let rows = Array::from_slice(&[0i32], &[1, 1]).unwrap();
    let end = Array::from_slice(&[3i32], &[1, 1]).unwrap();
    let err = mlx_kernels::custom::decode_attention(&q, &kv, &kv, &rows, &end, 0.25, &s);
    assert!(err.is_err(), "{err:?}");
    // Mismatched operands are refused before MLX sees them.
    let err =
        mlx_kernels::custom::decode_attention(&q, &kv, &q, &rows, &end, 0.25, &s).unwrap_err();
    assert!(
        matches!(&err, Error::Shape(m) if m.contains("do not fit")),
        "{err:?}"
    );
    // The paged kernel: pools [NB = 2, BS = 2, Hkv = 1, D = 16], one row of two block ids.
    let pool = array(&[0.25; 64], &[2, 2, 1, 16]);
    let table = Array::from_slice(&[1i32, 0], &[1, 2]).unwrap();
    let paged = mlx_kernels::custom::paged_decode_attention;
    assert!(paged(&q, &pool, &pool, &table, &rows, &end, 0.25, &s).is_err());
    // A table that is not int32, or not one row of ids a query row, is refused before MLX.
    let wide_table = Array::from_slice(&[1i64, 0], &[1, 2]).unwrap();
    let no_ids = Array::from_slice(&[0i32; 0], &[1, 0]).unwrap();
    for table in [&wide_table, &no_ids] {
        let err = paged(&q, &pool, &pool, table, &rows, &end, 0.25, &s).unwrap_err();
        assert!(
            matches!(&err, Error::Shape(m) if m.contains("do not fit")),
            "{err:?}"
        );
    }
    // The paged prefill kernel: q [T = 2, Hq = 2, D = 16] float16 over the same pools.
    let half = |a: &Array| mlx_kernels::ops::astype(a, Dtype::F16, &s).unwrap();
    let (q16, pool16) = (half(&array(&[0.5; 64], &[2, 2, 16])), half(&pool));
    let per_token = Array::from_slice(&[0i32, 0], &[2]).unwrap();
    let ends = Array::from_slice(&[3i32, 4], &[2]).unwrap();
    let prefill = mlx_kernels::custom::paged_prefill_attention;
    let run = |q: &Array, pool: &Array, lo: &Array| {
        prefill(q, pool, pool, &table, &per_token, lo, &ends, 0.25, &s)
    };
    let err = run(&q16, &pool16, &per_token).unwrap_err();
    assert!(
        matches!(&err, Error::Mlx(m) if m.contains("not on this stream")),
        "{err:?}"
    );
    // float32 (the kernel's tiles are sized for 2-byte elements), or a lo of another length.
    for (q, pool, lo) in [(&q, &pool, &per_token), (&q16, &pool16, &end)] {
        let err = run(q, pool, lo).unwrap_err();
        assert!(
            matches!(&err, Error::Shape(m) if m.contains("do not fit")),
            "{err:?}"
        );
    }
    let x = array(&[1.0; 64], &[1, 64]);
    let packed = Array::from_slice(&[0u8; 32], &[1, 32]).unwrap();
    let scales = array(&[1.0; 2], &[1, 2]);
    assert!(mlx_kernels::custom::quantized_matvec(&x, &packed, &scales, 1, 32, &s).is_err());
    // K = 64 with blocks of 48 is not a layout the kernel takes.
    let err = mlx_kernels::custom::quantized_matvec(&x, &packed, &scales, 1, 48, &s).unwrap_err();
    assert!(matches!(&err, Error::Shape(_)), "{err:?}");
    assert!(!mlx_kernels::custom::decode_attention_takes(3, Dtype::F32));
    assert!(mlx_kernels::custom::decode_attention_takes(64, Dtype::F16));
    assert!(mlx_kernels::custom::decode_attention_takes(64, Dtype::BF16));
    assert!(mlx_kernels::custom::paged_prefill_attention_takes(
        128,
        Dtype::F32
    ));
    assert!(!mlx_kernels::custom::paged_prefill_attention_takes(
        256,
        Dtype::F32
    ));
    assert!(!mlx_kernels::custom::paged_prefill_attention_takes(
        64,
        Dtype::I32
    ));
    assert!(mlx_kernels::custom::paged_prefill_attention_takes(
        256,
        Dtype::BF16
    ));
    // Packing bytes: a CPU stream cannot run it; no parts, or too many bytes, are refused.
    let parts = [kv.clone(), Array::from_slice(&[true, false], &[2]).unwrap()];
    assert!(mlx_kernels::custom::pack_bytes(&parts, &s).is_err());
    let err = mlx_kernels::custom::pack_bytes(&[], &s).unwrap_err();
    assert!(
        matches!(&err, Error::Shape(m) if m.contains("0 non-empty parts")),
        "{err:?}"
    );
    use mlx_kernels::custom::{pack_bytes_takes, PACK_BYTES_MAX_PARTS, PACK_BYTES_MAX_TOTAL};
    assert!(pack_bytes_takes(PACK_BYTES_MAX_PARTS, PACK_BYTES_MAX_TOTAL));
    assert!(!pack_bytes_takes(PACK_BYTES_MAX_PARTS + 1, 1024));
    assert!(!pack_bytes_takes(2, PACK_BYTES_MAX_TOTAL + 1));
}

#[test]
fn an_array_and_its_clones_share_one_identity() {
    let a = array(&[1.0, 2.0], &[2]);
    let b = array(&[1.0, 2.0], &[2]);
    let clone = a.clone();
    assert_eq!(a.id(), clone.id());
    assert_ne!(a.id(), b.id(), "equal values, different arrays");
}
