"""Predictors that learn (issue 35): tributary_train, tributary_predict_column(predictor, target),
tributary_predict(predictor, row), tributary_drop_predictor, the catalog and its view.

What is checked, on a real cluster with the real model:
- leakage: a row's prediction (its features) does not change when the labels of rows dated at
  or after it change, and does change when an earlier related row's label changes; a model
  trained with split_at is the same model, byte for byte, whatever the test rows' labels are;
- as-of semantics: the history counted for a row is the related rows strictly earlier (ties
  left out), the evidence says so; rows with a NULL as_of are left out with a NOTICE;
- it learns: on Chinook (real data; tracks' genres through their albums and artists) the
  predictor beats the majority class and k-NN, and predict_column fills what was NULL;
- row-level security and column privileges: training sees what the caller sees; using a
  predictor needs its ownership or SELECT on the label column; retraining or dropping another
  role's predictor is 42501; the catalog itself is closed;
- bad input: one class, unknown path, unknown column, a changed table, NULLs;
- cancel and statement_timeout mid-training store nothing;
- dump and restore keep a predictor, which predicts the same afterwards;
- in time (issue 47): the same rows in another heap order train the same model byte for byte; a
  column predictions were written to is no feature unless named; a timestamp as_of's month,
  weekday and hour (UTC) and each path's age and earlier rows are features; tributary_predict_column_online
  (the online protocol) predicts every row from strictly earlier labels only.
"""
import os
import subprocess

import psycopg
from psycopg.conninfo import make_conninfo
import pytest

import jobwait

DB = "tributary_learn"
ROLES = ("learn_alice", "learn_bob")


def connect(dsn, **kw):
    return jobwait.connect(dsn, **kw)


@pytest.fixture(scope="module")
def env(dsn):
    base = dsn
    with connect(base) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {DB}")
        for r in ROLES:
            c.execute(f"DROP ROLE IF EXISTS {r}")
            c.execute(f"CREATE ROLE {r} LOGIN")
    db = make_conninfo(base, dbname=DB)
    with connect(db) as c:
        c.execute("CREATE EXTENSION tributary CASCADE")
        c.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    yield {"dsn": db, "base": base}
    with connect(base) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        c.execute(f"DROP DATABASE IF EXISTS {DB}_restored WITH (FORCE)")
        for r in ROLES:
            c.execute(f"DROP ROLE IF EXISTS {r}")


def history_table(c, name="ev"):
    """Events of people: each event has a person (parent) and a kind (the label), dated by day.
    A person's kinds repeat, so the history through person_id predicts the kind."""
    c.execute(f"""
        DROP TABLE IF EXISTS {name}, {name}_person CASCADE;
        CREATE TABLE {name}_person (person_id int PRIMARY KEY, name text, age int);
        CREATE TABLE {name} (id int PRIMARY KEY, person_id int REFERENCES {name}_person, day int,
                             note text, kind text, guess text);
        INSERT INTO {name}_person SELECT p, 'person ' || p, 20 + p FROM generate_series(1, 40) p;
        -- Person p's events are mostly kind (p % 4): 'a'..'d'; one in five is another kind.
        INSERT INTO {name} (id, person_id, day, note, kind)
        SELECT i, 1 + (i % 40), i / 8,
               'event number ' || i,
               CASE WHEN i % 5 = 0 THEN chr(97 + ((i / 40) % 4)) ELSE chr(97 + ((1 + (i % 40)) % 4)) END
          FROM generate_series(1, 800) i;
    """)


def train(c, *args, **kw):
    named = ", ".join([*args, *(f"{k} => {v}" for k, v in kw.items())])
    return c.execute(f"SELECT method, algorithm, split, rows, accuracy, macro_f1, mae, seconds "
                     f"FROM tributary_train({named})").fetchall()


def by_method(rows, split="test"):
    """The rows of one split by method (with algorithm 'auto', the validation rows compare both heads)."""
    return {r[0]: r for r in rows if r[2] == split}


def test_learns_from_history_and_predicts_the_column(env):
    with connect(env["dsn"]) as c:
        history_table(c)
        # The real model's embeddings of the notes (the k-NN votes' input).
        c.execute("ALTER TABLE ev ADD COLUMN e vector(384)")
        c.execute("SELECT tributary_embed_column('ev', '{note}', 'e')")
        rows = by_method(train(c, "'ev_p'", "'ev'", "'kind'", embedding="'e'", as_of="'day'", split_at="'80'"))
        assert set(rows) == {"predictor", "knn", "baseline"}, rows
        pred, base = rows["predictor"], rows["baseline"]
        assert pred[2] == "test" and pred[3] == 161, pred          # days 80..100: events 640..800
        # The person's history decides 4 in 5 events; the majority class is about 1 in 4.
        assert pred[4] >= 0.7 and pred[4] > base[4] + 0.3, rows
        assert pred[7] is not None and pred[7] > 0
        # The catalog: visible through the view, without the model.
        info = c.execute("SELECT kind, as_of, training_rows, algorithm, classes, model_bytes > 0, "
                         "'person_id' = ANY (features) OR EXISTS (SELECT 1 FROM unnest(features) f WHERE f LIKE '%person_id%') "
                         "FROM tributary.predictors WHERE name = 'ev_p'").fetchone()
        assert info[0] == "category" and info[1] == "day" and info[2] == 639, info
        assert info[3] in ("gbdt", "logistic") and sorted(info[4]) == ["a", "b", "c", "d"] and info[5] and info[6], info
        # Predict the test period: set its labels to NULL, fill guess.
        c.execute("CREATE TABLE ev_truth AS SELECT id, kind FROM ev WHERE day >= 80")
        c.execute("UPDATE ev SET kind = NULL WHERE day >= 80")
        n = c.execute("SELECT tributary_predict_column('ev_p', 'guess')").fetchone()[0]
        assert n == 161
        acc = c.execute("SELECT avg((e.guess = t.kind)::int) FROM ev e JOIN ev_truth t USING (id)").fetchone()[0]
        assert acc >= 0.7, acc
        assert c.execute("SELECT count(*) FROM ev WHERE kind IS NOT NULL AND guess IS NOT NULL").fetchone()[0] == 0


