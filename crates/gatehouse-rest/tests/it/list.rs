//! Listing: paging and its headers, every filter operator, sort, sparse fields.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{Server, header, ids, problem, start};

/// Five books by two authors; returns (server, author ids, book ids in insert order).
async fn library() -> (Server, Vec<String>, Vec<String>) {
    let s = start().await;
    let a = s.author("Alpha", Some("1920-01-01")).await;
    let b = s.author("Beta", None).await;
    let rows = [
        (
            "War and Peace",
            Some(1869),
            "AVAILABLE",
            &a,
            Some(json!(["classic", "long"])),
            Some(4.5),
            Some("1869-01-01"),
            Some("isbn-1"),
        ),
        (
            "The War of the Worlds",
            Some(1898),
            "ON_LOAN",
            &a,
            Some(json!(["classic"])),
            Some(4.0),
            Some("1898-06-01"),
            None,
        ),
        (
            "Dune",
            Some(1965),
            "AVAILABLE",
            &b,
            Some(json!(["scifi"])),
            None,
            Some("1965-08-01"),
            None,
        ),
        (
            "Neuromancer",
            Some(1984),
            "LOST",
            &b,
            None,
            Some(3.9),
            None,
            None,
        ),
        ("Untitled", None, "AVAILABLE", &b, None, None, None, None),
    ];
    let mut books = Vec::new();
    for (title, year, status, author, tags, rating, published, isbn) in rows {
        let row = s
            .create(
                "/v1/books",
                json!({"title": title, "year": year, "status": status, "author": author,
                       "tags": tags, "rating": rating, "published": published, "isbn": isbn}),
            )
            .await;
        books.push(row["id"].as_str().unwrap().to_string());
    }
    (s, vec![a, b], books)
}

fn titles(rows: &Value) -> Vec<&str> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["title"].as_str().unwrap())
        .collect()
}

/// The `Link` header as (rel, url) pairs.
fn links(link: &str) -> Vec<(String, String)> {
    link.split(", ")
        .map(|part| {
            let (url, rel) = part.split_once("; ").unwrap();
            let url = url
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string();
            let rel = rel
                .strip_prefix("rel=\"")
                .unwrap()
                .trim_end_matches('"')
                .to_string();
            (rel, url)
        })
        .collect()
}

#[tokio::test]
async fn empty_collection_has_one_page() {
    let s = start().await;
    let r = s.get("/v1/books").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-total-count").unwrap(), "0");
    let l = links(&header(&r, "link").unwrap());
    assert_eq!(
        l,
        vec![
            ("first".into(), "/v1/books?page=1&per_page=50".into()),
            ("last".into(), "/v1/books?page=1&per_page=50".into()),
        ]
    );
    assert_eq!(r.json::<Value>().await.unwrap(), json!([]));
}

#[tokio::test]
async fn paging_links_at_the_edges() {
    let (s, _, books) = library().await;
    let page = |n: u32| {
        let s = &s;
        async move {
            let r = s.get(&format!("/v1/books?per_page=2&page={n}")).await;
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(header(&r, "x-total-count").unwrap(), "5");
            let l = links(&header(&r, "link").unwrap());
            let rows: Value = r.json().await.unwrap();
            (l, ids(&rows))
        }
    };
    let url = |n: u32| format!("/v1/books?page={n}&per_page=2");

    let (l, got) = page(1).await;
    assert_eq!(got, books[0..2]);
    assert_eq!(
        l,
        vec![
            ("first".into(), url(1)),
            ("next".into(), url(2)),
            ("last".into(), url(3))
        ]
    );
    let (l, got) = page(2).await;
    assert_eq!(got, books[2..4]);
    assert_eq!(
        l,
        vec![
            ("first".into(), url(1)),
            ("prev".into(), url(1)),
            ("next".into(), url(3)),
            ("last".into(), url(3))
        ]
    );
    let (l, got) = page(3).await;
    assert_eq!(got, books[4..5]);
    assert_eq!(
        l,
        vec![
            ("first".into(), url(1)),
            ("prev".into(), url(2)),
            ("last".into(), url(3))
        ]
    );
    // Past the end: empty, prev points at the last page.
    let (l, got) = page(9).await;
    assert!(got.is_empty());
    assert_eq!(
        l,
        vec![
            ("first".into(), url(1)),
            ("prev".into(), url(3)),
            ("last".into(), url(3))
        ]
    );
}

