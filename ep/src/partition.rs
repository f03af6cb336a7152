//! Groups the claimed nodes of a graph into clusters that ORT can fuse.
//!
//! A cluster is connected, and contracting every cluster to one node must leave the graph
//! acyclic: a path that leaves a cluster through an unclaimed node (or another cluster) and
//! comes back would make the fused graph cyclic, which ORT rejects. Clusters grow greedily in
//! topological order, then merge with neighbours until none can grow.

/// `predecessors[v]` lists the nodes whose outputs `v` consumes (indices into the same list).
/// Returns the clusters, each in topological order, ordered by their first node.
pub fn clusters(predecessors: &[Vec<usize>], claimed: &[bool]) -> Vec<Vec<usize>> {
    let n = predecessors.len();
    let order = topological_order(predecessors);
    let mut sets = DisjointSets::new(n);
    let claimed_edges: Vec<(usize, usize)> = order
        .iter()
        .flat_map(|&v| predecessors[v].iter().map(move |&u| (u, v)))
        .filter(|&(u, v)| claimed[u] && claimed[v])
        .collect();
    // The first pass grows clusters along edges in topological order; later passes merge
    // neighbours that an earlier decision kept apart, until nothing changes.
    loop {
        let mut merged = false;
        for &(u, v) in &claimed_edges {
            merged |= try_merge(&mut sets, predecessors, u, v);
        }
        if !merged {
            break;
        }
    }
    let position: Vec<usize> = {
        let mut p = vec![0; n];
        for (i, &v) in order.iter().enumerate() {
            p[v] = i;
        }
        p
    };
    let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for &v in &order {
        if claimed[v] {
            groups.entry(sets.find(v)).or_default().push(v);
        }
    }
    let mut result: Vec<Vec<usize>> = groups.into_values().collect();
    result.sort_by_key(|c| position[c[0]]);
    result
}

/// Merges the clusters of `a` and `b` if the contracted graph stays acyclic.
fn try_merge(sets: &mut DisjointSets, predecessors: &[Vec<usize>], a: usize, b: usize) -> bool {
    let (ra, rb) = (sets.find(a), sets.find(b));
    if ra == rb {
        return false;
    }
    let saved = sets.parent.clone();
    sets.parent[rb] = ra;
    if contracted_is_acyclic(sets, predecessors) {
        true
    } else {
        sets.parent = saved;
        false
    }
}

fn contracted_is_acyclic(sets: &mut DisjointSets, predecessors: &[Vec<usize>]) -> bool {
    let n = predecessors.len();
    let root: Vec<usize> = (0..n).map(|v| sets.find(v)).collect();
    let mut indegree = vec![0usize; n];
    let mut successors = vec![Vec::new(); n];
    for (v, preds) in predecessors.iter().enumerate() {
        for &u in preds {
            let (ru, rv) = (root[u], root[v]);
            if ru != rv {
                successors[ru].push(rv);
                indegree[rv] += 1;
            }
        }
    }
    let mut ready: Vec<usize> = (0..n)
        .filter(|&v| root[v] == v && indegree[v] == 0)
        .collect();
    let mut seen = 0;
    let groups = (0..n).filter(|&v| root[v] == v).count();
    while let Some(v) = ready.pop() {
        seen += 1;
        for &w in &successors[v] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.push(w);
            }
        }
    }
    seen == groups
}

/// Kahn's algorithm; nodes on a cycle (not expected from ORT) are appended in index order.
pub fn topological_order(predecessors: &[Vec<usize>]) -> Vec<usize> {
    let n = predecessors.len();
    let mut indegree: Vec<usize> = predecessors.iter().map(Vec::len).collect();
    let mut successors = vec![Vec::new(); n];
    for (v, preds) in predecessors.iter().enumerate() {
        for &u in preds {
            successors[u].push(v);
        }
    }
    let mut ready: std::collections::VecDeque<usize> =
        (0..n).filter(|&v| indegree[v] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(v) = ready.pop_front() {
        order.push(v);
        for &w in &successors[v] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.push_back(w);
            }
        }
    }
    if order.len() < n {
        let placed: std::collections::HashSet<usize> = order.iter().copied().collect();
        order.extend((0..n).filter(|v| !placed.contains(v)));
    }
    order
}

