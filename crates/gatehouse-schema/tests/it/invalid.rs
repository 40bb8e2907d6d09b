//! Every invalid schema gives exact diagnostics (snapshotted with file:line:col).

use crate::{BASE_TYPES, load_err};

/// A case: the base types plus `extra` in `b.graphql`.
fn with_base(extra: &str) -> String {
    load_err(&[("a.graphql", BASE_TYPES), ("b.graphql", extra)])
}

macro_rules! case {
    ($name:ident, $extra:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(with_base($extra));
        }
    };
}

macro_rules! raw_case {
    ($name:ident, $($file:expr => $text:expr),+ $(,)?) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(load_err(&[$(($file, $text)),+]));
        }
    };
}

const Q: &str = "type Query {\n  books: [Book!]!\n}\n";

// ---- root types ---------------------------------------------------------

raw_case!(
    no_query_type,
    "a.graphql" => "type Book { id: ID! }\ntype Mutation { deleteBook(id: ID!): Book }\n",
);
raw_case!(no_types_to_generate_roots_for, "a.graphql" => "enum Color { RED }\n");
raw_case!(
    query_defined_twice,
    "a.graphql" => "type Book { id: ID! }\ntype Query { books: [Book!]! }\n",
    "b.graphql" => "type Query { book(id: ID!): Book }\n",
);
raw_case!(
    query_extended_in_another_file,
    "a.graphql" => "type Book { id: ID! }\ntype Query { books: [Book!]! }\n",
    "b.graphql" => "extend type Query {\n  book(id: ID!): Book\n}\n",
);
raw_case!(
    mutation_extended_in_another_file,
    "a.graphql" => "type Book { id: ID! title: String }\ntype Query { books: [Book!]! }\ntype Mutation { createBook(title: String): Book }\n",
    "b.graphql" => "extend type Mutation {\n  deleteBook(id: ID!): Boolean\n}\n",
);
raw_case!(
    schema_definition_not_supported,
    "a.graphql" => "schema { query: Root }\ntype Root { x: Int }\ntype Query { x: Int }\n",
);
raw_case!(
    syntax_error,
    "a.graphql" => "type Book {\n  id: ID!\n  title String\n}\ntype Query { books: [Book!]! }\n",
);
raw_case!(
    operation_in_schema_file,
    "a.graphql" => "type Book { id: ID! }\ntype Query { books: [Book!]! }\nquery { books { id } }\n",
);

// ---- types and scalars --------------------------------------------------

case!(custom_scalar, &format!("{Q}scalar Money\n"));
case!(
    interface_not_supported,
    &format!("{Q}interface Node {{ id: ID! }}\n")
);
case!(
    union_not_supported,
    &format!("{Q}union Item = Book | Author\n")
);
case!(
    undefined_type,
    &format!("{Q}type Shelf {{ id: ID! book: Boook }}\n")
);
case!(
    entity_without_id,
    &format!("{Q}type Shelf {{ label: String }}\n")
);
case!(
    id_of_wrong_type,
    &format!("{Q}type Shelf {{ id: String }}\n")
);
case!(
    nested_list_field,
    &format!("{Q}type Shelf {{ id: ID! grid: [[Int]] }}\n")
);
case!(
    arguments_on_a_scalar_field,
    &format!("{Q}type Shelf {{ id: ID! label(upper: Boolean): String }}\n")
);
case!(
    field_returning_a_root_type,
    &format!("{Q}type Shelf {{ id: ID! q: Query }}\n")
);
case!(
    two_fields_one_column,
    &format!("{Q}type Shelf {{ id: ID! shelfLabel: String shelf_label: String }}\n")
);

// ---- relations ----------------------------------------------------------

case!(
    to_many_without_inverse,
    &format!("{Q}type Shelf {{ id: ID! books: [Book!]! }}\n")
);
raw_case!(
    ambiguous_inverse,
    "a.graphql" => "type Person { id: ID! wrote: [Book!]! }\ntype Book { id: ID! author: Person editor: Person }\ntype Query { books: [Book!]! }\n",
);
raw_case!(
    relation_names_a_missing_field,
    "a.graphql" => "type Person { id: ID! wrote: [Book!]! @relation(field: \"writer\") }\ntype Book { id: ID! author: Person editor: Person }\ntype Query { books: [Book!]! }\n",
);
raw_case!(
    relation_on_a_scalar_field,
    "a.graphql" => "type Book { id: ID! title: String @relation(field: \"x\") }\ntype Query { books: [Book!]! }\n",
);
raw_case!(
    unique_on_a_to_many_field,
    "a.graphql" => "type Author { id: ID! books: [Book!]! @unique }\ntype Book { id: ID! author: Author }\ntype Query { books: [Book!]! }\n",
);