#[tokio::test]
async fn links_keep_filters_and_sort() {
    let (s, _, _) = library().await;
    let r = s
        .get("/v1/books?title_contains=War&sort=-year&per_page=1")
        .await;
    assert_eq!(header(&r, "x-total-count").unwrap(), "2");
    let l = links(&header(&r, "link").unwrap());
    assert_eq!(
        l[1],
        (
            "next".to_string(),
            "/v1/books?title_contains=War&sort=-year&page=2&per_page=1".to_string()
        )
    );
    let rows: Value = r.json().await.unwrap();
    assert_eq!(titles(&rows), ["The War of the Worlds"]);
    let next = s.get_ok(&l[1].1).await;
    assert_eq!(titles(&next), ["War and Peace"]);
}

#[tokio::test]
async fn page_size_limits() {
    let (s, _, _) = library().await;
    let p = problem(s.get("/v1/books?per_page=501").await, 400).await;
    assert_eq!(p["invalid_params"][0]["name"], "per_page");
    assert!(p["detail"].as_str().unwrap().contains("500"), "{p}");
    s.get_ok("/v1/books?per_page=500").await;
    for bad in [
        "per_page=0",
        "per_page=-1",
        "per_page=x",
        "page=0",
        "page=-2",
        "page=1.5",
        "page=99999999999999999999999",
    ] {
        let p = problem(s.get(&format!("/v1/books?{bad}")).await, 400).await;
        let name = bad.split('=').next().unwrap();
        assert_eq!(p["invalid_params"][0]["name"], name, "{bad}");
    }
}

#[tokio::test]
async fn every_filter_operator() {
    let (s, authors, _) = library().await;
    let a = &authors[0];
    let cases: Vec<(String, Vec<&str>)> = vec![
        ("year=1965".into(), vec!["Dune"]),
        (
            "year_not=1965".into(),
            vec!["War and Peace", "The War of the Worlds", "Neuromancer"],
        ),
        (
            "year_in=1869,1984".into(),
            vec!["War and Peace", "Neuromancer"],
        ),
        (
            "year_not_in=1869,1984".into(),
            vec!["The War of the Worlds", "Dune"],
        ),
        ("year_lt=1898".into(), vec!["War and Peace"]),
        (
            "year_lte=1898".into(),
            vec!["War and Peace", "The War of the Worlds"],
        ),
        ("year_gt=1960".into(), vec!["Dune", "Neuromancer"]),
        ("year_gte=1965".into(), vec!["Dune", "Neuromancer"]),
        ("year_is_null=true".into(), vec!["Untitled"]),
        (
            "year_is_null=false&year_lt=1900".into(),
            vec!["War and Peace", "The War of the Worlds"],
        ),
        ("title=Dune".into(), vec!["Dune"]),
        (
            "title_contains=War".into(),
            vec!["War and Peace", "The War of the Worlds"],
        ),
        ("title_contains=war".into(), vec![]),
        (
            "title_starts_with=The".into(),
            vec!["The War of the Worlds"],
        ),
        ("title_ends_with=er".into(), vec!["Neuromancer"]),
        (
            "title_gt=T".into(),
            vec!["The War of the Worlds", "Untitled", "War and Peace"],
        ),
        (
            "status=AVAILABLE".into(),
            vec!["War and Peace", "Dune", "Untitled"],
        ),
        (
            "status_not=AVAILABLE".into(),
            vec!["The War of the Worlds", "Neuromancer"],
        ),
        (
            "status_in=LOST,ON_LOAN".into(),
            vec!["The War of the Worlds", "Neuromancer"],
        ),
        // `x_in=` is the one-element list [""].
        ("isbn_in=,isbn-1".into(), vec!["War and Peace"]),
        ("title_in=".into(), vec![]),
        (
            format!("author={a}"),
            vec!["War and Peace", "The War of the Worlds"],
        ),
        (
            format!("author_not={a}"),
            vec!["Dune", "Neuromancer", "Untitled"],
        ),
        (
            "tags_contains=classic".into(),
            vec!["War and Peace", "The War of the Worlds"],
        ),
        ("tags_is_null=true".into(), vec!["Neuromancer", "Untitled"]),
        (
            "rating_gte=4".into(),
            vec!["War and Peace", "The War of the Worlds"],
        ),
        (
            "rating_lt=4.1".into(),
            vec!["The War of the Worlds", "Neuromancer"],
        ),
        (
            "published_gte=1898-06-01".into(),
            vec!["The War of the Worlds", "Dune"],
        ),
        ("isbn_is_null=false".into(), vec!["War and Peace"]),
        ("title_contains=War+and".into(), vec!["War and Peace"]),
        ("title_contains=War%20and".into(), vec!["War and Peace"]),
    ];
    for (q, want) in cases {
        let rows = s.get_ok(&format!("/v1/books?{q}&sort=year")).await;
        let mut got = titles(&rows);
        let mut want = want.clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "?{q}");
    }
}

