//! Valid schemas: the bound Model, printing and scaffolding.

use gatehouse_schema::{
    Binding, FieldKind, LoadOptions, RelationKind, default_rest_path, load_sources, scaffold,
};
use gatehouse_testkit::EXAMPLE_SCHEMA;

use crate::{BASE_TYPES, load_err, load_ok, sources};

#[test]
fn example_model() {
    let model = load_ok(EXAMPLE_SCHEMA);
    insta::assert_yaml_snapshot!(model, { ".sdl" => "[printed sdl: see example_sdl]" });
}

#[test]
fn example_sdl() {
    insta::assert_snapshot!(load_ok(EXAMPLE_SCHEMA).sdl);
}

#[test]
fn printed_sdl_loads_again_to_the_same_model() {
    let model = load_ok(EXAMPLE_SCHEMA);
    let again = load_ok(&[("printed.graphql", model.sdl.as_str())]);
    let strip = |m: &gatehouse_schema::Model| {
        let mut v = serde_json::to_value(m).unwrap();
        v.as_object_mut().unwrap().remove("sdl");
        v
    };
    assert_eq!(strip(&model), strip(&again));
}

#[test]
fn type_extension_across_files_adds_fields() {
    let model = load_ok(EXAMPLE_SCHEMA);
    let book = model.entity("Book").unwrap();
    assert!(
        book.field("shelf").is_some(),
        "extend type Book in another file"
    );
}

#[test]
fn minimal_schema() {
    let model = load_ok(&[(
        "a.graphql",
        "type Note { id: ID! text: String }\ntype Query { notes: [Note] }\n",
    )]);
    insta::assert_yaml_snapshot!(model, { ".sdl" => "[sdl]" });
}

#[test]
fn declaring_date_and_builtin_directives_is_accepted() {
    load_ok(&[(
        "a.graphql",
        "scalar Date\ndirective @unique on FIELD_DEFINITION\ntype Note { id: ID! on: Date code: String @unique }\ntype Query { notes: [Note!]! }\n",
    )]);
}

#[test]
fn self_relation_with_relation_directive() {
    let model = load_ok(&[(
        "a.graphql",
        "type Person { id: ID! manager: Person mentor: Person reports: [Person!]! @relation(field: \"manager\") }\ntype Query { people: [Person!]! }\n",
    )]);
    let p = model.entity("Person").unwrap();
    let reports = p.field("reports").unwrap();
    assert!(matches!(reports.kind, FieldKind::ToMany { .. }));
    assert_eq!(model.inverse_of(reports).unwrap().name, "manager");
    assert_eq!(model.target_of(reports).unwrap().name, "Person");
    let rel = model.relation_of(reports).unwrap();
    assert_eq!(model.field_at(rel.field).name, "reports");
    assert!(matches!(rel.kind, RelationKind::OneToMany { .. }));
    assert_eq!(p.rest_path, "people");
}

#[test]
fn every_filter_operator_binds() {
    let model = load_ok(&[
        ("a.graphql", BASE_TYPES),
        (
            "b.graphql",
            "type Query {\n  books(title: String, title_not: String, title_in: [String!], title_not_in: [String], year_lt: Int, year_lte: Int, year_gt: Int, year_gte: Int, title_contains: String, title_starts_with: String, title_ends_with: String, year_is_null: Boolean, tags_contains: String, author: ID, take: Int, skip: Int): [Book!]!\n}\n",
        ),
    ]);
    insta::assert_yaml_snapshot!(model.queries[0].binding);
}

