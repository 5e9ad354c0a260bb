//! Label history through a group path: for each query row, the labels of the known rows that
//! share one of its groups (itself excluded; with as_of, only rows strictly earlier than the
//! query's *cut*, its own as_of unless a horizon sets an earlier one), the as_of of the newest of
//! them, and how many rows of any label (or none) share a group and are strictly earlier than the
//! row itself. One sweep in time order with running counts per group; rows with equal as_of all
//! read before any of them is added. O(pairs x width + rows log rows).

use crate::GroupPath;
use std::collections::HashMap;

/// Label as seen by the features: class index or number.
#[derive(Clone, Copy)]
pub(crate) enum Y {
    Class(u32),
    Num(f64),
}

/// What [`stats`] returns for `nq` queries.
pub(crate) struct PathStats {
    /// `nq x width` row-major: per-class counts (categories) or [sum, count] (numbers), summed
    /// over the query's groups.
    pub(crate) counts: Vec<f64>,
    /// The as_of of the newest counted label (NaN: none counted, or no as_of).
    pub(crate) newest: Vec<f64>,
    /// Rows (labelled or not) sharing a group, strictly earlier than the query's own as_of
    /// (without as_of: every other row), summed over its groups.
    pub(crate) rows: Vec<f64>,
}

impl PathStats {
    fn new(nq: usize, width: usize) -> PathStats {
        PathStats {
            counts: vec![0f64; nq * width],
            newest: vec![f64::NAN; nq],
            rows: vec![0f64; nq],
        }
    }
}

/// Groups per row, as a CSR over row indices below `n` (duplicate pairs dropped).
struct Groups {
    ptr: Vec<usize>,
    gid: Vec<u32>,
    ngroups: usize,
}

impl Groups {
    fn new(path: &GroupPath, n: usize) -> Groups {
        let mut ids: HashMap<u64, u32> = HashMap::new();
        let mut pairs: Vec<(u32, u32)> = path
            .pairs
            .iter()
            .filter(|p| (p.0 as usize) < n)
            .map(|&(r, g)| {
                let l = ids.len() as u32;
                (r, *ids.entry(g).or_insert(l))
            })
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        let mut ptr = vec![0usize; n + 1];
        for &(r, _) in &pairs {
            ptr[r as usize + 1] += 1;
        }
        for i in 0..n {
            ptr[i + 1] += ptr[i];
        }
        Groups {
            ptr,
            gid: pairs.into_iter().map(|p| p.1).collect(),
            ngroups: ids.len(),
        }
    }
    fn of(&self, r: usize) -> &[u32] {
        &self.gid[self.ptr[r]..self.ptr[r + 1]]
    }
}

fn add(acc: &mut [f64], g: usize, width: usize, y: Y, sign: f64) {
    match y {
        Y::Class(c) => acc[g * width + c as usize] += sign,
        Y::Num(v) => {
            acc[g * width] += sign * v;
            acc[g * width + 1] += sign;
        }
    }
}

