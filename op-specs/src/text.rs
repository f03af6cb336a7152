//! Text features over token ids: TfIdfVectorizer.
//!
//! The pool of n-grams is an attribute, so which windows to compare with which pool entries is
//! known on the host; MLX gathers every window of the input at once, compares it with every
//! pool n-gram of its length, and sums the matches per pool n-gram. String pools stay on ORT's
//! CPU EP (MLX holds no strings).

use mlx_kernels::ops::{self, ScatterMode};
use mlx_kernels::{Array, Dtype};

use crate::table::consts::zeros;
use crate::{onnx_op, Lower, OpError, Result};

/// Counts the pool's n-grams in each row of token ids (`[C]` or `[N, C]`), each n-gram of
/// length n read with a stride of 1 to `max_skip_count + 1` (unigrams once), and writes, per
/// pool n-gram k, into output slot `ngram_indexes[k]`: the count (TF), `weights[k]` if it
/// occurred (IDF), or the count times `weights[k]` (TFIDF).
#[allow(clippy::too_many_arguments)] // one input and nine attributes, as ONNX has them
#[onnx_op(
    op = "TfIdfVectorizer", since = 9, types(T = I32 | I64, F = F32),
    inputs(X: T), outputs(Y: F),
    shape = ShapeKeyed, claim = tf_idf_claim,
    declines = "pool_strings (MLX holds no strings); attributes ORT's kernel refuses at session creation; max_skip_count at int64's maximum (ORT's skip distance overflows); pool n-grams past the end of ngram_indexes (ORT's kernel aborts on a match); IDF with two pool n-grams sharing an output slot (ORT keeps the last match in its scan order)",
    numerics = "counts are exact; TFIDF multiplies each pool n-gram's count by its weight where ORT adds the weight once a match, so the last bits of a weighted sum may differ"
)]
fn tf_idf_vectorizer(
    cx: &mut Lower,
    x: Array,
    #[attr] mode: String,
    #[attr] min_gram_length: i64,
    #[attr] max_gram_length: i64,
    #[attr] max_skip_count: i64,
    #[attr] ngram_counts: Vec<i64>,
    #[attr] ngram_indexes: Vec<i64>,
    #[attr] pool_int64s: Option<Vec<i64>>,
    #[attr] weights: Option<Vec<f32>>,
) -> Result<Array> {
    let s = cx.stream();
    let pool = Pool::new(Attributes {
        mode,
        min: min_gram_length,
        max: max_gram_length,
        max_skip: max_skip_count,
        counts: ngram_counts,
        indexes: ngram_indexes,
        pool: pool_int64s.unwrap_or_default(),
        weights,
    })
    .map_err(OpError::new)?;
    let shape = x.shape();
    let (rows, width) = match shape.as_slice() {
        [] => (1, 1),
        [c] => (1, *c),
        [n, c] if *n > 0 => (*n, *c),
        _ => {
            return Err(OpError::new(format!(
                "X has shape {shape:?}: expected [C] or [B, C] with B > 0, as ORT requires"
            )))
        }
    };
    let out_dims: Vec<i64> = if shape.len() == 2 {
        vec![rows, pool.slots]
    } else {
        vec![pool.slots]
    };
    let tokens = ops::reshape(&ops::astype(&x, Dtype::I64, s)?, &[rows, width], s)?;
    // Per pool n-gram (in pool order), its count in each row: [rows, pool n-grams].
    let mut counts: Vec<Array> = Vec::new();
    for gram in &pool.lengths {
        let mut total: Option<Array> = None;
        // Unigrams are counted once; longer n-grams at each stride whose window fits the row
        // (so a huge max_skip_count costs no more than the row's width).
        let strides = if gram.n == 1 {
            1
        } else {
            (pool.max_skip + 1).min(width.saturating_sub(1) / (gram.n - 1))
        };
        for stride in 1..=strides {
            let span = (gram.n - 1) * stride;
            let starts = width - span;
            let picks: Vec<i32> = (0..starts)
                .flat_map(|i| (0..gram.n).map(move |j| (i + j * stride) as i32))
                .collect();
            let index = Array::from_slice(&picks, &[picks.len() as i64])?;
            let windows = ops::reshape(
                &ops::take(&tokens, &index, 1, s)?,
                &[rows, starts, 1, gram.n],
                s,
            )?;
            let entries = Array::from_slice(&gram.entries, &[1, 1, gram.count(), gram.n])?;
            let same = ops::equal(&windows, &entries, s)?;
            // A window matches an entry when all its tokens do: the minimum of the bools.
            let matched = ops::min(&ops::astype(&same, Dtype::F32, s)?, &[3], false, s)?;
            let found = ops::sum(&matched, &[1], false, s)?;
            total = Some(match total {
                None => found,
                Some(t) => ops::add(&t, &found, s)?,
            });
        }
        counts.push(match total {
            Some(t) => t,
            None => zeros(&[rows, gram.count()], Dtype::F32, s)?,
        });
    }
    if counts.is_empty() {
        return zeros(&out_dims, Dtype::F32, s);
    }
    let counts = ops::concatenate(&counts, 1, s)?;
    let weight = Array::from_slice(&pool.weights, &[1, pool.weights.len() as i64])?;
    // ORT adds a weight per match, so an n-gram never seen gives 0 whatever its weight (a
    // product would make an infinite weight's 0 · inf NaN).
    let seen = ops::greater(&counts, &Array::scalar(0.0f32)?, s)?;
    let per_gram = match pool.mode {
        Mode::Tf => counts,
        Mode::TfIdf => {
            let weighted = ops::multiply(&counts, &weight, s)?;
            ops::where_(&seen, &weighted, &Array::scalar(0.0f32)?, s)?
        }
        Mode::Idf => ops::where_(&seen, &weight, &Array::scalar(0.0f32)?, s)?,
    };
    // Output slot k sums every pool n-gram sent there: a scatter-add of the n-grams' columns
    // (a one-hot routing matrix would be vocabulary² floats).
    let grams = pool.grams() as i64;
    let slot_of = Array::from_slice(&pool.slot_of, &[grams])?;
    let columns = ops::reshape(
        &ops::transpose(&per_gram, &[1, 0], s)?,
        &[grams, 1, rows],
        s,
    )?;
    let empty = zeros(&[pool.slots, rows], Dtype::F32, s)?;
    let by_slot = ops::scatter_rows(&empty, &slot_of, &columns, ScatterMode::Add, s)?;
    Ok(ops::reshape(
        &ops::transpose(&by_slot, &[1, 0], s)?,
        &out_dims,
        s,
    )?)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tf,
    Idf,
    TfIdf,
}

