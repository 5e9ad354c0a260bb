//! The SQL surface: thin `#[pg_extern]` wrappers that parse arguments and call `pg/` and `engine/`.

pub mod activity;
pub mod chunk;
pub mod column;
pub mod compat;
pub mod embed;
pub mod learn;
pub mod matching;
pub mod models;
pub mod rows;
pub mod values;
