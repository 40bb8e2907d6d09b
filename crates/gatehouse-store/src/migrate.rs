//! Tables derived from the Model: the recorded layout, the plan between the
//! recorded layout and the Model, and applying it in one transaction.
//!
//! DDL is written here by hand rather than with sea-query's schema builders:
//! it needs per-dialect column clauses (`COLLATE "C"` on PostgreSQL text),
//! foreign keys added after every table exists (PostgreSQL) and SQLite table
//! rebuilds, which the builders do not model. Every identifier comes from the
//! Model (validated GraphQL names) and is quoted; no user value is ever part
//! of DDL.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use gatehouse_schema::{EntityId, FieldKind, Model, ValueType};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::StoreError;
use crate::value::{ColType, Dialect, SqlKind};
use gatehouse_db::{Built, Conn};

/// The internal table recording applied layouts (the `_gatehouse` prefix is reserved).
pub(crate) const SCHEMA_TABLE: &str = "_gatehouse_schema";
/// PostgreSQL: change events too large for a NOTIFY payload.
pub(crate) const EVENTS_TABLE: &str = "_gatehouse_events";

/// The stored layout: what tables and columns exist, as derived from a Model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    /// Tables in Model order.
    pub tables: Vec<TableLayout>,
    /// Values of the enums that stored columns use.
    pub enums: BTreeMap<String, Vec<String>>,
}

/// One entity's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableLayout {
    /// Entity (GraphQL type) name.
    pub entity: String,
    /// Table name.
    pub table: String,
    /// Columns, `id` first.
    pub columns: Vec<ColumnLayout>,
    /// `@renamed(from:)` on the type: the table it was stored in before.
    /// Read from the Model, never recorded.
    #[serde(skip)]
    pub renamed_from: Option<String>,
    /// `@unique(fields:)` on the type: the columns of each composite key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unique_keys: Vec<Vec<String>>,
}

/// One column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnLayout {
    /// GraphQL field name.
    pub field: String,
    /// Column name.
    pub column: String,
    /// What it holds.
    pub ty: ColType,
    /// NOT NULL.
    pub required: bool,
    /// Has a unique index.
    pub unique: bool,
    /// Has a plain index (to-one references always do, unless unique).
    pub index: bool,
    /// Also unique without regard to case (the account type's `email`):
    /// a unique index on the case-folded value, besides the column's own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub folded: bool,
    /// Set by the server (`@createdAt`, `@updatedAt`): when the column is
    /// added, existing rows get the migration's time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stamped: bool,
    /// `@renamed(from:)` on the field: the column it was stored in before.
    /// Read from the Model, never recorded.
    #[serde(skip)]
    pub renamed_from: Option<String>,
}

impl ColumnLayout {
    fn index_kind(&self) -> Option<bool> {
        if matches!(self.ty, ColType::Id) {
            None
        } else if self.unique {
            Some(true)
        } else if self.index || matches!(self.ty, ColType::Ref(_)) {
            Some(false)
        } else {
            None
        }
    }
}

impl TableLayout {
    fn column(&self, name: &str) -> Option<&ColumnLayout> {
        self.columns.iter().find(|c| c.column == name)
    }
}

impl Layout {
    /// The layout the Model asks for.
    pub fn from_model(model: &Model) -> Layout {
        let mut enums = BTreeMap::new();
        let tables = model
            .entities
            .iter()
            .enumerate()
            .map(|(i, e)| TableLayout {
                entity: e.name.clone(),
                table: e.table.clone(),
                columns: e
                    .stored_fields()
                    .filter_map(|f| {
                        let ty = ColType::of(model, f)?;
                        if let FieldKind::Value {
                            ty: ValueType::Enum(name),
                            ..
                        } = &f.kind
                            && let Some(def) = model.enum_def(name)
                        {
                            enums.insert(name.clone(), def.values.clone());
                        }
                        Some(ColumnLayout {
                            field: f.name.clone(),
                            column: f.column.clone(),
                            ty,
                            required: f.required || matches!(f.kind, FieldKind::Id),
                            unique: f.unique && !matches!(f.kind, FieldKind::Id),
                            index: f.index,
                            folded: model
                                .account
                                .as_ref()
                                .is_some_and(|a| a.unique_folded(EntityId::from_index(i), &f.name)),
                            stamped: f.is_timestamp(),
                            renamed_from: f.renamed_from.as_ref().map(|r| r.sql.clone()),
                        })
                    })
                    .collect(),
                renamed_from: e.renamed_from.as_ref().map(|r| r.sql.clone()),
                unique_keys: e.unique_keys.iter().map(|k| k.columns.clone()).collect(),
            })
            .collect();
        Layout { tables, enums }
    }

    fn table(&self, name: &str) -> Option<&TableLayout> {
        self.tables.iter().find(|t| t.table == name)
    }

    fn table_mut(&mut self, name: &str) -> Option<&mut TableLayout> {
        self.tables.iter_mut().find(|t| t.table == name)
    }
}