// ---- directives ---------------------------------------------------------

case!(
    rest_path_invalid,
    &format!("{Q}type Shelf @rest(path: \"Shelves/All\") {{ id: ID! }}\n")
);
case!(
    rest_path_taken,
    &format!("{Q}type Novel @rest(path: \"books\") {{ id: ID! }}\n")
);
case!(
    auth_on_relation_field,
    &format!("{Q}type Shelf {{ id: ID! next: Shelf @auth(read: \"admin\") }}\n")
);
case!(
    policy_problems,
    &format!(
        "{Q}type Shelf @policy(read: {{ownr: \"$sub\"}}, write: {{owner: 3, label_lt: \"$\"}}, all: {{NOT: {{owner_contains: true}}}}) {{ id: ID! owner: String label: Boolean next: Shelf }}\n"
    )
);
case!(
    policy_path_problem,
    &format!(
        "{Q}type Shelf @policy(read: {{next: {{nope: \"$sub\"}}}}) {{ id: ID! owner: String next: Shelf }}\n"
    )
);
case!(
    policy_relation_filter_problems,
    &format!(
        "{Q}type Shelf @policy(read: {{items_some: {{nope: \"$sub\"}}}}, write: {{items_every: {{n: \"x\"}}, next_some: {{}}}}) {{ id: ID! next: Shelf items: [Item!]! }}\ntype Item {{ id: ID! shelf: Shelf! n: Int }}\n"
    )
);
case!(
    policy_without_rule,
    &format!("{Q}type Shelf @policy(bypass: \"admin\") {{ id: ID! }}\n")
);
case!(
    auth_scope_on_type,
    &format!("{Q}type Shelf @auth(scope: \"admin\") {{ id: ID! }}\n")
);
case!(
    auth_invalid_scope,
    &format!("{Q}type Shelf @auth(read: \"two words\") {{ id: ID! }}\n")
);
raw_case!(
    auth_read_on_root_field,
    "a.graphql" => "type Book { id: ID! }\ntype Query { books: [Book!]! @auth(read: \"x\") }\n",
);
raw_case!(
    directive_on_root_type,
    "a.graphql" => "type Book { id: ID! }\ntype Query @auth(read: \"x\") { books: [Book!]! }\n",
);
case!(
    unknown_directive,
    &format!("{Q}type Shelf {{ id: ID! label: String @lowercase }}\n")
);

// ---- queries ------------------------------------------------------------

const T: &str = BASE_TYPES;

fn q(fields: &str) -> String {
    load_err(&[
        ("a.graphql", T),
        ("b.graphql", &format!("type Query {{\n{fields}\n}}\n")),
    ])
}

macro_rules! query_case {
    ($name:ident, $fields:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(q($fields));
        }
    };
}