#[test]
fn mutation_and_subscription_shapes() {
    let model = load_ok(&[
        ("a.graphql", BASE_TYPES),
        (
            "b.graphql",
            "type Query { books: [Book!]! }\ntype Mutation {\n  addBook(title: String!, author: ID): Book!\n  insertAuthor(name: String!): Author\n  updateBook(id: ID!, title: String, year: Int): Book\n  removeBook(id: ID!): ID!\n  deleteAuthor(id: ID!): Boolean!\n}\ntype Subscription {\n  bookCreated(author: ID): Book!\n  bookUpdated: Book\n  authorDeleted: Author!\n}\n",
        ),
    ]);
    let ops: Vec<(&str, &Binding)> = model
        .mutations
        .iter()
        .chain(&model.subscriptions)
        .map(|f| (f.name.as_str(), &f.binding))
        .collect();
    insta::assert_yaml_snapshot!(ops);
}

#[test]
fn rest_paths_are_plural_kebab_case() {
    assert_eq!(default_rest_path("Book"), "books");
    assert_eq!(default_rest_path("BookReview"), "book-reviews");
    assert_eq!(default_rest_path("Person"), "people");
    assert_eq!(default_rest_path("Category"), "categories");
    assert_eq!(default_rest_path("Goal"), "goals");
}

#[test]
fn scaffold_of_types_alone() {
    let opts = LoadOptions {
        require_query: false,
    };
    let model =
        gatehouse_schema::load_sources_with(&sources(&[("a.graphql", BASE_TYPES)]), opts).unwrap();
    let out = scaffold(&model);
    insta::assert_snapshot!(out);
    // What the scaffold prints binds: types + scaffold is a complete valid schema.
    let full = load_sources(&sources(&[
        ("a.graphql", BASE_TYPES),
        ("scaffold.graphql", &out),
    ]));
    assert!(
        full.is_ok(),
        "{}",
        full.err().map(|d| d.to_string()).unwrap_or_default()
    );
}

#[test]
fn scaffold_leaves_owner_fields_out_of_update_inputs() {
    let types = r#"
type Task @policy(update: {org: "$org"}, delete: {createdBy: "$sub"}) {
  id: ID!
  org: String!
  createdBy: String
  title: String!
}
"#;
    let opts = LoadOptions {
        require_query: false,
    };
    let model =
        gatehouse_schema::load_sources_with(&sources(&[("a.graphql", types)]), opts).unwrap();
    let out = scaffold(&model);
    let input = |name: &str| -> String {
        let at = out.find(&format!("input {name} {{")).unwrap();
        out[at..].split_once('}').unwrap().0.to_string()
    };
    let create = input("TaskCreateInput");
    let update = input("TaskUpdateInput");
    // Filled from the claims on create, so optional there even when required.
    assert!(create.contains("  org: String\n"), "{create}");
    assert!(create.contains("  createdBy: String\n"), "{create}");
    assert!(update.contains("  title: String\n"), "{update}");
    assert!(
        !update.contains("org") && !update.contains("createdBy"),
        "{update}"
    );
    let full = load_sources(&sources(&[
        ("a.graphql", types),
        ("scaffold.graphql", &out),
    ]));
    assert!(
        full.is_ok(),
        "{}",
        full.err().map(|d| d.to_string()).unwrap_or_default()
    );
}

#[test]
fn counts_bind_beside_their_lists() {
    let model = load_ok(&[(
        "a.graphql",
        "type Author { id: ID! name: String! booksCount(year_gt: Int): Int! books(first: Int): [Book!]! }\n\
         type Book { id: ID! year: Int author: Author! }\n\
         input BookWhere { year_lt: Int }\n\
         type Query { books(first: Int): [Book!]! booksCount(year_gt: Int, where: BookWhere): Int! }\n",
    )]);
    let root = model
        .queries
        .iter()
        .find(|q| q.name == "booksCount")
        .unwrap();
    assert_eq!(root.entity, "Book");
    let Binding::Count(list) = &root.binding else {
        panic!("{:?}", root.binding)
    };
    assert_eq!(list.filters.len(), 1);
    assert!(list.where_arg.is_some());
    let author = model.entity("Author").unwrap();
    let count = author.field("booksCount").unwrap();
    assert!(matches!(count.kind, FieldKind::Count { .. }));
    assert!(!count.is_stored());
    assert_eq!(model.target_of(count).unwrap().name, "Book");
    assert_eq!(model.inverse_of(count).unwrap().name, "author");
    assert_eq!(author.count_field_of("books").unwrap().name, "booksCount");
    // The relation still points at the to-many field, not at its count.
    let rel = model.relation_of(count).unwrap();
    assert_eq!(model.field_at(rel.field).name, "books");
}