/// One step of a migration plan. `Display` prints it for `gatehouse migrate --plan`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationStep {
    /// `@renamed(from:)` on a type: rename its table, keeping the rows, the
    /// indexes and the references from other tables.
    RenameTable {
        /// Table name before.
        from: String,
        /// Table name after.
        to: String,
    },
    /// `@renamed(from:)` on a field: rename its column, keeping the values
    /// and the index (and the foreign key of a to-one reference).
    RenameColumn {
        /// Table name (after any rename of the table).
        table: String,
        /// Column name before.
        from: String,
        /// Column name after.
        to: String,
    },
    /// `@renamed(from:)` names neither an existing table or column nor is
    /// the new one there yet: nothing is renamed, the new one is added by
    /// the steps that follow (no DDL of its own).
    NothingToRename {
        /// Table name (the new one for a type).
        table: String,
        /// Column name, for a field.
        column: Option<String>,
        /// The table or column name `@renamed` gave.
        from: String,
    },
    /// Create a table for a new entity (with its indexes).
    CreateTable {
        /// Table name.
        table: String,
    },
    /// Add a column. Destructive when it is required and the table has rows
    /// (they get a placeholder value: 0, "", false, 1970-01-01, the first enum value, []).
    AddColumn {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
        /// Column type.
        ty: ColType,
        /// NOT NULL.
        required: bool,
        /// The table has rows that need a value.
        table_has_rows: bool,
        /// Existing rows get the migration's time (`@createdAt`,
        /// `@updatedAt`), not a placeholder: not destructive.
        stamped: bool,
    },
    /// Create an index.
    CreateIndex {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
        /// A unique index.
        unique: bool,
    },
    /// Create the unique index of a composite key (`@unique(fields:)`).
    /// Refused, with the first duplicate named, when existing rows already
    /// share a combination.
    CreateUniqueKey {
        /// Table name.
        table: String,
        /// The key's columns.
        columns: Vec<String>,
    },
    /// Create the unique index of a column's case-folded value (the
    /// account type's `email`). Refused, naming the column, when existing
    /// rows already hold values that differ only by case.
    CreateFoldedKey {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
    },
    /// Drop the unique index of a column's case-folded value (no data is
    /// lost).
    DropFoldedKey {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
    },
    /// Drop the unique index of a composite key (no data is lost).
    DropUniqueKey {
        /// Table name.
        table: String,
        /// The key's columns.
        columns: Vec<String>,
    },
    /// Drop an index (no data is lost).
    DropIndex {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
        /// A unique index.
        unique: bool,
    },
    /// Allow a required column to be null (no data is lost).
    SetOptional {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
    },
    /// A new enum value (no DDL: enums are stored as text and validated by the store).
    AddEnumValue {
        /// Enum name.
        name: String,
        /// New value.
        value: String,
    },
    /// Destructive: drop a table and its rows.
    DropTable {
        /// Table name.
        table: String,
    },
    /// Destructive: drop a column and its values.
    DropColumn {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
    },
    /// Destructive: convert a column to another type (values may not convert).
    ChangeType {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
        /// Old type.
        from: ColType,
        /// New type.
        to: ColType,
    },
    /// Destructive: make a nullable column required (fails if a row holds null).
    SetRequired {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
    },
    /// Destructive: an enum value is gone (rows may still hold it).
    RemoveEnumValue {
        /// Enum name.
        name: String,
        /// Removed value.
        value: String,
    },
}

impl MigrationStep {
    /// Whether the step can lose or reject existing data.
    pub fn is_destructive(&self) -> bool {
        match self {
            MigrationStep::AddColumn {
                required,
                table_has_rows,
                stamped,
                ..
            } => *required && *table_has_rows && !*stamped,
            MigrationStep::DropTable { .. }
            | MigrationStep::DropColumn { .. }
            | MigrationStep::ChangeType { .. }
            | MigrationStep::SetRequired { .. }
            | MigrationStep::RemoveEnumValue { .. } => true,
            MigrationStep::CreateTable { .. }
            | MigrationStep::CreateIndex { .. }
            | MigrationStep::DropIndex { .. }
            | MigrationStep::CreateUniqueKey { .. }
            | MigrationStep::DropUniqueKey { .. }
            | MigrationStep::CreateFoldedKey { .. }
            | MigrationStep::DropFoldedKey { .. }
            | MigrationStep::SetOptional { .. }
            | MigrationStep::AddEnumValue { .. }
            | MigrationStep::RenameTable { .. }
            | MigrationStep::RenameColumn { .. }
            | MigrationStep::NothingToRename { .. } => false,
        }
    }

    fn table(&self) -> Option<&str> {
        match self {
            MigrationStep::CreateTable { table }
            | MigrationStep::AddColumn { table, .. }
            | MigrationStep::CreateIndex { table, .. }
            | MigrationStep::DropIndex { table, .. }
            | MigrationStep::CreateUniqueKey { table, .. }
            | MigrationStep::DropUniqueKey { table, .. }
            | MigrationStep::CreateFoldedKey { table, .. }
            | MigrationStep::DropFoldedKey { table, .. }
            | MigrationStep::SetOptional { table, .. }
            | MigrationStep::DropTable { table }
            | MigrationStep::DropColumn { table, .. }
            | MigrationStep::ChangeType { table, .. }
            | MigrationStep::SetRequired { table, .. } => Some(table),
            // Renames run before every other step, whatever the table.
            MigrationStep::AddEnumValue { .. }
            | MigrationStep::RemoveEnumValue { .. }
            | MigrationStep::RenameTable { .. }
            | MigrationStep::RenameColumn { .. }
            | MigrationStep::NothingToRename { .. } => None,
        }
    }
}

