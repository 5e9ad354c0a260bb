"""tributary_match without labels or a threshold (issue 36): a match probability from a model
fitted by EM, on data where every row has a partner and titles repeat, and on data where few rows
have one; min_precision; what tributary_match_explain() says it learned against the truth; and
tributary_dedup. The real model; small tables (a few hundred rows), generated deterministically.
"""
import math
import random
import re

import psycopg
import pytest

from jobwait import connect

ADJ = ["scalable", "robust", "adaptive", "efficient", "incremental", "distributed", "approximate",
       "probabilistic", "secure", "declarative", "parallel", "streaming"]
NOUN = ["query processing", "index structures", "entity resolution", "schema matching", "data cleaning",
        "join algorithms", "transaction management", "graph analytics", "time series", "provenance tracking",
        "record linkage", "view maintenance", "cardinality estimation", "spatial data"]
WHERE = ["in the cloud", "for data lakes", "over encrypted data", "on modern hardware", "at web scale",
         "with learned models", "in main memory", "for sensor networks"]
FIRST = ["anna", "bruno", "chen", "dmitri", "elena", "farid", "grace", "hiro", "ines", "jonas", "kofi", "lena",
         "mario", "nadia", "oscar", "priya", "quinn", "rosa", "sven", "tara", "umar", "vera", "wei", "yusuf"]
LAST = ["keller", "moreau", "tanaka", "okafor", "novak", "silva", "larsen", "haddad", "kowalski", "rossi",
        "fischer", "ivanova", "nguyen", "schmidt", "costa", "berg", "weber", "lindqvist", "abara", "petrov"]
VENUE = [("sigmod conference", "sigmod"), ("vldb journal", "vldb j"), ("icde", "intl conf on data engineering"),
         ("pvldb", "proc vldb endow"), ("tods", "acm trans database syst")]


def typo(rng, s):
    """One typing error in a word of s: a letter dropped, doubled or swapped with the next."""
    i = rng.randrange(1, max(2, len(s) - 1))
    k = rng.randrange(3)
    if k == 0:
        return s[:i] + s[i + 1:]
    if k == 1:
        return s[:i] + s[i] + s[i:]
    return s[:i - 1] + s[i] + s[i - 1] + s[i + 1:]


def publications(n=120, repeated=12, seed=7):
    """Two catalogues of the same n papers (every row has a partner): titles, author lists,
    venue, year; the right side with typing errors, authors as 'last, first', venues
    abbreviated. `repeated` titles are shared by two different papers (other authors, years)."""
    rng = random.Random(seed)
    left, right = [], []
    titles = []
    while len(titles) < n - repeated:
        t = f"{rng.choice(ADJ)} {rng.choice(NOUN)} {rng.choice(WHERE)}"
        if t not in titles:
            titles.append(t)
    titles += titles[:repeated]      # a title that two papers share
    for i, t in enumerate(titles):
        authors = [(rng.choice(FIRST), rng.choice(LAST)) for _ in range(rng.randint(2, 4))]
        venue = rng.choice(VENUE)
        year = 1995 + (i * 7) % 28
        left.append((i, t, ", ".join(f"{f} {l}" for f, l in authors), venue[0], str(year)))
        rt = typo(rng, t) if rng.random() < 0.3 else t.upper() if rng.random() < 0.2 else t
        ra = "; ".join(f"{l}, {f}" for f, l in authors)
        if rng.random() < 0.3:
            ra = typo(rng, ra)
        right.append((1000 + i, rt, ra, venue[1] if rng.random() < 0.5 else venue[0], str(year)))
    rng.shuffle(right)
    truth = {(str(i), str(1000 + i)) for i in range(n)}
    return left, right, truth


