//! The rules every layer asks the Model for: filter operators per field,
//! the value checker, and the mapping of GraphQL type references.

use std::borrow::Cow;

use gatehouse_schema::{
    FilterOp, Model, OpRefusal, Quantifier, Scalar, TypeLayer, TypeRef, ValueError, ValueType,
    valid_date,
};
use serde_json::{Value as Json, json};

use crate::load_ok;

const SDL: &str = r#"
enum Status { AVAILABLE LOST }

type Author {
  id: ID!
  name: String!
  books: [Book!]!
}

type Book {
  id: ID!
  title: String!
  year: Int
  rating: Float
  published: Date
  available: Boolean
  status: Status!
  tags: [String!]
  scores: [Int]
  author: Author!
}

type Query {
  books: [Book!]!
}
"#;

fn model() -> Model {
    load_ok(&[("schema.graphql", SDL)])
}

fn ops(m: &Model, entity: &str, field: &str) -> Vec<FilterOp> {
    let f = m.entity(entity).unwrap().field(field).unwrap();
    f.filter_ops().to_vec()
}

#[test]
fn operators_per_field() {
    use FilterOp::*;
    let m = model();
    let base = [Eq, Not, In, NotIn, IsNull];
    let ordered: Vec<FilterOp> = base.iter().copied().chain([Lt, Lte, Gt, Gte]).collect();
    let text: Vec<FilterOp> = ordered
        .iter()
        .copied()
        .chain([Contains, StartsWith, EndsWith])
        .collect();
    let words: Vec<FilterOp> = text
        .iter()
        .copied()
        .chain([IEq, IContains, IStartsWith, IEndsWith])
        .collect();
    // Case-insensitive operators are for words: String, not ID.
    assert_eq!(ops(&m, "Book", "title"), words);
    assert_eq!(ops(&m, "Book", "id"), text);
    // A to-one reference compares its target's id.
    assert_eq!(ops(&m, "Book", "author"), text);
    assert_eq!(ops(&m, "Book", "year"), ordered);
    assert_eq!(ops(&m, "Book", "rating"), ordered);
    assert_eq!(ops(&m, "Book", "published"), ordered);
    assert_eq!(ops(&m, "Book", "available"), base);
    assert_eq!(ops(&m, "Book", "status"), base);
    assert_eq!(ops(&m, "Book", "tags"), [Contains, IsNull]);
    assert_eq!(ops(&m, "Book", "scores"), [Contains, IsNull]);
    assert_eq!(ops(&m, "Author", "books"), []);
}

#[test]
fn operator_refusals_say_why() {
    let m = model();
    let book = m.entity("Book").unwrap();
    let field = |n: &str| book.field(n).unwrap();
    assert_eq!(field("year").check_filter_op(FilterOp::Gt), Ok(()));
    assert_eq!(
        field("status").check_filter_op(FilterOp::Lt),
        Err(OpRefusal::NotOrdered)
    );
    assert_eq!(
        field("year").check_filter_op(FilterOp::StartsWith),
        Err(OpRefusal::NotText)
    );
    assert_eq!(
        field("tags").check_filter_op(FilterOp::Eq),
        Err(OpRefusal::ListField)
    );
    assert_eq!(field("tags").check_filter_op(FilterOp::Contains), Ok(()));
    let books = m.entity("Author").unwrap().field("books").unwrap();
    assert_eq!(
        books.check_filter_op(FilterOp::Eq),
        Err(OpRefusal::NotFilterable)
    );
}

fn check(m: &Model, field: &str, v: Json) -> Result<Json, ValueError> {
    let f = m.entity("Book").unwrap().field(field).unwrap();
    m.check_field_value(f, &v).map(Cow::into_owned)
}

fn message(m: &Model, field: &str, v: Json) -> String {
    check(m, field, v).unwrap_err().to_string()
}

#[test]
fn dates_follow_the_calendar() {
    assert!(valid_date("2024-02-29"));
    assert!(valid_date("2000-02-29"));
    assert!(!valid_date("2023-02-29"));
    assert!(!valid_date("1900-02-29"));
    assert!(!valid_date("2024-13-01"));
    assert!(!valid_date("2024-00-10"));
    assert!(!valid_date("2024-01-32"));
    assert!(!valid_date("2024-04-31"));
    assert!(!valid_date("2024-1-01"));
    assert!(!valid_date("２０２４-01-01"));
    let m = model();
    assert_eq!(
        check(&m, "published", json!("2024-02-29")),
        Ok(json!("2024-02-29"))
    );
    assert_eq!(
        message(&m, "published", json!("2023-02-29")),
        "`2023-02-29` is not a valid date (expected YYYY-MM-DD)"
    );
    assert_eq!(
        message(&m, "published", json!(20240229)),
        "expected a Date (YYYY-MM-DD), got a number"
    );
    assert!(Scalar::Date.check_text("2024-02-29").is_ok());
    assert!(Scalar::Date.check_text("2100-02-29").is_err());
}