def test_no_future_label_leaks_into_a_rows_features(env):
    with connect(env["dsn"]) as c:
        history_table(c, "lk")
        train(c, "'lk_p'", "'lk'", "'kind'", as_of="'day'", algorithm="'gbdt'")
        probe = "SELECT prediction, confidence, evidence FROM lk, tributary_predict('lk_p', lk) WHERE lk.id = 403"
        before = c.execute(probe).fetchone()
        day = c.execute("SELECT day FROM lk WHERE id = 403").fetchone()[0]
        # Every label of its day and later (its own included) changed: nothing it may see changed.
        c.execute("UPDATE lk SET kind = 'zz' WHERE day >= %s", (day,))
        assert c.execute(probe).fetchone() == before
        # Control: an earlier row of the same person changes its evidence.
        c.execute("UPDATE lk SET kind = 'zz' WHERE person_id = (SELECT person_id FROM lk WHERE id = 403) AND day < %s",
                  (day,))
        after = c.execute(probe).fetchone()
        assert after != before


def test_test_rows_labels_never_enter_the_model(env):
    with connect(env["dsn"]) as c:
        history_table(c, "sp")
        train(c, "'sp_1'", "'sp'", "'kind'", as_of="'day'", split_at="'60'", algorithm="'gbdt'")
        c.execute("UPDATE sp SET kind = CASE kind WHEN 'a' THEN 'b' ELSE 'a' END WHERE day >= 60")
        train(c, "'sp_2'", "'sp'", "'kind'", as_of="'day'", split_at="'60'", algorithm="'gbdt'")
        m = c.execute("SELECT name, model, data_digest FROM tributary._predictors WHERE name IN ('sp_1', 'sp_2') "
                      "ORDER BY name").fetchall()
        assert m[0][1] == m[1][1] and m[0][2] == m[1][2], "a test row's label changed the trained model"


def test_as_of_counts_only_strictly_earlier_rows(env):
    with connect(env["dsn"]) as c:
        c.execute("""
            DROP TABLE IF EXISTS ao, ao_parent CASCADE;
            CREATE TABLE ao_parent (pid int PRIMARY KEY);
            CREATE TABLE ao (id int PRIMARY KEY, pid int REFERENCES ao_parent, t date, kind text);
            INSERT INTO ao_parent VALUES (1), (2);
            INSERT INTO ao VALUES (1, 1, '2020-01-01', 'x'), (2, 1, '2020-01-02', 'y'), (3, 1, '2020-01-02', 'x'),
                                  (4, 1, '2020-01-03', NULL), (5, 2, '2020-01-01', 'y'), (6, 2, '2020-01-02', 'y'),
                                  (7, 2, NULL, 'x');
        """)
        notices = []
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        train(c, "'ao_p'", "'ao'", "'kind'", as_of="'t'", algorithm="'logistic'")
        assert any("1 rows with a NULL t left out" in n for n in notices), notices
        hist = dict(c.execute("SELECT ao.id, (tributary_predict('ao_p', ao)).evidence -> 'history' -> 'pid' "
                              "FROM ao ORDER BY id").fetchall())
        # Row 2 and 3 (day 2) see row 1 only; row 4 (day 3) sees rows 1-3; row 1 nothing earlier.
        assert float(hist[1] or 0) == 0 and float(hist[2]) == 1 and float(hist[3]) == 1 and float(hist[4]) == 3, hist
        assert hist[7] is None   # NULL as_of: no prediction


def paths_as(c, role, tbl, label, as_of):
    """The history paths tributary._learn_spec finds for `role` (SET ROLE, then back)."""
    c.execute(f"SET ROLE {role}")
    try:
        return c.execute("SELECT tributary._learn_spec(%s, %s, NULL, %s, NULL, NULL) -> 'paths'",
                         (tbl, label, as_of)).fetchone()[0]
    finally:
        c.execute("RESET ROLE")


def bob_trains(c):
    """learn_bob trains on hs_sale with every path it finds (no 42501), and drops the predictor."""
    c.execute("SET ROLE learn_bob")
    try:
        assert by_method(train(c, "'hs_bob'", "'hs_sale'", "'kind'", as_of="'day'", split_at="'80'"))["predictor"]
        c.execute("SELECT tributary_drop_predictor('hs_bob')")
    finally:
        c.execute("RESET ROLE")


