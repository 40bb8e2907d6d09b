//! Many-to-many fields through a join type, composite unique keys, and
//! schemas of types only.

use gatehouse_schema::{FieldKind, GENERATED_ROOTS_PATH, RelationKind, load_sources, scaffold};

use crate::{load_err, load_ok, sources};

const TAGS: &str = r#"type Book {
  id: ID!
  title: String!
  tags(first: Int, name_starts_with: String, orderBy: TagOrder): [Tag!]! @relation(through: "BookTag")
  tagsCount: Int!
}
type Tag {
  id: ID!
  name: String!
  books: [Book!]! @relation(through: "BookTag")
}
type BookTag @unique(fields: ["book", "tag"]) {
  id: ID!
  book: Book! @relation(onDelete: CASCADE)
  tag: Tag! @relation(onDelete: CASCADE)
}
enum TagOrder { name_ASC name_DESC }
type Query { books: [Book!]! tags: [Tag!]! }
"#;

#[test]
fn through_binds_a_many_to_many_relation_both_ways() {
    let model = load_ok(&[("a.graphql", TAGS)]);
    let book = model.entity("Book").unwrap();
    let tags = book.field("tags").unwrap();
    let (join, near, far) = model.through_of(tags).unwrap();
    assert_eq!(
        (join.name.as_str(), near.name.as_str(), far.name.as_str()),
        ("BookTag", "book", "tag")
    );
    assert_eq!(model.target_of(tags).unwrap().name, "Tag");
    assert!(model.inverse_of(tags).is_none());
    let FieldKind::ToMany { list, .. } = &tags.kind else {
        panic!("{:?}", tags.kind)
    };
    assert_eq!(list.count.as_deref(), Some("first"));
    assert_eq!(list.filters[0].field, "name");
    assert!(list.order_by.is_some());
    // The count counts what the many-to-many field lists.
    let count = book.field("tagsCount").unwrap();
    assert_eq!(model.relation_of(count), model.relation_of(tags));

    let tag = model.entity("Tag").unwrap();
    let books = tag.field("books").unwrap();
    let (join, near, far) = model.through_of(books).unwrap();
    assert_eq!(
        (join.name.as_str(), near.name.as_str(), far.name.as_str()),
        ("BookTag", "tag", "book")
    );
    assert!(matches!(
        model.relation_of(books).unwrap().kind,
        RelationKind::ManyToMany { .. }
    ));
    // The join type's own to-one fields stay ordinary references, so
    // deleting a Book follows their onDelete.
    let bt = model.entity_id("BookTag").unwrap();
    let book_id = model.entity_id("Book").unwrap();
    assert!(model.references_to(book_id).any(|(f, _)| f.entity == bt));
}

#[test]
fn a_self_relation_through_a_join_type_names_its_near_field() {
    let model = load_ok(&[(
        "a.graphql",
        r#"type User {
  id: ID!
  follows: [User!]! @relation(through: "Follow", field: "follower")
  followers: [User!]! @relation(through: "Follow", field: "followee")
}
type Follow { id: ID! follower: User! followee: User! }
type Query { users: [User!]! }
"#,
    )]);
    let user = model.entity("User").unwrap();
    let (_, near, far) = model.through_of(user.field("follows").unwrap()).unwrap();
    assert_eq!(
        (near.name.as_str(), far.name.as_str()),
        ("follower", "followee")
    );
    let (_, near, far) = model.through_of(user.field("followers").unwrap()).unwrap();
    assert_eq!(
        (near.name.as_str(), far.name.as_str()),
        ("followee", "follower")
    );
}

#[test]
fn through_diagnostics_say_what_to_write() {
    let err = load_err(&[(
        "a.graphql",
        r#"type Book {
  id: ID!
  tags: [Tag!]! @relation(through: "BookTags")
  labels: [Tag!]! @relation(through: "Shelf")
  topics: [Tag!]! @relation(through: "Pair")
  title: String @relation(through: "BookTag")
  self: [Book!]! @relation(through: "Book")
}
type Tag { id: ID! }
type Shelf { id: ID! book: Book! }
type Pair { id: ID! book: Book! a: Tag! b: Tag! }
type BookTag { id: ID! book: Book! tag: Tag! }
type User { id: ID! friends: [User!]! @relation(through: "Friendship") }
type Friendship { id: ID! a: User! b: User! }
type Query { books: [Book!]! }
"#,
    )]);
    insta::assert_snapshot!(err);
}

