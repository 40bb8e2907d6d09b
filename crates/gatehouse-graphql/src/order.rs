//! Response keys in selection order.
//!
//! async-graphql resolves the fields of a query's objects concurrently and
//! writes each into the response map when it completes, so `{ books { … }
//! b: bookByIsbn(…) { … } }` could come back with `b` first. The GraphQL
//! spec (§7.2.2, "Serialized Map Ordering") asks that a response keep the
//! order in which the selection set requested the fields, and clients that
//! show raw responses (GraphiQL) otherwise show them shuffled. This pass
//! puts every object's keys back in selection order; values are untouched.
//! The planned executor writes in selection order already.

use async_graphql::Value;
use async_graphql::indexmap::IndexMap;
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};

/// Deepest fragment nesting followed (validation has refused cycles
/// already; this only bounds the walk).
const MAX_NESTING: usize = 32;

/// Reorders the keys of `data` (the response of `operation_name` in `doc`)
/// into selection order. Leaves `data` as it is when `doc` has no such
/// operation.
pub(crate) fn in_selection_order(
    data: &mut Value,
    doc: &ExecutableDocument,
    operation_name: Option<&str>,
) {
    if let Some(op) = crate::cache::operation(doc, operation_name) {
        reorder(doc, data, &[&op.selection_set.node]);
    }
}

/// Puts the keys of `value` (an object, or a list of them at any depth) in
/// the order `sets` (the selection sets of every field that produced it)
/// request them, recursively.
fn reorder(doc: &ExecutableDocument, value: &mut Value, sets: &[&SelectionSet]) {
    match value {
        Value::List(items) => {
            for item in items {
                reorder(doc, item, sets);
            }
        }
        Value::Object(map) => {
            // Response keys in first-request order, each with the
            // selection sets of the fields that write it.
            let mut keys: Vec<(&str, Vec<&SelectionSet>)> = Vec::new();
            for set in sets {
                collect(doc, set, &mut keys, 0);
            }
            let mut old = std::mem::take(map);
            let mut ordered = IndexMap::with_capacity(old.len());
            for (key, subsets) in &keys {
                if let Some((name, mut v)) = old.shift_remove_entry(*key) {
                    reorder(doc, &mut v, subsets);
                    ordered.insert(name, v);
                }
            }
            // Anything the selection does not name (none expected) keeps its place after.
            ordered.extend(old);
            *map = ordered;
        }
        _ => {}
    }
}

/// Adds the response keys `set` writes (fragments expanded, whatever
/// their type condition: a key absent from the object is skipped).
fn collect<'d>(
    doc: &'d ExecutableDocument,
    set: &'d SelectionSet,
    keys: &mut Vec<(&'d str, Vec<&'d SelectionSet>)>,
    nesting: usize,
) {
    if nesting > MAX_NESTING {
        return;
    }
    for sel in &set.items {
        match &sel.node {
            Selection::Field(f) => {
                let f = &f.node;
                let key = f.alias.as_ref().unwrap_or(&f.name).node.as_str();
                let sub = &f.selection_set.node;
                match keys.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, subs)) => subs.push(sub),
                    None => keys.push((key, vec![sub])),
                }
            }
            Selection::InlineFragment(i) => {
                collect(doc, &i.node.selection_set.node, keys, nesting + 1);
            }
            Selection::FragmentSpread(s) => {
                if let Some(frag) = doc.fragments.get(&s.node.fragment_name.node) {
                    collect(doc, &frag.node.selection_set.node, keys, nesting + 1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(v: &Value) -> Vec<String> {
        match v {
            Value::Object(m) => m.keys().map(|k| k.to_string()).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn objects_and_lists_follow_the_selection() {
        // serde_json's maps are sorted, so this arrives as "__typename",
        // "b", "books" with "author" before "title" and "id" before "name".
        let mut data = Value::from_json(serde_json::json!({
            "b": {"title": "t"},
            "books": [{"author": {"name": "n", "id": "1"}, "title": "x"}],
            "__typename": "Query",
        }))
        .expect("a value");
        let query =
            "query Q { __typename books { title ...A } b: bookByIsbn(isbn: \"x\") { title } }
                     fragment A on Book { author { name id } }";
        let doc = async_graphql::parser::parse_query(query).expect("a document");
        in_selection_order(&mut data, &doc, Some("Q"));
        assert_eq!(keys(&data), ["__typename", "books", "b"]);
        let Value::Object(m) = &data else {
            panic!("an object")
        };
        let Value::List(books) = &m["books"] else {
            panic!("a list")
        };
        assert_eq!(keys(&books[0]), ["title", "author"]);
        let Value::Object(book) = &books[0] else {
            panic!("an object")
        };
        assert_eq!(keys(&book["author"]), ["name", "id"]);
    }

    #[test]
    fn an_unknown_operation_leaves_the_data_alone() {
        let mut map = IndexMap::new();
        map.insert(async_graphql::Name::new("b"), Value::from(1));
        map.insert(async_graphql::Name::new("a"), Value::from(2));
        let mut data = Value::Object(map);
        let doc = async_graphql::parser::parse_query("query A { a b }").expect("a document");
        in_selection_order(&mut data, &doc, Some("B"));
        assert_eq!(keys(&data), ["b", "a"]);
    }
}
