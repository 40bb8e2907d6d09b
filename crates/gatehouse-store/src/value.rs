//! Values: validation of JSON input against the Model, and conversion to and
//! from SQL parameters and columns.

use gatehouse_schema::{Entity, Field, FieldKind, Model, Storage, ValueType};
use sea_query::{Expr, ExprTrait, Value};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::StoreError;

/// A row: GraphQL field name to value (`id` string, Date `YYYY-MM-DD`,
/// to-one relation as the referenced id, lists as arrays, enums as strings).
pub type Row = serde_json::Map<String, Json>;

/// Rows in column form: the `i`-th value of every row is the field
/// `columns[i]`. For callers that read many rows of a few fields (the
/// planned GraphQL executor): no map and no key strings per row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowSet {
    /// GraphQL field names, `id` first.
    pub columns: Vec<String>,
    /// Values, one vector per row, aligned with `columns`.
    pub rows: Vec<Vec<Json>>,
}

impl RowSet {
    /// The index of `field` in every row.
    pub fn position(&self, field: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == field)
    }

    /// The rows as [`Row`] maps.
    pub fn into_rows(self) -> Vec<Row> {
        let columns = self.columns;
        self.rows
            .into_iter()
            .map(|values| columns.iter().cloned().zip(values).collect())
            .collect()
    }
}

pub(crate) use gatehouse_db::{Dialect, SqlKind};

/// What a column holds, as recorded in the applied layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "of", rename_all = "snake_case")]
pub enum ColType {
    /// The primary key (text).
    Id,
    /// `String` or `ID` values.
    Text,
    /// 32-bit integers.
    Int,
    /// Finite doubles.
    Float,
    /// Booleans.
    Boolean,
    /// Calendar dates.
    Date,
    /// Instants (canonical UTC text).
    DateTime,
    /// Any JSON value.
    Json,
    /// Values of the named enum (stored as text).
    Enum(String),
    /// A reference to a row of the named table (stored as its id text).
    Ref(String),
    /// A JSON list whose elements are of the named GraphQL type.
    List(String),
}

impl ColType {
    /// The column type of a stored field.
    pub(crate) fn of(model: &Model, field: &Field) -> Option<ColType> {
        Some(match &field.kind {
            FieldKind::Id => ColType::Id,
            FieldKind::ToOne { .. } => {
                ColType::Ref(model.target_of(field).map(|e| e.table.clone())?)
            }
            FieldKind::ToMany { .. } | FieldKind::Count { .. } => return None,
            FieldKind::Value { ty, list: Some(_) } => ColType::List(ty.graphql_name().to_string()),
            FieldKind::Value { ty, list: None } => ColType::of_value(ty),
        })
    }

    /// The column type of one value of `ty` (a list element, a filter
    /// operand): for a scalar, from its storage in the scalar table.
    pub(crate) fn of_value(ty: &ValueType) -> ColType {
        match ty {
            ValueType::Enum(name) => ColType::Enum(name.clone()),
            ValueType::Scalar(s) => match s.info().storage {
                Storage::Bool => ColType::Boolean,
                Storage::Date => ColType::Date,
                Storage::Float => ColType::Float,
                Storage::Text => ColType::Text,
                Storage::Int => ColType::Int,
                Storage::DateTime => ColType::DateTime,
                Storage::Json => ColType::Json,
            },
        }
    }

    /// How values of this type are stored and read back.
    pub(crate) fn kind(&self) -> SqlKind {
        match self {
            ColType::Id
            | ColType::Text
            | ColType::DateTime
            | ColType::Enum(_)
            | ColType::Ref(_) => SqlKind::Text,
            ColType::Int => SqlKind::Int,
            ColType::Float => SqlKind::Float,
            ColType::Boolean => SqlKind::Bool,
            ColType::Date => SqlKind::Date,
            ColType::List(_) | ColType::Json => SqlKind::Json,
        }
    }