/// The history of the `queries` (row indices below `n`) through `path`. With `as_of`, query row
/// `q` counts the known labels of rows with as_of strictly below `cut[q]` (`cut` has a time per
/// row; default: the row's own as_of; a horizon passes an earlier time, never a later one: the
/// caller's promise), and
/// the rows of [`PathStats::rows`] strictly below its own as_of. Without as_of: every other row
/// (leave-one-out), `cut` unused.
pub(crate) fn stats(
    path: &GroupPath,
    n: usize,
    as_of: Option<&[f64]>,
    known: &[Option<Y>],
    width: usize,
    queries: &[u32],
    cut: Option<&[f64]>,
) -> PathStats {
    let g = Groups::new(path, n);
    let nq = queries.len();
    let mut out = PathStats::new(nq, width);
    let mut acc = vec![0f64; g.ngroups * width];
    match as_of {
        None => {
            let mut size = vec![0f64; g.ngroups];
            for (r, y) in known.iter().enumerate().take(n) {
                for &gi in g.of(r) {
                    size[gi as usize] += 1.0;
                    if let Some(y) = *y {
                        add(&mut acc, gi as usize, width, y, 1.0);
                    }
                }
            }
            for (qi, &q) in queries.iter().enumerate() {
                let q = q as usize;
                let row = &mut out.counts[qi * width..(qi + 1) * width];
                for &gi in g.of(q) {
                    let gi = gi as usize;
                    for c in 0..width {
                        row[c] += acc[gi * width + c];
                    }
                    out.rows[qi] += size[gi] - 1.0;
                    // Leave itself out: its own label counted once per group it is in.
                    if let Some(y) = known[q] {
                        let mut one = vec![0f64; width];
                        add(&mut one, 0, width, y, 1.0);
                        for c in 0..width {
                            row[c] -= one[c];
                        }
                    }
                }
            }
        }
        Some(t) => {
            let read_at = |qi: usize| {
                let q = queries[qi] as usize;
                cut.map_or(t[q], |c| c[q])
            };
            // Labels, in time order; the queries in the order of their cuts.
            let mut adds: Vec<usize> = (0..n).filter(|&r| known[r].is_some()).collect();
            adds.sort_by(|&a, &b| t[a].total_cmp(&t[b]).then(a.cmp(&b)));
            let mut reads: Vec<usize> = (0..nq).collect();
            reads.sort_by(|&a, &b| read_at(a).total_cmp(&read_at(b)).then(a.cmp(&b)));
            let mut newest = vec![f64::NEG_INFINITY; g.ngroups];
            let mut a = 0;
            for &qi in &reads {
                let at = read_at(qi);
                while a < adds.len() && t[adds[a]] < at {
                    let r = adds[a];
                    for &gi in g.of(r) {
                        add(&mut acc, gi as usize, width, known[r].unwrap(), 1.0);
                        newest[gi as usize] = t[r];
                    }
                    a += 1;
                }
                let row = &mut out.counts[qi * width..(qi + 1) * width];
                let mut nw = f64::NEG_INFINITY;
                for &gi in g.of(queries[qi] as usize) {
                    let gi = gi as usize;
                    for c in 0..width {
                        row[c] += acc[gi * width + c];
                    }
                    nw = nw.max(newest[gi]);
                }
                if nw > f64::NEG_INFINITY {
                    out.newest[qi] = nw;
                }
            }
            // Every row, labelled or not, read at the query's own as_of.
            let mut all: Vec<usize> = (0..n).filter(|&r| !g.of(r).is_empty()).collect();
            all.sort_by(|&a, &b| t[a].total_cmp(&t[b]).then(a.cmp(&b)));
            reads.sort_by(|&a, &b| {
                let (ta, tb) = (t[queries[a] as usize], t[queries[b] as usize]);
                ta.total_cmp(&tb).then(a.cmp(&b))
            });
            let mut size = vec![0f64; g.ngroups];
            let mut a = 0;
            for &qi in &reads {
                let at = t[queries[qi] as usize];
                while a < all.len() && t[all[a]] < at {
                    for &gi in g.of(all[a]) {
                        size[gi as usize] += 1.0;
                    }
                    a += 1;
                }
                out.rows[qi] = g
                    .of(queries[qi] as usize)
                    .iter()
                    .map(|&gi| size[gi as usize])
                    .sum();
            }
        }
    }
    out
}

/// [`stats`] for a few `queries` (one row's prediction: `tributary_predict`), without the sweep
/// over every row: for each query, one pass over the path's pairs. O(pairs x queries), where the
/// sweep's sort of all rows would cost more than the row. The same results as [`stats`] (class
/// counts exactly; number sums up to the order of the additions).
pub(crate) fn stats_for(
    path: &GroupPath,
    n: usize,
    as_of: Option<&[f64]>,
    known: &[Option<Y>],
    width: usize,
    queries: &[u32],
    cut: Option<&[f64]>,
) -> PathStats {
    let nq = queries.len();
    let mut out = PathStats::new(nq, width);
    for (qi, &q) in queries.iter().enumerate() {
        let groups: std::collections::HashSet<u64> = path
            .pairs
            .iter()
            .filter(|p| p.0 == q)
            .map(|p| p.1)
            .collect();
        if groups.is_empty() || q as usize >= n {
            continue;
        }
        let at = as_of.map(|t| cut.map_or(t[q as usize], |c| c[q as usize]));
        let mut seen: std::collections::HashSet<(u32, u64)> = std::collections::HashSet::new();
        let row = &mut out.counts[qi * width..(qi + 1) * width];
        let mut nw = f64::NEG_INFINITY;
        for &(j, g) in &path.pairs {
            if j == q || (j as usize) >= n || !groups.contains(&g) || !seen.insert((j, g)) {
                continue;
            }
            if let Some(t) = as_of {
                if t[j as usize].total_cmp(&t[q as usize]).is_lt() {
                    out.rows[qi] += 1.0;
                }
                if t[j as usize].total_cmp(&at.unwrap()).is_ge() {
                    continue;
                }
            } else {
                out.rows[qi] += 1.0;
            }
            let Some(y) = known[j as usize] else {
                continue;
            };
            match y {
                Y::Class(c) => row[c as usize] += 1.0,
                Y::Num(v) => {
                    row[0] += v;
                    row[1] += 1.0;
                }
            }
            if let Some(t) = as_of {
                nw = nw.max(t[j as usize]);
            }
        }
        if nw > f64::NEG_INFINITY {
            out.newest[qi] = nw;
        }
    }
    out
}

