//! The typed Model: everything later layers (storage, GraphQL, REST) know
//! about the user's schema. It is built once at load time; nothing downstream
//! reads SDL again.

use serde::Serialize;

pub use crate::scalar::{NO_NUL, Scalar, ScalarInfo, Storage, Wire, datetime_text, valid_date};

/// The whole bound schema.
#[derive(Debug, Clone, Serialize)]
pub struct Model {
    /// Stored collections, in declaration order; an [`EntityId`] indexes it.
    pub entities: Vec<Entity>,
    /// Every relation field's relation, a [`RelationId`] indexes it: the
    /// graph of the entities. Names are resolved once, by the loader.
    pub relations: Vec<Relation>,
    /// Enum types declared by the schema (field enums and `orderBy` enums alike).
    pub enums: Vec<EnumDef>,
    /// Input object types declared by the schema (create/update inputs, `where` inputs).
    pub inputs: Vec<InputObject>,
    /// `where` inputs with the entity they filter and the meaning of each field.
    pub where_inputs: Vec<WhereInput>,
    /// `orderBy` enums with the meaning of each value.
    pub order_enums: Vec<OrderEnum>,
    /// Relay connection types (`BookConnection`) with their edge types:
    /// not stored, what a [`Binding::Connection`] root field returns.
    pub connections: Vec<Connection>,
    /// Bulk result types (`BookBulkResult`): not stored, what a
    /// [`Binding::UpdateMany`] or [`Binding::DeleteMany`] root field returns.
    pub bulk_results: Vec<BulkResult>,
    /// Fields of `type Query`.
    pub queries: Vec<RootField>,
    /// Fields of `type Mutation` (empty when there is none).
    pub mutations: Vec<RootField>,
    /// Fields of `type Subscription` (empty when there is none).
    pub subscriptions: Vec<RootField>,
    /// Standalone SDL of the effective schema, built-in declarations included.
    pub sdl: String,
    /// What loading found worth saying that does not stop the schema from
    /// serving (`gatehouse check` prints them).
    #[serde(skip)]
    pub warnings: Vec<crate::Diagnostic>,
    /// The `@account` type, whose rows are the accounts that sign in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<AccountType>,
}

/// The `@account` type: its rows are the accounts that sign in, `sub` is
/// a row's `id`, and fields with these names mean what they say
/// (`docs/design/accounts.md`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AccountType {
    /// The entity.
    pub entity: EntityId,
    /// Whether it declares `email: String @unique`.
    pub email: bool,
    /// Whether it declares `emailVerified: Boolean!` (set by the server).
    pub email_verified: bool,
    /// Whether it declares `disabled: Boolean` (a disabled account cannot
    /// sign in).
    pub disabled: bool,
    /// Whether it declares `displayName: String` (the OpenID `name`).
    pub display_name: bool,
    /// `@claim` fields, in declaration order.
    pub claims: Vec<AccountClaim>,
}

/// A field of the account type whose value tokens carry as a claim.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AccountClaim {
    /// The claim's name (`@claim(name:)`, else the field's).
    pub claim: String,
    /// The field.
    pub field: String,
}

impl AccountType {
    /// The sign-in name field.
    pub const USERNAME: &'static str = "username";
    /// The address the e-mail flows use.
    pub const EMAIL: &'static str = "email";
    /// Whether the address was confirmed.
    pub const EMAIL_VERIFIED: &'static str = "emailVerified";
    /// Whether the account may not sign in.
    pub const DISABLED: &'static str = "disabled";
    /// The name shown for the account (OpenID `name`).
    pub const DISPLAY_NAME: &'static str = "displayName";

    /// Whether `field` of `entity` is unique without regard to case: the
    /// account type's `email` (two accounts never share an address,
    /// whatever case it is written in). The store's migration makes the
    /// index; every writer meets it.
    pub fn unique_folded(&self, entity: EntityId, field: &str) -> bool {
        self.entity == entity && self.email && field == Self::EMAIL
    }

    /// The `@claim` field carrying `claim`.
    pub fn claim_field(&self, claim: &str) -> Option<&str> {
        self.claims
            .iter()
            .find(|c| c.claim == claim)
            .map(|c| c.field.as_str())
    }
}

/// The one field of nested create's links to existing rows of a
/// many-to-many field (`tags: {connect: [ids]}`, [`Model::connect_of`]).
pub const CONNECT: &str = "connect";

impl Model {
    /// The entity called `name`.
    pub fn entity(&self, name: &str) -> Option<&Entity> {
        self.entities.iter().find(|e| e.name == name)
    }

