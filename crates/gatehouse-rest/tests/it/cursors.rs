//! Lists read by cursor (`?after=`): a walk by `Link: rel="next"` while
//! books are added before and after the cursor, on every backend; bad
//! cursors are 400 problems naming `after`.

use gatehouse_testkit::TestDb;
use reqwest::StatusCode;
use serde_json::Value;

use crate::{Server, header, problem, start_in};
use gatehouse_testkit::example_model;

/// The `next` and `first` URLs of a `Link` header, relative to the server.
fn link(s: &Server, r: &reqwest::Response, rel: &str) -> Option<String> {
    let link = header(r, "link")?;
    link.split(", ").find_map(|part| {
        let (url, r) = part.split_once("; ")?;
        (r == format!("rel=\"{rel}\"")).then(|| {
            url.trim_start_matches('<')
                .trim_end_matches('>')
                .trim_start_matches(&s.base)
                .to_string()
        })
    })
}

fn titles(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["title"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_is_walked_by_its_next_links_while_books_are_added() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let s = start_in(db, example_model(), "", 1 << 20).await;
        let a = s.author("Alpha", None).await;
        for (t, y) in [
            ("a", 1990),
            ("b", 1990),
            ("c", 2000),
            ("d", 2000),
            ("e", 2010),
        ] {
            s.book(t, Some(y), &a).await;
        }
        s.book("n", None, &a).await;
        // An empty `after` starts the walk: the first page by cursor.
        let mut next = Some("/v1/books?sort=-year&fields=title&per_page=2&after=".to_string());
        let mut seen = Vec::new();
        let mut pages = 0;
        while let Some(path) = next {
            let r = s.get(&path).await;
            assert_eq!(r.status(), StatusCode::OK, "{backend} {path}");
            assert_eq!(
                header(&r, "x-total-count").as_deref(),
                Some(if pages == 0 { "6" } else { "8" })
            );
            let first = link(&s, &r, "first").unwrap();
            assert!(first.ends_with("after="), "{first}");
            assert!(
                first.contains("sort=-year") && first.contains("fields=title"),
                "{first}"
            );
            next = link(&s, &r, "next");
            let rows: Value = r.json().await.unwrap();
            // `fields=` holds: the order's keys read for the cursor are not shown.
            assert!(rows[0].get("year").is_none(), "{rows}");
            seen.extend(titles(&rows));
            if pages == 0 {
                s.book("early", Some(2020), &a).await; // before the cursor: never read
                s.book("late", Some(1980), &a).await; // after it: read once
            }
            pages += 1;
            assert!(pages < 20);
        }
        // Descending puts the null first; ties by id (insertion order).
        assert_eq!(seen, ["n", "e", "c", "d", "a", "b", "late"], "{backend}");

        // Page-numbered requests keep their links.
        let r = s.get("/v1/books?per_page=2").await;
        assert!(link(&s, &r, "last").is_some());
    }
}

#[tokio::test]
async fn bad_cursors_are_400_naming_after() {
    let s = start_in(TestDb::sqlite(), example_model(), "", 1 << 20).await;
    let a = s.author("Alpha", None).await;
    s.book("a", Some(1), &a).await;
    s.book("b", Some(2), &a).await;
    let r = s.get("/v1/books?sort=year&per_page=1&after=").await;
    let next = link(&s, &r, "next").unwrap();
    // The same cursor with another sort, garbage, and with `page`.
    let other_sort = next.replace("sort=year", "sort=title");
    for path in [
        other_sort.as_str(),
        "/v1/books?after=%21%21",
        "/v1/books?after=e30",
    ] {
        let body = problem(s.get(path).await, 400).await;
        assert!(body.to_string().contains("after"), "{path}: {body}");
    }
    let body = problem(s.get("/v1/books?after=&page=2").await, 400).await;
    assert!(body.to_string().contains("page"), "{body}");
    // The good one reads the second row.
    let rows: Value = s.get_ok(&next).await;
    assert_eq!(titles(&rows), ["b"]);
}