/// The pool n-grams of one length that can be counted.
#[derive(Debug)]
struct Grams {
    n: i64,
    /// Row-major `[count, n]` token ids.
    entries: Vec<i64>,
}

impl Grams {
    fn count(&self) -> i64 {
        self.entries.len() as i64 / self.n
    }
}

/// TfIdfVectorizer's attributes as the node gives them.
struct Attributes {
    mode: String,
    min: i64,
    max: i64,
    max_skip: i64,
    counts: Vec<i64>,
    indexes: Vec<i64>,
    pool: Vec<i64>,
    weights: Option<Vec<f32>>,
}

/// The counted part of a TfIdfVectorizer's pool, checked as ORT's kernel checks it.
#[derive(Debug)]
struct Pool {
    mode: Mode,
    max_skip: i64,
    /// Lengths from min_gram_length to max_gram_length, in pool order.
    lengths: Vec<Grams>,
    /// Per counted pool n-gram (in the order of `lengths`): its output slot and weight.
    slot_of: Vec<i64>,
    weights: Vec<f32>,
    /// Output width: `max(ngram_indexes) + 1`.
    slots: i64,
}

impl Pool {
    fn grams(&self) -> usize {
        self.slot_of.len()
    }

    /// The node's attributes (a string pool is declined here too).
    fn of(node: &crate::Node) -> std::result::Result<Pool, String> {
        if node.attribute("pool_strings").is_some() {
            return Err("a string pool (MLX holds no strings)".into());
        }
        let int = |name: &str| {
            node.attr_as::<i64>(name)
                .ok_or_else(|| format!("attribute {name} is missing"))
        };
        Pool::new(Attributes {
            mode: node.attr_as::<String>("mode").unwrap_or_default(),
            min: int("min_gram_length")?,
            max: int("max_gram_length")?,
            max_skip: int("max_skip_count")?,
            counts: node.attr_as::<Vec<i64>>("ngram_counts").unwrap_or_default(),
            indexes: node
                .attr_as::<Vec<i64>>("ngram_indexes")
                .unwrap_or_default(),
            pool: node.attr_as::<Vec<i64>>("pool_int64s").unwrap_or_default(),
            weights: node.attr_as::<Vec<f32>>("weights"),
        })
    }

