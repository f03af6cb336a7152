//! Feature preprocessing: Scaler, Normalizer, Binarizer, Imputer, ArrayFeatureExtractor,
//! FeatureVectorizer, OneHotEncoder and LabelEncoder over numbers.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::{scalar, scalar_like};
use crate::table::lower::float32;
use crate::{onnx_op, Lower, Node, OpError, Result, TensorValue, Verdict};

/// ORT's channel count of a per-feature attribute: `dims[0]` of a 1-d input, else `dims[1]`.
fn channels(x: &Array) -> i64 {
    let shape = x.shape();
    shape.get(1).or(shape.first()).copied().unwrap_or(1)
}

/// A per-feature attribute (`offset`, `scale`, imputed values) as an array of `x`'s shape: one
/// value everywhere, or ORT's element `flat index % channels` of a list of `channels` values,
/// which on a rank-3 or higher input is not the last axis's position (as in ORT). A list of
/// another length is an error unless `first_otherwise` (Imputer's kernel then uses its first
/// value).
fn per_feature<T: mlx_kernels::Element>(
    values: &[T],
    x: &Array,
    what: &str,
    first_otherwise: bool,
    s: &Stream,
) -> Result<Array> {
    let count = channels(x);
    match values.len() {
        0 => Err(OpError::new(format!("{what} is empty"))),
        n if n as i64 == count && n > 1 => {
            let values = Array::from_slice(values, &[n as i64])?;
            let flat = ops::arange(0.0, x.size() as f64, 1.0, Dtype::I32, s)?;
            let position = ops::remainder(&flat, &scalar(n as f64, Dtype::I32, s)?, s)?;
            let spread = ops::take(&values, &position, 0, s)?;
            Ok(ops::reshape(&spread, &x.shape(), s)?)
        }
        n if n == 1 || first_otherwise => Ok(Array::scalar(values[0])?),
        n => Err(OpError::new(format!(
            "{what} has {n} values for an input of {count} channels: give 1 or {count}"
        ))),
    }
}

/// `(x - offset) · scale` in float32, each of offset and scale one value or one per column.
#[onnx_op(
    domain = "ai.onnx.ml", op = "Scaler", precision = Float32, since = 1, types(T = F32 | I64 | I32, F = F32),
    inputs(X: T), outputs(Y: F), shape = ShapeKeyed, claim = scaler_claim,
    declines = "offset and scale of different lengths (ORT's kernel refuses them when the session starts)"
)]
fn scaler(
    cx: &mut Lower,
    x: Array,
    #[attr] offset: Option<Vec<f32>>,
    #[attr] scale: Option<Vec<f32>>,
) -> Result<Array> {
    let s = cx.stream();
    let x = float32(&x, s)?;
    let offset = per_feature(&offset.unwrap_or_default(), &x, "offset", false, s)?;
    let scale = per_feature(&scale.unwrap_or_default(), &x, "scale", false, s)?;
    Ok(ops::multiply(&ops::subtract(&x, &offset, s)?, &scale, s)?)
}

fn scaler_claim(node: &Node) -> Verdict {
    let offset = node.attr_as::<Vec<f32>>("offset").map_or(0, |v| v.len());
    let scale = node.attr_as::<Vec<f32>>("scale").map_or(0, |v| v.len());
    if offset != scale || offset == 0 {
        return Verdict::decline(format!(
            "offset has {offset} values and scale {scale}: ORT's kernel needs equal, non-zero counts"
        ));
    }
    Verdict::Claim
}

