//! The loop the three cells share: each direction's input projection in one matmul, then the
//! cell stepped over time, with `sequence_lens` and `layout` applied around it.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::activation::Activation;
use super::{columns, gates, gru, lstm, rnn, Cell, Config, Direction, Inputs};
use crate::table::consts::{scalar, zeros};
use crate::table::lower::float32;
use crate::{Lower, OpError, Result};

/// The recurrent layer: `[Y, Y_h, Y_c]` (absent outputs get a placeholder the EP drops).
pub(super) fn recurrent(cx: &mut Lower, cfg: &Config, mut inputs: Inputs) -> Result<Vec<Array>> {
    let s = cx.stream();
    let out_dtype = inputs.x.dtype();
    if inputs.x.ndim() != 3 {
        return Err(OpError::new(format!(
            "X must have rank 3, not {}",
            inputs.x.ndim()
        )));
    }
    if cfg.batch_major {
        // [batch, seq, input] to the sequence-major form the steps slice.
        inputs.x = ops::transpose(&inputs.x, &[1, 0, 2], s)?;
        for state in [&mut inputs.h0, &mut inputs.c0].into_iter().flatten() {
            *state = ops::transpose(state, &[1, 0, 2], s)?;
        }
    }
    let dims = inputs.x.shape();
    let (steps, batch, input_size) = (dims[0], dims[1], dims[2]);
    let (dirs, hidden, width) = (
        cfg.reverse.len() as i64,
        cfg.hidden,
        cfg.cell.gates() * cfg.hidden,
    );
    check_shapes(&inputs, dirs, batch, input_size, hidden, width)?;
    if let Some(lens) = &inputs.lens {
        check_lengths(cx, lens, steps)?;
    }
    let want = |i: usize| cx.node().output_present(i);
    if steps == 0 || batch == 0 {
        // No step runs: empty Y, zero states (ORT's CPU EP gives zeros for a zero length).
        let y = zeros(&[steps, dirs, batch, hidden], out_dtype, s)?;
        let state = zeros(&[dirs, batch, hidden], out_dtype, s)?;
        return finish(cfg, y, state.clone(), state, s);
    }
    let x2d = ops::reshape(&float32(&inputs.x, s)?, &[steps * batch, input_size], s)?;
    let lens = match &inputs.lens {
        Some(l) => Some(ops::reshape(
            &ops::astype(l, Dtype::I32, s)?,
            &[batch, 1],
            s,
        )?),
        None => None,
    };
    let per_direction = cfg.cell.default_activations().len();
    let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &reverse) in cfg.reverse.iter().enumerate() {
        let dir = prepare_direction(cfg, d as i64, &x2d, steps, batch, &inputs, s)?;
        let acts = &cfg.activations[d * per_direction..(d + 1) * per_direction];
        let (outputs, h, c) = run_direction(cfg, acts, &dir, reverse, lens.as_ref(), s)?;
        if want(0) {
            ys.push(ops::stack(&outputs, 0, s)?);
        }
        hs.push(h);
        cs.push(c);
    }
    let mut y_h = ops::stack(&hs, 0, s)?;
    let mut y_c = ops::stack(&cs, 0, s)?;
    if let Some(lens) = &lens {
        // A zero-length entry ends with zero states, not its initial ones.
        let started = ops::greater(lens, &scalar(0.0, Dtype::I32, s)?, s)?;
        let zero = scalar(0.0, Dtype::F32, s)?;
        y_h = ops::where_(&started, &y_h, &zero, s)?;
        y_c = ops::where_(&started, &y_c, &zero, s)?;
    }
    let narrow = |a: &Array| -> Result<Array> { Ok(ops::astype(a, out_dtype, s)?) };
    let y = if want(0) {
        narrow(&ops::stack(&ys, 1, s)?)?
    } else {
        y_h.clone() // the EP drops an absent output
    };
    finish(cfg, y, narrow(&y_h)?, narrow(&y_c)?, s)
}

/// `a[index]` along the first axis, that axis dropped.
fn row(a: &Array, index: i64, s: &Stream) -> Result<Array> {
    let dims = a.shape();
    let mut start = vec![0i32; dims.len()];
    let mut stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
    start[0] = index as i32;
    stop[0] = index as i32 + 1;
    let step = vec![1i32; dims.len()];
    let part = ops::slice(a, &start, &stop, &step, s)?;
    Ok(ops::reshape(&part, &dims[1..], s)?)
}

