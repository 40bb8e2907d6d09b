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

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

use async_graphql::Value;
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};

/// Deepest fragment nesting followed (validation has refused cycles
/// already; this only bounds the walk).
const MAX_NESTING: usize = 32;

/// Reorders the keys of `data` (the response of `operation_name` in `doc`)
/// into selection order. Leaves `data` as it is when `doc` has no such
/// operation.
///
/// Linear in the size of the response (plus, for each selection path that
/// has data, the size of its selection): the order of a selection is worked
/// out once and shared by every object it produced (all the items of a
/// list), an object already in order is left alone, and one out of order is
/// sorted by rank (n log n), never searched key by key.
pub(crate) fn in_selection_order(
    data: &mut Value,
    doc: &ExecutableDocument,
    operation_name: Option<&str>,
) {
    if let Some(op) = crate::cache::operation(doc, operation_name) {
        let node = Node::new(doc, &[&op.selection_set.node]);
        reorder(doc, data, &node);
    }
}

/// The order one selection (the selection sets of every field writing one
/// response key) requests, and the same for each of its keys, built when
/// the data first has a value there.
struct Node<'d> {
    /// Response key -> its position (index into `children`).
    rank: HashMap<&'d str, usize>,
    /// Per key, in selection order.
    children: Vec<Child<'d>>,
}

/// One response key of a [`Node`].
struct Child<'d> {
    /// The name of the (first) field writing it.
    name: &'d str,
    /// The selection sets of the fields that write it.
    subs: Vec<&'d SelectionSet>,
    /// Their order, once needed.
    node: OnceCell<Node<'d>>,
}

impl<'d> Child<'d> {
    fn node(&self, doc: &'d ExecutableDocument) -> &Node<'d> {
        self.node.get_or_init(|| Node::new(doc, &self.subs))
    }
}

impl<'d> Node<'d> {
    fn new(doc: &'d ExecutableDocument, sets: &[&'d SelectionSet]) -> Self {
        #[cfg(test)]
        tests::NODES_BUILT.with(|n| n.set(n.get() + 1));
        let mut node = Node {
            rank: HashMap::new(),
            children: Vec::new(),
        };
        // A fragment spread twice in one selection adds nothing the second time.
        let mut spread = HashSet::new();
        for set in sets {
            node.collect(doc, set, &mut spread, 0);
        }
        node
    }

    /// Adds the response keys `set` writes (fragments expanded, whatever
    /// their type condition: a key absent from the object is skipped).
    fn collect(
        &mut self,
        doc: &'d ExecutableDocument,
        set: &'d SelectionSet,
        spread: &mut HashSet<&'d str>,
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
                    let next = self.children.len();
                    let at = *self.rank.entry(key).or_insert(next);
                    if at == next {
                        self.children.push(Child {
                            name: f.name.node.as_str(),
                            subs: Vec::new(),
                            node: OnceCell::new(),
                        });
                    }
                    if !sub.items.is_empty()
                        && let Some(child) = self.children.get_mut(at)
                    {
                        child.subs.push(sub);
                    }
                }
                Selection::InlineFragment(i) => {
                    self.collect(doc, &i.node.selection_set.node, spread, nesting + 1);
                }
                Selection::FragmentSpread(s) => {
                    let name = s.node.fragment_name.node.as_str();
                    if spread.insert(name)
                        && let Some(frag) = doc.fragments.get(name)
                    {
                        self.collect(doc, &frag.node.selection_set.node, spread, nesting + 1);
                    }
                }
            }
        }
    }
}

/// Puts the keys of `value` (an object, or a list of them at any depth) in
/// the order `node` requests them, recursively.
fn reorder<'d>(doc: &'d ExecutableDocument, value: &mut Value, node: &Node<'d>) {
    match value {
        Value::List(items) => {
            for item in items {
                reorder(doc, item, node);
            }
        }
        Value::Object(map) => {
            // Anything the selection does not name (none expected) goes
            // after, keeping its place among such keys (the sort is stable).
            let rank = |k: &str| node.rank.get(k).copied().unwrap_or(usize::MAX);
            let mut last = 0;
            let in_order = map.keys().all(|k| {
                let r = rank(k.as_str());
                let ok = r >= last;
                last = r;
                ok
            });
            if !in_order {
                map.sort_by_cached_key(|k, _| rank(k.as_str()));
            }
            for (k, v) in map.iter_mut() {
                if !matches!(v, Value::Object(_) | Value::List(_)) {
                    continue;
                }
                if let Some(child) = node
                    .rank
                    .get(k.as_str())
                    .and_then(|&i| node.children.get(i))
                {
                    reorder(doc, v, child.node(doc));
                }
            }
        }
        _ => {}
    }
}

