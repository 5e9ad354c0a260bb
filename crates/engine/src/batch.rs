//! Length-sorted, token-budget batching.
//!
//! Inputs are sorted by token count (longest first) and cut into batches whose padded size
//! `rows * longest_row` stays within a token budget, where the cut weighs the padding a batch
//! adds against the fixed cost of one more ONNX Runtime run ([`plan`]). The same idea as text-embeddings-inference's
//! `max_batch_tokens` and sentence-transformers' length sorting in `encode()`.

use std::ops::Range;

/// A cut of the length-sorted order: `order[range]` are the input indices of one batch and
/// `seq_len` is the longest of them (tokens), the width every row is padded to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub range: Range<usize>,
    pub seq_len: usize,
}

/// Plans batches over inputs of the given lengths (tokens each).
///
/// Returns `(order, batches)`: `order` is a permutation of `0..lengths.len()`, longest first
/// (ties keep input order), and `batches` cut it so that `rows * seq_len <= max_batch_tokens`,
/// except that a batch always holds at least one row (a row longer than the budget runs alone).
/// `max_rows` caps the rows of one batch (0 = no cap). `check` is called every 1,024 inputs
/// while planning (the caller checks for interrupts there).
///
/// The cut is the one that minimises `batches * run_overhead_tokens + padded tokens` (dynamic
/// programming over the sorted order, O(n x rows per batch)): filling every batch up to the
/// budget, as a greedy cut does, pads short rows to the length of the longest one in their batch,
/// while cutting at every length change pays a run's fixed cost each time. `run_overhead_tokens`
/// is that fixed cost in tokens of model work. On 10,000 Debian descriptions (windows of 8,192
/// tokens, budget 2,048) the greedy cut padded 7.6% of tokens; this cut with an overhead of 32
/// tokens pads about 2% (BENCHMARKS.md).
pub fn plan(
    lengths: &[usize],
    max_batch_tokens: usize,
    max_rows: usize,
    run_overhead_tokens: usize,
    check: &mut dyn FnMut(),
) -> (Vec<usize>, Vec<Batch>) {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]));
    let n = order.len();
    // cost[i]: the cheapest cut of order[i..]; next[i]: where the first batch of that cut ends.
    let mut cost = vec![0usize; n + 1];
    let mut next = vec![n; n + 1];
    for i in (0..n).rev() {
        if i % 1024 == 0 {
            check();
        }
        let seq_len = lengths[order[i]].max(1);
        let mut rows_cap = (max_batch_tokens / seq_len).max(1);
        if max_rows > 0 {
            rows_cap = rows_cap.min(max_rows);
        }
        cost[i] = usize::MAX;
        for rows in 1..=rows_cap.min(n - i) {
            let c = run_overhead_tokens + rows * seq_len + cost[i + rows];
            // `<=`: among equal costs, the fuller batch.
            if c <= cost[i] {
                cost[i] = c;
                next[i] = i + rows;
            }
        }
    }
    let mut batches = Vec::new();
    let mut start = 0;
    while start < n {
        let end = next[start];
        batches.push(Batch {
            range: start..end,
            seq_len: lengths[order[start]].max(1),
        });
        start = end;
    }
    (order, batches)
}

/// The bucket a row of `len` tokens is padded to on a GPU (`shape_buckets`): at most 16 tokens
/// pad to 16; longer rows to the next multiple of an eighth of the power of two at or above them
/// (at least 8): 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, ... Four buckets per doubling,
/// so past 32 tokens padding adds at most a quarter of a row's tokens (at most 7 tokens below);
/// multiples of 8, as fp16 tensor cores want. Capped at `max_length` (the window, itself a bucket), never below `len`.
pub fn bucket_len(len: usize, max_length: usize) -> usize {
    let len = len.max(1);
    let b = if len <= 16 {
        16
    } else {
        let step = (len.next_power_of_two() / 8).max(8);
        len.div_ceil(step) * step
    };
    b.min(max_length).max(len)
}

/// The rows a batch of `rows` is padded to on a GPU when a full batch of its bucket holds
/// `full` rows: a multiple of a quarter of `full` (at least 1), at most `full` (and never fewer
/// than `rows`). So a bucket runs in four or five row counts, the full one for all but the last
/// batch of a window; the extra rows repeat a real row and their outputs are dropped.
pub fn bucket_rows(rows: usize, full: usize) -> usize {
    let q = (full / 4).max(1);
    (rows.div_ceil(q) * q).min(full).max(rows)
}