#[tokio::test]
async fn bad_filters_are_400_naming_the_parameter() {
    let (s, _, _) = library().await;
    for (q, name) in [
        ("year_gt=abc", "year_gt"),
        ("year=1.5", "year"),
        ("year=3000000000", "year"),
        ("year_in=1,x", "year_in"),
        ("status=NOPE", "status"),
        ("status_in=LOST,nope", "status_in"),
        ("published_gte=2020-13-01", "published_gte"),
        ("rating_gt=NaN", "rating_gt"),
        ("rating_gt=inf", "rating_gt"),
        ("year_is_null=yes", "year_is_null"),
        ("year_contains=1", "year_contains"),
        ("status_gt=LOST", "status_gt"),
        ("tags=classic", "tags"),
        ("nope=1", "nope"),
        ("reviews=x", "reviews"),
        ("title=a%00b", "title"),
        ("year=1&year=2", "year"),
        ("status_in=", "status_in"),
        ("year_in=", "year_in"),
    ] {
        let p = problem(s.get(&format!("/v1/books?{q}")).await, 400).await;
        assert_eq!(p["invalid_params"][0]["name"], name, "?{q}: {p}");
        assert_eq!(p["code"], "BAD_REQUEST");
    }
    // Every bad parameter is reported at once.
    let p = problem(s.get("/v1/books?year=x&sort=nope&fields=zzz").await, 400).await;
    assert_eq!(p["invalid_params"].as_array().unwrap().len(), 3, "{p}");
    // OAuth 1.0 and bearer query parameters belong to the auth layer.
    s.get_ok("/v1/books?oauth_consumer_key=k&access_token=t")
        .await;
}

#[tokio::test]
async fn sort_keys_and_tie_breaker() {
    let (s, _, books) = library().await;
    let rows = s.get_ok("/v1/books?sort=title").await;
    assert_eq!(
        titles(&rows),
        [
            "Dune",
            "Neuromancer",
            "The War of the Worlds",
            "Untitled",
            "War and Peace"
        ]
    );
    // Nulls sort last ascending, first descending.
    let rows = s.get_ok("/v1/books?sort=-year").await;
    assert_eq!(
        titles(&rows),
        [
            "Untitled",
            "Neuromancer",
            "Dune",
            "The War of the Worlds",
            "War and Peace"
        ]
    );
    // Ties are broken by id (insert order here: ids are UUIDv7).
    let rows = s.get_ok("/v1/books?sort=status").await;
    let available: Vec<String> = ids(&rows)
        .into_iter()
        .filter(|id| [&books[0], &books[2], &books[4]].contains(&id))
        .collect();
    assert_eq!(
        available,
        vec![books[0].clone(), books[2].clone(), books[4].clone()]
    );
    let rows = s.get_ok("/v1/books?sort=author,-title").await;
    assert_eq!(
        titles(&rows),
        [
            "War and Peace",
            "The War of the Worlds",
            "Untitled",
            "Neuromancer",
            "Dune"
        ]
    );
    for bad in ["nope", "tags", "reviews", "", "title,", ",", "--year"] {
        let p = problem(s.get(&format!("/v1/books?sort={bad}")).await, 400).await;
        assert_eq!(p["invalid_params"][0]["name"], "sort", "{bad}");
    }
}

