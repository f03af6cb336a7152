//! Outputs that share their buffer with an input: ORT's shared KV cache.
//!
//! onnxruntime-genai binds an LLM's past and present KV tensors to one `OrtValue` (its
//! `past_present_share_buffer`), so a fused node receives an output buffer that *is* one of its
//! input buffers, `[B, kv_heads, max_len, head]`, of which a decode step changes a few rows.
//! Two things follow, both mechanical (no op is named here):
//!
//! - **Delta write-back**: the buffer already holds the input's bytes, so only the rows where
//!   the output differs from the input (compared bit for bit on the device) are copied out. The
//!   result is byte-identical to a full copy.
//! - **Device mirror**: the output array stays alive after the run. On the next run, when the same
//!   buffer comes back as that input and still holds what this run left in it, the mirror is fed
//!   instead of the host bytes: on MLX's CUDA backend this saves copying the whole cache to the
//!   device every token. "Still holds" is checked on probe rows: every row this run wrote plus
//!   rows spread over the buffer, compared with copies kept here. A write elsewhere between runs
//!   goes unseen: `ONNXRUNTIME_EP_MLX_KV_MIRROR=0` turns the mirror off (the delta write stays).
//!   A fed mirror leaves here, so that the run holds its only reference and MLX can write the
//!   step's rows into its buffer in place (`capture::Consumable`).

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::plan::{bytes_together, RowMask};

/// Rows spread over the buffer that are checked, besides (up to `WRITTEN_PROBES` of) the rows
/// the last run wrote.
const SPREAD_PROBES: usize = 16;
const WRITTEN_PROBES: usize = 64;

/// The mirrors of one plan's inputs, owned by the plan's thread.
pub struct Residency {
    mirror: bool,
    mirrors: Vec<Option<Mirror>>,
    /// Rows written back and rows in aliased outputs, for the session summary.
    pub rows_written: u64,
    pub rows_aliased: u64,
    pub mirror_hits: u64,
    /// Mirrors whose update was made in the fed mirror's own buffer (MLX reused it).
    pub mirrors_in_place: u64,
    /// Per input: the buffer of the mirror fed this run, if one was.
    fed_buffers: Vec<Option<usize>>,
}

/// An input's last known contents, on the device.
struct Mirror {
    address: usize,
    len: usize,
    array: Array,
    probes: Probes,
}

/// Copies of some rows of a host buffer, to tell later whether it still holds them. One
/// allocation for all the rows: a decoder keeps two mirrors a layer, each probed every token.
struct Probes {
    row_bytes: usize,
    offsets: Vec<usize>,
    /// The rows' bytes, one after another, in the order of `offsets`.
    copies: Vec<u8>,
}

impl Probes {
    fn of(buffer: &[u8], rows: impl Iterator<Item = usize>, row_bytes: usize) -> Probes {
        let offsets: Vec<usize> = rows.map(|row| row * row_bytes).collect();
        let mut copies = Vec::with_capacity(offsets.len() * row_bytes);
        for &at in &offsets {
            copies.extend_from_slice(&buffer[at..at + row_bytes]);
        }
        Probes {
            row_bytes,
            offsets,
            copies,
        }
    }

    fn still_in(&self, buffer: &[u8]) -> bool {
        let copies = self.copies.chunks_exact(self.row_bytes.max(1));
        self.offsets
            .iter()
            .zip(copies)
            .all(|(&at, copy)| buffer.get(at..at + copy.len()) == Some(copy))
    }
}

/// `rows × row_bytes` view of an array for comparisons and write-back: rows run along the
/// last axis (a 0-d or 1-D array is one row).
struct Rows {
    count: usize,
    width: usize,
}

impl Rows {
    fn of(array: &Array) -> Rows {
        let width = array.shape().last().map_or(1, |&d| d.max(1) as usize);
        Rows {
            count: array.size() / width,
            width,
        }
    }
}

impl Residency {
    /// `mirror`: whether device mirrors are kept (the `kv_mirror` setting).
    pub fn new(inputs: usize, mirror: bool) -> Residency {
        Residency {
            mirror,
            mirrors: (0..inputs).map(|_| None).collect(),
            rows_written: 0,
            rows_aliased: 0,
            mirror_hits: 0,
            mirrors_in_place: 0,
            fed_buffers: vec![None; inputs],
        }
    }