struct DisjointSets {
    parent: Vec<usize>,
}

impl DisjointSets {
    fn new(n: usize) -> Self {
        DisjointSets {
            parent: (0..n).collect(),
        }
    }

    fn find(&mut self, mut v: usize) -> usize {
        while self.parent[v] != v {
            self.parent[v] = self.parent[self.parent[v]];
            v = self.parent[v];
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A random DAG: edges only from lower to higher indices.
    fn dag() -> impl Strategy<Value = (Vec<Vec<usize>>, Vec<bool>)> {
        (1usize..28).prop_flat_map(|n| {
            let edges =
                prop::collection::vec(prop::collection::vec(prop::bool::weighted(0.18), n), n);
            let claimed = prop::collection::vec(prop::bool::weighted(0.7), n);
            (edges, claimed).prop_map(move |(matrix, claimed)| {
                let preds = (0..n)
                    .map(|v| (0..v).filter(|&u| matrix[v][u]).collect())
                    .collect();
                (preds, claimed)
            })
        })
    }

    fn acyclic_with(preds: &[Vec<usize>], cluster_of: &[Option<usize>]) -> bool {
        let n = preds.len();
        let mut sets = DisjointSets::new(n);
        let mut leader = std::collections::HashMap::new();
        for (v, cluster) in cluster_of.iter().enumerate() {
            if let Some(c) = *cluster {
                let l = *leader.entry(c).or_insert(v);
                let (rl, rv) = (sets.find(l), sets.find(v));
                sets.parent[rv] = rl;
            }
        }
        contracted_is_acyclic(&mut sets, preds)
    }

    fn connected(cluster: &[usize], preds: &[Vec<usize>]) -> bool {
        let members: std::collections::HashSet<usize> = cluster.iter().copied().collect();
        let mut seen = std::collections::HashSet::from([cluster[0]]);
        let mut stack = vec![cluster[0]];
        while let Some(v) = stack.pop() {
            for &w in cluster {
                let adjacent = preds[v].contains(&w) || preds[w].contains(&v);
                if adjacent && members.contains(&w) && seen.insert(w) {
                    stack.push(w);
                }
            }
        }
        seen.len() == cluster.len()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn clusters_are_fusable_complete_and_maximal((preds, claimed) in dag()) {
            let found = clusters(&preds, &claimed);
            let n = preds.len();
            let mut cluster_of = vec![None; n];
            for (c, cluster) in found.iter().enumerate() {
                for &v in cluster {
                    prop_assert!(claimed[v], "unclaimed node {} in a cluster", v);
                    prop_assert!(cluster_of[v].is_none(), "node {} in two clusters", v);
                    cluster_of[v] = Some(c);
                }
                prop_assert!(connected(cluster, &preds), "cluster {:?} is not connected", cluster);
            }
            for v in 0..n {
                prop_assert_eq!(claimed[v], cluster_of[v].is_some(), "claimed node {} left out", v);
            }
            // Every cluster convex, and the whole contraction acyclic.
            prop_assert!(acyclic_with(&preds, &cluster_of));
            // No cluster can grow: merging any two adjacent clusters would create a cycle.
            for v in 0..n {
                for &u in &preds[v] {
                    if let (Some(a), Some(b)) = (cluster_of[u], cluster_of[v]) {
                        if a != b {
                            let merged: Vec<Option<usize>> =
                                cluster_of.iter().map(|c| c.map(|c| if c == b { a } else { c })).collect();
                            prop_assert!(!acyclic_with(&preds, &merged), "clusters {} and {} could merge", a, b);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_path_through_an_unclaimed_node_splits_the_cluster() {
        // 0 -> 1 (unclaimed) -> 2, and 0 -> 2: fusing {0, 2} would be a cycle through 1.
        let preds = vec![vec![], vec![0], vec![0, 1]];
        assert_eq!(
            clusters(&preds, &[true, false, true]),
            vec![vec![0], vec![2]]
        );
        // All claimed: one cluster.
        assert_eq!(clusters(&preds, &[true, true, true]), vec![vec![0, 1, 2]]);
    }
}
