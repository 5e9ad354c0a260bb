//! PostgreSQL glue: settings, errors, the model catalog and session cache, vector datums.

pub mod catalog;
pub mod error;
pub mod gpu;
pub mod gucs;
pub mod name;
pub mod vector;
