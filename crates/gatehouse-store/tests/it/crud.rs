//! Inserts, reads, updates, replaces, deletes; validation and integrity.

use gatehouse_store::StoreError;
use serde_json::json;

use crate::common::{author, book, row};
use crate::conformance;

fn invalid_field(r: Result<impl std::fmt::Debug, StoreError>) -> String {
    match r {
        Err(StoreError::Invalid { field, .. }) => field,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn conflict(r: Result<impl std::fmt::Debug, StoreError>) -> String {
    match r {
        Err(StoreError::Conflict { message }) => message,
        other => panic!("expected Conflict, got {other:?}"),
    }
}

conformance!(insert_generates_uuid_v7_and_get_round_trips, |db, s| {
    let a = author(&s, "Ursula").await;
    let b = book(
        &s,
        &a,
        "The Dispossessed",
        json!({"year": 1974, "tags": ["sf", "utopia"], "scores": [3, 5], "rating": 4.5,
               "published": "1974-05-01", "available": true, "isbn": "978-0"}),
    )
    .await;
    let id = b["id"].as_str().unwrap();
    let u = uuid::Uuid::parse_str(id).unwrap();
    assert_eq!(u.get_version_num(), 7);
    let got = s
        .entity("Book")
        .unwrap()
        .get(&gatehouse_store::AccessContext::system(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, b);
    assert_eq!(got["published"], json!("1974-05-01"));
    assert_eq!(got["tags"], json!(["sf", "utopia"]));
    assert_eq!(got["scores"], json!([3, 5]));
    assert_eq!(got["rating"], json!(4.5));
    assert_eq!(got["available"], json!(true));
    assert_eq!(got["author"], json!(a));
    assert_eq!(got["status"], json!("AVAILABLE"));
    // omitted nullable fields read back as null
    let b2 = book(&s, &a, "Lathe", json!({})).await;
    let got2 = s
        .entity("Book")
        .unwrap()
        .get(
            &gatehouse_store::AccessContext::system(),
            b2["id"].as_str().unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got2["year"], json!(null));
    assert_eq!(got2["tags"], json!(null));
    assert!(
        s.entity("Book")
            .unwrap()
            .get(&gatehouse_store::AccessContext::system(), "nope")
            .await
            .unwrap()
            .is_none()
    );
});

conformance!(insert_with_given_id_and_duplicate_id_conflicts, |db, s| {
    let r = s
        .entity("Author")
        .unwrap()
        .insert(
            &gatehouse_store::AccessContext::system(),
            row(json!({"id": "a-1", "name": "X"})),
        )
        .await
        .unwrap();
    assert_eq!(r["id"], json!("a-1"));
    let msg = conflict(
        s.entity("Author")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"id": "a-1", "name": "Y"})),
            )
            .await,
    );
    assert!(
        msg.contains("a-1") && msg.contains("already exists"),
        "{msg}"
    );
});

conformance!(unique_conflict_names_the_field, |db, s| {
    author(&s, "Same").await;
    let msg = conflict(
        s.entity("Author")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"name": "Same"})),
            )
            .await,
    );
    assert!(msg.contains("Author.name"), "{msg}");
    let a = author(&s, "Other").await;
    book(&s, &a, "B1", json!({"isbn": "1"})).await;
    let msg = conflict(
        s.entity("Book")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"title": "B2", "status": "LOST", "author": a, "isbn": "1"})),
            )
            .await,
    );
    assert!(msg.contains("Book.isbn"), "{msg}");
    // null does not collide with null
    book(&s, &a, "B3", json!({})).await;
    book(&s, &a, "B4", json!({})).await;
});

