//! Keyset pages (`EntityStore::page`): walks forwards and backwards while
//! rows are inserted before and after the cursor, ties and nulls in the
//! order, row policies, and cursors that are refused
//! (`docs/design/pagination.md`).

use gatehouse_store::{
    AccessContext, CursorPage, ListQuery, OrderBy, PageRequest, Store, StoreError,
};
use gatehouse_testkit::TestDb;
use serde_json::json;

use crate::common::{author, book, row};
use crate::conformance;

fn titles(page: &CursorPage) -> Vec<String> {
    let p = page.rows.position("title").unwrap();
    page.rows
        .rows
        .iter()
        .map(|r| r[p].as_str().unwrap().to_string())
        .collect()
}

async fn page(s: &Store, q: &ListQuery, p: PageRequest) -> Result<CursorPage, StoreError> {
    s.entity("Book")
        .unwrap()
        .page(&AccessContext::system(), q, &p)
        .await
}

fn forward(first: u64, after: Option<&str>) -> PageRequest {
    PageRequest {
        first: Some(first),
        after: after.map(str::to_string),
        ..PageRequest::default()
    }
}

fn backward(last: u64, before: Option<&str>) -> PageRequest {
    PageRequest {
        last: Some(last),
        before: before.map(str::to_string),
        ..PageRequest::default()
    }
}

/// Walks the whole list forwards in pages of `size`, calling `between`
/// after each page (to insert rows), and returns every title seen.
async fn walk_forward(
    s: &Store,
    q: &ListQuery,
    size: u64,
    mut between: impl AsyncFnMut(usize),
) -> Vec<String> {
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for n in 0.. {
        let got = page(s, q, forward(size, after.as_deref())).await.unwrap();
        assert_eq!(got.cursors().len(), got.rows.rows.len());
        assert_eq!(got.has_previous_page, after.is_some());
        seen.extend(titles(&got));
        if !got.has_next_page {
            break;
        }
        assert_eq!(got.rows.rows.len() as u64, size);
        after = got.last_cursor();
        between(n).await;
        assert!(n < 100, "the walk does not end");
    }
    seen
}

conformance!(
    a_forward_walk_skips_and_repeats_nothing_while_rows_are_inserted,
    |db, s| {
        let a = author(&s, "Alice").await;
        // Ties on `year` (and nulls), walked by `year` then the id.
        for (i, year) in [1990, 1990, 1990, 2000, 2000, 2010].iter().enumerate() {
            book(&s, &a, &format!("b{i}"), json!({"year": year})).await;
        }
        book(&s, &a, "null1", json!({"year": null})).await;
        book(&s, &a, "null2", json!({"year": null})).await;
        let q = ListQuery {
            order: vec![OrderBy::asc("year")],
            select: Some(vec!["title".into()]),
            ..ListQuery::default()
        };
        let before_all = walk_forward(&s, &q, 3, async |_| {}).await;
        assert_eq!(before_all.len(), 8);
        assert_eq!(
            &before_all[6..],
            ["null1", "null2"],
            "nulls sort last ascending"
        );

        // Rows inserted while walking: one before the cursor (year 1980, behind
        // every page), one after it (2005), and one more null after the nulls.
        let s2 = s.clone();
        let a2 = a.clone();
        let seen = walk_forward(&s, &q, 3, async move |n| {
            if n == 0 {
                book(&s2, &a2, "early", json!({"year": 1980})).await;
                book(&s2, &a2, "late", json!({"year": 2005})).await;
                book(&s2, &a2, "null3", json!({"year": null})).await;
            }
        })
        .await;
        let mut unique = seen.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), seen.len(), "no row twice: {seen:?}");
        for t in &before_all {
            assert!(seen.contains(t), "{t} was skipped: {seen:?}");
        }
        assert!(
            !seen.contains(&"early".to_string()),
            "inserted behind the cursor: {seen:?}"
        );
        assert!(seen.contains(&"late".to_string()) && seen.contains(&"null3".to_string()));
        // The extra columns read for the cursor are not in the rows.
        let got = page(&s, &q, forward(2, None)).await.unwrap();
        assert_eq!(got.rows.columns, ["id", "title"]);
    }
);