    /// The to-one fields of other entities (or this one) that reference
    /// `target`, with what deleting a `target` row does to their rows.
    pub fn references_to(
        &self,
        target: EntityId,
    ) -> impl Iterator<Item = (FieldId, OnDelete)> + '_ {
        self.relations.iter().filter_map(move |r| match r.kind {
            RelationKind::ManyToOne { on_delete } if r.target == target => {
                Some((r.field, on_delete))
            }
            _ => None,
        })
    }

    /// The id of the entity called `name`: for the edges (loader,
    /// diagnostics, the store's handles by name).
    pub fn entity_id(&self, name: &str) -> Option<EntityId> {
        self.entities
            .iter()
            .position(|e| e.name == name)
            .map(EntityId::from_index)
    }

    /// The entity `id` names.
    pub fn entity_at(&self, id: EntityId) -> &Entity {
        &self.entities[id.index()]
    }

    /// The field `id` names.
    pub fn field_at(&self, id: FieldId) -> &Field {
        &self.entity_at(id.entity).fields[id.index()]
    }

    /// The relation `id` names.
    pub fn relation(&self, id: RelationId) -> &Relation {
        &self.relations[id.index()]
    }

    /// The relation of a relation field; `None` for ids and values.
    pub fn relation_of(&self, field: &Field) -> Option<&Relation> {
        field.relation().map(|r| self.relation(r))
    }

    /// The entity a relation field reaches (its rows are listed by a
    /// to-many field, referenced by a to-one field).
    pub fn target_of(&self, field: &Field) -> Option<&Entity> {
        self.relation_of(field).map(|r| self.entity_at(r.target))
    }

    /// The entity a to-one field references; `None` for every other field.
    pub fn to_one_target(&self, field: &Field) -> Option<&Entity> {
        match field.kind {
            FieldKind::ToOne { .. } => self.target_of(field),
            _ => None,
        }
    }

    /// The join entity of a many-to-many field with its to-one fields
    /// pointing here (`near`) and at the target (`far`): `BookTag`,
    /// `BookTag.book`, `BookTag.tag` for `Book.tags`. `None` for other fields.
    pub fn through_of(&self, field: &Field) -> Option<(&Entity, &Field, &Field)> {
        match self.relation_of(field)?.kind {
            RelationKind::ManyToMany { through, near, far } => Some((
                self.entity_at(through),
                self.field_at(near),
                self.field_at(far),
            )),
            _ => None,
        }
    }

    /// The join entity, `near` and `far` of a many-to-many field whose
    /// links a create may make (nested create's `{connect: [ids]}`): one
    /// whose join type needs no value on create but its two ends
    /// (`BookTag { id book tag }`; fields with a default, owner fields and
    /// nullable ones may be there too). `None` for other fields, and for a
    /// join type that holds more than the link (a required `note`): its
    /// rows are made through its own type. The GraphQL inputs, REST
    /// bodies, the OpenAPI document and the store all ask here.
    pub fn connect_of(&self, field: &Field) -> Option<(&Entity, &Field, &Field)> {
        let (join, near, far) = self.through_of(field)?;
        join.links_only(near, far).then_some((join, near, far))
    }

    /// The to-one field of the target that a one-to-many field inverts
    /// (`Book.author` for `Author.books`); `None` for other fields.
    pub fn inverse_of(&self, field: &Field) -> Option<&Field> {
        match self.relation_of(field)?.kind {
            RelationKind::OneToMany { inverse } => Some(self.field_at(inverse)),
            _ => None,
        }
    }

    /// The connection type called `name`.
    pub fn connection(&self, name: &str) -> Option<&Connection> {
        self.connections.iter().find(|c| c.name == name)
    }

    /// The bulk result type called `name`.
    pub fn bulk_result(&self, name: &str) -> Option<&BulkResult> {
        self.bulk_results.iter().find(|b| b.name == name)
    }

    /// The enum called `name`.
    pub fn enum_def(&self, name: &str) -> Option<&EnumDef> {
        self.enums.iter().find(|e| e.name == name)
    }

    /// The input object called `name`.
    pub fn input(&self, name: &str) -> Option<&InputObject> {
        self.inputs.iter().find(|e| e.name == name)
    }

    /// The `where` input called `name`.
    pub fn where_input(&self, name: &str) -> Option<&WhereInput> {
        self.where_inputs.iter().find(|e| e.name == name)
    }

    /// The `orderBy` enum called `name`.
    pub fn order_enum(&self, name: &str) -> Option<&OrderEnum> {
        self.order_enums.iter().find(|e| e.name == name)
    }

    /// What calling root field `rf` needs: its `@auth(scope:)`, else the
    /// entity's read scope for queries and subscriptions and its write scope
    /// for mutations. GraphQL's executors, subscriptions and
    /// every other caller ask here; nothing re-derives it.
    pub fn root_access<'a>(&'a self, rf: &'a RootField) -> Access<'a> {
        let is_read = !rf.binding.is_write();
        let default = match (self.entity(&rf.entity), is_read) {
            (Some(e), true) => e.read_scope(),
            (Some(e), false) => e.write_scope(),
            (None, true) => DEFAULT_READ_SCOPE,
            (None, false) => DEFAULT_WRITE_SCOPE,
        };
        Access {
            scope: rf.scope.as_deref().unwrap_or(default),
            is_read,
        }
    }

    /// Every scope the schema names (root fields, types, fields, policy
    /// bypasses): what a client that may use the whole API is registered
    /// for, e.g. GraphiQL's built-in sign-in client.
    pub fn scope_names(&self) -> std::collections::BTreeSet<&str> {
        let mut out = std::collections::BTreeSet::from([DEFAULT_READ_SCOPE, DEFAULT_WRITE_SCOPE]);
        for rf in self
            .queries
            .iter()
            .chain(&self.mutations)
            .chain(&self.subscriptions)
        {
            out.insert(self.root_access(rf).scope);
        }
        for e in &self.entities {
            out.extend([e.read_scope(), e.write_scope()]);
            out.extend(e.policy.bypass.as_deref());
            for f in &e.fields {
                out.extend(f.auth.read.as_deref());
                out.extend(f.auth.write.as_deref());
            }
        }
        out
    }

    /// The scope reading the schema itself needs (GraphQL introspection,
    /// the OpenAPI document): what any read needs.
    pub fn schema_read_scope(&self) -> &str {
        DEFAULT_READ_SCOPE
    }

    /// The scope needed to see `field` of an entity beyond reading the
    /// entity itself: a relation shows its target's rows, or for a to-one
    /// field the target's id, so it needs the target's read scope; a value
    /// with `@auth(read:)` needs that scope. `None` for the entity's other
    /// values. Filtering and ordering by a field need the same. REST bodies
    /// and filters, both GraphQL executors and the store all ask here.
    pub fn field_read_scope<'a>(&'a self, field: &'a Field) -> Option<&'a str> {
        match &field.kind {
            FieldKind::ToOne { .. } | FieldKind::ToMany { .. } | FieldKind::Count { .. } => Some(
                self.target_of(field)
                    .map_or(DEFAULT_READ_SCOPE, Entity::read_scope),
            ),
            FieldKind::Id | FieldKind::Value { .. } => field.auth.read.as_deref(),
        }
    }

    /// The scope needed to set `field` beyond writing the entity: setting a
    /// to-one reference needs its target's read scope (the answer would
    /// tell which ids exist); a value with `@auth` needs its `write:` scope,
    /// else its `read:` scope.
    pub fn field_write_scope<'a>(&'a self, field: &'a Field) -> Option<&'a str> {
        match &field.kind {
            FieldKind::Id | FieldKind::Value { .. } => {
                field.auth.write.as_deref().or(field.auth.read.as_deref())
            }
            _ => self.field_read_scope(field),
        }
    }
}

/// An object type other than the roots: a stored collection.
#[derive(Debug, Clone, Serialize)]
pub struct Entity {
    /// GraphQL type name (`BookReview`).
    pub name: String,
    /// SQL table name (`book_review`).
    pub table: String,
    /// REST collection segment (`book-reviews`, or the `@rest(path:)` value).
    pub rest_path: String,
    /// Description from the SDL.
    pub description: Option<String>,
    /// Fields in declaration order; the first is always `id`.
    pub fields: Vec<Field>,
    /// `@auth(read:, write:)` on the type.
    pub auth: TypeAuth,
    /// `@policy`: which rows each action may touch, most specific argument
    /// already chosen.
    pub policy: crate::policy::Policy,
    /// `@renamed(from:)`: the type's earlier name and the table it was
    /// stored in, which the migration renames instead of dropping.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<Renamed>,
    /// `@unique(fields: [...])` on the type: combinations of stored fields
    /// no two rows may share (a key with a null part never clashes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unique_keys: Vec<UniqueKey>,
}

/// A composite unique key: `@unique(fields: ["user", "link"])` on a type.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UniqueKey {
    /// The stored fields of the key, as written (at least two; a to-one
    /// field stands for the referenced id).
    pub fields: Vec<String>,
    /// Their columns, in the same order.
    pub columns: Vec<String>,
}

impl UniqueKey {
    /// The name of the unique index that holds the key, which the store
    /// creates and reads back from constraint errors.
    pub fn index_name(&self, table: &str) -> String {
        format!("{table}_{}_ukey", self.columns.join("_"))
    }
}

impl Entity {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Fields that are columns of this entity's table (`id`, values, to-one references).
    pub fn stored_fields(&self) -> impl Iterator<Item = &Field> {
        self.fields.iter().filter(|f| f.is_stored())
    }

