//! Every filter operator, boolean combinations, ordering, paging, counting.

use gatehouse_store::{Filter, FilterOp, ListQuery, OrderBy, Store, StoreError};
use serde_json::{Value, json};

use crate::common::{author, book, titles};
use crate::conformance;

/// Five books by two authors, with nulls in the optional fields.
async fn seed(s: &Store) -> (String, String) {
    let a = author(s, "Alice").await;
    let b = author(s, "Bob").await;
    book(s, &a, "Alpha", json!({"year": 1990, "tags": ["sf", "classic"], "scores": [1, 2], "rating": 4.5, "published": "1990-01-15", "available": true})).await;
    book(s, &a, "beta 100%", json!({"year": 2001, "tags": ["poetry"], "rating": 3.0, "published": "2001-06-30", "available": false, "status": "ON_LOAN"})).await;
    book(s, &b, "Gamma_ray", json!({"year": 2010, "tags": [], "scores": [2], "published": "2010-12-31", "status": "LOST"})).await;
    book(
        s,
        &b,
        "Delta",
        json!({"year": null, "rating": 1.25, "available": true}),
    )
    .await;
    book(
        s,
        &a,
        "Epsilon",
        json!({"year": 1990, "tags": ["sf"], "status": "ON_LOAN"}),
    )
    .await;
    (a, b)
}

async fn titles_where(s: &Store, f: Filter) -> Vec<String> {
    let q = ListQuery {
        filter: Some(f),
        order: vec![OrderBy::asc("title")],
        ..Default::default()
    };
    titles(
        &s.entity("Book")
            .unwrap()
            .list(&gatehouse_store::AccessContext::system(), &q)
            .await
            .unwrap()
            .rows
            .into_rows(),
    )
}

fn c(field: &str, op: FilterOp, v: Value) -> Filter {
    Filter::cmp(field, op, v)
}

conformance!(filter_eq_and_not, |db, s| {
    seed(&s).await;
    assert_eq!(
        titles_where(&s, c("year", FilterOp::Eq, json!(1990))).await,
        ["Alpha", "Epsilon"]
    );
    // SQL semantics: the null year of Delta matches neither = nor <>
    assert_eq!(
        titles_where(&s, c("year", FilterOp::Not, json!(1990))).await,
        ["Gamma_ray", "beta 100%"]
    );
    assert_eq!(
        titles_where(&s, c("status", FilterOp::Eq, json!("LOST"))).await,
        ["Gamma_ray"]
    );
    assert_eq!(
        titles_where(&s, c("available", FilterOp::Eq, json!(true))).await,
        ["Alpha", "Delta"]
    );
    assert_eq!(
        titles_where(&s, c("rating", FilterOp::Eq, json!(1.25))).await,
        ["Delta"]
    );
    assert_eq!(
        titles_where(&s, c("published", FilterOp::Eq, json!("2010-12-31"))).await,
        ["Gamma_ray"]
    );
    // equality with null means "is null"
    assert_eq!(
        titles_where(&s, c("year", FilterOp::Eq, json!(null))).await,
        ["Delta"]
    );
    assert_eq!(
        titles_where(&s, c("year", FilterOp::Not, json!(null)))
            .await
            .len(),
        4
    );
});

conformance!(filter_in_and_not_in, |db, s| {
    seed(&s).await;
    assert_eq!(
        titles_where(&s, c("year", FilterOp::In, json!([1990, 2010]))).await,
        ["Alpha", "Epsilon", "Gamma_ray"]
    );
    assert_eq!(
        titles_where(&s, c("status", FilterOp::In, json!(["LOST", "ON_LOAN"]))).await,
        ["Epsilon", "Gamma_ray", "beta 100%"]
    );
    assert_eq!(
        titles_where(&s, c("year", FilterOp::NotIn, json!([1990]))).await,
        ["Gamma_ray", "beta 100%"]
    );
    assert!(
        titles_where(&s, c("year", FilterOp::In, json!([])))
            .await
            .is_empty()
    );
    assert_eq!(
        titles_where(&s, c("year", FilterOp::NotIn, json!([])))
            .await
            .len(),
        5
    );
    assert!(matches!(
        s.entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery {
                    filter: Some(c("year", FilterOp::In, json!(1990))),
                    ..Default::default()
                }
            )
            .await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        s.entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery {
                    filter: Some(c("status", FilterOp::In, json!(["NOPE"]))),
                    ..Default::default()
                }
            )
            .await,
        Err(StoreError::Invalid { .. })
    ));
});

