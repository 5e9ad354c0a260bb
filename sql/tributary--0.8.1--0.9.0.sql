-- tributary 0.8.1 -> 0.9.0: predictors that learn (tributary_train, tributary_predict_column(predictor,
-- target), tributary_predict(predictor, row), tributary_drop_predictor, the catalog
-- tributary._predictors and the view tributary.predictors; sql/learn.sql) and the jobs that keep
-- predictions current (tributary_predict_job_create / _drop; sql/learn_jobs.sql). Nothing of 0.8.1
-- changes; tributary._job_call takes the two new operations in the library.

-- src/api/learn.rs:416
-- tributary::api::learn::_predict_record
CREATE  FUNCTION "_predict_record"(
	"predictor" TEXT, /* Option < & str > */
	"row" jsonb /* Option < pgrx :: JsonB > */
) RETURNS TABLE (
	"prediction" TEXT,  /* Option < String > */
	"confidence" double precision,  /* Option < f64 > */
	"evidence" jsonb  /* Option < pgrx :: JsonB > */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_predict_record_wrapper';

-- src/api/learn.rs:553
-- tributary::api::learn::tributary_drop_predictor
CREATE  FUNCTION "tributary_drop_predictor"(
	"predictor" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_drop_predictor_wrapper';

-- src/api/learn.rs:287
-- tributary::api::learn::tributary_predict_column
CREATE  FUNCTION "tributary_predict_column"(
	"predictor" TEXT, /* Option < & str > */
	"target" name, /* Option < Name > */
	"batch_size" INT DEFAULT 1000 /* Option < i32 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_predict_column_predictor_wrapper';

-- src/api/learn.rs:74
-- tributary::api::learn::tributary_train
CREATE  FUNCTION "tributary_train"(
	"predictor" TEXT, /* Option < & str > */
	"tbl" regclass, /* Option < RegClass > */
	"label" name, /* Option < Name > */
	"embedding" name DEFAULT NULL, /* Option < Name > */
	"as_of" name DEFAULT NULL, /* Option < Name > */
	"split_at" TEXT DEFAULT NULL, /* Option < & str > */
	"history" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"columns" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"algorithm" TEXT DEFAULT 'auto', /* Option < & str > */
	"k" INT DEFAULT 10 /* Option < i32 > */
) RETURNS TABLE (
	"method" TEXT,  /* String */
	"algorithm" TEXT,  /* String */
	"split" TEXT,  /* String */
	"rows" bigint,  /* i64 */
	"accuracy" double precision,  /* Option < f64 > */
	"macro_f1" double precision,  /* Option < f64 > */
	"mae" double precision,  /* Option < f64 > */
	"seconds" double precision  /* Option < f64 > */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_train_wrapper';

-- sql/learn.sql
-- Predictors that learn: tributary_train (src/api/learn.rs) trains a model of a table's column
-- over features tributary builds itself (k-NN votes from an embedding, a TF-IDF lexical model,
-- the as-of label history of rows related through foreign keys, typed columns; crates/learn)
-- and stores it here; tributary_predict_column / tributary_predict apply it.
--
-- The catalog tributary._predictors holds the serialised model, which encodes the labels it was
-- trained on: nobody but the extension's own functions reads it. The view tributary.predictors
-- shows everything but the model to the predictor's owner (and members of that role) and to
-- roles that may read the label column. Written only by the Rust functions, as the extension's
-- owner, after they checked the caller: a name belongs to the role that trained it first; only
-- that role (or a member) retrains or drops it (42501).

CREATE TABLE tributary._predictors (
    name          text PRIMARY KEY,
    owner         regrole NOT NULL,           -- the role that trained it (dumped by name)
    tbl           regclass NOT NULL,          -- the table (dumped and restored by name)
    label         name NOT NULL,              -- the column predicted
    kind          text NOT NULL CHECK (kind IN ('category', 'number')),
    embedding     name,                       -- the vector/halfvec column of the k-NN votes, or NULL
    as_of         name,                       -- the time column, or NULL (leave-one-out)
    options       jsonb NOT NULL,             -- history, columns, algorithm, k as asked
    signature     jsonb NOT NULL,             -- every column read, with its type: [[table, column, type], ...]
    features      text[] NOT NULL,            -- the feature names, in the model's order
    algorithm     text NOT NULL,              -- 'gbdt' or 'logistic'
    classes       text[],                     -- categories: the classes known at training
    model         bytea NOT NULL,             -- crates/learn's Model::to_bytes
    metrics       jsonb NOT NULL,             -- what tributary_train returned
    training_rows bigint NOT NULL,
    trained_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    data_digest   text NOT NULL               -- FNV-1a over the training rows' keys, times and labels
);
REVOKE ALL ON tributary._predictors FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('tributary._predictors', '');

CREATE VIEW tributary.predictors WITH (security_barrier) AS
SELECT p.name, p.owner, p.tbl, p.label, p.kind, p.embedding, p.as_of, p.options, p.features,
       p.algorithm, p.classes, p.metrics, p.training_rows, p.trained_at, p.data_digest,
       pg_catalog.octet_length(p.model) AS model_bytes
  FROM tributary._predictors p
 WHERE pg_catalog.pg_has_role(CURRENT_USER, p.owner::oid, 'USAGE')
    OR (pg_catalog.to_regclass(p.tbl::oid::pg_catalog.regclass::pg_catalog.text) IS NOT NULL
        AND pg_catalog.has_column_privilege(p.tbl::oid, p.label, 'SELECT'));
GRANT SELECT ON tributary.predictors TO PUBLIC;

-- The type of column `col` of `rel` as format_type() writes it, and its type category
-- (pg_type.typcategory), or NULLs.
CREATE FUNCTION tributary._learn_column_type(rel regclass, col name, OUT sql_type text, OUT category "char", OUT typname name)
RETURNS record LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT format_type(a.atttypid, a.atttypmod), t.typcategory, t.typname
      FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
     WHERE a.attrelid = rel AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped
$$;

-- A float8 expression of value `v` (an expression of type category `category`, type `typname`):
-- numbers as they are, booleans 0/1, dates as days since 1970-01-01, timestamps as days (with
-- fractions) since the epoch; NULL for other types.
CREATE FUNCTION tributary._learn_number(v text, category "char", typname name) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN category = 'N' AND typname NOT IN ('oid', 'regclass', 'regproc', 'regtype', 'money')
            THEN format('CAST(%s AS pg_catalog.float8)', v)
        WHEN category = 'B' THEN format('CAST(CAST(%s AS pg_catalog.int4) AS pg_catalog.float8)', v)
        WHEN typname = 'date' THEN format('CAST(%s OPERATOR(pg_catalog.-) CAST(''1970-01-01'' AS pg_catalog.date) AS pg_catalog.float8)', v)
        WHEN typname IN ('timestamp', 'timestamptz')
            THEN format('(pg_catalog.date_part(''epoch'', %s) OPERATOR(pg_catalog./) CAST(86400 AS pg_catalog.float8))', v)
    END
$$;

-- A text expression of the key columns `cols` of alias `alias` (one column: its text; several:
-- the row constructor's text), NULL when any of them is NULL.
CREATE FUNCTION tributary._learn_key_text(alias text, cols name[]) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN cardinality(cols) = 1 THEN format('CAST(%I.%I AS pg_catalog.text)', alias, cols[1])
           ELSE format('CASE WHEN pg_catalog.num_nulls(%s) = 0 THEN CAST(ROW(%s) AS pg_catalog.text) END',
                       (SELECT string_agg(format('%I.%I', alias, c), ', ' ORDER BY o) FROM unnest(cols) WITH ORDINALITY u(c, o)),
                       (SELECT string_agg(format('%I.%I', alias, c), ', ' ORDER BY o) FROM unnest(cols) WITH ORDINALITY u(c, o)))
           END
$$;

-- The foreign keys of `rel` (as the referencing table), one row each: the constraint, the
-- referencing columns, the referenced table and columns, in key order.
CREATE FUNCTION tributary._learn_fkeys(rel regclass)
RETURNS TABLE (conname name, cols name[], ref regclass, ref_cols name[])
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.conname,
           (SELECT array_agg(a.attname ORDER BY k.o) FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
              JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n),
           c.confrelid::regclass,
           (SELECT array_agg(a.attname ORDER BY k.o) FROM unnest(c.confkey) WITH ORDINALITY k(n, o)
              JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n)
      FROM pg_constraint c
     WHERE c.conrelid = rel AND c.contype = 'f'
     ORDER BY c.conname
$$;

-- Whether `name` is chosen by `choice` (NULL: everything; '{}': nothing; else names to use,
-- or, prefixed with '-', names to leave out: a list of only exclusions keeps everything else).
CREATE FUNCTION tributary._learn_chosen(name text, choice text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN choice IS NULL THEN true
        WHEN cardinality(choice) = 0 THEN false
        WHEN ('-' || name) = ANY (choice) THEN false
        WHEN name = ANY (choice) THEN true
        ELSE NOT EXISTS (SELECT 1 FROM unnest(choice) c WHERE c NOT LIKE '-%')
    END
$$;

-- The plan of a predictor over column `label` of `tbl`: what tributary_train and the
-- prediction functions read, as jsonb (src/service/learn.rs reads it):
--   kind            'category' or 'number' (tributary.label_kind)
--   rows_sql        one row per row of the table: key (jsonb text), tableoid, ctid, as_of
--                   (float8), label (text or float8), text, embedding (float4[]), numbers
--                   (float8[]), categories (text[]), the group of each parent path (text[]), the
--                   referenced key of each link path (text[]); %SOURCE% and %CTID% are replaced
--                   by the caller (the table; or one record)
--   numbers, categories  the names of the typed features in rows_sql's arrays
--   parents         the names of the parent and two-hop paths, in the order of rows_sql's groups
--   links           [{name, ref, sql}]: sql gives (referenced key text, group text) pairs of one
--                   link path, ref = the index into rows_sql's referenced keys
--   as_of_sql       a statement that turns $1 (text) into the as_of float8, for split_at
--   signature       [[table, column, type], ...] of every column read
--   paths, columns  every history path and feature column found (chosen or not)
--   paths_used, columns_used  those chosen (what tributary_train stores as the predictor's
--                   history and columns, so that columns added later change nothing)
-- Paths (README, "Models that learn"): a foreign key of tbl, named by its columns
-- ("album_id": rows with the same parent); through the parent's own foreign keys ("album_id.artist_id":
-- rows whose parents share a grandparent); a link table referencing tbl and another table
-- ("film_person.person_id": rows linked to the same person). Typed columns: tbl's own numbers,
-- booleans, dates and timestamps, and text columns of at most 64 values in a sample of 10,000
-- rows (categories); a column without a value in that sample is none (an empty target column); the numbers of each parent ("album_id.price"). Text: tbl's own text
-- columns, its parents' ("track_id.name") and its grandparents' ("track_id.album_id.title"),
-- chosen by `columns` too. Only columns the caller may read are found; named ones it may not read fail when read
-- (42501). Errors: 42703 unknown label, as_of or embedding column; 42804 as_of not a number,
-- date or timestamp, embedding not vector/halfvec; 22023 a history path or column named that
-- does not exist (DETAIL lists those found).
CREATE FUNCTION tributary._learn_spec(
    tbl regclass, label name, embedding name, as_of name, history text[], columns text[])
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    vec text := tributary._vector_schema();
    kind text := tributary.label_kind(tbl, label, 'auto');
    ty record;
    a record;
    fk record;
    fk2 record;
    lk record;
    key_expr text := tributary.row_key(tbl, 't');
    as_of_expr text := 'CAST(NULL AS pg_catalog.float8)';
    as_of_sql text;
    texts text[] := '{}';
    nums text[] := '{}';
    num_names text[] := '{}';
    cats text[] := '{}';
    cat_names text[] := '{}';
    groups text[] := '{}';
    group_names text[] := '{}';
    refs text[] := '{}';
    ref_cols_seen text[] := '{}';
    links jsonb := '[]';
    found_paths text[] := '{}';
    found_cols text[] := '{}';
    used_cols text[] := '{}';
    used_paths text[] := '{}';
    sig jsonb := '[]';
    key_cols name[];
    pname text;
    n bigint;
    pn text[];
    pnn text[];
    ptx text[];
    emb_expr text := 'CAST(NULL AS pg_catalog.float4[])';
    ridx integer;
BEGIN
    -- Columns in a primary or foreign key: never typed features (an id is no quantity).
    SELECT coalesce(array_agg(DISTINCT att.attname), '{}') INTO key_cols
      FROM pg_constraint c CROSS JOIN LATERAL unnest(c.conkey) k(n)
      JOIN pg_attribute att ON att.attrelid = c.conrelid AND att.attnum = k.n
     WHERE c.conrelid = tbl AND c.contype IN ('p', 'f', 'u');
    sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, label, (tributary._learn_column_type(tbl, label)).sql_type));

    IF as_of IS NOT NULL THEN
        ty := tributary._learn_column_type(tbl, as_of);
        IF ty.sql_type IS NULL THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', as_of, tbl USING ERRCODE = '42703';
        END IF;
        as_of_expr := tributary._learn_number(format('t.%I', as_of), ty.category, ty.typname);
        IF as_of_expr IS NULL OR ty.category = 'B' THEN
            RAISE EXCEPTION 'as_of column "%" is of type %, not a number, date or timestamp', as_of, ty.sql_type
                USING ERRCODE = '42804', HINT = 'as_of names the column that dates each row: an integer (a year), a date or a timestamp.';
        END IF;
        as_of_sql := format('SELECT %s FROM (SELECT CAST($1 AS %s) AS %I) t', as_of_expr, ty.sql_type, as_of);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, as_of, ty.sql_type));
    END IF;

    IF embedding IS NOT NULL THEN
        PERFORM tributary.embedding_type(tbl, embedding);
        emb_expr := format('CAST(CAST(t.%I AS %s.vector) AS pg_catalog.float4[])', embedding, vec);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, embedding, (tributary._learn_column_type(tbl, embedding)).sql_type));
    END IF;

    -- Own columns.
    FOR a IN SELECT att.attname, t.typcategory, t.typname, format_type(att.atttypid, att.atttypmod) AS sql_type
               FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
              WHERE att.attrelid = tbl AND att.attnum > 0 AND NOT att.attisdropped
                AND att.attname NOT IN (label, coalesce(embedding, ''), coalesce(as_of, ''))
                AND NOT att.attname = ANY (key_cols)
                AND has_column_privilege(tbl, att.attnum, 'SELECT')
              ORDER BY att.attnum LOOP
        IF a.typname IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector', 'json', 'jsonb') THEN
            CONTINUE;
        END IF;
        -- Values in a sample of 10,000 rows (distinct, NULL not counted): an empty column (a
        -- target made for the predictions, say) is no feature.
        EXECUTE format('SELECT count(d.v) FROM (SELECT DISTINCT s.v FROM (SELECT t.%I AS v FROM %s t LIMIT 10000) s) d',
                       a.attname, tbl) INTO n;
        IF n = 0 THEN
            CONTINUE;
        END IF;
        IF tributary._learn_number(format('t.%I', a.attname), a.typcategory, a.typname) IS NOT NULL THEN
            found_cols := found_cols || a.attname::text;
            IF tributary._learn_chosen(a.attname, columns) THEN
                nums := nums || ('ARRAY[' || tributary._learn_number(format('t.%I', a.attname), a.typcategory, a.typname) || ']');
                num_names := num_names || a.attname::text;
                used_cols := used_cols || a.attname::text;
                sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, a.attname, a.sql_type));
            END IF;
        ELSIF a.typcategory IN ('S', 'E') THEN
            found_cols := found_cols || a.attname::text;
            IF NOT tributary._learn_chosen(a.attname, columns) THEN
                CONTINUE;
            END IF;
            texts := texts || format('CAST(t.%I AS pg_catalog.text)', a.attname);
            used_cols := used_cols || a.attname::text;
            sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, a.attname, a.sql_type));
            IF n <= 64 THEN
                cats := cats || format('CAST(t.%I AS pg_catalog.text)', a.attname);
                cat_names := cat_names || a.attname::text;
            END IF;
        END IF;
    END LOOP;

    -- Parents: the group of each foreign key, each parent's numbers, and two hops.
    FOR fk IN SELECT * FROM tributary._learn_fkeys(tbl) LOOP
        pname := array_to_string(fk.cols, ',');
        found_paths := found_paths || pname;
        IF tributary._learn_chosen(pname, history) THEN
            groups := groups || tributary._learn_key_text('t', fk.cols);
            group_names := group_names || pname;
            used_paths := used_paths || pname;
        END IF;
        -- The parent's numbers, as one float8[] subquery per parent.
        pn := '{}';
        pnn := '{}';
        ptx := '{}';
        FOR a IN SELECT att.attname, t.typcategory, t.typname, format_type(att.atttypid, att.atttypmod) AS sql_type
                   FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
                  WHERE att.attrelid = fk.ref AND att.attnum > 0 AND NOT att.attisdropped
                    AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk.ref
                                       AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                    AND has_column_privilege(fk.ref, att.attnum, 'SELECT')
                  ORDER BY att.attnum LOOP
            IF a.typcategory IN ('S', 'E') THEN
                -- The parent's text (an album's title, a track's composer) joins the row's text.
                found_cols := found_cols || (pname || '.' || a.attname);
                IF tributary._learn_chosen(pname || '.' || a.attname, columns) THEN
                    ptx := ptx || format('CAST(p.%I AS pg_catalog.text)', a.attname);
                    used_cols := used_cols || (pname || '.' || a.attname);
                    sig := sig || jsonb_build_array(jsonb_build_array(fk.ref::text, a.attname, a.sql_type));
                END IF;
                CONTINUE;
            END IF;
            IF tributary._learn_number(format('p.%I', a.attname), a.typcategory, a.typname) IS NULL
               OR a.typname IN ('vector', 'halfvec') THEN
                CONTINUE;
            END IF;
            found_cols := found_cols || (pname || '.' || a.attname);
            IF tributary._learn_chosen(pname || '.' || a.attname, columns) THEN
                pn := pn || tributary._learn_number(format('p.%I', a.attname), a.typcategory, a.typname);
                pnn := pnn || (pname || '.' || a.attname);
                used_cols := used_cols || (pname || '.' || a.attname);
                sig := sig || jsonb_build_array(jsonb_build_array(fk.ref::text, a.attname, a.sql_type));
            END IF;
        END LOOP;
        IF cardinality(ptx) > 0 THEN
            texts := texts || format('(SELECT pg_catalog.concat_ws('' '', %s) FROM %s p WHERE (%s) = (%s))',
                array_to_string(ptx, ', '), fk.ref,
                (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
        END IF;
        IF cardinality(pn) > 0 THEN
            -- No parent row (a NULL foreign key): as many NULLs.
            nums := nums || format('COALESCE((SELECT ARRAY[%s] FROM %s p WHERE (%s) = (%s)), pg_catalog.array_fill(CAST(NULL AS pg_catalog.float8), ARRAY[%s]))',
                array_to_string(pn, ', '), fk.ref,
                (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)),
                cardinality(pn));
            num_names := num_names || pnn;
        END IF;
        FOR fk2 IN SELECT * FROM tributary._learn_fkeys(fk.ref) LOOP
            found_paths := found_paths || (pname || '.' || array_to_string(fk2.cols, ','));
            IF tributary._learn_chosen(pname || '.' || array_to_string(fk2.cols, ','), history) THEN
                groups := groups || format('(SELECT %s FROM %s p WHERE (%s) = (%s))',
                    tributary._learn_key_text('p', fk2.cols), fk.ref,
                    (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
                group_names := group_names || (pname || '.' || array_to_string(fk2.cols, ','));
                used_paths := used_paths || (pname || '.' || array_to_string(fk2.cols, ','));
            END IF;
            -- The grandparent's text (a track's album title) joins the row's text too.
            ptx := '{}';
            FOR a IN SELECT att.attname, format_type(att.atttypid, att.atttypmod) AS sql_type
                       FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
                      WHERE att.attrelid = fk2.ref AND att.attnum > 0 AND NOT att.attisdropped
                        AND t.typcategory IN ('S', 'E')
                        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk2.ref
                                           AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                        AND has_column_privilege(fk2.ref, att.attnum, 'SELECT')
                      ORDER BY att.attnum LOOP
                found_cols := found_cols || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || a.attname);
                IF tributary._learn_chosen(pname || '.' || array_to_string(fk2.cols, ',') || '.' || a.attname, columns) THEN
                    ptx := ptx || format('CAST(g.%I AS pg_catalog.text)', a.attname);
                    used_cols := used_cols || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || a.attname);
                    sig := sig || jsonb_build_array(jsonb_build_array(fk2.ref::text, a.attname, a.sql_type));
                END IF;
            END LOOP;
            IF cardinality(ptx) > 0 THEN
                texts := texts || format('(SELECT pg_catalog.concat_ws('' '', %s) FROM %s p JOIN %s g ON (%s) = (%s) WHERE (%s) = (%s))',
                    array_to_string(ptx, ', '), fk.ref, fk2.ref,
                    (SELECT string_agg(format('g.%I', c), ', ' ORDER BY o) FROM unnest(fk2.ref_cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk2.cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
            END IF;
        END LOOP;
    END LOOP;

    -- Link tables: a table with a foreign key to tbl and another foreign key.
    FOR lk IN SELECT c.conrelid::regclass AS child, l.cols, l.ref_cols, o.cols AS other_cols, o.ref AS other
                FROM pg_constraint c
                CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) l
                CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) o
               WHERE c.confrelid = tbl AND c.contype = 'f' AND c.conrelid <> tbl
                 AND l.conname = c.conname AND o.conname <> c.conname
               ORDER BY c.conrelid::regclass::text, o.conname LOOP
        pname := format('%s.%s', (SELECT relname FROM pg_class WHERE oid = lk.child), array_to_string(lk.other_cols, ','));
        found_paths := found_paths || pname;
        IF NOT tributary._learn_chosen(pname, history) THEN
            CONTINUE;
        END IF;
        ridx := array_position(ref_cols_seen, array_to_string(lk.ref_cols, ','));
        IF ridx IS NULL THEN
            refs := refs || tributary._learn_key_text('t', lk.ref_cols);
            ref_cols_seen := ref_cols_seen || array_to_string(lk.ref_cols, ',');
            ridx := cardinality(refs);
        END IF;
        used_paths := used_paths || pname;
        links := links || jsonb_build_object('name', pname, 'ref', ridx - 1,
            'sql', format('SELECT %s, %s FROM %s l', tributary._learn_key_text('l', lk.cols),
                          tributary._learn_key_text('l', lk.other_cols), lk.child));
        sig := sig || jsonb_build_array(jsonb_build_array(lk.child::text, array_to_string(lk.cols, ','), 'link'));
    END LOOP;

    -- Names asked for that do not exist.
    SELECT string_agg(quote_literal(h), ', ') INTO pname FROM unnest(history) h
     WHERE ltrim(h, '-') <> ALL (found_paths);
    IF pname IS NOT NULL THEN
        RAISE EXCEPTION 'history path % of relation "%" does not exist', pname, tbl USING ERRCODE = '22023',
            DETAIL = format('The paths found: %s.', coalesce(nullif(array_to_string(found_paths, ', '), ''), 'none')),
            HINT = 'Paths are named by the foreign key columns they follow (see tributary_train''s documentation).';
    END IF;
    SELECT string_agg(quote_literal(h), ', ') INTO pname FROM unnest(columns) h
     WHERE ltrim(h, '-') <> ALL (found_cols);
    IF pname IS NOT NULL THEN
        RAISE EXCEPTION 'feature column % of relation "%" does not exist', pname, tbl USING ERRCODE = '22023',
            DETAIL = format('The typed columns found: %s.', coalesce(nullif(array_to_string(found_cols, ', '), ''), 'none')),
            HINT = 'Columns of numbers, dates, booleans and categories of up to 64 values that the caller may read are features.';
    END IF;

    RETURN jsonb_build_object(
        'kind', kind,
        'rows_sql', format('SELECT CAST(%s AS pg_catalog.text), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s FROM %%SOURCE%% t',
            key_expr, '%TABLEOID%', '%CTID%', as_of_expr,
            CASE kind WHEN 'number' THEN format('CAST(t.%I AS pg_catalog.float8)', label)
                      ELSE format('CAST(t.%I AS pg_catalog.text)', label) END,
            CASE WHEN cardinality(texts) = 0 THEN 'CAST(NULL AS pg_catalog.text)'
                 ELSE format('pg_catalog.concat_ws('' '', %s)', array_to_string(texts, ', ')) END,
            emb_expr,
            CASE WHEN cardinality(nums) = 0 THEN 'CAST(NULL AS pg_catalog.float8[])'
                 ELSE format('CAST(%s AS pg_catalog.float8[])', array_to_string(nums, ' OPERATOR(pg_catalog.||) ')) END,
            CASE WHEN cardinality(cats) = 0 THEN 'CAST(NULL AS pg_catalog.text[])'
                 ELSE format('ARRAY[%s]', array_to_string(cats, ', ')) END,
            CASE WHEN cardinality(groups) = 0 THEN 'CAST(NULL AS pg_catalog.text[])'
                 ELSE format('ARRAY[%s]', array_to_string(groups, ', ')) END,
            CASE WHEN cardinality(refs) = 0 THEN 'CAST(NULL AS pg_catalog.text[])'
                 ELSE format('ARRAY[%s]', array_to_string(refs, ', ')) END),
        'numbers', to_jsonb(num_names),
        'categories', to_jsonb(cat_names),
        'parents', to_jsonb(group_names),
        'links', links,
        'as_of_sql', as_of_sql,
        'signature', sig,
        'paths', to_jsonb(found_paths),
        'columns', to_jsonb(found_cols),
        'columns_used', to_jsonb(used_cols),
        'paths_used', to_jsonb(used_paths));
END $$;

ALTER FUNCTION _predict_record(text, jsonb) SET SCHEMA tributary;

-- tributary_predict(predictor text, row [, ...]) → (prediction, confidence, evidence): one row's
-- prediction by a trained predictor (tributary_train), its features as of the row's own as_of.
-- `row` is a row of the predictor's table (a whole-row reference, or ROW(...)::tbl for a row not
-- in the table). See tributary._predict_record (src/api/learn.rs) for the evidence and errors.
-- NULL row gives NULLs.
CREATE FUNCTION tributary_predict(predictor text, "row" anyelement,
    OUT prediction text, OUT confidence float8, OUT evidence jsonb)
