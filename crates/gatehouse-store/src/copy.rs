//! Copying one store into another (`gatehouse copy`): the Model's tables,
//! then every internal (`_gatehouse`) table both databases have, such as
//! the authorization server's (`gatehouse-auth-store`), between any two
//! backends.
//!
//! Data tables are read and written through the Model's column types, so a
//! Boolean stored as an SQLite integer becomes a PostgreSQL boolean. Internal
//! tables are copied generically: every column the source and the target
//! both have, typed by the target's catalog, so columns added to those
//! tables later are copied without changing this code. The schema-version
//! table (the target records its own migrations) and the PostgreSQL
//! change-feed table (transient) are not copied.

use sea_query::Value;
use serde_json::Value as Json;

use gatehouse_db::{Built, Tx};

use crate::error::from_db;
use crate::migrate::{EVENTS_TABLE, SCHEMA_TABLE, q};
use crate::value::{Dialect, SqlKind};
use crate::{Store, StoreError};

/// Rows read and written per statement batch.
const BATCH: u64 = 500;

/// One table copied: its name and how many rows it holds on both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopiedTable {
    /// The table's name.
    pub table: String,
    /// Rows in the source, and (verified) in the target.
    pub rows: u64,
}

/// A column to copy and how its values are read and written.
struct Column {
    name: String,
    read: SqlKind,
    write: SqlKind,
}

/// A table to copy.
struct Table {
    name: String,
    columns: Vec<Column>,
}

/// Copies every row of `from` into `to` (both opened with the same Model;
/// `to` migrated; internal tables of other owners created on both sides
/// beforehand). Refuses when any table of the target has rows unless
/// `replace`, which first deletes them. Calls `progress(table, copied,
/// total)` after each batch. Verifies at the end that every table has as
/// many rows in the target as in the source.
pub async fn copy_store(
    from: &Store,
    to: &Store,
    replace: bool,
    progress: &mut (dyn FnMut(&str, u64, u64) + Send),
) -> Result<Vec<CopiedTable>, StoreError> {
    from.ensure_internal_tables().await?;
    to.ensure_internal_tables().await?;
    let tables = tables(from, to).await?;

    let mut tx = to.db().begin().await?;
    let mut occupied = Vec::new();
    for t in &tables {
        if count(&mut tx, &t.name).await? > 0 {
            occupied.push(t.name.clone());
        }
    }
    if !occupied.is_empty() {
        if !replace {
            return Err(StoreError::invalid(
                "target",
                format!(
                    "the target store is not empty (rows in {}); copy into an empty database, or replace its rows with --force",
                    occupied.join(", ")
                ),
            ));
        }
        // Children before parents.
        for t in tables.iter().rev() {
            tx.conn()
                .execute(Built::raw(format!("DELETE FROM {}", q(&t.name)), vec![]))
                .await
                .map_err(from_db)?;
        }
    }
    tx.commit().await.map_err(from_db)?;

    let mut report = Vec::new();
    for t in &tables {
        let total = {
            let mut rtx = from.db().begin().await?;
            count(&mut rtx, &t.name).await?
        };
        let mut copied = 0;
        while copied < total {
            let rows = read_batch(from, t, copied).await?;
            if rows.is_empty() {
                break;
            }
            let n = rows.len() as u64;
            write_batch(to, t, rows).await?;
            copied += n;
            progress(&t.name, copied, total);
        }
        if total == 0 {
            progress(&t.name, 0, 0);
        }
        report.push(CopiedTable {
            table: t.name.clone(),
            rows: total,
        });
    }

    // Verify.
    let mut stx = from.db().begin().await?;
    let mut ttx = to.db().begin().await?;
    for r in &report {
        let source = count(&mut stx, &r.table).await?;
        let target = count(&mut ttx, &r.table).await?;
        if source != target {
            return Err(StoreError::internal(format!(
                "table {} has {source} rows in the source but {target} in the target",
                r.table
            )));
        }
    }
    Ok(report)
}