#[test]
fn composite_unique_keys_bind_with_their_columns() {
    let model = load_ok(&[("a.graphql", TAGS)]);
    let bt = model.entity("BookTag").unwrap();
    assert_eq!(bt.unique_keys.len(), 1);
    assert_eq!(bt.unique_keys[0].fields, ["book", "tag"]);
    assert_eq!(bt.unique_keys[0].columns, ["book_id", "tag_id"]);
    assert_eq!(
        bt.unique_keys[0].index_name(&bt.table),
        "book_tag_book_id_tag_id_ukey"
    );
    // Repeatable: several keys on one type.
    let model = load_ok(&[(
        "a.graphql",
        r#"type Seat @unique(fields: ["row", "number"]) @unique(fields: ["hall", "label"]) {
  id: ID! row: Int! number: Int! hall: String! label: String
}
type Query { seats: [Seat!]! }
"#,
    )]);
    assert_eq!(model.entity("Seat").unwrap().unique_keys.len(), 2);
}

#[test]
fn composite_unique_diagnostics_say_what_to_write() {
    let err = load_err(&[(
        "a.graphql",
        r#"type Vote @unique(fields: ["user", "linkk"]) @unique(fields: ["user"]) @unique @unique(fields: ["voters", "user"]) @unique(fields: ["user", "user"]) {
  id: ID!
  user: User!
  link: String!
  tags: [String!]
  note: String @unique(fields: ["note", "link"])
}
type Other @unique(fields: ["a", "b"]) @unique(fields: ["b", "a"]) @unique(fields: ["tags", "a"]) { id: ID! a: Int b: Int tags: [Int!] }
type User { id: ID! voters: [Vote!]! }
type Query { votes: [Vote!]! }
"#,
    )]);
    insta::assert_snapshot!(err);
}

/// The example schema's types, without its root types.
fn example_types() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/library/schema");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            // The roots are whole in their files; drop those definitions.
            let kept = strip_roots(&text);
            (!kept.trim().is_empty()).then_some((name, kept))
        })
        .collect()
}