    /// The stored fields of one unique key of this entity, as
    /// `fields` names them in any order (an upsert's `onConflict`): the id,
    /// a `@unique` field, or the fields of an `@unique(fields:)` key.
    /// `None` when they are not exactly the fields of one key. The binder,
    /// the scaffold and the store ask here.
    pub fn unique_key<'e>(&'e self, fields: &[&str]) -> Option<Vec<&'e Field>> {
        let mut wanted: Vec<&str> = fields.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.len() != fields.len() {
            return None;
        }
        if let [one] = wanted.as_slice() {
            let f = self.field(one)?;
            return (f.is_stored() && (f.unique || matches!(f.kind, FieldKind::Id)))
                .then(|| vec![f]);
        }
        self.unique_keys.iter().find_map(|k| {
            let mut names: Vec<&str> = k.fields.iter().map(String::as_str).collect();
            names.sort_unstable();
            (names == wanted).then(|| wanted.iter().filter_map(|n| self.field(n)).collect())
        })
    }

    /// The fields that belong to some unique key (the id first, then each
    /// `@unique` field and the fields of `@unique(fields:)` keys, in
    /// declaration order): the values of an upsert's `onConflict` enum.
    pub fn unique_key_fields(&self) -> Vec<&Field> {
        self.stored_fields()
            .filter(|f| {
                matches!(f.kind, FieldKind::Id)
                    || f.unique
                    || self.unique_keys.iter().any(|k| k.fields.contains(&f.name))
            })
            .collect()
    }

    /// The collection name of bulk writes: the REST collection's plural in
    /// PascalCase (`People` for `people`, so `updatePeople`), or
    /// `<Type>List` when that is the type's own name (`NewsList`), which
    /// the one-row mutations already use.
    pub fn bulk_name(&self) -> String {
        use heck::ToUpperCamelCase;
        let plural = self.rest_path.to_upper_camel_case();
        if plural == self.name {
            format!("{}List", self.name)
        } else {
            plural
        }
    }

    /// The scope reading this type needs: `@auth(read:)` or `read`.
    pub fn read_scope(&self) -> &str {
        self.auth.read.as_deref().unwrap_or(DEFAULT_READ_SCOPE)
    }

    /// The scope writing this type needs: `@auth(write:)` or `write`.
    pub fn write_scope(&self) -> &str {
        self.auth.write.as_deref().unwrap_or(DEFAULT_WRITE_SCOPE)
    }

    /// Whether a row of this (join) type can be created from its two
    /// to-one fields `near` and `far` alone: no other field is required on
    /// create ([`Model::connect_of`]).
    pub fn links_only(&self, near: &Field, far: &Field) -> bool {
        self.stored_fields()
            .all(|f| f.name == near.name || f.name == far.name || !self.required_on_create(f))
    }

    /// Whether a new row must be given `f`: a required field other than
    /// `id` that is not an owner field (a create fills those from the
    /// caller's claims). Create mutations, REST bodies and the OpenAPI
    /// document all ask here.
    pub fn required_on_create(&self, f: &Field) -> bool {
        f.required
            && !matches!(f.kind, FieldKind::Id)
            && !f.is_server_set()
            && f.default.is_none()
            && !self.policy.is_owner_field(&f.name)
    }

    /// Whether an update may set `f`: stored, not `id`, and not an owner
    /// field, which is write-once ([`crate::Policy::owner_fields`]). The
    /// scaffold's update inputs ask here; the store refuses the change for
    /// callers the policy filters.
    pub fn settable_on_update(&self, f: &Field) -> bool {
        f.is_stored()
            && !matches!(f.kind, FieldKind::Id)
            && !f.is_server_set()
            && !self.policy.is_owner_field(&f.name)
    }

    /// The count field of the to-many field `to_many` (`booksCount` for
    /// `books`), when the schema declares one.
    pub fn count_field_of(&self, to_many: &str) -> Option<&Field> {
        self.fields.iter().find(|f| {
            matches!(f.kind, FieldKind::Count { .. })
                && f.name.strip_suffix(COUNT_SUFFIX) == Some(to_many)
        })
    }

    /// To-many relation fields (inverses of another entity's to-one field).
    pub fn to_many_fields(&self) -> impl Iterator<Item = &Field> {
        self.fields
            .iter()
            .filter(|f| matches!(f.kind, FieldKind::ToMany { .. }))
    }
}

/// What an operation needs of the caller: one scope, granted for reading
/// or for writing (an anonymous caller may only read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access<'a> {
    /// The scope the caller's credentials must hold.
    pub scope: &'a str,
    /// Whether the operation only reads.
    pub is_read: bool,
}

/// The name suffix of count fields: `booksCount` counts what `books` lists.
pub const COUNT_SUFFIX: &str = "Count";

/// Scope queries and subscriptions need unless `@auth` says otherwise.
pub const DEFAULT_READ_SCOPE: &str = "read";
/// Scope mutations need unless `@auth` says otherwise.
pub const DEFAULT_WRITE_SCOPE: &str = "write";

/// Scopes an entity requires, from `@auth(read:, write:)`; `None` means the
/// defaults (`read` / `write`).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct TypeAuth {
    /// Scope needed to read this type.
    pub read: Option<String>,
    /// Scope needed to create, update or delete this type.
    pub write: Option<String>,
}

/// A field of an entity.
#[derive(Debug, Clone, Serialize)]
pub struct Field {
    /// GraphQL field name (`publishedOn`).
    pub name: String,
    /// SQL column name (`published_on`; `author_id` for a to-one `author`).
    /// Empty for to-many fields, which have no column.
    pub column: String,
    /// Description from the SDL.
    pub description: Option<String>,
    /// What the field holds.
    pub kind: FieldKind,
    /// `T!`: the value can never be null (for lists: the list itself).
    pub required: bool,
    /// `@unique`.
    pub unique: bool,
    /// `@index` (to-one references are always indexed, whatever this says).
    pub index: bool,
    /// The field's GraphQL output type as written.
    pub ty: TypeRef,
    /// `@auth(read:, write:)` on the field (values only): scopes needed
    /// beyond the entity's.
    pub auth: TypeAuth,
    /// Set by the server rather than by writes: the store fills it in its
    /// write path ([`Generated`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generated: Option<Generated>,
    /// `@renamed(from:)`: the field's earlier name and its column, which the
    /// migration renames instead of dropping (`None` for to-many fields,
    /// which have no column).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<Renamed>,
    /// `@default(value:)`: what a create that leaves the field out stores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<FieldDefault>,
    /// `@constraint(...)`: rules every value written is checked against
    /// ([`Model::check_field_value`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<Constraint>,
}

/// `@constraint(...)` on a scalar field: what a value written to it must
/// also be, beyond its type. Bounds are inclusive; lengths count
/// characters; a pattern matches the whole value.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Constraint {
    /// Least number (`Int`, `Float`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Greatest number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Fewest characters (`String`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    /// Most characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// A regular expression the whole value matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<Pattern>,
    /// A form the value has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
}

/// A `@constraint(pattern:)`: as written, and compiled to match whole values.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The expression as written.
    pub source: String,
    whole: regex::Regex,
}

impl Serialize for Pattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

impl Pattern {
    /// Compiles `source` (Rust `regex` syntax, which has no look-around or
    /// back-references, so matching takes time linear in the value).
    pub fn new(source: &str) -> Result<Pattern, String> {
        let whole = regex::Regex::new(&format!("^(?:{source})$")).map_err(|e| e.to_string())?;
        Ok(Pattern {
            source: source.to_string(),
            whole,
        })
    }

