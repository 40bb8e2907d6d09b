//! Objects whose every selected field is skipped.
//!
//! GraphQL spec §6.3 (CollectFields): an object whose selection set
//! `@skip`/`@include` leave empty is still an object, `{}`, and so is the
//! `data` of an operation whose root fields are all skipped. async-graphql
//! answers null for a container with no fields, which reads as a missing
//! row (or breaks a non-null list without an error). So before it runs,
//! each selection set that the request's variables leave empty gets one
//! `__typename`, under a reserved response key ([`MARKER`]), and the
//! response drops that key again ([`strip`]).

use std::collections::HashMap;

use async_graphql::parser::types::{
    Directive, DocumentOperations, ExecutableDocument, Field, FragmentDefinition, OperationType,
    Selection, SelectionSet,
};
use async_graphql::{Name, Positioned, Value, Variables};
use async_graphql_value::Value as InputValue;

/// The response key of the added `__typename`: a name GraphQL reserves
/// (`__`), so no client's alias is ever taken for it.
pub(crate) const MARKER: &str = "__gatehouse_empty";

/// Deepest fragment nesting followed (validation refuses cycles; this only
/// bounds the walk). Selection sets nest at most
/// [`crate::input::MAX_SELECTION_NESTING`] deep.
const MAX_FRAGMENT_NESTING: usize = 32;

type Fragments = HashMap<Name, Positioned<FragmentDefinition>>;

/// Whether `@skip`/`@include` among `directives` leave the selection out,
/// as async-graphql decides it (a condition that is not a Boolean counts
/// as false).
fn skipped(directives: &[Positioned<Directive>], variables: &Variables) -> bool {
    directives.iter().any(|d| {
        let include = match d.node.name.node.as_str() {
            "skip" => false,
            "include" => true,
            _ => return false,
        };
        let condition = match d.node.get_argument("if").map(|v| &v.node) {
            Some(InputValue::Boolean(b)) => *b,
            Some(InputValue::Variable(name)) => {
                matches!(variables.get(name), Some(Value::Boolean(true)))
            }
            _ => false,
        };
        condition != include
    })
}

/// Whether `set` selects at least one field with these variables.
fn selects_any(
    set: &SelectionSet,
    fragments: &Fragments,
    variables: &Variables,
    nesting: usize,
) -> bool {
    if nesting > MAX_FRAGMENT_NESTING {
        return true;
    }
    set.items.iter().any(|item| {
        if skipped(item.node.directives(), variables) {
            return false;
        }
        match &item.node {
            Selection::Field(_) => true,
            Selection::InlineFragment(i) => selects_any(
                &i.node.selection_set.node,
                fragments,
                variables,
                nesting + 1,
            ),
            Selection::FragmentSpread(s) => {
                fragments.get(&s.node.fragment_name.node).is_some_and(|f| {
                    !skipped(&f.node.directives, variables)
                        && selects_any(
                            &f.node.selection_set.node,
                            fragments,
                            variables,
                            nesting + 1,
                        )
                })
            }
        }
    })
}

fn marker() -> Positioned<Selection> {
    let at = |name: &str| Positioned::new(Name::new(name), async_graphql::Pos::default());
    Positioned::new(
        Selection::Field(Positioned::new(
            Field {
                alias: Some(at(MARKER)),
                name: at("__typename"),
                arguments: Vec::new(),
                directives: Vec::new(),
                selection_set: Positioned::new(
                    SelectionSet::default(),
                    async_graphql::Pos::default(),
                ),
            },
            async_graphql::Pos::default(),
        )),
        async_graphql::Pos::default(),
    )
}

/// Adds the marker to every object selection set under `set` (not `set`
/// itself) that selects nothing with these variables; whether it added any.
fn mark_below(set: &mut SelectionSet, fragments: &Fragments, variables: &Variables) -> bool {
    let mut added = false;
    for item in &mut set.items {
        match &mut item.node {
            Selection::Field(f) => {
                let sub = &mut f.node.selection_set.node;
                if !sub.items.is_empty() {
                    added |= mark_below(sub, fragments, variables);
                    if !selects_any(sub, fragments, variables, 0) {
                        sub.items.push(marker());
                        added = true;
                    }
                }
            }
            Selection::InlineFragment(i) => {
                added |= mark_below(&mut i.node.selection_set.node, fragments, variables);
            }
            Selection::FragmentSpread(_) => {}
        }
    }
    added
}

/// `doc` with the marker added where operation `operation_name` (with
/// `variables`, defaults included) would select no field of an object;
/// `None` when it selects a field of every object it reaches.
pub(crate) fn mark(
    doc: &ExecutableDocument,
    operation_name: Option<&str>,
    variables: &Variables,
) -> Option<ExecutableDocument> {
    let mut marked = doc.clone();
    let fragments = doc.fragments.clone();
    let mut added = false;
    for fragment in marked.fragments.values_mut() {
        added |= mark_below(&mut fragment.node.selection_set.node, &fragments, variables);
    }
    let op = match (&mut marked.operations, operation_name) {
        (DocumentOperations::Single(op), _) => Some(op),
        (DocumentOperations::Multiple(ops), Some(name)) => ops.get_mut(name),
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => ops.values_mut().next(),
        (DocumentOperations::Multiple(_), None) => None,
    };
    // (No such operation: async-graphql refuses the request.)
    if let Some(op) = op {
        let set = &mut op.node.selection_set.node;
        added |= mark_below(set, &fragments, variables);
        // A subscription selects exactly one root field, never `__typename`.
        if op.node.ty != OperationType::Subscription
            && !set.items.is_empty()
            && !selects_any(set, &fragments, variables, 0)
        {
            set.items.push(marker());
            added = true;
        }
    }
    added.then_some(marked)
}

/// Removes the marker from every object of `data`, without recursion.
pub(crate) fn strip(data: &mut Value) {
    let mut stack = vec![data];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(fields) => {
                fields.shift_remove(MARKER);
                stack.extend(fields.values_mut());
            }
            Value::List(items) => stack.extend(items.iter_mut()),
            _ => {}
        }
    }
}