impl fmt::Display for MigrationStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = if self.is_destructive() {
            "DESTRUCTIVE "
        } else {
            ""
        };
        f.write_str(mark)?;
        match self {
            MigrationStep::RenameTable { from, to } => {
                write!(f, "rename table {from} to {to} (rows kept)")
            }
            MigrationStep::RenameColumn { table, from, to } => {
                write!(
                    f,
                    "rename column {table}.{from} to {table}.{to} (values kept)"
                )
            }
            MigrationStep::NothingToRename {
                table,
                column: None,
                from,
            } => write!(
                f,
                "nothing to rename: no table {from}, so table {table} is created"
            ),
            MigrationStep::NothingToRename {
                table,
                column: Some(column),
                from,
            } => write!(
                f,
                "nothing to rename: no column {table}.{from}, so {table}.{column} is added"
            ),
            MigrationStep::CreateTable { table } => write!(f, "create table {table}"),
            MigrationStep::AddColumn {
                table,
                column,
                ty,
                required,
                table_has_rows,
                stamped,
            } => {
                write!(f, "add column {table}.{column} ({ty}")?;
                f.write_str(if *required {
                    ", required)"
                } else {
                    ", nullable)"
                })?;
                if *stamped {
                    f.write_str(": existing rows get the migration's time")?;
                } else if *required && *table_has_rows {
                    f.write_str(": existing rows get a placeholder value")?;
                }
                Ok(())
            }
            MigrationStep::CreateIndex {
                table,
                column,
                unique,
            } => {
                let u = if *unique { "unique " } else { "" };
                write!(f, "create {u}index on {table}.{column}")
            }
            MigrationStep::DropIndex {
                table,
                column,
                unique,
            } => {
                let u = if *unique { "unique " } else { "" };
                write!(f, "drop {u}index on {table}.{column}")
            }
            MigrationStep::CreateUniqueKey { table, columns } => {
                write!(f, "create unique index on {table} ({})", columns.join(", "))
            }
            MigrationStep::DropUniqueKey { table, columns } => {
                write!(f, "drop unique index on {table} ({})", columns.join(", "))
            }
            MigrationStep::CreateFoldedKey { table, column } => {
                write!(
                    f,
                    "create unique index on {table}.{column} without regard to case"
                )
            }
            MigrationStep::DropFoldedKey { table, column } => {
                write!(
                    f,
                    "drop unique index on {table}.{column} without regard to case"
                )
            }
            MigrationStep::SetOptional { table, column } => {
                write!(f, "make {table}.{column} nullable")
            }
            MigrationStep::AddEnumValue { name, value } => {
                write!(f, "add value {value} to enum {name}")
            }
            MigrationStep::DropTable { table } => write!(f, "drop table {table} and all its rows"),
            MigrationStep::DropColumn { table, column } => {
                write!(f, "drop column {table}.{column} and its values")
            }
            MigrationStep::ChangeType {
                table,
                column,
                from,
                to,
            } => {
                write!(f, "change type of {table}.{column} from {from} to {to}")
            }
            MigrationStep::SetRequired { table, column } => {
                write!(
                    f,
                    "make {table}.{column} required (fails if a row holds null)"
                )
            }
            MigrationStep::RemoveEnumValue { name, value } => {
                write!(
                    f,
                    "remove value {value} from enum {name} (rows may still hold it)"
                )
            }
        }
    }
}

/// The renames `new` asks for (`@renamed`) and `old` as it is once they are
/// done: tables and columns under their new names, references to renamed
/// tables following them. The rest of the plan runs from that layout.
/// Refuses a rename whose old and new names both exist.
pub(crate) fn renames(
    old: &Layout,
    new: &Layout,
) -> Result<(Vec<MigrationStep>, Layout), StoreError> {
    let mut steps = Vec::new();
    let mut out = old.clone();
    let mut moved: BTreeMap<String, String> = BTreeMap::new();
    for t in &new.tables {
        let Some(from) = &t.renamed_from else {
            continue;
        };
        match (old.table(from).is_some(), old.table(&t.table).is_some()) {
            (true, true) => {
                return Err(StoreError::conflict(format!(
                    "cannot rename table {from} to {to} (type {entity} is @renamed(from:)): both tables exist; drop or empty one of them by hand, or remove @renamed",
                    to = t.table,
                    entity = t.entity,
                )));
            }
            (true, false) => {
                steps.push(MigrationStep::RenameTable {
                    from: from.clone(),
                    to: t.table.clone(),
                });
                moved.insert(from.clone(), t.table.clone());
            }
            (false, false) => steps.push(MigrationStep::NothingToRename {
                table: t.table.clone(),
                column: None,
                from: from.clone(),
            }),
            // Already applied.
            (false, true) => {}
        }
    }
    for t in &mut out.tables {
        if let Some(to) = moved.get(&t.table) {
            t.table = to.clone();
            if let Some(n) = new.table(to) {
                t.entity = n.entity.clone();
            }
        }
        for c in &mut t.columns {
            if let ColType::Ref(target) = &mut c.ty
                && let Some(to) = moved.get(target)
            {
                *target = to.clone();
            }
        }
    }
    for t in &new.tables {
        let Some(o) = out.table_mut(&t.table) else {
            continue;
        };
        for c in &t.columns {
            let Some(from) = &c.renamed_from else {
                continue;
            };
            let has_old = o.column(from).is_some();
            let has_new = o.column(&c.column).is_some();
            match (has_old, has_new) {
                (true, true) => {
                    return Err(StoreError::conflict(format!(
                        "cannot rename column {table}.{from} to {table}.{to} ({entity}.{field} is @renamed(from:)): both columns exist; drop one of them by hand, or remove @renamed",
                        table = t.table,
                        to = c.column,
                        entity = t.entity,
                        field = c.field,
                    )));
                }
                (true, false) => {
                    steps.push(MigrationStep::RenameColumn {
                        table: t.table.clone(),
                        from: from.clone(),
                        to: c.column.clone(),
                    });
                    if let Some(oc) = o.columns.iter_mut().find(|oc| &oc.column == from) {
                        oc.column = c.column.clone();
                        oc.field = c.field.clone();
                    }
                }
                (false, false) => steps.push(MigrationStep::NothingToRename {
                    table: t.table.clone(),
                    column: Some(c.column.clone()),
                    from: from.clone(),
                }),
                (false, true) => {}
            }
        }
    }
    Ok((steps, out))
}

/// The table `table` (a name of the new layout) is stored in before `steps`.
pub(crate) fn table_before<'a>(steps: &'a [MigrationStep], table: &'a str) -> &'a str {
    steps
        .iter()
        .find_map(|s| match s {
            MigrationStep::RenameTable { from, to } if to == table => Some(from.as_str()),
            _ => None,
        })
        .unwrap_or(table)
}