    /// Whether `text` matches, as a whole.
    pub fn matches(&self, text: &str) -> bool {
        self.whole.is_match(text)
    }
}

/// `@constraint(format:)`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// An e-mail address (RFC 5321/5322 `addr-spec`).
    Email,
    /// An absolute URI, with a scheme (RFC 3986).
    Uri,
}

impl Format {
    /// The name written in the directive and in OpenAPI.
    pub fn name(self) -> &'static str {
        match self {
            Format::Email => "email",
            Format::Uri => "uri",
        }
    }

    /// Whether `text` has this form.
    pub fn holds(self, text: &str) -> bool {
        match self {
            Format::Email => email_address::EmailAddress::is_valid(text),
            Format::Uri => url::Url::parse(text).is_ok(),
        }
    }
}

impl Constraint {
    /// The rules a non-null value of the field breaks, in words
    /// (`must be at least 3 characters long`); empty when it keeps them.
    pub fn broken(&self, v: &serde_json::Value) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(n) = v.as_f64() {
            if let Some(min) = self.min.filter(|m| n < *m) {
                out.push(format!("must be at least {min}"));
            }
            if let Some(max) = self.max.filter(|m| n > *m) {
                out.push(format!("must be at most {max}"));
            }
        }
        if let Some(text) = v.as_str() {
            let chars = text.chars().count() as u64;
            if let Some(min) = self.min_length.filter(|m| chars < *m) {
                out.push(format!("must be at least {min} characters long"));
            }
            if let Some(max) = self.max_length.filter(|m| chars > *m) {
                out.push(format!("must be at most {max} characters long"));
            }
            if let Some(p) = self.pattern.as_ref().filter(|p| !p.matches(text)) {
                out.push(format!("must match the pattern `{}`", p.source));
            }
            if let Some(f) = self.format.filter(|f| !f.holds(text)) {
                out.push(match f {
                    Format::Email => "must be an e-mail address".to_string(),
                    Format::Uri => "must be an absolute URI (with a scheme)".to_string(),
                });
            }
        }
        out
    }
}

/// A stored default (`@default(value:)`), applied by the store to every
/// create that leaves the field out (GraphQL root and nested, REST,
/// bootstrap rows alike).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum FieldDefault {
    /// A literal of the field's type, checked at load, canonical.
    Value(serde_json::Value),
    /// `"now"` on a `DateTime`: the write's time (one clock reading per
    /// write, as for `@createdAt`).
    Now,
}

/// What a field or type was called before (`@renamed(from:)`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Renamed {
    /// The earlier GraphQL name.
    pub name: String,
    /// The column or table it was stored in, named as the loader names them.
    pub sql: String,
}

/// A value the server generates for a field. The store sets each in one
/// place of its write path, from its clock for the times.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Generated {
    /// The row's id: a UUIDv7 unless the create gives one.
    Id,
    /// The time the row was created (`@createdAt`); never changes.
    CreatedAt,
    /// The time the row was last written (`@updatedAt`).
    UpdatedAt,
    /// `emailVerified` of the account type: `false` on a new row, set
    /// only by the server's e-mail flows.
    EmailVerified,
}

impl Field {
    /// The relation of a to-one or to-many field.
    pub fn relation(&self) -> Option<RelationId> {
        match &self.kind {
            FieldKind::ToOne { relation }
            | FieldKind::ToMany { relation, .. }
            | FieldKind::Count { relation, .. } => Some(*relation),
            FieldKind::Id | FieldKind::Value { .. } => None,
        }
    }

    /// Whether the field is a column of its entity's table.
    pub fn is_stored(&self) -> bool {
        !matches!(
            self.kind,
            FieldKind::ToMany { .. } | FieldKind::Count { .. }
        )
    }

    /// Whether only the server sets the field (`@createdAt`, `@updatedAt`,
    /// an account's `emailVerified`): no write may give it a value, and
    /// inputs leave it out. The id is generated too, but a create may give it.
    pub fn is_server_set(&self) -> bool {
        matches!(
            self.generated,
            Some(Generated::CreatedAt | Generated::UpdatedAt | Generated::EmailVerified)
        )
    }

    /// Whether the server sets the field to the time of the write
    /// (`@createdAt`, `@updatedAt`).
    pub fn is_timestamp(&self) -> bool {
        matches!(
            self.generated,
            Some(Generated::CreatedAt | Generated::UpdatedAt)
        )
    }

    /// The type a create or update input sets the field with: `ID` for the
    /// id and to-one references, the declared type without its outer `!`
    /// for values; `None` for to-many fields and fields the server sets,
    /// which inputs cannot set.
    pub fn input_type(&self) -> Option<TypeRef> {
        if self.is_server_set() {
            return None;
        }
        match &self.kind {
            FieldKind::Id | FieldKind::ToOne { .. } => {
                Some(TypeRef::Named(Scalar::Id.graphql_name().into()))
            }
            FieldKind::Value { .. } => Some(self.ty.nullable().clone()),
            FieldKind::ToMany { .. } | FieldKind::Count { .. } => None,
        }
    }

    /// Whether rows can be ordered on the field: a column that is not a
    /// list. `orderBy` enums, REST `sort`, the store and the scaffold ask here.
    pub fn is_orderable(&self) -> bool {
        match &self.kind {
            FieldKind::Id | FieldKind::ToOne { .. } => true,
            FieldKind::Value { ty, list: None } => ty.is_orderable(),
            FieldKind::Value { list: Some(_), .. }
            | FieldKind::ToMany { .. }
            | FieldKind::Count { .. } => false,
        }
    }

    /// Whether the field holds a list of values (stored as JSON).
    pub fn is_list(&self) -> bool {
        matches!(self.kind, FieldKind::Value { list: Some(_), .. })
    }

    /// The value type a filter on this field compares with: the referenced id
    /// for a to-one, the element type for a list. `None` for to-many fields.
    pub fn filter_type(&self) -> Option<ValueType> {
        match &self.kind {
            FieldKind::Id => Some(ValueType::Scalar(Scalar::Id)),
            FieldKind::Value { ty, .. } => Some(ty.clone()),
            FieldKind::ToOne { .. } => Some(ValueType::Scalar(Scalar::Id)),
            FieldKind::ToMany { .. } | FieldKind::Count { .. } => None,
        }
    }

    /// The filter operators that apply to this field: `_contains` (an
    /// element) and `_is_null` for a list; otherwise those of its type's
    /// row in the scalar table ([`ScalarInfo::ops`], `ID`'s for the id and
    /// references); none for a to-many field. The
    /// binder, REST query parameters, the store and the scaffold all ask
    /// here, so a filter one of them offers is one the others accept.
    pub fn filter_ops(&self) -> &'static [FilterOp] {
        const LIST: &[FilterOp] = &[FilterOp::Contains, FilterOp::IsNull];
        const NULL_ONLY: &[FilterOp] = &[FilterOp::IsNull];
        match &self.kind {
            FieldKind::Id | FieldKind::ToOne { .. } => Scalar::Id.info().ops,
            // An element is compared by equality: a list of a type without
            // it (JSON) is only tested for null.
            FieldKind::Value { ty, list: Some(_) } if ty.ops().contains(&FilterOp::Eq) => LIST,
            FieldKind::Value { list: Some(_), .. } => NULL_ONLY,
            FieldKind::Value { ty, .. } => ty.ops(),
            FieldKind::ToMany { .. } | FieldKind::Count { .. } => &[],
        }
    }

    /// Whether `op` applies to this field ([`Field::filter_ops`]), and if
    /// not, why: for the callers that explain a refusal.
    pub fn check_filter_op(&self, op: FilterOp) -> Result<(), OpRefusal> {
        if self.filter_ops().contains(&op) {
            return Ok(());
        }
        Err(if !self.is_stored() {
            OpRefusal::NotFilterable
        } else if self.is_list() {
            OpRefusal::ListField
        } else if op.is_ordering() {
            OpRefusal::NotOrdered
        } else if op.is_text() {
            OpRefusal::NotText
        } else {
            OpRefusal::NotTaken
        })
    }
}

