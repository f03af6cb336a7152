//! Tree ensembles: TreeEnsembleRegressor and TreeEnsembleClassifier (ai.onnx.ml 1 and 3).
//!
//! The forest is laid out on the host as one node table (feature, threshold, a comparison
//! bitmask, true and false successors; a leaf is its own successor) and evaluated on MLX for
//! every row and tree at once: `depth` steps, each a gather of the current nodes' entries, a
//! gather of the features they test and one select of the successors. The leaves reached then
//! index a `[nodes, outputs]` weight table. Every rule is ORT's kernel's, probed on ORT 1.31.1
//! (`docs/DESIGN.md`, "ai.onnx.ml"): NaN takes the true branch only where
//! `nodes_missing_value_tracks_true` is 1 (and always under BRANCH_NEQ); a tree is a run of
//! equal tree ids; one output takes each leaf's first weight; an output no leaf voted for is 0.

use std::collections::HashMap;

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::linear::{binary_columns, first_max, label_of, rank_1_or_2};
use super::transform::{logistic, PostTransform};
use crate::table::consts::scalar_like;
use crate::table::lower::float32;
use crate::{onnx_op, ElemType, Lower, Node, OpError, Result, TensorValue, Verdict};

/// The comparison bits of a branch: it goes to its true successor when the feature is below
/// (`LESS`), equal to (`EQUAL`) or above (`GREATER`) the threshold, or NaN (`NAN`).
const LESS: u8 = 1;
const EQUAL: u8 = 2;
const GREATER: u8 = 4;
const NAN: u8 = 8;
/// TreeEnsemble-5's set test: the feature is in the node's set (`MEMBER`), compared after
/// truncation to an integer for what ORT calls a big set (`BIG`).
const MEMBER: u8 = 16;
const BIG: u8 = 32;

/// The most values in a set ORT tests by equality (in 0..=30); a larger one (or one with other
/// values) it tests by `(int32) x`.
const SMALL_SET: usize = 30;

/// The most levels a tree may have: each is one gather step of the evaluation.
const MOST_LEVELS: usize = 512;

fn mode_bits(mode: &str) -> Option<u8> {
    Some(match mode {
        "BRANCH_LEQ" => LESS | EQUAL,
        "BRANCH_LT" => LESS,
        "BRANCH_GTE" => GREATER | EQUAL,
        "BRANCH_GT" => GREATER,
        "BRANCH_EQ" => EQUAL,
        // `NaN != t` holds.
        "BRANCH_NEQ" => LESS | GREATER | NAN,
        _ => return None,
    })
}

/// Which weights a model's leaves carry: the classifier's `class_*` or the regressor's
/// `target_*` attributes.
#[derive(Clone, Copy)]
enum Leaves {
    Class,
    Target,
}

impl Leaves {
    fn prefix(self) -> &'static str {
        match self {
            Leaves::Class => "class",
            Leaves::Target => "target",
        }
    }
}

