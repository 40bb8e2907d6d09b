//! Keyset pagination: opaque cursors and pages of a list read from one
//! (Relay connections in GraphQL, `?after=` in REST). See
//! `docs/design/pagination.md`.
//!
//! A cursor is the position of one row in one order: the row's values of
//! the order's keys, the id last. It is base64url (no padding) of a small
//! versioned JSON document, `{"v":1,"o":["title","-year","id"],"k":[...]}`:
//! the keys (descending ones with `-`) and the values. The next page is the
//! rows strictly after that position ([`crate::ListQuery::after`]), so rows
//! inserted or deleted elsewhere in the list move no row past it: none is
//! skipped or read twice.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use gatehouse_schema::{AccessContext, Entity};

use crate::query::order_keys;
use crate::{EntityStore, ListQuery, OrderBy, PreparedList, Row, RowSet, StoreError};

/// The cursor format's version: a cursor of another is refused.
const VERSION: u32 = 1;

/// Longest cursor text accepted (a cursor holds a row's order values, a
/// title say; anything longer is not one of ours).
const MAX_CURSOR_LEN: usize = 16 * 1024;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    v: u32,
    /// The order's keys, the tie-breaker included; `-` before a
    /// descending one.
    o: Vec<String>,
    /// The row's value of each key.
    k: Vec<Json>,
}

/// Cursors of one list order: how a row's position is written and read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The keys of the order with the id tie-breaker (`-` for descending).
    keys: Vec<String>,
}

impl Cursor {
    /// The cursors of `entity` listed in `order` (the id tie-breaker
    /// added); `Invalid` for a field that cannot be ordered on.
    pub fn of(entity: &Entity, order: &[OrderBy]) -> Result<Cursor, StoreError> {
        Ok(Cursor {
            keys: order_keys(entity, order)?
                .into_iter()
                .map(|(f, desc)| {
                    if desc {
                        format!("-{}", f.name)
                    } else {
                        f.name.clone()
                    }
                })
                .collect(),
        })
    }

    /// The fields a row needs for its cursor.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.trim_start_matches('-'))
    }

    /// The cursor of `row` (which holds every [`Cursor::fields`]; a missing
    /// one reads as null).
    pub fn encode(&self, row: &Row) -> String {
        self.encode_values(
            self.fields()
                .map(|f| row.get(f).cloned().unwrap_or(Json::Null)),
        )
    }

    /// The values each row of `rows` holds for [`Cursor::fields`] (a
    /// missing one reads as null): what its cursor is written from.
    fn values_of(&self, rows: &RowSet) -> Vec<Vec<Json>> {
        let at: Vec<Option<usize>> = self.fields().map(|f| rows.position(f)).collect();
        rows.rows
            .iter()
            .map(|r| {
                at.iter()
                    .map(|p| p.and_then(|p| r.get(p)).cloned().unwrap_or(Json::Null))
                    .collect()
            })
            .collect()
    }

    fn encode_values(&self, values: impl Iterator<Item = Json>) -> String {
        let doc = Doc {
            v: VERSION,
            o: self.keys.clone(),
            k: values.collect(),
        };
        // A map of strings and JSON values always serializes.
        let json = serde_json::to_vec(&doc).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(json)
    }

    /// The position `text` holds, refused (`Invalid` naming `arg`) when it
    /// is not a cursor of this order: garbage, another version, or a cursor
    /// of another `orderBy` (its values would be compared with other
    /// fields). The values' types are checked where they are bound
    /// ([`crate::ListQuery::after`]).
    pub fn decode(&self, arg: &str, text: &str) -> Result<Vec<Json>, StoreError> {
        let not_a_cursor = || StoreError::invalid(arg, "is not a cursor of this list");
        if text.len() > MAX_CURSOR_LEN {
            return Err(not_a_cursor());
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(text.as_bytes())
            .map_err(|_| not_a_cursor())?;
        let doc: Doc = serde_json::from_slice(&bytes).map_err(|_| not_a_cursor())?;
        if doc.v != VERSION || doc.k.len() != doc.o.len() {
            return Err(not_a_cursor());
        }
        if doc.o != self.keys {
            return Err(StoreError::invalid(
                arg,
                format!(
                    "the cursor was made for the order `{}`, not for this request's `{}`",
                    doc.o.join(","),
                    self.keys.join(",")
                ),
            ));
        }
        Ok(doc.k)
    }
}

/// Which page of a list to read, in Relay's terms: the first `first`
/// rows after `after`, or the last `last` rows before `before`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// Rows from the start (or after `after`). With neither `first` nor
    /// `last`, no limit: the API layers pass their default page size.
    pub first: Option<u64>,
    /// Only rows after this cursor.
    pub after: Option<String>,
    /// Rows from the end (or before `before`).
    pub last: Option<u64>,
    /// Only rows before this cursor.
    pub before: Option<String>,
}

impl CursorPage {
    /// The cursor of row `i`.
    pub fn cursor(&self, i: usize) -> Option<String> {
        let values = self.keys.get(i)?;
        Some(self.cursor.encode_values(values.iter().cloned()))
    }

    /// The first row's cursor.
    pub fn first_cursor(&self) -> Option<String> {
        self.cursor(0)
    }

