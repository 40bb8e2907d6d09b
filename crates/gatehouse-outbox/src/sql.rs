//! The outbox table and every statement on it, for both dialects.

use std::sync::OnceLock;

use gatehouse_db::{Built, Conn, Dialect, SqlKind, q};
use sea_query::{Alias, Expr, Query, SelectStatement, Value};

use crate::error::OutboxError;

/// The outbox table (internal, `_gatehouse`-prefixed: `gatehouse copy`
/// carries it like the other internal tables).
pub const TABLE: &str = "_gatehouse_outbox";
/// PostgreSQL: the sequence that orders messages (`seq`).
const SEQUENCE: &str = "_gatehouse_outbox_seq";

/// `pending`, `sent`, `failed`: the `state` column's values.
pub(crate) const PENDING: &str = "pending";
pub(crate) const SENT: &str = "sent";
pub(crate) const FAILED: &str = "failed";

/// The columns a message is read with, in order, and their kinds.
pub(crate) const MESSAGE_COLUMNS: &str = "id, seq, channel, order_key, payload, state, \
     created_at, attempts, next_attempt_at, lease_owner, lease_until, last_error, finished_at";
pub(crate) const MESSAGE_KINDS: [SqlKind; 13] = [
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Text,
    SqlKind::Count,
];

/// Creates the table, its indexes and (PostgreSQL) its sequence when
/// missing. The caller holds the schema lock (PostgreSQL) or the write
/// lock (SQLite).
pub(crate) async fn create(conn: &mut Conn<'_>, d: Dialect) -> Result<(), gatehouse_db::Error> {
    // Byte-wise collation on PostgreSQL, as the other internal tables.
    let text = match d {
        Dialect::Sqlite => "TEXT",
        Dialect::Postgres => "TEXT COLLATE \"C\"",
    };
    let t = q(TABLE);
    let mut statements = vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (id {text} PRIMARY KEY NOT NULL, \
             seq BIGINT NOT NULL, channel {text} NOT NULL, order_key {text}, \
             payload TEXT NOT NULL, state TEXT NOT NULL, created_at BIGINT NOT NULL, \
             retry_since BIGINT NOT NULL, attempts BIGINT NOT NULL DEFAULT 0, \
             next_attempt_at BIGINT NOT NULL, lease_owner TEXT, lease_until BIGINT, \
             last_error TEXT, finished_at BIGINT)"
        ),
        // The pending set stays small while sent rows pile up until purged:
        // partial indexes (both backends have them) keep claims cheap. Each
        // index costs every enqueue (in the writer's transaction) and every
        // outcome, so there is none that no statement uses: not on the due
        // time (a claim walks `_queue` and checks it row by row) nor on
        // pending messages' finish time.
        format!("DROP INDEX IF EXISTS {}", q(&format!("{TABLE}_due"))),
        format!("DROP INDEX IF EXISTS {}", q(&format!("{TABLE}_finished"))),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {t} (channel, order_key, seq) WHERE state = 'pending'",
            q(&format!("{TABLE}_order"))
        ),
        // What a claim walks: the channel's pending messages in order,
        // stopping at its limit however large the backlog.
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {t} (channel, seq) WHERE state = 'pending'",
            q(&format!("{TABLE}_queue"))
        ),
        format!(
            "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {t} (seq)",
            q(&format!("{TABLE}_by_seq"))
        ),
        // What the purge deletes: sent messages past their keeping time.
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {t} (channel, finished_at) WHERE state = 'sent'",
            q(&format!("{TABLE}_sent"))
        ),
    ];
    if d == Dialect::Postgres {
        let s = q(SEQUENCE);
        statements.push(format!("CREATE SEQUENCE IF NOT EXISTS {s}"));
        // A copied table (`gatehouse copy`) brings its `seq` values but not
        // the sequence's position: move it past them, never back.
        statements.push(format!(
            "SELECT setval('{s}', GREATEST((SELECT MAX(seq) FROM {t}), \
             (SELECT last_value FROM {s})))"
        ));
    }
    for sql in &statements {
        conn.ddl(sql).await?;
    }
    Ok(())
}

fn text(s: &str) -> Value {
    Value::String(Some(s.to_string()))
}

fn opt_text(s: Option<&str>) -> Value {
    Value::String(s.map(str::to_string))
}

fn int(n: i64) -> Value {
    Value::BigInt(Some(n))
}

/// One row of a new message. `seq` comes from the sequence (PostgreSQL)
/// or follows the largest one (SQLite, whose single writer makes that safe).
pub(crate) struct Insert<'a> {
    pub id: &'a str,
    pub channel: &'a str,
    pub key: Option<&'a str>,
    pub payload: &'a str,
    pub now: i64,
}

/// The columns of a new message, in the order [`insert`] gives values.
const INSERT_COLUMNS: [&str; 10] = [
    "id",
    "seq",
    "channel",
    "order_key",
    "payload",
    "state",
    "created_at",
    "retry_since",
    "attempts",
    "next_attempt_at",
];