/// The values of the tensor attribute `name`, which must hold float32 (the input's type: a
/// float64 one belongs to a float64 input, which is not claimed).
fn float32_values(t: &TensorValue, name: &str) -> std::result::Result<Vec<f32>, String> {
    if t.elem != ElemType::Float {
        return Err(format!("{name} holds {:?}, not the input's float", t.elem));
    }
    Ok(t.bytes
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// A float list given as `name` or as `name_as_tensor`.
fn floats(node: &Node, name: &str) -> std::result::Result<Option<Vec<f32>>, String> {
    let tensor_name = format!("{name}_as_tensor");
    let listed = node.attr_as::<Vec<f32>>(name);
    let tensor = node.attr_as::<TensorValue>(&tensor_name);
    match (listed, tensor) {
        (Some(_), Some(_)) => Err(format!("both {name} and {tensor_name} are given")),
        (Some(values), None) => Ok(Some(values)),
        (None, Some(t)) => float32_values(&t, &tensor_name).map(Some),
        (None, None) => Ok(None),
    }
}

/// The most entries a forest's dense per-node tables may hold (2^28: 1 GiB of float32).
const MAX_TABLE_ENTRIES: usize = 1 << 28;

/// The forest as flat tables, checked as ORT's kernel checks it.
struct Forest {
    feature: Vec<i32>,
    threshold: Vec<f32>,
    bits: Vec<u8>,
    on_true: Vec<i32>,
    on_false: Vec<i32>,
    roots: Vec<i32>,
    levels: usize,
    /// Per node: its weights as (output, weight), in attribute order (leaves only).
    weights: Vec<Vec<(usize, f32)>>,
    /// Per node: `nodes_values` (what a leaf without weights gives a single output).
    value: Vec<f32>,
    outputs: usize,
    base: Vec<f32>,
    /// Per node, a MEMBER node's set (empty for the others).
    members: Vec<Vec<f32>>,
}

impl Forest {
    /// Reads and checks the forest of `node` with `outputs` outputs (targets or classes).
    fn of(node: &Node, leaves: Leaves, outputs: usize) -> std::result::Result<Forest, String> {
        let ints = |name: &str| node.attr_as::<Vec<i64>>(name).unwrap_or_default();
        let tree_ids = ints("nodes_treeids");
        let node_ids = ints("nodes_nodeids");
        let features = ints("nodes_featureids");
        let true_ids = ints("nodes_truenodeids");
        let false_ids = ints("nodes_falsenodeids");
        let tracks = ints("nodes_missing_value_tracks_true");
        let modes = node
            .attr_as::<Vec<String>>("nodes_modes")
            .unwrap_or_default();
        let values = floats(node, "nodes_values")?.unwrap_or_default();
        let count = tree_ids.len();
        let lengths = [
            node_ids.len(),
            features.len(),
            true_ids.len(),
            false_ids.len(),
            modes.len(),
            values.len(),
        ];
        if count == 0 || lengths.iter().any(|&n| n != count) {
            return Err(format!(
                "node attributes of different lengths ({count} tree ids, {lengths:?})"
            ));
        }
        // A tree is a run of equal tree ids; ORT refuses a repeated (tree, node) pair, and
        // splits a tree id seen in two runs into two trees (declined here: which nodes its
        // successors then mean is ORT's lookup's accident).
        let mut index: HashMap<(i64, i64), usize> = HashMap::new();
        let mut roots = Vec::new();
        let mut seen_trees = std::collections::HashSet::new();
        for g in 0..count {
            if g == 0 || tree_ids[g] != tree_ids[g - 1] {
                if !seen_trees.insert(tree_ids[g]) {
                    return Err(format!(
                        "tree {} is not contiguous in the node list",
                        tree_ids[g]
                    ));
                }
                roots.push(g as i32);
            }
            if index.insert((tree_ids[g], node_ids[g]), g).is_some() {
                return Err(format!(
                    "node {} of tree {} is listed twice",
                    node_ids[g], tree_ids[g]
                ));
            }
        }
        let mut forest = Forest {
            feature: vec![0; count],
            threshold: values.clone(),
            bits: vec![0; count],
            on_true: (0..count as i32).collect(),
            on_false: (0..count as i32).collect(),
            roots,
            levels: 0,
            weights: vec![Vec::new(); count],
            value: values,
            outputs,
            base: floats(node, "base_values")?.unwrap_or_default(),
            members: vec![Vec::new(); count],
        };
        for g in 0..count {
            if modes[g] == "LEAF" {
                continue;
            }
            let bits = mode_bits(&modes[g])
                .ok_or_else(|| format!("node mode '{}' is unknown", modes[g]))?;
            let tracks_true = tracks.get(g) == Some(&1);
            forest.bits[g] = bits | if tracks_true { NAN } else { 0 };
            forest.feature[g] = i32::try_from(features[g])
                .ok()
                .filter(|&f| f >= 0)
                .ok_or_else(|| format!("feature id {} of a branch", features[g]))?;
            let find = |id: i64| index.get(&(tree_ids[g], id)).map(|&c| c as i32);
            let (t, f) = (find(true_ids[g]), find(false_ids[g]));
            match (t, f) {
                (Some(t), Some(f)) if t != g as i32 && f != g as i32 => {
                    forest.on_true[g] = t;
                    forest.on_false[g] = f;
                }
                _ => {
                    return Err(format!(
                        "node {} of tree {} has a successor outside its tree or itself",
                        node_ids[g], tree_ids[g]
                    ))
                }
            }
        }
        forest.check_equal_chains(&tracks)?;
        forest.levels = forest.depth()?;
        let p = leaves.prefix();
        let (trees, nodes, ids) = (
            ints(&format!("{p}_treeids")),
            ints(&format!("{p}_nodeids")),
            ints(&format!("{p}_ids")),
        );
        let weights = floats(node, &format!("{p}_weights"))?.unwrap_or_default();
        if trees.len() != ids.len() || nodes.len() != ids.len() || weights.len() != ids.len() {
            return Err(format!(
                "{p}_treeids, {p}_nodeids, {p}_ids and {p}_weights of different lengths"
            ));
        }
        for (((tree, id), output), weight) in trees.iter().zip(&nodes).zip(&ids).zip(&weights) {
            let g = *index.get(&(*tree, *id)).ok_or_else(|| {
                format!("a weight for node {id} of tree {tree}, which does not exist")
            })?;
            let output = usize::try_from(*output)
                .ok()
                .filter(|&o| o < outputs)
                .ok_or_else(|| format!("{p}_ids holds {output}, outside 0..{outputs}"))?;
            if !weight.is_finite() {
                return Err(format!("a {p} weight of {weight}"));
            }
            // Weights on a branch are ignored by ORT.
            if modes[g] == "LEAF" {
                forest.weights[g].push((output, *weight));
            }
        }
        forest.within_limits()
    }

    /// TreeEnsemble-5's forest: interior nodes by index, then the leaves (`nodes_*leafs`
    /// say which kind a successor is), each leaf with one (target, weight); trees in
    /// `tree_roots` order. Float32 tensors only (ORT's kernel needs the input's type).
    fn of_v5(node: &Node, outputs: usize) -> std::result::Result<Forest, String> {
        let ints = |name: &str| node.attr_as::<Vec<i64>>(name).unwrap_or_default();
        let tensor = |name: &str| -> std::result::Result<TensorValue, String> {
            node.attr_as::<TensorValue>(name)
                .ok_or_else(|| format!("{name} is missing"))
        };
        let float_tensor = |name: &str| float32_values(&tensor(name)?, name);
        let features = ints("nodes_featureids");
        let (true_ids, true_leafs) = (ints("nodes_truenodeids"), ints("nodes_trueleafs"));
        let (false_ids, false_leafs) = (ints("nodes_falsenodeids"), ints("nodes_falseleafs"));
        let tracks = ints("nodes_missing_value_tracks_true");
        let splits = float_tensor("nodes_splits")?;
        let modes = tensor("nodes_modes")?;
        if modes.elem != ElemType::Uint8 {
            return Err("nodes_modes is not a uint8 tensor".into());
        }
        let modes = modes.bytes;
        let weights = float_tensor("leaf_weights")?;
        let targets = ints("leaf_targetids");
        let interior = features.len();
        let lengths = [
            splits.len(),
            modes.len(),
            true_ids.len(),
            true_leafs.len(),
            false_ids.len(),
            false_leafs.len(),
        ];
        if lengths.iter().any(|&n| n != interior) || targets.len() != weights.len() {
            return Err(format!("node attributes of different lengths ({interior} features, {lengths:?}), or {} leaf targets for {} weights", targets.len(), weights.len()));
        }
        let count = interior + weights.len();
        let successor = |id: i64, leaf: i64| -> std::result::Result<i32, String> {
            let (base, limit) = if leaf != 0 {
                (interior, weights.len())
            } else {
                (0, interior)
            };
            usize::try_from(id)
                .ok()
                .filter(|&i| i < limit)
                .map(|i| (base + i) as i32)
                .ok_or_else(|| format!("a successor {id} outside its {limit} nodes"))
        };
        let mut sets = node
            .attr_as::<TensorValue>("membership_values")
            .map(|_| float_tensor("membership_values"))
            .transpose()?
            .unwrap_or_default()
            .split(|v| v.is_nan())
            .map(<[f32]>::to_vec)
            .collect::<Vec<_>>()
            .into_iter();
        let mut forest = Forest {
            feature: vec![0; count],
            threshold: splits
                .iter()
                .copied()
                .chain(weights.iter().copied())
                .collect(),
            bits: vec![0; count],
            on_true: (0..count as i32).collect(),
            on_false: (0..count as i32).collect(),
            roots: Vec::new(),
            levels: 0,
            weights: vec![Vec::new(); count],
            value: vec![0.0; count],
            outputs,
            base: Vec::new(),
            members: vec![Vec::new(); count],
        };
        for g in 0..interior {
            let tracks_true = if tracks.get(g) == Some(&1) { NAN } else { 0 };
            forest.bits[g] = tracks_true
                | match modes[g] {
                    0 => LESS | EQUAL,
                    1 => LESS,
                    2 => GREATER | EQUAL,
                    3 => GREATER,
                    4 => EQUAL,
                    5 => LESS | GREATER | NAN,
                    6 => {
                        let set = sets
                            .next()
                            .filter(|set| !set.is_empty())
                            .ok_or("a BRANCH_MEMBER node with an empty set")?;
                        let small =
                            set.len() <= SMALL_SET && set.iter().all(|v| (0.0..=30.0).contains(v));
                        if !small
                            && set
                                .iter()
                                .any(|v| v.fract() != 0.0 || v.abs() > 16_777_216.0)
                        {
                            return Err("a big membership set with values that are not integers of at most 2^24".into());
                        }
                        forest.members[g] = set;
                        MEMBER | if small { 0 } else { BIG }
                    }
                    other => return Err(format!("node mode {other} is unknown")),
                };
            forest.feature[g] = i32::try_from(features[g])
                .ok()
                .filter(|&f| f >= 0)
                .ok_or_else(|| format!("feature id {} of a branch", features[g]))?;
            forest.on_true[g] = successor(true_ids[g], true_leafs[g])?;
            forest.on_false[g] = successor(false_ids[g], false_leafs[g])?;
        }
        for (l, (&target, &weight)) in targets.iter().zip(&weights).enumerate() {
            let target = usize::try_from(target)
                .ok()
                .filter(|&t| t < outputs)
                .ok_or_else(|| format!("leaf target {target} outside 0..{outputs}"))?;
            if !weight.is_finite() {
                return Err(format!("a leaf weight of {weight}"));
            }
            forest.weights[interior + l].push((target, weight));
            forest.value[interior + l] = weight;
        }
        for &root in &ints("tree_roots") {
            let r = usize::try_from(root)
                .ok()
                .filter(|&r| r < interior)
                .ok_or_else(|| format!("tree root {root} outside the nodes"))?;
            // A tree of one leaf: a root whose two successors are the same leaf.
            let single = true_leafs[r] != 0 && false_leafs[r] != 0 && true_ids[r] == false_ids[r];
            forest
                .roots
                .push(if single { forest.on_true[r] } else { r as i32 });
        }
        if forest.roots.is_empty() {
            return Err("no tree_roots".into());
        }
        forest.check_equal_chains(&tracks)?;
        forest.levels = forest.depth()?;
        forest.within_limits()
    }

    /// The forest, when its dense tables fit: one entry a node and output for the leaves'
    /// sums (the outputs are classes or targets, so a many-class boosted model grows as their
    /// square), one a node and set member for MEMBER tests. Past the limit a host allocation
    /// could abort the process; ORT's CPU EP walks such a forest node by node instead.
    fn within_limits(self) -> std::result::Result<Forest, String> {
        let nodes = self.weights.len();
        // The walk's successor indices (2g + 1) are int32.
        if nodes > MAX_TABLE_ENTRIES {
            return Err(format!("{nodes} nodes, past the EP's {MAX_TABLE_ENTRIES}"));
        }
        let widest = self.members.iter().map(Vec::len).max().unwrap_or(0);
        for (what, columns) in [("outputs", self.outputs), ("set members", widest)] {
            let entries = nodes.saturating_mul(columns);
            if entries > MAX_TABLE_ENTRIES {
                return Err(format!(
                    "{nodes} nodes by {columns} {what}: {entries} table entries, past the EP's \
                     {MAX_TABLE_ENTRIES}"
                ));
            }
        }
        Ok(self)
    }

    /// ORT folds a chain of BRANCH_EQ nodes on one feature (same true successor, integer
    /// thresholds in 1..=32) into one set test that routes NaN by the chain's first node: a
    /// chain whose NaN flags differ is declined.
    fn check_equal_chains(&self, tracks: &[i64]) -> std::result::Result<(), String> {
        let equal = mode_bits("BRANCH_EQ").unwrap_or_default();
        let foldable = |g: usize| {
            self.bits[g] & !NAN == equal
                && self.threshold[g].fract() == 0.0
                && (1.0..=32.0).contains(&self.threshold[g])
        };
        for g in 0..self.bits.len() {
            let next = self.on_false[g] as usize;
            if foldable(g)
                && foldable(next)
                && self.feature[g] == self.feature[next]
                && self.on_true[g] == self.on_true[next]
                && (tracks.get(g) == Some(&1)) != (tracks.get(next) == Some(&1))
            {
                return Err(
                    "BRANCH_EQ nodes ORT folds into one test with NaN flags that differ".into(),
                );
            }
        }
        Ok(())
    }

    /// The most levels of branches on a path from a root; a cycle or a branch reached from
    /// two parents is refused, as ORT refuses it.
    fn depth(&self) -> std::result::Result<usize, String> {
        let mut parents = vec![0u32; self.bits.len()];
        let mut deepest = 0;
        for &root in &self.roots {
            let mut stack = vec![(root as usize, 0usize)];
            while let Some((g, level)) = stack.pop() {
                if self.on_true[g] as usize == g {
                    deepest = deepest.max(level);
                    continue;
                }
                parents[g] += 1;
                if parents[g] > 1 || level >= MOST_LEVELS {
                    return Err(format!(
                        "a branch reached twice, a cycle, or more than {MOST_LEVELS} levels"
                    ));
                }
                stack.push((self.on_true[g] as usize, level + 1));
                stack.push((self.on_false[g] as usize, level + 1));
            }
        }
        Ok(deepest)
    }

    fn trees(&self) -> usize {
        self.roots.len()
    }

    /// The leaf each tree sends each row to: `[N, trees]` node indices.
    fn leaves(&self, rows: &Array, s: &Stream) -> Result<Array> {
        let n = rows.shape()[0];
        let columns = rows.shape()[1];
        let widest = self.feature.iter().copied().max().unwrap_or(0);
        if i64::from(widest) >= columns {
            return Err(OpError::new(format!(
                "One path in the graph requests feature {widest} but input tensor has {columns} features"
            )));
        }
        // Few, wide gathers: a level's time on MLX's CPU backend is mostly gathers over
        // [N, trees], and a 100-tree forest took 36% less time with the tables paired than
        // with one table a field. Each node's test is its feature and its threshold (the
        // float's bits as int32), read by one gather. Its two successors sit at 2g (the test
        // holds) and 2g + 1, so one gather picks the one taken instead of two and a select;
        // nodes are at most 2^28 (`within_limits`), so 2g + 1 fits int32.
        let nodes = self.feature.len() as i64;
        let tests: Vec<i32> = (self.feature.iter().zip(&self.threshold))
            .flat_map(|(&feature, threshold)| [feature, threshold.to_bits() as i32])
            .collect();
        let tests = Array::from_slice(&tests, &[nodes, 2])?;
        let successors: Vec<i32> = (self.on_true.iter().zip(&self.on_false))
            .flat_map(|(&on_true, &on_false)| [on_true, on_false])
            .collect();
        let successors = Array::from_slice(&successors, &[2 * nodes])?;
        let bits = Array::from_slice(&self.bits, &[self.bits.len() as i64])?;
        let roots = Array::from_slice(&self.roots, &[1, self.roots.len() as i64])?;
        let mut at = ops::broadcast_to(&roots, &[n, self.roots.len() as i64], s)?;
        let sets = Sets::of(&self.members)?;
        let bit = |mask: &Array, b: u8| -> Result<Array> {
            let set = ops::bitwise_and(mask, &Array::scalar(b)?, s)?;
            Ok(ops::not_equal(&set, &Array::scalar(0u8)?, s)?)
        };
        // The branches of most forests (scikit-learn's: all BRANCH_LEQ, no NaN flags) share one
        // test, which then needs no per-node mask.
        let branches = || (0..self.bits.len()).filter(|&g| self.on_true[g] as usize != g);
        let uniform = branches()
            .map(|g| self.bits[g])
            .try_fold(None, |common, b| match common {
                Some(c) if c != b => Err(()),
                _ => Ok(Some(b)),
            })
            .ok()
            .flatten()
            .filter(|b| b & (MEMBER | BIG) == 0);
        let trees = self.roots.len() as i32;
        let two = Array::scalar(2i32)?;
        for _ in 0..self.levels {
            let test = ops::take(&tests, &at, 0, s)?;
            let field = |c: i32| -> Result<Array> {
                let column =
                    ops::slice(&test, &[0, 0, c], &[n as i32, trees, c + 1], &[1, 1, 1], s)?;
                Ok(ops::squeeze(&column, &[2], s)?)
            };
            let x = ops::take_along_axis(rows, &field(0)?, 1, s)?;
            let t = ops::view(&field(1)?, Dtype::F32, s)?;
            let go_true = match uniform {
                Some(bits) => comparison(&x, &t, bits, s)?,
                None => {
                    let mask = ops::take(&bits, &at, 0, s)?;
                    let mut go_true: Option<Array> = None;
                    for b in [LESS, EQUAL, GREATER, NAN] {
                        let term =
                            ops::logical_and(&bit(&mask, b)?, &comparison(&x, &t, b, s)?, s)?;
                        go_true = Some(match go_true {
                            None => term,
                            Some(so_far) => ops::logical_or(&so_far, &term, s)?,
                        });
                    }
                    let mut go_true = go_true.expect("four tests");
                    if let Some(sets) = &sets {
                        let term = ops::logical_and(
                            &bit(&mask, MEMBER)?,
                            &sets.holds(&x, &at, &bit(&mask, BIG)?, s)?,
                            s,
                        )?;
                        go_true = ops::logical_or(&go_true, &term, s)?;
                    }
                    go_true
                }
            };
            let taken = ops::add(
                &ops::multiply(&at, &two, s)?,
                &ops::astype(&ops::logical_not(&go_true, s)?, Dtype::I32, s)?,
                s,
            )?;
            at = ops::take(&successors, &taken, 0, s)?;
        }
        Ok(at)
    }

    /// Whether any leaf a row reaches votes for each output, when that is the same for every
    /// row: an output some tree votes for at each of its leaves always gets a vote, one no leaf
    /// votes for never does. `None` when an output is neither. `votes` is `[nodes, outputs]`.
    fn votes_known(&self, votes: &[bool]) -> Option<Vec<bool>> {
        let outputs = self.outputs;
        let mut always = vec![false; outputs];
        let mut ever = vec![false; outputs];
        for &root in &self.roots {
            // The outputs every leaf of this tree votes for.
            let mut everywhere = vec![true; outputs];
            let mut stack = vec![root as usize];
            while let Some(g) = stack.pop() {
                if self.on_true[g] as usize != g {
                    stack.extend([self.on_true[g] as usize, self.on_false[g] as usize]);
                    continue;
                }
                let leaf = &votes[g * outputs..(g + 1) * outputs];
                for (o, &voted) in leaf.iter().enumerate() {
                    everywhere[o] &= voted;
                    ever[o] |= voted;
                }
            }
            for (a, e) in always.iter_mut().zip(everywhere) {
                *a |= e;
            }
        }
        (0..outputs)
            .all(|o| always[o] || !ever[o])
            .then_some(always)
    }

    /// Per row, each output's sum over the trees of the leaves' weights and whether any leaf
    /// voted for it: `([N, outputs], [N, outputs] bool)`.
    fn sums(&self, leaves: &Array, s: &Stream) -> Result<(Array, Array)> {
        let nodes = self.weights.len();
        let mut table = vec![0.0f32; nodes * self.outputs];
        let mut votes = vec![false; nodes * self.outputs];
        for (g, pairs) in self.weights.iter().enumerate() {
            for &(output, weight) in pairs {
                table[g * self.outputs + output] += weight;
                votes[g * self.outputs + output] = true;
            }
        }
        let shape = [nodes as i64, self.outputs as i64];
        let per_leaf = ops::take(&Array::from_slice(&table, &shape)?, leaves, 0, s)?;
        let sum = ops::sum(&per_leaf, &[1], false, s)?;
        // Whether a row's leaves voted for an output is known without a second gather over
        // [N, trees, outputs] for most forests (scikit-learn's classifiers among them).
        let any = match self.votes_known(&votes) {
            Some(columns) => ops::broadcast_to(
                &Array::from_slice(&columns, &[self.outputs as i64])?,
                &sum.shape(),
                s,
            )?,
            None => {
                let voted = ops::take(&Array::from_slice(&votes, &shape)?, leaves, 0, s)?;
                ops::greater(
                    &ops::sum(&ops::astype(&voted, Dtype::I32, s)?, &[1], false, s)?,
                    &Array::scalar(0i32)?,
                    s,
                )?
            }
        };
        Ok((sum, any))
    }
}

/// Whether `x` passes the comparisons in `bits` against `t` (any of them).
fn comparison(x: &Array, t: &Array, bits: u8, s: &Stream) -> Result<Array> {
    let mut holds: Option<Array> = None;
    let mut add = |test: Array| -> Result<()> {
        holds = Some(match holds.take() {
            None => test,
            Some(so_far) => ops::logical_or(&so_far, &test, s)?,
        });
        Ok(())
    };
    match bits & (LESS | EQUAL | GREATER) {
        b if b == LESS | EQUAL => add(ops::less_equal(x, t, s)?)?,
        b if b == GREATER | EQUAL => add(ops::greater_equal(x, t, s)?)?,
        b => {
            type Test = fn(&Array, &Array, &Stream) -> mlx_kernels::Result<Array>;
            let tests: [(u8, Test); 3] = [
                (LESS, ops::less),
                (EQUAL, ops::equal),
                (GREATER, ops::greater),
            ];
            for (bit, test) in tests {
                if b & bit != 0 {
                    add(test(x, t, s)?)?;
                }
            }
        }
    }
    if bits & NAN != 0 {
        add(ops::isnan(x, s)?)?;
    }
    match holds {
        Some(holds) => Ok(holds),
        None => Ok(ops::broadcast_to(&Array::scalar(false)?, &x.shape(), s)?),
    }
}

/// The MEMBER nodes' sets as one `[nodes, widest]` table padded with NaN (which equals nothing).
struct Sets {
    table: Array,
}

impl Sets {
    fn of(members: &[Vec<f32>]) -> Result<Option<Sets>> {
        let widest = members.iter().map(Vec::len).max().unwrap_or(0);
        if widest == 0 {
            return Ok(None);
        }
        let mut table = vec![f32::NAN; members.len() * widest];
        for (g, set) in members.iter().enumerate() {
            table[g * widest..g * widest + set.len()].copy_from_slice(set);
        }
        let table = Array::from_slice(&table, &[members.len() as i64, widest as i64])?;
        Ok(Some(Sets { table }))
    }

    /// Whether `x` (at nodes `at`) is in each node's set: by equality, or for a big set
    /// (`big`) by `(int32) x`, which ORT computes as int32's minimum for NaN, infinities and
    /// values past int32's range (never a member: such sets are declined).
    fn holds(&self, x: &Array, at: &Array, big: &Array, s: &Stream) -> Result<Array> {
        let limit = scalar_like(2_147_483_648.0, x, s)?;
        let in_range = ops::less(&ops::abs(x, s)?, &limit, s)?;
        let truncated = ops::where_(&in_range, &ops::trunc(x, s)?, &ops::negative(&limit, s)?, s)?;
        let key = ops::where_(big, &truncated, x, s)?;
        let set = ops::take(&self.table, at, 0, s)?;
        let hits = ops::equal(&ops::expand_dims(&key, &[-1], s)?, &set, s)?;
        let count = ops::sum(&ops::astype(&hits, Dtype::I32, s)?, &[-1], false, s)?;
        Ok(ops::greater(&count, &Array::scalar(0i32)?, s)?)
    }
}

/// `post_transform` other than ORT's five, or a forest ORT refuses: declined with the reason.
fn forest_claim(node: &Node, leaves: Leaves, outputs: usize) -> Verdict {
    let post = node.attr_or("post_transform", "NONE".to_string());
    if let Err(e) = PostTransform::named(&post) {
        return Verdict::decline(e.message);
    }
    if let Err(reason) = Forest::of(node, leaves, outputs) {
        return Verdict::decline(reason);
    }
    rank_1_or_2(node)
}

/// The rows `[N, F]` float32 (integers rounded to float32 as ORT converts them).
fn rows(x: &Array, s: &Stream) -> Result<Array> {
    super::linear::feature_rows(&float32(x, s)?, s)
}

/// Sums (or averages, minima, maxima) of the trees' leaf weights per target, plus the base
/// values ([`regress`]).
#[onnx_op(
    domain = "ai.onnx.ml", op = "TreeEnsembleRegressor", precision = Float32, since = 1, types(T = F32), inputs(X: T), outputs(Y: T),
    shape = ShapeKeyed, claim = regressor_claim,
    declines = "forests ORT refuses (mismatched attributes, unknown nodes, cycles) or builds by accident (a tree id in two runs, EQ chains with mixed NaN flags); non-finite weights; MIN/MAX with one target; an input of rank other than 1 or 2; nodes times outputs past 2^28"
)]
#[allow(clippy::too_many_arguments)] // ONNX's attribute list
fn tree_ensemble_regressor(
    cx: &mut Lower,
    x: Array,
    #[attr] aggregate_function: Option<String>,
    #[attr] n_targets: Option<i64>,
    #[attr] post_transform: Option<String>,
    // The forest's attributes are read through the node by `Forest::of`, the claim's reader.
    #[attr(name = "base_values")] _base: Option<Vec<f32>>,
    #[attr(name = "base_values_as_tensor", since = 3)] _base_tensor: Option<TensorValue>,
    #[attr(name = "nodes_falsenodeids")] _false: Option<Vec<i64>>,
    #[attr(name = "nodes_featureids")] _features: Option<Vec<i64>>,
    #[attr(name = "nodes_hitrates")] _hitrates: Option<Vec<f32>>,
    #[attr(name = "nodes_hitrates_as_tensor", since = 3)] _hitrates_tensor: Option<TensorValue>,
    #[attr(name = "nodes_missing_value_tracks_true")] _tracks: Option<Vec<i64>>,
    #[attr(name = "nodes_modes")] _modes: Option<Vec<String>>,
    #[attr(name = "nodes_nodeids")] _nodes: Option<Vec<i64>>,
    #[attr(name = "nodes_treeids")] _trees: Option<Vec<i64>>,
    #[attr(name = "nodes_truenodeids")] _true: Option<Vec<i64>>,
    #[attr(name = "nodes_values")] _values: Option<Vec<f32>>,
    #[attr(name = "nodes_values_as_tensor", since = 3)] _values_tensor: Option<TensorValue>,
    #[attr(name = "target_ids")] _ids: Option<Vec<i64>>,
    #[attr(name = "target_nodeids")] _weight_nodes: Option<Vec<i64>>,
    #[attr(name = "target_treeids")] _weight_trees: Option<Vec<i64>>,
    #[attr(name = "target_weights")] _weights: Option<Vec<f32>>,
    #[attr(name = "target_weights_as_tensor", since = 3)] _weights_tensor: Option<TensorValue>,
) -> Result<Array> {
    let s = cx.stream();
    let targets = n_targets.unwrap_or(0).max(0) as usize;
    let forest = Forest::of(cx.node(), Leaves::Target, targets).map_err(OpError::new)?;
    let transform = PostTransform::named(post_transform.as_deref().unwrap_or("NONE"))?;
    let aggregate = aggregate_function.unwrap_or_else(|| "SUM".into());
    regress(&forest, &x, &aggregate, transform, s)
}

