//! Read-only SPI queries. pgrx's `Spi::get_one*` run their query as an update, which marks the
//! transaction as writing and assigns it a transaction id: needless work on a primary, and an
//! error ("cannot assign TransactionIds during recovery", XX000) on a hot standby, where
//! `tributary_embed` and searches must work. What only reads goes through here.
//!
//! Every statement tributary builds in Rust runs [`pinned`] (search_path `pg_catalog, pg_temp`)
//! and names its functions, operators and non-catalog types by schema (README, "Security").

use pgrx::datum::{DatumWithOid, FromDatum, IntoDatum};
use pgrx::prelude::*;

/// The first column of the first row of the read-only query `sql` with `args`, or `None` for no
/// row (or NULL); run [`pinned`].
pub fn select_one<T: FromDatum + IntoDatum>(
    sql: &str,
    args: &[DatumWithOid<'_>],
) -> Result<Option<T>, pgrx::spi::Error> {
    pinned(|| {
        Spi::connect(|client| {
            let table = client.select(sql, Some(1), args)?;
            if table.is_empty() {
                return Ok(None);
            }
            table.first().get::<T>(1)
        })
    })
}

/// Raises 25006 (read_only_sql_transaction) when the transaction is read-only (`SET
/// TRANSACTION READ ONLY`, or any transaction on a hot standby), before `what` writes anything,
/// as PostgreSQL's own commands do (`PreventCommandIfReadOnly`).
pub fn require_writable(what: &std::ffi::CStr) {
    // SAFETY: reads XactReadOnly and raises an ERROR (longjmp, caught by pgrx) when it is set.
    unsafe { pg_sys::PreventCommandIfReadOnly(what.as_ptr()) };
}

/// The `search_path` of every statement tributary builds: `pg_catalog, pg_temp`, so that no
/// schema another role can write to (`public`, `"$user"`) takes part in resolving a name.
const PINNED_PATH: &std::ffi::CStr = c"pg_catalog, pg_temp";

/// Runs `f` (the SPI statements tributary builds) with `search_path` set to
/// `pg_catalog, pg_temp` (README, "Security"): as a function's `SET search_path` clause does
/// (`fmgr_security_definer`), a new GUC nest level, the setting saved, and restored when `f`
/// returns or unwinds (an ERROR inside that aborts the (sub)transaction restores it too).
/// The statements also qualify their functions and operators: the pinned path is a second wall.
/// What resolves names the caller wrote (a regclass argument, `include`) is resolved by the
/// caller's own statement before the call; nothing here looks up a caller's name as text.
pub fn pinned<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(i32);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: pops the nest level `pinned` pushed (and any deeper one left by an error
            // inside), restoring search_path, as fmgr_security_definer does after its call.
            unsafe { pg_sys::AtEOXact_GUC(!std::thread::panicking(), self.0) };
        }
    }
    let _restore = Restore(push_search_path(PINNED_PATH));
    f()
}

/// Opens a new GUC nest level with `search_path` set to `path` (saved, as a function's `SET`
/// clause does); returns the level, which the caller must close with `AtEOXact_GUC` (an ERROR
/// that aborts the (sub)transaction closes it too). For [`pinned`] and
/// [`as_user`](crate::pg::roles::as_user).
pub(crate) fn push_search_path(path: &std::ffi::CStr) -> i32 {
    // SAFETY: a new GUC nest level, and a SAVE-action setting that AtEOXact_GUC undoes.
    unsafe {
        let nest = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            path.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        nest
    }
}
