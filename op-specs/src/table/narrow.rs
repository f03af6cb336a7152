//! Element types MLX has no dtype for (int4, uint4, the four float8 types, float4e2m1), carried
//! through MLX in a dtype that holds every one of their values exactly: int4 in int8, uint4 in
//! uint8, the floats in float16. Every float8 and float4 value is a float16 value: their
//! exponents (2^-17 for e5m2fnuz's smallest subnormal up to 2^15) and their 2 or 3 mantissa bits
//! fit float16's (subnormals from 2^-24, 10 mantissa bits).
//!
//! The EP decodes a narrow tensor into its carrier where it enters a plan (inputs, constant
//! initializers) and encodes the carrier back where it leaves; lowerings see only carriers. An
//! encoding that meets a value the type cannot hold is a lowering's bug, reported, never
//! written.
//!
//! ONNX packs two 4-bit values per byte, the first in the low nibble; an odd count leaves the
//! last byte's high nibble unused (written as 0).

use std::collections::HashMap;

use mlx_kernels::Dtype;

use super::dtypes::ElemType;

/// A small float format, as ONNX defines it.
#[derive(Debug, Clone, Copy)]
struct Minifloat {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    /// The codes that are NaN.
    nan: NanCodes,
    /// Whether the all-ones exponent with a zero mantissa is ±inf (e5m2 only).
    infinite: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NanCodes {
    /// Every bit but the sign set (`0x7F`, `0xFF`): e4m3fn.
    AllOnes,
    /// The all-ones exponent with a non-zero mantissa, IEEE style: e5m2.
    Ieee,
    /// Only `0x80` (the "negative zero"): the FNUZ types, which have no -0.
    NegativeZero,
    /// None: float4e2m1.
    None,
}

fn minifloat(elem: ElemType) -> Option<Minifloat> {
    let (exponent_bits, mantissa_bits, bias, nan) = match elem {
        ElemType::Float8E4M3FN => (4, 3, 7, NanCodes::AllOnes),
        ElemType::Float8E4M3FNUZ => (4, 3, 8, NanCodes::NegativeZero),
        ElemType::Float8E5M2 => (5, 2, 15, NanCodes::Ieee),
        ElemType::Float8E5M2FNUZ => (5, 2, 16, NanCodes::NegativeZero),
        ElemType::Float4E2M1 => (2, 1, 1, NanCodes::None),
        _ => return None,
    };
    Some(Minifloat {
        exponent_bits,
        mantissa_bits,
        bias,
        nan,
        infinite: nan == NanCodes::Ieee,
    })
}

/// The MLX dtype a narrow type is carried in; `None` for every other type.
pub fn carrier(elem: ElemType) -> Option<Dtype> {
    match elem {
        ElemType::Int4 => Some(Dtype::I8),
        ElemType::Uint4 => Some(Dtype::U8),
        _ => minifloat(elem).map(|_| Dtype::F16),
    }
}

fn four_bit(elem: ElemType) -> bool {
    matches!(
        elem,
        ElemType::Int4 | ElemType::Uint4 | ElemType::Float4E2M1
    )
}

/// Bytes ONNX stores `count` values of narrow `elem` in.
pub fn packed_len(elem: ElemType, count: usize) -> usize {
    if four_bit(elem) {
        count.div_ceil(2)
    } else {
        count
    }
}

/// The codes (one per value, unpacked) of `count` values stored in `packed`.
fn codes(elem: ElemType, packed: &[u8], count: usize) -> Vec<u8> {
    if !four_bit(elem) {
        return packed[..count].to_vec();
    }
    (0..count)
        .map(|i| (packed[i / 2] >> (4 * (i % 2))) & 0x0F)
        .collect()
}

/// The value of `code` of a minifloat, exact in f64 (NaN keeps the code's sign).
fn minifloat_value(f: &Minifloat, code: u8) -> f64 {
    let width = 1 + f.exponent_bits + f.mantissa_bits;
    let negative = code >> (width - 1) & 1 == 1;
    let sign = if negative { -1.0 } else { 1.0 };
    let magnitude_bits = code & ((1u8 << (width - 1)) - 1);
    let exponent = i32::from(magnitude_bits >> f.mantissa_bits);
    let mantissa = f64::from(magnitude_bits & ((1 << f.mantissa_bits) - 1));
    let top = (1 << f.exponent_bits) - 1;
    let is_nan = match f.nan {
        NanCodes::AllOnes => magnitude_bits == (1u8 << (width - 1)) - 1,
        NanCodes::Ieee => exponent == top && mantissa != 0.0,
        NanCodes::NegativeZero => code == 1 << (width - 1),
        NanCodes::None => false,
    };
    if is_nan {
        return f64::NAN.copysign(sign);
    }
    if f.infinite && exponent == top {
        return sign * f64::INFINITY;
    }
    let scale = f64::from(1u32 << f.mantissa_bits);
    let value = if exponent == 0 {
        mantissa / scale * 2f64.powi(1 - f.bias)
    } else {
        (1.0 + mantissa / scale) * 2f64.powi(exponent - f.bias)
    };
    sign * value
}

/// The float16 bits of `v`, which must be a float16 value (every minifloat value is).
fn f16_bits(v: f64) -> u16 {
    let sign = if v.is_sign_negative() { 0x8000 } else { 0 };
    if v.is_nan() {
        return sign | 0x7E00;
    }
    let a = v.abs();
    if a.is_infinite() {
        return sign | 0x7C00;
    }
    if a == 0.0 {
        return sign;
    }
    let exponent = a.log2().floor() as i32;
    if exponent < -14 {
        // A subnormal: a multiple of 2^-24.
        return sign | (a * 2f64.powi(24)) as u16;
    }
    let mantissa = ((a / 2f64.powi(exponent) - 1.0) * 1024.0) as u16;
    sign | (((exponent + 15) as u16) << 10) | mantissa
}

/// The float16 bits of every code of a minifloat, indexed by code.
fn f16_table(f: &Minifloat) -> Vec<u16> {
    let codes = 1u16 << (1 + f.exponent_bits + f.mantissa_bits);
    if f.nan == NanCodes::Ieee {
        // e5m2 is float16's top byte, NaN payloads included.
        return (0..codes).map(|c| c << 8).collect();
    }
    (0..codes)
        .map(|c| f16_bits(minifloat_value(f, c as u8)))
        .collect()
}

/// `count` values of narrow `elem` stored in `packed` (ONNX's layout), as the native-endian
/// bytes of their carrier. `packed` must hold at least `packed_len(elem, count)` bytes.
pub fn decode(elem: ElemType, packed: &[u8], count: usize) -> Result<Vec<u8>, String> {
    let needed = packed_len(elem, count);
    if packed.len() < needed {
        return Err(format!(
            "{count} {} values need {needed} bytes, {} given",
            elem.onnx_name(),
            packed.len()
        ));
    }
    let codes = codes(elem, packed, count);
    match (elem, minifloat(elem)) {
        (ElemType::Int4, _) => Ok(codes
            .iter()
            .map(|&c| (((c << 4) as i8) >> 4) as u8)
            .collect()),
        (ElemType::Uint4, _) => Ok(codes),
        (_, Some(f)) => {
            let table = f16_table(&f);
            Ok(codes
                .iter()
                .flat_map(|&c| table[usize::from(c)].to_ne_bytes())
                .collect())
        }
        _ => Err(format!("{} is not a narrow type", elem.onnx_name())),
    }
}

/// A carrier value that the narrow type does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unheld {
    pub index: usize,
    /// The value, as written in messages.
    pub value: String,
}

