//! Only tests live here: see tests/fidelity.rs.