/// Each row (the last axis) divided by its maximum (`MAX`, NaN skipped), its sum of magnitudes
/// (`L1`) or its Euclidean length (`L2`), in float32 as ORT's kernel computes it: magnitudes
/// and squares in the input's type (so integers wrap as there), sums in float32, and `L2` as
/// `√(x²/Σx²)` signed by `x < 0`; a row whose maximum or sum is 0 is left as it is.
#[onnx_op(
    domain = "ai.onnx.ml", op = "Normalizer", precision = Float32, since = 1, types(T = F32 | I64 | I32, F = F32),
    inputs(X: T), outputs(Y: F), shape = Shapeless, claim = normalizer_claim,
    declines = "norm other than MAX, L1 and L2; input of rank above 2"
)]
fn normalizer(cx: &mut Lower, x: Array, #[attr] norm: Option<String>) -> Result<Array> {
    let s = cx.stream();
    let last = x.ndim() as i32 - 1;
    let values = float32(&x, s)?;
    let row_sum = |a: &Array| -> Result<Array> { Ok(ops::sum(&float32(a, s)?, &[last], true, s)?) };
    let zero = scalar_like(0.0, &values, s)?;
    let (divisor, normalised) = match norm.as_deref().unwrap_or("MAX") {
        "MAX" => {
            let lowest = scalar_like(f64::from(f32::MIN), &values, s)?;
            let numbers = ops::where_(&ops::isnan(&values, s)?, &lowest, &values, s)?;
            let max = ops::maximum(&ops::max(&numbers, &[last], true, s)?, &lowest, s)?;
            (max.clone(), ops::divide(&values, &max, s)?)
        }
        "L1" => {
            let sum = row_sum(&ops::abs(&x, s)?)?;
            (sum.clone(), ops::divide(&values, &sum, s)?)
        }
        "L2" => {
            let sum = row_sum(&ops::square(&x, s)?)?;
            let share = ops::sqrt(
                &ops::divide(&float32(&ops::square(&x, s)?, s)?, &sum, s)?,
                s,
            )?;
            let negative = ops::less(&values, &zero, s)?;
            let signed = ops::where_(&negative, &ops::negative(&share, s)?, &share, s)?;
            (sum, signed)
        }
        other => return Err(OpError::new(format!("norm '{other}' is not MAX, L1 or L2"))),
    };
    let unchanged = ops::equal(&divisor, &zero, s)?;
    Ok(ops::where_(&unchanged, &values, &normalised, s)?)
}

fn normalizer_claim(node: &Node) -> Verdict {
    let norm = node.attr_or("norm", "MAX".to_string());
    if !["MAX", "L1", "L2"].contains(&norm.as_str()) {
        return Verdict::decline(format!("norm '{norm}' is not MAX, L1 or L2"));
    }
    match node.input_shape(0) {
        Some(shape) if shape.len() > 2 => {
            Verdict::decline(format!("a {}-d input (ORT takes 1-d or 2-d)", shape.len()))
        }
        _ => Verdict::Claim,
    }
}

/// 1 where `x` exceeds `threshold`, else 0, in `x`'s type. ORT's kernel fails the run on a
/// NaN input, and so does this lowering.
#[onnx_op(
    domain = "ai.onnx.ml", op = "Binarizer", precision = Float32, since = 1, types(T = F32), inputs(X: T), outputs(Y: T),
    shape = Shapeless
)]
fn binarizer(cx: &mut Lower, x: Array, #[attr] threshold: Option<f32>) -> Result<Array> {
    let s = cx.stream();
    let threshold = scalar_like(f64::from(threshold.unwrap_or(0.0)), &x, s)?;
    let above = ops::greater(&x, &threshold, s)?;
    let numbers = ops::logical_not(&ops::isnan(&x, s)?, s)?;
    cx.require(
        &numbers,
        "an input value is NaN, which ORT's Binarizer refuses",
    )?;
    Ok(ops::astype(&above, x.dtype(), s)?)
}

