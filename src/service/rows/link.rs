//! Link tables in a row's context: a child table that links the row to one other table is read
//! joined with that table (template version 2; see the module above).

use super::*;

/// When `child` (a child table of `table` by `link`) is a link table, its one other foreign key:
/// the link to the far table whose rows it links `table`'s rows to. `None` when it has no other
/// foreign key or several, or is `table` itself (a self-reference: `employee.reports_to` lists
/// the employee's reports, not their departments); then it is an ordinary child table. Also
/// `None` when the options leave that foreign key out (`exclude => '{child.column}'`).
pub(super) fn far_link<'a>(
    table: &Table,
    child: &'a Table,
    link: &Link,
    opts: &RowOptions,
) -> Option<&'a Link> {
    if child.oid == table.oid {
        return None;
    }
    let mut others = child
        .parents
        .iter()
        .filter(|l| !(l.other == table.oid && l.cols == link.other_cols));
    let far = others.next()?;
    if others.next().is_some() || far.cols.iter().any(|c| excluded(child, c, opts, false)) {
        return None;
    }
    Some(far)
}

/// Template 2's line for link table `child` (a child of the row by `link`, whose key values are
/// `key`): the far rows it links the row to (by `far_link`), each with the link row's own
/// columns after the far row's, at most `opts.children` of them, and how many there are. One
/// query joining the link and far tables, each read as the caller (a far row the caller cannot
/// see is neither shown nor counted; `None` when the caller cannot read the far table's or the
/// link's key columns). Rows already shown (the row itself) are not far rows; the first of
/// `time_columns` each table has is compared with `as_of`, the link table's orders the rows.
pub(super) fn through_link(
    child: &Table,
    link: &Link,
    far_link: &Link,
    key: &[String],
    opts: &RowOptions,
    window: usize,
    seen: &Seen,
) -> Result<Option<Children>> {
    let far = relation::table(far_link.other)?;
    if !child.readable(&far_link.cols) || !far.readable(&far_link.other_cols) {
        return Ok(None);
    }
    let not: Vec<(&[String], &[String])> = seen
        .iter()
        .filter(|(oid, cols, _)| *oid == far.oid && far.readable(cols))
        .map(|(_, cols, values)| (cols.as_slice(), values.as_slice()))
        .collect();
    let mut args = Vec::new();
    let Some(link_select) = select(child, &link.other_cols, key, &[], opts, &mut args) else {
        return Ok(None);
    };
    let Some(far_select) = select(&far, &[], &[], &not, opts, &mut args) else {
        return Ok(None);
    };
    let [l, f] = row_aliases([child, &far]);
    let on: Vec<String> = far_link
        .cols
        .iter()
        .zip(&far_link.other_cols)
        .map(|(a, b)| {
            // The referenced column's equality (the foreign key's own compares across types).
            let eq = &far.column(b).expect("readable checked it").eq.0;
            format!(
                "{l}.{} {eq} {f}.{}",
                quote_identifier(a),
                quote_identifier(b)
            )
        })
        .collect();
    let mut order: Vec<String> = Vec::new();
    if let Some(t) = child.time_column(&opts.time_columns) {
        order.push(format!("{l}.{} DESC NULLS LAST", quote_identifier(&t.name)));
    }
    for (t, a) in [(child, &l), (&*far, &f)] {
        if t.readable(&t.primary_key) {
            order.extend(
                t.primary_key
                    .iter()
                    .map(|k| format!("{a}.{} DESC", quote_identifier(k))),
            );
        }
    }
    let order = if order.is_empty() {
        String::new()
    } else {
        format!(" ORDER BY {}", order.join(", "))
    };
    let sql = format!(
        "SELECT {l}, {f}, pg_catalog.count(*) OVER ()::pg_catalog.int8 FROM ({link_select}) {l} \
         JOIN ({far_select}) {f} ON {}{order} LIMIT {}",
        on.join(" AND "),
        opts.children
    );
    let found = json_rows::<2>(&sql, &args, window)?;
    let total = found.first().map_or(0, |(_, n)| *n);
    if total == 0 {
        return Ok(None);
    }
    // The link row's foreign keys both ways are what the line is made of: leave them out. Its
    // other columns are its own, primary key or not (`role` in a key (film_id, person_id, role)).
    let mut link_opts = opts.clone();
    link_opts.keys = true;
    link_opts.exclude.extend(
        link.other_cols
            .iter()
            .chain(&far_link.cols)
            .map(|c| format!("{}.{c}", child.name)),
    );
    let mut rows = Vec::new();
    for ([link_row, far_row], _) in &found {
        // Far and link rows are context: they never add to `seen`.
        let mut none = Seen::new();
        let mut fields = gather(&far, far_row, opts, 0, false, window, &mut none)?.fields;
        fields.extend(gather(child, link_row, &link_opts, 0, false, window, &mut none)?.fields);
        rows.push(fields);
    }
    Ok(Some(Children {
        label: far.name.clone(),
        total,
        rows,
    }))
}