def test_three_hop_and_parent_link_paths(env):
    """A sale -> track -> album -> artist path (three hops) and a sale -> track -> playlist_track
    -> playlist path (a parent's link table) are found, count only strictly earlier labelled
    sales, carry the label when nothing shorter does, and their tables wake a predict job."""
    with connect(env["dsn"]) as c:
        c.execute("""
            DROP TABLE IF EXISTS hs_sale_tag, hs_tag, hs_sale, hs_playlist_track, hs_playlist, hs_track, hs_album, hs_artist CASCADE;
            CREATE TABLE hs_artist (artist_id int PRIMARY KEY, name text);
            CREATE TABLE hs_album (album_id int PRIMARY KEY, artist_id int REFERENCES hs_artist);
            CREATE TABLE hs_track (track_id int PRIMARY KEY, album_id int REFERENCES hs_album);
            CREATE TABLE hs_playlist (playlist_id int PRIMARY KEY);
            CREATE TABLE hs_playlist_track (playlist_id int REFERENCES hs_playlist, track_id int REFERENCES hs_track,
                                            PRIMARY KEY (playlist_id, track_id));
            CREATE TABLE hs_sale (id int PRIMARY KEY, track_id int REFERENCES hs_track, day int, kind text);
            INSERT INTO hs_artist SELECT a, 'artist ' || a FROM generate_series(1, 12) a;
            -- Every album and every track is sold once: only the artist (three hops away) and the
            -- playlist (the track's link table) repeat. An artist's kind is artist % 3.
            INSERT INTO hs_album SELECT b, 1 + b % 12 FROM generate_series(1, 600) b;
            INSERT INTO hs_track SELECT t, t FROM generate_series(1, 600) t;
            INSERT INTO hs_playlist SELECT p FROM generate_series(0, 2) p;
            INSERT INTO hs_playlist_track SELECT (1 + t % 12) % 3, t FROM generate_series(1, 600) t;
            INSERT INTO hs_sale SELECT i, i, i / 6, chr(97 + (1 + i % 12) % 3) FROM generate_series(1, 600) i;
        """)
        spec = c.execute("SELECT tributary._learn_spec('hs_sale', 'kind', NULL, 'day', NULL, NULL) -> 'paths'").fetchone()[0]
        assert "track_id.album_id.artist_id" in spec and "track_id.hs_playlist_track.playlist_id" in spec, spec
        for path in ("track_id.album_id.artist_id", "track_id.hs_playlist_track.playlist_id"):
            rows = by_method(train(c, "'hs_p'", "'hs_sale'", "'kind'", as_of="'day'", split_at="'80'",
                                   history=f"'{{{path}}}'", algorithm="'logistic'"))
            assert rows["predictor"][4] >= 0.95 and rows["baseline"][4] < 0.5, (path, rows)
            train(c, "'hs_p'", "'hs_sale'", "'kind'", as_of="'day'", history=f"'{{{path}}}'", algorithm="'logistic'")
            got = dict(c.execute(
                "SELECT s.id, ((tributary_predict('hs_p', s)).evidence -> 'history' ->> %s)::float8 "
                "FROM hs_sale s WHERE s.id IN (7, 300, 301, 599)", (path,)).fetchall())
            # The same artist (and so the same playlist) every 12th sale; six sales a day: the
            # strictly earlier ones are those of earlier days.
            want = {i: c.execute("SELECT count(*) FROM hs_sale o WHERE o.day < (SELECT day FROM hs_sale WHERE id = %s) "
                                 "AND (1 + o.id %% 12) %% 3 = (1 + %s %% 12) %% 3" if "playlist" in path else
                                 "SELECT count(*) FROM hs_sale o WHERE o.day < (SELECT day FROM hs_sale WHERE id = %s) "
                                 "AND o.id %% 12 = %s %% 12", (i, i)).fetchone()[0] for i in got}
            assert {i: float(v or 0) for i, v in got.items()} == {i: float(v) for i, v in want.items()}, (path, got, want)
        related = {r[0] for r in c.execute("SELECT tributary._predict_related('hs_sale')::text").fetchall()}
        assert related == {"hs_track", "hs_album", "hs_artist", "hs_playlist_track"}, related
        # A role that may not read the artist key nor the link table: neither path is found, and
        # training with every path found works (no 42501 from a table it was never asked to read).
        c.execute("GRANT SELECT ON hs_sale, hs_track TO learn_bob")
        c.execute("GRANT SELECT (album_id) ON hs_album TO learn_bob")
        spec = paths_as(c, "learn_bob", "hs_sale", "kind", "day")
        assert spec == ["track_id", "track_id.album_id"], spec
        bob_trains(c)
        # The shorter paths and the table's own link tables ask for the same: a role that may read
        # the sales, the track's key and the tag link's tag but not the track's album nor the
        # link's sale finds only track_id (before: both, and 42501 from training on hs_track).
        c.execute("""
            CREATE TABLE hs_tag (tag_id int PRIMARY KEY);
            CREATE TABLE hs_sale_tag (sale_id int REFERENCES hs_sale, tag_id int REFERENCES hs_tag);
            INSERT INTO hs_tag SELECT g FROM generate_series(1, 3) g;
            INSERT INTO hs_sale_tag SELECT i, 1 + i % 3 FROM generate_series(1, 600) i;
            REVOKE ALL ON hs_sale, hs_track, hs_album FROM learn_bob;
            GRANT SELECT ON hs_sale TO learn_bob;
            GRANT SELECT (track_id) ON hs_track TO learn_bob;
            GRANT SELECT (tag_id) ON hs_sale_tag TO learn_bob;
        """)
        spec = c.execute("SELECT tributary._learn_spec('hs_sale', 'kind', NULL, 'day', NULL, NULL) -> 'paths'").fetchone()[0]
        assert "track_id.album_id" in spec and "hs_sale_tag.tag_id" in spec, spec
        spec = paths_as(c, "learn_bob", "hs_sale", "kind", "day")
        assert spec == ["track_id"], spec
        bob_trains(c)
        c.execute("GRANT SELECT (sale_id) ON hs_sale_tag TO learn_bob")
        spec = paths_as(c, "learn_bob", "hs_sale", "kind", "day")
        assert spec == ["track_id", "hs_sale_tag.tag_id"], spec