/// Every element equal to the replaced value (NaN matching NaN) becomes the imputed value of
/// its column.
#[onnx_op(
    domain = "ai.onnx.ml", op = "Imputer", precision = Float32, since = 1, types(T = F32 | I64), inputs(X: T), outputs(Y: T),
    shape = ShapeKeyed, claim = imputer_claim,
    declines = "imputed values of the other type than the input's"
)]
fn imputer(
    cx: &mut Lower,
    x: Array,
    #[attr] imputed_value_floats: Option<Vec<f32>>,
    #[attr] imputed_value_int64s: Option<Vec<i64>>,
    #[attr] replaced_value_float: Option<f32>,
    #[attr] replaced_value_int64: Option<i64>,
) -> Result<Array> {
    let s = cx.stream();
    let (imputed, replaced) = if x.dtype() == Dtype::F32 {
        let values = imputed_value_floats.unwrap_or_default();
        let imputed = per_feature(&values, &x, "imputed_value_floats", true, s)?;
        let replaced = replaced_value_float.unwrap_or(0.0);
        let matches = if replaced.is_nan() {
            ops::isnan(&x, s)?
        } else {
            ops::equal(&x, &scalar_like(f64::from(replaced), &x, s)?, s)?
        };
        (imputed, matches)
    } else {
        let values = imputed_value_int64s.unwrap_or_default();
        let imputed = per_feature(&values, &x, "imputed_value_int64s", true, s)?;
        let replaced = Array::scalar(replaced_value_int64.unwrap_or(0))?;
        (imputed, ops::equal(&x, &replaced, s)?)
    };
    Ok(ops::where_(&replaced, &imputed, &x, s)?)
}

fn imputer_claim(node: &Node) -> Verdict {
    let floats = node
        .attr_as::<Vec<f32>>("imputed_value_floats")
        .is_some_and(|v| !v.is_empty());
    let ints = node
        .attr_as::<Vec<i64>>("imputed_value_int64s")
        .is_some_and(|v| !v.is_empty());
    let float_input = node.input_type(0) == Some(crate::ElemType::Float);
    if (float_input && !floats) || (!float_input && !ints) {
        return Verdict::decline("no imputed values of the input's type");
    }
    Verdict::Claim
}

/// The elements of `X` at `Y`'s positions along the last axis (a 1-d `X` is one row).
#[onnx_op(
    domain = "ai.onnx.ml", op = "ArrayFeatureExtractor", precision = Float32, since = 1, types(T = F32 | I64 | I32, I = I64),
    inputs(X: T, Y: I), outputs(Z: T), shape = ShapeKeyed
)]
fn array_feature_extractor(cx: &mut Lower, x: Array, indices: Array) -> Result<Array> {
    let s = cx.stream();
    let x = if x.ndim() == 1 {
        ops::expand_dims(&x, &[0], s)?
    } else {
        x
    };
    let columns = x.shape().last().copied().unwrap_or(0);
    let indices = ops::reshape(&indices, &[-1], s)?;
    if indices.size() == 0 {
        return Err(OpError::new("no indices: ORT's kernel needs at least one"));
    }
    cx.require_in_range(
        &indices,
        0,
        columns - 1,
        format!(
            "an index is out of range: it must lie in [0, {}]",
            columns - 1
        ),
    )?;
    Ok(ops::take(&x, &indices, x.ndim() as i32 - 1, s)?)
}

/// The inputs' rows laid side by side, each cut or zero-padded to its `inputdimensions`
/// columns, in float32.
#[onnx_op(
    domain = "ai.onnx.ml", op = "FeatureVectorizer", precision = Float32, since = 1, types(T = F32 | I64 | I32, F = F32),
    inputs(X...: T), outputs(Y: F), shape = ShapeKeyed
)]
fn feature_vectorizer(
    cx: &mut Lower,
    inputs: Vec<Array>,
    #[attr] inputdimensions: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let dimensions = inputdimensions.unwrap_or_default();
    if dimensions.len() != inputs.len() {
        return Err(OpError::new(format!(
            "inputdimensions has {} entries for {} inputs",
            dimensions.len(),
            inputs.len()
        )));
    }
    // A 1-d input is one row; any other its first axis's rows, the rest flattened into each.
    if let Some(index) = inputs.iter().position(|x| x.ndim() == 0) {
        return Err(OpError::new(format!(
            "input {index} must have at least 1 dimension"
        )));
    }
    let rows_of = |x: &Array| if x.ndim() == 1 { 1 } else { x.shape()[0] };
    let rows = inputs.first().map_or(1, rows_of);
    let mut parts = Vec::with_capacity(inputs.len());
    for (index, (x, &width)) in inputs.iter().zip(&dimensions).enumerate() {
        if width < 0 || rows_of(x) != rows {
            return Err(OpError::new(format!(
                "input {index} of shape {:?} with inputdimensions {width}: every input needs \
                 the same rows ({rows}) and a width of 0 or more",
                x.shape()
            )));
        }
        let x = ops::reshape(&float32(x, s)?, &[rows, -1], s)?;
        let have = x.shape()[1];
        let part = if have >= width {
            ops::slice(&x, &[0, 0], &[rows as i32, width as i32], &[1, 1], s)?
        } else {
            let pad = crate::table::consts::zeros(&[rows, width - have], Dtype::F32, s)?;
            ops::concatenate(&[x, pad], 1, s)?
        };
        parts.push(part);
    }
    Ok(ops::concatenate(&parts, 1, s)?)
}