/// The steps from `old` to `new`. `has_rows` tells whether a table has rows.
pub(crate) fn plan(
    old: &Layout,
    new: &Layout,
    has_rows: &dyn Fn(&str) -> bool,
) -> Vec<MigrationStep> {
    let mut steps = Vec::new();
    let mut index_steps = Vec::new();
    for t in &new.tables {
        let Some(o) = old.table(&t.table) else {
            steps.push(MigrationStep::CreateTable {
                table: t.table.clone(),
            });
            continue;
        };
        for c in &t.columns {
            let table = t.table.clone();
            let column = c.column.clone();
            match o.column(&c.column) {
                None => {
                    steps.push(MigrationStep::AddColumn {
                        table: table.clone(),
                        column: column.clone(),
                        ty: c.ty.clone(),
                        required: c.required,
                        table_has_rows: c.required && has_rows(&t.table),
                        stamped: c.stamped,
                    });
                    if c.folded {
                        index_steps.push(MigrationStep::CreateFoldedKey {
                            table: table.clone(),
                            column: column.clone(),
                        });
                    }
                    if let Some(unique) = c.index_kind() {
                        index_steps.push(MigrationStep::CreateIndex {
                            table,
                            column,
                            unique,
                        });
                    }
                }
                Some(oc) => {
                    if oc.ty != c.ty {
                        steps.push(MigrationStep::ChangeType {
                            table: table.clone(),
                            column: column.clone(),
                            from: oc.ty.clone(),
                            to: c.ty.clone(),
                        });
                    }
                    if oc.required != c.required {
                        steps.push(if c.required {
                            MigrationStep::SetRequired {
                                table: table.clone(),
                                column: column.clone(),
                            }
                        } else {
                            MigrationStep::SetOptional {
                                table: table.clone(),
                                column: column.clone(),
                            }
                        });
                    }
                    if oc.folded != c.folded {
                        index_steps.push(if c.folded {
                            MigrationStep::CreateFoldedKey {
                                table: table.clone(),
                                column: column.clone(),
                            }
                        } else {
                            MigrationStep::DropFoldedKey {
                                table: table.clone(),
                                column: column.clone(),
                            }
                        });
                    }
                    if oc.index_kind() != c.index_kind() {
                        if let Some(unique) = oc.index_kind() {
                            index_steps.push(MigrationStep::DropIndex {
                                table: table.clone(),
                                column: column.clone(),
                                unique,
                            });
                        }
                        if let Some(unique) = c.index_kind() {
                            index_steps.push(MigrationStep::CreateIndex {
                                table,
                                column,
                                unique,
                            });
                        }
                    }
                }
            }
        }
        for oc in &o.columns {
            if t.column(&oc.column).is_none() {
                steps.push(MigrationStep::DropColumn {
                    table: t.table.clone(),
                    column: oc.column.clone(),
                });
            }
        }
        for k in o.unique_keys.iter().filter(|k| !t.unique_keys.contains(k)) {
            index_steps.push(MigrationStep::DropUniqueKey {
                table: t.table.clone(),
                columns: k.clone(),
            });
        }
        for k in t.unique_keys.iter().filter(|k| !o.unique_keys.contains(k)) {
            index_steps.push(MigrationStep::CreateUniqueKey {
                table: t.table.clone(),
                columns: k.clone(),
            });
        }
    }
    steps.extend(index_steps);
    for (name, values) in &new.enums {
        if let Some(old_values) = old.enums.get(name) {
            for v in values {
                if !old_values.contains(v) {
                    steps.push(MigrationStep::AddEnumValue {
                        name: name.clone(),
                        value: v.clone(),
                    });
                }
            }
            for v in old_values {
                if !values.contains(v) {
                    steps.push(MigrationStep::RemoveEnumValue {
                        name: name.clone(),
                        value: v.clone(),
                    });
                }
            }
        }
    }
    for o in &old.tables {
        if new.table(&o.table).is_none() {
            steps.push(MigrationStep::DropTable {
                table: o.table.clone(),
            });
        }
    }
    steps
}

pub(crate) use gatehouse_db::q;

fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn index_name(table: &str, column: &str, unique: bool) -> String {
    format!("{table}_{column}_{}", if unique { "key" } else { "idx" })
}

fn fk_name(table: &str, column: &str) -> String {
    format!("{table}_{column}_fkey")
}

/// What existing rows get in a new column `c`, if anything: the
/// migration's time (`now`) for a stamped column, a placeholder for a
/// required one, nothing (NULL) otherwise.
fn fill_sql(model: &Model, c: &ColumnLayout, dialect: Dialect, now: &str) -> Option<String> {
    if c.stamped {
        Some(lit(now))
    } else if c.required {
        placeholder_sql(model, &c.ty, dialect)
    } else {
        None
    }
}

fn placeholder_sql(model: &Model, ty: &ColType, dialect: Dialect) -> Option<String> {
    let first = match ty {
        ColType::Enum(n) => model
            .enum_def(n)
            .and_then(|e| e.values.first())
            .map(String::as_str),
        _ => None,
    };
    let v = ty.placeholder(first)?;
    Some(match (ty.kind(), &v) {
        (SqlKind::Bool, Json::Bool(b)) if dialect == Dialect::Postgres => b.to_string(),
        (SqlKind::Bool, Json::Bool(b)) => u8::from(*b).to_string(),
        (SqlKind::Int | SqlKind::Float | SqlKind::Count, n) => n.to_string(),
        (SqlKind::Json, v) => lit(&v.to_string()),
        (_, Json::String(s)) => lit(s),
        (_, v) => lit(&v.to_string()),
    })
}