query_case!(query_returning_a_scalar, "  bookCount: Int");
query_case!(lookup_without_arguments, "  latestBook: Book");
query_case!(lookup_with_paging, "  book(id: ID!, first: Int): Book");
query_case!(
    argument_binds_to_nothing,
    "  books(publisher: String): [Book!]!"
);
query_case!(filter_type_mismatch, "  books(year_gt: String): [Book!]!");
query_case!(
    order_operator_on_boolean,
    "  books(available_gt: Boolean): [Book!]!"
);
query_case!(
    text_operator_on_int,
    "  books(year_contains: Int): [Book!]!"
);
query_case!(in_operator_not_a_list, "  books(year_in: Int): [Book!]!");
query_case!(is_null_not_boolean, "  books(year_is_null: Int): [Book!]!");
query_case!(count_not_int, "  books(first: String): [Book!]!");
query_case!(
    two_count_arguments,
    "  books(first: Int, limit: Int): [Book!]!"
);
query_case!(
    two_offset_arguments,
    "  books(offset: Int, skip: Int): [Book!]!"
);
query_case!(operator_on_list_field, "  books(tags_gt: String): [Book!]!");
query_case!(
    order_operator_on_enum,
    "  books(status_lt: Status): [Book!]!"
);
query_case!(relation_filter_not_id, "  books(author: String): [Book!]!");
query_case!(where_not_an_input, "  books(where: String): [Book!]!");
query_case!(orderby_not_an_enum, "  books(orderBy: String): [Book!]!");
query_case!(
    where_input_unknown_field,
    "  books(where: BookWhere): [Book!]!\n}\ninput BookWhere {\n  title: String\n  publisher: String\n"
);
query_case!(
    where_input_bad_and,
    "  books(where: BookWhere): [Book!]!\n}\ninput BookWhere {\n  title: String\n  AND: BookWhere\n  NOT: [BookWhere!]\n"
);
query_case!(
    where_input_relation_filter_problems,
    "  authors(where: AuthorWhere): [Author!]!\n}\ninput AuthorWhere {\n  books_some: [BookWhere!]\n  books_none: AuthorWhere\n  books_every: String\n}\ninput BookWhere {\n  title: String\n"
);
query_case!(
    where_input_used_for_two_types,
    "  books(where: W): [Book!]!\n  authors(where: W): [Author!]!\n}\ninput W {\n  id: ID\n"
);
query_case!(
    orderby_value_names_no_field,
    "  books(orderBy: [BookOrder!]): [Book!]!\n}\nenum BookOrder {\n  title_ASC\n  publisher_DESC\n  year_UP\n  tags_ASC\n"
);
query_case!(
    to_many_argument_binds_to_nothing,
    "  authors: [Author!]!\n}\nextend type Author {\n  drafts(year_after: Int): [Book!]!\n"
);

// ---- mutations ----------------------------------------------------------

fn m(fields: &str) -> String {
    load_err(&[
        ("a.graphql", T),
        (
            "b.graphql",
            &format!("type Query {{ books: [Book!]! }}\ntype Mutation {{\n{fields}\n}}\n"),
        ),
    ])
}

macro_rules! mutation_case {
    ($name:ident, $fields:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(m($fields));
        }
    };
}

mutation_case!(mutation_fits_no_convention, "  publishBook(id: ID!): Book");
mutation_case!(
    mutation_names_an_unknown_type,
    "  createBooks(title: String!): Book"
);
mutation_case!(
    create_returns_another_type,
    "  createBook(title: String!): Author"
);
mutation_case!(
    create_missing_required_field,
    "  createBook(year: Int): Book"
);
mutation_case!(
    create_required_field_nullable,
    "  createBook(title: String, year: Int): Book"
);
mutation_case!(
    create_field_wrong_type,
    "  createBook(title: String!, year: String): Book"
);
mutation_case!(
    create_unknown_field,
    "  createBook(title: String!, pages: Int): Book"
);
mutation_case!(
    create_sets_to_many,
    "  createAuthor(name: String!, books: [ID!]): Author"
);
mutation_case!(
    create_relation_not_id,
    "  createBook(title: String!, author: Author): Book"
);
mutation_case!(
    create_input_object_mismatch,
    "  createBook(input: BookInput!): Book\n}\ninput BookInput {\n  title: String!\n  year: Float\n  pages: Int\n"
);
mutation_case!(update_without_id, "  updateBook(title: String): Book");
mutation_case!(
    update_id_nullable,
    "  updateBook(id: ID, title: String): Book"
);
mutation_case!(update_sets_nothing, "  updateBook(id: ID!): Book");
mutation_case!(
    update_changes_id,
    "  updateBook(id: ID!, input: BookPatch!): Book\n}\ninput BookPatch {\n  id: ID\n  title: String\n"
);
mutation_case!(
    delete_wrong_arguments,
    "  deleteBook(id: ID!, hard: Boolean): Book"
);
mutation_case!(delete_returns_string, "  deleteBook(id: ID!): String");
mutation_case!(
    mutation_with_unique,
    "  deleteBook(id: ID!): Boolean @unique"
);

// ---- subscriptions ------------------------------------------------------

fn s(fields: &str) -> String {
    load_err(&[
        ("a.graphql", T),
        (
            "b.graphql",
            &format!("type Query {{ books: [Book!]! }}\ntype Subscription {{\n{fields}\n}}\n"),
        ),
    ])
}

#[test]
fn subscription_fits_no_convention() {
    insta::assert_snapshot!(s(
        "  onBook: Book\n  bookChanged: Book\n  shelfCreated: Book"
    ));
}

