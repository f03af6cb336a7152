//! The byte-packing body runs in the host emulator (`custom/emulator`): its output is each
//! part's bytes in turn, whatever the parts' element types, empty parts contributing nothing.

use super::super::emulator::emulate;
use super::super::Backend;
use super::pack_bytes;
use crate::{ops, Array, Dtype, Stream};

#[test]
fn the_body_packs_each_part_in_turn() {
    let cpu = Stream::cpu().unwrap();
    let half = ops::astype(
        &Array::from_slice(&[1.5f32, -2.0, 0.25, 7.0, -0.0], &[5]).unwrap(),
        Dtype::F16,
        &cpu,
    )
    .unwrap();
    // 300 bytes in all: two blocks of threads, the second partly past the end.
    let parts = [
        Array::from_slice(&[true, false, true], &[3]).unwrap(),
        Array::from_slice(&[-3i64, 1 << 40], &[2, 1]).unwrap(),
        half,
        Array::from_slice::<f32>(&[], &[0]).unwrap(),
        Array::from_slice(
            &(0..271u32).map(|v| (v * 7) as u8).collect::<Vec<_>>(),
            &[271],
        )
        .unwrap(),
    ];
    let want: Vec<u8> = parts
        .iter()
        .flat_map(|p| p.to_bytes(&cpu).unwrap())
        .collect();
    assert_eq!(want.len(), 300);
    let packed = emulate(Backend::Cuda, || pack_bytes(&parts, &cpu)).unwrap();
    assert_eq!(packed.dtype(), Dtype::U8);
    assert_eq!(packed.to_vec::<u8>(&cpu).unwrap(), want);
}