fn column_def(c: &ColumnLayout, dialect: Dialect, inline_fk: bool) -> String {
    let mut s = format!("{} {}", q(&c.column), c.ty.sql_type(dialect));
    if matches!(c.ty, ColType::Id) {
        s.push_str(" PRIMARY KEY NOT NULL");
    } else if c.required {
        s.push_str(" NOT NULL");
    }
    if inline_fk && let ColType::Ref(target) = &c.ty {
        s.push_str(&format!(
            " REFERENCES {}({}) ON DELETE RESTRICT",
            q(target),
            q("id")
        ));
    }
    s
}

fn create_table_sql(t: &TableLayout, name: &str, dialect: Dialect) -> String {
    let cols: Vec<String> = t
        .columns
        .iter()
        .map(|c| column_def(c, dialect, dialect == Dialect::Sqlite))
        .collect();
    format!("CREATE TABLE {} ({})", q(name), cols.join(", "))
}

/// A plain index also holds `id`: the default order is by id, so "rows with
/// X = v, first page" (and a to-many batch) reads the index in order instead
/// of sorting every match.
fn create_index_sql(table: &str, column: &str, unique: bool) -> String {
    let cols = if unique {
        q(column)
    } else {
        format!("{}, {}", q(column), q("id"))
    };
    format!(
        "CREATE {}INDEX IF NOT EXISTS {} ON {} ({cols})",
        if unique { "UNIQUE " } else { "" },
        q(&index_name(table, column, unique)),
        q(table),
    )
}

/// The name of a composite key's unique index (as `UniqueKey::index_name`).
fn key_name(table: &str, columns: &[String]) -> String {
    format!("{table}_{}_ukey", columns.join("_"))
}

fn create_key_sql(table: &str, columns: &[String]) -> String {
    let cols: Vec<String> = columns.iter().map(|c| q(c)).collect();
    format!(
        "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({})",
        q(&key_name(table, columns)),
        q(table),
        cols.join(", ")
    )
}

/// The name of a column's case-folded unique index.
pub(crate) fn folded_key_name(table: &str, column: &str) -> String {
    format!("{table}_{column}_ikey")
}

/// `column` case-folded as the case-insensitive filters fold it
/// (`gatehouse_db::fold_case`: the registered function on SQLite,
/// `lower()` under `C.utf8` on PostgreSQL), so the index and `_ieq`
/// agree on what "the same address" is.
fn folded(column: &str, dialect: Dialect) -> String {
    match dialect {
        Dialect::Sqlite => format!("{}({})", gatehouse_db::FOLD_FUNCTION, q(column)),
        Dialect::Postgres => format!("lower({} COLLATE \"C.utf8\")", q(column)),
    }
}

fn create_folded_key_sql(table: &str, column: &str, dialect: Dialect) -> String {
    format!(
        "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({})",
        q(&folded_key_name(table, column)),
        q(table),
        folded(column, dialect)
    )
}

/// The indexes of a table made whole: its columns' and its keys'.
fn table_index_sqls(t: &TableLayout, table: &str, dialect: Dialect) -> Vec<String> {
    let mut out: Vec<String> = t
        .columns
        .iter()
        .filter_map(|c| Some(create_index_sql(table, &c.column, c.index_kind()?)))
        .collect();
    out.extend(
        t.columns
            .iter()
            .filter(|c| c.folded)
            .map(|c| create_folded_key_sql(table, &c.column, dialect)),
    );
    out.extend(t.unique_keys.iter().map(|k| create_key_sql(table, k)));
    out
}

/// A statement finding rows that share a combination of `columns` (none
/// of them null: a key with a null part never clashes), for refusing a
/// composite key that existing rows would violate.
pub(crate) fn duplicate_key_sql(table: &str, columns: &[String]) -> String {
    let cols: Vec<String> = columns.iter().map(|c| q(c)).collect();
    let not_null: Vec<String> = cols.iter().map(|c| format!("{c} IS NOT NULL")).collect();
    format!(
        "SELECT 1 FROM {} WHERE {} GROUP BY {} HAVING COUNT(*) > 1 LIMIT 1",
        q(table),
        not_null.join(" AND "),
        cols.join(", ")
    )
}

/// The statement of an index step.
fn index_step_sql(step: &MigrationStep, dialect: Dialect) -> Option<String> {
    match step {
        MigrationStep::CreateFoldedKey { table, column } => {
            Some(create_folded_key_sql(table, column, dialect))
        }
        MigrationStep::DropFoldedKey { table, column } => Some(format!(
            "DROP INDEX IF EXISTS {}",
            q(&folded_key_name(table, column))
        )),
        MigrationStep::CreateUniqueKey { table, columns } => Some(create_key_sql(table, columns)),
        MigrationStep::DropUniqueKey { table, columns } => Some(format!(
            "DROP INDEX IF EXISTS {}",
            q(&key_name(table, columns))
        )),
        MigrationStep::CreateIndex {
            table,
            column,
            unique,
        } => Some(create_index_sql(table, column, *unique)),
        MigrationStep::DropIndex {
            table,
            column,
            unique,
        } => Some(format!(
            "DROP INDEX IF EXISTS {}",
            q(&index_name(table, column, *unique))
        )),
        _ => None,
    }
}

fn add_fk_sql(table: &str, column: &str, target: &str) -> String {
    format!(
        "ALTER TABLE {} ADD CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {}({}) ON DELETE RESTRICT",
        q(table),
        q(&fk_name(table, column)),
        q(column),
        q(target),
        q("id")
    )
}

/// Creates the internal tables when missing.
pub(crate) async fn ensure_internal(
    conn: &mut Conn<'_>,
    dialect: Dialect,
) -> Result<(), gatehouse_db::Error> {
    conn.ddl(&format!(
        "CREATE TABLE IF NOT EXISTS {} (version BIGINT PRIMARY KEY NOT NULL, layout TEXT NOT NULL, applied_at TEXT NOT NULL)",
        q(SCHEMA_TABLE)
    ))
    .await?;
    if dialect == Dialect::Postgres {
        conn.ddl(&format!(
            "CREATE TABLE IF NOT EXISTS {} (id BIGSERIAL PRIMARY KEY, payload TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            q(EVENTS_TABLE)
        ))
        .await?;
    }
    Ok(())
}