#[test]
fn counts_refuse_paging_and_order() {
    let err = gatehouse_schema::load_sources(&sources(&[(
        "a.graphql",
        "type Book { id: ID! year: Int }\n\
         type Query { books(first: Int): [Book!]! booksCount(first: Int): Int! }\n",
    )]))
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("is a count and cannot take `first`"),
        "{text}"
    );
}

#[test]
fn on_delete_binds_on_to_one_fields() {
    let model = load_ok(&[(
        "a.graphql",
        "type Task { id: ID! project: Project! @relation(onDelete: CASCADE) }\n\
         type Note { id: ID! project: Project @relation(onDelete: SET_NULL) }\n\
         type Project { id: ID! tasks: [Task!]! }\n\
         type Query { tasks: [Task!]! }\n",
    )]);
    let project = model.entity_id("Project").unwrap();
    let mut got: Vec<(String, gatehouse_schema::OnDelete)> = model
        .references_to(project)
        .map(|(f, on)| (model.field_at(f).name.clone(), on))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, gatehouse_schema::OnDelete::Cascade);
    assert_eq!(got[1].1, gatehouse_schema::OnDelete::SetNull);
    assert!(model.enum_def("OnDelete").is_none());
}

#[test]
fn on_delete_set_null_needs_a_nullable_field() {
    let err = gatehouse_schema::load_sources(&sources(&[(
        "a.graphql",
        "type Task { id: ID! project: Project! @relation(onDelete: SET_NULL) }\n\
         type Project { id: ID! }\n\
         type Query { tasks: [Task!]! }\n",
    )]))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`@relation(onDelete: SET_NULL)` on `Task.project`, which cannot be null"),
        "{err}"
    );
    let err = gatehouse_schema::load_sources(&sources(&[(
        "a.graphql",
        "type Task { id: ID! project: Project! @relation(field: \"x\") }\n\
         type Project { id: ID! tasks: [Task!]! @relation(onDelete: CASCADE) }\n\
         type Query { tasks: [Task!]! }\n",
    )]))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`@relation(field:)` on the to-one field `Task.project`"),
        "{err}"
    );
    assert!(
        err.contains("`@relation(onDelete:)` on the to-many field `Project.tasks`"),
        "{err}"
    );
}

#[test]
fn renamed_is_recorded_on_the_model_and_kept_in_print() {
    let model = load_ok(&[(
        "a.graphql",
        "type Writer @renamed(from: \"Author\") { id: ID! fullName: String @renamed(from: \"name\") books: [Book!]! }\ntype Book { id: ID! writer: Writer! @renamed(from: \"author\") }\ntype Query { books: [Book!]! }\n",
    )]);
    let writer = model.entity("Writer").unwrap();
    let from = writer.renamed_from.as_ref().unwrap();
    assert_eq!(
        (from.name.as_str(), from.sql.as_str()),
        ("Author", "author")
    );
    let from = writer
        .field("fullName")
        .unwrap()
        .renamed_from
        .as_ref()
        .unwrap();
    assert_eq!((from.name.as_str(), from.sql.as_str()), ("name", "name"));
    let book = model.entity("Book").unwrap();
    let from = book.field("writer").unwrap().renamed_from.as_ref().unwrap();
    assert_eq!(
        (from.name.as_str(), from.sql.as_str()),
        ("author", "author_id")
    );
    assert!(book.renamed_from.is_none());
    assert!(
        model.sdl.contains("@renamed(from: \"Author\")"),
        "{}",
        model.sdl
    );
    assert!(
        model.sdl.contains("@renamed(from: \"author\")"),
        "{}",
        model.sdl
    );
    // Printed and loaded again, the renames are the same.
    let again = load_ok(&[("printed.graphql", model.sdl.as_str())]);
    assert_eq!(
        again.entity("Writer").unwrap().renamed_from,
        model.entity("Writer").unwrap().renamed_from
    );
}

