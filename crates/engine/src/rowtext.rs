//! Rows as text: a table row, with what its foreign keys reach, laid out as the text a model
//! embeds, and cut fairly to the model's token limit. No PostgreSQL here: the caller gathers the
//! row and its context ([`Row`]); this module decides the text. (Over 600 lines only by its
//! tests: the code is about 450.)
//!
//! Template version 1, one item per line:
//!
//! ```text
//! table: track
//! name: Balls to the Wall
//! milliseconds: 342562
//! album.title: Balls to the Wall
//! album.artist.name: Accept
//! invoice_line (2 of 7): unit_price: 0.99, quantity: 1; unit_price: 0.99, quantity: 2
//! ```
//!
//! - `table: <name>` first, when the row belongs to a table;
//! - then `column: value` for each column, in column order, NULLs and empty values skipped;
//! - then each parent row (reached by a foreign key), its columns prefixed by the parent's path
//!   (`album.`, `album.artist.`);
//! - then one line per child table: how many of its rows are shown of how many there are, and
//!   the shown rows' `column: value` pairs (`, ` between columns, `; ` between rows).
//!
//! Values are formatted from their JSON form ([`format_value`]): numbers as written by
//! PostgreSQL, booleans `true`/`false`, timestamps `YYYY-MM-DD HH:MM:SS` (the time left out at
//! midnight), arrays as `a, b, c`, json objects compact.
//!
//! Template version 2 ([`TEMPLATE_VERSION`], the default) is version 1 with two changes:
//!
//! ```text
//! table: film
//! title: Alien
//! language.name: English
//! person (2 of 3): name: Ridley Scott, role: director; name: Sigourney Weaver, role: actor
//! ```
//!
//! - **Only columns that carry language.** Columns whose values are numbers (int2/4/8, float,
//!   numeric, money), dates, times, timestamps, intervals, booleans or uuids ([`Field::wordless`])
//!   are left out, at every level (the row, its parents, its children, link rows), unless the
//!   caller named the column in `include`. Text-like columns (text, varchar, char, citext, name,
//!   enums, arrays of those, json/jsonb) stay, in column order. Why: a sentence embedding is
//!   the mean of its tokens' vectors (mean pooling), every token weighing the same, so tokens
//!   that say nothing about what the row means (`claims: 14`, `date: 2019-03-05`) dilute those
//!   that do. On real patents, the title alone predicted the CPC section at 0.760 accuracy and the
//!   whole row under version 1 (title, type, grant date, number of claims, link rows) at 0.735.
//! - **Context through link tables.** A child table that also references one other table (a
//!   link table, e.g. `film_person(film_id -> film, person_id -> person, role)`) shows the rows
//!   it links to instead of its own key columns: the line is labelled with the linked (far)
//!   table's name and each shown row is the far row's columns, then the link row's own columns
//!   (`role: director`). The caller gathers these rows ([`Children`], far columns first); the
//!   layout is that of child rows.
//!
//! Version 1 stays selectable, with exactly its old text, so that stored embeddings can be
//! reproduced ([`TEMPLATE_VERSIONS`]).
//!
//! When the text is longer than the token budget, only values are cut (labels stay), each to its
//! max-min fair share of the budget ([`fair_shares`]): short values are kept whole and long ones
//! are cut to the same length, so one long column cannot push the others out. A cut value ends
//! in `…`.

use serde_json::{Map, Value};

use super::error::Result;
use super::tokenize::{cut, TextTokenizer, BYTES_PER_TOKEN};

/// The layout described in this module's documentation. A different layout gets a new number;
/// older numbers stay selectable so that stored embeddings can be reproduced.
pub const TEMPLATE_VERSION: i32 = 2;

/// Every template version [`row_text`] knows, oldest first.
pub const TEMPLATE_VERSIONS: std::ops::RangeInclusive<i32> = 1..=2;

