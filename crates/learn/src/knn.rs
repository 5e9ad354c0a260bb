//! As-of k-nearest neighbours by cosine similarity. Up to [`EXACT_MAX`] candidates the search is
//! exact and blocked: candidates (known rows with an embedding) are normalised and sorted by
//! as_of; queries sorted by as_of are taken in blocks of [`QB`] and multiplied (f32 GEMM,
//! `matrixmultiply::sgemm`) only against the candidate prefix that is strictly earlier than the
//! block's latest query, [`CB`] candidates at a time; each query then keeps the top `kk` among
//! its own strictly earlier candidates (itself excluded). The exact search is quadratic in the
//! rows; past [`EXACT_MAX`] candidates an inverted file of k-means lists is searched instead
//! ([`crate::knn_ivf`]), with the same time rules.

use crate::par::{par_map, Shared};
pub(crate) use crate::topk::Lists;
use crate::topk::{dots, normalise, Top};
use crate::Embeddings;

/// Queries per block (a block is one task between stop checks: 128 x 100k x 384 is ~5 GFLOP).
pub(crate) const QB: usize = 64;
/// Candidates per GEMM tile.
pub(crate) const CB: usize = 2048;

/// Candidates up to which the search is exact (it grows with the square of the rows: 35 s at
/// 80k candidates on 2 cores, ~400 s extrapolated at 270k, where the inverted file took 16 s;
/// recall@10 of the inverted file 0.95 on clustered data, see `crate::knn_ivf`).
pub(crate) const EXACT_MAX: usize = 200_000;

/// Bytes the search allocates beyond the given embeddings: the normalised candidate copy, one
/// similarity tile per thread and the result lists (or the inverted file's, past
/// [`EXACT_MAX`]).
pub(crate) fn memory(
    n_cand: usize,
    n_query: usize,
    dim: usize,
    kk: usize,
    threads: usize,
) -> usize {
    if n_cand > EXACT_MAX {
        return crate::knn_ivf::memory(n_cand, n_query, dim, kk, threads);
    }
    n_cand * dim * 4 + threads * (QB * CB * 4 + QB * dim * 4) + n_query * kk * 8
}

/// For each query row (index into the dataset), its up to `kk` nearest known rows
/// `(row, cosine)`, best first. `known[j]` marks candidate rows; `as_of` (when given) restricts
/// a query to candidates with a strictly smaller time, otherwise to all candidates but itself.
/// Queries without an embedding get an empty list. With `snap` (a time; needs `as_of`), each
/// query at or after it also gets its list among the candidates strictly earlier than `snap`
/// (second result; empty for the other queries): what a search with only those candidates
/// known would return, taken in the same pass (the stale validation rows' neighbours, which
/// were a second search over most of the same candidates). `None` when stopped.
#[allow(clippy::too_many_arguments)]
pub(crate) fn search(
    emb: &Embeddings,
    as_of: Option<&[f64]>,
    known: &[bool],
    queries: &[u32],
    kk: usize,
    threads: usize,
    sh: &Shared,
    snap: Option<f64>,
) -> Option<(Lists, Lists)> {
    let t = |i: usize| as_of.map_or(0.0, |a| a[i]);
    let mut cand: Vec<u32> = (0..known.len())
        .filter(|&j| known[j] && emb.present[j])
        .map(|j| j as u32)
        .collect();
    cand.sort_by(|&a, &b| t(a as usize).total_cmp(&t(b as usize)).then(a.cmp(&b)));
    let ctimes: Vec<f64> = cand.iter().map(|&j| t(j as usize)).collect();
    let mut qs: Vec<u32> = queries
        .iter()
        .copied()
        .filter(|&q| emb.present[q as usize])
        .collect();
    qs.sort_by(|&a, &b| t(a as usize).total_cmp(&t(b as usize)).then(a.cmp(&b)));
    let (main, snaps) = if cand.len() > EXACT_MAX {
        crate::knn_ivf::search(emb, as_of, &cand, &ctimes, &qs, kk, threads, sh, snap)?
    } else {
        exact(emb, as_of, &cand, &ctimes, &qs, kk, threads, sh, snap)?
    };
    let mut pos = vec![usize::MAX; known.len()];
    for (i, &q) in queries.iter().enumerate() {
        pos[q as usize] = i;
    }
    let mut out = vec![Vec::new(); queries.len()];
    let mut out_snap = vec![Vec::new(); queries.len()];
    for ((q, lst), ls) in qs.iter().zip(main).zip(snaps) {
        let p = pos[*q as usize];
        out[p] = lst;
        out_snap[p] = ls;
    }
    Some((out, out_snap))
}