#[test]
fn a_connection_root_binds_and_page_info_is_supplied_when_undeclared() {
    let conn = "type BookConnection { edges: [BookEdge!]! pageInfo: PageInfo! totalCount: Int! }\ntype BookEdge { cursor: String! node: Book! }\n";
    let q = "type Query {\n  booksConnection(first: Int, after: String, last: Int, before: String, year_gt: Int, orderBy: [BookOrder!]): BookConnection!\n}\nenum BookOrder { title_ASC year_DESC }\n";
    let model = load_ok(&[
        ("a.graphql", BASE_TYPES),
        ("b.graphql", conn),
        ("c.graphql", q),
    ]);
    // Connection shapes are not stored types.
    assert!(model.entity("BookConnection").is_none() && model.entity("BookEdge").is_none());
    assert!(model.entity("PageInfo").is_none());
    let c = model.connection("BookConnection").unwrap();
    assert_eq!((c.entity.as_str(), c.edge.as_str()), ("Book", "BookEdge"));
    assert!(c.total_count.is_some());
    let Binding::Connection(b) = &model.queries[0].binding else {
        panic!("a connection: {:?}", model.queries[0].binding);
    };
    assert_eq!(b.list.count.as_deref(), Some("first"));
    assert_eq!(b.after.as_deref(), Some("after"));
    assert_eq!(b.last.as_deref(), Some("last"));
    assert_eq!(b.before.as_deref(), Some("before"));
    assert_eq!(b.list.filters.len(), 1);
    assert!(b.list.order_by.is_some());
    assert!(
        model.sdl.contains("type PageInfo"),
        "supplied: {}",
        model.sdl
    );
    // The printed schema declares it and loads to the same Model.
    let again = load_ok(&[("printed.graphql", model.sdl.as_str())]);
    assert_eq!(again.connections, model.connections);
    // Declared by the schema, it is accepted as well.
    let declared = "type PageInfo { hasNextPage: Boolean! hasPreviousPage: Boolean! startCursor: String endCursor: String }\n";
    let model = load_ok(&[
        ("a.graphql", BASE_TYPES),
        ("b.graphql", conn),
        ("c.graphql", q),
        ("d.graphql", declared),
    ]);
    assert_eq!(model.connections.len(), 1);
    // A stored type may still be called `...Connection`: it has an id.
    let stored =
        "type Query { x: [WireConnection!]! }\ntype WireConnection { id: ID! name: String }\n";
    let model = load_ok(&[("a.graphql", stored)]);
    assert!(model.entity("WireConnection").is_some());
}

#[test]
fn scaffold_prints_connections_that_load() {
    let types_only = load_sources_scaffold(BASE_TYPES);
    assert!(types_only.contains("booksConnection(first: Int, after: String, last: Int, before: String, where: BookWhere, orderBy: [BookOrderBy!]): BookConnection!"), "{types_only}");
    assert!(types_only.contains("type BookEdge {"), "{types_only}");
    let model = load_ok(&[
        ("a.graphql", BASE_TYPES),
        ("b.graphql", types_only.as_str()),
    ]);
    assert!(model.connection("AuthorConnection").is_some());
}

fn load_sources_scaffold(types: &str) -> String {
    let model = gatehouse_schema::load_sources_with(
        &sources(&[("a.graphql", types)]),
        LoadOptions {
            require_query: false,
        },
    )
    .unwrap();
    scaffold(&model)
}

