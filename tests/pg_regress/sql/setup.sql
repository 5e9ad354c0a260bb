-- Runs first, in a fresh database: the extension and a helper that shows an error's SQLSTATE,
-- message, DETAIL and HINT in one deterministic line.
CREATE EXTENSION vector;
CREATE EXTENSION tributary;
-- pgvector's version differs by major (0.8.0 from Debian, 0.8.5 in PostgreSQL 16's wheel): what
-- matters is that it has halfvec (0.7.0 and later).
SELECT extname, CASE WHEN extname = 'vector' THEN 'halfvec: ' || (string_to_array(extversion, '.')::int[] >= '{0,7,0}')
                     ELSE extversion END AS version
FROM pg_extension WHERE extname IN ('vector', 'tributary') ORDER BY 1;
-- The installation's directories as $libdir and $sharedir in messages: the same output on every
-- PostgreSQL. SECURITY DEFINER: pg_config is readable by superusers only.
CREATE FUNCTION mask_dirs(msg text) RETURNS text LANGUAGE sql SECURITY DEFINER AS $$
  SELECT replace(replace(msg,
    (SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'), '$libdir'),
    (SELECT setting FROM pg_config WHERE name = 'SHAREDIR'), '$sharedir')
$$;
CREATE FUNCTION expect_error(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  state text; msg text; detail text; hint text;
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
  RETURN mask_dirs(state || ': ' || msg
      || CASE WHEN detail <> '' THEN E'\nDETAIL: ' || detail ELSE '' END
      || CASE WHEN hint <> '' THEN E'\nHINT: ' || hint ELSE '' END);
END $$;