    /// The mirror of input `index` when `bytes` (the input's host buffer) still holds what the
    /// last run left in it, with the same shape and type; otherwise `None`. Either way the
    /// mirror leaves here: a run that takes it holds its only reference, so MLX may update its
    /// buffer in place (the run's write-back keeps what results as the next mirror).
    pub fn mirrored_input(
        &mut self,
        index: usize,
        bytes: &[u8],
        shape: &[i64],
        dtype: Dtype,
    ) -> Option<Array> {
        if let Some(fed) = self.fed_buffers.get_mut(index) {
            *fed = None;
        }
        let mirror = self.mirrors.get_mut(index)?.take()?;
        let same_buffer = mirror.address == bytes.as_ptr() as usize && mirror.len == bytes.len();
        let same_type = mirror.array.dtype() == dtype && mirror.array.shape() == shape;
        if !(same_buffer && same_type && mirror.probes.still_in(bytes)) {
            return None;
        }
        self.mirror_hits += 1;
        self.fed_buffers[index] = mirror.array.buffer_id();
        Some(mirror.array)
    }

    /// Forgets every mirror (after a failed run: the buffers may hold anything).
    pub fn forget(&mut self) {
        self.mirrors.iter_mut().for_each(|m| *m = None);
        self.fed_buffers.iter_mut().for_each(|b| *b = None);
    }

    /// Writes each shared output into its buffer, which is input `index`'s buffer and holds
    /// `input`'s bytes: when the node said which rows it writes in place, those rows (the
    /// others keep the buffer's bytes, as ORT's kernels leave them), otherwise the rows that
    /// differ from the input. Keeps what each buffer then holds (as the node gave it, evaluated
    /// with the run, or the output) as its input's mirror for the next run. Every array read on
    /// the host costs a device round trip (on MLX's CUDA backend, a page migration) and a
    /// decoder has two buffers a layer: rows whose values the node gave were read with the
    /// run's evaluation and are copied as they are; the others are gathered on the device into
    /// one array, read once.
    /// The written rows are known from the host copy of the masks; only outputs without one are
    /// compared on the device first (one more evaluation).
    pub fn write_back(&mut self, shared: Vec<SharedOutput>, stream: &Stream) -> Result<(), String> {
        let err = |e: mlx_kernels::Error| e.to_string();
        let mut pending = Vec::with_capacity(shared.len());
        let mut compared = Vec::new();
        for out in shared {
            let rows = Rows::of(out.output);
            let (held, changed) = match out.written {
                Some(mask) => {
                    let held = mask.held.clone();
                    let shape = out.output.shape();
                    if held.shape() != shape || held.dtype() != out.output.dtype() {
                        return Err(format!(
                            "a node gave its in-place result as {:?} {:?} for an output of {shape:?} {:?} (table bug)",
                            held.shape(),
                            held.dtype(),
                            out.output.dtype()
                        ));
                    }
                    let row_dims = &shape[..shape.len().saturating_sub(1)];
                    (
                        held,
                        Some(rows_in_mask(&mask.shape, &mask.flags, row_dims)?),
                    )
                }
                None => match out.input {
                    Some(input) => {
                        let flags = changed_rows(input, out.output, &rows, stream).map_err(err)?;
                        compared.push(flags);
                        (out.output.clone(), None)
                    }
                    // The input was this run's to consume: every row is written.
                    None => (out.output.clone(), Some((0..rows.count).collect())),
                },
            };
            pending.push((out, rows, held, changed));
        }
        let mut flags = match bytes_together(compared, stream).map_err(err)? {
            Some(all) => all.to_vec::<u8>(stream).map_err(err)?,
            None => Vec::new(),
        }
        .into_iter();
        let mut gathers = Vec::with_capacity(pending.len());
        for (out, rows, held, changed) in &mut pending {
            let changed = match changed.take() {
                Some(known) => known,
                None => flags
                    .by_ref()
                    .take(rows.count)
                    .enumerate()
                    .filter_map(|(row, f)| (f != 0).then_some(row))
                    .collect(),
            };
            // The rows' bytes as the node gave them, already on the host; otherwise the
            // output's rows (what the buffer holds there after the write) gathered on the
            // device, unless most rows changed (then the whole buffer is copied).
            let row_bytes = rows.width * held.dtype().size_in_bytes();
            let given = out
                .written
                .and_then(|w| w.values.as_ref())
                .filter(|v| v.len() == changed.len() * row_bytes);
            let source = if changed.is_empty() {
                RowSource::Nothing
            } else if let Some(given) = given {
                RowSource::Given(given)
            } else if changed.len() * 2 > rows.count {
                RowSource::Whole
            } else {
                RowSource::Gathered(gather_rows(held, rows, &changed, stream).map_err(err)?)
            };
            gathers.push((changed, source));
        }
        let gathered = gathers.iter().filter_map(|(_, source)| match source {
            RowSource::Gathered(array) => Some(array.clone()),
            _ => None,
        });
        let picked = match bytes_together(gathered, stream).map_err(err)? {
            Some(all) => all.to_bytes(stream).map_err(err)?,
            None => Vec::new(),
        };
        let mut offset = 0;
        for ((out, rows, held, _), (changed, source)) in pending.into_iter().zip(gathers) {
            let row_bytes = rows.width * held.dtype().size_in_bytes();
            let mine = match source {
                RowSource::Given(given) => Some(given),
                RowSource::Gathered(_) => {
                    let mine = &picked[offset..offset + changed.len() * row_bytes];
                    offset += mine.len();
                    Some(mine)
                }
                RowSource::Whole => {
                    held.copy_to(out.buffer, stream).map_err(err)?;
                    None
                }
                RowSource::Nothing => None,
            };
            if let Some(mine) = mine {
                for (k, &row) in changed.iter().enumerate() {
                    out.buffer[row * row_bytes..(row + 1) * row_bytes]
                        .copy_from_slice(&mine[k * row_bytes..(k + 1) * row_bytes]);
                }
            }
            self.rows_written += changed.len() as u64;
            self.rows_aliased += rows.count as u64;
            if self.mirror {
                self.keep_mirror(out.index, held, out.buffer, &changed, &rows, row_bytes);
            }
        }
        Ok(())
    }

