//! MLX's memory counters and arrays that own their host bytes. The counters are process-wide:
//! only the first test allocates, so the other cannot disturb its counts.

use mlx_kernels::{memory, Array, Dtype, Stream};

#[test]
fn owned_bytes_are_held_once_and_counted_while_the_array_lives() {
    let stream = Stream::best().expect("stream");
    let values: Vec<u8> = (0..4 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let expected = values.clone();
    let before = memory::active_memory().expect("active memory");
    let array = Array::from_owned_bytes(values, &[1024, 1024], Dtype::U32).expect("array");
    array.eval().expect("eval");
    let held = memory::active_memory().expect("active memory") - before;
    // Adopted (CPU) or copied into MLX's allocator (CUDA): at most one copy MLX accounts for.
    assert!(held <= 4 << 20, "MLX holds {held} bytes for a 4 MiB array");
    assert_eq!(array.to_bytes(&stream).expect("read"), expected);
    assert!(memory::peak_memory().expect("peak") >= memory::active_memory().expect("active"));
    assert!(memory::cache_memory().is_ok());
    drop(array);
    assert!(memory::active_memory().expect("active memory") <= before + (4 << 20));
    memory::reset_peak_memory().expect("reset");
    assert!(memory::peak_memory().expect("peak") >= memory::active_memory().expect("active"));
}

#[test]
fn owned_bytes_of_the_wrong_length_are_refused() {
    let err = Array::from_owned_bytes(vec![0u8; 10], &[3], Dtype::F32).unwrap_err();
    assert!(err.to_string().contains("10 bytes"), "{err}");
}