/// GraphQL spec §6.4.4: a field error on a non-null field makes its
/// nearest nullable parent null (the whole `data` when there is none).
/// async-graphql's dynamic executor leaves such a field's key out instead;
/// this puts the null where the spec says, for every error with a path.
pub(crate) fn null_failed_fields(
    data: &mut Value,
    errors: &[async_graphql::ServerError],
    doc: &ExecutableDocument,
    operation_name: Option<&str>,
    model: &gatehouse_schema::Model,
) {
    use async_graphql::parser::types::OperationType;
    let Some(op) = crate::cache::operation(doc, operation_name) else {
        return;
    };
    let root = match op.ty {
        OperationType::Query => "Query",
        OperationType::Mutation => "Mutation",
        OperationType::Subscription => "Subscription",
    };
    let top = Node::new(doc, &[&op.selection_set.node]);
    for e in errors {
        if e.path.is_empty() || *data == Value::Null {
            continue;
        }
        let nullable = nullable_along(doc, &top, root, &e.path, model);
        // The error's own position is last, its parents before it.
        let Some(own) = nullable.last().filter(|_| nullable.len() == e.path.len()) else {
            continue;
        };
        if *own {
            continue;
        }
        match nullable[..nullable.len() - 1].iter().rposition(|n| *n) {
            Some(k) => set_null(data, &e.path[..=k]),
            None => *data = Value::Null,
        }
    }
}

/// For each prefix of `path`, whether the value there may be null (a field
/// or list item not known to the schema counts as nullable).
fn nullable_along<'d>(
    doc: &'d ExecutableDocument,
    top: &Node<'d>,
    root: &str,
    path: &[async_graphql::PathSegment],
    model: &gatehouse_schema::Model,
) -> Vec<bool> {
    use async_graphql::PathSegment;
    use gatehouse_schema::TypeRef;
    let mut out = Vec::with_capacity(path.len());
    let mut node = top;
    let mut parent = root.to_string();
    let mut current: Option<TypeRef> = None;
    for seg in path {
        match seg {
            PathSegment::Field(key) => {
                let Some(child) = node
                    .rank
                    .get(key.as_str())
                    .and_then(|&i| node.children.get(i))
                else {
                    // Not selected here (never, for a resolver's error): stop.
                    out.push(true);
                    break;
                };
                let name = child.name;
                let ty = match parent.as_str() {
                    "Query" => model
                        .queries
                        .iter()
                        .find(|f| f.name == name)
                        .map(|f| f.ty.clone()),
                    "Mutation" => model
                        .mutations
                        .iter()
                        .find(|f| f.name == name)
                        .map(|f| f.ty.clone()),
                    "Subscription" => model
                        .subscriptions
                        .iter()
                        .find(|f| f.name == name)
                        .map(|f| f.ty.clone()),
                    entity => model
                        .entity(entity)
                        .and_then(|e| e.field(name))
                        .map(|f| f.ty.clone())
                        .or_else(|| connection_field(model, entity, name)),
                };
                out.push(ty.as_ref().is_none_or(|t| !t.is_non_null()));
                node = child.node(doc);
                if let Some(t) = &ty {
                    parent = named(t).to_string();
                }
                current = ty;
            }
            PathSegment::Index(_) => {
                let item = match current.as_ref().map(TypeRef::nullable) {
                    Some(TypeRef::List(item)) => Some((**item).clone()),
                    _ => None,
                };
                out.push(item.as_ref().is_none_or(|t| !t.is_non_null()));
                current = item;
            }
        }
    }
    out
}