    /// The last row's cursor.
    pub fn last_cursor(&self) -> Option<String> {
        self.cursor(self.keys.len().checked_sub(1)?)
    }

    /// Every row's cursor, aligned with `rows`.
    pub fn cursors(&self) -> Vec<String> {
        (0..self.keys.len())
            .filter_map(|i| self.cursor(i))
            .collect()
    }
}

/// A page of a list read by cursor ([`EntityStore::page`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CursorPage {
    /// The rows, in the list's order.
    pub rows: RowSet,
    /// The order's key values of each row, aligned with `rows`: a cursor
    /// is written only when asked for ([`CursorPage::cursor`]), as most
    /// pages are read without their rows' cursors and writing one costs
    /// more than reading its row.
    keys: Vec<Vec<Json>>,
    cursor: Cursor,
    /// Whether rows follow the page: known when reading forwards (one row
    /// more is read); when reading backwards, whether `before` was given.
    pub has_next_page: bool,
    /// Whether rows precede the page: known when reading backwards; when
    /// reading forwards, whether `after` was given.
    pub has_previous_page: bool,
}

impl EntityStore {
    /// A page of the rows `query` lists (its filter, order, selected fields
    /// and joins; its limit, offset and bounds are the page's), by cursor,
    /// under the caller's read policy like every list. The order's keys
    /// are read whatever `query.select` holds, for the cursors.
    ///
    /// `Invalid` (naming the argument) for a cursor that is not one of this
    /// order, for `first` with `last`, and for an offset.
    pub async fn page(
        &self,
        ctx: &AccessContext,
        query: &ListQuery,
        page: &PageRequest,
    ) -> Result<CursorPage, StoreError> {
        self.prepare_page(ctx, query, page)?.run(ctx).await
    }

    /// [`EntityStore::page`]'s statement, built once to be run for every
    /// request of the same page (a connection's first page, say): it holds
    /// the caller's policy like [`EntityStore::prepare`]'s, and runs only
    /// for callers with the same policy inputs.
    pub fn prepare_page(
        &self,
        ctx: &AccessContext,
        query: &ListQuery,
        page: &PageRequest,
    ) -> Result<PreparedPage, StoreError> {
        if query.offset > 0 {
            return Err(StoreError::invalid(
                "offset",
                "a page read by cursor takes no offset",
            ));
        }
        if page.first.is_some() && page.last.is_some() {
            return Err(StoreError::invalid(
                "last",
                "cannot be combined with `first`: read forwards with `first`/`after` or backwards with `last`/`before`",
            ));
        }
        let cursor = Cursor::of(self.def(), &query.order)?;
        let mut q = query.clone();
        q.after = page
            .after
            .as_deref()
            .map(|c| cursor.decode("after", c))
            .transpose()?;
        q.before = page
            .before
            .as_deref()
            .map(|c| cursor.decode("before", c))
            .transpose()?;
        // Keys read only for the cursors, taken out of the rows afterwards.
        let mut extra = Vec::new();
        if let Some(select) = &mut q.select {
            for f in cursor.fields() {
                if f != "id" && !select.iter().any(|s| s == f) {
                    select.push(f.to_string());
                    extra.push(f.to_string());
                }
            }
        }
        let backwards = page.last.is_some();
        q.reverse = backwards;
        let size = page.last.or(page.first);
        // One row more than the page tells whether another page follows.
        q.limit = size.map(|n| n.saturating_add(1));
        Ok(PreparedPage {
            list: self.prepare(ctx, &q)?,
            cursor,
            extra,
            size,
            backwards,
            after: page.after.is_some(),
            before: page.before.is_some(),
        })
    }
}

/// A page's statement built by [`EntityStore::prepare_page`], run by
/// [`PreparedPage::run`].
#[derive(Debug)]
pub struct PreparedPage {
    list: PreparedList,
    cursor: Cursor,
    /// Order keys read only for the cursors.
    extra: Vec<String>,
    size: Option<u64>,
    backwards: bool,
    /// Whether the page starts after a cursor / ends before one.
    after: bool,
    before: bool,
}

impl PreparedPage {
    /// Reads the page for `ctx` (see [`PreparedList::run`] for which
    /// callers it serves).
    pub async fn run(&self, ctx: &AccessContext) -> Result<CursorPage, StoreError> {
        let (cursor, size, backwards) = (&self.cursor, self.size, self.backwards);
        let mut rows = self.list.run(ctx, &[]).await?.rows;
        let more = size.is_some_and(|n| rows.rows.len() as u64 > n);
        if let Some(n) = size {
            rows.rows.truncate(usize::try_from(n).unwrap_or(usize::MAX));
        }
        if backwards {
            rows.rows.reverse();
        }
        let keys = cursor.values_of(&rows);
        let mut gone: Vec<usize> = self.extra.iter().filter_map(|f| rows.position(f)).collect();
        gone.sort_unstable_by(|a, b| b.cmp(a));
        for p in gone {
            rows.columns.remove(p);
            for r in &mut rows.rows {
                if p < r.len() {
                    r.remove(p);
                }
            }
        }
        Ok(CursorPage {
            rows,
            keys,
            cursor: cursor.clone(),
            has_next_page: if backwards { self.before } else { more },
            has_previous_page: if backwards { more } else { self.after },
        })
    }
}
