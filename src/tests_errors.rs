// `#[pg_test]`s of the SQLSTATEs of mistakes in arguments, included into `mod tests` after
// src/tests.rs (lib.rs), whose imports (pgrx::prelude) it uses; other items by path.


/// The SQLSTATE and message of the error `sql` raises (`00000` and "" if none), caught in a
/// PL/pgSQL block (a subtransaction), so that the test's transaction goes on.
fn error_of(sql: &str) -> (String, String) {
    Spi::run(
        "CREATE OR REPLACE FUNCTION pg_temp.tributary_error_of(q text, OUT state text, OUT message text)
         LANGUAGE plpgsql AS $$
         BEGIN
           EXECUTE q;
           state := '00000'; message := '';
         EXCEPTION WHEN OTHERS THEN
           state := SQLSTATE; message := SQLERRM;
         END $$",
    )
    .unwrap();
    let (state, message) = Spi::get_two_with_args::<String, String>(
        "SELECT state, message FROM pg_temp.tributary_error_of($1)",
        &[sql.into()],
    )
    .unwrap();
    (state.unwrap(), message.unwrap())
}

fn errors_table(name: &str) {
    Spi::run("CREATE EXTENSION IF NOT EXISTS vector").unwrap();
    Spi::run(&format!(
        "CREATE TABLE {name} (id int PRIMARY KEY, body text, e vector(384));
         INSERT INTO {name} VALUES (1, 'one row, so that row functions are called')"
    ))
    .unwrap();
}

#[pg_test]
fn null_names_in_arrays_are_22004() {
    errors_table("err_nulls");
    for (sql, what) in [
        ("SELECT tributary_embed_column('err_nulls', '{NULL}', 'e')", "columns"),
        ("SELECT tributary_embed_column('err_nulls', '{body,NULL}', 'e')", "columns"),
        ("SELECT tributary_embed_column('err_nulls', '{*}', 'e', exclude => '{NULL}')", "exclude"),
        ("SELECT tributary_embed_column('err_nulls', '{*}', 'e', time_columns => '{NULL}')", "time_columns"),
        ("SELECT tributary_row_text(t, exclude => '{NULL}') FROM err_nulls t", "exclude"),
        ("SELECT tributary_row_text(ROW(1), include => '{NULL}')", "include"),
    ] {
        let (state, message) = error_of(sql);
        assert_eq!(state, "22004", "{sql}: {message}");
        assert_eq!(message, format!("an element of {what} must not be NULL"), "{sql}");
    }
}

#[pg_test]
fn dropped_relation_is_42p01() {
    errors_table("err_dropped");
    let oid = Spi::get_one::<pg_sys::Oid>("SELECT 'err_dropped'::regclass::oid").unwrap().unwrap();
    Spi::run("DROP TABLE err_dropped").unwrap();
    for tbl in [oid.to_u32(), 123456789] {
        let (state, message) = error_of(&format!(
            "SELECT tributary_embed_column({tbl}::regclass, '{{body}}', 'e')"
        ));
        assert_eq!(state, "42P01", "{message}");
        assert_eq!(message, format!("relation with OID {tbl} does not exist"));
    }
}

#[pg_test]
fn unreadable_table_is_42501_before_its_columns() {
    errors_table("err_private");
    Spi::run(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tributary_err_reader') THEN
             CREATE ROLE tributary_err_reader;
           END IF;
         END $$",
    )
    .unwrap();
    Spi::run("SET LOCAL ROLE tributary_err_reader").unwrap();
    // Neither a column it has nor one it has not: the caller learns nothing of its columns.
    for columns in ["{body}", "{no_such_column}", "{*}"] {
        let (state, message) = error_of(&format!(
            "SELECT tributary_embed_column('err_private', '{columns}', 'e')"
        ));
        assert_eq!(state, "42501", "{columns}: {message}");
        assert_eq!(message, "permission denied for table err_private");
    }
    Spi::run("RESET ROLE").unwrap();
    // With SELECT on one column, names are checked (42703) and the reads need their privileges.
    Spi::run("GRANT SELECT (id) ON err_private TO tributary_err_reader").unwrap();
    Spi::run("SET LOCAL ROLE tributary_err_reader").unwrap();
    let (state, message) =
        error_of("SELECT tributary_embed_column('err_private', '{no_such_column}', 'e')");
    assert_eq!(state, "42703", "{message}");
    Spi::run("RESET ROLE").unwrap();
    Spi::run("REVOKE ALL ON err_private FROM tributary_err_reader").unwrap();
}