/// The type of field `name` of the connection, edge or bulk result type
/// `type_name` (`BookConnection.edges`, `BookEdge.node`,
/// `BookBulkResult.rows`): a failed field below a node or a row nulls its
/// nearest nullable parent through them too.
fn connection_field(
    model: &gatehouse_schema::Model,
    type_name: &str,
    name: &str,
) -> Option<gatehouse_schema::TypeRef> {
    if let Some(c) = model.connection(type_name) {
        return match name {
            "edges" => Some(c.edges.clone()),
            "pageInfo" => Some(c.page_info.clone()),
            "totalCount" => c.total_count.clone(),
            _ => None,
        };
    }
    if let Some(b) = model.bulk_result(type_name) {
        use gatehouse_schema::TypeRef;
        let nn = |t: TypeRef| TypeRef::NonNull(Box::new(t));
        return match name {
            "count" => Some(nn(TypeRef::Named("Int".into()))),
            "rows" => Some(nn(TypeRef::List(Box::new(nn(TypeRef::Named(
                b.entity.clone(),
            )))))),
            _ => None,
        };
    }
    let c = model.connections.iter().find(|c| c.edge == type_name)?;
    match name {
        "cursor" => Some(c.cursor.clone()),
        "node" => Some(c.node.clone()),
        _ => None,
    }
}

/// The innermost named type of `t`.
fn named(t: &gatehouse_schema::TypeRef) -> &str {
    use gatehouse_schema::TypeRef;
    match t {
        TypeRef::Named(n) => n,
        TypeRef::NonNull(inner) | TypeRef::List(inner) => named(inner),
    }
}

/// Sets the value at `path` in `data` to null (adding the key when it was
/// left out); nothing when a parent on the way is gone already.
fn set_null(data: &mut Value, path: &[async_graphql::PathSegment]) {
    use async_graphql::PathSegment;
    let Some((last, parents)) = path.split_last() else {
        *data = Value::Null;
        return;
    };
    let mut at = data;
    for seg in parents {
        let next = match (seg, at) {
            (PathSegment::Field(k), Value::Object(m)) => m.get_mut(k.as_str()),
            (PathSegment::Index(i), Value::List(items)) => items.get_mut(*i),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return,
        }
    }
    match (last, at) {
        (PathSegment::Field(k), Value::Object(m)) => {
            m.insert(async_graphql::Name::new(k), Value::Null);
        }
        (PathSegment::Index(i), Value::List(items)) => {
            if let Some(v) = items.get_mut(*i) {
                *v = Value::Null;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_graphql::indexmap::IndexMap;

    thread_local! {
        /// How many selection orders [`Node::new`] worked out on this thread.
        pub(super) static NODES_BUILT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// D3: 2,000 `__typename` aliases on each of 500 books arrived in
    /// reverse order. The order of the books' selection is worked out once
    /// (not once per book), each book is sorted rather than searched key by
    /// key, and the result is in selection order.
    #[test]
    fn a_wide_selection_on_many_items_is_ordered_once() {
        let aliases: Vec<String> = (0..2000).map(|i| format!("a{i}: __typename")).collect();
        let query = format!(
            "{{ books(first: 500) {{ {} author {{ name id }} }} }}",
            aliases.join(" ")
        );
        let doc = async_graphql::parser::parse_query(&query).expect("a document");
        let book = || {
            let mut m = IndexMap::new();
            let mut author = IndexMap::new();
            author.insert(async_graphql::Name::new("id"), Value::from("1"));
            author.insert(async_graphql::Name::new("name"), Value::from("n"));
            m.insert(async_graphql::Name::new("author"), Value::Object(author));
            for i in (0..2000).rev() {
                m.insert(
                    async_graphql::Name::new(format!("a{i}")),
                    Value::from("Book"),
                );
            }
            Value::Object(m)
        };
        let mut root = IndexMap::new();
        root.insert(
            async_graphql::Name::new("books"),
            Value::List((0..500).map(|_| book()).collect()),
        );
        let mut data = Value::Object(root);
        NODES_BUILT.with(|n| n.set(0));
        in_selection_order(&mut data, &doc, None);
        // The operation, `books` and `author`: one each, whatever the row count.
        assert_eq!(NODES_BUILT.with(std::cell::Cell::get), 3);
        let Value::Object(m) = &data else {
            panic!("an object")
        };
        let Value::List(books) = &m["books"] else {
            panic!("a list")
        };
        assert_eq!(books.len(), 500);
        for b in books {
            let k = keys(b);
            assert_eq!(k.len(), 2001);
            assert_eq!(k[0], "a0");
            assert_eq!(k[1999], "a1999");
            assert_eq!(k[2000], "author");
            let Value::Object(b) = b else {
                panic!("an object")
            };
            assert_eq!(keys(&b["author"]), ["name", "id"]);
        }
    }

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
