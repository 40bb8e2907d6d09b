//! Batch loading of relations: one statement per relation, whatever the number of parents.

use gatehouse_store::{Filter, FilterOp, JoinOne, ListQuery, OrderBy, StoreError};
use gatehouse_testkit::TestDb;
use serde_json::json;

use crate::common::{author, book, titles};
use crate::conformance;

conformance!(get_many_loads_to_one_targets_in_one_statement, |db, s| {
    let mut authors = Vec::new();
    for i in 0..20 {
        authors.push(author(&s, &format!("A{i}")).await);
    }
    let mut ask = authors.clone();
    ask.push("missing".into());
    let before = s.statements();
    let got = crate::common::by_id(&s, "Author", &ask).await;
    assert_eq!(s.statements() - before, 1);
    assert_eq!(got.len(), 20);
    assert_eq!(got[&authors[3]]["name"], json!("A3"));
    assert!(!got.contains_key("missing"));
    let before = s.statements();
    assert!(crate::common::by_id(&s, "Author", &[]).await.is_empty());
    assert_eq!(s.statements(), before);
});

conformance!(load_children_pages_per_parent_in_one_statement, |db, s| {
    let mut parents = Vec::new();
    for i in 0..10 {
        let a = author(&s, &format!("A{i}")).await;
        for j in 0..5 {
            book(&s, &a, &format!("B{i}-{j}"), json!({"year": 2000 + j})).await;
        }
        parents.push(a);
    }
    let lonely = author(&s, "nobody").await;
    let mut ask = parents.clone();
    ask.push(lonely.clone());

    let q = ListQuery {
        order: vec![OrderBy::desc("year")],
        limit: Some(2),
        offset: 1,
        ..Default::default()
    };
    let before = s.statements();
    let got = crate::common::by_parent(&s, "Book", "author", &ask, &q)
        .await
        .unwrap();
    assert_eq!(s.statements() - before, 1, "one statement for all parents");
    assert_eq!(got.len(), 11);
    assert!(got[&lonely].is_empty());
    for (i, p) in parents.iter().enumerate() {
        assert_eq!(titles(&got[p]), [format!("B{i}-3"), format!("B{i}-2")]);
    }

    // no paging: every child, ordered, filtered
    let q = ListQuery {
        filter: Some(Filter::cmp("year", FilterOp::Gte, json!(2003))),
        order: vec![OrderBy::asc("title")],
        ..Default::default()
    };
    let before = s.statements();
    let got = crate::common::by_parent(&s, "Book", "author", &parents, &q)
        .await
        .unwrap();
    assert_eq!(s.statements() - before, 1);
    assert_eq!(titles(&got[&parents[7]]), ["B7-3", "B7-4"]);

    // limit only, default order (id)
    let q = ListQuery {
        limit: Some(1),
        select: Some(vec!["title".into()]),
        ..Default::default()
    };
    let got = crate::common::by_parent(&s, "Book", "author", &parents, &q)
        .await
        .unwrap();
    assert_eq!(titles(&got[&parents[0]]), ["B0-0"]);
    assert_eq!(got[&parents[0]][0].len(), 2, "id and title only");

    // offset past the end, limit 0
    let q = ListQuery {
        limit: Some(3),
        offset: 10,
        ..Default::default()
    };
    assert!(
        crate::common::by_parent(&s, "Book", "author", &parents, &q)
            .await
            .unwrap()[&parents[0]]
            .is_empty()
    );
    let before = s.statements();
    let q = ListQuery {
        limit: Some(0),
        ..Default::default()
    };
    assert!(
        crate::common::by_parent(&s, "Book", "author", &parents, &q)
            .await
            .unwrap()[&parents[0]]
            .is_empty()
    );
    assert_eq!(s.statements(), before);

    assert!(matches!(
        crate::common::by_parent(&s, "Book", "title", &parents, &ListQuery::default()).await,
        Err(StoreError::Invalid { .. })
    ));
});

conformance!(nested_relation_levels_cost_one_statement_each, |db, s| {
    // authors -> books -> reviews: 3 statements for any number of rows
    let mut authors = Vec::new();
    for i in 0..5 {
        let a = author(&s, &format!("A{i}")).await;
        for j in 0..3 {
            let b = book(&s, &a, &format!("B{i}{j}"), json!({})).await;
            for k in 0..2 {
                s.entity("Review")
                    .unwrap()
                    .insert(
                        &gatehouse_store::AccessContext::system(),
                        crate::common::row(json!({"book": b["id"], "stars": k + 1})),
                    )
                    .await
                    .unwrap();
            }
        }
        authors.push(a);
    }
    let before = s.statements();
    let list = s
        .entity("Author")
        .unwrap()
        .list(
            &gatehouse_store::AccessContext::system(),
            &ListQuery::default(),
        )
        .await
        .unwrap()
        .rows
        .into_rows();
    let ids: Vec<String> = crate::common::ids(&list);
    let books = crate::common::by_parent(&s, "Book", "author", &ids, &ListQuery::default())
        .await
        .unwrap();
    let book_ids: Vec<String> = books.values().flat_map(|v| crate::common::ids(v)).collect();
    let reviews = crate::common::by_parent(&s, "Review", "book", &book_ids, &ListQuery::default())
        .await
        .unwrap();
    assert_eq!(s.statements() - before, 3);
    assert_eq!(book_ids.len(), 15);
    assert_eq!(reviews.values().map(Vec::len).sum::<usize>(), 30);
});