/// A create input may declare the input of its nested children under any
/// name: its fields bind to the child type's by name, as any create
/// input's do, and the field pointing back is left to the nesting
/// (CONTRACT §13).
#[test]
fn a_declared_input_of_nested_children_binds_by_field_name() {
    let model = load_ok(&[
        ("a.graphql", BASE_TYPES),
        (
            "b.graphql",
            "type Query { authors: [Author!]! }\n\
             type Mutation {\n\
               createAuthor(input: AuthorInput!): Author!\n\
               addAuthor(name: String!, books: [AuthorBookInput!]): Author!\n\
             }\n\
             input AuthorInput { name: String! books: [AuthorBookInput!] }\n\
             input AuthorBookInput { title: String! year: Int }\n",
        ),
    ]);
    for name in ["createAuthor", "addAuthor"] {
        let rf = model.mutations.iter().find(|m| m.name == name).unwrap();
        let Binding::Create(input) = &rf.binding else {
            panic!("{name}: {:?}", rf.binding)
        };
        let fields = match input {
            gatehouse_schema::WriteInput::Object { fields, .. }
            | gatehouse_schema::WriteInput::Args { fields } => fields,
        };
        assert!(fields.iter().any(|f| f == "books"), "{name}: {fields:?}");
    }
    // The declared type stays the one the field takes.
    let input = model.input("AuthorInput").unwrap();
    let books = input.fields.iter().find(|f| f.name == "books").unwrap();
    assert_eq!(books.ty.base_name(), "AuthorBookInput");
    assert!(
        model.sdl.contains("books: [AuthorBookInput!]"),
        "{}",
        model.sdl
    );
}

/// A type no root field returns and no relation reaches from one loads
/// (REST serves it), with a warning at its declaration saying GraphQL
/// cannot read it; a type reached through a relation gets none, and the
/// example, which reaches all of its types, none at all.
#[test]
fn a_type_no_root_field_reaches_is_warned_about() {
    let model = load_ok(&[(
        "s.graphql",
        "type Query { authors: [Author!]! }\n\
         type Author { id: ID! name: String! books: [Book!]! }\n\
         type Book { id: ID! title: String! author: Author! }\n\
         type Tag { id: ID! label: String! }\n",
    )]);
    let warned: Vec<String> = model.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with("s.graphql:4:1: warning: type `Tag` is returned by no root field"),
        "{warned:?}"
    );
    assert!(warned[0].contains("/v1/tags"), "{warned:?}");
    assert!(load_ok(EXAMPLE_SCHEMA).warnings.is_empty());
}

/// `@default(value:)`: a literal of the field's type, or `"now"` on a
/// `DateTime`, makes the field optional on create; the printed schema
/// loads again to the same Model.
#[test]
fn stored_defaults_bind_and_make_fields_optional_on_create() {
    let model = load_ok(&[(
        "s.graphql",
        "type Query { tasks: [Task!]! }\n\
         enum Status { OPEN DONE }\n\
         type Task { id: ID! title: String! status: Status! @default(value: OPEN)\n\
           rank: Float! @default(value: 1) due: DateTime @default(value: \"now\") }\n",
    )]);
    let task = model.entity("Task").unwrap();
    let f = |n: &str| task.field(n).unwrap();
    assert_eq!(
        f("status").default,
        Some(gatehouse_schema::FieldDefault::Value("OPEN".into()))
    );
    assert_eq!(
        f("rank").default,
        Some(gatehouse_schema::FieldDefault::Value(serde_json::json!(
            1.0
        )))
    );
    assert_eq!(f("due").default, Some(gatehouse_schema::FieldDefault::Now));
    assert!(task.required_on_create(f("title")));
    assert!(!task.required_on_create(f("status")));
    let again = load_ok(&[("printed.graphql", model.sdl.as_str())]);
    assert_eq!(
        again
            .entity("Task")
            .unwrap()
            .field("status")
            .unwrap()
            .default,
        f("status").default
    );
}

