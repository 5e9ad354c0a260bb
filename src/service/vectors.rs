//! Rows to texts to pgvector datums: the one loop behind `tributary_embed_column` and the jobs'
//! batches (src/service/column.rs, src/worker/batch.rs).
//!
//! Two steps, since a job reads its rows' texts as the job's owner and embeds them as the worker
//! (src/worker/batch.rs calls [`RowsToVectors::texts`] inside `as_user` and
//! [`RowsToVectors::vectors`] after it); `tributary_embed_column` runs both as the caller, or,
//! pipelined (src/service/pipeline.rs), embeds on another thread and builds the datum with
//! [`RowsToVectors::datum`].

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;

use crate::engine::Embeddings;
use crate::pg::catalog::ModelRow;
use crate::pg::error::Result;
use crate::pg::gucs;
use crate::pg::vector::{HalfVec, Vector, VectorType};
use crate::service::embed::{apply_truncation, embed_with};
use crate::service::rows::{row_text, row_values, RowOptions};

/// How one batch of rows of `table` becomes vectors.
pub(crate) struct RowsToVectors<'a> {
    /// The table the rows are read from (for whole rows: their foreign keys, column types).
    pub table: pg_sys::Oid,
    /// Whole rows: each raw text is the row's `row_to_json` text, made into the row's text with
    /// these options. `None`: each raw text is the text.
    pub row_options: Option<&'a RowOptions>,
    pub model: &'a ModelRow,
    /// The target column's type: the datums are of it, so an fp16 graph's output goes into a
    /// halfvec bit for bit (no round trip through f32, no cast in the statement).
    pub target: VectorType,
    /// The model's prompt to embed with (`None`: its default prompt, if any).
    pub prompt: Option<&'a str>,
}

/// A batch's vectors: a `vector[]` or `halfvec[]` datum, one element per text (NULL for NULL).
pub(crate) struct Vectors {
    pub datum: DatumWithOid<'static>,
    /// Texts embedded (the elements that are not NULL).
    pub embedded: usize,
    /// Texts longer than the window, truncated to it.
    pub truncated: usize,
}

impl RowsToVectors<'_> {
    /// The rows' texts, in order; NULL stays NULL.
    ///
    /// Errors: those of [`row_text`] for whole rows (reads context rows as the current role).
    pub fn texts(&self, raw: Vec<Option<String>>) -> Result<Vec<Option<String>>> {
        let Some(opts) = self.row_options else {
            return Ok(raw);
        };
        raw.into_iter()
            .map(|text| match text {
                Some(json) => {
                    let values = row_values(&json)?;
                    Ok(Some(row_text(Some(self.table), &values, opts, self.model)?))
                }
                None => Ok(None),
            })
            .collect()
    }

    /// Embeds the texts that are not NULL in one call (sorted and cut into runs by the engine)
    /// and builds the datum of the target's type. Truncated texts are counted; under
    /// `tributary.truncation = error` the first one is an error (22001), otherwise the caller
    /// reports the count.
    ///
    /// Errors: those of [`embed_with`] (54000, 53200, 42704 unknown prompt, the model's); 22001.
    pub fn vectors(&self, texts: &[Option<String>]) -> Result<Vectors> {
        let present: Vec<&str> = texts.iter().flatten().map(String::as_str).collect();
        let emb = if present.is_empty() {
            None
        } else {
            Some(embed_with(self.model, &present, self.prompt)?)
        };
        self.datum(texts, emb.as_ref())
    }

    /// The datum of `texts`' vectors, `emb` holding one row per text that is not NULL, in order
    /// (`None` when every text is NULL); applies `tributary.truncation = error` (22001).
    pub fn datum(&self, texts: &[Option<String>], emb: Option<&Embeddings>) -> Result<Vectors> {
        let present: Vec<&str> = texts.iter().flatten().map(String::as_str).collect();
        let truncated = emb.map_or(0, |e| e.truncated.len());
        if truncated > 0 && gucs::truncation() == gucs::Truncation::Error {
            let first = emb.expect("some truncated").truncated[0];
            apply_truncation(self.model, truncated, present.len(), || {
                format!(
                    "The text of the batch's row {} ({} characters) is longer than the window.",
                    first + 1,
                    present[first].chars().count()
                )
            })?;
        }
        let mut next = 0;
        let mut take = |has: bool| {
            let i = next;
            next += has as usize;
            has.then_some(i)
        };
        // A text that is not NULL takes the next row of `emb` (which exists whenever one does).
        let datum: DatumWithOid<'static> = match self.target {
            VectorType::HalfVec => texts
                .iter()
                .map(|t| {
                    take(t.is_some()).and_then(|i| emb.map(|e| HalfVec(e.row_f16(i).into_owned())))
                })
                .collect::<Vec<_>>()
                .into(),
            VectorType::Vector => texts
                .iter()
                .map(|t| {
                    take(t.is_some()).and_then(|i| emb.map(|e| Vector(e.row_f32(i).into_owned())))
                })
                .collect::<Vec<_>>()
                .into(),
        };
        Ok(Vectors {
            datum,
            embedded: present.len(),
            truncated,
        })
    }
}