/// The last recorded layout and its version (empty and 0 when none).
pub(crate) async fn recorded(conn: &mut Conn<'_>) -> Result<(Layout, u64), StoreError> {
    let rows = conn
        .fetch(
            Built::raw(
                format!(
                    "SELECT version, layout FROM {} ORDER BY version DESC LIMIT 1",
                    q(SCHEMA_TABLE)
                ),
                vec![],
            ),
            &[SqlKind::Count, SqlKind::Text],
        )
        .await
        .map_err(crate::error::from_db)?;
    let Some(row) = rows.into_iter().next() else {
        return Ok((Layout::default(), 0));
    };
    let version = row.first().and_then(Json::as_u64).unwrap_or(0);
    let text = row.get(1).and_then(Json::as_str).unwrap_or("{}");
    let layout = serde_json::from_str(text).map_err(StoreError::internal)?;
    Ok((layout, version))
}

/// Whether `table` has at least one row.
pub(crate) async fn has_rows(conn: &mut Conn<'_>, table: &str) -> Result<bool, StoreError> {
    let rows = conn
        .fetch(
            Built::raw(format!("SELECT 1 FROM {} LIMIT 1", q(table)), vec![]),
            &[],
        )
        .await
        .map_err(crate::error::from_db)?;
    Ok(!rows.is_empty())
}

/// Refuses a plan that adds a composite unique key existing rows already
/// violate, naming the key: checked before any step runs, so the database
/// is left as it was. (A key over a column the same plan adds or renames is
/// checked by the database when the index is made.)
pub(crate) async fn check_new_keys(
    conn: &mut Conn<'_>,
    dialect: Dialect,
    steps: &[MigrationStep],
    recorded: &Layout,
) -> Result<(), StoreError> {
    for step in steps {
        if let MigrationStep::CreateFoldedKey { table, column } = step {
            let before = table_before(steps, table);
            let Some(c) = recorded.table(before).and_then(|t| t.column(column)) else {
                continue;
            };
            let entity = recorded.table(before).map_or("", |t| t.entity.as_str());
            let sql = format!(
                "SELECT 1 FROM {} WHERE {} IS NOT NULL GROUP BY {} HAVING COUNT(*) > 1 LIMIT 1",
                q(before),
                q(column),
                folded(column, dialect)
            );
            let rows = conn
                .fetch(Built::raw(sql, vec![]), &[])
                .await
                .map_err(crate::error::from_db)?;
            if !rows.is_empty() {
                return Err(StoreError::conflict(format!(
                    "cannot make {entity}.{} unique without regard to case: existing rows hold values that differ only by case; change the duplicates, then migrate again",
                    c.field
                )));
            }
            continue;
        }
        let MigrationStep::CreateUniqueKey { table, columns } = step else {
            continue;
        };
        let before = table_before(steps, table);
        let Some(t) = recorded.table(before) else {
            continue;
        };
        if !columns.iter().all(|c| t.column(c).is_some()) {
            continue;
        }
        let rows = conn
            .fetch(Built::raw(duplicate_key_sql(before, columns), vec![]), &[])
            .await
            .map_err(crate::error::from_db)?;
        if !rows.is_empty() {
            let fields: Vec<&str> = columns
                .iter()
                .filter_map(|c| t.column(c).map(|c| c.field.as_str()))
                .collect();
            return Err(StoreError::conflict(format!(
                "cannot add the unique key ({}) to {}: existing rows already share values of it; remove or change the duplicates, then migrate again",
                fields.join(", "),
                t.entity
            )));
        }
    }
    Ok(())
}

/// Tables whose rows must be checked before planning (new required columns).
pub(crate) fn tables_needing_row_check(old: &Layout, new: &Layout) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for t in &new.tables {
        if let Some(o) = old.table(&t.table)
            && t.columns
                .iter()
                .any(|c| c.required && o.column(&c.column).is_none())
        {
            out.insert(t.table.clone());
        }
    }
    out
}

/// Applies `steps` (computed from `old`, the `recorded` layout once
/// [`renames`] are done, to `new`) inside the caller's transaction.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn apply(
    conn: &mut Conn<'_>,
    dialect: Dialect,
    model: &Model,
    recorded: &Layout,
    old: &Layout,
    new: &Layout,
    steps: &[MigrationStep],
    now: &str,
) -> Result<(), gatehouse_db::Error> {
    apply_renames(conn, dialect, recorded, old, steps).await?;
    match dialect {
        Dialect::Sqlite => apply_sqlite(conn, model, old, new, steps, now).await,
        Dialect::Postgres => apply_pg(conn, model, new, steps, now).await,
    }
}

/// The rename steps, before every other one: tables, then columns, with
/// the names of their indexes (and on PostgreSQL their primary key and
/// foreign keys) following, so that later steps find them by the new names.
/// Both databases keep other tables' references to a renamed table.
async fn apply_renames(
    conn: &mut Conn<'_>,
    dialect: Dialect,
    recorded: &Layout,
    renamed: &Layout,
    steps: &[MigrationStep],
) -> Result<(), gatehouse_db::Error> {
    for step in steps {
        let MigrationStep::RenameTable { from, to } = step else {
            continue;
        };
        conn.ddl(&format!("ALTER TABLE {} RENAME TO {}", q(from), q(to)))
            .await?;
        if dialect == Dialect::Postgres {
            conn.ddl(&format!(
                "ALTER INDEX IF EXISTS {} RENAME TO {}",
                q(&format!("{from}_pkey")),
                q(&format!("{to}_pkey"))
            ))
            .await?;
        }
        for c in recorded.table(from).map_or(&[][..], |t| &t.columns[..]) {
            rename_names(conn, dialect, c, (from, &c.column), (to, &c.column)).await?;
        }
    }
    for step in steps {
        let MigrationStep::RenameColumn { table, from, to } = step else {
            continue;
        };
        conn.ddl(&format!(
            "ALTER TABLE {} RENAME COLUMN {} TO {}",
            q(table),
            q(from),
            q(to)
        ))
        .await?;
        if let Some(c) = renamed.table(table).and_then(|t| t.column(to)) {
            rename_names(conn, dialect, c, (table, from), (table, to)).await?;
        }
    }
    Ok(())
}