/// Why a filter operator does not apply to a field
/// ([`Field::check_filter_op`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpRefusal {
    /// The field is a to-many relation, which has no column to compare.
    NotFilterable,
    /// The field is a list: only `_contains` and `_is_null` apply.
    ListField,
    /// An ordering (`_lt`, `_lte`, `_gt`, `_gte`) on an unordered type.
    NotOrdered,
    /// A text operator (`_contains`, `_starts_with`, `_ends_with`) on a
    /// type that is not text.
    NotText,
    /// Another operator the field's type does not take (equality on a
    /// `JSON` field, a case-insensitive operator on an `ID`): the type's
    /// row of the scalar table lists what it takes.
    NotTaken,
}

/// What an entity field holds.
// The Model is built once at load time and only read afterwards, so the size
// of the to-many variant costs nothing worth boxing for.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FieldKind {
    /// The primary key `id: ID!`.
    Id,
    /// A stored scalar or enum, or a list of them (stored as JSON).
    Value {
        /// Scalar or enum type (of the elements, for a list).
        ty: ValueType,
        /// `Some` for a list: whether its elements are non-null (`[T!]`).
        list: Option<ListItems>,
    },
    /// A stored reference to one row of its relation's target
    /// ([`RelationKind::ManyToOne`]).
    ToOne {
        /// The relation, in [`Model::relations`].
        relation: RelationId,
    },
    /// The rows of its relation's target that point here
    /// ([`RelationKind::OneToMany`], or [`RelationKind::ManyToMany`] through
    /// a join entity).
    ToMany {
        /// The relation, in [`Model::relations`].
        relation: RelationId,
        /// REST segment for nested paths (`reviewed-tasks`).
        rest_segment: String,
        /// Whether the list elements are non-null (`[T!]`).
        items_required: bool,
        /// Count/offset/filter/order arguments, bound like a root list field.
        list: ListBinding,
        /// The arguments as declared (for building the GraphQL schema).
        args: Vec<InputValue>,
    },
    /// `booksCount: Int!` beside the to-many field `books`: how many rows
    /// that field would list under its filters, whatever the page size,
    /// counting only rows the caller may read.
    Count {
        /// The relation of the to-many field counted.
        relation: RelationId,
        /// Filter and `where` arguments (never count, offset or order).
        list: ListBinding,
        /// The arguments as declared (for building the GraphQL schema).
        args: Vec<InputValue>,
    },
}

/// An index into [`Model::entities`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct EntityId(u32);

/// A field: its entity and its index in [`Entity::fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct FieldId {
    /// The entity the field belongs to.
    pub entity: EntityId,
    /// Its position in the entity's fields.
    pub field: u32,
}

/// An index into [`Model::relations`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct RelationId(u32);

macro_rules! index_id {
    ($t:ty) => {
        impl $t {
            /// The id of the element at `i` of the vector it indexes.
            pub fn from_index(i: usize) -> Self {
                Self(u32::try_from(i).unwrap_or(u32::MAX))
            }

            /// The element's position in the vector it indexes.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}
index_id!(EntityId);
index_id!(RelationId);

impl FieldId {
    /// The field at position `i` of `entity`'s fields.
    pub fn new(entity: EntityId, i: usize) -> Self {
        Self {
            entity,
            field: u32::try_from(i).unwrap_or(u32::MAX),
        }
    }

    /// The field's position in its entity's fields.
    pub fn index(self) -> usize {
        self.field as usize
    }
}

/// One edge of the entity graph: what a relation field reaches.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Relation {
    /// The field that declares the relation.
    pub field: FieldId,
    /// The entity whose rows the field reaches.
    pub target: EntityId,
    /// How the rows are linked.
    pub kind: RelationKind,
}

/// How a relation links the rows of its two entities.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RelationKind {
    /// `author: Author`: the field is a column holding one target row's id.
    ManyToOne {
        /// What deleting the target row does to the rows referencing it.
        on_delete: OnDelete,
    },
    /// `books: [Book!]!`: the target's rows whose to-one field `inverse`
    /// (a [`RelationKind::ManyToOne`] of the target) holds this row's id.
    OneToMany {
        /// The target's to-one field that points back.
        inverse: FieldId,
    },
    /// `tags: [Tag!]! @relation(through: "BookTag")`: the target's rows
    /// linked to this row by rows of a join entity, one of whose to-one
    /// fields points here (`near`) and one at the target (`far`). Reads
    /// skip the join rows; they are written through the join entity.
    ManyToMany {
        /// The join entity.
        through: EntityId,
        /// Its to-one field that points at this entity.
        near: FieldId,
        /// Its to-one field that points at the target.
        far: FieldId,
    },
}

/// What deleting a row does to the rows whose to-one field references it:
/// `@relation(onDelete:)` on that field.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OnDelete {
    /// The delete is refused while rows reference it (a conflict).
    #[default]
    Restrict,
    /// The referencing rows are deleted too, in the same transaction.
    Cascade,
    /// The reference is cleared (the field must be nullable).
    SetNull,
}

impl OnDelete {
    /// The value as the SDL writes it.
    pub fn from_graphql(v: &str) -> Option<OnDelete> {
        match v {
            "RESTRICT" => Some(OnDelete::Restrict),
            "CASCADE" => Some(OnDelete::Cascade),
            "SET_NULL" => Some(OnDelete::SetNull),
            _ => None,
        }
    }

    /// The value as the SDL writes it (`CASCADE`).
    pub fn sdl(self) -> &'static str {
        match self {
            OnDelete::Restrict => "RESTRICT",
            OnDelete::Cascade => "CASCADE",
            OnDelete::SetNull => "SET_NULL",
        }
    }
}

/// The name of the built-in enum `@relation(onDelete:)` takes.
pub const ON_DELETE_ENUM: &str = "OnDelete";

/// Nullability of a list's elements.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct ListItems {
    /// `[T!]`.
    pub items_required: bool,
}

/// A stored value's type.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Hash)]
#[serde(tag = "type", content = "name", rename_all = "snake_case")]
pub enum ValueType {
    /// One of the six built-in scalars.
    Scalar(Scalar),
    /// A schema enum, by name.
    Enum(String),
}

impl ValueType {
    /// The GraphQL type name.
    pub fn graphql_name(&self) -> &str {
        match self {
            ValueType::Scalar(s) => s.graphql_name(),
            ValueType::Enum(name) => name,
        }
    }

