//! The one value checker: whether a JSON value is a value of a field or of a
//! value type, and its canonical form. REST bodies and query parameters, the
//! store, and the GraphQL layer (its scalar validators and the planned
//! executor) all ask here. A new scalar is one more arm of
//! [`Scalar::check_text`] (values written as strings, such as `Date`) or
//! [`Scalar::check_number`].

use std::borrow::Cow;

use serde_json::Value as Json;

use crate::model::{EnumDef, Field, FieldKind, Model, Scalar, ValueType, Wire, valid_date};

/// Why a value does not fit its field or type. `Display` is the message
/// users see after the field's name (`title: expected a String, got a number`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// `null` for a required field.
    #[error("is required and cannot be null")]
    Required,
    /// A `null` element of a `[T!]` list.
    #[error("list elements cannot be null")]
    NullElement,
    /// A value of another JSON kind than the type takes.
    #[error("expected {expected}, got {got}")]
    WrongKind {
        /// The type, as messages name it (`a String`, `a list of Int`).
        expected: String,
        /// The JSON kind given ([`json_kind`]).
        got: &'static str,
    },
    /// An empty string for an id or a reference.
    #[error("an id cannot be empty")]
    EmptyId,
    /// Text holding U+0000: PostgreSQL cannot store it, so both backends
    /// refuse it alike.
    #[error("text cannot contain the NUL character (U+0000)")]
    Nul,
    /// A number with a fractional part (or beyond 2^60) for an `Int`.
    #[error("{0} is not an integer")]
    NotInteger(String),
    /// An integer outside an `Int`'s 32 bits.
    #[error("{0} does not fit a 32-bit Int")]
    IntRange(i64),
    /// A `Float` that is not a finite double.
    #[error("a Float must be finite")]
    NotFinite,
    /// A string that is not an existing calendar date `YYYY-MM-DD`.
    #[error("`{0}` is not a valid date (expected YYYY-MM-DD)")]
    BadDate(String),
    /// A string that is not an RFC 3339 date-time with an offset.
    #[error(
        "`{0}` is not a valid DateTime (expected RFC 3339 with an offset, e.g. 2026-11-27T16:00:00+01:00)"
    )]
    BadDateTime(String),
    /// A JSON value holding U+0000 in a string or key.
    #[error("JSON text cannot contain the NUL character (U+0000)")]
    JsonNul,
    /// A string that is not a value of the enum.
    #[error("`{value}` is not a value of {name} (expected one of: {values})")]
    NotInEnum {
        /// The value given.
        value: String,
        /// The enum's name.
        name: String,
        /// Its values, comma-separated.
        values: String,
    },
    /// A to-many relation, which holds no value of its own.
    #[error(
        "is a list of {target} rows and cannot be written here; set `{via}` on the {target} rows"
    )]
    ToMany {
        /// The entity listed.
        target: String,
        /// Its to-one field that points back.
        via: String,
    },
    /// A value that breaks its field's `@constraint` rules (each named).
    #[error("{}", .0.join(" and "))]
    Constraint(Vec<String>),
    /// A many-to-many relation: its links are rows of the join type.
    #[error(
        "is a list of {target} rows linked through {through}; create or delete {through} rows to change it"
    )]
    ManyToMany {
        /// The entity listed.
        target: String,
        /// The join entity.
        through: String,
    },
}

impl ValueError {
    /// Why a to-many or count field of `model` cannot be written: which
    /// rows to write instead.
    pub fn to_many(model: &crate::Model, field: &crate::Field) -> ValueError {
        let target = model
            .target_of(field)
            .map(|t| t.name.clone())
            .unwrap_or_default();
        match model.through_of(field) {
            Some((through, _, _)) => ValueError::ManyToMany {
                target,
                through: through.name.clone(),
            },
            None => ValueError::ToMany {
                target,
                via: model
                    .inverse_of(field)
                    .map(|f| f.name.clone())
                    .unwrap_or_default(),
            },
        }
    }
}

/// The kind of a JSON value, as messages name it (`a number`).
pub fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

fn wrong_kind(expected: impl Into<String>, got: &Json) -> ValueError {
    ValueError::WrongKind {
        expected: expected.into(),
        got: json_kind(got),
    }
}

