//! PostgreSQL glue: settings, errors, the model catalog and session cache, vector datums, table
//! descriptions, roles, background workers' transactions.

pub mod activity;
pub mod admission;
pub mod catalog;
pub mod error;
pub mod gpu;
pub mod gucs;
pub mod name;
pub mod record;
pub mod regclass;
pub mod relation;
pub mod roles;
pub mod spi;
pub mod values;
pub mod vector;
pub mod xact;
