//! pgvector's `vector` and `halfvec` as Rust types: built straight into datums (no text round
//! trip).
//!
//! On-disk layouts, from pgvector's `src/vector.h` and `src/halfvec.h`: varlena header (4 bytes),
//! `int16 dim`, `int16 unused` (0), then `dim` float4 (`vector`, up to 16000 dimensions) or
//! IEEE 754 binary16 (`halfvec`, up to 16000 dimensions) values.

use std::cell::Cell;

use half::f16;

use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;

use crate::pg::error::{raise, spi_error, OrRaise, TributaryError};

/// Which of pgvector's types a target column is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorType {
    /// `vector`: f32 values.
    Vector,
    /// `halfvec`: f16 values.
    HalfVec,
}

impl VectorType {
    /// From a type name (`pg_type.typname`): `vector` or `halfvec`, else `None`.
    pub fn from_name(typname: &str) -> Option<Self> {
        match typname {
            "vector" => Some(VectorType::Vector),
            "halfvec" => Some(VectorType::HalfVec),
            _ => None,
        }
    }
}

/// A `vector` value: `[dim] f32`.
#[derive(Debug, Clone, PartialEq)]
pub struct Vector(pub Vec<f32>);

const HEADER: usize = 8;

impl IntoDatum for Vector {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        let size = HEADER + 4 * self.0.len();
        // SAFETY: palloc'd in the current memory context with room for the header and values;
        // the layout matches pgvector's `Vector` struct.
        unsafe {
            let ptr = pg_sys::palloc0(size) as *mut u8;
            pgrx::set_varsize_4b(ptr.cast(), size as i32);
            (ptr.add(4) as *mut i16).write_unaligned(self.0.len() as i16);
            std::ptr::copy_nonoverlapping(
                self.0.as_ptr(),
                ptr.add(HEADER) as *mut f32,
                self.0.len(),
            );
            Some(pg_sys::Datum::from(ptr))
        }
    }

    fn type_oid() -> pg_sys::Oid {
        vector_type_oid()
    }
}

/// A `halfvec` value: `[dim] f16`, written bit for bit (no conversion when the model returned f16).
#[derive(Debug, Clone, PartialEq)]
pub struct HalfVec(pub Vec<f16>);

impl IntoDatum for HalfVec {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        let size = HEADER + 2 * self.0.len();
        // SAFETY: as for Vector, with pgvector's `HalfVector` layout (2-byte values).
        unsafe {
            let ptr = pg_sys::palloc0(size) as *mut u8;
            pgrx::set_varsize_4b(ptr.cast(), size as i32);
            (ptr.add(4) as *mut i16).write_unaligned(self.0.len() as i16);
            std::ptr::copy_nonoverlapping(
                self.0.as_ptr().cast::<u16>(),
                ptr.add(HEADER) as *mut u16,
                self.0.len(),
            );
            Some(pg_sys::Datum::from(ptr))
        }
    }

    fn type_oid() -> pg_sys::Oid {
        halfvec_type_oid()
    }
}

thread_local! {
    // The vector extension cannot be dropped while tributary depends on it, so the oids are
    // stable for the life of the backend once found.
    static VECTOR_OID: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    static HALFVEC_OID: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
}

/// Oid of pgvector's `vector` type, found through the `vector` extension (not search_path).
/// Errors: 42704 when the vector extension has no such type.
pub fn vector_type_oid() -> pg_sys::Oid {
    VECTOR_OID.with(|c| pgvector_type(c, "vector"))
}

/// Oid of pgvector's `halfvec` type.
pub fn halfvec_type_oid() -> pg_sys::Oid {
    HALFVEC_OID.with(|c| pgvector_type(c, "halfvec"))
}

fn pgvector_type(cache: &Cell<pg_sys::Oid>, name: &str) -> pg_sys::Oid {
    if cache.get() == pg_sys::InvalidOid {
        let oid = crate::pg::spi::select_one::<pg_sys::Oid>(
            "SELECT t.oid FROM pg_catalog.pg_type t \
             JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass \
              AND d.objid OPERATOR(pg_catalog.=) t.oid AND d.deptype OPERATOR(pg_catalog.=) 'e' \
             JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid \
             WHERE e.extname OPERATOR(pg_catalog.=) 'vector' AND t.typname OPERATOR(pg_catalog.=) $1::pg_catalog.name",
            &[name.into()],
        )
        .map_err(spi_error)
        .or_raise()
        .unwrap_or_else(|| raise(TributaryError::VectorType(name.to_owned())));
        cache.set(oid);
    }
    cache.get()
}

unsafe impl SqlTranslatable for Vector {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(Vector);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("vector"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("vector")));
}

// SAFETY: the datum is returned to the caller of the function, as BoxRet requires.
unsafe impl pgrx::callconv::BoxRet for Vector {
    unsafe fn box_into<'fcx>(
        self,
        fcinfo: &mut pgrx::callconv::FcInfo<'fcx>,
    ) -> pgrx::datum::Datum<'fcx> {
        match self.into_datum() {
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}