impl Scalar {
    /// Checks a value of this scalar written as a string: any text but
    /// U+0000 for `String` and `ID`, an existing calendar date for `Date`;
    /// the other scalars are not strings.
    pub fn check_text(self, s: &str) -> Result<(), ValueError> {
        match self {
            Scalar::String | Scalar::Id if s.contains('\0') => Err(ValueError::Nul),
            Scalar::String | Scalar::Id => Ok(()),
            Scalar::Date if valid_date(s) => Ok(()),
            Scalar::Date => Err(ValueError::BadDate(s.to_string())),
            Scalar::DateTime => self.canonical_text(s).map(drop),
            Scalar::Json if s.contains('\0') => Err(ValueError::JsonNul),
            Scalar::Json => Ok(()),
            Scalar::Boolean | Scalar::Float | Scalar::Int => Err(ValueError::WrongKind {
                expected: self.expected().into(),
                got: "a string",
            }),
        }
    }

    /// Checks a value of this scalar written as a number and returns it
    /// canonical: an `Int` is a 32-bit integer (`3.0` is taken as `3`, as
    /// JSON Schema and GraphQL input coercion take it); a `Float` is finite.
    pub fn check_number(self, n: &serde_json::Number) -> Result<Json, ValueError> {
        match self {
            Scalar::Int => {
                let i = match (n.as_i64(), n.as_f64()) {
                    (Some(i), _) => i,
                    (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e18 => f as i64,
                    _ => return Err(ValueError::NotInteger(n.to_string())),
                };
                i32::try_from(i)
                    .map(Json::from)
                    .map_err(|_| ValueError::IntRange(i))
            }
            Scalar::Float => match n.as_f64().and_then(serde_json::Number::from_f64) {
                Some(f) => Ok(Json::Number(f)),
                None => Err(ValueError::NotFinite),
            },
            Scalar::Json => Ok(Json::Number(n.clone())),
            Scalar::Boolean | Scalar::Date | Scalar::DateTime | Scalar::Id | Scalar::String => {
                Err(ValueError::WrongKind {
                    expected: self.expected().into(),
                    got: "a number",
                })
            }
        }
    }
}

impl Scalar {
    /// Checks a non-null value of this scalar and returns it canonical, by
    /// how the scalar is written ([`crate::ScalarInfo::wire`]).
    pub fn check<'v>(self, v: &'v Json) -> Result<Cow<'v, Json>, ValueError> {
        match (self.info().wire, v) {
            (Wire::Any, v) if has_nul(v) => Err(ValueError::JsonNul),
            (Wire::Any, v) => Ok(Cow::Borrowed(v)),
            (_, Json::String(text)) => match self.canonical_text(text)? {
                Some(canonical) => Ok(Cow::Owned(Json::String(canonical))),
                None => Ok(Cow::Borrowed(v)),
            },
            (_, Json::Number(n)) => self.check_number(n).map(Cow::Owned),
            (Wire::Boolean, Json::Bool(_)) => Ok(Cow::Borrowed(v)),
            (_, other) => Err(wrong_kind(self.expected(), other)),
        }
    }
}

impl Scalar {
    /// The canonical form of a value written as a string, when it differs
    /// from the text given (`DateTime`: UTC with microseconds); `None`
    /// for a valid value already canonical.
    pub fn canonical_text(self, s: &str) -> Result<Option<String>, ValueError> {
        match self {
            Scalar::DateTime => match crate::scalar::parse_datetime(s) {
                Some(c) if c == s => Ok(None),
                Some(c) => Ok(Some(c)),
                None => Err(ValueError::BadDateTime(s.to_string())),
            },
            _ => self.check_text(s).map(|()| None),
        }
    }
}

