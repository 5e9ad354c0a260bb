-- Rows as text: tributary_row_text / tributary_embed(record), foreign-key context, privileges,
-- and prediction from neighbours.
SET tributary.progress_interval = 0;
CREATE SCHEMA music;
CREATE TABLE music.artist (artist_id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE music.album (album_id int PRIMARY KEY, title text NOT NULL,
                          artist_id int REFERENCES music.artist, released date);
CREATE TABLE music.track (track_id int PRIMARY KEY, name text NOT NULL, album_id int REFERENCES music.album,
                          milliseconds int, unit_price numeric(10,2), explicit boolean, tags text[],
                          info jsonb, added timestamp, genre text, embedding vector(384));
CREATE TABLE music.play (play_id int PRIMARY KEY, track_id int NOT NULL REFERENCES music.track,
                         played_at timestamptz NOT NULL, listener text);
INSERT INTO music.artist VALUES (1, 'AC/DC'), (2, 'Miles Davis');
INSERT INTO music.album VALUES (10, 'For Those About To Rock', 1, '1981-11-23'), (20, 'Kind of Blue', 2, '1959-08-17'),
                               (30, 'Unknown album', NULL, NULL);
INSERT INTO music.track VALUES
  (100, 'For Those About To Rock (We Salute You)', 10, 343719, 0.99, false, '{loud,live}', '{"bpm": 133}', '2009-01-01 00:00', 'rock'),
  (101, 'Put The Finger On You', 10, 205662, 0.99, NULL, NULL, NULL, '2009-01-01 10:30', 'rock'),
  (200, 'So What', 20, 562000, 0.99, false, '{modal}', NULL, NULL, 'jazz'),
  (201, 'Blue in Green', 20, 337000, 1.99, false, '{}', '{}', NULL, 'jazz'),
  (300, 'Lonely track', 30, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  (301, 'Orphan', NULL, 1000, 0.99, NULL, NULL, NULL, NULL, 'rock');
INSERT INTO music.play VALUES (1, 100, '2024-01-01 10:00+00', 'ann'), (2, 100, '2024-02-01 10:00+00', 'bob'),
                              (3, 100, '2024-03-01 10:00+00', 'cid'), (4, 200, '2024-01-15 10:00+00', 'ann');

-- The row alone: table, typed values in column order, NULLs, empty values, keys and vectors left out.
SELECT tributary_row_text(t, template => 1) FROM music.track t WHERE track_id IN (100, 201) ORDER BY track_id;
SELECT tributary_row_template_version();
-- Keys on request; include and exclude.
SELECT tributary_row_text(t, keys => true, include => '{track_id,name,album_id}', template => 1) FROM music.track t WHERE track_id = 100;
SELECT tributary_row_text(t, exclude => '{genre,tags,info,added,milliseconds}', template => 1) FROM music.track t WHERE track_id = 100;
-- Parents: one level, two levels (the album's artist), a NULL foreign key deeper down, none at all.
SELECT tributary_row_text(t, parents => 1, include => '{name,album_id}', template => 1) FROM music.track t WHERE track_id = 100;
SELECT tributary_row_text(t, parents => 2, include => '{name,album_id}', template => 1) FROM music.track t WHERE track_id = 100;
SELECT tributary_row_text(t, parents => 2, include => '{name,album_id}', template => 1) FROM music.track t WHERE track_id IN (300, 301) ORDER BY track_id;
-- Excluding a foreign key column leaves out its parent too; table.column reaches into the context.
SELECT tributary_row_text(t, parents => 2, include => '{name}', template => 1) FROM music.track t WHERE track_id = 100;
SELECT tributary_row_text(t, parents => 2, include => '{name,album_id}', exclude => '{artist.name,album.released}', template => 1) FROM music.track t WHERE track_id = 100;
-- Children: most recent first by the time column, bounded, with the total; as_of hides later rows.
SELECT tributary_row_text(t, children => 2, time_columns => '{played_at}', include => '{name}', template => 1) FROM music.track t WHERE track_id = 100;
SELECT tributary_row_text(t, children => 5, time_columns => '{played_at}', as_of => '2024-01-20 00:00+00', include => '{name}', template => 1)
FROM music.track t WHERE track_id = 100;
-- timestamptz values are written in UTC: the text does not depend on the session's TimeZone.
SET TimeZone = 'Asia/Tokyo';
SELECT tributary_row_text(t, children => 1, time_columns => '{played_at}', include => '{name}', template => 1) FROM music.track t WHERE track_id = 100;
RESET TimeZone;
SELECT tributary_row_text(a, children => 1, parents => 1, template => 1) FROM music.album a WHERE album_id = 20;
-- An anonymous record: no table, fields as they come.
SELECT tributary_row_text(ROW(1, 'x', NULL::int, true), template => 1);
SELECT tributary_row_text(NULL::music.track) IS NULL AS null_in_null_out;
-- Long values are cut fairly: each long column gets the same share, short ones stay whole.
SELECT tributary_row_text(ROW(repeat('alpha ', 300), 'short', repeat('beta ', 300)), max_tokens => 40, template => 1);
SELECT tributary_row_text(t, include => '{name,tags,genre}', max_tokens => 20, template => 1) AS text,
       cardinality(tributary_tokenize(tributary_row_text(t, include => '{name,tags,genre}', max_tokens => 20, template => 1))) <= 20 AS fits
FROM music.track t WHERE track_id = 100;

-- tributary_embed(record) embeds exactly that text.
SELECT (tributary_embed(t, parents => 2, template => 1) <=> tributary_embed(tributary_row_text(t, parents => 2, template => 1))) < 1e-6 AS same
FROM music.track t WHERE track_id = 100;
SELECT tributary_embed(NULL::music.track, template => 1) IS NULL AS null_in_null_out;

-- Self-reference and a cycle of foreign keys: each row is shown once, depth is bounded.
CREATE TABLE music.employee (id int PRIMARY KEY, name text, reports_to int REFERENCES music.employee);
INSERT INTO music.employee VALUES (1, 'Andrew', NULL), (2, 'Nancy', 1), (3, 'Jane', 2);
SELECT tributary_row_text(e, parents => 5, children => 5, template => 1) FROM music.employee e WHERE id = 2;
CREATE TABLE music.a (id int PRIMARY KEY, label text, b_id int);
CREATE TABLE music.b (id int PRIMARY KEY, label text, a_id int REFERENCES music.a);
ALTER TABLE music.a ADD FOREIGN KEY (b_id) REFERENCES music.b;
INSERT INTO music.a VALUES (1, 'a one', NULL);
INSERT INTO music.b VALUES (1, 'b one', 1);
UPDATE music.a SET b_id = 1;
SELECT tributary_row_text(a, parents => 10, template => 1) FROM music.a a;
-- A composite foreign key and a table without a primary key.
CREATE TABLE music.edition (album_id int, no int, label text, PRIMARY KEY (album_id, no));
CREATE TABLE music.pressing (album_id int, no int, plant text, FOREIGN KEY (album_id, no) REFERENCES music.edition);
INSERT INTO music.edition VALUES (10, 1, 'first edition');
INSERT INTO music.pressing VALUES (10, 1, 'Sydney'), (10, 1, 'Hamburg');
SELECT tributary_row_text(p, parents => 1, template => 1) FROM music.pressing p ORDER BY plant;
SELECT tributary_row_text(e, children => 5, template => 1) FROM music.edition e;

-- Bad input.
SELECT expect_error($$SELECT tributary_row_text(t, include => '{nope}', template => 1) FROM music.track t LIMIT 1$$);
SELECT expect_error($$SELECT tributary_row_text(t, template => 3) FROM music.track t LIMIT 1$$);
SELECT expect_error($$SELECT tributary_row_text(t, parents => -1, template => 1) FROM music.track t LIMIT 1$$);
SELECT expect_error($$SELECT tributary_row_text(t, model => 'nope', template => 1) FROM music.track t LIMIT 1$$);

-- Privileges: context never shows what the caller cannot SELECT (column privileges, row-level security).
CREATE ROLE tributary_reader;
GRANT USAGE ON SCHEMA music TO tributary_reader;
GRANT SELECT ON music.track, music.artist TO tributary_reader;
GRANT SELECT (album_id, title) ON music.album TO tributary_reader;   -- not "released"
ALTER TABLE music.artist ENABLE ROW LEVEL SECURITY;
CREATE POLICY only_acdc ON music.artist FOR SELECT USING (name = 'AC/DC');
SET ROLE tributary_reader;
SELECT tributary_row_text(t, parents => 2, include => '{name,album_id}', template => 1) FROM music.track t WHERE track_id IN (100, 200) ORDER BY track_id;
RESET ROLE;

-- Whole rows through tributary_embed_column (columns => '{*}'): the same text as tributary_row_text.
SELECT tributary_embed_column('music.track', '{*}', 'embedding', parents => 2, exclude => '{genre}', template => 1) AS embedded;
SELECT count(*) FILTER (WHERE (embedding <=> tributary_embed(t, parents => 2, exclude => '{genre,embedding}', template => 1)) < 1e-6) AS same,
       count(*) AS total
FROM music.track t;
SELECT expect_error($$SELECT tributary_embed_column('music.track', '{name}', 'embedding', parents => 1)$$);

-- Prediction from neighbours: categories by weighted vote with evidence, numbers by weighted mean.
SELECT prediction, round(confidence::numeric, 2) AS confidence, neighbours,
       jsonb_path_query_array(evidence, '$[*].key.track_id') AS evidence
FROM tributary_predict('music.track', 'genre', 'embedding', tributary_embed('heavy guitar rock anthem'), k => 3);
SELECT prediction::float8 > 0 AS positive, stddev IS NOT NULL AS has_stddev, neighbours
FROM tributary_predict('music.track', 'milliseconds', 'embedding', tributary_embed('jazz'), k => 2);
SELECT (tributary_predict('music.track', 'genre', 'embedding', NULL)).prediction IS NULL AS null_in_null_out;
SELECT expect_error($$SELECT tributary_predict('music.track', 'genre', 'embedding', tributary_embed('x'), k => 0)$$);
SELECT expect_error($$SELECT tributary_predict('music.track', 'nope', 'embedding', tributary_embed('x'))$$);
SELECT expect_error($$SELECT tributary_predict('music.track', 'genre', 'name', tributary_embed('x'))$$);
SELECT expect_error($$SELECT tributary_predict('music.track', 'genre', 'embedding', tributary_embed('x'), kind => 'guess')$$);
-- A table without a primary key: neighbours are identified by ctid.
CREATE TABLE music.nokey (label text, e vector(384));
INSERT INTO music.nokey VALUES ('rock', tributary_embed('loud guitars')), ('jazz', tributary_embed('modal trumpet'));
SELECT prediction, jsonb_path_query_array(evidence, '$[*].key') AS evidence
FROM tributary_predict('music.nokey', 'label', 'e', tributary_embed('guitar riffs'), k => 1);
-- Evaluation: held out by album, same split for the same seed; metrics next to the baseline.
SELECT metric, test_rows + train_rows AS labelled, model BETWEEN 0 AND 1 AS in_range, baseline BETWEEN 0 AND 1 AS baseline_in_range
FROM tributary_evaluate('music.track', 'genre', 'embedding', group_by => 'album_id', test_fraction => 0.5, k => 2);
SELECT metric, model >= 0 AS non_negative FROM tributary_evaluate('music.track', 'milliseconds', 'embedding', k => 2, test_fraction => 0.5);
SELECT expect_error($$SELECT * FROM tributary_evaluate('music.track', 'genre', 'embedding', test_fraction => 1)$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('music.track', 'genre', 'embedding', group_by => 'nope')$$);
DROP OWNED BY tributary_reader;
DROP ROLE tributary_reader;
