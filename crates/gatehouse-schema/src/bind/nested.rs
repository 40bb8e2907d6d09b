//! Nested create: a create mutation's input also takes new rows of each
//! one-to-many relation of its type (`createAuthor(name: "X", books:
//! [{title: "Y"}])`), written in the same transaction by the store.
//!
//! The input type of those rows is derived here, once per relation:
//! `<Type><Field>Input` (`AuthorBooksInput`) holds what creating the
//! target takes (the fields a create input may set, required as on
//! create), except the to-one field that points back (the store sets it to
//! the new row), and, in turn, the target's own nested relations. Every
//! create mutation gets one value per one-to-many relation of its type: an
//! argument, or a field of its input object (unless an update shares that
//! input object). Both are in the Model (`Model::inputs`, the root
//! field's arguments) and in the printed schema (`Model::sdl`). A schema
//! that declares them (one `schema print` wrote) binds to the same Model;
//! a type of a derived name that is not an input object is an error.
//! See `docs/design/transactions.md`.

use std::collections::BTreeSet;

use apollo_compiler::ast::{self, Type};
use apollo_compiler::parser::SourceSpan;
use apollo_compiler::schema::{Component, ExtendedType};
use apollo_compiler::{Name, Node, Schema};
use heck::ToUpperCamelCase;

use super::Binder;
use crate::model::*;

/// What nested create adds to the schema the user wrote.
#[derive(Default)]
pub(super) struct Added {
    /// The derived input types.
    inputs: Vec<InputObject>,
    /// `(input type, field)`: a nested field added to a create input object.
    fields: Vec<(String, InputValue)>,
    /// `(mutation field, argument)`: a nested argument of a create mutation.
    args: Vec<(String, InputValue)>,
    /// Derived names the schema already uses (reported): not derived.
    taken: BTreeSet<String>,
}

