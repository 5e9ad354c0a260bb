-- Table descriptions behind tributary_row_text are cached per transaction and role
-- (src/pg/relation.rs); DDL in the same transaction drops them through a relcache callback, so
-- each call sees the table as it is now: an added column is in the text, a dropped one is gone
-- (include names it: 42703), a foreign key added brings its parent.
CREATE SCHEMA shape;
CREATE TABLE shape.maker (id int PRIMARY KEY, name text);
CREATE TABLE shape.item (id int PRIMARY KEY, name text, note text);
INSERT INTO shape.maker VALUES (1, 'Acme');
INSERT INTO shape.item VALUES (1, 'first', 'a note');
BEGIN;
SELECT tributary_row_text(i, parents => 1) FROM shape.item i;
ALTER TABLE shape.item ADD COLUMN colour text DEFAULT 'red';
SELECT tributary_row_text(i, parents => 1) FROM shape.item i;
ALTER TABLE shape.item DROP COLUMN note;
SELECT tributary_row_text(i, parents => 1) FROM shape.item i;
SELECT expect_error($$SELECT tributary_row_text(i, include => '{name,note}') FROM shape.item i$$);
ALTER TABLE shape.item ADD COLUMN maker_id int DEFAULT 1 REFERENCES shape.maker;
SELECT tributary_row_text(i, parents => 1) FROM shape.item i;
COMMIT;
DROP TABLE shape.item, shape.maker;
DROP SCHEMA shape;