/// The regression of `forest` over the rows `x`: per target, the trees' leaf weights combined
/// by `aggregate` (SUM, AVERAGE, MIN, MAX) plus the base values, transformed. One target: each
/// leaf's first weight (its `nodes_values` entry when it has none), and only PROBIT applies.
/// Several: every weight, a target no leaf voted for is 0, and the transform takes the row.
fn regress(
    forest: &Forest,
    x: &Array,
    aggregate: &str,
    transform: PostTransform,
    s: &Stream,
) -> Result<Array> {
    let targets = forest.outputs;
    let leaves = forest.leaves(&rows(x, s)?, s)?;
    if targets == 1 {
        let first: Vec<f32> = (0..forest.weights.len())
            .map(|g| {
                forest.weights[g]
                    .first()
                    .map_or(forest.value[g], |&(_, w)| w)
            })
            .collect();
        let per_tree = ops::take(
            &Array::from_slice(&first, &[first.len() as i64])?,
            &leaves,
            0,
            s,
        )?;
        let base = forest.base.first().copied().unwrap_or(0.0);
        let mut y = combine(&per_tree, aggregate, forest.trees(), s)?;
        y = ops::add(&y, &scalar_like(f64::from(base), &y, s)?, s)?;
        let y = ops::expand_dims(&y, &[1], s)?;
        return match transform {
            PostTransform::Probit => transform.apply(&y, s),
            _ => Ok(y),
        };
    }
    let (sum, voted) = match aggregate {
        "SUM" | "AVERAGE" => forest.sums(&leaves, s)?,
        _ => extreme_per_target(forest, &leaves, aggregate == "MAX", s)?,
    };
    let mut y = if aggregate == "AVERAGE" {
        ops::divide(&sum, &scalar_like(forest.trees() as f64, &sum, s)?, s)?
    } else {
        sum
    };
    if forest.base.len() == targets {
        y = ops::add(&y, &Array::from_slice(&forest.base, &[targets as i64])?, s)?;
    }
    let y = ops::where_(&voted, &y, &scalar_like(0.0, &y, s)?, s)?;
    transform.apply(&y, s)
}