impl Binder<'_> {
    /// Where the field `field` of the object type `entity` is declared.
    fn field_location(&self, entity: &str, field: &str) -> Option<SourceSpan> {
        match self.schema.types.get(entity)? {
            ExtendedType::Object(o) => o.fields.get(field)?.location(),
            _ => None,
        }
    }

    /// Adds nested create to the create mutations of `mutations` (and to
    /// the input objects among `inputs` they take); returns what it added,
    /// for the printed schema.
    pub(super) fn nested_creates(
        &mut self,
        mutations: &mut [RootField],
        inputs: &mut Vec<InputObject>,
    ) -> Added {
        let mut added = Added::default();
        // Input objects an update takes too: a nested field there would
        // be offered to updates, which cannot create children.
        let shared: BTreeSet<String> = mutations
            .iter()
            .filter_map(|rf| match &rf.binding {
                Binding::Update {
                    input: WriteInput::Object { type_name, .. },
                    ..
                } => Some(type_name.clone()),
                _ => None,
            })
            .collect();
        let mut derived = BTreeSet::new();
        for rf in mutations.iter_mut() {
            let Binding::Create(input) = &mut rf.binding else {
                continue;
            };
            let Some(entity) = self.entity_named(&rf.entity).cloned() else {
                continue;
            };
            let nested = self.nested_values(&entity, &mut derived, &mut added);
            if nested.is_empty() {
                continue;
            }
            match input {
                WriteInput::Args { fields } => {
                    for v in nested {
                        fields.push(v.name.clone());
                        // Declared already by a printed schema loaded again.
                        if rf.args.iter().any(|a| a.name == v.name) {
                            continue;
                        }
                        added.args.push((rf.name.clone(), v.clone()));
                        rf.args.push(v);
                    }
                }
                WriteInput::Object {
                    type_name, fields, ..
                } => {
                    if shared.contains(type_name.as_str()) {
                        continue;
                    }
                    let Some(object) = inputs.iter_mut().find(|i| &i.name == type_name) else {
                        continue;
                    };
                    for v in nested {
                        fields.push(v.name.clone());
                        if object.fields.iter().any(|f| f.name == v.name) {
                            continue;
                        }
                        added.fields.push((type_name.clone(), v.clone()));
                        object.fields.push(v);
                    }
                }
            }
        }
        inputs.extend(added.inputs.iter().cloned());
        added
    }

    /// The nested values of a create of `entity`: one per one-to-many
    /// relation, of the relation's derived input type (derived, with the
    /// ones it needs, when first met; `derived` holds their names).
    fn nested_values(
        &mut self,
        entity: &Entity,
        derived: &mut BTreeSet<String>,
        added: &mut Added,
    ) -> Vec<InputValue> {
        let mut out = Vec::new();
        for f in entity.to_many_fields() {
            if let Some(v) = self.connect_value(entity, f, derived, added) {
                out.push(v);
                continue;
            }
            let Some((child, via)) = self.one_to_many(f) else {
                continue;
            };
            let name = input_name(&entity.name, &f.name);
            if derived.insert(name.clone()) {
                if let Some(ExtendedType::InputObject(_)) = self.schema.types.get(name.as_str()) {
                    // Declared: a schema `schema print` wrote, loaded
                    // again. It is used as it is.
                } else if self.schema.types.contains_key(name.as_str()) {
                    let loc = self.field_location(&entity.name, &f.name);
                    self.error(
                        loc,
                        format!(
                            "`{}.{}` takes its new `{}` rows in the input `{name}` (nested create), but the schema declares a type of that name",
                            entity.name, f.name, child.name
                        ),
                        Some(format!("rename your type `{name}`: gatehouse derives it")),
                    );
                    added.taken.insert(name);
                    continue;
                } else {
                    // The child's own nested relations first (each derived once,
                    // so a cycle of relations ends).
                    let grand = self.nested_values(&child, derived, added);
                    let mut fields = Vec::new();
                    for cf in &child.fields {
                        if cf.name == via {
                            continue;
                        }
                        let ty = match cf.kind {
                            FieldKind::ToMany { .. } => {
                                fields.extend(grand.iter().filter(|v| v.name == cf.name).cloned());
                                continue;
                            }
                            _ => match cf.input_type() {
                                Some(t) if child.required_on_create(cf) => {
                                    TypeRef::NonNull(Box::new(t))
                                }
                                Some(t) => t,
                                None => continue,
                            },
                        };
                        fields.push(InputValue {
                            name: cf.name.clone(),
                            ty,
                            default: None,
                            description: None,
                        });
                    }
                    added.inputs.push(InputObject {
                        name: name.clone(),
                        fields,
                        description: Some(format!(
                            "A new `{}` created with its `{}` (`{}.{}`), which `{via}` is set to.",
                            child.name, entity.name, entity.name, f.name
                        )),
                    });
                }
            } else if added.taken.contains(&name) {
                continue;
            }
            out.push(InputValue {
                name: f.name.clone(),
                ty: TypeRef::List(Box::new(TypeRef::NonNull(Box::new(TypeRef::Named(name))))),
                default: None,
                description: Some(format!(
                    "New `{}` rows created with it, in the same transaction.",
                    child.name
                )),
            });
        }
        out
    }

    /// The nested value of a many-to-many field whose links a create may
    /// make (`Model::connect_of`): `tags: BookTagsConnect`, the input
    /// `{connect: [ID!]!}` derived when first met. `None` for other fields
    /// and when the schema took the derived name for another type.
    fn connect_value(
        &mut self,
        entity: &Entity,
        f: &Field,
        derived: &mut BTreeSet<String>,
        added: &mut Added,
    ) -> Option<InputValue> {
        let (join, target) = self.connectable(f)?;
        let name = connect_name(&entity.name, &f.name);
        if derived.insert(name.clone()) {
            match self.schema.types.get(name.as_str()) {
                // Declared: a schema `schema print` wrote, loaded again.
                Some(ExtendedType::InputObject(_)) => {}
                Some(_) => {
                    let loc = self.field_location(&entity.name, &f.name);
                    self.error(
                        loc,
                        format!(
                            "`{}.{}` takes the existing `{target}` rows a create links in the input `{name}` (nested create), but the schema declares a type of that name",
                            entity.name, f.name
                        ),
                        Some(format!("rename your type `{name}`: gatehouse derives it")),
                    );
                    added.taken.insert(name);
                    return None;
                }
                None => added.inputs.push(InputObject {
                    name: name.clone(),
                    fields: vec![InputValue {
                        name: CONNECT.into(),
                        ty: TypeRef::NonNull(Box::new(TypeRef::List(Box::new(
                            TypeRef::NonNull(Box::new(TypeRef::Named("ID".into()))),
                        )))),
                        default: None,
                        description: Some(format!(
                            "The ids of existing `{target}` rows, each linked to the new `{}` by a new `{join}` row; every one must exist and be readable by the caller.",
                            entity.name
                        )),
                    }],
                    description: Some(format!(
                        "Existing `{target}` rows linked to a new `{}` (`{}.{}`), through new `{join}` rows written in the same transaction.",
                        entity.name, entity.name, f.name
                    )),
                }),
            }
        } else if added.taken.contains(&name) {
            return None;
        }
        Some(InputValue {
            name: f.name.clone(),
            ty: TypeRef::Named(name),
            default: None,
            description: Some(format!(
                "Existing `{target}` rows to link to it, in the same transaction."
            )),
        })
    }

    /// The join type's and the target's names of a many-to-many field
    /// whose links a create may make (`Entity::links_only`, the rule
    /// `Model::connect_of` asks).
    pub(super) fn connectable(&self, f: &Field) -> Option<(String, String)> {
        let r = self.relations.get(f.relation()?.index())?;
        let RelationKind::ManyToMany { through, near, far } = r.kind else {
            return None;
        };
        let join = self.entities.get(through.index())?;
        let near = join.fields.get(near.index())?;
        let far = join.fields.get(far.index())?;
        let target = self.entities.get(r.target.index())?;
        join.links_only(near, far)
            .then(|| (join.name.clone(), target.name.clone()))
    }

    /// The target and the name of its to-one field that points back, of a
    /// one-to-many field.
    pub(super) fn one_to_many(&self, f: &Field) -> Option<(Entity, String)> {
        let r = self.relations.get(f.relation()?.index())?;
        let RelationKind::OneToMany { inverse } = r.kind else {
            return None;
        };
        let child = self.entities.get(r.target.index())?;
        let via = child.fields.get(inverse.index())?;
        Some((child.clone(), via.name.clone()))
    }
}