async fn count(tx: &mut Tx, table: &str) -> Result<u64, StoreError> {
    let rows = tx
        .conn()
        .fetch(
            Built::raw(format!("SELECT COUNT(*) FROM {}", q(table)), vec![]),
            &[SqlKind::Count],
        )
        .await
        .map_err(from_db)?;
    Ok(rows
        .first()
        .and_then(|r| r.first())
        .and_then(Json::as_u64)
        .unwrap_or(0))
}

/// The data tables (referenced tables first), then the internal ones.
async fn tables(from: &Store, to: &Store) -> Result<Vec<Table>, StoreError> {
    let model = from.model();
    let mut ordered: Vec<&gatehouse_schema::Entity> = Vec::new();
    let mut pending: Vec<&gatehouse_schema::Entity> = model.entities.iter().collect();
    while !pending.is_empty() {
        let before = pending.len();
        let mut rest = Vec::new();
        for e in pending {
            let ready = e.fields.iter().all(|f| match model.to_one_target(f) {
                Some(t) => t.name == e.name || ordered.iter().any(|o| o.name == t.name),
                None => true,
            });
            if ready {
                ordered.push(e);
            } else {
                rest.push(e);
            }
        }
        if rest.len() == before {
            // A cycle of required references: keep the declared order.
            ordered.extend(rest);
            break;
        }
        pending = rest;
    }
    let mut out = Vec::new();
    for e in ordered {
        let columns = crate::query::columns(model, e, None)?
            .into_iter()
            .map(|c| Column {
                name: c.field.column.clone(),
                read: c.ty.kind(),
                write: c.ty.kind(),
            })
            .collect();
        out.push(Table {
            name: e.table.clone(),
            columns,
        });
    }

    let source_tables = catalog_tables(from).await?;
    let target_tables = catalog_tables(to).await?;
    for name in source_tables {
        if !name.starts_with(gatehouse_schema::RESERVED_TABLE_PREFIX)
            || name == SCHEMA_TABLE
            || name == EVENTS_TABLE
            || !target_tables.contains(&name)
        {
            continue;
        }
        let source_columns = catalog_columns(from, &name).await?;
        let mut columns = Vec::new();
        for (col, ty) in catalog_columns(to, &name).await? {
            if let Some((_, src_ty)) = source_columns.iter().find(|(c, _)| *c == col) {
                columns.push(Column {
                    name: col,
                    read: kind_of(src_ty),
                    write: kind_of(&ty),
                });
            }
        }
        out.push(Table { name, columns });
    }
    Ok(out)
}

/// The tables of a store's database, by the catalog.
async fn catalog_tables(store: &Store) -> Result<Vec<String>, StoreError> {
    let sql = match store.dialect() {
        Dialect::Sqlite => "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
        Dialect::Postgres => {
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name"
        }
    };
    let mut tx = store.db().begin().await?;
    let rows = tx
        .conn()
        .fetch(Built::raw(sql, vec![]), &[SqlKind::Text])
        .await
        .map_err(from_db)?;
    Ok(rows
        .into_iter()
        .filter_map(|r| r.first().and_then(Json::as_str).map(str::to_string))
        .collect())
}

/// A table's columns and their declared types, in order.
async fn catalog_columns(store: &Store, table: &str) -> Result<Vec<(String, String)>, StoreError> {
    let (sql, arg) = match store.dialect() {
        Dialect::Sqlite => ("SELECT name, type FROM pragma_table_info(?)", table),
        Dialect::Postgres => (
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
            table,
        ),
    };
    let mut tx = store.db().begin().await?;
    let rows = tx
        .conn()
        .fetch(
            Built::raw(sql, vec![Value::String(Some(arg.to_string()))]),
            &[SqlKind::Text, SqlKind::Text],
        )
        .await
        .map_err(from_db)?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            Some((
                r.first()?.as_str()?.to_string(),
                r.get(1)?.as_str().unwrap_or("").to_string(),
            ))
        })
        .collect())
}