/// The code of carrier float16 `bits` in minifloat `f` (`reverse`: value bits to code).
fn minifloat_code(f: &Minifloat, reverse: &HashMap<u16, u8>, bits: u16) -> Option<u8> {
    let negative = bits & 0x8000 != 0;
    let nan = bits & 0x7C00 == 0x7C00 && bits & 0x03FF != 0;
    let width = 1 + f.exponent_bits + f.mantissa_bits;
    let sign = if negative { 1u8 << (width - 1) } else { 0 };
    match f.nan {
        _ if !nan => reverse.get(&bits).copied().or_else(|| {
            // FNUZ types have one zero: -0 is +0 there (0x80 is their NaN).
            (f.nan == NanCodes::NegativeZero && bits == 0x8000).then_some(0)
        }),
        NanCodes::AllOnes => Some(sign | ((1u8 << (width - 1)) - 1)),
        // e5m2 is float16's top byte: a NaN whose low byte is zero keeps its payload.
        NanCodes::Ieee if bits & 0xFF == 0 => Some((bits >> 8) as u8),
        NanCodes::Ieee => Some(sign | 0x7F),
        NanCodes::NegativeZero => Some(0x80),
        NanCodes::None => None,
    }
}

/// Carrier values (native-endian bytes, `count` of them) in narrow `elem`'s ONNX layout.
/// Fails on the first value the type does not hold.
pub fn encode(elem: ElemType, carrier_bytes: &[u8], count: usize) -> Result<Vec<u8>, Unheld> {
    let item = carrier(elem).map_or(1, |d| d.size_in_bytes());
    if carrier_bytes.len() < count * item {
        return Err(Unheld {
            index: carrier_bytes.len() / item,
            value: format!("nothing: {count} values expected",),
        });
    }
    let codes: Vec<u8> = match (elem, minifloat(elem)) {
        (ElemType::Int4 | ElemType::Uint4, _) => {
            let (low, high) = if elem == ElemType::Int4 {
                (-8, 7)
            } else {
                (0, 15)
            };
            carrier_bytes[..count]
                .iter()
                .enumerate()
                .map(|(index, &b)| {
                    let v = if elem == ElemType::Int4 {
                        i32::from(b as i8)
                    } else {
                        i32::from(b)
                    };
                    if (low..=high).contains(&v) {
                        Ok((v & 0x0F) as u8)
                    } else {
                        Err(Unheld {
                            index,
                            value: v.to_string(),
                        })
                    }
                })
                .collect::<Result<_, _>>()?
        }
        (_, Some(f)) => {
            let table = f16_table(&f);
            let reverse: HashMap<u16, u8> = table
                .iter()
                .enumerate()
                .filter(|(code, _)| !minifloat_value(&f, *code as u8).is_nan())
                .map(|(code, &bits)| (bits, code as u8))
                .collect();
            carrier_bytes
                .chunks_exact(2)
                .take(count)
                .enumerate()
                .map(|(index, pair)| {
                    let bits = u16::from_ne_bytes([pair[0], pair[1]]);
                    minifloat_code(&f, &reverse, bits).ok_or_else(|| Unheld {
                        index,
                        value: format!("float16 bits {bits:#06x}"),
                    })
                })
                .collect::<Result<_, _>>()?
        }
        _ => {
            return Err(Unheld {
                index: 0,
                value: format!("{} is not a narrow type", elem.onnx_name()),
            })
        }
    };
    Ok(pack(elem, codes))
}