RETURNS record LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT r.prediction, r.confidence, r.evidence
      FROM tributary._predict_record(predictor, pg_catalog.to_jsonb("row")) r
$$;

COMMENT ON TABLE tributary._predictors IS 'Trained predictors (tributary_train): the serialised models and what they were trained on; read only through tributary''s functions.';
COMMENT ON VIEW tributary.predictors IS 'Trained predictors visible to the current role (owner, member of the owner, or allowed to read the label column): options, features, metrics, no model.';
COMMENT ON FUNCTION tributary._learn_column_type(regclass, name) IS 'Internal: a column''s format_type, type category and type name.';
COMMENT ON FUNCTION tributary._learn_number(text, "char", name) IS 'Internal: a float8 expression of a number, boolean, date or timestamp expression.';
COMMENT ON FUNCTION tributary._learn_key_text(text, name[]) IS 'Internal: a text expression of key columns (NULL when one is NULL).';
COMMENT ON FUNCTION tributary._learn_fkeys(regclass) IS 'Internal: the foreign keys of a table with their columns.';
COMMENT ON FUNCTION tributary._learn_chosen(text, text[]) IS 'Internal: whether a name is chosen by a list of names or -exclusions (NULL: all).';
COMMENT ON FUNCTION tributary._learn_spec(regclass, name, name, name, text[], text[]) IS 'Internal: the features of a predictor: the rows query, history paths, typed columns and the columns read.';
COMMENT ON FUNCTION tributary._predict_record(text, jsonb) IS 'Internal: one row''s prediction by a predictor (behind tributary_predict(predictor, row)).';
COMMENT ON FUNCTION tributary_predict(text, anyelement) IS 'One row''s prediction by a trained predictor, its features as of the row''s time, with evidence.';
COMMENT ON FUNCTION tributary_train(text, regclass, name, name, name, text, text[], text[], text, integer) IS 'Trains a predictor of a column over k-NN votes, a TF-IDF model, the as-of label history through foreign keys and typed columns; returns its metrics next to k-NN and the majority baseline.';
COMMENT ON FUNCTION tributary_predict_column(text, name, integer) IS 'Fills a column with a trained predictor''s predictions for the rows whose label is NULL.';
COMMENT ON FUNCTION tributary_drop_predictor(text) IS 'Drops a trained predictor (its owner only).';