def test_partitioned_parents_and_link_tables(env):
    """A foreign key to a partitioned table is one path (not one more per partition, as
    pg_constraint keeps a copy for each referenced partition), and a partitioned link table is one
    path whose as-of counts cover all its partitions; a predict job over such tables is made."""
    with connect(env["dsn"]) as c:
        c.execute("""
            DROP TABLE IF EXISTS pt_item_tag, pt_item, pt_tag, pt_grp CASCADE;
            CREATE TABLE pt_grp (grp_id int PRIMARY KEY) PARTITION BY RANGE (grp_id);
            CREATE TABLE pt_grp_a PARTITION OF pt_grp FOR VALUES FROM (0) TO (10);
            CREATE TABLE pt_grp_b PARTITION OF pt_grp FOR VALUES FROM (10) TO (20);
            CREATE TABLE pt_item (id int PRIMARY KEY, grp_id int REFERENCES pt_grp, day int, kind text, guess text);
            CREATE TABLE pt_tag (tag_id int PRIMARY KEY);
            CREATE TABLE pt_item_tag (id int REFERENCES pt_item, tag_id int REFERENCES pt_tag, part int)
                PARTITION BY LIST (part);
            CREATE TABLE pt_item_tag_0 PARTITION OF pt_item_tag FOR VALUES IN (0);
            CREATE TABLE pt_item_tag_1 PARTITION OF pt_item_tag FOR VALUES IN (1);
            INSERT INTO pt_grp SELECT g FROM generate_series(0, 19) g;
            INSERT INTO pt_tag SELECT g FROM generate_series(0, 2) g;
            -- An item's kind is its tag (item % 3); the tag rows alternate between the partitions.
            INSERT INTO pt_item (id, grp_id, day, kind) SELECT i, i % 20, i / 6, chr(97 + i % 3) FROM generate_series(1, 600) i;
            INSERT INTO pt_item_tag SELECT i, i % 3, i % 2 FROM generate_series(1, 600) i;
        """)
        spec = c.execute("SELECT tributary._learn_spec('pt_item', 'kind', NULL, 'day', NULL, NULL) -> 'paths'").fetchone()[0]
        assert spec == ["grp_id", "pt_item_tag.tag_id"], spec
        related = {r[0] for r in c.execute("SELECT tributary._predict_related('pt_item')::text").fetchall()}
        assert related == {"pt_grp", "pt_item_tag"}, related
        path = "pt_item_tag.tag_id"
        rows = by_method(train(c, "'pt_p'", "'pt_item'", "'kind'", as_of="'day'", split_at="'80'",
                               history=f"'{{{path}}}'", algorithm="'logistic'"))
        assert rows["predictor"][4] >= 0.95 and rows["baseline"][4] < 0.5, rows
        train(c, "'pt_p'", "'pt_item'", "'kind'", as_of="'day'", history=f"'{{{path}}}'", algorithm="'logistic'")
        got = dict(c.execute(
            "SELECT s.id, ((tributary_predict('pt_p', s)).evidence -> 'history' ->> %s)::float8 "
            "FROM pt_item s WHERE s.id IN (7, 300, 301, 599)", (path,)).fetchall())
        want = {i: c.execute("SELECT count(*) FROM pt_item o WHERE o.day < (SELECT day FROM pt_item WHERE id = %s) "
                             "AND o.id %% 3 = %s %% 3", (i, i)).fetchone()[0] for i in got}
        assert {i: float(v or 0) for i, v in got.items()} == {i: float(v) for i, v in want.items()}, (got, want)
        job = c.execute("SELECT tributary_predict_job_create('pt_p', 'guess')").fetchone()[0]
        c.execute("SELECT tributary_predict_job_drop(%s)", (job,))
        c.execute("SELECT tributary_drop_predictor('pt_p')")


def test_one_statement_predicts_as_separate_statements_do(env):
    """tributary_predict over many rows in one statement reads the table once and reuses it
    (api/learn.rs, TableCache): each row must get exactly what a statement of its own gives, and
    the next statement (even in the same transaction) must see rows changed in between."""
    with connect(env["dsn"]) as c:
        history_table(c, "os")
        train(c, "'os_p'", "'os'", "'kind'", as_of="'day'", algorithm="'gbdt'")
        probe = ("SELECT os.id, p.prediction, p.confidence, p.evidence::text FROM os, tributary_predict('os_p', os) p "
                 "WHERE os.id %s ORDER BY os.id")
        together = c.execute(probe % "BETWEEN 390 AND 420").fetchall()
        alone = [c.execute(probe % f"= {i}").fetchone() for i in range(390, 421)]
        assert len(together) == 31 and together == alone
        # A row not in the table (a new one) between rows of the table: the same too.
        new = ("SELECT p.prediction, p.confidence FROM tributary_predict('os_p', "
               "ROW(9001, 3, 60, 'a new event', NULL, NULL)::os) p")
        mixed = c.execute("SELECT o.id, p.prediction, p.confidence FROM (VALUES (1, 400), (2, 9001), (3, 401)) v(ord, id) "
                          "LEFT JOIN os o USING (id), LATERAL tributary_predict('os_p', "
                          "coalesce(o, ROW(9001, 3, 60, 'a new event', NULL, NULL)::os)) p ORDER BY v.ord").fetchall()
        assert mixed[1][1:] == c.execute(new).fetchone()
        assert [m[1:] for m in (mixed[0], mixed[2])] == [tuple(x[1:3]) for x in alone if x[0] in (400, 401)]
        count = ("SELECT ((tributary_predict('os_p', os)).evidence -> 'history' ->> 'person_id')::float8 "
                 "FROM os WHERE id = 400")
        with c.transaction():
            before = c.execute(count).fetchone()[0]
            c.execute("INSERT INTO os (id, person_id, day, note, kind) VALUES (5000, 1, 0, 'early', 'a')")
            after = c.execute(count).fetchone()[0]
        assert after == before + 1, (before, after)