/// Moves the index (and on PostgreSQL the foreign key) of column `c` from
/// the names derived from `before` (table, column) to those from `after`.
async fn rename_names(
    conn: &mut Conn<'_>,
    dialect: Dialect,
    c: &ColumnLayout,
    before: (&str, &str),
    after: (&str, &str),
) -> Result<(), gatehouse_db::Error> {
    if let Some(unique) = c.index_kind() {
        let old_name = index_name(before.0, before.1, unique);
        match dialect {
            Dialect::Postgres => {
                conn.ddl(&format!(
                    "ALTER INDEX IF EXISTS {} RENAME TO {}",
                    q(&old_name),
                    q(&index_name(after.0, after.1, unique))
                ))
                .await?;
            }
            // SQLite cannot rename an index: it is made again under the new name.
            Dialect::Sqlite => {
                conn.ddl(&format!("DROP INDEX IF EXISTS {}", q(&old_name)))
                    .await?;
                conn.ddl(&create_index_sql(after.0, after.1, unique))
                    .await?;
            }
        }
    }
    if c.folded {
        conn.ddl(&format!(
            "DROP INDEX IF EXISTS {}",
            q(&folded_key_name(before.0, before.1))
        ))
        .await?;
        conn.ddl(&create_folded_key_sql(after.0, after.1, dialect))
            .await?;
    }
    if dialect == Dialect::Postgres && matches!(c.ty, ColType::Ref(_)) {
        conn.ddl(&format!(
            "ALTER TABLE {} RENAME CONSTRAINT {} TO {}",
            q(after.0),
            q(&fk_name(before.0, before.1)),
            q(&fk_name(after.0, after.1))
        ))
        .await?;
    }
    Ok(())
}

fn needs_rebuild(step: &MigrationStep) -> bool {
    matches!(
        step,
        MigrationStep::DropColumn { .. }
            | MigrationStep::ChangeType { .. }
            | MigrationStep::SetRequired { .. }
            | MigrationStep::SetOptional { .. }
            | MigrationStep::AddColumn { required: true, .. }
            | MigrationStep::AddColumn { stamped: true, .. }
    )
}

async fn apply_sqlite(
    conn: &mut Conn<'_>,
    model: &Model,
    old: &Layout,
    new: &Layout,
    steps: &[MigrationStep],
    now: &str,
) -> Result<(), gatehouse_db::Error> {
    let d = Dialect::Sqlite;
    // SQLite's ALTER TABLE cannot change a column's type or nullability, nor
    // add a NOT NULL column without a default: such tables are rebuilt
    // (https://sqlite.org/lang_altertable.html#otheralter).
    let rebuild: BTreeSet<&str> = steps
        .iter()
        .filter(|s| needs_rebuild(s))
        .filter_map(MigrationStep::table)
        .collect();
    for step in steps {
        if step.table().is_some_and(|t| rebuild.contains(t)) {
            continue;
        }
        if let Some(sql) = index_step_sql(step, d) {
            conn.ddl(&sql).await?;
            continue;
        }
        match step {
            MigrationStep::CreateTable { table } => {
                if let Some(t) = new.table(table) {
                    conn.ddl(&create_table_sql(t, table, d)).await?;
                    for sql in table_index_sqls(t, table, d) {
                        conn.ddl(&sql).await?;
                    }
                }
            }
            MigrationStep::AddColumn { table, column, .. } => {
                if let Some(c) = new.table(table).and_then(|t| t.column(column)) {
                    conn.ddl(&format!(
                        "ALTER TABLE {} ADD COLUMN {}",
                        q(table),
                        column_def(c, d, true)
                    ))
                    .await?;
                }
            }
            MigrationStep::DropTable { table } => {
                conn.ddl(&format!("DROP TABLE {}", q(table))).await?;
            }
            _ => {}
        }
    }
    for table in rebuild {
        let (Some(o), Some(n)) = (old.table(table), new.table(table)) else {
            continue;
        };
        let tmp = format!("_gatehouse_rebuild_{table}");
        conn.ddl(&create_table_sql(n, &tmp, d)).await?;
        let mut names = Vec::new();
        let mut exprs = Vec::new();
        for c in &n.columns {
            names.push(q(&c.column));
            exprs.push(match o.column(&c.column) {
                Some(oc) if oc.ty == c.ty => q(&c.column),
                Some(_) => format!("CAST({} AS {})", q(&c.column), c.ty.sql_type(d)),
                None => fill_sql(model, c, d, now).unwrap_or_else(|| "NULL".into()),
            });
        }
        conn.ddl(&format!(
            "INSERT INTO {} ({}) SELECT {} FROM {}",
            q(&tmp),
            names.join(", "),
            exprs.join(", "),
            q(table)
        ))
        .await?;
        conn.ddl(&format!("DROP TABLE {}", q(table))).await?;
        conn.ddl(&format!("ALTER TABLE {} RENAME TO {}", q(&tmp), q(table)))
            .await?;
        for sql in table_index_sqls(n, table, d) {
            conn.ddl(&sql).await?;
        }
    }
    Ok(())
}