    fn new(a: Attributes) -> std::result::Result<Pool, String> {
        let mode = match a.mode.as_str() {
            "TF" => Mode::Tf,
            "IDF" => Mode::Idf,
            "TFIDF" => Mode::TfIdf,
            other => return Err(format!("mode {other:?} is not TF, IDF or TFIDF")),
        };
        let (min, max, max_skip, counts, indexes, pool, weights) = (
            a.min, a.max, a.max_skip, a.counts, a.indexes, a.pool, a.weights,
        );
        if min < 1 || max < min || max_skip < 0 || counts.is_empty() || indexes.is_empty() {
            return Err(format!(
                "min_gram_length {min}, max_gram_length {max}, max_skip_count {max_skip}, \
                 {} ngram_counts and {} ngram_indexes: ORT's kernel refuses them",
                counts.len(),
                indexes.len()
            ));
        }
        if max_skip == i64::MAX {
            // Its kernel reads the largest skip distance as max_skip_count + 1, which wraps
            // negative there, and counts nothing: left to ORT, which answers zeros.
            let reason = "max_skip_count at int64's maximum (ORT's kernel adds 1 to it, which \
                          overflows, and counts nothing)";
            return Err(reason.into());
        }
        if max > counts.len() as i64 || indexes.iter().any(|&i| i < 0) {
            return Err(format!(
                "max_gram_length {max} past {} ngram_counts, or a negative ngram_index: ORT's kernel refuses them",
                counts.len()
            ));
        }
        if pool.is_empty() {
            return Err("pool_int64s is empty (ORT's kernel refuses it)".into());
        }
        if weights.as_ref().is_some_and(|w| w.len() != indexes.len()) {
            return Err(
                "weights and ngram_indexes differ in length (ORT's kernel refuses it)".into(),
            );
        }
        let mut lengths = Vec::new();
        let (mut slot_of, mut gram_weights) = (Vec::new(), Vec::new());
        let mut k = 0usize; // the pool n-gram's number, over every length
        for (i, &start) in counts.iter().enumerate() {
            let n = i as i64 + 1;
            let end = counts.get(i + 1).copied().unwrap_or(pool.len() as i64);
            if start < 0 || end < start || end > pool.len() as i64 || (end - start) % n != 0 {
                return Err(format!(
                    "ngram_counts {counts:?} do not cut the pool of {} into n-grams (ORT's kernel refuses them)",
                    pool.len()
                ));
            }
            let entries = pool[start as usize..end as usize].to_vec();
            let here = entries.len() / n as usize;
            if (min..=max).contains(&n) {
                let mut seen = std::collections::HashSet::new();
                for g in entries.chunks(n as usize) {
                    if !seen.insert(g.to_vec()) {
                        return Err(format!(
                            "duplicate {n}-gram {g:?} (ORT's kernel refuses it)"
                        ));
                    }
                    let slot = *indexes.get(k).ok_or_else(|| {
                        format!(
                            "pool n-gram {k} has no ngram_index: ORT's kernel aborts when it matches"
                        )
                    })?;
                    slot_of.push(slot);
                    gram_weights.push(weights.as_ref().map_or(1.0, |w| w[k]));
                    k += 1;
                }
                lengths.push(Grams { n, entries });
            } else {
                k += here;
            }
        }
        if mode == Mode::Idf {
            let mut slots = slot_of.clone();
            slots.sort_unstable();
            if slots.windows(2).any(|w| w[0] == w[1]) {
                return Err(
                    "IDF with pool n-grams sharing an output slot: ORT keeps the last match in its scan order"
                        .into(),
                );
            }
        }
        Ok(Pool {
            mode,
            max_skip,
            lengths,
            slot_of,
            weights: gram_weights,
            slots: indexes.iter().max().copied().unwrap_or(0) + 1,
        })
    }
}

fn tf_idf_claim(node: &crate::Node) -> crate::Verdict {
    match Pool::of(node) {
        Ok(_) => crate::Verdict::Claim,
        Err(reason) => crate::Verdict::decline(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(counts: Vec<i64>, pool: Vec<i64>, indexes: Vec<i64>, mode: &str) -> Attributes {
        Attributes {
            mode: mode.into(),
            min: 1,
            max: 2,
            max_skip: 1,
            counts,
            indexes,
            pool,
            weights: None,
        }
    }

    #[test]
    fn the_pool_is_cut_by_ngram_counts_and_routed_by_ngram_indexes() {
        let pool = Pool::new(attributes(
            vec![0, 3],
            vec![1, 2, 3, 1, 2, 2, 3],
            vec![4, 3, 2, 1, 0],
            "TF",
        ))
        .unwrap();
        assert_eq!(pool.lengths.len(), 2);
        assert_eq!(pool.lengths[1].entries, [1, 2, 2, 3]);
        assert_eq!(pool.slot_of, [4, 3, 2, 1, 0]);
        assert_eq!(pool.slots, 5);
    }

    #[test]
    fn what_ort_refuses_or_misreads_is_declined() {
        // Duplicate bigram, a pool that does not cut into bigrams, n-grams past ngram_indexes.
        assert!(Pool::new(attributes(
            vec![0, 1],
            vec![1, 2, 3, 2, 3],
            vec![0, 1, 2],
            "TF"
        ))
        .is_err());
        assert!(Pool::new(attributes(
            vec![0, 1],
            vec![1, 2, 3, 4],
            vec![0, 1, 2],
            "TF"
        ))
        .is_err());
        assert!(Pool::new(attributes(vec![0, 1], vec![1, 2, 3], vec![0], "TF")).is_err());
        // IDF with two n-grams in one slot keeps ORT's last match: not reproduced.
        assert!(Pool::new(attributes(vec![0, 1], vec![1, 2, 3], vec![0, 0], "IDF")).is_err());
        assert!(Pool::new(attributes(vec![0, 1], vec![1, 2, 3], vec![0, 0], "TF")).is_ok());
    }
}
