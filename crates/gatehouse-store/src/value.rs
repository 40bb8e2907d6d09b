//! Values: validation of JSON input against the Model, and conversion to and
//! from SQL parameters and columns.

use gatehouse_schema::{Entity, Field, FieldKind, Model, Scalar, ValueType};
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
            FieldKind::ToOne { target } => ColType::Ref(
                model
                    .entity(target)
                    .map(|e| e.table.clone())
                    .unwrap_or_else(|| target.clone()),
            ),
            FieldKind::ToMany { .. } => return None,
            FieldKind::Value { ty, list: Some(_) } => ColType::List(ty.graphql_name().to_string()),
            FieldKind::Value { ty, list: None } => match ty {
                ValueType::Enum(name) => ColType::Enum(name.clone()),
                ValueType::Scalar(s) => match s {
                    Scalar::Boolean => ColType::Boolean,
                    Scalar::Date => ColType::Date,
                    Scalar::Float => ColType::Float,
                    Scalar::Id | Scalar::String => ColType::Text,
                    Scalar::Int => ColType::Int,
                },
            },
        })
    }

    /// How values of this type are stored and read back.
    pub(crate) fn kind(&self) -> SqlKind {
        match self {
            ColType::Id | ColType::Text | ColType::Enum(_) | ColType::Ref(_) => SqlKind::Text,
            ColType::Int => SqlKind::Int,
            ColType::Float => SqlKind::Float,
            ColType::Boolean => SqlKind::Bool,
            ColType::Date => SqlKind::Date,
            ColType::List(_) => SqlKind::Json,
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
            ColType::Enum(n) => write!(f, "enum {n}"),
            ColType::Ref(t) => write!(f, "reference to {t}"),
            ColType::List(n) => write!(f, "[{n}]"),
        }
    }
}

fn type_error(field: &str, expected: &str, got: &Json) -> StoreError {
    let got = match got {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    };
    StoreError::invalid(field, format!("expected {expected}, got {got}"))
}

/// Text may hold any character but U+0000, which PostgreSQL cannot store;
/// refusing it on both backends keeps them interchangeable.
fn nul_error(field: &str) -> StoreError {
    StoreError::invalid(field, "text cannot contain the NUL character (U+0000)")
}

/// Validates one non-null scalar or enum value and returns its canonical JSON.
pub(crate) fn check_scalar(
    model: &Model,
    field: &str,
    ty: &ValueType,
    v: &Json,
) -> Result<Json, StoreError> {
    match ty {
        ValueType::Enum(name) => {
            let Json::String(s) = v else {
                return Err(type_error(field, &format!("a {name} value"), v));
            };
            let known = model
                .enum_def(name)
                .is_some_and(|e| e.values.iter().any(|x| x == s));
            if !known {
                let values = model
                    .enum_def(name)
                    .map(|e| e.values.join(", "))
                    .unwrap_or_default();
                return Err(StoreError::invalid(
                    field,
                    format!("`{s}` is not a value of {name} (expected one of: {values})"),
                ));
            }
            Ok(v.clone())
        }
        ValueType::Scalar(s) => match s {
            Scalar::Id | Scalar::String => match v {
                Json::String(text) if text.contains('\0') => Err(nul_error(field)),
                Json::String(_) => Ok(v.clone()),
                _ => Err(type_error(field, s.graphql_name(), v)),
            },
            Scalar::Boolean => match v {
                Json::Bool(_) => Ok(v.clone()),
                _ => Err(type_error(field, "a Boolean", v)),
            },
            Scalar::Int => {
                let n = match v {
                    Json::Number(n) => n,
                    _ => return Err(type_error(field, "an Int", v)),
                };
                let i = match (n.as_i64(), n.as_f64()) {
                    (Some(i), _) => i,
                    // 3.0 is accepted as 3, as GraphQL input coercion allows.
                    (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e18 => f as i64,
                    _ => return Err(StoreError::invalid(field, format!("{n} is not an integer"))),
                };
                i32::try_from(i).map(Json::from).map_err(|_| {
                    StoreError::invalid(field, format!("{i} does not fit a 32-bit Int"))
                })
            }
            Scalar::Float => {
                let f = match v {
                    Json::Number(n) => n.as_f64(),
                    _ => return Err(type_error(field, "a Float", v)),
                };
                match f.and_then(serde_json::Number::from_f64) {
                    Some(n) if f.is_some_and(f64::is_finite) => Ok(Json::Number(n)),
                    _ => Err(StoreError::invalid(field, "a Float must be finite")),
                }
            }
            Scalar::Date => {
                let Json::String(text) = v else {
                    return Err(type_error(field, "a Date (YYYY-MM-DD)", v));
                };
                parse_date(text).ok_or_else(|| {
                    StoreError::invalid(
                        field,
                        format!("`{text}` is not a valid date (expected YYYY-MM-DD)"),
                    )
                })?;
                Ok(v.clone())
            }
        },
    }
}

/// Parses a strict `YYYY-MM-DD` calendar date.
pub(crate) fn parse_date(text: &str) -> Option<time::Date> {
    if text.len() != 10 {
        return None;
    }
    time::Date::parse(text, gatehouse_db::DATE_FORMAT).ok()
}

/// Validates a value for a stored field (null included) and returns it canonical.
pub(crate) fn check_field(model: &Model, field: &Field, v: &Json) -> Result<Json, StoreError> {
    if v.is_null() {
        if field.required {
            return Err(StoreError::invalid(
                &field.name,
                "is required and cannot be null",
            ));
        }
        return Ok(Json::Null);
    }
    match &field.kind {
        FieldKind::Id | FieldKind::ToOne { .. } => match v {
            Json::String(s) if s.contains('\0') => Err(nul_error(&field.name)),
            Json::String(s) if !s.is_empty() => Ok(v.clone()),
            Json::String(_) => Err(StoreError::invalid(&field.name, "an id cannot be empty")),
            _ => Err(type_error(&field.name, "an ID", v)),
        },
        FieldKind::ToMany { target, via, .. } => Err(StoreError::invalid(
            &field.name,
            format!(
                "is a list of {target} rows and cannot be written here; set `{via}` on the {target} rows"
            ),
        )),
        FieldKind::Value { ty, list: None } => check_scalar(model, &field.name, ty, v),
        FieldKind::Value {
            ty,
            list: Some(items),
        } => {
            let Json::Array(items_in) = v else {
                return Err(type_error(
                    &field.name,
                    &format!("a list of {}", ty.graphql_name()),
                    v,
                ));
            };
            let mut out = Vec::with_capacity(items_in.len());
            for item in items_in {
                if item.is_null() {
                    if items.items_required {
                        return Err(StoreError::invalid(
                            &field.name,
                            "list elements cannot be null",
                        ));
                    }
                    out.push(Json::Null);
                } else {
                    out.push(check_scalar(model, &field.name, ty, item)?);
                }
            }
            Ok(Json::Array(out))
        }
    }
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