/// One float column per category of `cats_int64s`, 1 where the input (truncated toward zero)
/// equals it; an input that is no category gives a row of zeros (`zeros` = 1) or fails the run
/// (`zeros` = 0). A category listed twice is found at its last position only, as in ORT's map.
/// A float that is NaN, infinite or past int64's range is no category: ORT's conversion makes
/// it int64's minimum, which the claim never accepts as a category.
#[onnx_op(
    domain = "ai.onnx.ml", op = "OneHotEncoder", precision = Float32, since = 1, types(T = F32 | I64, F = F32),
    inputs(X: T), outputs(Y: F), shape = ShapeKeyed, claim = one_hot_encoder_claim,
    declines = "string categories (MLX holds no strings); int64's minimum as a category"
)]
fn one_hot_encoder(
    cx: &mut Lower,
    x: Array,
    #[attr] cats_int64s: Option<Vec<i64>>,
    #[attr] cats_strings: Option<Vec<String>>,
    #[attr] zeros: Option<i64>,
) -> Result<Array> {
    let s = cx.stream();
    let _ = cats_strings;
    let categories = cats_int64s.unwrap_or_default();
    let count = categories.len() as i64;
    // Whether each category is the last with its value (a set, scanned from the end: a linear
    // search per category was minutes for a million of them).
    let mut later = std::collections::HashSet::new();
    let mut last_positions: Vec<bool> = categories.iter().rev().map(|&c| later.insert(c)).collect();
    last_positions.reverse();
    let active = Array::from_slice(&last_positions, &[count])?;
    let categories = Array::from_slice(&categories, &[count])?;
    let mut valid = None;
    if x.dtype() == Dtype::F32 {
        let bound = scalar_like(9.223_372e18, &x, s)?;
        valid = Some(ops::expand_dims(
            &ops::less(&ops::abs(&x, s)?, &bound, s)?,
            &[-1],
            s,
        )?);
    }
    let x = ops::astype(&x, Dtype::I64, s)?;
    let mut hits = ops::equal(&ops::expand_dims(&x, &[-1], s)?, &categories, s)?;
    hits = ops::logical_and(&hits, &active, s)?;
    if let Some(valid) = valid {
        hits = ops::logical_and(&hits, &valid, s)?;
    }
    if zeros.unwrap_or(1) == 0 {
        let known = any_along_last(&hits, s)?;
        cx.require(
            &known,
            "an input value is none of cats_int64s, and zeros is 0",
        )?;
    }
    Ok(ops::astype(&hits, Dtype::F32, s)?)
}

fn one_hot_encoder_claim(node: &Node) -> Verdict {
    let categories = node.attr_as::<Vec<i64>>("cats_int64s").unwrap_or_default();
    if categories.is_empty() {
        return Verdict::decline("no cats_int64s (string categories stay on ORT's CPU EP)");
    }
    if categories.contains(&i64::MIN) {
        return Verdict::decline("int64's minimum as a category (what ORT makes of NaN)");
    }
    Verdict::Claim
}

/// Whether any element along the last axis is true (nonzero).
fn any_along_last(hits: &Array, s: &Stream) -> Result<Array> {
    let last = hits.ndim() as i32 - 1;
    let count = ops::sum(&ops::astype(hits, Dtype::I32, s)?, &[last], false, s)?;
    Ok(ops::greater(&count, &scalar_like(0.0, &count, s)?, s)?)
}

