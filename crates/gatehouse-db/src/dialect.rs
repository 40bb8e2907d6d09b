//! What differs between the backends' SQL, and the conventions every user
//! of the database shares.

use sea_query::Value;

/// The SQL dialect of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite: `?` placeholders.
    Sqlite,
    /// PostgreSQL: `$n` placeholders.
    Postgres,
}

impl Dialect {
    /// `"sqlite"` or `"postgres"` (metric labels, logs, `Store::backend`).
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
        }
    }

    /// `sql`, written with `?` placeholders, for this dialect: PostgreSQL's
    /// are `$1, $2, ...`. Only for fixed SQL text without string literals
    /// or quoted identifiers holding `?`, where every `?` is a placeholder.
    pub fn placeholders(self, sql: &str) -> String {
        match self {
            Dialect::Sqlite => sql.to_string(),
            Dialect::Postgres => {
                let mut out = String::with_capacity(sql.len() + 8);
                let mut n = 0;
                for ch in sql.chars() {
                    if ch == '?' {
                        n += 1;
                        out.push('$');
                        out.push_str(&n.to_string());
                    } else {
                        out.push(ch);
                    }
                }
                out
            }
        }
    }
}

/// Storage classes, which decide how a column is bound and decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlKind {
    /// Text (also ids, enums, references).
    Text,
    /// 32-bit integers.
    Int,
    /// Doubles.
    Float,
    /// Booleans (an integer on SQLite).
    Bool,
    /// Calendar dates, read as `YYYY-MM-DD` text.
    Date,
    /// JSON (text on SQLite, `JSONB` on PostgreSQL).
    Json,
    /// `COUNT(*)` and other 64-bit integers.
    Count,
    /// Binary values (`BLOB` / `BYTEA`), decoded as a lowercase hex string.
    /// Only internal tables use them; no Model column is binary.
    Bytes,
}

impl SqlKind {
    /// A [`SqlKind::Bytes`] value as it travels in a row (lowercase hex) as
    /// a bound parameter; `None` (SQL NULL) for anything that is not hex.
    pub fn bytes_param(v: Option<&str>) -> Value {
        Value::Bytes(v.and_then(|s| hex::decode(s).ok()))
    }
}

/// The SQL function that folds case for the case-insensitive operators on
/// SQLite ([`fold_case`], registered on every connection). PostgreSQL uses
/// `lower(x COLLATE "C.utf8")`, which folds the same way.
pub const FOLD_FUNCTION: &str = "gh_fold";

/// Case folding for `_ieq`, `_icontains`, `_istarts_with`,
/// `_iends_with`: each character's simple Unicode lowercase mapping, as
/// PostgreSQL's `lower()` under a UTF-8 C locale (glibc `towlower`) maps
/// it, so both backends give the same answers. `İ` (U+0130), the one
/// character whose full lowercase is two characters in Rust, maps to `i`
/// as `towlower` maps it; `ß` stays `ß` (no `ss` expansion) and `Σ`
/// becomes `σ` wherever it stands.
pub fn fold_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '\u{130}' {
            out.push('i');
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// How a `Date` travels as text: `YYYY-MM-DD`.
pub const DATE_FORMAT: &[time::format_description::BorrowedFormatItem<'static>] =
    time::macros::format_description!("[year]-[month]-[day]");

/// Formats a date as `YYYY-MM-DD`.
pub fn format_date(d: time::Date) -> Result<String, time::error::Format> {
    d.format(DATE_FORMAT)
}

/// A quoted SQL identifier (the same quoting on both backends).
pub fn q(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// Taken first in a PostgreSQL transaction that changes tables (migrations,
/// internal tables): instances starting together on one database change
/// them one at a time. SQLite needs none (`BEGIN IMMEDIATE` serializes).
pub const SCHEMA_LOCK: &str = "SELECT pg_advisory_xact_lock(7428190341)";