conformance!(filter_lt_lte_gt_gte, |db, s| {
    seed(&s).await;
    assert_eq!(
        titles_where(&s, c("year", FilterOp::Lt, json!(2001))).await,
        ["Alpha", "Epsilon"]
    );
    assert_eq!(
        titles_where(&s, c("year", FilterOp::Lte, json!(2001))).await,
        ["Alpha", "Epsilon", "beta 100%"]
    );
    assert_eq!(
        titles_where(&s, c("year", FilterOp::Gt, json!(2001))).await,
        ["Gamma_ray"]
    );
    assert_eq!(
        titles_where(&s, c("year", FilterOp::Gte, json!(2001))).await,
        ["Gamma_ray", "beta 100%"]
    );
    assert_eq!(
        titles_where(&s, c("rating", FilterOp::Gt, json!(2))).await,
        ["Alpha", "beta 100%"]
    );
    assert_eq!(
        titles_where(&s, c("published", FilterOp::Gte, json!("2001-06-30"))).await,
        ["Gamma_ray", "beta 100%"]
    );
    assert_eq!(
        titles_where(&s, c("published", FilterOp::Lt, json!("2001-01-01"))).await,
        ["Alpha"]
    );
    // byte order on both backends: uppercase sorts before lowercase
    assert_eq!(
        titles_where(&s, c("title", FilterOp::Lt, json!("a"))).await,
        ["Alpha", "Delta", "Epsilon", "Gamma_ray"]
    );
});

conformance!(
    filter_text_contains_starts_ends_are_literal_and_case_sensitive,
    |db, s| {
        seed(&s).await;
        assert_eq!(
            titles_where(&s, c("title", FilterOp::Contains, json!("lph"))).await,
            ["Alpha"]
        );
        assert_eq!(
            titles_where(&s, c("title", FilterOp::Contains, json!("ALPH"))).await,
            Vec::<String>::new()
        );
        assert_eq!(
            titles_where(&s, c("title", FilterOp::Contains, json!("%"))).await,
            ["beta 100%"]
        );
        assert_eq!(
            titles_where(&s, c("title", FilterOp::Contains, json!("_"))).await,
            ["Gamma_ray"]
        );
        assert_eq!(
            titles_where(&s, c("title", FilterOp::StartsWith, json!("Ga"))).await,
            ["Gamma_ray"]
        );
        assert_eq!(
            titles_where(&s, c("title", FilterOp::StartsWith, json!("ga"))).await,
            Vec::<String>::new()
        );
        assert_eq!(
            titles_where(&s, c("title", FilterOp::EndsWith, json!("ta"))).await,
            ["Delta"]
        );
        assert_eq!(
            titles_where(&s, c("title", FilterOp::EndsWith, json!("0%"))).await,
            ["beta 100%"]
        );
        assert_eq!(
            titles_where(
                &s,
                c("title", FilterOp::EndsWith, json!("a very long suffix"))
            )
            .await,
            Vec::<String>::new()
        );
        assert_eq!(
            titles_where(&s, c("title", FilterOp::EndsWith, json!("")))
                .await
                .len(),
            5
        );
        assert_eq!(
            titles_where(&s, c("title", FilterOp::StartsWith, json!("")))
                .await
                .len(),
            5
        );
    }
);

conformance!(filter_is_null, |db, s| {
    seed(&s).await;
    assert_eq!(
        titles_where(&s, c("year", FilterOp::IsNull, json!(true))).await,
        ["Delta"]
    );
    assert_eq!(
        titles_where(&s, c("rating", FilterOp::IsNull, json!(false))).await,
        ["Alpha", "Delta", "beta 100%"]
    );
    assert_eq!(
        titles_where(&s, c("tags", FilterOp::IsNull, json!(true))).await,
        ["Delta"]
    );
    assert!(matches!(
        s.entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery {
                    filter: Some(c("year", FilterOp::IsNull, json!("yes"))),
                    ..Default::default()
                }
            )
            .await,
        Err(StoreError::Invalid { .. })
    ));
});