#[test]
fn subscription_returns_another_type() {
    insta::assert_snapshot!(s("  bookCreated: Author"));
}

#[test]
fn subscription_with_operator_filter() {
    insta::assert_snapshot!(s("  bookCreated(year_gt: Int, title: String): Book"));
}

// ---- everything in one run -----------------------------------------------

#[test]
fn every_problem_reported_in_one_run() {
    let out = load_err(&[
        (
            "a.graphql",
            "scalar JSON\ntype Book { id: String title: String author: Writer }\n",
        ),
        (
            "b.graphql",
            "type Query {\n  books(sort: String): [Book!]!\n  count: Int\n}\ntype Mutation {\n  publish(id: ID!): Book\n}\n",
        ),
    ]);
    insta::assert_snapshot!(out);
    assert!(
        out.lines().filter(|l| l.contains(": error: ")).count() >= 5,
        "{out}"
    );
}

#[test]
fn foreign_idioms_get_the_gatehouse_equivalent() {
    let cases = [
        (
            "type Post @model { id: ID! }",
            "`@model`",
            "schema scaffold",
        ),
        ("type Post { id: ID! slug: String @id }", "`@id`", "@unique"),
        (
            "type Post { id: ID! title: String @search }",
            "`@search`",
            "title_contains",
        ),
        (
            "type Post { id: ID! tags: [Post!]! @hasInverse(field: tags) }",
            "`@hasInverse`",
            "@relation",
        ),
        (
            "type Post { id: ID! at: AWSDateTime }",
            "`AWSDateTime`",
            "DateTime",
        ),
        (
            "scalar AWSTimestamp\ntype Post { id: ID! at: AWSTimestamp }",
            "`AWSTimestamp`",
            "seconds since the epoch",
        ),
        ("type Post { id: ID! data: AWSJSON }", "`AWSJSON`", "`JSON`"),
        (
            "type Post { id: ID! mail: AWSEmail }",
            "`AWSEmail`",
            "`String`",
        ),
    ];
    for (sdl, idiom, help) in cases {
        let text = format!("{sdl}\ntype Query {{ posts: [Post!]! }}\n");
        let err =
            gatehouse_schema::load_sources(&crate::sources(&[("a.graphql", &text)])).unwrap_err();
        let d = err
            .0
            .iter()
            .find(|d| d.message.contains(idiom))
            .unwrap_or_else(|| panic!("{idiom}: {err}"));
        let hint = d.hint.as_deref().unwrap_or("");
        assert!(hint.contains(help), "{idiom}: {hint}");
    }
}

case!(
    created_at_on_a_string,
    &format!("{Q}type Shelf {{ id: ID! made: String! @createdAt }}\n")
);
case!(
    created_at_and_updated_at_on_one_field,
    &format!("{Q}type Shelf {{ id: ID! at: DateTime! @createdAt @updatedAt }}\n")
);
case!(
    server_set_field_in_an_input,
    &format!(
        "{Q}type Shelf {{ id: ID! name: String at: DateTime! @createdAt }}\ntype Mutation {{ createShelf(name: String, at: DateTime): Shelf! }}\n"
    )
);
case!(
    equality_on_json,
    &format!(
        "{Q}type Shelf {{ id: ID! meta: JSON }}\nextend type Query {{ shelves(meta: JSON): [Shelf!]! }}\n"
    )
);

// ---- @renamed -------------------------------------------------------------

case!(
    renamed_from_the_field_itself,
    &format!("{Q}type Shelf {{ id: ID! label: String @renamed(from: \"label\") }}\n")
);
case!(
    renamed_from_a_field_that_still_exists,
    &format!("{Q}type Shelf {{ id: ID! label: String name: String @renamed(from: \"label\") }}\n")
);
case!(
    two_fields_renamed_from_one_name,
    &format!(
        "{Q}type Shelf {{ id: ID! label: String @renamed(from: \"tag\") name: String @renamed(from: \"tag\") }}\n"
    )
);
case!(
    renamed_on_id,
    &format!("{Q}type Shelf {{ id: ID! @renamed(from: \"key\") label: String }}\n")
);
case!(
    renamed_on_a_to_many_field,
    &format!(
        "{Q}type Shelf {{ id: ID! label: String }}\nextend type Author {{ works: [Book!]! @renamed(from: \"novels\") }}\n"
    )
);
case!(
    renamed_from_the_type_itself,
    &format!("{Q}type Shelf @renamed(from: \"Shelf\") {{ id: ID! label: String }}\n")
);
case!(
    renamed_from_a_type_that_still_exists,
    &format!("{Q}type Shelf @renamed(from: \"Author\") {{ id: ID! label: String }}\n")
);
case!(
    two_types_renamed_from_one_name,
    &format!(
        "{Q}type Shelf @renamed(from: \"Rack\") {{ id: ID! label: String }}\ntype Case @renamed(from: \"Rack\") {{ id: ID! label: String }}\n"
    )
);