#[test]
fn enums_take_their_values_only() {
    let m = model();
    assert_eq!(check(&m, "status", json!("LOST")), Ok(json!("LOST")));
    assert_eq!(
        message(&m, "status", json!("GONE")),
        "`GONE` is not a value of Status (expected one of: AVAILABLE, LOST)"
    );
    assert_eq!(
        message(&m, "status", json!(1)),
        "expected a Status value, got a number"
    );
    assert_eq!(
        message(&m, "status", json!(null)),
        "is required and cannot be null"
    );
}

#[test]
fn scalars_take_their_kind_only() {
    let m = model();
    assert_eq!(
        message(&m, "title", json!(5)),
        "expected a String, got a number"
    );
    assert_eq!(
        message(&m, "title", json!("a\u{0}b")),
        "text cannot contain the NUL character (U+0000)"
    );
    assert_eq!(
        message(&m, "available", json!("yes")),
        "expected a Boolean, got a string"
    );
    assert_eq!(
        message(&m, "year", json!("1990")),
        "expected an Int, got a string"
    );
    // 3.0 is an Int, and canonical as 3.
    assert_eq!(check(&m, "year", json!(1990.0)), Ok(json!(1990)));
    assert_eq!(message(&m, "year", json!(1.5)), "1.5 is not an integer");
    assert_eq!(
        message(&m, "year", json!(3_000_000_000_i64)),
        "3000000000 does not fit a 32-bit Int"
    );
    assert_eq!(check(&m, "rating", json!(2)), Ok(json!(2.0)));
    assert_eq!(check(&m, "year", json!(null)), Ok(json!(null)));
    assert_eq!(message(&m, "author", json!("")), "an id cannot be empty");
    assert_eq!(
        message(&m, "author", json!(7)),
        "expected an ID (string), got a number"
    );
    let books = m.entity("Author").unwrap().field("books").unwrap();
    assert!(matches!(
        m.check_field_value(books, &json!([])),
        Err(ValueError::ToMany { .. })
    ));
}

#[test]
fn lists_check_each_element() {
    let m = model();
    let tags = json!(["a", "b"]);
    let f = m.entity("Book").unwrap().field("tags").unwrap();
    // Unchanged values are not copied.
    assert!(matches!(
        m.check_field_value(f, &tags),
        Ok(Cow::Borrowed(_))
    ));
    assert_eq!(
        message(&m, "tags", json!("a")),
        "expected a list of String, got a string"
    );
    assert_eq!(
        message(&m, "tags", json!(["a", null])),
        "list elements cannot be null"
    );
    assert_eq!(
        message(&m, "tags", json!(["a", 1])),
        "expected a String, got a number"
    );
    // `[Int]` takes nulls, and elements are made canonical.
    assert_eq!(
        check(&m, "scores", json!([1, null, 2.0])),
        Ok(json!([1, null, 2]))
    );
    assert_eq!(
        m.check_value(&ValueType::Scalar(Scalar::Int), &json!(4)),
        Ok(Cow::Owned(json!(4)))
    );
}

/// A stand-in for another library's type references.
#[derive(Debug, PartialEq)]
enum Foreign {
    Name(String, bool),
    List(Box<Foreign>, bool),
}

#[test]
fn type_references_map_both_ways() {
    let m = model();
    let book = m.entity("Book").unwrap();
    let tags = &book.field("tags").unwrap().ty;
    assert_eq!(tags.to_string(), "[String!]");
    let books = &m.entity("Author").unwrap().field("books").unwrap().ty;
    assert_eq!(books.to_string(), "[Book!]!");

    let written: Foreign = books.write(
        |n| Foreign::Name(n.to_string(), false),
        |t| match t {
            Foreign::Name(n, _) => Foreign::Name(n, true),
            Foreign::List(i, _) => Foreign::List(i, true),
        },
        |t| Foreign::List(Box::new(t), false),
    );
    assert_eq!(
        written,
        Foreign::List(Box::new(Foreign::Name("Book".into(), true)), true)
    );
    let read = TypeRef::read(&written, |t| match t {
        Foreign::Name(n, nn) => (*nn, TypeLayer::Named(n.as_str())),
        Foreign::List(i, nn) => (*nn, TypeLayer::List(i.as_ref())),
    });
    assert_eq!(&read, books);
    let nullable = TypeRef::read(&Foreign::Name("Int".into(), false), |t| match t {
        Foreign::Name(n, nn) => (*nn, TypeLayer::Named(n.as_str())),
        Foreign::List(i, nn) => (*nn, TypeLayer::List(i.as_ref())),
    });
    assert_eq!(nullable, TypeRef::Named("Int".into()));
}

