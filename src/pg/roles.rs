//! Whose rights a statement runs with (README, "Security").
//!
//! - [`as_user`]: a job owner's rights, security-restricted, default `search_path`: for every
//!   statement over the owner's tables and key values (claims, reads, writes, the continuous
//!   trigger's statements, `tributary._run_as`).
//! - [`as_role`] with [`extension_owner`]: tributary's own bookkeeping (its tables, its fully
//!   qualified statements, nothing of a user's).
//!
//! Both switch the user locally, as a SECURITY DEFINER function does; an error inside aborts
//! the (sub)transaction, which restores the user (and, for [`as_user`], the settings).

use pgrx::prelude::*;

use crate::pg::error::{spi_error, OrRaise};

/// The role that owns the tributary extension (a superuser: the extension is not trusted);
/// the bootstrap superuser when the extension row cannot be found.
pub fn extension_owner() -> pg_sys::Oid {
    crate::pg::spi::select_one::<pg_sys::Oid>(
        "SELECT extowner FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'tributary'",
        &[],
    )
    .map_err(spi_error)
    .or_raise()
    .unwrap_or(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID))
}

/// Runs `f` as `role` for tributary's own bookkeeping (its tables, its statements, nothing of a
/// user's): a local user-id change, as a SECURITY DEFINER function makes. An error inside aborts
/// the (sub)transaction, which restores the user.
pub fn as_role<R>(role: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let mut old = pg_sys::InvalidOid;
    let mut ctx = 0;
    // SAFETY: save, switch, restore, as fmgr_security_definer does.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut old, &mut ctx);
        pg_sys::SetUserIdAndSecContext(role, ctx | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
    }
    let r = f();
    // SAFETY: as above.
    unsafe { pg_sys::SetUserIdAndSecContext(old, ctx) };
    r
}

/// Runs `f` with `role`'s privileges (and row-level security), as SECURITY DEFINER functions
/// do. An error inside aborts the transaction, which restores the user.
///
/// As a maintenance command runs a table owner's code (security-restricted, settings the code
/// changes undone afterwards), with the default `search_path` ("$user", public) while the
/// worker's own statements run with `pg_catalog, pg_temp`.
pub fn as_user<R>(role: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let mut old = pg_sys::InvalidOid;
    let mut ctx = 0;
    // SAFETY: save, switch, restore, as fmgr_security_definer and ExecRefreshMatView do.
    let nest = unsafe {
        pg_sys::GetUserIdAndSecContext(&mut old, &mut ctx);
        pg_sys::SetUserIdAndSecContext(
            role,
            ctx | (pg_sys::SECURITY_LOCAL_USERID_CHANGE | pg_sys::SECURITY_RESTRICTED_OPERATION)
                as i32,
        );
        crate::pg::spi::push_search_path(c"\"$user\", public")
    };
    let r = f();
    // SAFETY: as above (an error inside aborts the transaction, which restores both).
    unsafe {
        pg_sys::AtEOXact_GUC(true, nest);
        pg_sys::SetUserIdAndSecContext(old, ctx);
    }
    r
}
