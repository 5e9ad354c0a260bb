// `#[pg_test]`s of rows as text with huge values (src/pg/record.rs), included into `mod tests`
// after src/tests.rs (lib.rs), whose imports (pgrx::prelude) it uses; other items by path.


fn text_of(sql: &str) -> String {
    Spi::get_one::<String>(sql).unwrap().unwrap()
}

/// The text of the row `SELECT d FROM <from>` by the path rows took before values were
/// measured: `row_to_json` of the whole row, parsed.
fn text_by_row_to_json(table: &str, id: i32) -> String {
    let json = text_of(&format!("SELECT row_to_json(d)::text FROM {table} d WHERE id = {id}"));
    let oid = Spi::get_one::<pg_sys::Oid>(&format!("SELECT '{table}'::regclass::oid"))
        .unwrap()
        .unwrap();
    let values = crate::service::rows::row_values(&json).unwrap();
    let model = crate::pg::catalog::model(None).unwrap();
    crate::service::rows::row_text(
        Some(oid),
        &values,
        &crate::service::rows::RowOptions {
            template: 1,
            ..Default::default()
        },
        &model,
    )
    .unwrap()
}

#[pg_test]
fn huge_values_give_a_short_text_and_small_rows_the_same_text() {
    Spi::run(
        "CREATE TABLE huge_author (id int PRIMARY KEY, name text);
         CREATE TABLE huge_doc (id int PRIMARY KEY, author_id int REFERENCES huge_author,
                                title text, body jsonb, notes text, tags text[]);
         INSERT INTO huge_author VALUES (1, 'Ann');
         INSERT INTO huge_doc VALUES
           (1, 1, 'A title', '{\"k\": [1, 2, 3], \"s\": \"short\"}', 'a note', '{x,y}'),
           (2, 1, 'Medium', (SELECT jsonb_agg(i) FROM generate_series(1, 10000) i),
            repeat('word ', 20000), NULL),
           (3, 1, 'Big', (SELECT jsonb_agg(i) FROM generate_series(1, 3000000) i),
            repeat('lorem ipsum ', 2000000), '{n}')",
    )
    .unwrap();
    // Rows without an oversized value (values up to 16 x 16 kB for a 256-token window): the
    // same text as through row_to_json.
    for id in [1, 2] {
        let text = text_of(&format!(
            "SELECT tributary_row_text(d, template => 1) FROM huge_doc d WHERE id = {id}"
        ));
        assert_eq!(text, text_by_row_to_json("huge_doc", id), "row {id}");
    }
    assert_eq!(
        text_of("SELECT tributary_row_text(d, template => 1) FROM huge_doc d WHERE id = 1"),
        "table: huge_doc\ntitle: A title\nbody: {\"k\":[1,2,3],\"s\":\"short\"}\nnotes: a note\ntags: x, y"
    );
    // A 23 MB jsonb value and a 24 MB text: a short text, each value cut, the rest whole.
    let big = text_of("SELECT tributary_row_text(d, template => 1) FROM huge_doc d WHERE id = 3");
    assert!(big.len() < 2000, "{} bytes", big.len());
    assert!(big.starts_with("table: huge_doc\ntitle: Big\nbody: [1, 2, 3, "), "{big}");
    let lines: Vec<&str> = big.lines().collect();
    assert!(lines[2].ends_with('…') && lines[3].starts_with("notes: lorem ipsum"), "{big}");
    assert!(lines[3].ends_with('…'), "{big}");
    assert_eq!(lines[4], "tags: n");
    // The same as a parent's child row (read through SPI), and in an anonymous record.
    let parent = text_of(
        "SELECT tributary_row_text(a, children => 3, template => 1) FROM huge_author a WHERE id = 1",
    );
    assert!(parent.len() < 2000, "{} bytes", parent.len());
    assert!(parent.contains("huge_doc (3 of 3): title: Big, body: [1, 2, 3, "), "{parent}");
    let record = text_of("SELECT tributary_row_text(ROW(repeat('é', 5000000), 7), template => 1)");
    // One 5-million-character word is a single token ([UNK]) to WordPiece, so the window does
    // not cut it: what bounds it is the oversized cut (16 kB for 256 tokens).
    assert!(record.len() < 17_000 && record.ends_with("\nf2: 7"), "{} bytes", record.len());
    // An oversized jsonb value is rendered only in part, as jsonb_out writes it: nested objects
    // and arrays, escapes, numbers, booleans, nulls, and a top-level scalar.
    Spi::run(
        "INSERT INTO huge_doc (id, author_id, title, body) VALUES
           (4, 1, 'Nested', (SELECT jsonb_agg(jsonb_build_object('n', i, 'q', 'say \"hi\"' || chr(10) || chr(9) || chr(92), 'b', i % 2 = 0,
                'z', NULL, 'a', jsonb_build_array(1.5, 'x', jsonb_build_array()), 'o', jsonb_build_object('é', -2e-3)))
                FROM generate_series(1, 100000) i)),
           (5, 1, 'Scalar', to_jsonb(repeat('é\"', 300000)))",
    )
    .unwrap();
    for id in [4, 5] {
        let text = text_of(&format!("SELECT tributary_row_text(d, template => 1) FROM huge_doc d WHERE id = {id}"));
        let full = text_of(&format!("SELECT body::text FROM huge_doc WHERE id = {id}"));
        let shown = text
            .lines()
            .find_map(|l| l.strip_prefix("body: "))
            .unwrap_or_else(|| panic!("no body in {text}"));
        let shown = shown.strip_suffix('…').unwrap_or_else(|| panic!("not cut: {shown}"));
        assert!(shown.len() > 20 && full.starts_with(shown), "row {id}: {shown}");
    }
    // The embedding of such a row works too, and is that of its text.
    let same = Spi::get_one::<bool>(
        "SELECT tributary_embed(d, template => 1) = tributary_embed(tributary_row_text(d, template => 1)) FROM huge_doc d WHERE id = 3",
    )
    .unwrap();
    assert_eq!(same, Some(true));
}