    /// Keeps `held` as input `index`'s mirror, with copies of its probe rows from `buffer`.
    fn keep_mirror(
        &mut self,
        index: usize,
        held: Array,
        buffer: &[u8],
        changed: &[usize],
        rows: &Rows,
        row_bytes: usize,
    ) {
        let probes = Probes::of(buffer, probe_rows(changed, rows.count), row_bytes);
        if held.buffer_id().is_some() && held.buffer_id() == self.fed_buffers[index] {
            self.mirrors_in_place += 1;
        }
        if let Some(slot) = self.mirrors.get_mut(index) {
            *slot = Some(Mirror {
                address: buffer.as_ptr() as usize,
                len: buffer.len(),
                array: held,
                probes,
            });
        }
    }
}

/// Where the bytes of an output's written rows come from.
enum RowSource<'a> {
    /// None changed.
    Nothing,
    /// The node gave them (read with the run's evaluation).
    Given(&'a [u8]),
    /// Gathered on the device from the output.
    Gathered(Array),
    /// Most rows changed: the whole output is copied.
    Whole,
}

/// An output whose buffer is input `index`'s (which held `input`, unless the run consumed it),
/// and the rows its node writes in place, if it said.
pub struct SharedOutput<'a> {
    pub index: usize,
    pub input: Option<&'a Array>,
    pub output: &'a Array,
    pub written: Option<&'a RowMask>,
    pub buffer: &'a mut [u8],
}

/// The indices (row-major over `row_dims`) of the rows where `flags`, a mask of `mask_shape`
/// that broadcasts to `row_dims`, is set. Enumerates the set flags and the dims they broadcast
/// over, so the cost follows the rows written, not the rows held.
fn rows_in_mask(mask_shape: &[i64], flags: &[u8], row_dims: &[i64]) -> Result<Vec<usize>, String> {
    let rank = row_dims.len();
    if mask_shape.len() > rank {
        return Err(format!(
            "a written-rows mask of shape {mask_shape:?} has more dims than rows {row_dims:?}"
        ));
    }
    // The mask's dims right-aligned to the rows' (missing leading dims broadcast).
    let mut dims = vec![1i64; rank - mask_shape.len()];
    dims.extend_from_slice(mask_shape);
    if dims.iter().zip(row_dims).any(|(&m, &r)| m != 1 && m != r) {
        return Err(format!(
            "a written-rows mask of shape {mask_shape:?} does not broadcast to rows {row_dims:?}"
        ));
    }
    let strides = |shape: &[i64]| -> Vec<usize> {
        (0..rank)
            .map(|d| shape[d + 1..].iter().product::<i64>() as usize)
            .collect()
    };
    let (row_strides, mask_strides) = (strides(row_dims), strides(&dims));
    // The offsets the broadcast dims add, the same for every set flag.
    let mut spread = vec![0usize];
    for d in (0..rank).filter(|&d| dims[d] == 1) {
        let (count, stride) = (row_dims[d] as usize, row_strides[d]);
        spread = spread
            .iter()
            .flat_map(|&b| (0..count).map(move |i| b + i * stride))
            .collect();
    }
    let mut rows = Vec::new();
    for at in set_flags(flags) {
        // The set flag's position in the rows, plus every position its broadcast dims add.
        let base: usize = (0..rank)
            .filter(|&d| dims[d] != 1)
            .map(|d| at / mask_strides[d] % dims[d] as usize * row_strides[d])
            .sum();
        rows.extend(spread.iter().map(|offset| base + offset));
    }
    rows.sort_unstable();
    rows.dedup();
    Ok(rows)
}