// ---- Relay connections ------------------------------------------------------

const CONN_Q: &str =
    "type Query {\n  booksConnection(first: Int, after: String): BookConnection!\n}\n";

raw_case!(
    connection_without_edges,
    "a.graphql" => BASE_TYPES,
    "b.graphql" => "type BookConnection {\n  pageInfo: PageInfo!\n  totalCount: Int!\n}\ntype BookEdge { cursor: String! node: Book! }\n",
    "c.graphql" => CONN_Q,
);
raw_case!(
    edge_without_node,
    "a.graphql" => BASE_TYPES,
    "b.graphql" => "type BookConnection {\n  edges: [BookEdge!]!\n  pageInfo: PageInfo!\n}\ntype BookEdge {\n  cursor: String!\n}\n",
    "c.graphql" => CONN_Q,
);
raw_case!(
    connection_shapes_with_wrong_fields,
    "a.graphql" => BASE_TYPES,
    "b.graphql" => "type BookConnection {\n  edges: [Book!]!\n  pageInfo: Boolean\n  totalCount: String\n  extra: Int\n}\ntype BookEdge {\n  cursor: Int\n  node: Status\n}\ntype PageInfo {\n  hasNextPage: Boolean\n  startCursor: String\n}\n",
    "c.graphql" => CONN_Q,
);
raw_case!(
    connection_arguments_that_do_not_page_by_cursor,
    "a.graphql" => BASE_TYPES,
    "b.graphql" => "type BookConnection { edges: [BookEdge!]! pageInfo: PageInfo! }\ntype BookEdge { cursor: String! node: Book! }\n",
    "c.graphql" => "type Query {\n  booksConnection(offset: Int, limit: Int, after: Int, last: String, year_gt: String): BookConnection!\n  many: [BookConnection!]!\n}\n",
);
raw_case!(
    connection_on_an_entity_field_or_an_unlisted_edge,
    "a.graphql" => BASE_TYPES,
    "b.graphql" => "type BookConnection { edges: [BookEdge!]! pageInfo: PageInfo! }\ntype BookEdge { cursor: String! node: Book! }\ntype AuthorEdge { cursor: String! node: Author! }\ntype Shelf {\n  id: ID!\n  books: BookConnection\n}\n",
    "c.graphql" => CONN_Q,
);

// ---- declared inputs of nested children -----------------------------------

/// `createAuthor` taking `AuthorInput`, whose `books` are `AuthorBookInput`
/// (declared in `inputs`).
fn nested(inputs: &str) -> String {
    load_err(&[
        ("a.graphql", BASE_TYPES),
        (
            "b.graphql",
            &format!(
                "type Query {{ authors: [Author!]! }}\n\
                 type Mutation {{ createAuthor(input: AuthorInput!): Author! }}\n\
                 input AuthorInput {{ name: String! books: [AuthorBookInput!] }}\n{inputs}"
            ),
        ),
    ])
}

#[test]
fn nested_input_may_not_set_the_back_reference() {
    let err = nested("input AuthorBookInput { title: String! author: ID }\n");
    assert!(
        err.contains("`author` of input `AuthorBookInput` points back to the new `Author`"),
        "{err}"
    );
    assert!(err.contains("b.graphql:4:"), "{err}");
}

#[test]
fn nested_input_binds_by_field_name() {
    let err = nested("input AuthorBookInput { title: String! pages: Int }\n");
    assert!(
        err.contains("`pages` of input `AuthorBookInput` is not a field of `Book`"),
        "{err}"
    );
    let err = nested("input AuthorBookInput { title: Int }\n");
    assert!(
        err.contains("`title` of input `AuthorBookInput` has type `Int`"),
        "{err}"
    );
}