/// [`TEMPLATE_VERSIONS`] for a message: `1, 2`.
pub fn version_list() -> String {
    TEMPLATE_VERSIONS
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One column of a row: its name, its value as PostgreSQL's `row_to_json` writes it, and
/// whether it is a date or timestamp (formatted as such).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Field {
    pub name: String,
    pub value: Value,
    pub timestamp: bool,
    /// Its type carries no language (numbers, dates, times, timestamps, intervals, booleans,
    /// uuids, also through domains and arrays) and the caller did not name it in `include`:
    /// left out by template version 2, shown by version 1.
    pub wordless: bool,
}

impl Field {
    /// Whether the field is part of the text under `template`.
    fn shown(&self, template: i32) -> bool {
        template < 2 || !self.wordless
    }
}

/// A row and its foreign-key context, as gathered by the caller.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// The table's name, `None` for an anonymous record.
    pub table: Option<String>,
    pub fields: Vec<Field>,
    /// Parent rows: `(path label, row)`, the label usually the foreign key column without `_id`.
    pub parents: Vec<(String, Row)>,
    pub children: Vec<Children>,
}

/// Some child rows of one child table (rows whose foreign key references the row).
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    pub label: String,
    /// How many child rows there are in all (visible to the caller, within `as_of`).
    pub total: i64,
    /// The rows shown, most recent first when there is a time column.
    pub rows: Vec<Vec<Field>>,
}

/// A text with holes for values: literal text and values in order.
#[derive(Debug, Default)]
struct Layout {
    /// Literal text before value `i` is `lits[i]`; the last literal follows the last value.
    lits: Vec<String>,
    values: Vec<String>,
}

impl Layout {
    fn lit(&mut self, s: &str) {
        if self.lits.len() == self.values.len() {
            self.lits.push(String::new());
        }
        self.lits.last_mut().expect("pushed above").push_str(s);
    }

    fn value(&mut self, v: String) {
        if self.lits.len() == self.values.len() {
            self.lits.push(String::new());
        }
        self.values.push(v);
    }

    fn render(&self, values: &[&str]) -> String {
        let mut out = String::new();
        for (i, lit) in self.lits.iter().enumerate() {
            out.push_str(lit);
            if let Some(v) = values.get(i) {
                out.push_str(v);
            }
        }
        out
    }
}

/// A row's JSON object (PostgreSQL's `row_to_json`, keys in column order) as a map from column
/// name to value. The object is split at its top level without recursion and each value parsed
/// on its own, so a value nested deeper than serde_json's recursion limit (128 levels: a json or
/// jsonb column, a composite) is kept, as its compact JSON text in a [`Value::String`], instead
/// of failing the whole row. `None` if `text` is not a JSON object.
pub fn parse_row_json(text: &str) -> Option<Map<String, Value>> {
    let b = text.as_bytes();
    let ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut map = Map::new();
    let mut i = ws(0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(i + 1);
    if b.get(i) == Some(&b'}') {
        return (ws(i + 1) == b.len()).then_some(map);
    }
    loop {
        let key_end = string_end(b, i)?;
        let key: String = serde_json::from_str(&text[i..key_end]).ok()?;
        i = ws(key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(i + 1);
        let end = value_end(b, start)?;
        let raw = text[start..end].trim_end();
        if raw.is_empty() {
            return None;
        }
        let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(compact_json(raw)));
        map.insert(key, value);
        i = ws(end);
        match b.get(i) {
            Some(b',') => i = ws(i + 1),
            Some(b'}') => return (ws(i + 1) == b.len()).then_some(map),
            _ => return None,
        }
    }
}

/// The byte after the JSON string that starts at `b[i]` (a `"`).
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The end of the JSON value that starts at `b[i]`: the first `,`, `}` or `]` outside strings
/// that closes no bracket opened inside the value. Open brackets are a stack, not recursion.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    let mut open = Vec::new();
    let mut j = i;
    while j < b.len() {
        match b[j] {
            b'"' => {
                j = string_end(b, j)?;
                continue;
            }
            b'{' => open.push(b'}'),
            b'[' => open.push(b']'),
            c @ (b'}' | b']') => match open.pop() {
                None => return Some(j),
                Some(close) if close != c => return None,
                Some(_) => {}
            },
            b',' if open.is_empty() => return Some(j),
            _ => {}
        }
        j += 1;
    }
    open.is_empty().then_some(j)
}