conformance!(
    required_unknown_and_wrong_type_fields_are_invalid,
    |db, s| {
        let a = author(&s, "A").await;
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .insert(
                        &gatehouse_store::AccessContext::system(),
                        row(json!({"status": "LOST", "author": a}))
                    )
                    .await
            ),
            "title"
        );
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .insert(
                        &gatehouse_store::AccessContext::system(),
                        row(json!({"title": "t", "status": "LOST", "author": a, "pages": 3}))
                    )
                    .await
            ),
            "pages"
        );
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .insert(
                        &gatehouse_store::AccessContext::system(),
                        row(json!({"title": 5, "status": "LOST", "author": a}))
                    )
                    .await
            ),
            "title"
        );
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .insert(
                        &gatehouse_store::AccessContext::system(),
                        row(json!({"title": "t", "status": "LOST", "author": a, "tags": "x"}))
                    )
                    .await
            ),
            "tags"
        );
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .insert(
                        &gatehouse_store::AccessContext::system(),
                        row(json!({"title": "t", "status": "LOST", "author": a, "tags": [1]}))
                    )
                    .await
            ),
            "tags"
        );
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .insert(
                        &gatehouse_store::AccessContext::system(),
                        // A to-many field takes new rows (nested create), not this.
                        row(json!({"title": "t", "status": "LOST", "author": a, "reviews": "x"}))
                    )
                    .await
            ),
            "reviews"
        );
        assert_eq!(
            s.entity("Book")
                .unwrap()
                .count(&gatehouse_store::AccessContext::system(), None)
                .await
                .unwrap(),
            0
        );
    }
);

conformance!(int_range_float_date_and_enum_are_validated, |db, s| {
    let a = author(&s, "A").await;
    let base = json!({"title": "t", "status": "LOST", "author": a});
    let with = |k: &str, v: serde_json::Value| {
        let mut r = row(base.clone());
        r.insert(k.into(), v);
        r
    };
    assert_eq!(
        invalid_field(
            s.entity("Book")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    with("year", json!(2_147_483_648_i64))
                )
                .await
        ),
        "year"
    );
    assert_eq!(
        invalid_field(
            s.entity("Book")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    with("year", json!(-2_147_483_649_i64))
                )
                .await
        ),
        "year"
    );
    assert_eq!(
        invalid_field(
            s.entity("Book")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    with("year", json!(1.5))
                )
                .await
        ),
        "year"
    );
    assert_eq!(
        invalid_field(
            s.entity("Book")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    with("scores", json!([1, 3_000_000_000_i64]))
                )
                .await
        ),
        "scores"
    );
    assert_eq!(
        invalid_field(
            s.entity("Book")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    with("rating", json!("NaN"))
                )
                .await
        ),
        "rating"
    );
    assert_eq!(
        invalid_field(
            s.entity("Book")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    with("rating", json!("Infinity"))
                )
                .await
        ),
        "rating"
    );
    for bad in [
        "2024-02-30",
        "2024-1-5",
        "yesterday",
        "2024-01-01T00:00:00Z",
        "+2024-01-01",
    ] {
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .insert(
                        &gatehouse_store::AccessContext::system(),
                        with("published", json!(bad))
                    )
                    .await
            ),
            "published",
            "{bad}"
        );
    }
    assert_eq!(
        invalid_field(
            s.entity("Book")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    with("status", json!("BURNT"))
                )
                .await
        ),
        "status"
    );
    assert_eq!(
        invalid_field(
            s.entity("Book")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    with("status", json!(null))
                )
                .await
        ),
        "status"
    );
    // the edges are fine
    let ok = s
        .entity("Book")
        .unwrap()
        .insert(
            &gatehouse_store::AccessContext::system(),
            with("year", json!(i32::MAX)),
        )
        .await
        .unwrap();
    assert_eq!(ok["year"], json!(i32::MAX));
    let ok = s
        .entity("Book")
        .unwrap()
        .insert(
            &gatehouse_store::AccessContext::system(),
            with("year", json!(i32::MIN)),
        )
        .await
        .unwrap();
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .get(
                &gatehouse_store::AccessContext::system(),
                ok["id"].as_str().unwrap()
            )
            .await
            .unwrap()
            .unwrap()["year"],
        json!(i32::MIN)
    );
    let ok = s
        .entity("Book")
        .unwrap()
        .insert(
            &gatehouse_store::AccessContext::system(),
            with("published", json!("2024-02-29")),
        )
        .await
        .unwrap();
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .get(
                &gatehouse_store::AccessContext::system(),
                ok["id"].as_str().unwrap()
            )
            .await
            .unwrap()
            .unwrap()["published"],
        json!("2024-02-29")
    );
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .unwrap(),
        3
    );
});