/// Every shape `[rows, tokens]` a bucketed batch can take at a budget of `max_batch_tokens`
/// padded tokens and at most `max_rows` rows, for windows of `max_length` tokens: each
/// [`bucket_len`] with each [`bucket_rows`] count of its full batch. For all-MiniLM-L6-v2 (256
/// tokens) at a budget of 16,384: 15 lengths, 68 shapes (4 or 5 row counts each).
pub fn bucket_shapes(
    max_length: usize,
    max_batch_tokens: usize,
    max_rows: usize,
) -> Vec<(usize, usize)> {
    let mut lens: Vec<usize> = (1..=max_length.max(1))
        .map(|l| bucket_len(l, max_length))
        .collect();
    lens.dedup();
    let mut shapes = Vec::new();
    for seq in lens {
        let full = (max_batch_tokens / seq).clamp(1, max_rows.max(1));
        let mut rows: Vec<usize> = (1..=full).map(|r| bucket_rows(r, full)).collect();
        rows.dedup();
        shapes.extend(rows.into_iter().map(|n| (n, seq)));
    }
    shapes
}

/// Cuts inputs into pipelining windows before they are tokenized: indices ordered by byte length
/// (longest first, ties in input order), each window holding about `window_tokens` estimated
/// tokens. The estimate is `bytes / 4 + 2` capped at `max_length` (about 4 bytes per WordPiece
/// token in English text, plus `[CLS]` and `[SEP]`); it only decides where windows end, the
/// batches inside a window are planned on exact token counts by [`plan`].
pub fn windows(byte_lengths: &[usize], max_length: usize, window_tokens: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..byte_lengths.len()).collect();
    order.sort_by(|&a, &b| byte_lengths[b].cmp(&byte_lengths[a]));
    let mut out = Vec::new();
    let mut current = Vec::new();
    let mut tokens = 0;
    for i in order {
        current.push(i);
        tokens += (byte_lengths[i] / 4 + 2).min(max_length.max(1));
        if tokens >= window_tokens {
            out.push(std::mem::take(&mut current));
            tokens = 0;
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_few_pad_little_and_hold_every_row() {
        let mut seen = std::collections::BTreeSet::new();
        for len in 1..=256 {
            let b = bucket_len(len, 256);
            assert!(b >= len && b <= 256, "{len} -> {b}");
            if len > 16 {
                assert!(b.is_multiple_of(8), "{len} -> {b}: a multiple of 8");
                assert!(
                    b - len < 8 || (b - len) * 4 <= len,
                    "{len} -> {b}: little padding"
                );
            }
            seen.insert(b);
        }
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            vec![16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256]
        );
        // The window caps the bucket, even below a bucket's boundary.
        assert_eq!(bucket_len(120, 128), 128);
        assert_eq!(bucket_len(100, 100), 100);
        assert_eq!(bucket_len(97, 100), 100);
        // Rows: a quarter of a full batch at a time, never fewer than given, never past full.
        assert_eq!(bucket_rows(1, 128), 32);
        assert_eq!(bucket_rows(33, 128), 64);
        assert_eq!(bucket_rows(128, 128), 128);
        assert_eq!(bucket_rows(3, 3), 3);
        assert_eq!(
            bucket_rows(5, 2),
            5,
            "a row past the budget runs alone (as plan cuts it)"
        );
        let counts: std::collections::BTreeSet<usize> =
            (1..=128).map(|r| bucket_rows(r, 128)).collect();
        assert_eq!(counts.len(), 4);
        // Every shape a bucketed batch takes is among bucket_shapes, which has no duplicate.
        let shapes = bucket_shapes(256, 16384, 4096);
        assert_eq!(shapes.len(), 68, "15 lengths, 4 or 5 row counts each");
        let set: std::collections::BTreeSet<_> = shapes.iter().copied().collect();
        assert_eq!(set.len(), shapes.len());
        for len in 1..=256 {
            let seq = bucket_len(len, 256);
            let full = 16384 / seq;
            for r in 1..=full {
                assert!(set.contains(&(bucket_rows(r, full), seq)), "{r} x {len}");
            }
        }
    }

    #[test]
    fn windows_cover_every_input_once_longest_first() {
        let bytes = [10, 4000, 0, 37, 37, 900, 5];
        let w = windows(&bytes, 256, 300);
        let flat: Vec<usize> = w.iter().flatten().copied().collect();
        assert_eq!(
            flat,
            vec![1, 5, 3, 4, 0, 6, 2],
            "longest first, ties in input order"
        );
        // 4000 bytes -> 256 tokens (capped), 900 -> 227: together past 300, closing the first window.
        assert_eq!(w, vec![vec![1, 5], vec![3, 4, 0, 6, 2]]);
        assert!(windows(&[], 256, 300).is_empty());
        assert_eq!(
            windows(&[1, 2, 3], 256, 1 << 20),
            vec![vec![2, 1, 0]],
            "one window when everything fits"
        );
    }

    #[test]
    fn respects_budget_and_covers_every_input_once() {
        let lengths = [5, 300, 17, 17, 2, 128, 64, 1, 256, 9];
        let (order, batches) = plan(&lengths, 512, 0, 32, &mut || {});
        let mut seen: Vec<usize> = batches
            .iter()
            .flat_map(|b| order[b.range.clone()].to_vec())
            .collect();
        seen.sort();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
        for b in &batches {
            let rows = b.range.len();
            let longest = order[b.range.clone()]
                .iter()
                .map(|&i| lengths[i])
                .max()
                .unwrap();
            assert_eq!(longest, b.seq_len);
            assert!(rows == 1 || rows * b.seq_len <= 512, "{b:?}");
        }
        // 300 tokens exceeds 512/2: alone in its batch.
        assert_eq!(batches[0].range.len(), 1);
        assert_eq!(batches[0].seq_len, 300);
    }

    #[test]
    fn row_longer_than_budget_runs_alone() {
        let (order, batches) = plan(&[1000, 3, 3], 100, 0, 32, &mut || {});
        assert_eq!(order, vec![0, 1, 2]);
        assert_eq!(
            batches,
            vec![
                Batch {
                    range: 0..1,
                    seq_len: 1000
                },
                Batch {
                    range: 1..3,
                    seq_len: 3
                }
            ]
        );
    }

    #[test]
    fn max_rows_caps_batches_and_ties_keep_input_order() {
        let (order, batches) = plan(&[4; 10], 1 << 20, 4, 32, &mut || {});
        assert_eq!(order, (0..10).collect::<Vec<_>>());
        assert_eq!(
            batches.iter().map(|b| b.range.len()).collect::<Vec<_>>(),
            vec![4, 4, 2]
        );
    }

    /// Mixed lengths: the cut pads less than filling every batch to the budget, and a zero
    /// overhead cuts at every length change (no padding at all).
    #[test]
    fn cut_trades_padding_against_runs() {
        let lengths: Vec<usize> = (0..200).map(|i| 10 + (i * 37) % 150).collect();
        let padded = |batches: &[Batch]| {
            batches
                .iter()
                .map(|b| b.range.len() * b.seq_len)
                .sum::<usize>()
        };
        let real: usize = lengths.iter().sum();
        let (_, greedy_like) = plan(&lengths, 2048, 0, 1 << 20, &mut || {});
        let (_, cut) = plan(&lengths, 2048, 0, 32, &mut || {});
        let (_, exact) = plan(&lengths, 2048, 0, 0, &mut || {});
        assert!(
            padded(&cut) < padded(&greedy_like),
            "{} vs {}",
            padded(&cut),
            padded(&greedy_like)
        );
        assert!(cut.len() > greedy_like.len());
        assert_eq!(padded(&exact), real, "no padding without a run cost");
        for b in cut.iter().chain(&exact) {
            assert!(b.range.len() * b.seq_len <= 2048);
        }
    }

    /// Planning calls back (for interrupt checks) every 1,024 inputs, also with a huge budget.
    #[test]
    fn planning_calls_back_while_it_works() {
        let lengths = vec![2usize; 5000];
        let mut calls = 0;
        let (_, batches) = plan(&lengths, 1 << 22, 4096, 32, &mut || calls += 1);
        assert_eq!(calls, 5, "inputs 4096, 3072, 2048, 1024, 0");
        assert!(batches.iter().all(|b| b.range.len() <= 4096));
    }

    #[test]
    fn empty_input_gives_no_batch() {
        let (order, batches) = plan(&[], 100, 0, 32, &mut || {});
        assert!(order.is_empty() && batches.is_empty());
    }
}