    /// The filter operators a single (non-list) value of this type takes:
    /// the scalar's row of the table ([`ScalarInfo::ops`]); equality and
    /// sets for an enum.
    pub fn ops(&self) -> &'static [FilterOp] {
        const ENUM: &[FilterOp] = &[
            FilterOp::Eq,
            FilterOp::Not,
            FilterOp::In,
            FilterOp::NotIn,
            FilterOp::IsNull,
        ];
        match self {
            ValueType::Scalar(s) => s.info().ops,
            ValueType::Enum(_) => ENUM,
        }
    }

    /// Whether rows can be ordered by a value of this type.
    pub fn is_orderable(&self) -> bool {
        match self {
            ValueType::Scalar(s) => s.info().orderable,
            ValueType::Enum(_) => true,
        }
    }
}

/// A GraphQL type reference, as written in the SDL (serialized as that text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeRef {
    /// A named type, nullable.
    Named(String),
    /// `T!`.
    NonNull(Box<TypeRef>),
    /// `[T]`.
    List(Box<TypeRef>),
}

/// One layer of a type reference as another library holds it: what
/// [`TypeRef::read`] asks of each layer.
#[derive(Debug, Clone, Copy)]
pub enum TypeLayer<'a, T> {
    /// A named type.
    Named(&'a str),
    /// A list of the inner type.
    List(&'a T),
}

impl TypeRef {
    /// Reads a type reference from another library's form (apollo-compiler's
    /// SDL types, async-graphql's query types): `layer` tells whether a
    /// layer is non-null and what it holds. This and [`TypeRef::write`] are
    /// the one mapping between GraphQL libraries' type references and the
    /// Model's.
    pub fn read<T>(t: &T, layer: fn(&T) -> (bool, TypeLayer<'_, T>)) -> TypeRef {
        let (non_null, inner) = layer(t);
        let base = match inner {
            TypeLayer::Named(name) => TypeRef::Named(name.to_string()),
            TypeLayer::List(item) => TypeRef::List(Box::new(TypeRef::read(item, layer))),
        };
        if non_null {
            TypeRef::NonNull(Box::new(base))
        } else {
            base
        }
    }

    /// Writes this type in another library's form (async-graphql's dynamic
    /// schema): `named` makes a named type, `non_null` and `list` wrap one.
    pub fn write<T>(&self, named: fn(&str) -> T, non_null: fn(T) -> T, list: fn(T) -> T) -> T {
        match self {
            TypeRef::Named(n) => named(n),
            TypeRef::NonNull(inner) => non_null(inner.write(named, non_null, list)),
            TypeRef::List(inner) => list(inner.write(named, non_null, list)),
        }
    }

    /// The innermost named type.
    pub fn base_name(&self) -> &str {
        match self {
            TypeRef::Named(n) => n,
            TypeRef::NonNull(t) | TypeRef::List(t) => t.base_name(),
        }
    }

    /// Whether the outermost type is non-null.
    pub fn is_non_null(&self) -> bool {
        matches!(self, TypeRef::NonNull(_))
    }

    /// The type with an outer `!` removed.
    pub fn nullable(&self) -> &TypeRef {
        match self {
            TypeRef::NonNull(t) => t,
            t => t,
        }
    }

    /// Whether the type (ignoring an outer `!`) is a list.
    pub fn is_list(&self) -> bool {
        matches!(self.nullable(), TypeRef::List(_))
    }

    /// The element type of a list (ignoring an outer `!`).
    pub fn list_item(&self) -> Option<&TypeRef> {
        match self.nullable() {
            TypeRef::List(t) => Some(t),
            _ => None,
        }
    }
}

impl Serialize for TypeRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::fmt::Display for TypeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TypeRef::Named(n) => f.write_str(n),
            TypeRef::NonNull(t) => write!(f, "{t}!"),
            TypeRef::List(t) => write!(f, "[{t}]"),
        }
    }
}

/// A constant value from the SDL (argument and input field defaults).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum ConstValue {
    /// `null`.
    Null,
    /// An integer literal.
    Int(i64),
    /// A float literal.
    Float(f64),
    /// A string literal.
    String(String),
    /// `true` / `false`.
    Boolean(bool),
    /// An enum value name.
    Enum(String),
    /// A list literal.
    List(Vec<ConstValue>),
    /// An input object literal.
    Object(Vec<(String, ConstValue)>),
}

/// An argument or input-object field as declared.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InputValue {
    /// Name.
    pub name: String,
    /// Declared type.
    pub ty: TypeRef,
    /// Declared default, if any.
    pub default: Option<ConstValue>,
    /// Description from the SDL.
    pub description: Option<String>,
}

/// An enum type.
#[derive(Debug, Clone, Serialize)]
pub struct EnumDef {
    /// Name.
    pub name: String,
    /// Values in declaration order.
    pub values: Vec<String>,
    /// Description from the SDL.
    pub description: Option<String>,
}

/// An input object type.
#[derive(Debug, Clone, Serialize)]
pub struct InputObject {
    /// Name.
    pub name: String,
    /// Fields in declaration order.
    pub fields: Vec<InputValue>,
    /// Description from the SDL.
    pub description: Option<String>,
}

/// Comparison operators, from the argument-name suffixes of the conventions.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum FilterOp {
    /// No suffix: equality.
    Eq,
    /// `_not`.
    Not,
    /// `_in` (a list argument).
    In,
    /// `_not_in` (a list argument).
    NotIn,
    /// `_lt`.
    Lt,
    /// `_lte`.
    Lte,
    /// `_gt`.
    Gt,
    /// `_gte`.
    Gte,
    /// `_contains`: substring of a String/ID, or element of a list field.
    Contains,
    /// `_starts_with`.
    StartsWith,
    /// `_ends_with`.
    EndsWith,
    /// `_is_null` (a Boolean argument).
    IsNull,
    /// `_ieq`: equal after Unicode case folding.
    IEq,
    /// `_icontains`: `_contains` after case folding.
    IContains,
    /// `_istarts_with`: `_starts_with` after case folding.
    IStartsWith,
    /// `_iends_with`: `_ends_with` after case folding.
    IEndsWith,
}

impl FilterOp {
    /// Every suffixed operator, longest suffix first so that `_not_in` wins over `_in`.
    pub const SUFFIXED: [(&'static str, FilterOp); 15] = [
        ("_istarts_with", FilterOp::IStartsWith),
        ("_iends_with", FilterOp::IEndsWith),
        ("_icontains", FilterOp::IContains),
        ("_ieq", FilterOp::IEq),
        ("_starts_with", FilterOp::StartsWith),
        ("_ends_with", FilterOp::EndsWith),
        ("_contains", FilterOp::Contains),
        ("_is_null", FilterOp::IsNull),
        ("_not_in", FilterOp::NotIn),
        ("_lte", FilterOp::Lte),
        ("_gte", FilterOp::Gte),
        ("_not", FilterOp::Not),
        ("_in", FilterOp::In),
        ("_lt", FilterOp::Lt),
        ("_gt", FilterOp::Gt),
    ];

    /// Every suffix, for hints that list them (`_not, _in, ...`), so a hint
    /// never lags behind the operators a field takes.
    pub fn suffix_list() -> String {
        let mut all: Vec<&str> = Self::SUFFIXED.iter().map(|(s, _)| *s).collect();
        all.reverse();
        all.join(", ")
    }

    /// The argument-name suffix (`""` for equality).
    pub fn suffix(self) -> &'static str {
        match self {
            FilterOp::Eq => "",
            op => Self::SUFFIXED
                .iter()
                .find(|(_, o)| *o == op)
                .map(|(s, _)| *s)
                .unwrap_or(""),
        }
    }