/// The positions of the set flags. A decode step sets one position of thousands: words of
/// eight flags are skipped whole while they are clear.
fn set_flags(flags: &[u8]) -> impl Iterator<Item = usize> + '_ {
    flags
        .chunks(8)
        .enumerate()
        .filter(|(_, word)| word.iter().any(|&f| f != 0))
        .flat_map(|(w, word)| {
            let set = word.iter().enumerate().filter(|(_, &f)| f != 0);
            set.map(move |(i, _)| w * 8 + i)
        })
}

/// The unsigned integer type of each element size: rows are compared bit for bit (so -0.0 and
/// 0.0 differ, and a NaN equals its own bits).
fn bits_type(dtype: Dtype) -> Dtype {
    match dtype.size_in_bytes() {
        1 => Dtype::U8,
        2 => Dtype::U16,
        4 => Dtype::U32,
        _ => Dtype::U64,
    }
}

fn as_rows(a: &Array, rows: &Rows, s: &Stream) -> mlx_kernels::Result<Array> {
    let bits = ops::view(&ops::contiguous(a, s)?, bits_type(a.dtype()), s)?;
    ops::reshape(&bits, &[rows.count as i64, rows.width as i64], s)
}

/// Per row (as uint8, lazily): whether `a` and `b` differ.
fn changed_rows(a: &Array, b: &Array, rows: &Rows, s: &Stream) -> mlx_kernels::Result<Array> {
    let differs = ops::not_equal(&as_rows(a, rows, s)?, &as_rows(b, rows, s)?, s)?;
    ops::max(&ops::astype(&differs, Dtype::U8, s)?, &[1], false, s)
}

/// The bytes of `rows` of `a`, in order, gathered on the device (lazily), as uint8 rows.
fn gather_rows(a: &Array, rows: &Rows, wanted: &[usize], s: &Stream) -> mlx_kernels::Result<Array> {
    let indices: Vec<u32> = wanted.iter().map(|&r| r as u32).collect();
    let indices = Array::from_slice(&indices, &[indices.len() as i64])?;
    let picked = ops::take(&as_rows(a, rows, s)?, &indices, 0, s)?;
    ops::view(&picked, Dtype::U8, s)
}

/// The rows to check before trusting a mirror: the ones just written, and some spread over
/// the buffer.
fn probe_rows(written: &[usize], count: usize) -> impl Iterator<Item = usize> + '_ {
    let step = (count / SPREAD_PROBES).max(1);
    written
        .iter()
        .copied()
        .take(WRITTEN_PROBES)
        .chain((0..count).step_by(step).take(SPREAD_PROBES))
}

#[cfg(test)]
mod tests {
    use super::rows_in_mask;

    #[test]
    fn a_mask_over_positions_selects_those_rows_in_every_head() {
        // Rows [B=2, H=3, P=4]; the mask [B, 1, P] marks position 2 of batch 0 and 1 of batch 1.
        let flags = [0, 0, 1, 0, 0, 1, 0, 0];
        let rows = rows_in_mask(&[2, 1, 4], &flags, &[2, 3, 4]).unwrap();
        assert_eq!(rows, [2, 6, 10, 13, 17, 21]);
        // A [P] mask broadcasts over batch and heads; a full mask is itself.
        assert_eq!(
            rows_in_mask(&[4], &[0, 0, 0, 1], &[2, 1, 4]).unwrap(),
            [3, 7]
        );
        assert_eq!(
            rows_in_mask(&[2, 2], &[1, 0, 0, 1], &[2, 2]).unwrap(),
            [0, 3]
        );
        assert!(rows_in_mask(&[3], &[1, 0, 0], &[2, 4]).is_err());
    }

    #[test]
    fn set_flags_are_found_across_and_after_whole_words() {
        let mut flags = vec![0u8; 21];
        for at in [0, 7, 8, 16, 20] {
            flags[at] = 1;
        }
        assert_eq!(
            rows_in_mask(&[21], &flags, &[2, 21]).unwrap(),
            [0, 7, 8, 16, 20, 21, 28, 29, 37, 41]
        );
        assert!(rows_in_mask(&[21], &[0; 21], &[21]).unwrap().is_empty());
    }
}