/// A table of numeric keys to numeric values: each input element becomes the value of the key
/// it equals, or the default. LabelEncoder-4 matches a NaN input to a NaN key (ORT's kernel
/// compares NaN-aware there); LabelEncoder-2's `==` never matches NaN.
struct Mapping {
    keys: Array,
    values: Array,
    default: Array,
    nan_matches_nan: bool,
}

impl Mapping {
    fn apply(&self, x: &Array, s: &Stream) -> Result<Array> {
        let expanded = ops::expand_dims(x, &[-1], s)?;
        let mut hits = ops::equal(&expanded, &self.keys, s)?;
        if self.nan_matches_nan && self.keys.dtype() == Dtype::F32 {
            let both_nan =
                ops::logical_and(&ops::isnan(&expanded, s)?, &ops::isnan(&self.keys, s)?, s)?;
            hits = ops::logical_or(&hits, &both_nan, s)?;
        }
        let last = hits.ndim() as i32 - 1;
        let hits = ops::astype(&hits, Dtype::U8, s)?;
        let found = any_along_last(&hits, s)?;
        let at = ops::argmax(&hits, last, false, s)?;
        let value = ops::take(&self.values, &at, 0, s)?;
        Ok(ops::where_(&found, &value, &self.default, s)?)
    }
}

/// A LabelEncoder list given as a tensor, as int64s or as floats (the first given), 1-d.
fn numeric_list(
    tensor: Option<TensorValue>,
    ints: Option<Vec<i64>>,
    floats: Option<Vec<f32>>,
    what: &str,
    s: &Stream,
) -> Result<Array> {
    let list = match (tensor, ints, floats) {
        (Some(t), _, _) => crate::table::consts::tensor_array(&t, s)?,
        (_, Some(v), _) => Array::from_slice(&v, &[v.len() as i64])?,
        (_, _, Some(v)) => Array::from_slice(&v, &[v.len() as i64])?,
        _ => return Err(OpError::new(format!("no numeric {what}"))),
    };
    Ok(ops::reshape(&list, &[-1], s)?)
}

/// LabelEncoder-2: `keys_int64s` or `keys_floats` to `values_int64s` or `values_floats`.
#[onnx_op(
    domain = "ai.onnx.ml", op = "LabelEncoder", precision = Float32, opset = 2..=3, types(T1 = F32 | I64, T2 = F32 | I64),
    inputs(X: T1), outputs(Y: T2), shape = ShapeKeyed, claim = label_encoder_claim,
    declines = "string keys or values (MLX holds no strings); keys and values of different counts"
)]
#[allow(clippy::too_many_arguments)] // ONNX's attribute list
fn label_encoder(
    cx: &mut Lower,
    x: Array,
    #[attr] keys_int64s: Option<Vec<i64>>,
    #[attr] keys_floats: Option<Vec<f32>>,
    #[attr] keys_strings: Option<Vec<String>>,
    #[attr] values_int64s: Option<Vec<i64>>,
    #[attr] values_floats: Option<Vec<f32>>,
    #[attr] values_strings: Option<Vec<String>>,
    #[attr] default_int64: Option<i64>,
    #[attr] default_float: Option<f32>,
    #[attr] default_string: Option<String>,
) -> Result<Array> {
    let _ = (keys_strings, values_strings, default_string);
    let s = cx.stream();
    let out = cx.output_dtype(0)?;
    let keys = numeric_list(None, keys_int64s, keys_floats, "keys", s)?;
    let values = numeric_list(None, values_int64s, values_floats, "values", s)?;
    let default = match out {
        Dtype::F32 => scalar(f64::from(default_float.unwrap_or(-0.0)), out, s)?,
        _ => scalar(default_int64.unwrap_or(-1) as f64, out, s)?,
    };
    let nan_matches_nan = false;
    Mapping {
        keys,
        values,
        default,
        nan_matches_nan,
    }
    .apply(&x, s)
}

