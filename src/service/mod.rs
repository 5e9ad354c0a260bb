//! Services between the SQL surface (`api/`, and the jobs' workers in `worker/`) and the
//! PostgreSQL glue (`pg/`): texts or rows in, vectors or datums out, under the current settings
//! (model lookup, `tributary.max_texts_per_call`, the engine's runs, pgvector datums, memory
//! handed back). Nothing here is a `#[pg_extern]`; nothing here imports `api/` or `worker/`.
//!
//! - [`embed`]: texts to embeddings and `vector`s, token ids.
//! - [`rows`]: a row (its `row_to_json`) to the text `tributary_row_text` writes.
//! - [`vectors`]: a batch of rows to a `vector[]`/`halfvec[]` datum (embed_column and jobs).
//! - [`column`]: `tributary_embed_column`'s cursor loop.
//! - [`learn`]: predictors' plans, rows read into datasets, the predictor catalog.
//! - [`matching`]: string similarity, thresholds and logistic regression for matching rows.
//! - [`match_em`]: the match probability fitted by EM, the cut for a precision, dedup clusters.

pub mod column;
pub mod embed;
pub mod learn;
pub mod match_em;
pub mod matching;
pub mod pipeline;
pub mod rows;
pub mod vectors;