def test_bad_input(env):
    with connect(env["dsn"]) as c:
        c.execute("DROP TABLE IF EXISTS bad; CREATE TABLE bad (id int PRIMARY KEY, t int, body text, kind text)")
        c.execute("INSERT INTO bad SELECT i, i, 'row ' || i, 'only' FROM generate_series(1, 50) i")
        with pytest.raises(psycopg.Error) as e:
            train(c, "'bad_p'", "'bad'", "'kind'", as_of="'t'")
        assert e.value.sqlstate == "22023" and "class" in str(e.value), e.value
        c.execute("UPDATE bad SET kind = NULL")
        with pytest.raises(psycopg.Error) as e:
            train(c, "'bad_p'", "'bad'", "'kind'", as_of="'t'")
        assert e.value.sqlstate == "22023"
        c.execute("UPDATE bad SET kind = CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END")
        with pytest.raises(psycopg.Error) as e:
            train(c, "'bad_p'", "'bad'", "'kind'", as_of="'t'", history="'{no_such_path}'")
        assert e.value.sqlstate == "22023" and "no_such_path" in str(e.value), e.value
        with pytest.raises(psycopg.Error) as e:
            train(c, "'bad_p'", "'bad'", "'nope'")
        assert e.value.sqlstate == "42703"
        with pytest.raises(psycopg.Error) as e:
            train(c, "'bad_p'", "'bad'", "'kind'", as_of="'body'")
        assert e.value.sqlstate == "42804"
        with pytest.raises(psycopg.Error) as e:
            train(c, "'bad_p'", "'bad'", "'kind'", split_at="'10'")
        assert e.value.sqlstate == "22023"
        with pytest.raises(psycopg.Error) as e:
            train(c, "NULL", "'bad'", "'kind'")
        assert e.value.sqlstate == "22004"
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT tributary_predict_column('no_such_predictor', 'x')")
        assert e.value.sqlstate == "42704"
        # Columns added after training are not features of it; a column it reads that changed
        # type, or is gone, is 55000 naming it.
        train(c, "'bad_p'", "'bad'", "'kind'", as_of="'t'", algorithm="'logistic'")
        c.execute("ALTER TABLE bad ADD COLUMN guess text, ADD COLUMN weight float8")
        c.execute("UPDATE bad SET kind = NULL WHERE id > 40")
        assert c.execute("SELECT tributary_predict_column('bad_p', 'guess')").fetchone()[0] == 10
        c.execute("ALTER TABLE bad ALTER COLUMN body TYPE varchar(100)")
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT tributary_predict_column('bad_p', 'guess')")
        assert e.value.sqlstate == "55000" and "body" in (e.value.diag.message_detail or ""), e.value
        c.execute("ALTER TABLE bad DROP COLUMN body")
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT tributary_predict_column('bad_p', 'guess')")
        assert e.value.sqlstate == "55000" and "column body" in (e.value.diag.message_detail or ""), e.value
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT tributary_predict_column('bad_p', 'kind')")
        assert e.value.sqlstate in ("22023", "55000")
        assert c.execute("SELECT * FROM tributary_predict('bad_p', NULL::bad)").fetchone() == (None, None, None)


def test_privileges_and_row_level_security(env):
    alice = make_conninfo(env["dsn"], user="learn_alice")
    bob = make_conninfo(env["dsn"], user="learn_bob")
    with connect(alice) as a:
        history_table(a, "rl")
        a.execute("ALTER TABLE rl ENABLE ROW LEVEL SECURITY")
        a.execute("CREATE POLICY half ON rl USING (person_id <= 20)")
        a.execute("ALTER TABLE rl FORCE ROW LEVEL SECURITY")
        train(a, "'rl_p'", "'rl'", "'kind'", as_of="'day'", algorithm="'logistic'")
        assert a.execute("SELECT training_rows FROM tributary.predictors WHERE name = 'rl_p'").fetchone()[0] == 400
        with pytest.raises(psycopg.Error) as e:
            a.execute("SELECT model FROM tributary._predictors")
        assert e.value.sqlstate == "42501"
    with connect(bob) as b:
        # Bob may not read the table: he does not see the predictor, cannot use, retrain nor drop it.
        assert b.execute("SELECT count(*) FROM tributary.predictors WHERE name = 'rl_p'").fetchone()[0] == 0
        for sql in ("SELECT tributary_predict_column('rl_p', 'guess')",
                    "SELECT * FROM tributary_train('rl_p', 'public.ev', 'kind')",
                    "SELECT tributary_drop_predictor('rl_p')"):
            with pytest.raises(psycopg.Error) as e:
                b.execute(sql)
            assert e.value.sqlstate == "42501", (sql, e.value)
    with connect(alice) as a:
        a.execute("GRANT SELECT (kind) ON rl TO learn_bob")
    with connect(bob) as b:
        # Reading the label column says nothing about rows: still hidden (rl forces row security,
        # and bob may not read the other columns the predictor reads).
        assert b.execute("SELECT count(*) FROM tributary.predictors WHERE name = 'rl_p'").fetchone()[0] == 0
    with connect(alice) as a:
        a.execute("GRANT SELECT ON rl, rl_person TO learn_bob")
        a.execute("ALTER TABLE rl NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY")
    with connect(bob) as b:
        assert b.execute("SELECT count(*) FROM tributary.predictors WHERE name = 'rl_p'").fetchone()[0] == 1
        with pytest.raises(psycopg.Error) as e:
            b.execute("SELECT tributary_drop_predictor('rl_p')")
        assert e.value.sqlstate == "42501"
    with connect(alice) as a:
        assert a.execute("SELECT tributary_drop_predictor('rl_p')").fetchone()[0] is True
        a.execute("DROP TABLE rl, rl_person")


def test_statement_timeout_stores_nothing(env):
    with connect(env["dsn"]) as c:
        c.execute("""
            DROP TABLE IF EXISTS big CASCADE;
            CREATE TABLE big (id int PRIMARY KEY, t int, body text, x float8, kind text);
            INSERT INTO big SELECT i, i / 1000, 'item ' || (i % 977) || ' of shelf ' || (i % 31), random(),
                                   CASE WHEN i % 3 = 0 THEN 'a' WHEN i % 3 = 1 THEN 'b' ELSE 'c' END
              FROM generate_series(1, 1000000) i;
        """)
        c.execute("SET statement_timeout = '4s'")
        with pytest.raises(psycopg.Error) as e:
            train(c, "'big_p'", "'big'", "'kind'", as_of="'t'")
        assert e.value.sqlstate == "57014", e.value
        c.execute("RESET statement_timeout")
        assert c.execute("SELECT count(*) FROM tributary.predictors WHERE name = 'big_p'").fetchone()[0] == 0
        c.execute("DROP TABLE big")


