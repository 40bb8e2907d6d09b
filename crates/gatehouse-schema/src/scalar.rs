//! The scalars gatehouse supports, as one table: every layer that treats
//! scalars differently (value checks, storage, filter operators, GraphQL
//! declarations, OpenAPI schemas, REST query parameters) reads its row
//! here. Adding a scalar is one [`Scalar`] variant, one [`ScalarInfo`] row
//! in [`Scalar::info`], and its value code in [`Scalar::check_text`] or
//! [`Scalar::check_number`] when its values are strings or numbers of a new
//! form.

use serde::Serialize;
use serde_json::{Value as Json, json};

use crate::model::FilterOp;

/// The scalars gatehouse supports.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// `Boolean`.
    Boolean,
    /// `Date`: an ISO-8601 calendar date, `YYYY-MM-DD`.
    Date,
    /// `Float`: a finite double.
    Float,
    /// `ID`: an opaque string.
    Id,
    /// `Int`: a signed 32-bit integer.
    Int,
    /// `String`.
    String,
    /// `DateTime`: an instant, RFC 3339 with an offset in, UTC `Z` with
    /// microseconds out.
    DateTime,
    /// `JSON`: any JSON value.
    Json,
}

/// How a scalar's values are stored. The store derives its column types
/// and both database decoders from this (`gatehouse-store`'s `ColType`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Storage {
    /// Text (ordered by bytes on both backends).
    Text,
    /// A 32-bit integer.
    Int,
    /// A double.
    Float,
    /// A boolean (an integer on SQLite).
    Bool,
    /// A calendar date (`DATE` on PostgreSQL, `YYYY-MM-DD` text on SQLite).
    Date,
    /// An instant, as fixed-width UTC text ([`datetime_text`]) on both
    /// backends: text order is instant order.
    DateTime,
    /// Any JSON value (`JSONB` on PostgreSQL, JSON text on SQLite).
    Json,
}

/// How a scalar's values are written in JSON (bodies, variables, rows) and
/// in a REST query parameter's text.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Wire {
    /// A JSON string, checked by [`Scalar::check_text`]; a query parameter
    /// is the text itself.
    Text,
    /// A JSON number holding an integer; a query parameter is its digits.
    Integer,
    /// A JSON number; a query parameter is its decimal text.
    Number,
    /// `true` / `false`.
    Boolean,
    /// Any JSON value; not a query parameter.
    Any,
}

/// Everything the layers need to know of one scalar.
#[derive(Debug, Clone, Copy)]
pub struct ScalarInfo {
    /// The GraphQL name.
    pub name: &'static str,
    /// The type as messages name it (`an Int`, `a Date (YYYY-MM-DD)`).
    pub expected: &'static str,
    /// For a scalar gatehouse declares itself rather than GraphQL: its
    /// description and the URL of its format's specification
    /// (`@specifiedBy`). The loader's built-in declarations and the
    /// executable schema both take them from here.
    pub declaration: Option<(&'static str, &'static str)>,
    /// How values are written in JSON and query parameters.
    pub wire: Wire,
    /// How values are stored.
    pub storage: Storage,
    /// The filter operators a single (non-list) field of this scalar takes.
    pub ops: &'static [FilterOp],
    /// Whether rows can be ordered by a field of this scalar (`orderBy`,
    /// REST `sort`).
    pub orderable: bool,
    /// The OpenAPI (JSON Schema) type of one value.
    pub openapi: fn() -> Json,
}