/// The next `seq`, taken when the statement runs.
fn next_seq(d: Dialect) -> String {
    match d {
        Dialect::Postgres => format!("nextval('{}')", q(SEQUENCE)),
        Dialect::Sqlite => format!("(SELECT COALESCE(MAX(seq), 0) + 1 FROM {})", q(TABLE)),
    }
}

/// The one statement that enqueues: `INSERT ... SELECT <values>`, with
/// `WHERE EXISTS (<condition>)` when given (a message only for a row that
/// matches a filter, decided by the database in the same statement).
///
/// `seq` is taken when the statement runs: inside the writer's
/// transaction, after the row locks its writes took, so two transactions
/// writing one row number their messages in commit order on PostgreSQL;
/// on SQLite one writer at a time makes `MAX(seq) + 1` safe.
///
/// Without a condition the text is the same for every message, built once
/// per dialect: an enqueue runs in every watched write, and building the
/// statement cost more than running it.
pub(crate) fn insert(
    d: Dialect,
    m: &Insert<'_>,
    condition: Option<SelectStatement>,
) -> Result<Built, OutboxError> {
    let values = [
        text(m.id),
        text(m.channel),
        opt_text(m.key),
        text(m.payload),
        text(PENDING),
        int(m.now),
        int(m.now),
        int(0),
        int(m.now),
    ];
    let Some(condition) = condition else {
        static TEXT: [OnceLock<String>; 2] = [OnceLock::new(), OnceLock::new()];
        let sql = TEXT[usize::from(d == Dialect::Postgres)].get_or_init(|| {
            let columns = INSERT_COLUMNS.join(", ");
            d.placeholders(&format!(
                "INSERT INTO {} ({columns}) SELECT ?, {}, ?, ?, ?, ?, ?, ?, ?, ?",
                q(TABLE),
                next_seq(d)
            ))
        });
        return Ok(Built::raw(sql.clone(), values.into()));
    };
    let mut values = values.into_iter();
    let mut select = Query::select();
    let mut columns = Vec::with_capacity(INSERT_COLUMNS.len());
    for column in INSERT_COLUMNS {
        columns.push(Alias::new(column));
        match column {
            "seq" => select.expr(Expr::cust(next_seq(d))),
            _ => select.expr(Expr::val(values.next().unwrap_or(Value::Bool(None)))),
        };
    }
    select.and_where(Expr::exists(condition));
    let mut insert = Query::insert();
    insert
        .into_table(Alias::new(TABLE))
        .columns(columns)
        .select_from(select)
        .map_err(|e| OutboxError::Corrupt(format!("the outbox's INSERT: {e}")))?;
    Ok(Built::of(d, &insert))
}

/// The columns a claim returns, in order, and their kinds.
pub(crate) const CLAIM_KINDS: [SqlKind; 7] = [
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
];

/// Leases up to `limit` due messages of `channel` to `owner` until
/// `lease_until`: pending, due, not leased (or the lease expired), and not
/// behind a pending message with the same key. Returns `id, seq,
/// order_key, payload, attempts (counting this one), created_at,
/// retry_since`.
pub(crate) fn claim(
    d: Dialect,
    owner: &str,
    channel: &str,
    now: i64,
    lease_until: i64,
    limit: i64,
) -> Built {
    let t = q(TABLE);
    // PostgreSQL: rows another claimer holds are skipped, not waited for;
    // one whose claim committed meanwhile is re-checked against the lease
    // condition (READ COMMITTED) and left out. SQLite: one writer at a time.
    let lock = match d {
        Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
        Dialect::Sqlite => "",
    };
    // `+m.next_attempt_at`: no index on the due time, so the planner walks
    // the `_queue` index in `seq` order and stops at the limit; by the due
    // time it would read and sort the whole backlog on every claim
    // (quadratic when deliveries fall behind the writes). `state || ''` in
    // the outer condition (an expression no index serves, on both
    // backends): the rows are found by id, not by scanning every pending
    // row for the chosen ids.
    let sql = format!(
        "UPDATE {t} SET lease_owner = ?, lease_until = ?, attempts = attempts + 1 \
         WHERE id IN (SELECT m.id FROM {t} m \
           WHERE m.state = 'pending' AND m.channel = ? AND +m.next_attempt_at <= ? \
             AND (m.lease_until IS NULL OR m.lease_until <= ?) \
             AND (m.order_key IS NULL OR NOT EXISTS (SELECT 1 FROM {t} e \
               WHERE e.state = 'pending' AND e.channel = m.channel \
                 AND e.order_key = m.order_key AND e.seq < m.seq)) \
           ORDER BY m.seq LIMIT ?{lock}) \
         AND state || '' = 'pending' AND (lease_until IS NULL OR lease_until <= ?) \
         RETURNING id, seq, order_key, payload, attempts, created_at, retry_since"
    );
    Built::raw(
        d.placeholders(&sql),
        vec![
            text(owner),
            int(lease_until),
            text(channel),
            int(now),
            int(now),
            int(limit),
            int(now),
        ],
    )
}