def test_dump_and_restore_keep_a_predictor(env):
    pgbin = os.environ.get("TRIBUTARY_PGBIN", "/usr/lib/postgresql/15/bin")
    with connect(env["dsn"]) as c:
        history_table(c, "dr")
        train(c, "'dr_p'", "'dr'", "'kind'", as_of="'day'", algorithm="'gbdt'")
        before = c.execute("SELECT dr.id, p.prediction, p.confidence FROM dr, tributary_predict('dr_p', dr) p "
                           "WHERE dr.id % 50 = 0 ORDER BY dr.id").fetchall()
    with connect(env["base"]) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB}_restored WITH (FORCE)")
        c.execute(f"CREATE DATABASE {DB}_restored")
    dst = make_conninfo(env["dsn"], dbname=f"{DB}_restored")
    dump = subprocess.run([f"{pgbin}/pg_dump", "-Fc", "-d", env["dsn"]], capture_output=True, check=True).stdout
    subprocess.run([f"{pgbin}/pg_restore", "-d", dst], input=dump, capture_output=True, check=True)
    with connect(dst) as c:
        after = c.execute("SELECT dr.id, p.prediction, p.confidence FROM dr, tributary_predict('dr_p', dr) p "
                          "WHERE dr.id % 50 = 0 ORDER BY dr.id").fetchall()
    assert after == before and len(before) == 16


def test_same_rows_in_another_heap_order_give_the_same_model(env):
    """Determinism (issue 47): the rows are read in key order and category columns are detected
    over the whole table, so a table whose heap holds the same rows in another order trains the
    same model, byte for byte; and with labels of another order too (a text category)."""
    with connect(env["dsn"]) as c:
        history_table(c, "hp")
        c.execute("ALTER TABLE hp ADD COLUMN colour text")
        # A category column whose values start only late in the heap: a sample of the first rows
        # would call it empty in one order and a category in the other.
        c.execute("UPDATE hp SET colour = CASE WHEN id % 3 = 0 THEN 'red' ELSE 'blue' END WHERE id > 790")
        train(c, "'hp_1'", "'hp'", "'kind'", as_of="'day'")
        # The same rows, the heap reversed (and its pages in another order).
        c.execute("CREATE TABLE hp_copy AS SELECT * FROM hp ORDER BY id DESC")
        c.execute("TRUNCATE hp")
        c.execute("INSERT INTO hp SELECT * FROM hp_copy")
        assert c.execute("SELECT id FROM hp LIMIT 1").fetchone()[0] == 800
        train(c, "'hp_2'", "'hp'", "'kind'", as_of="'day'")
        m = c.execute("SELECT name, model, features FROM tributary._predictors WHERE name IN ('hp_1', 'hp_2') "
                      "ORDER BY name").fetchall()
        assert "colour" in m[0][2], m[0][2]
        assert m[0][2] == m[1][2] and m[0][1] == m[1][1], "another heap order trained another model"


def test_prediction_targets_are_no_features_unless_named(env):
    """A column tributary_predict_column wrote (or a predict job's target) is no feature of a later
    training on the table; named in columns, it is."""
    with connect(env["dsn"]) as c:
        history_table(c, "pt")
        train(c, "'pt_p'", "'pt'", "'kind'", as_of="'day'")
        c.execute("UPDATE pt SET kind = NULL WHERE day >= 90")
        assert c.execute("SELECT tributary_predict_column('pt_p', 'guess')").fetchone()[0] > 0
        assert c.execute("SELECT outputs FROM tributary._predictors WHERE name = 'pt_p'").fetchone()[0] == ["guess"]
        train(c, "'pt_q'", "'pt'", "'kind'", as_of="'day'")
        f = c.execute("SELECT features FROM tributary._predictors WHERE name = 'pt_q'").fetchone()[0]
        assert not any(x == "guess" or x.startswith("guess:") for x in f), f
        train(c, "'pt_r'", "'pt'", "'kind'", as_of="'day'", columns="'{guess}'")
        f = c.execute("SELECT features FROM tributary._predictors WHERE name = 'pt_r'").fetchone()[0]
        assert "guess" in f, f
        # Excluding it by name is no error either (it exists).
        train(c, "'pt_s'", "'pt'", "'kind'", as_of="'day'", columns="'{-guess}'")


def test_time_parts_and_path_stats_are_features(env):
    """A timestamp as_of gives its month, ISO weekday and hour (UTC for timestamptz, whatever the
    session's TimeZone); each path has the age of its newest label and its earlier rows."""
    with connect(env["dsn"]) as c:
        history_table(c, "tp")
        c.execute("ALTER TABLE tp ADD COLUMN at timestamptz")
        c.execute("UPDATE tp SET at = timestamptz '2024-01-01 00:00+00' + day * interval '1 day' + (id % 24) * interval '1 hour'")
        c.execute("SET TimeZone = 'Asia/Tokyo'")
        train(c, "'tp_p'", "'tp'", "'kind'", as_of="'at'")
        f = c.execute("SELECT features FROM tributary._predictors WHERE name = 'tp_p'").fetchone()[0]
        for name in ("at:month", "at:weekday", "at:hour", "person_id:log_age", "person_id:log_rows"):
            assert name in f, (name, f)
        c.execute("SET TimeZone = 'America/New_York'")
        probe = "SELECT evidence FROM tp, tributary_predict('tp_p', tp) WHERE tp.id = 403"
        e1 = c.execute(probe).fetchone()[0]
        c.execute("SET TimeZone = 'UTC'")
        assert c.execute(probe).fetchone()[0] == e1, "the session's TimeZone changed a feature"
        c.execute("RESET TimeZone")