/// The path of rows sharing both a group of `a` and one of `b` (an entity's history restricted
/// to the rows that share this row's other parent: a customer's purchases in this product's
/// category): one group per pair of groups a row is in. With `check` (training), None when it
/// would add nothing: a row in more than one group of either path (a link table: the product
/// of its groups), one path's groups determining the other's (as many pairs as the groups of
/// one of them), or fewer than two rows a pair on average.
pub(crate) fn cross(a: &GroupPath, b: &GroupPath, n: usize, check: bool) -> Option<GroupPath> {
    let of = |p: &GroupPath| -> (Vec<Vec<u64>>, bool) {
        let mut g: Vec<Vec<u64>> = vec![Vec::new(); n];
        for &(r, x) in &p.pairs {
            if (r as usize) < n && !g[r as usize].contains(&x) {
                g[r as usize].push(x);
            }
        }
        let single = g.iter().all(|v| v.len() <= 1);
        (g, single)
    };
    let ((ga, sa), (gb, sb)) = (of(a), of(b));
    if check && !(sa && sb) {
        return None;
    }
    let mut pairs = Vec::new();
    let mut da = std::collections::HashSet::new();
    let mut db = std::collections::HashSet::new();
    let mut dab = std::collections::HashSet::new();
    for r in 0..n {
        for &x in &ga[r] {
            for &y in &gb[r] {
                da.insert(x);
                db.insert(y);
                dab.insert((x, y));
                // Both ids into one (a 64-bit mix of the pair; a collision merges two groups).
                let id = x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
                    ^ y.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
                pairs.push((r as u32, id));
            }
        }
    }
    if check && (dab.len() == da.len() || dab.len() == db.len() || dab.len() * 2 > pairs.len()) {
        return None;
    }
    Some(GroupPath {
        name: format!("{}&{}", a.name, b.name),
        pairs,
    })
}

/// The crossed paths of a training run: each pair of the first `from` paths in which every row
/// has at most one group, where the pair says more than either path alone ([`cross`]). Returns
/// the pairs (indices into `paths`) and their paths.
pub(crate) fn crossings(
    paths: &[GroupPath],
    n: usize,
    from: usize,
) -> (Vec<(usize, usize)>, Vec<GroupPath>) {
    let single: Vec<usize> = (0..paths.len())
        .filter(|&i| {
            let mut seen = vec![u64::MAX; n];
            paths[i].pairs.iter().all(|&(r, g)| {
                let r = r as usize;
                r >= n || std::mem::replace(&mut seen[r], g) == u64::MAX || seen[r] == g
            })
        })
        .take(from)
        .collect();
    let mut pairs = Vec::new();
    let mut crossed = Vec::new();
    for (i, &a) in single.iter().enumerate() {
        for &b in &single[i + 1..] {
            if let Some(p) = cross(&paths[a], &paths[b], n, true) {
                pairs.push((a, b));
                crossed.push(p);
            }
        }
    }
    (pairs, crossed)
}

/// The blocked scheme's cut of every row (length of `t`; a row not in `rows` keeps its own
/// as_of): `rows` (row indices in as_of order) make `blocks` blocks of equal size, and a row of
/// a block reads the labels strictly before the block's first row.
pub(crate) fn blocked_cuts(t: &[f64], rows: &[usize], blocks: usize) -> Vec<f64> {
    let mut cut = t.to_vec();
    let n = rows.len();
    for b in 0..blocks {
        let block = &rows[b * n / blocks..(b + 1) * n / blocks];
        if let Some(&first) = block.first() {
            for &r in block {
                cut[r] = t[first];
            }
        }
    }
    cut
}