-- sql/learn_jobs.sql
-- Predictions kept current (issue 35): a predict job keeps column `target` of a predictor's table
-- filled with the predictor's predictions, as tributary_predict_column(predictor, target) would
-- fill it now, refreshed by the background workers (src/worker/predict.rs) when rows of the table
-- are inserted, updated (any column but `target`: the job's own writes do not wake it), deleted
-- or truncated, and when rows of the tables its history reads change: the tables its foreign
-- keys reference (parents: their numbers and their own foreign keys are features) and the link
-- tables (a foreign key to the table and another one; tributary._learn_spec in sql/learn.sql).
--
-- A statement-level trigger on each of those tables (tributary._predict_trigger, owned by the
-- extension's owner) adds one row to the append-only queue tributary._predict_dirty and wakes
-- the database's workers at commit. A worker picks a job with queued rows, at most once per
-- tributary.job_poll_interval per job, and in one transaction takes the queued rows, runs
-- tributary_predict_column(predictor, target) as the table's owner (read from pg_class at each
-- refresh, like every job) and records the refresh: a crash before the commit leaves the queued
-- rows, and the refresh runs again. A refresh that fails is recorded (last_error) and retried
-- after the poll interval; after tributary.job_max_attempts failures in a row the job is
-- 'failed' (drop it and create it again once the cause is fixed, e.g. after retraining).

CREATE TABLE tributary._predict_jobs (
    id            bigserial PRIMARY KEY,
    predictor     text NOT NULL,               -- tributary._predictors.name
    target        name NOT NULL,               -- the column written
    tbl           regclass NOT NULL,           -- the predictor's table (dumped by name)
    owner         regrole NOT NULL,            -- the table's owner at the last refresh: refreshes run as it
    state         text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'failed')),
    attempts      integer NOT NULL DEFAULT 0,  -- failed refreshes in a row
    runs          bigint NOT NULL DEFAULT 0,   -- committed refreshes
    rows_done     bigint NOT NULL DEFAULT 0,   -- rows written by committed refreshes
    last_run_at   timestamptz,                 -- start of the last refresh (committed or failed)
    last_error    text,
    last_error_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    UNIQUE (tbl, target)
);
-- One row per statement that may change a prediction; taken (deleted) by the refresh that covers it.
CREATE TABLE tributary._predict_dirty (
    id  bigserial PRIMARY KEY,
    job bigint NOT NULL REFERENCES tributary._predict_jobs ON DELETE CASCADE,
    at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE INDEX ON tributary._predict_dirty (job);
REVOKE ALL ON tributary._predict_jobs, tributary._predict_dirty FROM PUBLIC;
-- Jobs are kept by pg_dump (their triggers are dumped with the tables); the queue is not (the
-- predictions it would refresh are dumped as they are).
SELECT pg_catalog.pg_extension_config_dump('tributary._predict_jobs', '');
SELECT pg_catalog.pg_extension_config_dump('tributary._predict_jobs_id_seq', '');

CREATE VIEW tributary.predict_jobs WITH (security_barrier) AS
SELECT j.id, j.predictor, j.target, j.tbl, j.owner, j.state, j.rows_done, j.runs, j.attempts,
       j.last_run_at, j.last_error, j.last_error_at, j.created_at,
       (SELECT pg_catalog.count(*) FROM tributary._predict_dirty d WHERE d.job OPERATOR(pg_catalog.=) j.id) AS pending
  FROM tributary._predict_jobs j
 WHERE pg_catalog.pg_has_role(CURRENT_USER,
           COALESCE((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) j.tbl::pg_catalog.oid), j.owner::pg_catalog.oid),
           'USAGE');