/// The biases folded into the projection: `Wb + Rb`, except the GRU hidden gate's `Rb` under
/// `linear_before_reset` (it is multiplied by the reset gate), returned separately.
fn fold_bias(cfg: &Config, b: &Array, s: &Stream) -> Result<(Array, Option<Array>)> {
    let width = cfg.cell.gates() * cfg.hidden;
    let wb = columns(b, 0, width, s)?;
    let rb = columns(b, width, 2 * width, s)?;
    if cfg.cell == Cell::Gru && cfg.linear_before_reset {
        let h = cfg.hidden;
        let zr = ops::add(&columns(&wb, 0, 2 * h, s)?, &columns(&rb, 0, 2 * h, s)?, s)?;
        let folded = ops::concatenate(&[zr, columns(&wb, 2 * h, 3 * h, s)?], 0, s)?;
        return Ok((folded, Some(columns(&rb, 2 * h, 3 * h, s)?)));
    }
    Ok((ops::add(&wb, &rb, s)?, None))
}

fn prepare_direction(
    cfg: &Config,
    d: i64,
    x2d: &Array,
    steps: i64,
    batch: i64,
    inputs: &Inputs,
    s: &Stream,
) -> Result<Direction> {
    let width = cfg.cell.gates() * cfg.hidden;
    let w_t = ops::transpose(&float32(&row(&inputs.w, d, s)?, s)?, &[1, 0], s)?;
    let input_size = w_t.shape()[0];
    // One matmul for every step; a sum over an empty input axis is zeros, without a kernel over
    // zero-size operands.
    let mut projected = if input_size == 0 {
        zeros(&[steps * batch, width], Dtype::F32, s)?
    } else {
        ops::matmul(x2d, &w_t, s)?
    };
    let mut recurrent_bias_h = None;
    if let Some(b) = &inputs.b {
        let (folded, rb_h) = fold_bias(cfg, &float32(&row(b, d, s)?, s)?, s)?;
        projected = ops::add(&projected, &folded, s)?;
        recurrent_bias_h = rb_h;
    }
    let projected = ops::reshape(&projected, &[steps, batch, width], s)?;
    let cuts: Vec<i32> = (1..steps as i32).collect();
    let projected = ops::split_at(&projected, &cuts, 0, s)?
        .iter()
        .map(|p| Ok(ops::reshape(p, &[batch, width], s)?))
        .collect::<Result<Vec<_>>>()?;
    let recurrent_t = ops::transpose(&float32(&row(&inputs.r, d, s)?, s)?, &[1, 0], s)?;
    let recurrent_zr_h_t = match cfg.cell {
        Cell::Gru => Some((
            columns(&recurrent_t, 0, 2 * cfg.hidden, s)?,
            columns(&recurrent_t, 2 * cfg.hidden, 3 * cfg.hidden, s)?,
        )),
        _ => None,
    };
    let peepholes = match &inputs.p {
        Some(p) => {
            let p = float32(&row(p, d, s)?, s)?;
            let parts = gates(&p, 3, cfg.hidden, s)?;
            let [i, o, f]: [Array; 3] = parts
                .try_into()
                .map_err(|_| OpError::new("P does not split into three gates"))?;
            Some([i, o, f])
        }
        None => None,
    };
    let state = |given: Option<&Array>| -> Result<Array> {
        match given {
            Some(a) => float32(&row(a, d, s)?, s),
            None => zeros(&[batch, cfg.hidden], Dtype::F32, s),
        }
    };
    Ok(Direction {
        projected,
        recurrent_t,
        recurrent_zr_h_t,
        recurrent_bias_h,
        peepholes,
        h0: state(inputs.h0.as_ref())?,
        c0: state(inputs.c0.as_ref())?,
    })
}

/// One step of the cell: the new hidden state, and the new cell state (LSTM; else `c`).
fn step(
    cfg: &Config,
    acts: &[Activation],
    dir: &Direction,
    projected: &Array,
    h: &Array,
    c: &Array,
    s: &Stream,
) -> Result<(Array, Array)> {
    match cfg.cell {
        Cell::Rnn => Ok((rnn::step(cfg, acts, dir, projected, h, s)?, c.clone())),
        Cell::Gru => Ok((gru::step(cfg, acts, dir, projected, h, s)?, c.clone())),
        Cell::Lstm => lstm::step(cfg, acts, dir, projected, h, c, s),
    }
}

