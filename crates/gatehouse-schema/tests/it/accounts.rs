//! `@account` and `@claim`: the type whose rows sign in.

use crate::{load_err, load_ok};

const USER: &str = r#"type User @account @policy(read: {id: "$sub"}, bypass: "admin") {
  id: ID!
  username: String! @unique
  email: String @unique
  emailVerified: Boolean!
  displayName: String
  disabled: Boolean
  org: String @claim
  level: Int @claim(name: "lvl")
  notes: [Note!]!
}

type Note @policy(all: {owner: "$sub"}) {
  id: ID!
  owner: User!
  text: String!
}
"#;

#[test]
fn an_account_type_is_known_with_its_recognised_fields_and_claims() {
    let model = load_ok(&[("user.graphql", USER)]);
    let account = model.account.as_ref().expect("an account type");
    assert_eq!(model.entities[account.entity.index()].name, "User");
    assert!(account.email && account.email_verified && account.disabled && account.display_name);
    let claims: Vec<(&str, &str)> = account
        .claims
        .iter()
        .map(|c| (c.claim.as_str(), c.field.as_str()))
        .collect();
    assert_eq!(claims, [("org", "org"), ("lvl", "level")]);
    assert_eq!(account.claim_field("lvl"), Some("level"));
}

#[test]
fn email_verified_is_set_by_the_server_and_in_no_input() {
    let model = load_ok(&[("user.graphql", USER)]);
    let user = model.entity("User").unwrap();
    assert!(user.field("emailVerified").unwrap().is_server_set());
    for input in ["UserCreateInput", "UserUpdateInput"] {
        let input = model.input(input).expect(input);
        assert!(input.fields.iter().all(|f| f.name != "emailVerified"));
        assert!(input.fields.iter().any(|f| f.name == "username"));
    }
}

#[test]
fn a_schema_without_an_account_type_has_none() {
    let model = load_ok(&[("s.graphql", crate::BASE_TYPES)]);
    assert!(model.account.is_none());
}

#[test]
fn an_account_type_needs_a_unique_username() {
    let err = load_err(&[(
        "user.graphql",
        "type User @account { id: ID! name: String! }",
    )]);
    assert!(err.contains("has no `username` field"), "{err}");
    let err = load_err(&[(
        "user.graphql",
        "type User @account { id: ID! username: String! }",
    )]);
    assert!(
        err.contains("`User.username` of the account type is `String!` without `@unique`"),
        "{err}"
    );
}

#[test]
fn a_recognised_field_of_another_type_is_refused() {
    let err = load_err(&[(
        "user.graphql",
        "type User @account { id: ID! username: String! @unique disabled: String }",
    )]);
    assert!(
        err.contains("`User.disabled` of the account type is `String`"),
        "{err}"
    );
    assert!(err.contains("declare it `disabled: Boolean`"), "{err}");
}

#[test]
fn two_account_types_are_refused() {
    let err = load_err(&[(
        "user.graphql",
        "type User @account { id: ID! username: String! @unique }\n\
         type Robot @account { id: ID! username: String! @unique }",
    )]);
    assert!(err.contains("already is the account type"), "{err}");
}

#[test]
fn a_registered_claim_name_is_refused() {
    for (field, expected) in [
        ("sub: String @claim", "claim name \"sub\" is reserved"),
        ("scope: String @claim", "claim name \"scope\" is reserved"),
        (
            "team: String @claim(name: \"email\")",
            "fills the claim \"email\" from the account",
        ),
        (
            "team: String @claim(name: \"amr\")",
            "claim name \"amr\" is reserved",
        ),
    ] {
        let err = load_err(&[(
            "user.graphql",
            &format!("type User @account {{ id: ID! username: String! @unique {field} }}"),
        )]);
        assert!(err.contains(expected), "{field}: {err}");
    }
}

#[test]
fn a_claim_outside_the_account_type_or_on_a_relation_is_refused() {
    let err = load_err(&[(
        "s.graphql",
        "type User @account { id: ID! username: String! @unique }\n\
         type Team { id: ID! org: String @claim }",
    )]);
    assert!(
        err.contains("`@claim` on `Team.org`, which is not a field of the account type"),
        "{err}"
    );
    let err = load_err(&[(
        "s.graphql",
        "type User @account { id: ID! username: String! @unique team: Team @claim }\n\
         type Team { id: ID! name: String }",
    )]);
    assert!(
        err.contains("`@claim` on `User.team`, which is not a single stored value"),
        "{err}"
    );
}

#[test]
fn two_fields_cannot_be_one_claim() {
    let err = load_err(&[(
        "s.graphql",
        "type User @account { id: ID! username: String! @unique org: String @claim team: String @claim(name: \"org\") }",
    )]);
    assert!(
        err.contains("another field already is the claim `org`"),
        "{err}"
    );
}

#[test]
fn an_account_type_without_a_policy_is_warned_about() {
    let model = load_ok(&[(
        "s.graphql",
        "type User @account { id: ID! username: String! @unique }",
    )]);
    let warnings: Vec<String> = model.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        warnings.iter().any(|w| w.contains("has no `@policy`")),
        "{warnings:?}"
    );
}