conformance!(a_backward_walk_mirrors_the_forward_one, |db, s| {
    let a = author(&s, "Alice").await;
    for (i, year) in [2001, 1999, 1999, 2005, 1999].iter().enumerate() {
        book(&s, &a, &format!("b{i}"), json!({"year": year})).await;
    }
    book(&s, &a, "none", json!({})).await;
    for order in [
        OrderBy::desc("year"),
        OrderBy::asc("year"),
        OrderBy::desc("title"),
    ] {
        let q = ListQuery {
            order: vec![order.clone()],
            ..ListQuery::default()
        };
        let all = titles(&page(&s, &q, forward(100, None)).await.unwrap());
        let mut seen: Vec<String> = Vec::new();
        let mut before: Option<String> = None;
        loop {
            let got = page(&s, &q, backward(2, before.as_deref())).await.unwrap();
            assert_eq!(got.has_next_page, before.is_some());
            let mut t = titles(&got);
            t.extend(seen);
            seen = t;
            if !got.has_previous_page {
                break;
            }
            before = got.first_cursor();
            if before.is_some() && seen.len() == 2 {
                // Inserted after the cursor: not in the pages before it.
                book(&s, &a, "latecomer", json!({"year": 2100})).await;
            }
        }
        let mut expected = all.clone();
        expected.retain(|t| t != "latecomer");
        seen.retain(|t| t != "latecomer");
        assert_eq!(seen, expected, "{order:?}");
        // Remove the latecomer for the next order.
        let rows = s
            .entity("Book")
            .unwrap()
            .list(
                &AccessContext::system(),
                &ListQuery {
                    filter: Some(gatehouse_store::Filter::eq("title", "latecomer")),
                    ..ListQuery::default()
                },
            )
            .await
            .unwrap()
            .rows
            .into_rows();
        for r in rows {
            s.entity("Book")
                .unwrap()
                .delete(&AccessContext::system(), r["id"].as_str().unwrap())
                .await
                .unwrap();
        }
    }
});

conformance!(
    descending_orders_put_nulls_first_and_cursors_follow,
    |db, s| {
        let a = author(&s, "Alice").await;
        book(&s, &a, "r1", json!({"rating": 1.5})).await;
        book(&s, &a, "rn1", json!({})).await;
        book(&s, &a, "r2", json!({"rating": 2.5})).await;
        book(&s, &a, "rn2", json!({})).await;
        let q = ListQuery {
            order: vec![OrderBy::desc("rating"), OrderBy::asc("title")],
            ..ListQuery::default()
        };
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let got = page(&s, &q, forward(1, after.as_deref())).await.unwrap();
            seen.extend(titles(&got));
            if !got.has_next_page {
                break;
            }
            after = got.last_cursor();
        }
        assert_eq!(seen, ["rn1", "rn2", "r2", "r1"]);
    }
);

conformance!(bad_cursors_are_refused_naming_the_argument, |db, s| {
    let a = author(&s, "Alice").await;
    book(&s, &a, "x", json!({"year": 1})).await;
    book(&s, &a, "y", json!({"year": 2})).await;
    let by_year = ListQuery {
        order: vec![OrderBy::asc("year")],
        ..ListQuery::default()
    };
    let by_title = ListQuery {
        order: vec![OrderBy::asc("title")],
        ..ListQuery::default()
    };
    let cursor = page(&s, &by_year, forward(1, None))
        .await
        .unwrap()
        .cursor(0)
        .unwrap();
    let invalid = |r: Result<CursorPage, StoreError>, arg: &str| match r {
        Err(StoreError::Invalid { field, .. }) => assert_eq!(field, arg),
        other => panic!("expected Invalid({arg}), got {other:?}"),
    };
    // Another order's cursor.
    invalid(
        page(&s, &by_title, forward(1, Some(&cursor))).await,
        "after",
    );
    invalid(
        page(&s, &by_title, backward(1, Some(&cursor))).await,
        "before",
    );
    // Garbage, and JSON that is not a cursor.
    invalid(page(&s, &by_year, forward(1, Some("!!!"))).await, "after");
    invalid(page(&s, &by_year, forward(1, Some("e30"))).await, "after");
    // A crafted cursor whose value has the wrong type for `year`.
    use base64::Engine;
    let crafted = |doc: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(doc.to_string())
    };
    invalid(
        page(
            &s,
            &by_year,
            forward(
                1,
                Some(&crafted(
                    json!({"v": 1, "o": ["year", "id"], "k": ["nineteen", "x"]}),
                )),
            ),
        )
        .await,
        "after",
    );
    // A null for the id (never null).
    invalid(
        page(
            &s,
            &by_year,
            forward(
                1,
                Some(&crafted(
                    json!({"v": 1, "o": ["year", "id"], "k": [1, null]}),
                )),
            ),
        )
        .await,
        "after",
    );
    // Another version.
    invalid(
        page(
            &s,
            &by_year,
            forward(
                1,
                Some(&crafted(
                    json!({"v": 2, "o": ["year", "id"], "k": [1, "x"]}),
                )),
            ),
        )
        .await,
        "after",
    );
    // A well-formed crafted cursor is just a position.
    let got = page(
        &s,
        &by_year,
        forward(
            5,
            Some(&crafted(
                json!({"v": 1, "o": ["year", "id"], "k": [1, "zzzzzzzz"]}),
            )),
        ),
    )
    .await
    .unwrap();
    assert_eq!(titles(&got), ["y"]);
    // first with last, and an offset.
    invalid(
        page(
            &s,
            &by_year,
            PageRequest {
                first: Some(1),
                last: Some(1),
                ..PageRequest::default()
            },
        )
        .await,
        "last",
    );
    invalid(
        page(
            &s,
            &ListQuery {
                offset: 1,
                ..by_year.clone()
            },
            forward(1, None),
        )
        .await,
        "offset",
    );
});