/// One output per tree ([N, trees]) combined by `aggregate`.
fn combine(per_tree: &Array, aggregate: &str, trees: usize, s: &Stream) -> Result<Array> {
    Ok(match aggregate {
        "SUM" => ops::sum(per_tree, &[1], false, s)?,
        "AVERAGE" => {
            let sum = ops::sum(per_tree, &[1], false, s)?;
            ops::divide(&sum, &scalar_like(trees as f64, &sum, s)?, s)?
        }
        "MIN" => ops::min(per_tree, &[1], false, s)?,
        "MAX" => ops::max(per_tree, &[1], false, s)?,
        other => {
            return Err(OpError::new(format!(
                "aggregate_function '{other}' is unknown"
            )))
        }
    })
}

/// Per target, the smallest (or largest) weight any tree's leaf gives it, and whether any did.
fn extreme_per_target(
    forest: &Forest,
    leaves: &Array,
    largest: bool,
    s: &Stream,
) -> Result<(Array, Array)> {
    let nodes = forest.weights.len();
    let outputs = forest.outputs;
    let none = if largest {
        f32::NEG_INFINITY
    } else {
        f32::INFINITY
    };
    let mut table = vec![none; nodes * outputs];
    for (g, pairs) in forest.weights.iter().enumerate() {
        for &(output, weight) in pairs {
            let slot = &mut table[g * outputs + output];
            *slot = if largest {
                slot.max(weight)
            } else {
                slot.min(weight)
            };
        }
    }
    let per_leaf = ops::take(
        &Array::from_slice(&table, &[nodes as i64, outputs as i64])?,
        leaves,
        0,
        s,
    )?;
    let extreme = if largest {
        ops::max(&per_leaf, &[1], false, s)?
    } else {
        ops::min(&per_leaf, &[1], false, s)?
    };
    let voted = ops::not_equal(&extreme, &scalar_like(f64::from(none), &extreme, s)?, s)?;
    Ok((extreme, voted))
}