/// Runs one direction over every step: the per-step outputs (in time order) and the final
/// hidden and cell states.
fn run_direction(
    cfg: &Config,
    acts: &[Activation],
    dir: &Direction,
    reverse: bool,
    lens: Option<&Array>,
    s: &Stream,
) -> Result<(Vec<Array>, Array, Array)> {
    let steps = dir.projected.len();
    let zero = scalar(0.0, Dtype::F32, s)?;
    let (mut h, mut c) = (dir.h0.clone(), dir.c0.clone());
    let mut outputs: Vec<Option<Array>> = vec![None; steps];
    let order: Vec<usize> = if reverse {
        (0..steps).rev().collect()
    } else {
        (0..steps).collect()
    };
    for t in order {
        let (h_new, c_new) = step(cfg, acts, dir, &dir.projected[t], &h, &c, s)?;
        match lens {
            // Past its length an entry keeps its state (so a reverse pass starts at its own
            // last step) and outputs zeros.
            Some(lens) => {
                let valid = ops::greater(lens, &scalar(t as f64, Dtype::I32, s)?, s)?;
                outputs[t] = Some(ops::where_(&valid, &h_new, &zero, s)?);
                h = ops::where_(&valid, &h_new, &h, s)?;
                if cfg.cell == Cell::Lstm {
                    c = ops::where_(&valid, &c_new, &c, s)?;
                }
            }
            None => {
                outputs[t] = Some(h_new.clone());
                h = h_new;
                c = c_new;
            }
        }
    }
    let outputs = outputs
        .into_iter()
        .map(|o| o.ok_or_else(|| OpError::new("a time step was not computed")))
        .collect::<Result<Vec<_>>>()?;
    Ok((outputs, h, c))
}

/// `[Y, Y_h, Y_c]` in the node's layout.
fn finish(cfg: &Config, y: Array, y_h: Array, y_c: Array, s: &Stream) -> Result<Vec<Array>> {
    if !cfg.batch_major {
        return Ok(vec![y, y_h, y_c]);
    }
    let states = |a: &Array| -> Result<Array> { Ok(ops::transpose(a, &[1, 0, 2], s)?) };
    let y = if y.ndim() == 4 {
        ops::transpose(&y, &[2, 0, 1, 3], s)?
    } else {
        y
    };
    Ok(vec![y, states(&y_h)?, states(&y_c)?])
}

/// ORT's CPU EP fails the run on a length outside `[0, seq_length]`; the steps themselves
/// stay safe for any length (each only compares against the step index).
fn check_lengths(cx: &mut Lower, lens: &Array, steps: i64) -> Result<()> {
    cx.require_in_range(
        lens,
        0,
        steps,
        format!("invalid sequence_lens: every length must lie in [0, {steps}] (seq_length)"),
    )
}

fn expect_shape(what: &str, a: &Array, want: &[i64]) -> Result<()> {
    if a.shape() != want {
        return Err(OpError::new(format!(
            "{what} has shape {:?}, expected {want:?}",
            a.shape()
        )));
    }
    Ok(())
}

fn check_shapes(
    inputs: &Inputs,
    dirs: i64,
    batch: i64,
    input_size: i64,
    hidden: i64,
    width: i64,
) -> Result<()> {
    expect_shape("W", &inputs.w, &[dirs, width, input_size])?;
    expect_shape("R", &inputs.r, &[dirs, width, hidden])?;
    if let Some(b) = &inputs.b {
        expect_shape("B", b, &[dirs, 2 * width])?;
    }
    if let Some(lens) = &inputs.lens {
        expect_shape("sequence_lens", lens, &[batch])?;
    }
    for (name, state) in [("initial_h", &inputs.h0), ("initial_c", &inputs.c0)] {
        if let Some(state) = state {
            expect_shape(name, state, &[dirs, batch, hidden])?;
        }
    }
    if let Some(p) = &inputs.p {
        expect_shape("P", p, &[dirs, 3 * hidden])?;
    }
    Ok(())
}