    /// The SQL type name on `dialect`.
    pub(crate) fn sql_type(&self, dialect: Dialect) -> &'static str {
        match (self.kind(), dialect) {
            (SqlKind::Text, Dialect::Sqlite) => "TEXT",
            (SqlKind::Text, Dialect::Postgres) => "TEXT COLLATE \"C\"",
            (SqlKind::Int, _) => "INTEGER",
            (SqlKind::Float, Dialect::Sqlite) => "REAL",
            (SqlKind::Float, Dialect::Postgres) => "DOUBLE PRECISION",
            (SqlKind::Bool, Dialect::Sqlite) => "INTEGER",
            (SqlKind::Bool, Dialect::Postgres) => "BOOLEAN",
            (SqlKind::Date, Dialect::Sqlite) => "TEXT",
            (SqlKind::Date, Dialect::Postgres) => "DATE",
            (SqlKind::Json, Dialect::Sqlite) => "TEXT",
            (SqlKind::Json, Dialect::Postgres) => "JSONB",
            (SqlKind::Count, _) => "BIGINT",
            (SqlKind::Bytes, Dialect::Sqlite) => "BLOB",
            (SqlKind::Bytes, Dialect::Postgres) => "BYTEA",
        }
    }

    /// A stand-in value for filling a new required column of existing rows.
    pub(crate) fn placeholder(&self, model_enum_first: Option<&str>) -> Option<Json> {
        Some(match self {
            ColType::Id | ColType::Ref(_) => return None,
            ColType::Text => Json::String(String::new()),
            ColType::Int => Json::from(0),
            ColType::Float => Json::from(0.0),
            ColType::Boolean => Json::Bool(false),
            ColType::Date => Json::String("1970-01-01".into()),
            ColType::DateTime => Json::String(gatehouse_schema::datetime_text(0)),
            ColType::Json => Json::Object(serde_json::Map::new()),
            ColType::Enum(_) => Json::String(model_enum_first?.to_string()),
            ColType::List(_) => Json::Array(vec![]),
        })
    }
}

impl std::fmt::Display for ColType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ColType::Id => f.write_str("ID"),
            ColType::Text => f.write_str("String"),
            ColType::Int => f.write_str("Int"),
            ColType::Float => f.write_str("Float"),
            ColType::Boolean => f.write_str("Boolean"),
            ColType::Date => f.write_str("Date"),
            ColType::DateTime => f.write_str("DateTime"),
            ColType::Json => f.write_str("JSON"),
            ColType::Enum(n) => write!(f, "enum {n}"),
            ColType::Ref(t) => write!(f, "reference to {t}"),
            ColType::List(n) => write!(f, "[{n}]"),
        }
    }
}

/// Validates one non-null scalar or enum value and returns its canonical
/// JSON ([`Model::check_value`]); `field` names it in the error.
pub(crate) fn check_scalar(
    model: &Model,
    field: &str,
    ty: &ValueType,
    v: &Json,
) -> Result<Json, StoreError> {
    model
        .check_value(ty, v)
        .map(std::borrow::Cow::into_owned)
        .map_err(|e| StoreError::invalid(field, e.to_string()))
}

/// Validates a value for a stored field (null included) and returns it
/// canonical ([`Model::check_field_value`]).
pub(crate) fn check_field(model: &Model, field: &Field, v: &Json) -> Result<Json, StoreError> {
    model
        .check_field_value(field, v)
        .map(std::borrow::Cow::into_owned)
        .map_err(|e| StoreError::invalid(&field.name, e.to_string()))
}

/// Checks that every key of `row` is a writable stored field of `entity`.
pub(crate) fn check_keys(entity: &Entity, row: &Row) -> Result<(), StoreError> {
    for key in row.keys() {
        match entity.field(key) {
            None => {
                return Err(StoreError::invalid(
                    key,
                    format!("{} has no field `{key}`", entity.name),
                ));
            }
            Some(f) if f.is_server_set() => {
                return Err(StoreError::invalid(
                    key,
                    "is set by the server and cannot be written",
                ));
            }
            Some(f) if !f.is_stored() => {
                return Err(StoreError::invalid(
                    key,
                    format!(
                        "is a relation list of {} and cannot be written",
                        entity.name
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A canonical value as an SQL expression (a bound parameter, cast where the
/// dialect needs it).
pub(crate) fn to_sql(dialect: Dialect, ty: &ColType, v: &Json) -> Expr {
    let value = to_value(dialect, ty, v);
    if ty.kind() == SqlKind::Date && dialect == Dialect::Postgres {
        return Expr::val(value).cast_as("DATE");
    }
    Expr::val(value)
}

/// A canonical value as a bound parameter.
pub(crate) fn to_value(dialect: Dialect, ty: &ColType, v: &Json) -> Value {
    match ty.kind() {
        SqlKind::Text | SqlKind::Date => Value::String(v.as_str().map(str::to_string)),
        SqlKind::Int => Value::Int(v.as_i64().and_then(|i| i32::try_from(i).ok())),
        SqlKind::Count => Value::BigInt(v.as_i64()),
        SqlKind::Float => Value::Double(v.as_f64()),
        SqlKind::Bool => Value::Bool(v.as_bool()),
        SqlKind::Bytes => SqlKind::bytes_param(v.as_str()),
        SqlKind::Json => match (dialect, v) {
            (_, Json::Null) => match dialect {
                Dialect::Sqlite => Value::String(None),
                Dialect::Postgres => Value::Json(None),
            },
            (Dialect::Sqlite, v) => Value::String(Some(v.to_string())),
            (Dialect::Postgres, v) => Value::Json(Some(Box::new(v.clone()))),
        },
    }
}