/// `text` without its `type Query/Mutation/Subscription { ... }` blocks.
pub fn strip_roots(text: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    let mut depth = 0i32;
    for line in text.lines() {
        let t = line.trim_start();
        if !skipping
            && ["type Query", "type Mutation", "type Subscription"]
                .iter()
                .any(|r| t.starts_with(r))
        {
            skipping = true;
            depth = 0;
        }
        if skipping {
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if depth <= 0 && line.contains('}') {
                skipping = false;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[test]
fn a_schema_of_types_only_gets_the_scaffold_roots() {
    let files = example_types();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let model = load_ok(&refs);
    assert!(model.queries.iter().any(|q| q.name == "books"));
    assert!(model.mutations.iter().any(|m| m.name == "createBook"));
    assert!(model.subscriptions.iter().any(|s| s.name == "bookCreated"));
    // Generated from the same code as `schema scaffold`: the printed
    // schema holds the scaffold's roots.
    let types = gatehouse_schema::load_sources_with(
        &sources(&refs),
        gatehouse_schema::LoadOptions {
            require_query: false,
        },
    )
    .unwrap();
    let scaffolded = scaffold(&types);
    let query_block = scaffolded.split("\n\n").next().unwrap();
    for line in query_block.lines().skip(1).filter(|l| l.starts_with("  ")) {
        assert!(
            model.sdl.contains(line.trim()),
            "{line} missing from\n{}",
            model.sdl
        );
    }
    // Kept in step with the types: a new type gets its roots.
    let mut more = refs.clone();
    more.push(("extra.graphql", "type Pen { id: ID! label: String! }\n"));
    let model = load_ok(&more);
    assert!(model.queries.iter().any(|q| q.name == "pens"));
    assert!(model.mutations.iter().any(|m| m.name == "deletePen"));
}

#[test]
fn generated_roots_report_no_diagnostics_of_their_own() {
    // A types-only schema with an error in the types: the error is the
    // user's, at their file, and nothing points into the generated text.
    let err = load_err(&[(
        "a.graphql",
        "type Book { id: ID! title: String! author: Author }\ntype Author { id: ID! name: Strin }\n",
    )]);
    assert!(!err.contains(GENERATED_ROOTS_PATH), "{err}");
    assert!(err.contains("a.graphql:2:"), "{err}");
    // And every generated schema over the relation shapes loads cleanly.
    for text in [TAGS.replace("type Query { books: [Book!]! tags: [Tag!]! }\n", "")] {
        match load_sources(&sources(&[("a.graphql", text.as_str())])) {
            Ok(m) => assert!(!m.queries.is_empty()),
            Err(d) => panic!("{d}"),
        }
    }
}

/// A create of a type with a many-to-many field takes the existing rows
/// to link in an input derived once per relation (`BookTagsConnect {
/// connect: [ID!]! }`), as an argument or a field of its input object;
/// the printed schema declares it and loads again to the same Model. A
/// join type that holds more than the link takes no connect.
#[test]
fn creates_take_the_rows_to_link_in_a_derived_connect_input() {
    let sdl = format!(
        "{TAGS}type Mutation {{ createBook(title: String!): Book! createTag(input: NewTag!): Tag! }}\ninput NewTag {{ name: String! }}\n"
    );
    let model = load_ok(&[("a.graphql", &sdl)]);
    let book = model.entity("Book").unwrap();
    assert!(model.connect_of(book.field("tags").unwrap()).is_some());
    let connect = model.input("BookTagsConnect").expect("derived");
    assert_eq!(connect.fields.len(), 1);
    assert_eq!(connect.fields[0].name, "connect");
    assert_eq!(connect.fields[0].ty.to_string(), "[ID!]!");
    let create = model
        .mutations
        .iter()
        .find(|m| m.name == "createBook")
        .unwrap();
    let arg = create.args.iter().find(|a| a.name == "tags").unwrap();
    assert_eq!(arg.ty.to_string(), "BookTagsConnect");
    let new_tag = model.input("NewTag").unwrap();
    let books = new_tag.fields.iter().find(|f| f.name == "books").unwrap();
    assert_eq!(books.ty.to_string(), "TagBooksConnect");
    assert!(model.sdl.contains("input BookTagsConnect"), "{}", model.sdl);

    let again = load_ok(&[("printed.graphql", model.sdl.as_str())]);
    let ty = |m: &gatehouse_schema::Model, root: &str, arg: &str| {
        let rf = m.mutations.iter().find(|r| r.name == root).unwrap();
        rf.args
            .iter()
            .find(|a| a.name == arg)
            .map(|a| a.ty.to_string())
    };
    assert_eq!(
        ty(&again, "createBook", "tags").as_deref(),
        Some("BookTagsConnect")
    );
    assert_eq!(
        again.input("BookTagsConnect").unwrap().fields[0]
            .ty
            .to_string(),
        "[ID!]!"
    );
    assert_eq!(
        format!(
            "{:?}",
            again
                .mutations
                .iter()
                .map(|r| &r.binding)
                .collect::<Vec<_>>()
        ),
        format!(
            "{:?}",
            model
                .mutations
                .iter()
                .map(|r| &r.binding)
                .collect::<Vec<_>>()
        )
    );

    // A join type with a required field of its own: written through its
    // own type, so no connect.
    let more = sdl.replace(
        "tag: Tag! @relation(onDelete: CASCADE)\n}",
        "tag: Tag! @relation(onDelete: CASCADE)\n  role: String!\n}",
    );
    assert_ne!(more, sdl);
    let model = load_ok(&[("a.graphql", &more)]);
    assert!(
        model
            .connect_of(model.entity("Book").unwrap().field("tags").unwrap())
            .is_none()
    );
    assert!(model.input("BookTagsConnect").is_none());
    let create = model
        .mutations
        .iter()
        .find(|m| m.name == "createBook")
        .unwrap();
    assert!(create.args.iter().all(|a| a.name != "tags"));
}
