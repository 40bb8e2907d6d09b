use gatehouse_schema::{Source, load_sources};
use gatehouse_testkit::EXAMPLE_SCHEMA;
use proptest::prelude::*;

fn load(files: Vec<(String, String)>) {
    let sources: Vec<Source> = files
        .into_iter()
        .map(|(path, text)| Source { path, text })
        .collect();
    // Either outcome is fine; a panic fails the test.
    let _ = load_sources(&sources);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary text never makes the loader panic.
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        load(vec![("a.graphql".into(), text)]);
    }

    /// GraphQL-ish token soup never makes the loader panic.
    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(
        prop::sample::select(vec![
            "type", "Query", "Mutation", "Subscription", "extend", "input", "enum", "scalar",
            "union", "interface", "{", "}", "(", ")", "[", "]", ":", "!", "=", "@", "|",
            "ID", "Int", "String", "Date", "Book", "Author", "id", "books", "author", "first",
            "where", "orderBy", "createBook", "updateBook", "deleteBook", "bookCreated",
            "@relation(field: \"author\")", "@rest(path: \"x\")", "@auth(scope: \"s\")", "@unique",
            "year_gt", "title_in", "\n", "\"doc\"", "implements", "schema", "directive",
        ]),
        0..120,
    )) {
        load(vec![("a.graphql".into(), tokens.join(" "))]);
    }

    /// The example with a random slice cut out never makes the loader panic.
    #[test]
    fn mutated_example_never_panics(file in 0usize..4, start in 0usize..4000, len in 0usize..200, insert in "\\PC{0,20}") {
        let mut files: Vec<(String, String)> =
            EXAMPLE_SCHEMA.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
        let text = &mut files[file].1;
        let chars: Vec<char> = text.chars().collect();
        let s = start.min(chars.len());
        let e = (s + len).min(chars.len());
        let mut out: String = chars[..s].iter().collect();
        out.push_str(&insert);
        out.extend(chars[e..].iter());
        *text = out;
        load(files);
    }
}

#[test]
fn empty_and_missing_inputs_are_errors_not_panics() {
    assert!(load_sources(&[]).is_err());
    let e = load_sources(&[Source {
        path: "e.graphql".into(),
        text: String::new(),
    }]);
    assert!(e.is_err());
}

#[test]
fn reading_a_missing_path_is_a_diagnostic() {
    let err = gatehouse_schema::load_paths(&["/nonexistent/schema-dir".into()])
        .err()
        .map(|d| d.to_string())
        .unwrap_or_default();
    assert!(
        err.starts_with("/nonexistent/schema-dir: error: cannot read file"),
        "{err}"
    );
}

#[test]
fn a_directory_without_schema_files_is_a_diagnostic() {
    let dir = std::env::temp_dir().join(format!("gh-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = gatehouse_schema::load_paths(std::slice::from_ref(&dir))
        .err()
        .map(|d| d.to_string())
        .unwrap_or_default();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        err.contains("error: no .graphql or .graphqls files in this directory"),
        "{err}"
    );
}