use FilterOp::*;
/// Equality and sets.
const PLAIN: &[FilterOp] = &[Eq, Not, In, NotIn, IsNull];
/// [`PLAIN`] and the orderings.
const ORDERED: &[FilterOp] = &[Eq, Not, In, NotIn, IsNull, Lt, Lte, Gt, Gte];
/// [`ORDERED`] and the text operators.
const ORDERED_TEXT: &[FilterOp] = &[
    Eq, Not, In, NotIn, IsNull, Lt, Lte, Gt, Gte, Contains, StartsWith, EndsWith,
];
/// [`ORDERED_TEXT`] and the case-insensitive operators (words, not ids).
const WORDS: &[FilterOp] = &[
    Eq,
    Not,
    In,
    NotIn,
    IsNull,
    Lt,
    Lte,
    Gt,
    Gte,
    Contains,
    StartsWith,
    EndsWith,
    IEq,
    IContains,
    IStartsWith,
    IEndsWith,
];

/// Only the null test.
const NULL_ONLY: &[FilterOp] = &[IsNull];

/// The JSON Schema pattern of text: PostgreSQL text cannot hold NUL, so
/// no backend accepts it (ECMA-262 regex).
pub const NO_NUL: &str = "^[^\\u0000]*$";

const BOOLEAN: ScalarInfo = ScalarInfo {
    name: "Boolean",
    expected: "a Boolean",
    declaration: None,
    wire: Wire::Boolean,
    storage: Storage::Bool,
    ops: PLAIN,
    orderable: true,
    openapi: || json!({"type": "boolean"}),
};

const DATE: ScalarInfo = ScalarInfo {
    name: "Date",
    expected: "a Date (YYYY-MM-DD)",
    declaration: Some((
        "An ISO-8601 calendar date, `YYYY-MM-DD`.",
        "https://www.rfc-editor.org/rfc/rfc3339#section-5.6",
    )),
    wire: Wire::Text,
    storage: Storage::Date,
    ops: ORDERED,
    orderable: true,
    openapi: || json!({"type": "string", "format": "date"}),
};

const FLOAT: ScalarInfo = ScalarInfo {
    name: "Float",
    expected: "a Float",
    declaration: None,
    wire: Wire::Number,
    storage: Storage::Float,
    ops: ORDERED,
    orderable: true,
    openapi: || json!({"type": "number", "format": "double"}),
};

const ID: ScalarInfo = ScalarInfo {
    name: "ID",
    expected: "an ID (string)",
    declaration: None,
    wire: Wire::Text,
    storage: Storage::Text,
    ops: ORDERED_TEXT,
    orderable: true,
    openapi: || json!({"type": "string", "pattern": NO_NUL}),
};

const INT: ScalarInfo = ScalarInfo {
    name: "Int",
    expected: "an Int",
    declaration: None,
    wire: Wire::Integer,
    storage: Storage::Int,
    ops: ORDERED,
    orderable: true,
    openapi: || {
        json!({
            "type": "integer", "format": "int32",
            "minimum": i32::MIN, "maximum": i32::MAX
        })
    },
};

const STRING: ScalarInfo = ScalarInfo {
    name: "String",
    expected: "a String",
    declaration: None,
    wire: Wire::Text,
    storage: Storage::Text,
    ops: WORDS,
    orderable: true,
    openapi: || json!({"type": "string", "pattern": NO_NUL}),
};

const DATETIME: ScalarInfo = ScalarInfo {
    name: "DateTime",
    expected: "a DateTime (RFC 3339 with an offset, e.g. 2026-11-27T16:00:00+01:00)",
    declaration: Some((
        "An instant: RFC 3339 with an offset in, UTC `Z` with microseconds out (`2026-11-27T16:00:00.000000Z`).",
        "https://www.rfc-editor.org/rfc/rfc3339#section-5.6",
    )),
    wire: Wire::Text,
    storage: Storage::DateTime,
    ops: ORDERED,
    orderable: true,
    openapi: || json!({"type": "string", "format": "date-time"}),
};

const JSON: ScalarInfo = ScalarInfo {
    name: "JSON",
    expected: "a JSON value",
    declaration: Some((
        "Any JSON value: an object, an array, a string, a number or a boolean.",
        "https://www.rfc-editor.org/rfc/rfc8259",
    )),
    wire: Wire::Any,
    storage: Storage::Json,
    ops: NULL_ONLY,
    orderable: false,
    openapi: || json!({"description": "Any JSON value."}),
};

