//! Schemas written for other tools (`tests/fixtures/foreign-schemas/`):
//! each raw file is refused with diagnostics whose hints name the edits,
//! and the edited file (only those edits, listed in the fixtures' README)
//! loads and serves requests.

use gatehouse_graphql::GraphqlOptions;
use gatehouse_schema::{Source, load_sources};
use gatehouse_store::AccessContext;
use gatehouse_testkit::{TestDb, repo_root};
use serde_json::json;

use super::start_model;

fn fixture(dir: &str, file: &str) -> Vec<Source> {
    let path = repo_root()
        .join("tests/fixtures/foreign-schemas")
        .join(dir)
        .join(file);
    vec![Source {
        path: format!("{dir}/{file}"),
        text: std::fs::read_to_string(&path).unwrap(),
    }]
}

/// The rendered diagnostics of the raw file, checked to hold every hint
/// fragment of `hints`.
fn refused_with(dir: &str, hints: &[&str]) -> String {
    refused_at(dir, "raw.graphql", hints)
}

/// [`refused_with`] for another file of the fixture.
fn refused_at(dir: &str, file: &str, hints: &[&str]) -> String {
    let diags = load_sources(&fixture(dir, file)).expect_err("the schema loads");
    let text = diags.to_string();
    for h in hints {
        assert!(text.contains(h), "{dir}: no hint `{h}` in\n{text}");
    }
    // Every error carries a hint.
    for d in diags.0.iter() {
        assert!(d.hint.is_some(), "{dir}: no hint on {d}");
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amplify_blog() {
    refused_with(
        "amplify-blog",
        &[
            "remove `@model`",
            "remove the `AMPLIFY` input",
            "`@policy(write: {owner: \"$sub\"})` instead of `@auth(rules: ...)`",
            "remove `@hasMany`",
            "remove `@belongsTo`",
            "use `DateTime` (RFC 3339), with `@createdAt`",
        ],
    );
    let model = load_sources(&fixture("amplify-blog", "edited.graphql")).unwrap();
    // Types only: the roots were generated.
    assert!(model.mutations.iter().any(|m| m.name == "createBlog"));
    let s = start_model(
        TestDb::sqlite(),
        model.into(),
        GraphqlOptions::default(),
        1 << 20,
    )
    .await;
    let blog = s
        .data(
            "mutation { createBlog(input: {name: \"b\"}) { id createdAt } }",
            json!({}),
        )
        .await;
    let id = blog["createBlog"]["id"].as_str().unwrap().to_string();
    s.data(
        "mutation($b: ID!) { createPost(input: {title: \"p\", blog: $b}) { id } }",
        json!({"b": id}),
    )
    .await;
    let d = s
        .data(
            "{ blogs { name posts { title blog { name } } postsCount } }",
            json!({}),
        )
        .await;
    assert_eq!(
        d["blogs"],
        json!([{"name": "b", "posts": [{"title": "p", "blog": {"name": "b"}}], "postsCount": 1}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dgraph_tour() {
    refused_with(
        "dgraph-tour",
        &[
            "remove `@search`",
            "remove `@hasInverse`",
            "replace `@id` with `@unique`",
            "`friends: [Author!]! @relation(through: \"AuthorFriends\", field: \"author\")` with `type AuthorFriends { id: ID! author: Author! otherAuthor: Author! }`",
        ],
    );
    let model = load_sources(&fixture("dgraph-tour", "edited.graphql")).unwrap();
    let s = start_model(
        TestDb::sqlite(),
        model.into(),
        GraphqlOptions::default(),
        1 << 20,
    )
    .await;
    let mk = "mutation($n: String!) { createAuthor(input: {name: $n}) { id } }";
    let a = s.data(mk, json!({"n": "a"})).await["createAuthor"]["id"].clone();
    let b = s.data(mk, json!({"n": "b"})).await["createAuthor"]["id"].clone();
    s.data(
        "mutation($a: ID!, $b: ID!) { createAuthorFriends(input: {author: $a, otherAuthor: $b}) { id } }",
        json!({"a": a, "b": b}),
    )
    .await;
    let d = s
        .data(
            "{ authors(orderBy: [name_ASC]) { name friends { name } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        d["authors"],
        json!([{"name": "a", "friends": [{"name": "b"}]}, {"name": "b", "friends": []}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn howtographql_hackernews() {
    refused_with(
        "howtographql-hackernews",
        &[
            "remove a field that computes anything else",
            "`feed(...): [Link!]!` and `feedCount(...): Int!`",
            "remove `Feed`",
            "`createLink`",
            "remove `signup`",
            "remove `login`",
            "`createVote`",
            "store the caller as `user: String` and write `@policy(create: {user: \"$sub\"})` on `Vote`",
            "`linkCreated: Link!`",
            "`voteCreated: Vote!`",
            "remove `AuthPayload`",
        ],
    );
    // The second round: with the roots bound, their arguments and the
    // create's required fields are checked.
    refused_at(
        "howtographql-hackernews",
        "first-round.graphql",
        &[
            "argument `filter` of `Query.feed` binds to nothing",
            "a field of `Link` (id, description, url, postedBy, createdAt) with an optional operator suffix",
            "declare `enum LinkOrderBy { description_ASC description_DESC ... }` and `orderBy: [LinkOrderBy!]`",
            "_icontains",
            "declare `Link.createdAt: DateTime! @createdAt`",
            "the declaration can go",
        ],
    );
    let model = load_sources(&fixture("howtographql-hackernews", "edited.graphql")).unwrap();
    for db in TestDb::each().await {
        let b = db.backend();
        let s = start_model(db, model.clone().into(), GraphqlOptions::default(), 1 << 20).await;
        // Users sign up at the OAuth server; their rows are the store's.
        let user = s
            .store
            .entity("User")
            .unwrap()
            .insert(
                &AccessContext::system(),
                json!({"name": "u", "email": "u@x"})
                    .as_object()
                    .unwrap()
                    .clone(),
            )
            .await
            .unwrap()["id"]
            .clone();
        let link = s
            .data(
                "mutation { createLink(url: \"https://a\", description: \"graphql\") { id } }",
                json!({}),
            )
            .await["createLink"]["id"]
            .clone();
        let vote = "mutation($l: ID!, $u: ID!) { createVote(link: $l, user: $u) { id } }";
        s.data(vote, json!({"l": link, "u": user})).await;
        // A user votes once per link.
        let r = s.gql(vote, json!({"l": link, "u": user})).await;
        assert_eq!(r["errors"][0]["extensions"]["code"], "CONFLICT", "{b}: {r}");
        let d = s
            .data(
                "{ feed(description_contains: \"graph\", take: 10, orderBy: [createdAt_DESC]) { url voters { name } } feedCount(description_contains: \"graph\") }",
                json!({}),
            )
            .await;
        assert_eq!(
            d,
            json!({"feed": [{"url": "https://a", "voters": [{"name": "u"}]}], "feedCount": 1}),
            "{b}"
        );
    }
}