/// The exact search of [`search`] (this module's header): the candidates `cand` (rows sorted by
/// time) with their times `ctimes`, the queries `qs` (with an embedding, sorted by time);
/// returns the queries' lists in the order of `qs` (main, snapshot).
#[allow(clippy::too_many_arguments)]
fn exact(
    emb: &Embeddings,
    as_of: Option<&[f64]>,
    cand: &[u32],
    ctimes: &[f64],
    qs: &[u32],
    kk: usize,
    threads: usize,
    sh: &Shared,
    snap: Option<f64>,
) -> Option<(Lists, Lists)> {
    let d = emb.dim;
    let t = |i: usize| as_of.map_or(0.0, |a| a[i]);
    let mut cm = vec![0f32; cand.len() * d];
    for (r, &j) in cand.iter().enumerate() {
        let j = j as usize;
        normalise(&emb.data[j * d..(j + 1) * d], &mut cm[r * d..(r + 1) * d]);
    }
    // Number of candidates usable by each query.
    let limit = |q: usize| -> usize {
        if as_of.is_some() {
            let tq = t(q);
            ctimes.partition_point(|&c| c < tq)
        } else {
            cand.len()
        }
    };
    let snap = snap.filter(|_| as_of.is_some());
    // Candidates before the snapshot: a prefix of `cand`.
    let ns = snap.map_or(usize::MAX, |tc| ctimes.partition_point(|&c| c < tc));
    let nblocks = qs.len().div_ceil(QB);
    let res = par_map(threads, nblocks, &sh.stop, |b| {
        let block = &qs[b * QB..((b + 1) * QB).min(qs.len())];
        let nq = block.len();
        let mut qm = vec![0f32; nq * d];
        for (r, &q) in block.iter().enumerate() {
            let q = q as usize;
            normalise(&emb.data[q * d..(q + 1) * d], &mut qm[r * d..(r + 1) * d]);
        }
        let lims: Vec<usize> = block.iter().map(|&q| limit(q as usize)).collect();
        let pmax = lims.iter().copied().max().unwrap_or(0);
        let mut tops: Vec<Top> = (0..nq).map(|_| Top::new(kk)).collect();
        let mut s = vec![0f32; nq * CB];
        // Queries at or after the snapshot, and their lists at it.
        let wants: Vec<bool> = block
            .iter()
            .map(|&q| snap.is_some_and(|tc| t(q as usize) >= tc))
            .collect();
        let mut snaps: Option<Lists> = None;
        let mut c0 = 0;
        while c0 < pmax {
            if c0 == ns && snaps.is_none() {
                snaps = Some(
                    (0..nq)
                        .map(|r| {
                            if wants[r] {
                                tops[r].best(kk)
                            } else {
                                Vec::new()
                            }
                        })
                        .collect(),
                );
            }
            // Tiles end at the snapshot, so that its lists see exactly the candidates before it.
            let cb = CB
                .min(pmax - c0)
                .min(if c0 < ns { ns - c0 } else { usize::MAX });
            dots(&qm, nq, &cm[c0 * d..], cb, d, &mut s);
            for r in 0..nq {
                let end = lims[r].saturating_sub(c0).min(cb);
                let qrow = block[r];
                let top = &mut tops[r];
                for (jj, &v) in s[r * cb..r * cb + end].iter().enumerate() {
                    let j = cand[c0 + jj];
                    if j != qrow {
                        top.offer(v, j, kk);
                    }
                }
            }
            c0 += cb;
            if sh.stopped() {
                break;
            }
        }
        sh.tick(nq as u64);
        let main: Lists = tops.iter().map(|top| top.best(kk)).collect();
        // No candidate at or past the snapshot was read: the lists are the snapshot's.
        let snaps = snaps.unwrap_or_else(|| {
            (0..nq)
                .map(|r| {
                    if wants[r] {
                        main[r].clone()
                    } else {
                        Vec::new()
                    }
                })
                .collect()
        });
        (main, snaps)
    });
    if sh.stopped() {
        return None;
    }
    let mut main = Vec::with_capacity(qs.len());
    let mut snaps = Vec::with_capacity(qs.len());
    for r in res {
        let (m, s) = r?;
        main.extend(m);
        snaps.extend(s);
    }
    Some((main, snaps))
}