#[tokio::test]
async fn sparse_fields_always_include_id() {
    let (s, _, _) = library().await;
    let rows = s
        .get_ok("/v1/books?fields=title,year&sort=year&per_page=1")
        .await;
    let row = rows[0].as_object().unwrap();
    let mut keys: Vec<&str> = row.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["id", "title", "year"]);
    assert_eq!(rows[0]["title"], "War and Peace");
    let rows = s.get_ok("/v1/books?fields=author").await;
    assert_eq!(rows[0].as_object().unwrap().len(), 2);
    for bad in ["nope", "reviews", "title,,year", ",", ""] {
        let p = problem(s.get(&format!("/v1/books?fields={bad}")).await, 400).await;
        assert_eq!(p["invalid_params"][0]["name"], "fields", "{bad}");
    }
}

/// The keys of a body's object, in the order they are written.
fn keys_in_order(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    // serde_json's Map is sorted; read the object as a sequence of entries.
    struct Keys<'a>(&'a mut Vec<String>);
    impl<'de> serde::de::Visitor<'de> for Keys<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object or an array of objects")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
            while let Some((k, _)) = m.next_entry::<String, serde::de::IgnoredAny>()? {
                self.0.push(k);
            }
            Ok(())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
            // The first element's keys.
            if let Some(Some(text)) = s
                .next_element::<Option<Box<serde_json::value::RawValue>>>()?
                .map(|v| v.map(|v| v.get().to_string()))
            {
                self.0.extend(keys_in_order(&text));
            }
            while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(())
        }
    }
    serde::Deserializer::deserialize_any(&mut de, Keys(&mut keys)).unwrap();
    keys
}

#[tokio::test]
async fn keys_follow_the_schema_order() {
    let (s, _, books) = library().await;
    let declared = [
        "id",
        "title",
        "year",
        "isbn",
        "status",
        "tags",
        "rating",
        "published",
        "author",
        "shelf",
    ];
    let list = s.get("/v1/books?per_page=1").await.text().await.unwrap();
    assert_eq!(keys_in_order(&list), declared, "{list}");
    let one = s.get(&format!("/v1/books/{}", books[0])).await;
    let one = one.text().await.unwrap();
    assert_eq!(keys_in_order(&one), declared, "{one}");
    // Sparse fields too, whatever order they are asked in.
    let sparse = s
        .get("/v1/books?per_page=1&fields=year,title")
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(keys_in_order(&sparse), ["id", "title", "year"], "{sparse}");
}

/// A list asked for again runs its kept statement: it reads what the store
/// holds now, including rows written, changed and deleted since.
#[tokio::test]
async fn a_repeated_list_reads_current_rows() {
    let (s, authors, books) = library().await;
    let q = "/v1/books?sort=title&per_page=3&fields=title";
    let before = s.get_ok(q).await;
    assert_eq!(
        titles(&before),
        ["Dune", "Neuromancer", "The War of the Worlds"]
    );
    // Sorts first; its title needs escaping in JSON.
    let title = "\"A\" \\ tab\there\u{1}";
    s.book(title, Some(2000), &authors[0]).await;
    let r = s
        .send(
            reqwest::Method::DELETE,
            &format!("/v1/books/{}", books[2]),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = s.get(q).await;
    assert_eq!(header(&r, "x-total-count").as_deref(), Some("5"));
    let after: Value = r.json().await.unwrap();
    assert_eq!(
        titles(&after),
        [title, "Neuromancer", "The War of the Worlds"]
    );
}