GRANT SELECT ON tributary.predict_jobs TO PUBLIC;

-- The statement-level trigger: queues a refresh of job TG_ARGV[0] (when it is active) and wakes
-- the workers at commit. SECURITY DEFINER (its owner is the extension's owner): whoever writes
-- the table needs no right on the queue. (client_min_messages: tributary_predict_job_create has
-- already warned when tributary is not in shared_preload_libraries.)
CREATE FUNCTION tributary._predict_trigger() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $$
BEGIN
    INSERT INTO tributary._predict_dirty (job)
    SELECT j.id FROM tributary._predict_jobs j
     WHERE j.id OPERATOR(pg_catalog.=) CAST(TG_ARGV[0] AS pg_catalog.int8)
       AND j.state OPERATOR(pg_catalog.=) 'active';
    IF FOUND THEN
        PERFORM tributary._wake_launcher();
    END IF;
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION tributary._predict_trigger() FROM PUBLIC;

-- The tables whose rows a predictor over `tbl` reads besides tbl: the tables its foreign keys
-- reference, and the link tables (a foreign key to tbl and another foreign key), as
-- tributary._learn_spec finds them. Ordinary and partitioned tables only.
CREATE FUNCTION tributary._predict_related(tbl regclass) RETURNS SETOF regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT DISTINCT r.rel::regclass
      FROM (SELECT c.confrelid AS rel FROM pg_constraint c WHERE c.conrelid = tbl AND c.contype = 'f'
            UNION
            SELECT c.conrelid FROM pg_constraint c
             WHERE c.confrelid = tbl AND c.contype = 'f' AND c.conrelid <> tbl
               AND EXISTS (SELECT 1 FROM pg_constraint o WHERE o.conrelid = c.conrelid
                              AND o.contype = 'f' AND o.conname <> c.conname)) r
      JOIN pg_class k ON k.oid = r.rel
     WHERE r.rel <> tbl AND k.relkind IN ('r', 'p')
$$;

-- The job functions: called only through tributary._job_call (src/worker/jobs_sql.rs) as the
-- extension's owner, `caller` being the role that called the public function (GetUserId()).

CREATE FUNCTION tributary._predict_job_create(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
    pred   text := a->>'predictor';
    target name := a->>'target';
    p      tributary._predictors;
    tbl_owner oid;
    kind   "char";
    cols   text;
    rel    regclass;
    job    bigint;
BEGIN
    IF pred IS NULL OR target IS NULL THEN
        RAISE EXCEPTION 'predictor and target must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO p FROM tributary._predictors x WHERE x.name = pred;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'predictor "%" does not exist', pred USING ERRCODE = 'undefined_object',
            HINT = 'Predictors are listed in tributary.predictors; tributary_train makes one.';
    END IF;
    SELECT c.relowner, c.relkind INTO tbl_owner, kind FROM pg_class c WHERE c.oid = p.tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the table of predictor "%" was dropped', pred USING ERRCODE = 'undefined_table';
    END IF;
    IF NOT pg_has_role(caller, tbl_owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', p.tbl USING ERRCODE = 'insufficient_privilege',
            HINT = 'A predict job writes the table as its owner: its owner (or a member of the owning role) makes it.';
    END IF;
    IF NOT (pg_has_role(caller, p.owner, 'USAGE') OR has_column_privilege(caller, p.tbl, p.label, 'SELECT')) THEN
        RAISE EXCEPTION 'permission denied for predictor "%"', pred USING ERRCODE = 'insufficient_privilege',
            HINT = 'Using a predictor needs its ownership or SELECT on its label column.';
    END IF;
    IF target = p.label THEN
        RAISE EXCEPTION 'target must not be the label column "%"', target USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Predictions written to the label column would count as labels; write them to another column.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = p.tbl AND t.attname = target
                      AND t.attnum > 0 AND NOT t.attisdropped) THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', target, p.tbl USING ERRCODE = 'undefined_column';
    END IF;
    IF EXISTS (SELECT 1 FROM tributary._predict_jobs j WHERE j.tbl = p.tbl AND j.target = target) THEN
        RAISE EXCEPTION 'a predict job already writes column "%" of %', target, p.tbl USING ERRCODE = 'duplicate_object',
            HINT = 'tributary.predict_jobs lists it; tributary_predict_job_drop drops it.';
    END IF;
    INSERT INTO tributary._predict_jobs (predictor, target, tbl, owner)
    VALUES (pred, target, p.tbl, tbl_owner::regrole) RETURNING id INTO job;

    -- On the table: every column but target (the job's own UPDATEs set target only).
    SELECT string_agg(quote_ident(t.attname), ', ' ORDER BY t.attnum) INTO cols
      FROM pg_attribute t
     WHERE t.attrelid = p.tbl AND t.attnum > 0 AND NOT t.attisdropped AND t.attgenerated = ''
       AND t.attname <> target;
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OF %s OR DELETE%s ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                   'tributary_predict_' || job, cols,
                   CASE WHEN kind IN ('r', 'p') THEN ' OR TRUNCATE' ELSE '' END, p.tbl, job);
    -- On the tables its history and features read: any change.
    FOR rel IN SELECT r FROM tributary._predict_related(p.tbl) r LOOP
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                       'tributary_predict_' || job, rel, job);
    END LOOP;
    -- The first refresh fills the rows there now.
    INSERT INTO tributary._predict_dirty (job) VALUES (job);
    PERFORM tributary._wake_launcher();
    RETURN job;
END $fn$;

CREATE FUNCTION tributary._predict_job_drop(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    job bigint := (a->>'job')::bigint;
    j   tributary._predict_jobs;
    t   record;
BEGIN
    IF job IS NULL THEN
        RAISE EXCEPTION 'job must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO j FROM tributary._predict_jobs x
     WHERE x.id = job
       AND pg_has_role(caller, coalesce((SELECT c.relowner FROM pg_class c WHERE c.oid = x.tbl), x.owner), 'USAGE')
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'predict job % does not exist', job USING ERRCODE = 'undefined_object',
            HINT = 'Your predict jobs are listed in tributary.predict_jobs.';
    END IF;
    FOR t IN SELECT g.tgrelid::regclass AS rel, g.tgname FROM pg_trigger g
              WHERE g.tgname = 'tributary_predict_' || j.id
                AND g.tgfoid = 'tributary._predict_trigger()'::regprocedure LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
    END LOOP;
    DELETE FROM tributary._predict_jobs WHERE id = j.id;
    RETURN j.id;
END $$;

REVOKE ALL ON FUNCTION tributary._predict_job_create(oid, jsonb), tributary._predict_job_drop(oid, jsonb),
    tributary._predict_related(regclass) FROM PUBLIC;

-- tributary_predict_job_create(predictor, target) -> job id: keeps column target of the
-- predictor's table filled by the background workers (see above). SECURITY INVOKER, so that
-- tributary._job_call sees who calls it. Errors: 22004 NULL; 42704 unknown predictor; 42501 the
-- caller is not (a member of) the table's owner, or may not use the predictor (its ownership or
-- SELECT on the label column); 22023 target = the label column; 42703 unknown target; 42710 a
-- predict job writes that column already; 42P01 the table was dropped.
CREATE FUNCTION tributary_predict_job_create(predictor text, target name) RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT tributary._job_call('predict_create', jsonb_build_object('predictor', predictor, 'target', target))
$$;

-- tributary_predict_job_drop(job): drops a predict job and its triggers (the table's owner or a
-- member; 42704 otherwise). The predictions written stay.
CREATE FUNCTION tributary_predict_job_drop(job bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM tributary._job_call('predict_drop', jsonb_build_object('job', job)); END $$;

COMMENT ON TABLE tributary._predict_jobs IS 'Predict jobs (tributary_predict_job_create): a predictor''s column kept filled by the background workers; read through tributary.predict_jobs.';
COMMENT ON TABLE tributary._predict_dirty IS 'Internal: one row per statement that may change a predict job''s predictions, taken by the refresh that covers it.';
COMMENT ON VIEW tributary.predict_jobs IS 'Predict jobs of tables the current role owns (or is a member of the owner of): state, refreshes, rows written, the last error and the statements pending.';
COMMENT ON FUNCTION tributary._predict_trigger() IS 'Internal: the statement-level trigger of predict jobs (queues a refresh, wakes the workers at commit).';
COMMENT ON FUNCTION tributary._predict_related(regclass) IS 'Internal: the tables a predictor over a table reads besides it (referenced tables and link tables).';
COMMENT ON FUNCTION tributary._predict_job_create(oid, jsonb) IS 'Internal: tributary_predict_job_create, as the extension''s owner.';
COMMENT ON FUNCTION tributary._predict_job_drop(oid, jsonb) IS 'Internal: tributary_predict_job_drop, as the extension''s owner.';
COMMENT ON FUNCTION tributary_predict_job_create(text, name) IS 'Keeps a column filled with a trained predictor''s predictions, refreshed by the background workers as the table''s owner when rows of the table or of the tables its history reads change; returns the job id.';
COMMENT ON FUNCTION tributary_predict_job_drop(bigint) IS 'Drops a predict job and its triggers; the predictions written stay.';

COMMENT ON SEQUENCE tributary._predict_jobs_id_seq IS 'Internal: predict job ids.';
COMMENT ON SEQUENCE tributary._predict_dirty_id_seq IS 'Internal: the order of queued refreshes.';