fn regressor_claim(node: &Node) -> Verdict {
    let targets = node.attr_or("n_targets", 0i64);
    let aggregate = node.attr_or("aggregate_function", "SUM".to_string());
    if targets < 1 {
        return Verdict::decline("n_targets is absent or below 1 (ORT refuses it)");
    }
    if !["SUM", "AVERAGE", "MIN", "MAX"].contains(&aggregate.as_str()) {
        return Verdict::decline(format!("aggregate_function '{aggregate}' is unknown"));
    }
    let base = node
        .attr_as::<Vec<f32>>("base_values")
        .map_or(0, |b| b.len());
    if base != 0 && base as i64 != targets {
        return Verdict::decline(format!(
            "{base} base values for {targets} targets (ORT refuses it)"
        ));
    }
    forest_claim(node, Leaves::Target, targets as usize)
}

/// TreeEnsemble-5: the regression of [`regress`] over a forest given as interior nodes and
/// leaves, with set-membership branches. `aggregate_function` 0-3 is AVERAGE, SUM, MIN, MAX;
/// `post_transform` follows ORT's numbering, 1 LOGISTIC and 2 SOFTMAX (ONNX's text swaps them;
/// ORT is the oracle).
#[onnx_op(
    domain = "ai.onnx.ml", op = "TreeEnsemble", precision = Float32, since = 5, types(T = F32), inputs(X: T), outputs(Y: T),
    shape = ShapeKeyed, claim = tree_ensemble_claim,
    declines = "float64 (MLX's GPUs have none); forests ORT refuses; big membership sets with values past 2^24; non-finite weights; an input of rank other than 1 or 2; nodes times targets or set members past 2^28"
)]
#[allow(clippy::too_many_arguments)] // ONNX's attribute list
fn tree_ensemble(
    cx: &mut Lower,
    x: Array,
    #[attr] aggregate_function: Option<i64>,
    #[attr] n_targets: Option<i64>,
    #[attr] post_transform: Option<i64>,
    // The forest's attributes are read through the node by `Forest::of_v5`, the claim's reader.
    #[attr(name = "tree_roots")] _roots: Option<Vec<i64>>,
    #[attr(name = "nodes_featureids")] _features: Option<Vec<i64>>,
    #[attr(name = "nodes_splits")] _splits: Option<TensorValue>,
    #[attr(name = "nodes_modes")] _modes: Option<TensorValue>,
    #[attr(name = "nodes_truenodeids")] _true: Option<Vec<i64>>,
    #[attr(name = "nodes_trueleafs")] _true_leafs: Option<Vec<i64>>,
    #[attr(name = "nodes_falsenodeids")] _false: Option<Vec<i64>>,
    #[attr(name = "nodes_falseleafs")] _false_leafs: Option<Vec<i64>>,
    #[attr(name = "nodes_missing_value_tracks_true")] _tracks: Option<Vec<i64>>,
    #[attr(name = "nodes_hitrates")] _hitrates: Option<TensorValue>,
    #[attr(name = "leaf_targetids")] _targets: Option<Vec<i64>>,
    #[attr(name = "leaf_weights")] _weights: Option<TensorValue>,
    #[attr(name = "membership_values")] _members: Option<TensorValue>,
) -> Result<Array> {
    let s = cx.stream();
    let targets = n_targets.unwrap_or(0).max(0) as usize;
    let forest = Forest::of_v5(cx.node(), targets).map_err(OpError::new)?;
    let transform = ensemble_transform(post_transform.unwrap_or(0))?;
    let aggregate = ensemble_aggregate(aggregate_function.unwrap_or(1))?;
    regress(&forest, &x, aggregate, transform, s)
}

