//! Read-only SPI queries. pgrx's `Spi::get_one*` run their query as an update, which marks the
//! transaction as writing and assigns it a transaction id: needless work on a primary, and an
//! error ("cannot assign TransactionIds during recovery", XX000) on a hot standby, where
//! `tributary_embed` and searches must work. What only reads goes through here.

use pgrx::datum::{DatumWithOid, FromDatum, IntoDatum};
use pgrx::prelude::*;

/// The first column of the first row of the read-only query `sql` with `args`, or `None` for no
/// row (or NULL).
pub fn select_one<T: FromDatum + IntoDatum>(
    sql: &str,
    args: &[DatumWithOid<'_>],
) -> Result<Option<T>, pgrx::spi::Error> {
    Spi::connect(|client| {
        let table = client.select(sql, Some(1), args)?;
        if table.is_empty() {
            return Ok(None);
        }
        table.first().get::<T>(1)
    })
}

/// Raises 25006 (read_only_sql_transaction) when the transaction is read-only (`SET
/// TRANSACTION READ ONLY`, or any transaction on a hot standby), before `what` writes anything,
/// as PostgreSQL's own commands do (`PreventCommandIfReadOnly`).
pub fn require_writable(what: &std::ffi::CStr) {
    // SAFETY: reads XactReadOnly and raises an ERROR (longjmp, caught by pgrx) when it is set.
    unsafe { pg_sys::PreventCommandIfReadOnly(what.as_ptr()) };
}
