-- Row template version 2 (the default): only columns that carry language, and context through
-- link tables. Version 1 stays selectable with its old text (rows.sql and hostile_rows.sql pin it).
SET tributary.progress_interval = 0;
CREATE SCHEMA cinema;
CREATE TYPE cinema.rating AS ENUM ('G', 'PG', 'R');
CREATE DOMAIN cinema.minutes AS int CHECK (VALUE > 0);
CREATE TABLE cinema.studio (studio_id int PRIMARY KEY, name text, founded date, listed boolean);
CREATE TABLE cinema.film (film_id int PRIMARY KEY, title text NOT NULL, rating cinema.rating,
                          minutes cinema.minutes, budget numeric(12,2), score float8, released date,
                          shot_at timestamptz, runtime interval, color boolean, code uuid, reels int[],
                          tags text[], info jsonb, studio_id int REFERENCES cinema.studio,
                          embedding vector(384));
CREATE TABLE cinema.person (person_id int PRIMARY KEY, name text NOT NULL, bio text, born date);
-- A link table: film and person, with what the link says (role) and what it does not (billing).
CREATE TABLE cinema.film_person (film_id int REFERENCES cinema.film, person_id int REFERENCES cinema.person,
                                 role text, billing int, added timestamptz,
                                 PRIMARY KEY (film_id, person_id, role));
-- An ordinary child table (one foreign key).
CREATE TABLE cinema.review (review_id int PRIMARY KEY, film_id int NOT NULL REFERENCES cinema.film,
                            body text, stars int);
-- A far table some roles may not read, and one with row-level security.
CREATE TABLE cinema.secret (secret_id int PRIMARY KEY, codename text);
CREATE TABLE cinema.film_secret (film_id int REFERENCES cinema.film, secret_id int REFERENCES cinema.secret,
                                 note text, PRIMARY KEY (film_id, secret_id));
CREATE TABLE cinema.tag (tag_id int PRIMARY KEY, label text, hidden boolean NOT NULL DEFAULT false);
CREATE TABLE cinema.film_tag (film_id int REFERENCES cinema.film, tag_id int REFERENCES cinema.tag,
                              PRIMARY KEY (film_id, tag_id));
-- A link table from film to film: the row itself is never its own context.
CREATE TABLE cinema.sequel (film_id int REFERENCES cinema.film, next_id int REFERENCES cinema.film,
                            PRIMARY KEY (film_id, next_id));