conformance!(partial_update_keeps_omitted_and_null_clears, |db, s| {
    let a = author(&s, "A").await;
    let b = book(
        &s,
        &a,
        "Old",
        json!({"year": 1990, "rating": 2.5, "tags": ["x"]}),
    )
    .await;
    let id = b["id"].as_str().unwrap();
    let u = s
        .entity("Book")
        .unwrap()
        .update(
            &gatehouse_store::AccessContext::system(),
            id,
            row(json!({"title": "New", "rating": null})),
        )
        .await
        .unwrap();
    assert_eq!(u["title"], json!("New"));
    assert_eq!(u["year"], json!(1990));
    assert_eq!(u["rating"], json!(null));
    assert_eq!(u["tags"], json!(["x"]));
    let got = s
        .entity("Book")
        .unwrap()
        .get(&gatehouse_store::AccessContext::system(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, u);
    // an empty patch changes nothing and returns the row
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .update(
                &gatehouse_store::AccessContext::system(),
                id,
                row(json!({}))
            )
            .await
            .unwrap(),
        got
    );
});

conformance!(
    required_field_cannot_be_nulled_and_missing_row_is_not_found,
    |db, s| {
        let a = author(&s, "A").await;
        let b = book(&s, &a, "T", json!({})).await;
        let id = b["id"].as_str().unwrap();
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .update(
                        &gatehouse_store::AccessContext::system(),
                        id,
                        row(json!({"title": null}))
                    )
                    .await
            ),
            "title"
        );
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .update(
                        &gatehouse_store::AccessContext::system(),
                        id,
                        row(json!({"author": null}))
                    )
                    .await
            ),
            "author"
        );
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .update(
                        &gatehouse_store::AccessContext::system(),
                        id,
                        row(json!({"id": "other"}))
                    )
                    .await
            ),
            "id"
        );
        assert!(matches!(
            s.entity("Book")
                .unwrap()
                .update(
                    &gatehouse_store::AccessContext::system(),
                    "missing",
                    row(json!({"title": "x"}))
                )
                .await,
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            s.entity("Book")
                .unwrap()
                .replace(
                    &gatehouse_store::AccessContext::system(),
                    "missing",
                    row(json!({"title": "x", "status": "LOST", "author": a}))
                )
                .await,
            Err(StoreError::NotFound)
        ));
        assert_eq!(
            s.entity("Book")
                .unwrap()
                .get(&gatehouse_store::AccessContext::system(), id)
                .await
                .unwrap()
                .unwrap()["title"],
            json!("T")
        );
    }
);

conformance!(replace_sets_omitted_fields_to_null, |db, s| {
    let a = author(&s, "A").await;
    let b = book(&s, &a, "T", json!({"year": 2000, "isbn": "i"})).await;
    let id = b["id"].as_str().unwrap();
    let r = s
        .entity("Book")
        .unwrap()
        .replace(
            &gatehouse_store::AccessContext::system(),
            id,
            row(json!({"id": id, "title": "R", "status": "ON_LOAN", "author": a})),
        )
        .await
        .unwrap();
    assert_eq!(r["year"], json!(null));
    assert_eq!(r["isbn"], json!(null));
    assert_eq!(r["title"], json!("R"));
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .get(&gatehouse_store::AccessContext::system(), id)
            .await
            .unwrap()
            .unwrap(),
        r
    );
    // a replacement must be whole
    assert_eq!(
        invalid_field(
            s.entity("Book")
                .unwrap()
                .replace(
                    &gatehouse_store::AccessContext::system(),
                    id,
                    row(json!({"title": "R"}))
                )
                .await
        ),
        "status"
    );
});

conformance!(delete_returns_the_row_once, |db, s| {
    let a = author(&s, "A").await;
    let b = book(&s, &a, "T", json!({})).await;
    let id = b["id"].as_str().unwrap();
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .delete(&gatehouse_store::AccessContext::system(), id)
            .await
            .unwrap(),
        Some(b.clone())
    );
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .delete(&gatehouse_store::AccessContext::system(), id)
            .await
            .unwrap(),
        None
    );
    assert!(
        s.entity("Book")
            .unwrap()
            .get(&gatehouse_store::AccessContext::system(), id)
            .await
            .unwrap()
            .is_none()
    );
});