conformance!(filter_and_or_not, |db, s| {
    seed(&s).await;
    let f = Filter::And(vec![
        c("year", FilterOp::Eq, json!(1990)),
        c("status", FilterOp::Eq, json!("ON_LOAN")),
    ]);
    assert_eq!(titles_where(&s, f).await, ["Epsilon"]);
    let f = Filter::Or(vec![
        c("year", FilterOp::Gt, json!(2005)),
        c("rating", FilterOp::Lt, json!(2)),
    ]);
    assert_eq!(titles_where(&s, f).await, ["Delta", "Gamma_ray"]);
    let f = Filter::Not(Box::new(c("status", FilterOp::Eq, json!("AVAILABLE"))));
    assert_eq!(
        titles_where(&s, f).await,
        ["Epsilon", "Gamma_ray", "beta 100%"]
    );
    let f = Filter::And(vec![
        Filter::Or(vec![
            c("title", FilterOp::StartsWith, json!("A")),
            c("title", FilterOp::StartsWith, json!("E")),
        ]),
        Filter::Not(Box::new(c("tags", FilterOp::Contains, json!("classic")))),
    ]);
    assert_eq!(titles_where(&s, f).await, ["Epsilon"]);
    assert_eq!(titles_where(&s, Filter::And(vec![])).await.len(), 5);
    assert!(titles_where(&s, Filter::Or(vec![])).await.is_empty());
});

conformance!(filter_relation_by_id, |db, s| {
    let (a, b) = seed(&s).await;
    assert_eq!(
        titles_where(&s, c("author", FilterOp::Eq, json!(a))).await,
        ["Alpha", "Epsilon", "beta 100%"]
    );
    assert_eq!(
        titles_where(&s, c("author", FilterOp::In, json!([b]))).await,
        ["Delta", "Gamma_ray"]
    );
    assert_eq!(
        titles_where(&s, c("author", FilterOp::Not, json!(a))).await,
        ["Delta", "Gamma_ray"]
    );
    assert!(
        titles_where(&s, c("author", FilterOp::Eq, json!("nobody")))
            .await
            .is_empty()
    );
    assert!(matches!(
        s.entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery {
                    filter: Some(c("author", FilterOp::Eq, json!(5))),
                    ..Default::default()
                }
            )
            .await,
        Err(StoreError::Invalid { .. })
    ));
});

conformance!(filter_list_contains, |db, s| {
    seed(&s).await;
    assert_eq!(
        titles_where(&s, c("tags", FilterOp::Contains, json!("sf"))).await,
        ["Alpha", "Epsilon"]
    );
    assert_eq!(
        titles_where(&s, c("tags", FilterOp::Contains, json!("poetry"))).await,
        ["beta 100%"]
    );
    assert!(
        titles_where(&s, c("tags", FilterOp::Contains, json!("s")))
            .await
            .is_empty()
    );
    assert_eq!(
        titles_where(&s, c("scores", FilterOp::Contains, json!(2))).await,
        ["Alpha", "Gamma_ray"]
    );
    assert!(matches!(
        s.entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery {
                    filter: Some(c("scores", FilterOp::Contains, json!("2"))),
                    ..Default::default()
                }
            )
            .await,
        Err(StoreError::Invalid { .. })
    ));
});

conformance!(filter_rejects_operators_that_do_not_apply, |db, s| {
    seed(&s).await;
    for f in [
        c("status", FilterOp::Lt, json!("LOST")),
        c("year", FilterOp::Contains, json!(1)),
        c("tags", FilterOp::Eq, json!(["sf"])),
        c("available", FilterOp::Gt, json!(true)),
        c("nope", FilterOp::Eq, json!(1)),
        c("reviews", FilterOp::Eq, json!(1)),
        c("year", FilterOp::Eq, json!("1990")),
    ] {
        let r = s
            .entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery {
                    filter: Some(f.clone()),
                    ..Default::default()
                },
            )
            .await;
        assert!(matches!(r, Err(StoreError::Invalid { .. })), "{f:?}: {r:?}");
    }
});

