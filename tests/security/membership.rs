//! Tenancy in rows (`docs/design/policies.md`, "Relation rules"), attacked
//! through the real server on each backend: a member making himself an
//! owner of a club, by a new membership row or by changing his own; and a
//! filter through a to-many relation probing rows the caller cannot read.
//! The fixture: `Club` / `ClubMember` (membership rules) and `Shelf` (open)
//! with `Card`s of an org (`$org`: alice acme, bob globex).

use serde_json::{Value, json};

use crate::Server;

fn code(r: &Value) -> &str {
    r["errors"][0]["extensions"]["code"].as_str().unwrap_or("")
}

/// `token`'s user creates a club with itself as first owner, in one
/// request; the club's id and the user's `sub` (the club's creator).
async fn club(s: &Server, token: &str, name: &str) -> (String, String) {
    // The creator's `sub` is filled from the token; the first member row
    // names it too, so it is read back first from a throwaway club.
    let probe = s
        .gql(
            Some(token),
            "mutation($n: String!) { createClub(input: {name: $n}) { createdBy } }",
            json!({ "n": format!("{name}-probe") }),
        )
        .await;
    let sub = probe["data"]["createClub"]["createdBy"]
        .as_str()
        .unwrap_or_else(|| panic!("{probe}"))
        .to_string();
    let d = s
        .data(
            token,
            "mutation($n: String!, $u: String!) { createClub(input: {name: $n, members: [{user: $u, role: OWNER}]}) { id members { user role } } }",
            json!({"n": name, "u": sub}),
        )
        .await;
    assert_eq!(
        d["createClub"]["members"],
        json!([{"user": sub, "role": "OWNER"}])
    );
    (d["createClub"]["id"].as_str().unwrap().to_string(), sub)
}

const ADD: &str = "mutation($c: ID!, $u: String!, $r: ClubRole!) { createClubMember(club: $c, user: $u, role: $r) { id } }";

#[tokio::test]
async fn a_member_cannot_make_himself_an_owner() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let (chess, _) = club(&s, &alice, "chess").await;
        let (_, bob_sub) = club(&s, &bob, "go").await;
        // bob, a stranger to chess, cannot even name it...
        let r = s
            .gql(
                Some(&bob),
                ADD,
                json!({"c": chess, "u": bob_sub, "r": "OWNER"}),
            )
            .await;
        assert!(r["data"].is_null(), "{b}: {r}");
        assert_ne!(code(&r), "FORBIDDEN", "{b}: a hidden club's existence: {r}");
        // ...and once a member, cannot promote himself, by a new row...
        let d = s
            .data(
                &alice,
                ADD,
                json!({"c": chess, "u": bob_sub, "r": "MEMBER"}),
            )
            .await;
        let mine = d["createClubMember"]["id"].as_str().unwrap().to_string();
        let r = s
            .gql(
                Some(&bob),
                ADD,
                json!({"c": chess, "u": bob_sub, "r": "OWNER"}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        // ...nor by changing his own.
        let r = s
            .gql(
                Some(&bob),
                "mutation($id: ID!) { updateClubMember(id: $id, role: OWNER) { role } }",
                json!({ "id": mine }),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        // Nothing was written: one owner, one member.
        let d = s
            .data(&alice, "{ clubs { name members { role } } }", json!({}))
            .await;
        let chess = d["clubs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "chess")
            .unwrap()
            .clone();
        assert_eq!(
            chess["members"],
            json!([{"role": "OWNER"}, {"role": "MEMBER"}]),
            "{b}"
        );
    }
}

#[tokio::test]
async fn a_hidden_child_does_not_make_its_parent_match() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let shelf = s
            .data(
                &alice,
                "mutation { createShelf(name: \"plans\") { id } }",
                json!({}),
            )
            .await["createShelf"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        s.data(
            &alice,
            "mutation($s: ID!) { createCard(shelf: $s, title: \"merger\") { id } }",
            json!({ "s": shelf }),
        )
        .await;
        let q = r#"query($t: String!) { shelves(where: {cards_some: {title: $t}}) { name } shelvesCount(where: {cards_some: {title: $t}}) none: shelves(where: {cards_none: {title: $t}}) { name } }"#;
        // alice's org wrote the card: her filter finds the shelf.
        let d = s.data(&alice, q, json!({"t": "merger"})).await;
        assert_eq!(d["shelves"], json!([{"name": "plans"}]), "{b}");
        assert_eq!(d["shelvesCount"], 1);
        // bob's org cannot read it: the filter cannot tell him it is there.
        let d = s.data(&bob, q, json!({"t": "merger"})).await;
        assert_eq!(d["shelves"], json!([]), "{b}: {d}");
        assert_eq!(d["shelvesCount"], 0, "{b}");
        assert_eq!(d["none"], json!([{"name": "plans"}]), "{b}");
    }
}