/// Codes in ONNX's layout: two per byte, low nibble first, for the 4-bit types.
fn pack(elem: ElemType, codes: Vec<u8>) -> Vec<u8> {
    if !four_bit(elem) {
        return codes;
    }
    codes
        .chunks(2)
        .map(|pair| pair[0] | pair.get(1).map_or(0, |high| high << 4))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOATS: [ElemType; 5] = [
        ElemType::Float8E4M3FN,
        ElemType::Float8E4M3FNUZ,
        ElemType::Float8E5M2,
        ElemType::Float8E5M2FNUZ,
        ElemType::Float4E2M1,
    ];

    fn f16_value(bits: u16) -> f64 {
        let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
        let exponent = i32::from((bits >> 10) & 0x1F);
        let mantissa = f64::from(bits & 0x3FF);
        match exponent {
            0 => sign * mantissa * 2f64.powi(-24),
            31 if mantissa == 0.0 => sign * f64::INFINITY,
            31 => f64::NAN,
            e => sign * (1.0 + mantissa / 1024.0) * 2f64.powi(e - 15),
        }
    }

    fn carried(elem: ElemType, code: u8) -> u16 {
        let bytes = decode(elem, &[code], 1).unwrap();
        u16::from_ne_bytes([bytes[0], bytes[1]])
    }

    #[test]
    fn every_float_code_is_carried_exactly_and_encodes_back() {
        for elem in FLOATS {
            let f = minifloat(elem).unwrap();
            let codes = if four_bit(elem) { 16 } else { 256 };
            for code in 0..codes {
                let code = code as u8;
                let exact = minifloat_value(&f, code);
                let bits = carried(elem, code);
                let value = f16_value(bits);
                assert!(
                    value == exact || (value.is_nan() && exact.is_nan()),
                    "{elem:?} code {code:#04x}: {exact} carried as {value}"
                );
                let back = encode(elem, &bits.to_ne_bytes(), 1).unwrap();
                // e4m3fn's two NaNs and e5m2's six keep their code; the FNUZ NaN is 0x80.
                assert_eq!(back, vec![code], "{elem:?} code {code:#04x}");
            }
        }
    }

    #[test]
    fn known_float8_values() {
        let value = |elem, code| f16_value(carried(elem, code));
        assert_eq!(value(ElemType::Float8E4M3FN, 0x7E), 448.0);
        assert_eq!(value(ElemType::Float8E4M3FN, 0x01), 2f64.powi(-9));
        assert!(value(ElemType::Float8E4M3FN, 0xFF).is_nan());
        assert_eq!(value(ElemType::Float8E4M3FNUZ, 0x7F), 240.0);
        assert!(value(ElemType::Float8E4M3FNUZ, 0x80).is_nan());
        assert_eq!(value(ElemType::Float8E5M2, 0x7B), 57344.0);
        assert_eq!(value(ElemType::Float8E5M2, 0xFC), f64::NEG_INFINITY);
        assert_eq!(value(ElemType::Float8E5M2FNUZ, 0x01), 2f64.powi(-17));
        assert_eq!(value(ElemType::Float8E5M2FNUZ, 0x7F), 57344.0);
        let f4: Vec<f64> = (0..8).map(|c| value(ElemType::Float4E2M1, c)).collect();
        assert_eq!(f4, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(value(ElemType::Float4E2M1, 0x0F), -6.0);
    }

    #[test]
    fn every_four_bit_integer_round_trips_with_odd_counts() {
        for (elem, values) in [
            (ElemType::Int4, (-8..=7).collect::<Vec<i32>>()),
            (ElemType::Uint4, (0..=15).collect()),
        ] {
            for count in [0, 1, 2, 3, 15, 16] {
                let carried: Vec<u8> = (0..count).map(|i| values[i % values.len()] as u8).collect();
                let packed = encode(elem, &carried, count).unwrap();
                assert_eq!(packed.len(), packed_len(elem, count));
                assert_eq!(decode(elem, &packed, count).unwrap(), carried, "{elem:?}");
            }
        }
    }

    #[test]
    fn four_bit_packing_is_low_nibble_first_with_a_zero_pad() {
        let carried = [1u8, (-2i8) as u8, 7];
        assert_eq!(
            encode(ElemType::Int4, &carried, 3).unwrap(),
            vec![0xE1, 0x07]
        );
        assert_eq!(
            decode(ElemType::Int4, &[0xE1, 0xF7], 3).unwrap(),
            carried.to_vec()
        );
        let twos: Vec<u8> = [1.0f64, -6.0, 0.5]
            .iter()
            .flat_map(|&v| f16_bits(v).to_ne_bytes())
            .collect();
        assert_eq!(
            encode(ElemType::Float4E2M1, &twos, 3).unwrap(),
            vec![0xF2, 0x01]
        );
    }

    #[test]
    fn values_outside_the_type_are_refused() {
        let unheld = encode(ElemType::Int4, &[3, 8], 2).unwrap_err();
        assert_eq!(unheld.index, 1);
        assert_eq!(unheld.value, "8");
        assert!(encode(ElemType::Uint4, &[(-1i8) as u8], 1).is_err());
        // 449 is no e4m3fn value; inf is none either (e4m3fn has no infinity).
        for v in [449.0, f64::INFINITY, 0.1] {
            let bits = f16_bits(v).to_ne_bytes();
            assert!(encode(ElemType::Float8E4M3FN, &bits, 1).is_err(), "{v}");
        }
        assert!(encode(ElemType::Float4E2M1, &f16_bits(f64::NAN).to_ne_bytes(), 1).is_err());
    }

    #[test]
    fn nan_and_negative_zero_take_each_types_codes() {
        let code = |elem, v: f64| encode(elem, &f16_bits(v).to_ne_bytes(), 1).unwrap()[0];
        assert_eq!(code(ElemType::Float8E4M3FN, f64::NAN), 0x7F);
        assert_eq!(code(ElemType::Float8E4M3FN, -f64::NAN), 0xFF);
        assert_eq!(code(ElemType::Float8E4M3FNUZ, -f64::NAN), 0x80);
        assert_eq!(code(ElemType::Float8E5M2, f64::NAN), 0x7E);
        assert_eq!(code(ElemType::Float8E4M3FN, -0.0), 0x80);
        assert_eq!(code(ElemType::Float8E4M3FNUZ, -0.0), 0x00);
        assert_eq!(code(ElemType::Float8E5M2FNUZ, -0.0), 0x00);
    }

    #[test]
    fn short_input_is_an_error() {
        assert!(decode(ElemType::Int4, &[0x11], 3).is_err());
        assert!(decode(ElemType::Float8E5M2, &[0x11], 2).is_err());
    }
}