impl Scalar {
    /// Every scalar.
    pub const ALL: [Scalar; 8] = [
        Scalar::Boolean,
        Scalar::Date,
        Scalar::Float,
        Scalar::Id,
        Scalar::Int,
        Scalar::String,
        Scalar::DateTime,
        Scalar::Json,
    ];

    /// The scalar's row of the table.
    pub fn info(self) -> &'static ScalarInfo {
        match self {
            Scalar::Boolean => &BOOLEAN,
            Scalar::Date => &DATE,
            Scalar::Float => &FLOAT,
            Scalar::Id => &ID,
            Scalar::Int => &INT,
            Scalar::String => &STRING,
            Scalar::DateTime => &DATETIME,
            Scalar::Json => &JSON,
        }
    }

    /// Parses a GraphQL scalar name.
    pub fn from_graphql(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.info().name == name)
    }

    /// The GraphQL name.
    pub fn graphql_name(self) -> &'static str {
        self.info().name
    }

    /// The type as messages name it (`an Int`, `a Date (YYYY-MM-DD)`).
    pub fn expected(self) -> &'static str {
        self.info().expected
    }

    /// See [`ScalarInfo::declaration`].
    pub fn custom_declaration(self) -> Option<(&'static str, &'static str)> {
        self.info().declaration
    }

    /// Whether gatehouse declares the scalar itself (`Date`) rather than
    /// GraphQL: the executable schema checks its values with
    /// [`crate::ValueType::check`], in input and output alike.
    pub fn is_custom(self) -> bool {
        self.custom_declaration().is_some()
    }
}

/// The one rule for `Date` values: a strict ISO-8601 calendar date `YYYY-MM-DD` that exists (leap years included).
pub fn valid_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        let mut n = 0u32;
        for &c in &b[r] {
            if !c.is_ascii_digit() {
                return None;
            }
            n = n * 10 + u32::from(c - b'0');
        }
        Some(n)
    };
    let (Some(y), Some(m), Some(d)) = (digits(0..4), digits(5..7), digits(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// How a `DateTime` is written, in output and in storage: UTC with six
/// fractional digits and `Z` (`2026-11-27T16:00:00.000000Z`). Fixed width
/// (years 0001-9999), so text order is instant order on both backends.
const DATETIME_OUT: &[time::format_description::BorrowedFormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
);

/// The canonical `DateTime` text of `s` (RFC 3339 with an offset, any
/// precision up to nanoseconds), or `None` when `s` is not one. Sub-
/// microsecond digits are cut, not rounded: an instant never moves later.
pub fn parse_datetime(s: &str) -> Option<String> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    let micros = t.unix_timestamp_nanos().div_euclid(1_000);
    let micros = i64::try_from(micros).ok()?;
    let text = datetime_text(micros);
    // Outside years 0001-9999 once in UTC: refused rather than clamped.
    (datetime_text_micros(&text) == Some(micros)).then_some(text)
}

/// Microseconds since the Unix epoch of a canonical `DateTime` text.
fn datetime_text_micros(text: &str) -> Option<i64> {
    let t = time::PrimitiveDateTime::parse(text, DATETIME_OUT).ok()?;
    i64::try_from(t.assume_utc().unix_timestamp_nanos() / 1_000).ok()
}

/// The canonical `DateTime` text of an instant given as microseconds since
/// the Unix epoch (clamped to years 0001-9999).
pub fn datetime_text(micros: i64) -> String {
    const MIN: i64 = -62_135_596_800_000_000; // 0001-01-01T00:00:00Z
    const MAX: i64 = 253_402_300_799_999_999; // 9999-12-31T23:59:59.999999Z
    let nanos = i128::from(micros.clamp(MIN, MAX)) * 1_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(DATETIME_OUT).ok())
        .unwrap_or_default()
}