def people(n=150, partners=12, seed=11):
    """Two registers of people (name, town, born) of which only `partners` rows are the same
    person (with a typing error in the name or another format of the date); the rest are other
    people, some sharing a town or a surname."""
    rng = random.Random(seed)
    towns = ["leeds", "york", "bath", "derby", "hull", "ely", "wells", "truro"]

    def person():
        return (f"{rng.choice(FIRST)} {rng.choice(LAST)}", rng.choice(towns),
                f"19{rng.randint(40, 99)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
    left = [(i,) + person() for i in range(n)]
    right = []
    for j in range(n):
        if j < partners:
            name, town, born = left[j][1:]
            if j % 2 == 0:
                name = typo(rng, name)
            else:
                y, m, d = born.split("-")
                born = f"{y}{m}{d}"
            right.append((500 + j, name, town, born))
        else:
            right.append((500 + j,) + person())
    truth = {(str(j), str(500 + j)) for j in range(partners)}
    return left, right, truth


@pytest.fixture(scope="module")
def conn(dsn):
    with connect(dsn) as c:
        c.execute("SET tributary.progress_interval = 0")
        c.execute("DROP SCHEMA IF EXISTS tm CASCADE")
        c.execute("CREATE SCHEMA tm")
        c.execute("CREATE TABLE tm.pub_a (id int PRIMARY KEY, title text, authors text, venue text, year text)")
        c.execute("CREATE TABLE tm.pub_b (id int PRIMARY KEY, title text, authors text, venue text, year text)")
        left, right, _ = publications()
        c.cursor().executemany("INSERT INTO tm.pub_a VALUES (%s, %s, %s, %s, %s)", left)
        c.cursor().executemany("INSERT INTO tm.pub_b VALUES (%s, %s, %s, %s, %s)", right)
        c.execute("CREATE TABLE tm.reg_a (id int PRIMARY KEY, name text, town text, born text)")
        c.execute("CREATE TABLE tm.reg_b (id int PRIMARY KEY, name text, town text, born text)")
        left, right, _ = people()
        c.cursor().executemany("INSERT INTO tm.reg_a VALUES (%s, %s, %s, %s)", left)
        c.cursor().executemany("INSERT INTO tm.reg_b VALUES (%s, %s, %s, %s)", right)
        yield c
        c.execute("DROP SCHEMA tm CASCADE")


def pairs(c, sql, args=()):
    return {(r[0], r[1]) for r in c.execute(sql, args).fetchall()}


def quality(pred, truth):
    tp = len(pred & truth)
    return tp / max(1, len(pred)), tp / len(truth)


PUB = ("SELECT left_key, right_key FROM tributary_match('tm.pub_a', 'tm.pub_b', "
       "'{{title,authors,venue,year}}'{extra})")


def test_every_row_has_a_partner_and_titles_repeat(conn):
    _, _, truth = publications()
    pred = pairs(conn, PUB.format(extra=""))
    precision, recall = quality(pred, truth)
    assert precision >= 0.98 and recall >= 0.95, (precision, recall, sorted(truth - pred)[:5])
    # The papers that share a title are told apart by their authors and years.
    shared = {(str(i), str(1000 + i)) for i in range(12)} | {(str(108 + i), str(1108 + i)) for i in range(12)}
    assert len(pred & shared) >= len(shared) - 1, sorted(shared - pred)
    e = conn.execute("SELECT tributary_match_explain()").fetchone()[0]
    # Nearly every row has a partner, and the model says so.
    assert min(e["rows_with_a_partner"]) > 0.8, e["rows_with_a_partner"]
    assert abs(e["estimated_matches"] - len(truth)) <= 0.05 * len(truth), e["estimated_matches"]
    # Its expected precision and recall are near the true ones.
    assert abs(e["expected_precision"] - precision) <= 0.03, (e["expected_precision"], precision)
    assert abs(e["expected_recall"] - recall) <= 0.05, (e["expected_recall"], recall)
    by = {c["column"]: c for c in e["columns"]}
    assert by["title"]["compared_by"].startswith("embedding")
    assert by["year"]["compared_by"] == "string similarity"
    for c in e["columns"]:
        assert len(c["m"]) == len(c["u"]) == len(e["levels"]) == 5
        assert abs(sum(c["m"]) - 1) < 1e-3 and abs(sum(c["u"]) - 1) < 1e-3
        # Every column agrees more often between matches than between other pairs.
        assert c["agree_m"] > c["agree_u"], c


def test_few_rows_have_a_partner(conn):
    _, _, truth = people()
    pred = pairs(conn, "SELECT left_key, right_key FROM tributary_match('tm.reg_a', 'tm.reg_b', '{name,town,born}')")
    precision, recall = quality(pred, truth)
    assert precision >= 0.9 and recall >= 0.8, (precision, recall, sorted(pred - truth), sorted(truth - pred))
    e = conn.execute("SELECT tributary_match_explain()").fetchone()[0]
    # Few rows have a partner: the model's prior says so, and it abstains on the rest.
    assert max(e["rows_with_a_partner"]) < 0.3, e["rows_with_a_partner"]
    assert 6 <= e["estimated_matches"] <= 20, e["estimated_matches"]
    assert e["accepted"] == len(pred)


def test_min_precision_trades_recall_for_precision(conn):
    counts, expected = [], []
    for mp in (0.5, 0.9, 0.999):
        pred = pairs(conn, PUB.format(extra=", min_precision => %s"), (mp,))
        e = conn.execute("SELECT tributary_match_explain()").fetchone()[0]
        assert e["expected_precision"] >= mp, (mp, e["expected_precision"])
        assert e["how"].startswith("the lowest cut") or e["how"].startswith("no cut")
        counts.append(len(pred))
        expected.append(e["expected_precision"])
    assert counts[0] >= counts[1] >= counts[2], counts
    assert expected[0] <= expected[1] <= expected[2], expected
    # A threshold and min_precision together are refused.
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute(PUB.format(extra=", threshold => 0.5, min_precision => 0.9"))
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute(PUB.format(extra=", min_precision => 1.5"))


def test_evidence_explains_each_pair(conn):
    rows = conn.execute("SELECT left_key, right_key, score, evidence FROM tributary_match('tm.pub_a', 'tm.pub_b', "
                        "'{title,authors,venue,year}')").fetchall()
    assert rows
    e = conn.execute("SELECT tributary_match_explain()").fetchone()[0]
    assert e["accepted"] == len(rows)
    for lk, rk, score, ev in rows:
        assert 0.5 <= score <= 1
        assert set(ev) == {"title", "authors", "venue", "year"}
        # A pair's evidence is the model's: each level's weight is ln(m / u) of its column.
        for c in e["columns"]:
            v = ev[c["column"]]
            if v["level"] is not None:
                w = math.log(c["m"][v["level"]] / c["u"][v["level"]])
                assert abs(v["weight"] - w) < 0.001, (c["column"], v, w)  # weights are shown to 3 decimals


def test_dedup_does_not_chain_through_one_link(conn):
    # One table holding both registers' partners twice over: each person and a typo'd copy.
    conn.execute("DROP TABLE IF EXISTS tm.dup")
    conn.execute("CREATE TABLE tm.dup (id int PRIMARY KEY, name text, town text, born text)")
    conn.execute("INSERT INTO tm.dup SELECT id, name, town, born FROM tm.reg_a UNION ALL "
                 "SELECT id, name, town, born FROM tm.reg_b WHERE id >= 500 + 12")
    conn.execute("INSERT INTO tm.dup SELECT id + 10000, name || 'e', town, born FROM tm.reg_a WHERE id < 40")
    rows = conn.execute("SELECT cluster, key FROM tributary_dedup('tm.dup', '{name,town,born}')").fetchall()
    clusters = {}
    for c, k in rows:
        clusters.setdefault(c, set()).add(int(k))
    truth = {frozenset({i, i + 10000}) for i in range(40)}
    found = {frozenset(v) for v in clusters.values()}
    assert len(found & truth) >= 36, len(found & truth)
    assert all(len(v) <= 3 for v in clusters.values()), [v for v in clusters.values() if len(v) > 3]


def test_stored_embeddings_are_used_as_they_are(conn):
    # The titles' embeddings stored in a vector column: named in columns, they are that column's
    # embeddings (not embedded again), and the matching is as good.
    _, _, truth = publications()
    for t in ("tm.pub_a", "tm.pub_b"):
        conn.execute(f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS te vector(384)")
        conn.execute(f"UPDATE {t} SET te = tributary_embed(title)")
    pred = pairs(conn, "SELECT left_key, right_key FROM tributary_match('tm.pub_a', 'tm.pub_b', '{te,authors,venue,year}')")
    precision, recall = quality(pred, truth)
    assert precision >= 0.98 and recall >= 0.95, (precision, recall)
    e = conn.execute("SELECT tributary_match_explain()").fetchone()[0]
    by = {c["column"]: c for c in e["columns"]}
    assert by["te"]["compared_by"] == "embedding", by["te"]
    assert by["te"]["agree_m"] > by["te"]["agree_u"]
    # A vector on one side only is refused.
    with pytest.raises(psycopg.errors.DatatypeMismatch):
        conn.execute("SELECT * FROM tributary_match('tm.pub_a', 'tm.pub_b', '{te}', '{title}')")


def test_labels_count_in_the_model_and_its_expected_recall(conn):
    # Few rows with a partner (the registers): 6 labelled matches and 6 labelled non-matches
    # (each partner's row paired with another's). The labels count in the same EM: the
    # probabilities stay the model's, so the expected recall follows the true one, a labelled
    # pair is scored by its label, and labels of one class are evidence too.
    _, _, truth = people()
    conn.execute("DROP TABLE IF EXISTS tm.reg_labels")
    conn.execute("CREATE TABLE tm.reg_labels (left_key text, right_key text, is_match bool)")
    ones = sorted(truth)[:6]
    conn.cursor().executemany("INSERT INTO tm.reg_labels VALUES (%s, %s, true)", ones)
    conn.cursor().executemany("INSERT INTO tm.reg_labels VALUES (%s, %s, false)",
                              [(lk, str(int(rk) + 1)) for lk, rk in ones])
    rows = conn.execute("SELECT left_key, right_key, score FROM tributary_match('tm.reg_a', 'tm.reg_b', "
                        "'{name,town,born}', labels => 'tm.reg_labels')").fetchall()
    pred = {(r[0], r[1]) for r in rows}
    precision, recall = quality(pred, truth)
    assert precision >= 0.9 and recall >= 0.8, (precision, recall)
    scores = {(r[0], r[1]): r[2] for r in rows}
    assert all(scores[p] == 1 for p in ones), [scores.get(p) for p in ones]
    e = conn.execute("SELECT tributary_match_explain()").fetchone()[0]
    assert e["labelled_pairs"] == 12 and "labelled" in e["model"], e["model"]
    assert abs(e["expected_recall"] - recall) <= 0.15, (e["expected_recall"], recall)
    assert abs(e["expected_precision"] - precision) <= 0.1, (e["expected_precision"], precision)
    assert all("m" in c and "u" in c for c in e["columns"])
    # Matches only: no error, and the labelled pairs are accepted.
    conn.execute("DELETE FROM tm.reg_labels WHERE NOT is_match")
    pred = pairs(conn, "SELECT left_key, right_key FROM tributary_match('tm.reg_a', 'tm.reg_b', "
                       "'{name,town,born}', labels => 'tm.reg_labels')")
    assert set(ones) <= pred, sorted(set(ones) - pred)


def small_table(conn, name, rows):
    conn.execute(f"DROP TABLE IF EXISTS tm.{name}")
    conn.execute(f"CREATE TABLE tm.{name} (id int PRIMARY KEY, name text)")
    conn.cursor().executemany(f"INSERT INTO tm.{name} VALUES (%s, %s)", list(enumerate(rows, 1)))


def dedup_groups(conn, tbl):
    groups = {}
    for c, k in conn.execute("SELECT cluster, key FROM tributary_dedup(%s, '{name}')", (tbl,)).fetchall():
        groups.setdefault(c, set()).add(k)
    return {frozenset(v) for v in groups.values()}


def test_exact_duplicates_in_a_small_table(conn):
    # Five rows, two exact pairs on the one compared column (issue 48): equal values are
    # evidence on their own, though in five rows the duplicates are 2 of the 10 pairs.
    small_table(conn, "small_dup", ["anna smith", "Anna  Smith", "bob jones", "bob jones", "carl white"])
    rows = conn.execute("SELECT left_key, right_key, score FROM tributary_match('tm.small_dup', 'tm.small_dup', "
                        "'{name}')").fetchall()
    scores = {(r[0], r[1]): r[2] for r in rows}
    assert set(scores) == {("1", "2"), ("3", "4")}, rows
    assert min(scores.values()) >= 0.9, rows
    assert dedup_groups(conn, "tm.small_dup") == {frozenset({"1", "2"}), frozenset({"3", "4"})}


def test_small_table_without_duplicates_matches_nothing(conn):
    # Five different names (two share a first name, two a surname): no pair, no group.
    small_table(conn, "small_diff", ["anna smith", "anna jones", "bob jones", "carl white", "dora black"])
    rows = conn.execute("SELECT left_key, right_key, score FROM tributary_match('tm.small_diff', 'tm.small_diff', "
                        "'{name}')").fetchall()
    assert rows == [], rows
    assert dedup_groups(conn, "tm.small_diff") == set()


def test_nulls_are_not_identical_values(conn):
    # Two exact pairs and two rows without a name: the exact pairs are found; two missing
    # values are not identical values, and no evidence that their rows are the same.
    small_table(conn, "small_null", ["anna smith", None, "anna smith", "bob jones", "bob jones", "carl white", None])
    rows = conn.execute("SELECT left_key, right_key, score FROM tributary_match('tm.small_null', 'tm.small_null', "
                        "'{name}')").fetchall()
    assert {(r[0], r[1]) for r in rows} == {("1", "3"), ("4", "5")}, rows
    assert dedup_groups(conn, "tm.small_null") == {frozenset({"1", "3"}), frozenset({"4", "5"})}


def recall_tables(conn):
    """Two unrelated sides of 300 rows (90,000 pairs: not every pair is a candidate): a name of
    three words each, and a short code that five rows of each side share."""
    rng = random.Random(11)
    for side in ("rc_l", "rc_r"):
        conn.execute(f"DROP TABLE IF EXISTS tm.{side}")
        conn.execute(f"CREATE TABLE tm.{side} (id int PRIMARY KEY, name text, code text)")
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO tm.{side} VALUES (%s, %s, %s)",
                [(i, f"{rng.choice(ADJ)} {rng.choice(NOUN)} {rng.choice(WHERE)} {i}", f"K{i // 5}")
                 for i in range(300)])


def test_candidate_recall_is_measured_on_every_call(conn):
    """The share of the rows one column alone ranks first that are among the candidates, per
    column: a code that five rows of each side share is no rare value at k = 2 (not blocked on:
    its agreeing rows are mostly not candidates) and is at k = 5 (all are); a name's nearest value
    is found by the nearest-neighbour candidates either way."""
    recall_tables(conn)
    by_k = {}
    for k in (2, 5):
        conn.execute(f"SELECT count(*) FROM tributary_match('tm.rc_l', 'tm.rc_r', '{{name,code}}', k => {k})")
        e = conn.execute("SELECT tributary_match_explain()->'candidate_recall'").fetchone()[0]
        assert e["sample_rows"] == 200
        cols = {c["column"]: c for c in e["columns"]}
        assert cols["code"]["rows"] == 200 and cols["name"]["rows"] == 200
        by_k[k] = (cols["name"]["recall"], cols["code"]["recall"], e["recall"])
    name2, code2, all2 = by_k[2]
    name5, code5, all5 = by_k[5]
    assert code2 < 0.5, by_k
    assert code5 == 1.0, by_k
    assert name2 >= 0.95 and name5 >= 0.95, by_k
    assert all2 < all5, by_k
    # And the NOTICE says it.
    conn.execute("SET tributary.progress_interval = 10000")
    notices = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary))
    try:
        conn.execute("SELECT count(*) FROM tributary_match('tm.rc_l', 'tm.rc_r', '{name,code}', k => 5)")
    finally:
        conn.execute("SET tributary.progress_interval = 0")
    said = [float(m.group(1)) for n in notices for m in [re.search(r"candidate recall ([0-9.]+)", n)] if m]
    assert said and abs(said[0] - float(all5)) < 1e-9, (notices, all5)