conformance!(
    ordering_asc_desc_with_id_tie_breaker_and_nulls_last_ascending,
    |db, s| {
        seed(&s).await;
        let all = s
            .entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery::default(),
            )
            .await
            .unwrap()
            .rows
            .into_rows();
        // default order is by id, and ids are time-ordered UUIDv7: insertion order
        assert_eq!(
            titles(&all),
            ["Alpha", "beta 100%", "Gamma_ray", "Delta", "Epsilon"]
        );
        let q = |order: Vec<OrderBy>| ListQuery {
            order,
            ..Default::default()
        };
        let r = s
            .entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &q(vec![OrderBy::asc("year")]),
            )
            .await
            .unwrap()
            .rows
            .into_rows();
        assert_eq!(
            titles(&r),
            ["Alpha", "Epsilon", "beta 100%", "Gamma_ray", "Delta"]
        );
        let r = s
            .entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &q(vec![OrderBy::desc("year")]),
            )
            .await
            .unwrap()
            .rows
            .into_rows();
        // nulls first descending; the 1990 tie still broken by ascending id
        assert_eq!(
            titles(&r),
            ["Delta", "Gamma_ray", "beta 100%", "Alpha", "Epsilon"]
        );
        let r = s
            .entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &q(vec![OrderBy::asc("status"), OrderBy::desc("title")]),
            )
            .await
            .unwrap()
            .rows
            .into_rows();
        assert_eq!(
            titles(&r),
            ["Delta", "Alpha", "Gamma_ray", "beta 100%", "Epsilon"]
        );
        let r = s
            .entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &q(vec![OrderBy::desc("id")]),
            )
            .await
            .unwrap()
            .rows
            .into_rows();
        assert_eq!(
            titles(&r),
            ["Epsilon", "Delta", "Gamma_ray", "beta 100%", "Alpha"]
        );
        let r = s
            .entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &q(vec![OrderBy::asc("published")]),
            )
            .await
            .unwrap()
            .rows
            .into_rows();
        assert_eq!(
            titles(&r),
            ["Alpha", "beta 100%", "Gamma_ray", "Delta", "Epsilon"]
        );
        assert!(matches!(
            s.entity("Book")
                .unwrap()
                .list(
                    &gatehouse_store::AccessContext::system(),
                    &q(vec![OrderBy::asc("tags")])
                )
                .await,
            Err(StoreError::Invalid { .. })
        ));
        assert!(matches!(
            s.entity("Book")
                .unwrap()
                .list(
                    &gatehouse_store::AccessContext::system(),
                    &q(vec![OrderBy::asc("nope")])
                )
                .await,
            Err(StoreError::Invalid { .. })
        ));
    }
);

conformance!(paging_edges, |db, s| {
    seed(&s).await;
    let q = |limit: Option<u64>, offset: u64| ListQuery {
        limit,
        offset,
        ..Default::default()
    };
    assert_eq!(
        titles(
            &s.entity("Book")
                .unwrap()
                .list(&gatehouse_store::AccessContext::system(), &q(Some(2), 0))
                .await
                .unwrap()
                .rows
                .into_rows()
        ),
        ["Alpha", "beta 100%"]
    );
    assert_eq!(
        titles(
            &s.entity("Book")
                .unwrap()
                .list(&gatehouse_store::AccessContext::system(), &q(Some(2), 2))
                .await
                .unwrap()
                .rows
                .into_rows()
        ),
        ["Gamma_ray", "Delta"]
    );
    assert_eq!(
        titles(
            &s.entity("Book")
                .unwrap()
                .list(&gatehouse_store::AccessContext::system(), &q(Some(2), 4))
                .await
                .unwrap()
                .rows
                .into_rows()
        ),
        ["Epsilon"]
    );
    assert!(
        s.entity("Book")
            .unwrap()
            .list(&gatehouse_store::AccessContext::system(), &q(Some(2), 5))
            .await
            .unwrap()
            .rows
            .into_rows()
            .is_empty()
    );
    assert!(
        s.entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &q(Some(10), 1000)
            )
            .await
            .unwrap()
            .rows
            .into_rows()
            .is_empty()
    );
    assert!(
        s.entity("Book")
            .unwrap()
            .list(&gatehouse_store::AccessContext::system(), &q(Some(0), 0))
            .await
            .unwrap()
            .rows
            .into_rows()
            .is_empty()
    );
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .list(&gatehouse_store::AccessContext::system(), &q(None, 3))
            .await
            .unwrap()
            .rows
            .into_rows()
            .len(),
        2
    );
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .list(&gatehouse_store::AccessContext::system(), &q(Some(100), 0))
            .await
            .unwrap()
            .rows
            .into_rows()
            .len(),
        5
    );
});