def test_online_protocol_predicts_labelled_rows_as_of_their_time(env):
    """tributary_predict_column_online writes every row's prediction, each from the labels strictly earlier:
    a row's own label and later labels change nothing of it; the rows with a NULL label get
    what they get without it."""
    with connect(env["dsn"]) as c:
        history_table(c, "ol")
        train(c, "'ol_p'", "'ol'", "'kind'", as_of="'day'", split_at="'80'", algorithm="'gbdt'")
        c.execute("UPDATE ol SET kind = NULL WHERE id % 50 = 0")
        n = c.execute("SELECT tributary_predict_column_online('ol_p', 'guess')").fetchone()[0]
        assert n == 800
        online = dict(c.execute("SELECT id, guess FROM ol").fetchall())
        acc = c.execute("SELECT avg((guess = kind)::int) FROM ol WHERE day >= 80").fetchone()[0]
        assert acc >= 0.7, acc
        # The labels of day 90 and later changed: the predictions of the earlier rows stay.
        c.execute("UPDATE ol SET kind = 'zz' WHERE day >= 90 AND kind IS NOT NULL")
        c.execute("SELECT tributary_predict_column_online('ol_p', 'guess')")
        again = dict(c.execute("SELECT id, guess FROM ol").fetchall())
        day = dict(c.execute("SELECT id, day FROM ol").fetchall())
        assert all(again[i] == online[i] for i in online if day[i] < 90)
        # tributary_predict_column: only the NULL labels, the same values.
        c.execute("UPDATE ol SET guess = NULL")
        assert c.execute("SELECT tributary_predict_column('ol_p', 'guess')").fetchone()[0] == 16
        assert all(g == again[i] for i, g in c.execute("SELECT id, guess FROM ol WHERE kind IS NULL"))


def test_one_row_through_indexes_equals_the_whole_table(env):
    """tributary_predict(predictor, row) reads the rows related to the row through indexes (a
    foreign key with as_of, a link table, a parent's parent, the embedding's nearest rows), never
    the whole table: with sequential scans switched off the table is scanned by index only, and
    every row's prediction and confidence are what tributary_predict_column_online
    writes from the whole table (each row as of its own time)."""
    with connect(env["dsn"]) as c:
        history_table(c, "ix")
        c.execute("""
            CREATE TABLE ix_team (team_id int PRIMARY KEY, name text);
            ALTER TABLE ix_person ADD COLUMN team_id int REFERENCES ix_team;
            INSERT INTO ix_team SELECT g, 'team ' || g FROM generate_series(1, 6) g;
            UPDATE ix_person SET team_id = 1 + person_id % 6;
            CREATE TABLE ix_tag (tag_id int PRIMARY KEY, name text);
            CREATE TABLE ix_ev_tag (id int REFERENCES ix, tag_id int REFERENCES ix_tag, PRIMARY KEY (id, tag_id));
            INSERT INTO ix_tag SELECT g, 'tag ' || g FROM generate_series(1, 10) g;
            INSERT INTO ix_ev_tag SELECT i, 1 + (i * 7) % 10 FROM generate_series(1, 800) i;
            INSERT INTO ix_ev_tag SELECT i, 1 + (i * 3) % 10 FROM generate_series(1, 800, 3) i ON CONFLICT DO NOTHING;
            CREATE INDEX ON ix (person_id, day);
            CREATE INDEX ON ix_person (team_id);
            CREATE INDEX ON ix_ev_tag (tag_id);
            ALTER TABLE ix ADD COLUMN e vector(3);
            UPDATE ix SET e = ARRAY[sin(id), cos(id), (id % 7)::float]::vector;
            UPDATE ix SET kind = NULL WHERE day >= 90;
        """)
        train(c, "'ix_p'", "'ix'", "'kind'", embedding="'e'", as_of="'day'", algorithm="'gbdt'")
        f = c.execute("SELECT features FROM tributary._predictors WHERE name = 'ix_p'").fetchone()[0]
        assert any(x.startswith("ix_ev_tag.tag_id:") for x in f) and any(x.startswith("person_id.team_id:") for x in f), f
        c.execute("SELECT tributary_predict_column_online('ix_p', 'guess')")
        whole = dict(c.execute("SELECT id, guess FROM ix").fetchall())
        one = dict(c.execute("SELECT ix.id, p.prediction FROM ix, tributary_predict('ix_p', ix) p").fetchall())
        assert one == whole
        # Index scans only: the sequential scans of the table do not grow.
        c.execute("SELECT pg_stat_force_next_flush()")
        c.execute("SET stats_fetch_consistency = none")
        before = c.execute("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'ix'").fetchone()[0]
        c.execute("SET enable_seqscan = off")
        for i in (5, 403, 799):
            r = c.execute("SELECT p.prediction FROM tributary_predict('ix_p', (SELECT t FROM ix t WHERE t.id = %s)) p",
                          (i,)).fetchone()[0]
            assert r == whole[i]
        c.execute("RESET enable_seqscan")
        c.execute("SELECT pg_stat_force_next_flush()")
        after = c.execute("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'ix'").fetchone()[0]
        assert after == before, f"{after - before} sequential scans of the table for three rows"
        # Control: the counter does count a scan.
        c.execute("SELECT count(*) FROM ix")
        c.execute("SELECT pg_stat_force_next_flush()")
        assert c.execute("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'ix'").fetchone()[0] == after + 1
        # A new row (not in the table), as ROW(...)::ix: predicted from its related rows.
        r = c.execute("SELECT p.prediction FROM tributary_predict('ix_p', "
                      "ROW(900, 7, 101, 'a new event', NULL, NULL, '[0.1,0.2,0.3]')::ix) p").fetchone()[0]
        assert r in ("a", "b", "c", "d")