/// Marks the leased messages `ids` sent, those `owner` still holds, in one
/// statement; returns the ids it marked. The text depends only on how
/// many ids there are (at most a channel's concurrency).
pub(crate) fn mark_all_sent(d: Dialect, ids: &[&str], owner: &str, now: i64) -> Built {
    let list = vec!["?"; ids.len()].join(", ");
    let sql = format!(
        "UPDATE {} SET state = 'sent', finished_at = ?, lease_owner = NULL, lease_until = NULL, \
         last_error = NULL WHERE lease_owner = ? AND id IN ({list}) RETURNING id",
        q(TABLE)
    );
    let mut values = vec![int(now), text(owner)];
    values.extend(ids.iter().map(|id| text(id)));
    Built::raw(d.placeholders(&sql), values)
}

/// Schedules a leased message's next attempt at `next`, if `owner` still
/// holds it.
pub(crate) fn mark_retry(d: Dialect, id: &str, owner: &str, next: i64, error: &str) -> Built {
    let sql = format!(
        "UPDATE {} SET next_attempt_at = ?, last_error = ?, lease_owner = NULL, \
         lease_until = NULL WHERE id = ? AND lease_owner = ?",
        q(TABLE)
    );
    Built::raw(
        d.placeholders(&sql),
        vec![int(next), text(error), text(id), text(owner)],
    )
}

/// Marks a leased message failed for good, if `owner` still holds it.
pub(crate) fn mark_failed(d: Dialect, id: &str, owner: &str, now: i64, error: &str) -> Built {
    let sql = format!(
        "UPDATE {} SET state = 'failed', finished_at = ?, last_error = ?, lease_owner = NULL, \
         lease_until = NULL WHERE id = ? AND lease_owner = ?",
        q(TABLE)
    );
    Built::raw(
        d.placeholders(&sql),
        vec![int(now), text(error), text(id), text(owner)],
    )
}

/// One message by id.
pub(crate) fn get(d: Dialect, id: &str) -> Built {
    let sql = format!("SELECT {MESSAGE_COLUMNS} FROM {} WHERE id = ?", q(TABLE));
    Built::raw(d.placeholders(&sql), vec![text(id)])
}

/// Messages in `state` (any when `None`) of `channel` (any when `None`),
/// oldest first, at most `limit`.
pub(crate) fn list(d: Dialect, state: Option<&str>, channel: Option<&str>, limit: i64) -> Built {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM {} WHERE (CAST(? AS TEXT) IS NULL OR state = ?) \
         AND (CAST(? AS TEXT) IS NULL OR channel = ?) ORDER BY seq LIMIT ?",
        q(TABLE)
    );
    Built::raw(
        d.placeholders(&sql),
        vec![
            opt_text(state),
            opt_text(state),
            opt_text(channel),
            opt_text(channel),
            int(limit),
        ],
    )
}

/// Messages of `channel` enqueued at or after `since`, oldest first, at
/// most `limit`.
pub(crate) fn since(d: Dialect, channel: &str, since: i64, limit: i64) -> Built {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM {} WHERE channel = ? AND created_at >= ? ORDER BY seq LIMIT ?",
        q(TABLE)
    );
    Built::raw(
        d.placeholders(&sql),
        vec![text(channel), int(since), int(limit)],
    )
}

/// Puts a failed message back in the queue, due now, its age counted again
/// from now.
pub(crate) fn retry(d: Dialect, id: &str, now: i64) -> Built {
    let sql = format!(
        "UPDATE {} SET state = 'pending', next_attempt_at = ?, retry_since = ?, \
         finished_at = NULL, lease_owner = NULL, lease_until = NULL \
         WHERE id = ? AND state = 'failed'",
        q(TABLE)
    );
    Built::raw(d.placeholders(&sql), vec![int(now), int(now), text(id)])
}

/// The creation time of the oldest pending message of `channel`.
pub(crate) fn oldest_pending(d: Dialect, channel: &str) -> Built {
    let sql = format!(
        "SELECT MIN(created_at) FROM {} WHERE state = 'pending' AND channel = ?",
        q(TABLE)
    );
    Built::raw(d.placeholders(&sql), vec![text(channel)])
}

/// Deletes messages of `channel` sent before `before` (failed ones stay).
pub(crate) fn purge_sent(d: Dialect, channel: &str, before: i64) -> Built {
    let sql = format!(
        "DELETE FROM {} WHERE state = 'sent' AND channel = ? AND finished_at < ?",
        q(TABLE)
    );
    Built::raw(d.placeholders(&sql), vec![text(channel), int(before)])
}