conformance!(count_total_and_filtered, |db, s| {
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .unwrap(),
        0
    );
    let (a, _) = seed(&s).await;
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .unwrap(),
        5
    );
    assert_eq!(
        s.entity("Author")
            .unwrap()
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .count(
                &gatehouse_store::AccessContext::system(),
                Some(&Filter::eq("author", a))
            )
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .count(
                &gatehouse_store::AccessContext::system(),
                Some(&c("year", FilterOp::IsNull, json!(true)))
            )
            .await
            .unwrap(),
        1
    );
    // Counts are cached, and every write makes them stale at once.
    let books = s
        .entity("Book")
        .unwrap()
        .list(
            &gatehouse_store::AccessContext::system(),
            &ListQuery::default(),
        )
        .await
        .unwrap()
        .rows
        .into_rows();
    let id = books[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .unwrap(),
        5
    );
    s.entity("Book")
        .unwrap()
        .delete(&gatehouse_store::AccessContext::system(), &id)
        .await
        .unwrap();
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .unwrap(),
        4
    );
});

conformance!(select_returns_only_the_chosen_fields_and_id, |db, s| {
    seed(&s).await;
    let q = ListQuery {
        select: Some(vec!["title".into(), "published".into()]),
        limit: Some(1),
        ..Default::default()
    };
    let r = s
        .entity("Book")
        .unwrap()
        .list(&gatehouse_store::AccessContext::system(), &q)
        .await
        .unwrap()
        .rows
        .into_rows();
    let keys: Vec<&str> = r[0].keys().map(String::as_str).collect();
    let mut keys = keys;
    keys.sort();
    assert_eq!(keys, ["id", "published", "title"]);
    assert_eq!(r[0]["published"], json!("1990-01-15"));
    let bad = ListQuery {
        select: Some(vec!["nope".into()]),
        ..Default::default()
    };
    assert!(matches!(
        s.entity("Book")
            .unwrap()
            .list(&gatehouse_store::AccessContext::system(), &bad)
            .await,
        Err(StoreError::Invalid { .. })
    ));
});

// The documented limits fit both backends: an `OR` of 4,999 comparisons (one
// value short of the 5,000 a filter may compare with) and an `AND` of as
// many are answered, not refused by SQLite's expression depth limit (1,000)
// or a stack overflow; counts take the same filters.
conformance!(filter_wide_or_and_fit_the_documented_limits, |db, s| {
    seed(&s).await;
    let mut any: Vec<Filter> = (0..4998)
        .map(|i| c("title", FilterOp::Eq, json!(format!("missing {i}"))))
        .collect();
    any.push(c("title", FilterOp::Eq, json!("Delta")));
    assert_eq!(titles_where(&s, Filter::Or(any.clone())).await, ["Delta"]);
    let every: Vec<Filter> = (0..4999)
        .map(|i| c("title", FilterOp::Not, json!(format!("missing {i}"))))
        .collect();
    assert_eq!(titles_where(&s, Filter::And(every)).await.len(), 5);
    let n = s
        .entity("Book")
        .unwrap()
        .count(
            &gatehouse_store::AccessContext::system(),
            Some(&Filter::Not(Box::new(Filter::Or(any)))),
        )
        .await
        .unwrap();
    assert_eq!(n, 4);
});

// The sizes filters are weighed by (`Store::row_estimate`) follow the
// tables without counting them: 0 for an empty table, at least the rows
// written once read again, per entity.
conformance!(row_estimates_follow_the_tables, |db, s| {
    s.refresh_row_estimates().await.unwrap();
    assert_eq!((s.row_estimate("Book"), s.row_estimate("Author")), (0, 0));
    let a = author(&s, "Alice").await;
    for i in 0..40 {
        book(&s, &a, &format!("Book {i}"), json!({})).await;
    }
    // PostgreSQL's statistics reach other sessions within seconds: wait
    // for them, not for a fixed time.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        s.refresh_row_estimates().await.unwrap();
        if s.row_estimate("Book") >= 40 || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(s.row_estimate("Book") >= 40, "{}", s.row_estimate("Book"));
    assert!(s.row_estimate("Book") < 400, "{}", s.row_estimate("Book"));
    assert!(s.row_estimate("Author") >= 1);
    assert_eq!(s.row_estimate("NoSuchEntity"), 0);
});
