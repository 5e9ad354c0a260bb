//! The k-NN searches' shared parts: normalised rows, their dot products by GEMM, and each
//! query's best candidates ([`Top`]).

/// `out` (`na` x `nb`, row-major) = `a` (`na` x `d` rows) times the transpose of `b` (`nb` x `d`
/// rows): every row of `a` dotted with every row of `b` (f32 GEMM, `matrixmultiply::sgemm`).
pub(crate) fn dots(a: &[f32], na: usize, b: &[f32], nb: usize, d: usize, out: &mut [f32]) {
    assert!(a.len() >= na * d && b.len() >= nb * d && out.len() >= na * nb);
    // SAFETY: a is na x d (row stride d), b is the transpose of nb rows (d x nb: row stride 1,
    // column stride d), out is na x nb (row stride nb); the assert keeps all in bounds.
    unsafe {
        matrixmultiply::sgemm(
            na,
            d,
            nb,
            1.0,
            a.as_ptr(),
            d as isize,
            1,
            b.as_ptr(),
            1,
            d as isize,
            0.0,
            out.as_mut_ptr(),
            nb as isize,
            1,
        );
    }
}

/// A query's best candidates so far: `(cosine, row)`, trimmed to the best `kk` when more than
/// `cap` are held (the items' memory is allocated at the first offer).
pub(crate) struct Top {
    items: Vec<(f32, u32)>,
    min: f32,
    cap: u32,
}

impl Top {
    /// A list trimmed past 2 `kk` items (the exact search's).
    pub(crate) fn new(kk: usize) -> Top {
        Top::with_cap(kk * 2)
    }

    /// A list trimmed past `cap` items (at least `kk` + 1).
    pub(crate) fn with_cap(cap: usize) -> Top {
        Top {
            items: Vec::new(),
            min: f32::NEG_INFINITY,
            cap: cap as u32,
        }
    }

    /// Offers candidate `j` at cosine `v`.
    #[inline]
    pub(crate) fn offer(&mut self, v: f32, j: u32, kk: usize) {
        if self.items.len() >= kk && v <= self.min {
            return;
        }
        if self.items.capacity() == 0 {
            self.items.reserve_exact(self.cap as usize + 1);
        }
        self.items.push((v, j));
        if self.items.len() > self.cap as usize {
            self.trim(kk);
            self.min = self.items[kk - 1].0;
        }
    }

    fn trim(&mut self, kk: usize) {
        self.items
            .sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        self.items.truncate(kk);
    }

    /// The best `kk` as `(row, cosine)`, best first (ties: the lower row).
    pub(crate) fn best(&self, kk: usize) -> Vec<(u32, f32)> {
        let mut items = self.items.clone();
        items.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        items.truncate(kk);
        items.into_iter().map(|(v, j)| (j, v)).collect()
    }
}

/// Each query's neighbours `(row, cosine)`, best first.
pub(crate) type Lists = Vec<Vec<(u32, f32)>>;

pub(crate) fn normalise(v: &[f32], out: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let s = if n > 0.0 { 1.0 / n } else { 0.0 };
    for (o, x) in out.iter_mut().zip(v) {
        *o = x * s;
    }
}