fn ensemble_transform(code: i64) -> Result<PostTransform> {
    let name = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]
        .get(code as usize)
        .filter(|_| code >= 0)
        .ok_or_else(|| OpError::new(format!("post_transform {code} is not one of 0-4")))?;
    PostTransform::named(name)
}

fn ensemble_aggregate(code: i64) -> Result<&'static str> {
    ["AVERAGE", "SUM", "MIN", "MAX"]
        .get(code as usize)
        .filter(|_| code >= 0)
        .copied()
        .ok_or_else(|| OpError::new(format!("aggregate_function {code} is not one of 0-3")))
}

fn tree_ensemble_claim(node: &Node) -> Verdict {
    let targets = node.attr_or("n_targets", 0i64);
    if targets < 1 {
        return Verdict::decline("n_targets is absent or below 1 (ORT refuses it)");
    }
    let codes = (
        ensemble_transform(node.attr_or("post_transform", 0i64)),
        ensemble_aggregate(node.attr_or("aggregate_function", 1i64)),
    );
    if let (Err(e), _) | (_, Err(e)) = codes {
        return Verdict::decline(e.message);
    }
    if let Err(reason) = Forest::of_v5(node, targets as usize) {
        return Verdict::decline(reason);
    }
    rank_1_or_2(node)
}