INSERT INTO cinema.studio VALUES (1, 'Brandywine', '1968-01-01', false);
INSERT INTO cinema.film VALUES
  (1, 'Alien', 'R', 117, 11000000, 8.5, '1979-05-25', '1978-07-05 09:00+00', '1 hour 57 minutes', true,
   'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,2}', '{space,horror}', '{"tagline": "In space no one can hear you scream"}', 1),
  (2, 'Aliens', 'R', 137, 18500000, 8.4, '1986-07-18', NULL, NULL, true, NULL, NULL, '{space,action}', NULL, 1),
  (3, 'Lonely film', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO cinema.person VALUES (1, 'Ridley Scott', 'English director', '1937-11-30'),
  (2, 'Sigourney Weaver', 'American actress', '1949-10-08'), (3, 'Tom Skerritt', NULL, '1933-08-25'),
  (4, 'James Cameron', 'Canadian director', '1954-08-16');
INSERT INTO cinema.film_person VALUES
  (1, 1, 'director', 1, '2024-03-01 00:00+00'), (1, 2, 'actor', 2, '2024-02-01 00:00+00'),
  (1, 3, 'actor', 3, '2024-01-01 00:00+00'), (2, 4, 'director', 1, NULL), (2, 2, 'actor', 2, NULL);
INSERT INTO cinema.review VALUES (1, 1, 'Terrifying and beautiful', 5), (2, 1, NULL, 4);
INSERT INTO cinema.secret VALUES (1, 'Nostromo');
INSERT INTO cinema.film_secret VALUES (1, 1, 'working title');
INSERT INTO cinema.tag VALUES (1, 'classic', false), (2, 'cult', false), (3, 'overrated', true);
INSERT INTO cinema.film_tag VALUES (1, 1), (1, 2), (1, 3);
INSERT INTO cinema.sequel VALUES (1, 2), (1, 1), (3, 1);

SELECT tributary_row_template_version();

-- 1. The type rule: numbers, dates, times, timestamps, intervals, booleans, uuids (also through
-- a domain and in arrays) are left out; text, enums, text arrays and json stay, in column order.
SELECT tributary_row_text(f) FROM cinema.film f WHERE film_id = 1;
-- ... unless named in include.
SELECT tributary_row_text(f, include => '{title,minutes,released,color,code,reels}') FROM cinema.film f WHERE film_id = 1;
-- ... at every level: the parent's founded date and listed flag are left out.
SELECT tributary_row_text(f, parents => 1) FROM cinema.film f WHERE film_id = 1;
-- An anonymous record: its JSON numbers and booleans are left out.
SELECT tributary_row_text(ROW(1, 'x', true, NULL::text));
-- A row with nothing that carries language is its table line only.
SELECT tributary_row_text(f, include => '{title}') FROM cinema.film f WHERE film_id = 3;
SELECT tributary_row_text(s) FROM cinema.studio s;

-- 2. Template 1 gives the old text exactly: every column, link tables as plain child tables.
SELECT tributary_row_text(f, template => 1) FROM cinema.film f WHERE film_id = 1;
SELECT tributary_row_text(f, include => '{title}', children => 2, template => 1) FROM cinema.film f WHERE film_id = 1;

-- 3. Link tables: the far rows, labelled with the far table's name, with the link row's own
-- columns that say something; at most `children` per link table, with the count of all; ordinary
-- child tables as before. The link row's role shows although it is in its primary key. The film
-- itself is never its own sequel (sequel (1, 1) is not shown), and the two link lines from
-- sequel to film are told apart.
SELECT tributary_row_text(f, include => '{title}', children => 2) FROM cinema.film f WHERE film_id = 1;
SELECT tributary_row_text(f, include => '{title}', children => 5) FROM cinema.film f WHERE film_id = 2;
-- From the other side: a person's films (the far film's vector and key columns never shown).
SELECT tributary_row_text(p, children => 5) FROM cinema.person p WHERE person_id = 2;
-- Bounded: one of two.
SELECT tributary_row_text(p, children => 1, include => '{name}') FROM cinema.person p WHERE person_id = 2;
-- Leaving out the link's foreign key to the far table makes it an ordinary child table.
SELECT tributary_row_text(p, children => 5, exclude => '{film_person.film_id}') FROM cinema.person p WHERE person_id = 4;

-- A self-referencing table with one other foreign key is not a link table to that table: an
-- employee's reports are employees.
CREATE TABLE cinema.crew (crew_id int PRIMARY KEY, name text, boss_id int REFERENCES cinema.crew,
                          studio_id int REFERENCES cinema.studio);
INSERT INTO cinema.crew VALUES (1, 'Gordon Carroll', NULL, 1), (2, 'Ivor Powell', 1, 1), (3, 'Nobody', 3, 1);
SELECT tributary_row_text(c, children => 5, parents => 1) FROM cinema.crew c ORDER BY crew_id;

-- 4. Time: the link table's time column orders the rows (most recent first) and, with as_of,
-- hides later links.
SELECT tributary_row_text(f, include => '{title}', children => 2, time_columns => '{added}') FROM cinema.film f WHERE film_id = 1;
SELECT tributary_row_text(f, include => '{title}', children => 5, time_columns => '{added}', as_of => '2024-01-15 00:00+00')
FROM cinema.film f WHERE film_id = 1;

-- 5. Privileges: a far table the role may not read shows nothing of it (no secret line), a far
-- row row-level security hides is neither shown nor counted (tag 3), unreadable columns are left
-- out (person.bio), and a link row whose far row the role cannot see is not shown.
CREATE ROLE rows_v2_viewer;
GRANT USAGE ON SCHEMA cinema TO rows_v2_viewer;
GRANT SELECT ON cinema.film, cinema.film_person, cinema.review, cinema.film_secret, cinema.tag, cinema.film_tag,
                cinema.sequel, cinema.studio TO rows_v2_viewer;
GRANT SELECT (person_id, name) ON cinema.person TO rows_v2_viewer;
ALTER TABLE cinema.tag ENABLE ROW LEVEL SECURITY;
CREATE POLICY shown ON cinema.tag USING (NOT hidden);
SET ROLE rows_v2_viewer;
SELECT tributary_row_text(f, include => '{title}', children => 5) FROM cinema.film f WHERE film_id = 1;
-- The same through tributary_embed: the text it embeds.
SELECT (tributary_embed(f, include => '{title}', children => 5)
        <=> tributary_embed(tributary_row_text(f, include => '{title}', children => 5))) < 1e-6 AS same
