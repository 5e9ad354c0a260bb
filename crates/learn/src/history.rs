//! Label history through a group path: for each row, the labels of the known rows that share one
//! of its groups (itself excluded; with as_of, only rows strictly earlier). One sweep in as_of
//! order with running counts per group; rows with equal as_of all read before any of them is
//! added. O(pairs x width).

use crate::GroupPath;
use std::collections::HashMap;

/// Label as seen by the features: class index or number.
#[derive(Clone, Copy)]
pub(crate) enum Y {
    Class(u32),
    Num(f64),
}

/// Per row: `width` values = per-class counts (categories) or [sum, count] (numbers), summed over
/// the row's groups. Returns (n x width) row-major f64.
pub(crate) fn counts(
    path: &GroupPath,
    n: usize,
    as_of: Option<&[f64]>,
    known: &[Option<Y>],
    width: usize,
) -> Vec<f64> {
    let mut gid: HashMap<u64, u32> = HashMap::new();
    let mut pairs: Vec<(u32, u32)> = path
        .pairs
        .iter()
        .filter(|p| (p.0 as usize) < n)
        .map(|&(r, g)| {
            let l = gid.len() as u32;
            (r, *gid.entry(g).or_insert(l))
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
    let groups = |r: usize| pairs[ptr[r]..ptr[r + 1]].iter().map(|p| p.1 as usize);
    let mut acc = vec![0f64; gid.len() * width];
    let add = |acc: &mut [f64], g: usize, y: Y, sign: f64| match y {
        Y::Class(c) => acc[g * width + c as usize] += sign,
        Y::Num(v) => {
            acc[g * width] += sign * v;
            acc[g * width + 1] += sign;
        }
    };
    let mut out = vec![0f64; n * width];
    let read = |acc: &[f64], out: &mut [f64], r: usize| {
        for g in groups(r) {
            for c in 0..width {
                out[r * width + c] += acc[g * width + c];
            }
        }
    };
    match as_of {
        None => {
            for (r, y) in known.iter().enumerate() {
                if let Some(y) = *y {
                    for g in groups(r) {
                        add(&mut acc, g, y, 1.0);
                    }
                }
            }
            for r in 0..n {
                read(&acc, &mut out, r);
                if let Some(y) = known[r] {
                    // Leave itself out: its own label counted once per group it is in.
                    let k = groups(r).count() as f64;
                    let mut one = vec![0f64; width];
                    add(&mut one, 0, y, k);
                    for c in 0..width {
                        out[r * width + c] -= one[c];
                    }
                }
            }
        }
        Some(t) => {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| t[a].total_cmp(&t[b]).then(a.cmp(&b)));
            let mut i = 0;
            while i < n {
                let mut j = i;
                while j < n && t[order[j]].total_cmp(&t[order[i]]).is_eq() {
                    j += 1;
                }
                for &r in &order[i..j] {
                    read(&acc, &mut out, r);
                }
                for &r in &order[i..j] {
                    if let Some(y) = known[r] {
                        for g in groups(r) {
                            add(&mut acc, g, y, 1.0);
                        }
                    }
                }
                i = j;
            }
        }
    }
    out
}

/// [`counts`] for a few `queries` only (n_q x `width`, in the order of `queries`), without the
/// sweep over every row: for each query, one pass over the path's pairs. O(pairs x queries):
/// what one row's prediction needs (`tributary_predict`), where the sweep's sort of all rows
/// would cost more than the row. The same counts as [`counts`] (class counts exactly; number
/// sums up to the order of the additions).
pub(crate) fn counts_for(
    path: &GroupPath,
    n: usize,
    as_of: Option<&[f64]>,
    known: &[Option<Y>],
    width: usize,
    queries: &[u32],
) -> Vec<f64> {
    let mut out = vec![0f64; queries.len() * width];
    for (qi, &q) in queries.iter().enumerate() {
        let groups: std::collections::HashSet<u64> = path
            .pairs
            .iter()
            .filter(|p| p.0 == q)
            .map(|p| p.1)
            .collect();
        if groups.is_empty() {
            continue;
        }
        let mut seen: std::collections::HashSet<(u32, u64)> = std::collections::HashSet::new();
        let row = &mut out[qi * width..(qi + 1) * width];
        for &(j, g) in &path.pairs {
            if j == q || (j as usize) >= n || !groups.contains(&g) {
                continue;
            }
            if let Some(t) = as_of {
                if t[j as usize].total_cmp(&t[q as usize]).is_ge() {
                    continue;
                }
            }
            let Some(y) = known[j as usize] else {
                continue;
            };
            if !seen.insert((j, g)) {
                continue;
            }
            match y {
                Y::Class(c) => row[c as usize] += 1.0,
                Y::Num(v) => {
                    row[0] += v;
                    row[1] += 1.0;
                }
            }
        }
    }
    out
}