/// The classes' summed leaf weights, with ORT's rules for labels and scores: with three or
/// more classes the base values join every class and the label is the first class with the
/// largest raw sum among those with one; with two, ORT's binary layouts (see `two_classes`).
#[onnx_op(
    domain = "ai.onnx.ml", op = "TreeEnsembleClassifier", precision = Float32, since = 1,
    types(T = F32 | I64 | I32, L = I64, F = F32), inputs(X: T), outputs(Y: L, Z: F),
    shape = ShapeKeyed, claim = classifier_claim,
    declines = "string labels; fewer than two classes; PROBIT on two classes and two-class forests whose scores ORT leaves partly unwritten; forests ORT refuses or builds by accident; non-finite weights; nodes times classes past 2^28"
)]
#[allow(clippy::too_many_arguments)] // ONNX's attribute list
fn tree_ensemble_classifier(
    cx: &mut Lower,
    x: Array,
    #[attr] classlabels_int64s: Option<Vec<i64>>,
    #[attr] post_transform: Option<String>,
    // The forest's attributes are read through the node by `Forest::of`, the claim's reader.
    #[attr(name = "classlabels_strings")] _strings: Option<Vec<String>>,
    #[attr(name = "base_values")] _base: Option<Vec<f32>>,
    #[attr(name = "base_values_as_tensor", since = 3)] _base_tensor: Option<TensorValue>,
    #[attr(name = "nodes_falsenodeids")] _false: Option<Vec<i64>>,
    #[attr(name = "nodes_featureids")] _features: Option<Vec<i64>>,
    #[attr(name = "nodes_hitrates")] _hitrates: Option<Vec<f32>>,
    #[attr(name = "nodes_hitrates_as_tensor", since = 3)] _hitrates_tensor: Option<TensorValue>,
    #[attr(name = "nodes_missing_value_tracks_true")] _tracks: Option<Vec<i64>>,
    #[attr(name = "nodes_modes")] _modes: Option<Vec<String>>,
    #[attr(name = "nodes_nodeids")] _nodes: Option<Vec<i64>>,
    #[attr(name = "nodes_treeids")] _trees: Option<Vec<i64>>,
    #[attr(name = "nodes_truenodeids")] _true: Option<Vec<i64>>,
    #[attr(name = "nodes_values")] _values: Option<Vec<f32>>,
    #[attr(name = "nodes_values_as_tensor", since = 3)] _values_tensor: Option<TensorValue>,
    #[attr(name = "class_ids")] _ids: Option<Vec<i64>>,
    #[attr(name = "class_nodeids")] _weight_nodes: Option<Vec<i64>>,
    #[attr(name = "class_treeids")] _weight_trees: Option<Vec<i64>>,
    #[attr(name = "class_weights")] _weights: Option<Vec<f32>>,
    #[attr(name = "class_weights_as_tensor", since = 3)] _weights_tensor: Option<TensorValue>,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let labels = classlabels_int64s.unwrap_or_default();
    let forest = Forest::of(cx.node(), Leaves::Class, labels.len()).map_err(OpError::new)?;
    let transform = PostTransform::named(post_transform.as_deref().unwrap_or("NONE"))?;
    let leaves = forest.leaves(&rows(&x, s)?, s)?;
    let (sum, voted) = forest.sums(&leaves, s)?;
    if labels.len() == 2 {
        return two_classes(cx.node(), &forest, &labels, &sum, &voted, transform, s);
    }
    let (mut sum, mut voted) = (sum, voted);
    if !forest.base.is_empty() {
        sum = ops::add(
            &sum,
            &Array::from_slice(&forest.base, &[labels.len() as i64])?,
            s,
        )?;
        voted = ops::broadcast_to(&Array::scalar(true)?, &sum.shape(), s)?;
    } else {
        let any = ops::max(&ops::astype(&voted, Dtype::I32, s)?, &[1], false, s)?;
        cx.require(
            &ops::greater(&any, &Array::scalar(0i32)?, s)?,
            "a row no tree gave any class a score (ORT fails with narrowing_error)",
        )?;
    }
    let floor = scalar_like(f64::NEG_INFINITY, &sum, s)?;
    let best = first_max(&ops::where_(&voted, &sum, &floor, s)?, s)?;
    let scores = ops::where_(&voted, &sum, &scalar_like(0.0, &sum, s)?, s)?;
    Ok(vec![
        label_of(&labels, &best, s)?,
        transform.apply(&scores, s)?,
    ])
}