/// `upsertBook`, `updateBooks` and `deleteBooks` bind by convention, and
/// a schema of types only gets them with their enum and result type.
#[test]
fn upsert_and_bulk_writes_bind_and_are_generated() {
    use gatehouse_schema::{Binding, WriteInput};
    let model = load_ok(&[(
        "a.graphql",
        "type Book @unique(fields: [\"shelf\", \"slot\"]) {\n\
           id: ID!\n\
           isbn: String @unique\n\
           title: String!\n\
           shelf: String!\n\
           slot: Int!\n\
         }\n",
    )]);
    let book = model.entity("Book").unwrap();
    let keyed: Vec<&str> = book
        .unique_key_fields()
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(keyed, ["id", "isbn", "shelf", "slot"]);
    assert!(book.unique_key(&["slot", "shelf"]).is_some());
    assert!(book.unique_key(&["isbn"]).is_some());
    assert!(book.unique_key(&["shelf"]).is_none());
    assert!(book.unique_key(&["isbn", "isbn"]).is_none());
    assert_eq!(book.bulk_name(), "Books");
    let rf = |name: &str| model.mutations.iter().find(|m| m.name == name).unwrap();
    assert!(matches!(
        &rf("upsertBook").binding,
        Binding::Upsert { on_conflict, input: WriteInput::Object { type_name, .. } }
            if on_conflict == "onConflict" && type_name == "BookCreateInput"
    ));
    assert!(matches!(
        &rf("updateBooks").binding,
        Binding::UpdateMany { where_arg, set: WriteInput::Object { type_name, .. } }
            if where_arg.type_name == "BookWhere" && type_name == "BookUpdateInput"
    ));
    assert!(matches!(
        &rf("deleteBooks").binding,
        Binding::DeleteMany { .. }
    ));
    for name in ["upsertBook", "updateBooks", "deleteBooks"] {
        let access = model.root_access(rf(name));
        assert_eq!((access.scope, access.is_read), ("write", false), "{name}");
    }
    assert_eq!(model.bulk_results.len(), 1);
    assert!(model.enum_def("BookUniqueField").is_some());
    assert!(
        model
            .sdl
            .contains("type BookBulkResult {\n  count: Int!\n  rows: [Book!]!\n}"),
        "{}",
        model.sdl
    );
    // A bulk result is not stored.
    assert!(model.entity("BookBulkResult").is_none());
}

/// A type whose plural is its own name (`News`) gets `updateNewsList`.
#[test]
fn a_bulk_write_of_a_type_named_as_its_plural_ends_with_list() {
    let model = load_ok(&[("a.graphql", "type News { id: ID! title: String! }\n")]);
    assert_eq!(model.entity("News").unwrap().bulk_name(), "NewsList");
    for name in [
        "updateNewsList",
        "deleteNewsList",
        "upsertNews",
        "updateNews",
    ] {
        assert!(
            model.mutations.iter().any(|m| m.name == name),
            "{name}: {}",
            model.sdl
        );
    }
}

/// A types-only schema may name the inputs its generated roots bring
/// (`TaskWhere`, `TaskOrderBy`) in its own fields' arguments.
#[test]
fn types_only_fields_may_name_generated_inputs() {
    let model = load_ok(&[(
        "s.graphql",
        "type Project { id: ID! name: String! tasks(first: Int, where: TaskWhere, orderBy: [TaskOrderBy!]): [Task!]! }\n\
         type Task { id: ID! title: String! done: Boolean! project: Project! }",
    )]);
    assert!(model.input("TaskWhere").is_some());
    assert!(
        model
            .sdl
            .contains("tasks(first: Int, where: TaskWhere, orderBy: [TaskOrderBy!]): [Task!]!"),
        "{}",
        model.sdl
    );
    // A genuine mistake is still reported where it was written.
    let err = load_err(&[(
        "s.graphql",
        "type Project { id: ID! tasks(where: TaskWhere): [Task!]! size: Sizes }\n\
         type Task { id: ID! title: String! project: Project! }",
    )]);
    assert!(err.contains("s.graphql:1:"), "{err}");
    assert!(err.contains("Sizes"), "{err}");
}