const POLICY_SDL: &str = r#"
type Query { notes: [Note!]! }
type Note @policy(read: {OR: [{owner: "$sub"}, {shared: true}]}) {
  id: ID!
  owner: String
  shared: Boolean!
  title: String!
  secret: String @auth(read: "secret")
}
"#;

fn user(sub: &str) -> AccessContext {
    crate::common::caller_with(&["read", "write"], json!({ "sub": sub }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_never_reaches_a_row_the_caller_cannot_read() {
    for db in TestDb::each().await {
        let s = db.open(POLICY_SDL).await;
        let notes = s.entity("Note").unwrap();
        for (i, (owner, shared)) in [
            ("ann", false),
            ("bob", false),
            ("bob", true),
            ("ann", false),
            ("bob", false),
        ]
        .iter()
        .enumerate()
        {
            notes
                .insert(
                    &AccessContext::system(),
                    row(json!({"owner": owner, "shared": shared, "title": format!("n{i}"), "secret": "s"})),
                )
                .await
                .unwrap();
        }
        let ann = user("ann");
        let q = ListQuery {
            order: vec![OrderBy::asc("title")],
            ..ListQuery::default()
        };
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let got = notes
                .page(&ann, &q, &forward(1, after.as_deref()))
                .await
                .unwrap();
            seen.extend(titles(&got));
            if !got.has_next_page {
                break;
            }
            after = got.last_cursor();
        }
        assert_eq!(seen, ["n0", "n2", "n3"], "{}", db.backend());
        // A cursor made by a caller who sees more (the system) still reads
        // only what ann may read after it.
        let all = notes
            .page(&AccessContext::system(), &q, &forward(1, None))
            .await
            .unwrap();
        let got = notes
            .page(&ann, &q, &forward(10, all.last_cursor().as_deref()))
            .await
            .unwrap();
        assert_eq!(titles(&got), ["n2", "n3"]);
        // Ordering (and so a cursor) by a field ann may not read is refused.
        let by_secret = ListQuery {
            order: vec![OrderBy::asc("secret")],
            ..ListQuery::default()
        };
        assert!(matches!(
            notes.page(&ann, &by_secret, &forward(1, None)).await,
            Err(StoreError::Forbidden { .. })
        ));
        s.close().await;
    }
}

conformance!(
    every_orderable_type_walks_to_the_same_order_as_the_list,
    |db, s| {
        let a = author(&s, "Alice").await;
        let b = author(&s, "Bob").await;
        let rows = [
            json!({"year": 1990, "rating": 4.5, "published": "1990-01-15", "available": true, "status": "LOST"}),
            json!({"year": 1990, "rating": 0.1, "published": "1990-01-15", "available": false}),
            json!({"year": null, "rating": null, "published": null, "available": null, "status": "ON_LOAN"}),
            json!({"year": 2001, "rating": 4.5, "published": "2001-06-30", "available": true}),
            json!({"year": -5, "rating": -1.25, "published": "0001-01-01", "available": null, "status": "LOST"}),
        ];
        for (i, extra) in rows.into_iter().enumerate() {
            let by = if i % 2 == 0 { &a } else { &b };
            book(&s, by, &format!("t{}", i % 3), extra).await;
        }
        for field in [
            "title",
            "year",
            "status",
            "rating",
            "published",
            "available",
            "author",
            "id",
        ] {
            for desc in [false, true] {
                let q = ListQuery {
                    order: vec![OrderBy {
                        field: field.into(),
                        desc,
                    }],
                    select: Some(vec!["title".into()]),
                    ..ListQuery::default()
                };
                let list = s
                    .entity("Book")
                    .unwrap()
                    .list(&AccessContext::system(), &q)
                    .await
                    .unwrap()
                    .rows;
                let expected: Vec<_> = list.rows.iter().map(|r| r[0].clone()).collect();
                // Forwards, one row a page.
                let mut ids = Vec::new();
                let mut after = None;
                loop {
                    let got = page(&s, &q, forward(1, after.as_deref())).await.unwrap();
                    ids.extend(got.rows.rows.iter().map(|r| r[0].clone()));
                    if !got.has_next_page {
                        break;
                    }
                    after = got.last_cursor();
                }
                assert_eq!(
                    ids,
                    expected,
                    "{field} desc={desc} forwards ({})",
                    db.backend()
                );
                // Backwards, two rows a page.
                let mut ids: Vec<serde_json::Value> = Vec::new();
                let mut before = None;
                loop {
                    let got = page(&s, &q, backward(2, before.as_deref())).await.unwrap();
                    let mut p: Vec<_> = got.rows.rows.iter().map(|r| r[0].clone()).collect();
                    p.extend(ids);
                    ids = p;
                    if !got.has_previous_page {
                        break;
                    }
                    before = got.first_cursor();
                }
                assert_eq!(
                    ids,
                    expected,
                    "{field} desc={desc} backwards ({})",
                    db.backend()
                );
            }
        }
    }
);