/// Two classes, as ORT's kernel treats them. A "binary" forest (weights for one class id
/// only) labels by the score `pos` against 0.5 (all weights ≥ 0) or 0, and when one score
/// column is all it has writes `[1 - p, p]` (`p` the score or its logistic) for the first
/// rule and `[-s, s]` (`[σ(-s), σ(s)]`) for the second. A forest with both class ids labels
/// the literal 1 or 0 by the second score against 0. Base values shift the scores first.
fn two_classes(
    node: &Node,
    forest: &Forest,
    labels: &[i64],
    sum: &Array,
    voted: &Array,
    transform: PostTransform,
    s: &Stream,
) -> Result<Vec<Array>> {
    let column =
        |a: &Array, i: i32| ops::slice(a, &[0, i], &[a.shape()[0] as i32, i + 1], &[1, 1], s);
    let (mut p0, mut p1) = (column(sum, 0)?, column(sum, 1)?);
    let (has0, has1) = (column(voted, 0)?, column(voted, 1)?);
    let zero = scalar_like(0.0, &p0, s)?;
    let base = &forest.base;
    let like = zero.clone();
    let c = |v: f32| scalar_like(f64::from(v), &like, s);
    // ORT's `size`: whether the row keeps two score columns.
    let two_columns = match base.len() {
        2 => {
            let shifted1 = ops::add(&c(base[1])?, &p0, s)?;
            let new1 = ops::where_(&has1, &shifted1, &ops::add(&p1, &c(base[1])?, s)?, s)?;
            let new0 = ops::where_(
                &has1,
                &ops::negative(&shifted1, s)?,
                &ops::add(&p0, &c(base[0])?, s)?,
                s,
            )?;
            p0 = new0;
            p1 = new1;
            ops::broadcast_to(&Array::scalar(true)?, &has1.shape(), s)?
        }
        1 => {
            p0 = ops::add(&p0, &c(base[0])?, s)?;
            has1.clone()
        }
        _ => has1.clone(),
    };
    let p0_or_0 = ops::where_(&has0, &p0, &zero, s)?;
    let p1_or_0 = ops::where_(&has1, &p1, &zero, s)?;
    let pos = ops::where_(&ops::logical_and(&two_columns, &has1, s)?, &p1, &p0_or_0, s)?;
    let ids = node.attr_as::<Vec<i64>>("class_ids").unwrap_or_default();
    let binary = ids.iter().all(|&id| id == ids[0]);
    let all_positive = forest.weights.iter().flatten().all(|&(_, w)| w >= 0.0);
    let threshold = if binary && all_positive { 0.5 } else { 0.0 };
    let second = ops::greater(&pos, &c(threshold)?, s)?;
    let index = ops::reshape(&ops::astype(&second, Dtype::I32, s)?, &[-1], s)?;
    let label = if binary {
        label_of(labels, &index, s)?
    } else {
        ops::astype(&index, Dtype::I64, s)?
    };
    let both = transform.apply(&ops::concatenate(&[p0_or_0.clone(), p1_or_0], 1, s)?, s)?;
    let single = if binary && all_positive {
        binary_columns(&p0_or_0, transform, s)?
    } else {
        match transform {
            PostTransform::Logistic => ops::concatenate(
                &[
                    logistic(&ops::negative(&p0_or_0, s)?, s)?,
                    logistic(&p0_or_0, s)?,
                ],
                1,
                s,
            )?,
            _ => {
                let minus = ops::where_(&has0, &ops::negative(&p0, s)?, &zero, s)?;
                ops::concatenate(&[minus, p0_or_0], 1, s)?
            }
        }
    };
    let scores = ops::where_(&two_columns, &both, &single, s)?;
    Ok(vec![label, scores])
}

fn classifier_claim(node: &Node) -> Verdict {
    if node.attr_as::<Vec<String>>("classlabels_strings").is_some() {
        return Verdict::decline("string labels (MLX holds no strings)");
    }
    let classes = node
        .attr_as::<Vec<i64>>("classlabels_int64s")
        .map_or(0, |l| l.len());
    if classes < 2 {
        return Verdict::decline(format!("{classes} class labels: two or more are claimed"));
    }
    let base = node
        .attr_as::<Vec<f32>>("base_values")
        .map_or(0, |b| b.len());
    let post = node.attr_or("post_transform", "NONE".to_string());
    if classes == 2 {
        let ids = node.attr_as::<Vec<i64>>("class_ids").unwrap_or_default();
        let binary = ids.iter().all(|&id| ids.first() == Some(&id));
        if post == "PROBIT" || base > 2 || (!binary && base == 1) {
            return Verdict::decline(format!(
                "two classes with {post} and {base} base values: ORT leaves part of the scores \
                 unwritten or refuses it"
            ));
        }
    } else if base != 0 && base != classes {
        return Verdict::decline(format!(
            "{base} base values for {classes} classes (ORT refuses it)"
        ));
    }
    forest_claim(node, Leaves::Class, classes)
}