/// Whether a JSON value holds U+0000 in a string or a key (PostgreSQL's
/// `jsonb` cannot store it, so neither backend takes it).
fn has_nul(v: &Json) -> bool {
    match v {
        Json::String(s) => s.contains('\0'),
        Json::Array(items) => items.iter().any(has_nul),
        Json::Object(m) => m.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

impl EnumDef {
    /// Whether `value` is one of the enum's values.
    pub fn has(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }
}

impl ValueType {
    /// Checks a non-null value of this type (one scalar or enum value, a
    /// list element) and returns it canonical: numbers as
    /// [`Scalar::check_number`] makes them, everything else as given.
    /// `enums` are the schema's enums ([`Model::enums`]); the binder checks
    /// `@policy` literals with them before the Model exists.
    pub fn check<'v>(&self, v: &'v Json, enums: &[EnumDef]) -> Result<Cow<'v, Json>, ValueError> {
        match self {
            ValueType::Enum(name) => {
                let Json::String(s) = v else {
                    return Err(wrong_kind(format!("a {name} value"), v));
                };
                let def = enums.iter().find(|e| e.name == *name);
                if def.is_some_and(|d| d.has(s)) {
                    Ok(Cow::Borrowed(v))
                } else {
                    Err(ValueError::NotInEnum {
                        value: s.clone(),
                        name: name.clone(),
                        values: def.map(|d| d.values.join(", ")).unwrap_or_default(),
                    })
                }
            }
            ValueType::Scalar(s) => s.check(v),
        }
    }
}

impl Model {
    /// [`ValueType::check`] with the schema's enums.
    pub fn check_value<'v>(
        &self,
        ty: &ValueType,
        v: &'v Json,
    ) -> Result<Cow<'v, Json>, ValueError> {
        ty.check(v, &self.enums)
    }

    /// Checks a value (null included) for the stored field `field` and
    /// returns it canonical: ids and references are non-empty strings,
    /// lists hold values of their element type (nulls only in `[T]`), and
    /// a value keeps the field's `@constraint` rules. The one check of a
    /// written value: REST bodies and the store (every create and update,
    /// whatever the entry point) ask here.
    pub fn check_field_value<'v>(
        &self,
        field: &Field,
        v: &'v Json,
    ) -> Result<Cow<'v, Json>, ValueError> {
        let checked = self.check_field_type(field, v)?;
        if let Some(c) = &field.constraint
            && !checked.is_null()
        {
            let broken = c.broken(&checked);
            if !broken.is_empty() {
                return Err(ValueError::Constraint(broken));
            }
        }
        Ok(checked)
    }

    /// [`Model::check_field_value`] without the constraint rules.
    fn check_field_type<'v>(
        &self,
        field: &Field,
        v: &'v Json,
    ) -> Result<Cow<'v, Json>, ValueError> {
        if v.is_null() {
            return if field.required {
                Err(ValueError::Required)
            } else {
                Ok(Cow::Borrowed(v))
            };
        }
        match &field.kind {
            FieldKind::Id | FieldKind::ToOne { .. } => match v {
                Json::String(s) if s.is_empty() => Err(ValueError::EmptyId),
                Json::String(s) => Scalar::Id.check_text(s).map(|()| Cow::Borrowed(v)),
                other => Err(wrong_kind(Scalar::Id.expected(), other)),
            },
            FieldKind::ToMany { .. } | FieldKind::Count { .. } => {
                Err(ValueError::to_many(self, field))
            }
            FieldKind::Value { ty, list: None } => self.check_value(ty, v),
            FieldKind::Value {
                ty,
                list: Some(list),
            } => {
                let Json::Array(items) = v else {
                    return Err(wrong_kind(format!("a list of {}", ty.graphql_name()), v));
                };
                // Built only when an element's canonical form differs.
                let mut changed: Option<Vec<Json>> = None;
                for (i, item) in items.iter().enumerate() {
                    let checked = if item.is_null() {
                        if list.items_required {
                            return Err(ValueError::NullElement);
                        }
                        Cow::Borrowed(item)
                    } else {
                        self.check_value(ty, item)?
                    };
                    match (checked, &mut changed) {
                        (Cow::Borrowed(item), Some(out)) => out.push(item.clone()),
                        (Cow::Borrowed(_), None) => {}
                        (Cow::Owned(item), Some(out)) => out.push(item),
                        (Cow::Owned(item), None) => {
                            let mut out = Vec::with_capacity(items.len());
                            out.extend_from_slice(&items[..i]);
                            out.push(item);
                            changed = Some(out);
                        }
                    }
                }
                Ok(match changed {
                    Some(out) => Cow::Owned(Json::Array(out)),
                    None => Cow::Borrowed(v),
                })
            }
        }
    }
}