/// The derived input type of new rows of the one-to-many field `field` of
/// `entity` (`AuthorBooksInput`).
pub(crate) fn input_name(entity: &str, field: &str) -> String {
    format!("{entity}{}Input", field.to_upper_camel_case())
}

/// The derived input type of the existing rows a create links through the
/// many-to-many field `field` of `entity` (`BookTagsConnect`).
pub(crate) fn connect_name(entity: &str, field: &str) -> String {
    format!("{entity}{}Connect", field.to_upper_camel_case())
}

/// The schema as written plus what nested create added, printed.
pub(super) fn printed(schema: &Schema, added: &Added) -> String {
    if added.inputs.is_empty() && added.fields.is_empty() && added.args.is_empty() {
        return schema.to_string();
    }
    let mut schema = schema.clone();
    for (type_name, v) in &added.fields {
        if let Some(ExtendedType::InputObject(i)) = schema.types.get_mut(type_name.as_str())
            && let Some(def) = input_value_def(v)
        {
            i.make_mut()
                .fields
                .insert(def.name.clone(), Component::new(def));
        }
    }
    for (field, v) in &added.args {
        if let Some(ExtendedType::Object(m)) = schema.types.get_mut("Mutation")
            && let Some(f) = m.make_mut().fields.get_mut(field.as_str())
            && let Some(def) = input_value_def(v)
        {
            f.make_mut().arguments.push(Node::new(def));
        }
    }
    for i in &added.inputs {
        let Ok(name) = Name::new(&i.name) else {
            continue;
        };
        let fields = i
            .fields
            .iter()
            .filter_map(input_value_def)
            .map(|d| (d.name.clone(), Component::new(d)))
            .collect();
        schema.types.insert(
            name.clone(),
            ExtendedType::InputObject(Node::new(apollo_compiler::schema::InputObjectType {
                description: i.description.as_deref().map(Node::from),
                name,
                directives: Default::default(),
                fields,
            })),
        );
    }
    schema.to_string()
}

fn input_value_def(v: &InputValue) -> Option<ast::InputValueDefinition> {
    Some(ast::InputValueDefinition {
        description: v.description.as_deref().map(Node::from),
        name: Name::new(&v.name).ok()?,
        ty: Node::new(ast_type(&v.ty)?),
        default_value: None,
        directives: Default::default(),
    })
}

fn ast_type(t: &TypeRef) -> Option<Type> {
    Some(match t {
        TypeRef::Named(n) => Type::Named(Name::new(n).ok()?),
        TypeRef::List(item) => Type::List(Box::new(ast_type(item)?)),
        TypeRef::NonNull(inner) => match inner.as_ref() {
            TypeRef::Named(n) => Type::NonNullNamed(Name::new(n).ok()?),
            TypeRef::List(item) => Type::NonNullList(Box::new(ast_type(item)?)),
            TypeRef::NonNull(_) => return None,
        },
    })
}