    /// Whether the operand is a list of the field's type.
    pub fn takes_list(self) -> bool {
        matches!(self, FilterOp::In | FilterOp::NotIn)
    }

    /// Whether the operator compares order (`_lt`, `_lte`, `_gt`, `_gte`).
    pub fn is_ordering(self) -> bool {
        matches!(
            self,
            FilterOp::Lt | FilterOp::Lte | FilterOp::Gt | FilterOp::Gte
        )
    }

    /// Whether the operator compares text (`_contains`, `_starts_with`,
    /// `_ends_with`; `_contains` on a list field compares an element).
    pub fn is_text(self) -> bool {
        matches!(
            self,
            FilterOp::Contains | FilterOp::StartsWith | FilterOp::EndsWith
        )
    }

    /// Whether the operator compares text after case folding (`_ieq`,
    /// `_icontains`, `_istarts_with`, `_iends_with`).
    pub fn is_case_insensitive(self) -> bool {
        matches!(
            self,
            FilterOp::IEq | FilterOp::IContains | FilterOp::IStartsWith | FilterOp::IEndsWith
        )
    }

    /// The operator as messages name it: its suffix, or `equality`.
    pub fn label(self) -> &'static str {
        match self {
            FilterOp::Eq => "equality",
            op => op.suffix(),
        }
    }

    /// What one term with this operator costs per row it is evaluated
    /// on, relative to a plain comparison: a pattern match (`LIKE`) about
    /// twice as much, a comparison after Unicode case folding (a function
    /// call per row on SQLite, `lower()` on PostgreSQL) about ten times.
    /// `_in` and `_not_in` are one term whatever the list's length: both
    /// databases look values up in the list rather than compare each.
    /// See [`filter_cost`].
    pub fn weight(self) -> u64 {
        if self.is_case_insensitive() {
            10
        } else if self.is_text() {
            2
        } else {
            1
        }
    }
}

/// Term-rows (one term of weight 1 evaluated on one row) that cost one
/// point of the complexity limit.
pub const TERM_ROWS_PER_POINT: u64 = 1000;

/// The complexity a filter adds to a request (bounded work):
/// the sum of its terms' [`FilterOp::weight`] times the rows of the table
/// it is evaluated on, one point per [`TERM_ROWS_PER_POINT`], rounded up.
/// A database evaluates a filter it cannot answer from an index on every
/// row, so terms times rows bound its work; with the default limit of
/// 250,000 a request may filter 60,000 rows with about 4,000 plain terms or
/// 400 case-insensitive ones. Every entry point (GraphQL's complexity,
/// REST lists) charges filters by this rule.
pub fn filter_cost(weight: u64, rows: u64) -> u64 {
    weight.saturating_mul(rows).div_ceil(TERM_ROWS_PER_POINT)
}

/// One filter: an argument (or `where` input field) compared with a field.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Filter {
    /// Argument or input-field name (`year_gt`).
    pub arg: String,
    /// Entity field compared (`year`).
    pub field: String,
    /// Operator.
    pub op: FilterOp,
}

/// How a filter through a to-many relation judges the rows it reaches: a
/// row matches when the inner condition is true for it (a comparison with
/// null is not a match).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Quantifier {
    /// `_some`: at least one row matches.
    Some,
    /// `_every`: every row matches (true when there is none).
    Every,
    /// `_none`: no row matches.
    None,
}

impl Quantifier {
    /// Every quantifier with its suffix.
    pub const ALL: [(&'static str, Quantifier); 3] = [
        ("_some", Quantifier::Some),
        ("_every", Quantifier::Every),
        ("_none", Quantifier::None),
    ];

    /// The suffix after the to-many field's name (`_some`).
    pub fn suffix(self) -> &'static str {
        match self {
            Quantifier::Some => "_some",
            Quantifier::Every => "_every",
            Quantifier::None => "_none",
        }
    }

    /// `<field>_some`, `<field>_every` or `<field>_none` for a to-many
    /// field of `entity`: the field and the quantifier. `where` inputs and
    /// `@policy` rules name relation filters this way; a stored field of
    /// that exact name wins.
    pub fn parse<'e>(entity: &'e Entity, name: &str) -> Option<(&'e Field, Quantifier)> {
        if entity.field(name).is_some_and(Field::is_stored) {
            return None;
        }
        Self::ALL.iter().find_map(|(suffix, q)| {
            let base = name.strip_suffix(suffix)?;
            entity
                .field(base)
                .filter(|f| matches!(f.kind, FieldKind::ToMany { .. }))
                .map(|f| (f, *q))
        })
    }
}

/// A `where` input field that filters through a to-many relation
/// (`tasks_some: TaskWhere`): one `EXISTS` in the statement.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RelationFilter {
    /// Input-field name (`tasks_some`).
    pub arg: String,
    /// The to-many field of the filtered entity (`tasks`).
    pub field: String,
    /// How the reached rows are judged.
    pub quantifier: Quantifier,
    /// The `where` input of the relation's target (`TaskWhere`).
    pub input: String,
}

/// The binding of a list field (root list query or to-many relation field).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ListBinding {
    /// Name of the count argument (`first`, `limit`, `count` or `take`).
    pub count: Option<String>,
    /// Name of the offset argument (`offset` or `skip`).
    pub offset: Option<String>,
    /// Filter arguments.
    pub filters: Vec<Filter>,
    /// The `where` argument: its name and input type.
    pub where_arg: Option<ArgOfType>,
    /// The `orderBy` argument: its name and enum type.
    pub order_by: Option<ArgOfType>,
}

/// An argument whose meaning is carried by its (input object or enum) type.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ArgOfType {
    /// Argument name.
    pub arg: String,
    /// Named type of the argument (a `WhereInput` or an `OrderEnum`).
    pub type_name: String,
}

/// A `where` input object bound to an entity.
#[derive(Debug, Clone, Serialize)]
pub struct WhereInput {
    /// Input type name.
    pub name: String,
    /// Entity it filters.
    pub entity: String,
    /// Field filters.
    pub filters: Vec<Filter>,
    /// Filters through to-many relations (`tasks_some: TaskWhere`).
    pub relations: Vec<RelationFilter>,
    /// Name of the `AND` field, when declared.
    pub and: Option<String>,
    /// Name of the `OR` field, when declared.
    pub or: Option<String>,
    /// Name of the `NOT` field, when declared.
    pub not: Option<String>,
}

/// An `orderBy` enum bound to an entity.
#[derive(Debug, Clone, Serialize)]
pub struct OrderEnum {
    /// Enum type name.
    pub name: String,
    /// Entity it orders.
    pub entity: String,
    /// Each enum value's meaning.
    pub values: Vec<OrderValue>,
}

/// One value of an `orderBy` enum: `<field>_ASC` or `<field>_DESC`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct OrderValue {
    /// Enum value (`title_DESC`).
    pub value: String,
    /// Field ordered on.
    pub field: String,
    /// Descending.
    pub desc: bool,
}