conformance!(
    reference_to_missing_row_is_invalid_naming_the_field,
    |db, s| {
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .insert(
                        &gatehouse_store::AccessContext::system(),
                        row(json!({"title": "t", "status": "LOST", "author": "ghost"}))
                    )
                    .await
            ),
            "author"
        );
        let a = author(&s, "A").await;
        let b = book(&s, &a, "T", json!({})).await;
        let id = b["id"].as_str().unwrap();
        assert_eq!(
            invalid_field(
                s.entity("Book")
                    .unwrap()
                    .update(
                        &gatehouse_store::AccessContext::system(),
                        id,
                        row(json!({"author": "ghost"}))
                    )
                    .await
            ),
            "author"
        );
        assert_eq!(
            s.entity("Book")
                .unwrap()
                .get(&gatehouse_store::AccessContext::system(), id)
                .await
                .unwrap()
                .unwrap()["author"],
            json!(a)
        );
    }
);

conformance!(deleting_a_referenced_row_is_a_conflict, |db, s| {
    let a = author(&s, "A").await;
    let b = book(&s, &a, "T", json!({})).await;
    let msg = conflict(
        s.entity("Author")
            .unwrap()
            .delete(&gatehouse_store::AccessContext::system(), &a)
            .await,
    );
    assert!(msg.contains("Book") && msg.contains("author"), "{msg}");
    assert!(
        s.entity("Author")
            .unwrap()
            .get(&gatehouse_store::AccessContext::system(), &a)
            .await
            .unwrap()
            .is_some()
    );
    s.entity("Book")
        .unwrap()
        .delete(
            &gatehouse_store::AccessContext::system(),
            b["id"].as_str().unwrap(),
        )
        .await
        .unwrap();
    assert!(
        s.entity("Author")
            .unwrap()
            .delete(&gatehouse_store::AccessContext::system(), &a)
            .await
            .unwrap()
            .is_some()
    );
});

conformance!(unknown_entity_is_invalid, |db, s| {
    assert!(matches!(s.entity("Nope"), Err(StoreError::Invalid { .. })));
});

conformance!(
    nul_characters_are_refused_as_invalid_on_every_path,
    |db, s| {
        // PostgreSQL cannot store U+0000; both backends refuse it the same way.
        let r = s
            .entity("Author")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"name": "a\u{0}b"})),
            )
            .await;
        assert_eq!(invalid_field(r), "name");
        let a = author(&s, "Ursula").await;
        let r = s
            .entity("Book")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"title": "t", "status": "AVAILABLE", "author": a, "tags": ["x\u{0}"]})),
            )
            .await;
        assert_eq!(invalid_field(r), "tags");
        let r = s
            .entity("Author")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"id": "\u{0}", "name": "n"})),
            )
            .await;
        assert_eq!(invalid_field(r), "id");
        // A lookup by such an id is a miss or a client error, never a fault.
        match s
            .entity("Author")
            .unwrap()
            .get(&gatehouse_store::AccessContext::system(), "x\u{0}y")
            .await
        {
            Ok(None) | Err(StoreError::Invalid { .. }) => {}
            other => panic!("expected a miss or Invalid, got {other:?}"),
        }
        assert!(
            s.entity("Author")
                .unwrap()
                .delete(&gatehouse_store::AccessContext::system(), "x\u{0}")
                .await
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            s.entity("Author")
                .unwrap()
                .update(
                    &gatehouse_store::AccessContext::system(),
                    "x\u{0}",
                    row(json!({"name": "n"}))
                )
                .await,
            Err(StoreError::NotFound)
        ));
        // So is a filter value with NUL: a client error, not an outage.
        let q = gatehouse_store::ListQuery {
            filter: Some(gatehouse_store::Filter::cmp(
                "name",
                gatehouse_store::FilterOp::Eq,
                json!("a\u{0}"),
            )),
            ..Default::default()
        };
        match s
            .entity("Author")
            .unwrap()
            .list(&gatehouse_store::AccessContext::system(), &q)
            .await
        {
            Ok(rows) => assert!(rows.rows.rows.is_empty()),
            Err(e) => assert!(matches!(e, StoreError::Invalid { .. }), "{e:?}"),
        }
    }
);
