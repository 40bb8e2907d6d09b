//! The standard introspection query (graphql-js `getIntrospectionQuery()`
//! with descriptions and `specifiedByURL`), served as `/graphql/schema.json`.

/// What `GET /graphql/schema.json` executes.
pub const INTROSPECTION_QUERY: &str = r#"
query IntrospectionQuery {
  __schema {
    queryType { name }
    mutationType { name }
    subscriptionType { name }
    types { ...FullType }
    directives {
      name
      description
      locations
      args { ...InputValue }
    }
  }
}

fragment FullType on __Type {
  kind
  name
  description
  specifiedByURL
  fields(includeDeprecated: true) {
    name
    description
    args { ...InputValue }
    type { ...TypeRef }
    isDeprecated
    deprecationReason
  }
  inputFields { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) {
    name
    description
    isDeprecated
    deprecationReason
  }
  possibleTypes { ...TypeRef }
}

fragment InputValue on __InputValue {
  name
  description
  type { ...TypeRef }
  defaultValue
}

fragment TypeRef on __Type {
  kind
  name
  ofType {
    kind
    name
    ofType {
      kind
      name
      ofType {
        kind
        name
        ofType {
          kind
          name
          ofType {
            kind
            name
            ofType {
              kind
              name
              ofType {
                kind
                name
              }
            }
          }
        }
      }
    }
  }
}
"#;

/// Whether any operation of `doc` selects `__schema` or `__type` at its
/// root (directly or through fragments spread there).
pub(crate) fn asks_for_schema(doc: &async_graphql::parser::types::ExecutableDocument) -> bool {
    use async_graphql::parser::types::{Selection, SelectionSet};
    fn walk(
        doc: &async_graphql::parser::types::ExecutableDocument,
        set: &SelectionSet,
        depth: usize,
    ) -> bool {
        // Fragments cannot spread in cycles in a valid document; the
        // bound keeps an invalid one from recursing without end.
        if depth > 32 {
            return false;
        }
        set.items.iter().any(|item| match &item.node {
            Selection::Field(f) => matches!(f.node.name.node.as_str(), "__schema" | "__type"),
            Selection::InlineFragment(i) => walk(doc, &i.node.selection_set.node, depth + 1),
            Selection::FragmentSpread(s) => doc
                .fragments
                .get(&s.node.fragment_name.node)
                .is_some_and(|f| walk(doc, &f.node.selection_set.node, depth + 1)),
        })
    }
    doc.operations
        .iter()
        .any(|(_, op)| walk(doc, &op.node.selection_set.node, 0))
}
