//! Every way into the rows takes the caller: the store's public methods
//! that read or write rows all have an `AccessContext` parameter, so no
//! route of REST, GraphQL (either executor) or subscriptions can reach
//! them without one. Read from the source, so a new entry point without it
//! fails here.

/// Methods of `Store` and `EntityStore` that touch no rows of the Model's
/// entities.
const NOT_ROW_ACCESS: &[&str] = &[
    "connect",
    "model",
    "backend",
    "statements",
    "subscribe",
    "feed_receivers",
    "ping",
    "pool_stats",
    // The tables' sizes, from the database's bookkeeping: no rows.
    "row_estimate",
    "refresh_row_estimates",
    "db",
    "close",
    "plan",
    "schema_version",
    "migrate",
    "entity",
    "entities",
    "entity_at",
    "def",
    "within",
    // Statements of other storage crates run with writes: no rows read.
    "add_commit_hook",
    // A configured limit (`limits.max_bulk_rows`), no rows.
    "max_bulk_rows",
    // `Cursor`: the text of a row's position, no rows.
    "of",
    "fields",
    "encode",
    "decode",
    // `CursorPage`: the cursors of rows already read under a context.
    "cursor",
    "first_cursor",
    "last_cursor",
    "cursors",
];

#[test]
fn every_row_entry_point_takes_an_access_context() {
    let src = [
        include_str!("../../src/store.rs"),
        include_str!("../../src/entity.rs"),
        include_str!("../../src/cursor.rs"),
    ]
    .concat();
    let mut checked = 0;
    let mut missing = Vec::new();
    for (i, _) in src.match_indices("    pub ") {
        let rest = &src[i + 8..];
        let Some(rest) = rest
            .strip_prefix("async fn ")
            .or_else(|| rest.strip_prefix("fn "))
        else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if NOT_ROW_ACCESS.contains(&name.as_str()) {
            continue;
        }
        let signature = &rest[..rest.find('{').unwrap_or(rest.len())];
        checked += 1;
        if !signature.contains("AccessContext") {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "store methods without an access context: {missing:?}"
    );
    // get, get_many, list, prepare, prepare_template, statement_caller,
    // count, children, insert, update, replace, delete, visible, and
    // PreparedList::run.
    assert!(
        checked >= 14,
        "only {checked} entry points found: the scan is broken"
    );
}
