//! The store body runs in the host emulator (`custom/emulator`), which hands back its inputs
//! as the run left them: the destination holds the source's bytes, whole 16-byte words and the
//! tail alike, whatever the source's element type.

use super::super::emulator::{emulate, inputs_after_last_run};
use super::super::Backend;
use super::store_bytes;
use crate::{ops, Array, Dtype, Stream};

fn stored(src: &Array, cpu: &Stream) -> Vec<u8> {
    let want = src.to_bytes(cpu).unwrap();
    let dst = Array::from_slice(&vec![0u8; want.len()], &[want.len() as i64]).unwrap();
    emulate(Backend::Cuda, || store_bytes(src, &dst, cpu)).unwrap();
    let after = inputs_after_last_run();
    assert_eq!(after.len(), 2);
    assert_eq!(after[0], want, "the source is left as it was");
    after[1].clone()
}

#[test]
fn the_destination_gets_every_byte_of_the_source() {
    let cpu = Stream::cpu().unwrap();
    // 148 bytes: 9 whole 16-byte words and a tail of 4, over two blocks of threads.
    let floats: Vec<f32> = (0..37).map(|i| i as f32 * 1.5 - 20.0).collect();
    let src = Array::from_slice(&floats, &[37]).unwrap();
    assert_eq!(stored(&src, &cpu), src.to_bytes(&cpu).unwrap());
    // 5,000 bytes: many blocks.
    let bytes: Vec<u8> = (0..5000u32).map(|v| (v * 7 + 3) as u8).collect();
    let src = Array::from_slice(&bytes, &[50, 100]).unwrap();
    assert_eq!(stored(&src, &cpu), bytes);
}

#[test]
fn a_store_shorter_than_one_word_goes_byte_by_byte() {
    let cpu = Stream::cpu().unwrap();
    let half = ops::astype(
        &Array::from_slice(&[1.5f32, -2.0, 0.25, 7.0, -0.0, 3.0, 9.5], &[7]).unwrap(),
        Dtype::F16,
        &cpu,
    )
    .unwrap();
    assert_eq!(stored(&half, &cpu), half.to_bytes(&cpu).unwrap());
    let flags = Array::from_slice(&[true, false, true], &[3]).unwrap();
    assert_eq!(stored(&flags, &cpu), vec![1, 0, 1]);
}
