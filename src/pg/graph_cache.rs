//! The prepared-graph cache kept tidy when models are registered, changed or dropped.

use std::path::Path;

use crate::engine;
use crate::pg::catalog::model_files;
use crate::pg::gucs;

/// Tidies the prepared graphs in `tributary.graph_cache_path` after a model was dropped or
/// re-registered: removes those prepared from `released` (the model file that model no longer
/// uses) unless another model in this database's `tributary.models` still uses that file, then
/// those whose model file is gone or changed ([`engine::prepared::sweep`]). Other databases'
/// catalogs are not read: a model there that uses the released file prepares it again (about
/// 0.5 s for all-MiniLM-L6-v2) when it next creates a session; so does this one if the
/// transaction rolls back, since removing files is not transactional. Backends that have the
/// removed files mapped keep them (see the sweep). Nothing is done while
/// `tributary.shared_weights` is off. What cannot be removed is a WARNING, never an ERROR.
pub fn tidy_graph_cache(released: Option<&Path>) {
    let Some(cache) = gucs::graph_cache_path() else {
        return;
    };
    if let Some(file) = released {
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_owned());
        match model_files(None) {
            Ok(files) if files.iter().any(|f| canonical(f) == canonical(file)) => {}
            Ok(_) => report(&cache, engine::prepared::remove_prepared(&cache, file)),
            Err(e) => pgrx::warning!("tributary: prepared graphs of {} kept: {e}", file.display()),
        }
    }
    report(&cache, engine::prepared::sweep(&cache));
}

/// Logs what a removal in the graph cache `cache` did (LOG: the server log only) and warns of
/// what it could not do.
fn report(cache: &Path, done: engine::Result<engine::prepared::Removed>) {
    match done {
        Ok(done) => {
            for (dir, why) in &done.removed {
                pgrx::log!(
                    "tributary: removed prepared graph {} ({why})",
                    dir.display()
                );
            }
            for (dir, e) in &done.failed {
                pgrx::warning!(
                    "tributary: could not remove prepared graph {}: {e}",
                    dir.display()
                );
            }
        }
        Err(e) => pgrx::warning!(
            "tributary: could not remove prepared graphs in {}: {e}",
            cache.display()
        ),
    }
}