#[test]
fn nested_input_must_set_what_a_create_needs() {
    let err = nested("input AuthorBookInput { year: Int }\n");
    assert!(
        err.contains("input `AuthorBookInput` cannot set the required field `Book.title`"),
        "{err}"
    );
}

/// A default that is no value of its field's type, null, on a field the
/// server sets or on a relation is refused at its position.
#[test]
fn stored_defaults_that_do_not_fit_their_field() {
    let text = load_err(&[(
        "s.graphql",
        "type Query { tasks: [Task!]! }\n\
         enum Status { OPEN DONE }\n\
         type Task { id: ID!\n\
           status: Status! @default(value: CLOSED)\n\
           rank: Int! @default(value: \"high\")\n\
           note: String @default(value: null)\n\
           at: DateTime! @createdAt @default(value: \"now\")\n\
           tags: [String!] @default(value: \"x\")\n\
           day: Date @default(value: \"now\")\n\
         }\n",
    )]);
    for wanted in [
        "s.graphql:4:33: error: `@default` on `Task.status`: `CLOSED` is not a `Status` value",
        "s.graphql:5:28: error: `@default` on `Task.rank`: `\"high\"` is not a `Int` value",
        "`@default` on `Task.note`: `null` is not a `String` value",
        "`@default` on `Task.at`: only a scalar or enum field the writes set takes a default",
        "`@default` on `Task.tags`: only a scalar or enum field the writes set takes a default",
        "`@default` on `Task.day`: `\"now\"` is not a `Date` value",
    ] {
        assert!(text.contains(wanted), "missing {wanted:?} in:\n{text}");
    }
}

/// `@constraint` rules that do not fit their field, a pattern that does not
/// compile, an unknown format and an empty range are refused at load.
#[test]
fn constraints_that_do_not_fit_their_field() {
    let text = load_err(&[(
        "s.graphql",
        "type Query { tasks: [Task!]! }\n\
         type Task { id: ID!\n\
           a: String @constraint(min: 1)\n\
           b: Int @constraint(maxLength: 3)\n\
           c: String @constraint(pattern: \"(unclosed\")\n\
           d: String @constraint(format: \"phone\")\n\
           e: Int @constraint(min: 5, max: 1)\n\
           f: [String!] @constraint(maxLength: 3)\n\
         }\n",
    )]);
    for wanted in [
        "`@constraint` on `Task.a`: `min` applies to an `Int` or `Float` field",
        "`@constraint` on `Task.b`: `maxLength` applies to a `String` field",
        "`@constraint` on `Task.c`: `pattern: \"(unclosed\"` is not a regular expression",
        "`@constraint` on `Task.d`: `format: \"phone\"` is not a known format",
        "`@constraint` on `Task.e`: no value is at once above the least and below the greatest",
        "`@constraint` on `Task.f`: `maxLength` applies to a `String` field",
    ] {
        assert!(text.contains(wanted), "missing {wanted:?} in:\n{text}");
    }
}

// ---- upsert and bulk writes ---------------------------------------------

case!(
    upsert_on_conflict_names_a_field_of_no_unique_key,
    "type Query { books: [Book!]! }\n\
     type Mutation { upsertBook(input: BookKeyed!, onConflict: [BookKey!]!): Book! }\n\
     input BookKeyed { title: String! }\n\
     enum BookKey { id title }\n"
);
case!(
    upsert_without_on_conflict,
    "type Query { books: [Book!]! }\n\
     type Mutation { upsertBook(title: String!): Book! }\n"
);
case!(
    bulk_write_named_after_another_collection,
    "type Query { books: [Book!]! }\n\
     type Mutation { updateAuthors(where: BookWhere!, set: BookSet!): BookBulkResult! }\n\
     input BookWhere { title: String }\n\
     input BookSet { title: String }\n\
     type BookBulkResult { count: Int! rows: [Book!]! }\n"
);
case!(
    bulk_result_with_wrong_fields,
    "type Query { books: [Book!]! }\n\
     type Mutation { deleteBooks(where: BookWhere!): BookBulkResult! }\n\
     input BookWhere { title: String }\n\
     type BookBulkResult { count: Int rows: [Author!]! extra: String }\n"
);
case!(
    bulk_result_of_no_stored_type,
    "type Query { books: [Book!]! }\n\
     type ShelfBulkResult { count: Int! rows: [Book!]! }\n"
);