/// A self-reference that may be null: the hardest case for a join.
const PEOPLE: &str = r#"
type Query { people: [Person!]! }
type Person {
  id: ID!
  name: String! @unique
  boss: Person
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_joined_reads_to_one_targets_in_the_same_statement() {
    for db in TestDb::each().await {
        let s = db.open(PEOPLE).await;
        let person = |name: &str, boss: Option<&str>| {
            crate::common::row(json!({"name": name, "boss": boss}))
        };
        let boss = s
            .entity("Person")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                person("boss", None),
            )
            .await
            .unwrap();
        let boss = boss["id"].as_str().unwrap().to_string();
        for name in ["a", "b"] {
            s.entity("Person")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    person(name, Some(&boss)),
                )
                .await
                .unwrap();
        }
        let q = ListQuery {
            order: vec![OrderBy::asc("name")],
            select: Some(vec!["name".into(), "boss".into()]),
            ..Default::default()
        };
        let joins = [JoinOne {
            field: "boss".into(),
            select: vec!["name".into()],
        }];
        let before = s.statements();
        let gatehouse_store::Page { rows: set, joined } = s
            .entity("Person")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery {
                    joins: joins.to_vec(),
                    ..(q).clone()
                },
            )
            .await
            .unwrap();
        assert_eq!(s.statements() - before, 1, "{}", db.backend());
        assert_eq!(set.columns, ["id", "name", "boss"]);
        let names: Vec<_> = set.rows.iter().map(|r| r[1].clone()).collect();
        assert_eq!(names, [json!("a"), json!("b"), json!("boss")]);
        assert_eq!(joined.len(), 1);
        assert_eq!(joined[0].columns, ["id", "name"]);
        assert_eq!(
            joined[0].rows,
            [
                vec![json!(boss), json!("boss")],
                vec![json!(boss), json!("boss")],
                // The boss has no boss: a row of nulls, not a missing row.
                vec![json!(null), json!(null)],
            ]
        );
        // Paging applies to the listed rows, not to the joined ones.
        let first = ListQuery {
            limit: Some(1),
            offset: 2,
            ..q.clone()
        };
        let gatehouse_store::Page { rows: set, joined } = s
            .entity("Person")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery {
                    joins: joins.to_vec(),
                    ..(first).clone()
                },
            )
            .await
            .unwrap();
        assert_eq!(set.rows.len(), 1);
        assert_eq!(joined[0].rows, [vec![json!(null), json!(null)]]);
        // Only a to-one field can be joined.
        let bad = [JoinOne {
            field: "name".into(),
            select: vec![],
        }];
        assert!(matches!(
            s.entity("Person")
                .unwrap()
                .list(
                    &gatehouse_store::AccessContext::system(),
                    &ListQuery {
                        joins: bad.to_vec(),
                        ..(q).clone()
                    }
                )
                .await,
            Err(StoreError::Invalid { .. })
        ));
    }
}

conformance!(
    count_children_counts_each_parent_in_one_statement,
    |db, s| {
        let mut parents = Vec::new();
        for i in 0..4 {
            let a = author(&s, &format!("A{i}")).await;
            for j in 0..(i * 3) {
                book(&s, &a, &format!("B{i}-{j}"), json!({"year": 2000 + j})).await;
            }
            parents.push(a);
        }
        let filter = Filter::cmp("year", FilterOp::Gte, json!(2004));
        let books = s.entity("Book").unwrap();
        let ctx = gatehouse_store::AccessContext::system();
        let before = s.statements();
        let counts = books
            .count_children(&ctx, "author", &parents, Some(&filter))
            .await
            .unwrap();
        assert_eq!(s.statements() - before, 1, "one statement for all parents");
        let q = ListQuery {
            filter: Some(filter.clone()),
            ..Default::default()
        };
        let lists = crate::common::by_parent(&s, "Book", "author", &parents, &q)
            .await
            .unwrap();
        for p in &parents {
            let n = counts.get(p).copied().unwrap_or(0);
            assert_eq!(n as usize, lists[p].len(), "{}", db.backend());
        }
        assert_eq!(counts.get(&parents[3]).copied(), Some(5));
        assert!(!counts.contains_key(&parents[0]));
        let err = books
            .count_children(&ctx, "title", &parents, None)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid { .. }), "{err:?}");
    }
);