/// How a column of an internal table with this declared type travels.
fn kind_of(declared: &str) -> SqlKind {
    let t = declared.to_ascii_lowercase();
    if t.contains("blob") || t.contains("bytea") {
        SqlKind::Bytes
    } else if t.contains("bool") {
        SqlKind::Bool
    } else if t.contains("int") {
        SqlKind::Count
    } else if t.contains("double") || t.contains("real") || t.contains("float") {
        SqlKind::Float
    } else if t.contains("json") {
        SqlKind::Json
    } else if t == "date" {
        SqlKind::Date
    } else {
        SqlKind::Text
    }
}

async fn read_batch(from: &Store, t: &Table, offset: u64) -> Result<Vec<Vec<Json>>, StoreError> {
    let cols: Vec<String> = t.columns.iter().map(|c| q(&c.name)).collect();
    let order: Vec<String> = (1..=cols.len()).map(|i| i.to_string()).collect();
    let sql = format!(
        "SELECT {} FROM {} ORDER BY {} LIMIT {BATCH} OFFSET {offset}",
        cols.join(", "),
        q(&t.name),
        order.join(", ")
    );
    let kinds: Vec<SqlKind> = t.columns.iter().map(|c| c.read).collect();
    let mut tx = from.db().begin().await?;
    tx.conn()
        .fetch(Built::raw(sql, vec![]), &kinds)
        .await
        .map_err(from_db)
}

async fn write_batch(to: &Store, t: &Table, rows: Vec<Vec<Json>>) -> Result<(), StoreError> {
    let d = to.dialect();
    let cols: Vec<String> = t.columns.iter().map(|c| q(&c.name)).collect();
    let mut tx = to.db().begin().await?;
    for row in rows {
        let mut placeholders = Vec::with_capacity(row.len());
        let mut values = Vec::with_capacity(row.len());
        for (i, (c, v)) in t.columns.iter().zip(row).enumerate() {
            let p = match d {
                Dialect::Sqlite => "?".to_string(),
                Dialect::Postgres => format!("${}", i + 1),
            };
            placeholders.push(if c.write == SqlKind::Date && d == Dialect::Postgres {
                format!("CAST({p} AS DATE)")
            } else {
                p
            });
            values.push(param(d, c.read, c.write, v));
        }
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({})",
            q(&t.name),
            cols.join(", "),
            placeholders.join(", ")
        );
        tx.conn()
            .execute(Built::raw(sql, values))
            .await
            .map_err(from_db)?;
    }
    tx.commit().await.map_err(from_db)
}

/// A value read as `read` as a parameter of a `write` column.
fn param(d: Dialect, read: SqlKind, write: SqlKind, v: Json) -> Value {
    match write {
        SqlKind::Text | SqlKind::Date => Value::String(match v {
            Json::Null => None,
            Json::String(s) => Some(s),
            other => Some(other.to_string()),
        }),
        SqlKind::Int => Value::Int(v.as_i64().and_then(|i| i32::try_from(i).ok())),
        SqlKind::Count => Value::BigInt(v.as_i64()),
        SqlKind::Float => Value::Double(v.as_f64()),
        SqlKind::Bool => Value::Bool(match v {
            Json::Bool(b) => Some(b),
            Json::Number(n) => n.as_i64().map(|i| i != 0),
            _ => None,
        }),
        SqlKind::Bytes => SqlKind::bytes_param(v.as_str()),
        SqlKind::Json => {
            // A JSON column read as text (an SQLite column of another type) is parsed.
            let v = match (read, v) {
                (SqlKind::Text, Json::String(s)) => {
                    serde_json::from_str(&s).unwrap_or(Json::String(s))
                }
                (_, v) => v,
            };
            match (d, v) {
                (Dialect::Sqlite, Json::Null) => Value::String(None),
                (Dialect::Postgres, Json::Null) => Value::Json(None),
                (Dialect::Sqlite, v) => Value::String(Some(v.to_string())),
                (Dialect::Postgres, v) => Value::Json(Some(Box::new(v))),
            }
        }
    }
}