def test_columns_named_like_the_plans_placeholders(env):
    """The plan's statements carry placeholders (%ROW%, %K5%, %SOURCE%, %TABLEOID%, %CTID%) that
    are filled only where they stand as SQL: a table whose key, text, number and label columns
    are named after them trains, and every row's one-row prediction equals
    tributary_predict_column_online's (before, the filled placeholder broke the quoted column:
    'column t.($1) does not exist')."""
    with connect(env["dsn"]) as c:
        c.execute("""
            CREATE TABLE ph_owner (owner_id int PRIMARY KEY, name text);
            INSERT INTO ph_owner SELECT g, 'owner ' || g FROM generate_series(1, 12) g;
            CREATE TABLE ph ("%SOURCE%" int PRIMARY KEY, "%ROW%" text, "%K5%" float8, "%CTID%" date,
                             owner_id int REFERENCES ph_owner, "%TABLEOID%" text, e vector(3), guess text);
            INSERT INTO ph SELECT g, CASE WHEN g % 2 = 0 THEN 'even words' ELSE 'odd words' END, g % 7,
                   date '2020-01-01' + g, 1 + g % 12, CASE WHEN g % 3 = 0 THEN 'a' ELSE 'b' END,
                   ARRAY[g % 2, 1, (g % 5) / 5.0]::vector
              FROM generate_series(1, 300) g;
            UPDATE ph SET "%TABLEOID%" = NULL WHERE "%SOURCE%" > 260;
            CREATE INDEX ON ph (owner_id, "%CTID%");
            CREATE INDEX ON ph USING hnsw (e vector_cosine_ops);
        """)
        train(c, "'ph_p'", "'ph'", "'%TABLEOID%'", embedding="'e'", as_of="'%CTID%'")
        c.execute("SELECT tributary_predict_column_online('ph_p', 'guess')")
        whole = dict(c.execute('SELECT "%SOURCE%", guess FROM ph').fetchall())
        one = dict(c.execute('SELECT ph."%SOURCE%", p.prediction FROM ph, tributary_predict(\'ph_p\', ph) p').fetchall())
        assert one == whole and set(whole.values()) <= {"a", "b", None}, (one, whole)
        assert sum(v is not None for v in one.values()) > 250


def test_the_trigger_form_fills_the_column_in_the_writers_transaction(env):
    """tributary_predict_trigger('predictor', 'target') as a BEFORE INSERT OR UPDATE row trigger:
    the inserted row's target holds tributary_predict's prediction when the INSERT returns; an
    UPDATE predicts again; bad uses are errors."""
    with connect(env["dsn"]) as c:
        history_table(c, "tg")
        c.execute("CREATE INDEX ON tg (person_id, day)")
        train(c, "'tg_p'", "'tg'", "'kind'", as_of="'day'")
        c.execute("CREATE TRIGGER tg_guess BEFORE INSERT OR UPDATE ON tg FOR EACH ROW "
                  "EXECUTE FUNCTION tributary_predict_trigger('tg_p', 'guess')")
        with c.transaction():
            got = c.execute("INSERT INTO tg (id, person_id, day, note) VALUES (901, 7, 101, 'a new event') "
                            "RETURNING guess").fetchone()[0]
            want = c.execute("SELECT p.prediction FROM tg, tributary_predict('tg_p', tg) p WHERE tg.id = 901").fetchone()[0]
            assert got is not None and got == want
        # Its person's history changes and the row is updated: predicted again, as of now.
        c.execute("UPDATE tg SET kind = 'c' WHERE person_id = 7 AND day < 101")
        c.execute("UPDATE tg SET note = 'the same event' WHERE id = 901")
        got = c.execute("SELECT guess FROM tg WHERE id = 901").fetchone()[0]
        want = c.execute("SELECT p.prediction FROM tg, tributary_predict('tg_p', tg) p WHERE tg.id = 901").fetchone()[0]
        assert got == want
        # Misuse.
        c.execute("CREATE TRIGGER tg_bad AFTER INSERT ON tg FOR EACH ROW EXECUTE FUNCTION tributary_predict_trigger('tg_p', 'guess')")
        with pytest.raises(psycopg.Error) as e:
            c.execute("INSERT INTO tg (id, person_id, day) VALUES (902, 7, 101)")
        assert e.value.sqlstate == "39P01"
        c.execute("DROP TRIGGER tg_bad ON tg")
        c.execute("CREATE TRIGGER tg_bad BEFORE INSERT ON tg FOR EACH ROW EXECUTE FUNCTION tributary_predict_trigger('tg_p', 'kind')")
        with pytest.raises(psycopg.Error) as e:
            c.execute("INSERT INTO tg (id, person_id, day) VALUES (903, 7, 101)")
        assert e.value.sqlstate == "22023"
        c.execute("DROP TRIGGER tg_bad ON tg")
        c.execute("CREATE TRIGGER tg_bad BEFORE INSERT ON tg FOR EACH ROW EXECUTE FUNCTION tributary_predict_trigger('tg_p', 'nope')")
        with pytest.raises(psycopg.Error) as e:
            c.execute("INSERT INTO tg (id, person_id, day) VALUES (904, 7, 101)")
        assert e.value.sqlstate == "42703"
        c.execute("DROP TRIGGER tg_bad ON tg")


def test_training_names_the_indexes_one_row_wants(env):
    """tributary_train's NOTICE gives the CREATE INDEX statements one row's prediction wants."""
    with connect(env["dsn"]) as c:
        history_table(c, "mi")
        notices = []
        c.add_notice_handler(lambda d: notices.append((d.message_primary, d.message_hint)))
        train(c, "'mi_p'", "'mi'", "'kind'", as_of="'day'")
        hints = [h for m, h in notices if m and "index(es) missing" in m]
        assert hints and "CREATE INDEX ON public.mi (person_id, day)" in hints[0], notices
        c.execute("CREATE INDEX ON mi (person_id)")
        notices.clear()
        train(c, "'mi_p'", "'mi'", "'kind'", as_of="'day'")
        assert not [m for m, h in notices if m and "index(es) missing" in m], notices