async fn apply_pg(
    conn: &mut Conn<'_>,
    model: &Model,
    new: &Layout,
    steps: &[MigrationStep],
    now: &str,
) -> Result<(), gatehouse_db::Error> {
    let d = Dialect::Postgres;
    // Foreign keys are added once every table exists, so that tables may
    // reference each other in any order.
    let mut fks: Vec<(String, String, String)> = Vec::new();
    for step in steps {
        if let Some(sql) = index_step_sql(step, d) {
            conn.ddl(&sql).await?;
            continue;
        }
        match step {
            MigrationStep::CreateTable { table } => {
                if let Some(t) = new.table(table) {
                    conn.ddl(&create_table_sql(t, table, d)).await?;
                    for c in &t.columns {
                        if let ColType::Ref(target) = &c.ty {
                            fks.push((table.clone(), c.column.clone(), target.clone()));
                        }
                    }
                    for sql in table_index_sqls(t, table, d) {
                        conn.ddl(&sql).await?;
                    }
                }
            }
            MigrationStep::AddColumn {
                table, column, ty, ..
            } => {
                let Some(c) = new.table(table).and_then(|t| t.column(column)) else {
                    continue;
                };
                match fill_sql(model, c, d, now) {
                    Some(p) => {
                        conn.ddl(&format!(
                            "ALTER TABLE {} ADD COLUMN {} DEFAULT {p}",
                            q(table),
                            column_def(c, d, false)
                        ))
                        .await?;
                        conn.ddl(&format!(
                            "ALTER TABLE {} ALTER COLUMN {} DROP DEFAULT",
                            q(table),
                            q(column)
                        ))
                        .await?;
                    }
                    _ => {
                        conn.ddl(&format!(
                            "ALTER TABLE {} ADD COLUMN {}",
                            q(table),
                            column_def(c, d, false)
                        ))
                        .await?;
                    }
                }
                if let ColType::Ref(target) = ty {
                    fks.push((table.clone(), column.clone(), target.clone()));
                }
            }
            MigrationStep::SetOptional { table, column } => {
                conn.ddl(&format!(
                    "ALTER TABLE {} ALTER COLUMN {} DROP NOT NULL",
                    q(table),
                    q(column)
                ))
                .await?;
            }
            MigrationStep::SetRequired { table, column } => {
                conn.ddl(&format!(
                    "ALTER TABLE {} ALTER COLUMN {} SET NOT NULL",
                    q(table),
                    q(column)
                ))
                .await?;
            }
            MigrationStep::DropColumn { table, column } => {
                conn.ddl(&format!(
                    "ALTER TABLE {} DROP COLUMN {}",
                    q(table),
                    q(column)
                ))
                .await?;
            }
            MigrationStep::ChangeType {
                table,
                column,
                from,
                to,
            } => {
                if matches!(from, ColType::Ref(_)) {
                    conn.ddl(&format!(
                        "ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}",
                        q(table),
                        q(&fk_name(table, column))
                    ))
                    .await?;
                }
                let base = to.sql_type(d).trim_end_matches(" COLLATE \"C\"");
                let using = match (from.kind(), to.kind()) {
                    (SqlKind::Json, SqlKind::Text | SqlKind::Date) => {
                        format!("{} #>> '{{}}'", q(column))
                    }
                    (_, SqlKind::Json) => format!("to_jsonb({})", q(column)),
                    _ => q(column),
                };
                conn.ddl(&format!(
                    "ALTER TABLE {} ALTER COLUMN {} TYPE {} USING ({using})::{base}",
                    q(table),
                    q(column),
                    to.sql_type(d),
                ))
                .await?;
                if let ColType::Ref(target) = to {
                    fks.push((table.clone(), column.clone(), target.clone()));
                }
            }
            MigrationStep::DropTable { table } => {
                conn.ddl(&format!("DROP TABLE {} CASCADE", q(table)))
                    .await?;
            }
            // Index steps ran above; enum values live in the Model only.
            // Renames ran before.
            MigrationStep::CreateIndex { .. }
            | MigrationStep::DropIndex { .. }
            | MigrationStep::CreateUniqueKey { .. }
            | MigrationStep::DropUniqueKey { .. }
            | MigrationStep::CreateFoldedKey { .. }
            | MigrationStep::DropFoldedKey { .. }
            | MigrationStep::AddEnumValue { .. }
            | MigrationStep::RemoveEnumValue { .. }
            | MigrationStep::RenameTable { .. }
            | MigrationStep::RenameColumn { .. }
            | MigrationStep::NothingToRename { .. } => {}
        }
    }
    for (table, column, target) in fks {
        conn.ddl(&add_fk_sql(&table, &column, &target)).await?;
    }
    Ok(())
}

/// The SQL that records `layout` as the applied version `version`, applied
/// at `now` (the store's clock, as text).
pub(crate) fn record_sql(
    dialect: Dialect,
    layout: &Layout,
    version: u64,
    now: &str,
) -> Result<Built, StoreError> {
    let text = serde_json::to_string(layout).map_err(StoreError::internal)?;
    let sql = match dialect {
        Dialect::Sqlite => format!(
            "INSERT INTO {} (version, layout, applied_at) VALUES (?, ?, ?)",
            q(SCHEMA_TABLE)
        ),
        Dialect::Postgres => format!(
            "INSERT INTO {} (version, layout, applied_at) VALUES ($1, $2, $3)",
            q(SCHEMA_TABLE)
        ),
    };
    Ok(Built::raw(
        sql,
        vec![
            sea_query::Value::BigInt(Some(i64::try_from(version).unwrap_or(i64::MAX))),
            sea_query::Value::String(Some(text)),
            sea_query::Value::String(Some(now.to_string())),
        ],
    ))
}