/// A field of `Query`, `Mutation` or `Subscription` with its binding.
#[derive(Debug, Clone, Serialize)]
pub struct RootField {
    /// Field name.
    pub name: String,
    /// Description from the SDL.
    pub description: Option<String>,
    /// Entity the operation is about.
    pub entity: String,
    /// Arguments as declared.
    pub args: Vec<InputValue>,
    /// Return type as declared.
    pub ty: TypeRef,
    /// `@auth(scope:)` on the field: the scope it needs instead of the default.
    pub scope: Option<String>,
    /// What the field does.
    pub binding: Binding,
}

/// A Relay connection type and its edge type, as declared:
/// `type BookConnection { edges: [BookEdge!]! pageInfo: PageInfo! totalCount: Int! }`
/// and `type BookEdge { cursor: String! node: Book! }`. Their field names
/// are fixed by the Relay specification; `PageInfo` is the one type of
/// [`PAGE_INFO`] (declared by the schema, or supplied when undeclared).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Connection {
    /// Type name (`BookConnection`).
    pub name: String,
    /// Description from the SDL.
    pub description: Option<String>,
    /// The entity its edges' nodes are.
    pub entity: String,
    /// The edge type's name (`BookEdge`).
    pub edge: String,
    /// The edge type's description.
    pub edge_description: Option<String>,
    /// The declared type of `edges` (`[BookEdge!]!`).
    pub edges: TypeRef,
    /// The declared type of `pageInfo` (`PageInfo!`).
    pub page_info: TypeRef,
    /// The declared type of `totalCount` (`Int!`), when declared.
    pub total_count: Option<TypeRef>,
    /// The declared type of the edge's `cursor` (`String!`).
    pub cursor: TypeRef,
    /// The declared type of the edge's `node` (`Book!`).
    pub node: TypeRef,
}

/// The name of the Relay page-info type.
pub const PAGE_INFO: &str = "PageInfo";

/// The fields of `PageInfo`, as its SDL declares them (name, type).
pub const PAGE_INFO_FIELDS: [(&str, &str); 4] = [
    ("hasNextPage", "Boolean!"),
    ("hasPreviousPage", "Boolean!"),
    ("startCursor", "String"),
    ("endCursor", "String"),
];

/// The binding of a root field returning a connection: a keyset-paged
/// list of the connection's entity.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ConnectionBinding {
    /// The connection type returned.
    pub connection: String,
    /// `first` (as the count), filters, `where` and `orderBy`; never an offset.
    pub list: ListBinding,
    /// Name of the `after: String` argument, when declared.
    pub after: Option<String>,
    /// Name of the `last: Int` argument, when declared.
    pub last: Option<String>,
    /// Name of the `before: String` argument, when declared.
    pub before: Option<String>,
}

/// What a root field does.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Binding {
    /// Query returning a list of the entity.
    List(ListBinding),
    /// Query returning a Relay connection of the entity: pages addressed by
    /// opaque keyset cursors (`docs/design/pagination.md`).
    Connection(ConnectionBinding),
    /// `booksCount: Int!` beside the list `books`: how many rows the list
    /// would give under its filters, whatever the page size, counting only
    /// rows the caller may read. Only filters and `where` are bound.
    Count(ListBinding),
    /// Query returning the one row matching every filter, or null.
    Lookup {
        /// Filter arguments (all must be given values to match).
        filters: Vec<Filter>,
        /// Optional `where` argument.
        where_arg: Option<ArgOfType>,
    },
    /// Insert one row.
    Create(WriteInput),
    /// Partial update of the row whose id is given.
    Update {
        /// Name of the `ID!` argument.
        id_arg: String,
        /// Where the new values come from.
        input: WriteInput,
    },
    /// Delete the row whose id is given.
    Delete {
        /// Name of the `ID!` argument.
        id_arg: String,
        /// What the field returns.
        returns: DeleteReturn,
    },
    /// Insert one row, or update the row that holds the same values of
    /// one unique key (`upsertBook(input:, onConflict: [isbn])`).
    Upsert {
        /// Where the values come from (the create input).
        input: WriteInput,
        /// Name of the argument listing the key's fields (an enum of
        /// [`Entity::unique_key_fields`]).
        on_conflict: String,
    },
    /// Update every row that matches and that the caller may change
    /// (`updateBooks(where:, set:)`), returning a [`BulkResult`].
    UpdateMany {
        /// The `where` argument selecting the rows.
        where_arg: ArgOfType,
        /// Where the new values come from (an update input object).
        set: WriteInput,
    },
    /// Delete every row that matches and that the caller may delete
    /// (`deleteBooks(where:)`), returning a [`BulkResult`].
    DeleteMany {
        /// The `where` argument selecting the rows.
        where_arg: ArgOfType,
    },
    /// Change events of the entity.
    Subscribe {
        /// Which change.
        event: ChangeKind,
        /// Equality filters applied to each event's row.
        filters: Vec<Filter>,
    },
}

impl Binding {
    /// Whether the field writes (a mutation): it needs the write scope.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Binding::Create(_)
                | Binding::Update { .. }
                | Binding::Delete { .. }
                | Binding::Upsert { .. }
                | Binding::UpdateMany { .. }
                | Binding::DeleteMany { .. }
        )
    }
}

/// What a bulk write returns, as declared:
/// `type BookBulkResult { count: Int! rows: [Book!]! }`. A result, not a
/// stored type (it has no `id`): how many rows were changed, and those
/// rows (as they are after an update, as they were before a delete).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BulkResult {
    /// Type name (`BookBulkResult`).
    pub name: String,
    /// Description from the SDL.
    pub description: Option<String>,
    /// The entity its rows are.
    pub entity: String,
}

/// The name suffix of bulk result types (`BookBulkResult`).
pub const BULK_RESULT_SUFFIX: &str = "BulkResult";

/// Where a create/update takes its values from.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum WriteInput {
    /// One input-object argument whose fields are entity fields of the same name.
    Object {
        /// Argument name (`input`, `data`, ...).
        arg: String,
        /// Input type name.
        type_name: String,
        /// Entity fields the input object may set (its field names).
        fields: Vec<String>,
    },
    /// The field's own arguments are entity fields of the same name.
    Args {
        /// Entity fields set by arguments (argument names).
        fields: Vec<String>,
    },
}

impl WriteInput {
    /// The entity fields this input can set.
    pub fn fields(&self) -> &[String] {
        match self {
            WriteInput::Object { fields, .. } | WriteInput::Args { fields } => fields,
        }
    }
}

/// What a delete mutation returns.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DeleteReturn {
    /// The deleted row.
    Entity,
    /// The deleted row's id.
    Id,
    /// `true` when a row was deleted.
    Boolean,
}

/// Kinds of change events.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A row was inserted.
    Created,
    /// A row was updated or replaced.
    Updated,
    /// A row was deleted.
    Deleted,
}

impl ChangeKind {
    /// The subscription field-name suffix (`Created`).
    pub fn suffix(self) -> &'static str {
        match self {
            ChangeKind::Created => "Created",
            ChangeKind::Updated => "Updated",
            ChangeKind::Deleted => "Deleted",
        }
    }
}