/// `raw` JSON without the whitespace outside its strings, as serde_json writes it compactly.
fn compact_json(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

/// Formats one JSON value for the text; `None` for NULL, `""`, `[]` and `{}` (left out).
pub fn format_value(value: &Value, timestamp: bool) -> Option<String> {
    let s = match value {
        Value::Null => return None,
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if timestamp => format_timestamp(s),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items
                .iter()
                .filter_map(|v| match v {
                    Value::Array(_) => format_value(v, timestamp).map(|s| format!("[{s}]")),
                    _ => format_value(v, timestamp),
                })
                .collect();
            parts.join(", ")
        }
        Value::Object(map) if map.is_empty() => return None,
        Value::Object(_) => value.to_string(),
    };
    (!s.is_empty()).then_some(s)
}

/// `2009-01-01T00:00:00` → `2009-01-01`, `2009-01-01T10:30:00` → `2009-01-01 10:30:00`, and a
/// timestamp with a UTC offset is moved to UTC, `2024-03-01T02:00:00-08:00` →
/// `2024-03-01 10:00:00 UTC`, so the text does not depend on the session's `TimeZone`
/// (PostgreSQL's JSON form of dates and timestamps is ISO 8601 whatever `DateStyle` says).
/// Anything else (times of day, BC dates) is kept as written.
fn format_timestamp(s: &str) -> String {
    if let Some(utc) = to_utc(s) {
        return utc;
    }
    let s = s.replacen('T', " ", 1);
    match s.strip_suffix(" 00:00:00") {
        Some(date) => date.to_owned(),
        None => s,
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]±HH[:MM[:SS]]` as `YYYY-MM-DD HH:MM:SS[.ffffff] UTC`; `None` when
/// `s` is not such a timestamp (the fraction is kept as written).
fn to_utc(s: &str) -> Option<String> {
    let (date, time) = s.split_once('T')?;
    let sign_at = time.rfind(['+', '-'])?;
    let (clock, offset) = time.split_at(sign_at);
    let num = |t: &str| t.parse::<i64>().ok();
    let mut d = date.splitn(3, '-');
    let (y, m, day) = (num(d.next()?)?, num(d.next()?)?, num(d.next()?)?);
    let (hms, frac) = clock.split_once('.').map_or((clock, ""), |(a, b)| (a, b));
    let mut c = hms.splitn(3, ':');
    let (hh, mi, ss) = (num(c.next()?)?, num(c.next()?)?, num(c.next()?)?);
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let mut o = offset[1..].splitn(3, ':');
    let off = num(o.next()?)? * 3600
        + o.next().map_or(Some(0), num)? * 60
        + o.next().map_or(Some(0), num)?;
    // jiff's dates end at year 9999 and PostgreSQL's at 294276: the Gregorian calendar repeats
    // every 400 years (146,097 days), so the date is moved to the same place in the cycle starting
    // at 2000, converted there, and moved back.
    let shift = y - (2000 + y.rem_euclid(400));
    let small = |v: i64| i8::try_from(v).ok();
    let local = jiff::civil::DateTime::new(
        i16::try_from(y - shift).ok()?,
        small(m)?,
        small(day)?,
        small(hh)?,
        small(mi)?,
        small(ss)?,
        0,
    )
    .ok()?;
    let utc = local
        .checked_sub(jiff::SignedDuration::from_secs(sign * off))
        .ok()?;
    let frac = if frac.is_empty() {
        String::new()
    } else {
        format!(".{frac}")
    };
    Some(format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}{frac} UTC",
        shift.checked_add(i64::from(utc.year()))?,
        utc.month(),
        utc.day(),
        utc.hour(),
        utc.minute(),
        utc.second()
    ))
}

/// `name: value` pairs of `fields` with `between` between them; false if none had a value.
fn fields_inline(layout: &mut Layout, fields: &[Field], between: &str, template: i32) -> bool {
    let mut first = true;
    for f in fields.iter().filter(|f| f.shown(template)) {
        if let Some(v) = format_value(&f.value, f.timestamp) {
            if !first {
                layout.lit(between);
            }
            first = false;
            layout.lit(&f.name);
            layout.lit(": ");
            layout.value(v);
        }
    }
    !first
}

/// Starts a line: a newline before every line but the first.
fn newline(layout: &mut Layout, first_line: &mut bool) {
    if !*first_line {
        layout.lit("\n");
    }
    *first_line = false;
}

fn lay_out(row: &Row, template: i32, prefix: &str, layout: &mut Layout, first_line: &mut bool) {
    if prefix.is_empty() {
        if let Some(t) = &row.table {
            newline(layout, first_line);
            layout.lit("table: ");
            layout.lit(t);
        }
    }
    for f in row.fields.iter().filter(|f| f.shown(template)) {
        if let Some(v) = format_value(&f.value, f.timestamp) {
            newline(layout, first_line);
            layout.lit(prefix);
            layout.lit(&f.name);
            layout.lit(": ");
            layout.value(v);
        }
    }
    for (label, parent) in &row.parents {
        lay_out(
            parent,
            template,
            &format!("{prefix}{label}."),
            layout,
            first_line,
        );
    }
    for c in &row.children {
        newline(layout, first_line);
        layout.lit(prefix);
        layout.lit(&format!("{} ({} of {})", c.label, c.rows.len(), c.total));
        let mut first_row = true;
        for r in &c.rows {
            layout.lit(if first_row { ": " } else { "; " });
            first_row = false;
            if !fields_inline(layout, r, ", ", template) {
                layout.lit("-");
            }
        }
    }
}

/// Max-min fair shares of `budget` among values of `lengths` (Bertsekas and Gallager, *Data
/// Networks*, 2nd ed., 1992, section 6.5.2, "progressive filling"): every value gets
/// `min(length, fair)` where `fair` is what is left divided equally among the values not yet
/// served, shortest first. Shares sum to at most `budget`; a value shorter than its fair share
/// is never cut.
pub fn fair_shares(lengths: &[usize], budget: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut left = budget;
    let mut shares = vec![0; lengths.len()];
    for (k, &i) in order.iter().enumerate() {
        let fair = left / (lengths.len() - k);
        shares[i] = lengths[i].min(fair);
        left -= shares[i];
    }
    shares
}

/// The text of `row` under template version `template` (one of [`TEMPLATE_VERSIONS`]; the
/// caller checks it, an unknown version is laid out as the nearest known one), at most
/// `max_tokens` tokens of `tokenizer` (special tokens included) whenever its labels alone fit:
/// when longer, values are cut to their [`fair_shares`] of what the labels leave. If even the
/// labels do not fit, every value is cut to `…` and the tokenizer's truncation cuts the rest.
///
/// Errors: [`super::Error::Tokenizer`] if the tokenizer fails.
pub fn row_text(
    row: &Row,
    template: i32,
    tokenizer: &TextTokenizer,
    max_tokens: usize,
) -> Result<String> {
    let mut layout = Layout::default();
    lay_out(row, template, "", &mut layout, &mut true);
    let full: Vec<&str> = layout.values.iter().map(String::as_str).collect();
    let text = layout.render(&full);
    let special = tokenizer.count_special();
    if tokenizer.token_ends(&[text.as_str()])?[0].len() + special <= max_tokens {
        return Ok(text);
    }
    let empty = vec![""; layout.values.len()];
    let skeleton = layout.render(&empty);
    let overhead = tokenizer.token_ends(&[skeleton.as_str()])?[0].len() + special;
    let ends = tokenizer.token_ends(&full)?;
    let lengths: Vec<usize> = ends.iter().map(Vec::len).collect();
    // Pieces and the whole tokenize a little differently at the seams, and a cut value's `…` is
    // a token: measure the result and give back any excess, a few rounds at most.
    let mut budget = max_tokens.saturating_sub(overhead);
    let mut text = String::new();
    for _ in 0..4 {
        let shares = fair_shares(&lengths, budget);
        let cut: Vec<String> = layout
            .values
            .iter()
            .zip(ends.iter().zip(&shares))
            .map(|(v, (e, &share))| cut_value(v, e, share))
            .collect();
        let refs: Vec<&str> = cut.iter().map(String::as_str).collect();
        text = layout.render(&refs);
        let used = tokenizer.token_ends(&[text.as_str()])?[0].len() + special;
        if used <= max_tokens || budget == 0 {
            break;
        }
        budget = budget.saturating_sub(used - max_tokens);
    }
    Ok(text)
}

/// Values whose size in bytes (PostgreSQL's, before output: a jsonb's binary form, an array's)
/// passes this many times [`kept_bytes`] are not read whole: the caller reads only their first
/// [`kept_bytes`] bytes, as text ([`oversized_text`]). The margin keeps every value whose text
/// could be shown today out of that path (a jsonb array of small numbers takes up to about 10
/// times its text's bytes); a value over it needs over 16 times more bytes per token than
/// English (about 4), so it is cut in any case.
pub const OVERSIZED_FACTOR: usize = 16;

/// Bytes of an oversized value kept for a text of at most `max_tokens` tokens: `max_tokens x`
/// [`BYTES_PER_TOKEN`] (16 kB for 256 tokens), the most the tokenizer reads of a text for a
/// window of that size.
pub fn kept_bytes(max_tokens: usize) -> usize {
    max_tokens.saturating_mul(BYTES_PER_TOKEN)
}

/// The size in bytes over which a value of a row is oversized for a text of at most
/// `max_tokens` tokens: [`OVERSIZED_FACTOR`] x [`kept_bytes`] (256 kB for 256 tokens).
pub fn oversized_bytes(max_tokens: usize) -> usize {
    kept_bytes(max_tokens).saturating_mul(OVERSIZED_FACTOR)
}

/// What the text shows of an oversized value whose text starts with `start` (at least
/// [`kept_bytes`] of it, as read by the caller): its first [`kept_bytes`] bytes, cut on a
/// character boundary, and `…`. Reading 16 kB instead of the whole value keeps a row's memory
/// bounded (a 50 MB jsonb value took 1.37 GB through `row_to_json` and serde_json); the text then
/// cuts it to its fair share like any long value.
pub fn oversized_text(start: &str, max_tokens: usize) -> String {
    format!("{}…", cut(start, kept_bytes(max_tokens)).trim_end())
}

/// `value` cut to `share` tokens (token `i` ends at byte `ends[i]`), the last one being `…`.
fn cut_value(value: &str, ends: &[usize], share: usize) -> String {
    if share >= ends.len() {
        return value.to_owned();
    }
    if share <= 1 {
        return "…".to_owned();
    }
    let mut end = ends[share - 2].min(value.len());
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", value[..end].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(name: &str, value: Value) -> Field {
        Field {
            name: name.into(),
            value,
            timestamp: false,
            wordless: false,
        }
    }

    fn wordless(name: &str, value: Value) -> Field {
        Field {
            wordless: true,
            ..field(name, value)
        }
    }

    fn render(row: &Row, template: i32) -> String {
        let mut layout = Layout::default();
        lay_out(row, template, "", &mut layout, &mut true);
        let values: Vec<&str> = layout.values.iter().map(String::as_str).collect();
        layout.render(&values)
    }

    #[test]
    fn fair_shares_keep_short_values_whole() {
        assert_eq!(fair_shares(&[3, 100, 5], 30), vec![3, 22, 5]);
        assert_eq!(fair_shares(&[50, 50], 30), vec![15, 15]);
        assert_eq!(fair_shares(&[1, 2], 100), vec![1, 2]);
        assert_eq!(fair_shares(&[10, 10, 10], 0), vec![0, 0, 0]);
        // Nothing is lost to rounding: 31 = 10 + 10 + 11.
        assert_eq!(fair_shares(&[40, 40, 40], 31).iter().sum::<usize>(), 31);
    }

    #[test]
    fn values_are_formatted_by_type() {
        assert_eq!(format_value(&json!(null), false), None);
        assert_eq!(format_value(&json!(""), false), None);
        assert_eq!(format_value(&json!([]), false), None);
        assert_eq!(format_value(&json!(true), false).as_deref(), Some("true"));
        assert_eq!(format_value(&json!(0.99), false).as_deref(), Some("0.99"));
        assert_eq!(
            format_value(&json!([1, null, [2, 3]]), false).as_deref(),
            Some("1, [2, 3]")
        );
        assert_eq!(
            format_value(&json!("2009-01-01T00:00:00"), true).as_deref(),
            Some("2009-01-01")
        );
        assert_eq!(
            format_value(&json!("2009-01-01T10:30:00"), true).as_deref(),
            Some("2009-01-01 10:30:00")
        );
        assert_eq!(
            format_value(&json!("2009-01-01T00:00:00"), false).as_deref(),
            Some("2009-01-01T00:00:00")
        );
        // timestamptz in any session TimeZone: the same text, in UTC.
        assert_eq!(
            format_value(&json!("2024-03-01T02:00:00-08:00"), true).as_deref(),
            Some("2024-03-01 10:00:00 UTC")
        );
        assert_eq!(
            format_value(&json!("2024-03-01T10:00:00+00:00"), true).as_deref(),
            Some("2024-03-01 10:00:00 UTC")
        );
        assert_eq!(
            format_value(&json!("2024-01-01T01:30:00.25+05:30"), true).as_deref(),
            Some("2023-12-31 20:00:00.25 UTC")
        );
        assert_eq!(
            format_value(&json!("2000-02-29T23:00:00-01"), true).as_deref(),
            Some("2000-03-01 00:00:00 UTC")
        );
        // Local mean time offsets have seconds; PostgreSQL's timestamps reach the year 294276.
        assert_eq!(
            format_value(&json!("1900-01-01T00:00:00+00:19:32"), true).as_deref(),
            Some("1899-12-31 23:40:28 UTC")
        );
        assert_eq!(
            format_value(&json!("294276-12-31T15:59:59-08:00"), true).as_deref(),
            Some("294276-12-31 23:59:59 UTC")
        );
        assert_eq!(
            format_value(&json!("0044-03-15T00:00:00+00:00 BC"), true).as_deref(),
            Some("0044-03-15 00:00:00+00:00 BC")
        );
        assert_eq!(
            format_value(&json!("10:30:00-08"), true).as_deref(),
            Some("10:30:00-08")
        );
        assert_eq!(
            format_value(&json!({"a": 1}), false).as_deref(),
            Some(r#"{"a":1}"#)
        );
    }

    #[test]
    fn row_json_keeps_values_deeper_than_the_recursion_limit() {
        let deep = format!("{}1,2{}", "[".repeat(200), "]".repeat(200));
        let text = format!(
            r#"{{"id":1,"doc" : {} , "s":"a,}}\"]","t":{{"k": [1, {{"x": null}}]}},"n":null}}"#,
            deep.replace(',', ", ")
        );
        let map = parse_row_json(&text).expect("an object");
        assert_eq!(map.keys().collect::<Vec<_>>(), ["id", "doc", "s", "t", "n"]);
        assert_eq!(map["id"], json!(1));
        assert_eq!(map["doc"], json!(deep));
        assert_eq!(map["s"], json!("a,}\"]"));
        assert_eq!(map["t"], json!({"k": [1, {"x": null}]}));
        assert_eq!(map["n"], json!(null));
        let spaced = format!(
            "{{\"doc\": {}}}",
            "{\"a\": ".repeat(150) + "\"x y\"" + &"}".repeat(150)
        );
        assert_eq!(
            parse_row_json(&spaced).unwrap()["doc"],
            json!("{\"a\":".repeat(150) + "\"x y\"" + &"}".repeat(150))
        );
        assert_eq!(parse_row_json("{}"), Some(Map::new()));
        for bad in [
            "",
            "[1]",
            "{\"a\":}",
            "{\"a\":1",
            "{\"a\":1} x",
            "{\"a\" 1}",
            "{\"a\":[1}}",
            "{\"a\":\"x}",
        ] {
            assert_eq!(parse_row_json(bad), None, "{bad}");
        }
    }

    #[test]
    fn layout_of_a_row_with_context() {
        let artist = Row {
            table: Some("artist".into()),
            fields: vec![field("name", json!("Accept"))],
            ..Default::default()
        };
        let album = Row {
            table: Some("album".into()),
            fields: vec![field("title", json!("Balls to the Wall"))],
            parents: vec![("artist".into(), artist)],
            ..Default::default()
        };
        let row = Row {
            table: Some("track".into()),
            fields: vec![
                field("name", json!("Balls to the Wall")),
                field("composer", json!(null)),
                field("milliseconds", json!(342562)),
            ],
            parents: vec![("album".into(), album)],
            children: vec![Children {
                label: "invoice_line".into(),
                total: 7,
                rows: vec![
                    vec![field("quantity", json!(1))],
                    vec![field("quantity", json!(null))],
                ],
            }],
        };
        assert_eq!(
            render(&row, 1),
            "table: track\nname: Balls to the Wall\nmilliseconds: 342562\nalbum.title: Balls to the Wall\n\
             album.artist.name: Accept\ninvoice_line (2 of 7): quantity: 1; -"
        );
    }

    /// Version 2 leaves out wordless fields at every level (version 1 keeps them, as it always
    /// did) and lays out link rows (far columns, then the link row's) as child rows.
    #[test]
    fn layout_of_version_2() {
        let language = Row {
            table: Some("language".into()),
            fields: vec![
                field("name", json!("English")),
                wordless("last_update", json!("2006-02-15T05:02:19")),
            ],
            ..Default::default()
        };
        let row = Row {
            table: Some("film".into()),
            fields: vec![
                field("title", json!("Alien")),
                wordless("length", json!(117)),
                wordless("released", json!("1979-05-25")),
                wordless("in_stock", json!(true)),
                field("tags", json!(["space", "horror"])),
            ],
            parents: vec![("language".into(), language)],
            children: vec![
                Children {
                    label: "person".into(),
                    total: 3,
                    rows: vec![
                        vec![
                            field("name", json!("Ridley Scott")),
                            wordless("born", json!(1937)),
                            field("role", json!("director")),
                        ],
                        vec![
                            field("name", json!("Sigourney Weaver")),
                            field("role", json!(null)),
                        ],
                    ],
                },
                Children {
                    label: "rental".into(),
                    total: 2,
                    rows: vec![vec![wordless("amount", json!(2.99))]],
                },
            ],
        };
        assert_eq!(
            render(&row, 2),
            "table: film\ntitle: Alien\ntags: space, horror\nlanguage.name: English\n\
             person (2 of 3): name: Ridley Scott, role: director; name: Sigourney Weaver\n\
             rental (1 of 2): -"
        );
        assert_eq!(
            render(&row, 1),
            "table: film\ntitle: Alien\nlength: 117\nreleased: 1979-05-25\nin_stock: true\n\
             tags: space, horror\nlanguage.name: English\nlanguage.last_update: 2006-02-15T05:02:19\n\
             person (2 of 3): name: Ridley Scott, born: 1937, role: director; name: Sigourney Weaver\n\
             rental (1 of 2): amount: 2.99"
        );
        // A field named in `include` is not wordless: the caller says so.
        let named = Row {
            table: Some("film".into()),
            fields: vec![field("title", json!("Alien")), field("length", json!(117))],
            ..Default::default()
        };
        assert_eq!(render(&named, 2), "table: film\ntitle: Alien\nlength: 117");
        assert!(TEMPLATE_VERSIONS.contains(&1) && TEMPLATE_VERSIONS.contains(&TEMPLATE_VERSION));
        assert!(!TEMPLATE_VERSIONS.contains(&3));
        assert_eq!(version_list(), "1, 2");
    }

    /// With the default model's real tokenizer: a long column is cut to its fair share, the
    /// short ones stay whole, the labels stay, and the text fits the budget.
    #[test]
    fn long_values_are_cut_fairly() {
        let file = crate::model::repo_root().join("ort/models/all-MiniLM-L6-v2/tokenizer.json");
        let tok = TextTokenizer::from_file(&file, 256)
            .expect("the default model is prepared by scripts/setup.sh");
        let long = "word ".repeat(1000);
        let row = Row {
            table: Some("doc".into()),
            fields: vec![
                field("title", json!("A short title")),
                field("body", json!(long)),
                field("notes", json!(long)),
                field("year", json!(2024)),
            ],
            ..Default::default()
        };
        let text = row_text(&row, 1, &tok, 64).unwrap();
        let tokens = tok.encode(&[text.as_str()]).unwrap()[0].ids.len();
        assert!(tokens <= 64, "{tokens} tokens: {text}");
        assert!(
            text.starts_with("table: doc\ntitle: A short title\nbody: word"),
            "{text}"
        );
        assert!(text.ends_with("\nyear: 2024"), "{text}");
        let body = text.lines().find(|l| l.starts_with("body: ")).unwrap();
        let notes = text.lines().find(|l| l.starts_with("notes: ")).unwrap();
        assert!(body.ends_with('…') && notes.ends_with('…'));
        // Both long values get the same share (within a token).
        let (b, n) = (
            body.matches("word").count() as i64,
            notes.matches("word").count() as i64,
        );
        assert!((b - n).abs() <= 1 && b > 5, "{b} vs {n}");
        // A text within the budget is left alone.
        let short = Row {
            table: Some("doc".into()),
            fields: vec![field("title", json!("A short title"))],
            ..Default::default()
        };
        assert_eq!(
            row_text(&short, 2, &tok, 64).unwrap(),
            "table: doc\ntitle: A short title"
        );
    }

    #[test]
    fn oversized_values_keep_their_first_bytes() {
        assert_eq!(kept_bytes(256), 16 * 1024);
        assert_eq!(oversized_bytes(256), 256 * 1024);
        assert_eq!(oversized_bytes(usize::MAX), usize::MAX, "saturates");
        // Cut on a character boundary (é is 2 bytes), trailing space dropped, then `…`.
        let start = "é".repeat(kept_bytes(4));
        let t = oversized_text(&start, 4);
        assert!(t.ends_with('…'));
        assert_eq!(t.len(), kept_bytes(4) + '…'.len_utf8());
        let start = format!("{} {}", "a".repeat(kept_bytes(1) - 1), "b".repeat(100));
        assert_eq!(oversized_text(&start, 1), format!("{}…", "a".repeat(63)));
    }

    /// A value read only as far as [`oversized_text`] gives the same row text as the whole value:
    /// the fair share of a value that long is far below the bytes kept.
    #[test]
    fn oversized_value_gives_the_same_text_as_the_whole_value() {
        let file = crate::model::repo_root().join("ort/models/all-MiniLM-L6-v2/tokenizer.json");
        let tok = TextTokenizer::from_file(&file, 256)
            .expect("the default model is prepared by scripts/setup.sh");
        let huge = "lorem ipsum dolor sit amet ".repeat(20_000);
        assert!(huge.len() > oversized_bytes(256));
        let row = |body: &str| Row {
            table: Some("doc".into()),
            fields: vec![
                field("title", json!("A short title")),
                field("body", json!(body)),
            ],
            ..Default::default()
        };
        for max_tokens in [16, 64, 256] {
            let whole = row_text(&row(&huge), 2, &tok, max_tokens).unwrap();
            let cut = row_text(
                &row(&oversized_text(&huge, max_tokens)),
                2,
                &tok,
                max_tokens,
            )
            .unwrap();
            assert_eq!(whole, cut, "max_tokens {max_tokens}");
            assert!(whole.len() < 2000, "{}", whole.len());
        }
    }
}