fn label_encoder_claim(node: &Node) -> Verdict {
    let keys = node
        .attr_as::<Vec<i64>>("keys_int64s")
        .map(|k| k.len())
        .or_else(|| node.attr_as::<Vec<f32>>("keys_floats").map(|k| k.len()));
    let values = node
        .attr_as::<Vec<i64>>("values_int64s")
        .map(|v| v.len())
        .or_else(|| node.attr_as::<Vec<f32>>("values_floats").map(|v| v.len()));
    match (keys, values) {
        (Some(k), Some(v)) if k == v && k > 0 => Verdict::Claim,
        (Some(k), Some(v)) => Verdict::decline(format!("{k} keys for {v} values")),
        _ => Verdict::decline("string keys or values (MLX holds no strings)"),
    }
}

/// LabelEncoder-4: the keys, values and default as tensors.
#[onnx_op(
    domain = "ai.onnx.ml", op = "LabelEncoder", precision = Float32, since = 4, types(T1 = F32 | I64, T2 = F32 | I64),
    inputs(X: T1), outputs(Y: T2), shape = ShapeKeyed, claim = label_encoder4_claim,
    declines = "keys or values other than tensors of the input's and output's numeric types"
)]
#[allow(clippy::too_many_arguments)] // ONNX's attribute list
fn label_encoder4(
    cx: &mut Lower,
    x: Array,
    #[attr] keys_tensor: Option<TensorValue>,
    #[attr] values_tensor: Option<TensorValue>,
    #[attr] default_tensor: Option<TensorValue>,
    #[attr] keys_int64s: Option<Vec<i64>>,
    #[attr] keys_floats: Option<Vec<f32>>,
    #[attr] keys_strings: Option<Vec<String>>,
    #[attr] values_int64s: Option<Vec<i64>>,
    #[attr] values_floats: Option<Vec<f32>>,
    #[attr] values_strings: Option<Vec<String>>,
    #[attr] default_int64: Option<i64>,
    #[attr] default_float: Option<f32>,
    #[attr] default_string: Option<String>,
) -> Result<Array> {
    let _ = (keys_strings, values_strings, default_string);
    let s = cx.stream();
    let out = cx.output_dtype(0)?;
    let keys = numeric_list(keys_tensor, keys_int64s, keys_floats, "keys", s)?;
    let values = numeric_list(values_tensor, values_int64s, values_floats, "values", s)?;
    let default = match default_tensor {
        Some(t) => ops::reshape(&crate::table::consts::tensor_array(&t, s)?, &[], s)?,
        None => match out {
            Dtype::F32 => scalar(f64::from(default_float.unwrap_or(-0.0)), out, s)?,
            _ => scalar(default_int64.unwrap_or(-1) as f64, out, s)?,
        },
    };
    let values = ops::astype(&values, out, s)?;
    let x = ops::astype(&x, keys.dtype(), s)?;
    let default = ops::astype(&default, out, s)?;
    let nan_matches_nan = true;
    Mapping {
        keys,
        values,
        default,
        nan_matches_nan,
    }
    .apply(&x, s)
}

fn label_encoder4_claim(node: &Node) -> Verdict {
    let key_type = node.input_type(0);
    let value_type = node.output_type(0);
    let tensor = |name: &str| node.attr_as::<TensorValue>(name);
    let keys_ok = match tensor("keys_tensor") {
        Some(t) => Some(t.elem) == key_type,
        None => {
            node.attr_as::<Vec<i64>>("keys_int64s").is_some()
                || node.attr_as::<Vec<f32>>("keys_floats").is_some()
        }
    };
    let values_ok = match tensor("values_tensor") {
        Some(t) => Some(t.elem) == value_type,
        None => {
            node.attr_as::<Vec<i64>>("values_int64s").is_some()
                || node.attr_as::<Vec<f32>>("values_floats").is_some()
        }
    };
    if !keys_ok || !values_ok {
        return Verdict::decline(
            "keys or values are strings, or not of the input's and output's types",
        );
    }
    Verdict::Claim
}