#[test]
fn ordering_and_input_types_per_field() {
    let m = model();
    let book = m.entity("Book").unwrap();
    let field = |n: &str| book.field(n).unwrap();
    assert!(field("title").is_orderable());
    assert!(field("author").is_orderable());
    assert!(!field("tags").is_orderable());
    let books = m.entity("Author").unwrap().field("books").unwrap();
    assert!(!books.is_orderable());

    let input = |n: &str| field(n).input_type().map(|t| t.to_string());
    assert_eq!(input("id").as_deref(), Some("ID"));
    assert_eq!(input("author").as_deref(), Some("ID"));
    assert_eq!(input("status").as_deref(), Some("Status"));
    assert_eq!(input("tags").as_deref(), Some("[String!]"));
    assert_eq!(books.input_type(), None);
}

#[test]
fn owner_fields_are_those_a_rule_ties_to_a_claim() {
    let m = load_ok(&[(
        "a.graphql",
        r#"
type Query { tasks: [Task!]! }
type Board @policy(read: {owner: "$sub"}) { id: ID! owner: String! name: String! }
type Task @policy(
  read: {OR: [{public: true}, {AND: [{org: "$org"}, {title_contains: "$sub"}]}]}
  update: {NOT: {blocked: "$sub"}}
  delete: {board: {owner: "$sub"}}
  create: {reviewer_in: ["$sub"]}
) {
  id: ID!
  org: String!
  title: String!
  public: Boolean
  blocked: String
  reviewer: String
  board: Board
}
"#,
    )]);
    let task = m.entity("Task").unwrap();
    // Equality with a claim at any depth of AND/OR; not under NOT, not
    // another operator, not a field of the row a path reaches.
    assert_eq!(task.policy.owner_fields(), vec![("org", "org")]);
    for (field, owner) in [
        ("org", true),
        ("title", false),
        ("blocked", false),
        ("reviewer", false),
        ("board", false),
    ] {
        assert_eq!(task.policy.is_owner_field(field), owner, "{field}");
        let f = task.field(field).unwrap();
        assert_eq!(task.settable_on_update(f), !owner, "{field}");
    }
    // An owner field may be left out of a create even when required.
    assert!(!task.required_on_create(task.field("org").unwrap()));
    assert!(task.required_on_create(task.field("title").unwrap()));
    let board = m.entity("Board").unwrap();
    assert!(!board.required_on_create(board.field("owner").unwrap()));
    assert!(!board.settable_on_update(board.field("id").unwrap()));
}

#[test]
fn relation_filters_bind_in_rules_and_where_inputs_and_reach_no_owner_fields() {
    let m = load_ok(&[(
        "a.graphql",
        r#"
type Query { orgs(where: OrgWhere): [Org!]! categories(where: CategoryWhere): [Category!]! }
enum Role { OWNER MEMBER }
type Org @policy(read: {members_some: {user: "$sub"}}, create: {createdBy: "$sub"},
                 update: {members_some: {user: "$sub", role: OWNER}}) {
  id: ID!
  name: String!
  createdBy: String!
  members: [Member!]!
}
type Member @policy(write: {org: {OR: [{createdBy: "$sub"}, {members_some: {user: "$sub", role: OWNER}}]}}) {
  id: ID!
  org: Org!
  user: String!
  role: Role!
}
type Category { id: ID! name: String! parent: Category children: [Category!]! }
input OrgWhere { name: String members_some: MemberWhere members_every: MemberWhere members_none: MemberWhere }
input MemberWhere { user: String role: Role }
input CategoryWhere { name: String children_some: CategoryWhere }
"#,
    )]);
    let org = m.entity("Org").unwrap();
    // Only the org's own field tied to a claim; `Member.user`, reached
    // through `members_some`, is no owner field of either type.
    assert_eq!(org.policy.owner_fields(), vec![("createdBy", "sub")]);
    let member = m.entity("Member").unwrap();
    assert_eq!(member.policy.owner_fields(), Vec::<(&str, &str)>::new());
    assert!(member.settable_on_update(member.field("user").unwrap()));
    assert_eq!(
        org.policy.read.as_ref().unwrap().to_string(),
        r#"{members_some: {user: "$sub"}}"#
    );
    assert_eq!(
        member.policy.create.as_ref().unwrap().to_string(),
        r#"{org: {OR: [{createdBy: "$sub"}, {members_some: {AND: [{user: "$sub"}, {role: "OWNER"}]}}]}}"#
    );
    let w = m.where_input("OrgWhere").unwrap();
    let quantifiers: Vec<(&str, &str, Quantifier, &str)> = w
        .relations
        .iter()
        .map(|r| {
            (
                r.arg.as_str(),
                r.field.as_str(),
                r.quantifier,
                r.input.as_str(),
            )
        })
        .collect();
    assert_eq!(
        quantifiers,
        [
            ("members_some", "members", Quantifier::Some, "MemberWhere"),
            ("members_every", "members", Quantifier::Every, "MemberWhere"),
            ("members_none", "members", Quantifier::None, "MemberWhere"),
        ]
    );
    assert_eq!(m.where_input("MemberWhere").unwrap().entity, "Member");
    // An input that reaches itself through a relation binds.
    let c = m.where_input("CategoryWhere").unwrap();
    assert_eq!(c.relations[0].input, "CategoryWhere");
}