FROM cinema.film f WHERE film_id = 1;
RESET ROLE;
-- As the owner the secret and the hidden tag are there.
SELECT tributary_row_text(f, include => '{title}', children => 5) FROM cinema.film f WHERE film_id = 1;

-- 6. Whole rows through tributary_embed_column: template 2 by default, template => 1 on request.
SELECT tributary_embed_column('cinema.film', '{*}', 'embedding', parents => 1) AS embedded;
SELECT count(*) FILTER (WHERE (embedding <=> tributary_embed(f, parents => 1, exclude => '{embedding}')) < 1e-6) AS v2,
       count(*) FILTER (WHERE (embedding <=> tributary_embed(f, parents => 1, exclude => '{embedding}', template => 1)) < 1e-6) AS v1
FROM cinema.film f;
UPDATE cinema.film SET embedding = NULL;
SELECT tributary_embed_column('cinema.film', '{*}', 'embedding', parents => 1, template => 1) AS embedded;
SELECT count(*) FILTER (WHERE (embedding <=> tributary_embed(f, parents => 1, exclude => '{embedding}')) < 1e-6) AS v2,
       count(*) FILTER (WHERE (embedding <=> tributary_embed(f, parents => 1, exclude => '{embedding}', template => 1)) < 1e-6) AS v1
FROM cinema.film f;

-- 7. Jobs keep the template they were made with: 2 by default, or as given.
CREATE TABLE cinema.film_emb (film_id int PRIMARY KEY, embedding vector(384));
SET client_min_messages = warning;
SELECT tributary_job_create('cinema.film', '{*}', target_table => 'cinema.film_emb', name => 'v2') AS job_v2 \gset
SELECT tributary_job_create('cinema.film', '{*}', target_table => 'cinema.film_emb', name => 'v1', template => 1) AS job_v1 \gset
RESET client_min_messages;
SELECT name, template FROM tributary._jobs WHERE id IN (:job_v2, :job_v1) ORDER BY id;
SELECT tributary_job_drop(:job_v2), tributary_job_drop(:job_v1);

-- 8. Errors: no template 3 (22023), NULL template (22004).
SELECT expect_error($$SELECT tributary_row_text(f, template => 3) FROM cinema.film f LIMIT 1$$);
SELECT expect_error($$SELECT tributary_embed(f, template => 0) FROM cinema.film f LIMIT 1$$);
SELECT expect_error($$SELECT tributary_row_text(f, template => NULL) FROM cinema.film f LIMIT 1$$);
SELECT expect_error($$SELECT tributary_embed_column('cinema.film', '{*}', 'embedding', template => 3)$$);
SELECT expect_error($$SELECT tributary_embed_column('cinema.film', '{*}', 'embedding', template => NULL)$$);
SELECT expect_error($$SELECT tributary_job_create('cinema.film', '{*}', target_table => 'cinema.film_emb', template => 3)$$);

-- 9. Partitioned tables are one table: a parent that is partitioned gives its text once (not once
-- more through the partition holding the row), and a partitioned child table is one child.
CREATE TABLE cinema.imprint (imprint_id int PRIMARY KEY, name text) PARTITION BY RANGE (imprint_id);
CREATE TABLE cinema.imprint_a PARTITION OF cinema.imprint FOR VALUES FROM (0) TO (100);
CREATE TABLE cinema.imprint_b PARTITION OF cinema.imprint FOR VALUES FROM (100) TO (200);
CREATE TABLE cinema.release (release_id int PRIMARY KEY, imprint_id int REFERENCES cinema.imprint, title text);
CREATE TABLE cinema.release_note (note_id int, release_id int REFERENCES cinema.release, body text, part int,
                                  PRIMARY KEY (note_id, part)) PARTITION BY LIST (part);
CREATE TABLE cinema.release_note_1 PARTITION OF cinema.release_note FOR VALUES IN (1);
CREATE TABLE cinema.release_note_2 PARTITION OF cinema.release_note FOR VALUES IN (2);
INSERT INTO cinema.imprint VALUES (5, 'Imprint Five'), (150, 'Imprint One Fifty');
INSERT INTO cinema.release VALUES (1, 5, 'First Release'), (2, 150, 'Second Release');
INSERT INTO cinema.release_note VALUES (1, 1, 'a note', 1), (2, 1, 'another note', 2);
SELECT tributary_row_text(r, parents => 1, children => 5) FROM cinema.release r ORDER BY release_id;

DROP SCHEMA cinema CASCADE;
DROP ROLE rows_v2_viewer;
