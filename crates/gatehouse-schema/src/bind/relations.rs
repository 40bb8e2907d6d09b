//! Relations: a to-one field stores the target's id; a to-many field is the
//! inverse of a to-one field of its target, or with `@relation(through:)`
//! lists the target's rows linked by rows of a join type. The first pass leaves each
//! to-many field a placeholder; the second, run once every entity's fields
//! are known, finds the to-one field it inverts and binds its arguments.
//! A count field (`booksCount: Int!` beside `books`) is bound to the
//! relation of the field it counts, in the same pass.

use apollo_compiler::Node;
use apollo_compiler::ast::{FieldDefinition, InputValueDefinition};
use apollo_compiler::parser::SourceSpan;
use apollo_compiler::schema::{ExtendedType, ObjectType};
use heck::{ToKebabCase, ToLowerCamelCase, ToUpperCamelCase};

use super::{Binder, ListShape, input_value};
use crate::model::*;

/// A to-many field before its inverse is known: its relation's inverse
/// unset, no list binding yet.
pub(super) fn to_many_placeholder(
    field: &Node<FieldDefinition>,
    list: ListShape,
    relation: RelationId,
) -> FieldKind {
    FieldKind::ToMany {
        relation,
        rest_segment: field.name.as_str().to_kebab_case(),
        items_required: list
            == ListShape::List {
                items_required: true,
            },
        list: ListBinding::default(),
        args: field.arguments.iter().map(|a| input_value(a)).collect(),
    }
}

/// `booksCount: Int!` (or `Int`) beside a to-many field `books` of the same
/// type: a count, its relation and arguments bound in pass 2. `None` for
/// every other field, which binds by its type as before.
pub(super) fn count_placeholder(
    schema: &apollo_compiler::Schema,
    entity: &str,
    field: &Node<FieldDefinition>,
) -> Option<FieldKind> {
    let counted = field.name.as_str().strip_suffix(COUNT_SUFFIX)?;
    if counted.is_empty() || field.ty.is_list() || field.ty.inner_named_type() != "Int" {
        return None;
    }
    let Some(ExtendedType::Object(obj)) = schema.types.get(entity) else {
        return None;
    };
    let to_many = obj.fields.get(counted)?;
    let target_is_object = matches!(
        schema.types.get(to_many.ty.inner_named_type()),
        Some(ExtendedType::Object(_))
    );
    if !to_many.ty.is_list() || !target_is_object {
        return None;
    }
    Some(FieldKind::Count {
        relation: RelationId::from_index(usize::MAX),
        list: ListBinding::default(),
        args: field.arguments.iter().map(|a| input_value(a)).collect(),
    })
}

impl Binder<'_> {
    /// Binds each count field of entity `index` to the relation of the
    /// to-many field it counts, and its filter arguments.
    pub(super) fn bind_counts(&mut self, index: usize, obj: &Node<ObjectType>) {
        let name = self.entities[index].name.clone();
        let counts: Vec<(usize, String)> = self.entities[index]
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| matches!(f.kind, FieldKind::Count { .. }))
            .map(|(i, f)| (i, f.name.clone()))
            .collect();
        for (fi, fname) in counts {
            let counted = fname.strip_suffix(COUNT_SUFFIX).unwrap_or_default();
            let entity = &self.entities[index];
            // A to-many field that failed to bind has its own diagnostic.
            let Some(relation) = entity.field(counted).and_then(|f| match f.kind {
                FieldKind::ToMany { relation, .. } => Some(relation),
                _ => None,
            }) else {
                continue;
            };
            let Some(target) = self
                .relations
                .get(relation.index())
                .and_then(|r| self.entities.get(r.target.index()))
                .map(|t| t.name.clone())
            else {
                continue;
            };
            let Some(def) = obj.fields.get(fname.as_str()) else {
                continue;
            };
            let args: Vec<&Node<InputValueDefinition>> = def.arguments.iter().collect();
            let list = self.bind_count_args(&target, &args, &format!("{name}.{fname}"));
            if let FieldKind::Count {
                relation: r,
                list: l,
                ..
            } = &mut self.entities[index].fields[fi].kind
            {
                *r = relation;
                *l = list;
            }
        }
    }

    /// Resolves to-many inverses and binds their arguments.
    pub(super) fn entity_pass2(&mut self, index: usize, obj: &Node<ObjectType>) {
        let name = self.entities[index].name.clone();
        let owner_id = EntityId::from_index(index);
        let to_many: Vec<(usize, String, RelationId)> = self.entities[index]
            .fields
            .iter()
            .enumerate()
            .filter_map(|(i, f)| match &f.kind {
                FieldKind::ToMany { relation, .. } => Some((i, f.name.clone(), *relation)),
                _ => None,
            })
            .collect();
        for (fi, fname, relation_id) in to_many {
            let Some(def) = obj.fields.get(fname.as_str()) else {
                continue;
            };
            let loc = def.location();
            let target_id = self.relations[relation_id.index()].target;
            let Some(target_entity) = self.entities.get(target_id.index()) else {
                continue;
            };
            let target = target_entity.name.clone();
            let candidates: Vec<String> = target_entity
                .fields
                .iter()
                .filter(|f| {
                    matches!(f.kind, FieldKind::ToOne { relation }
                        if self.relations[relation.index()].target == owner_id)
                })
                .map(|f| f.name.clone())
                .collect();
            let relation = (name.as_str(), fname.as_str(), target.as_str());
            let directive = def.directives.get("relation");
            let arg = |a: &str| {
                directive
                    .and_then(|d| d.specified_argument_by_name(a))
                    .and_then(|v| v.as_str())
            };
            let (named, through) = (arg("field"), arg("through"));
            let args: Vec<&Node<InputValueDefinition>> = def.arguments.iter().collect();
            let owner = format!("{name}.{fname}");
            if let Some(through) = through {
                let ends = (owner_id, target_id);
                if let Some(kind) = self.bind_through(relation, ends, through, named, loc) {
                    self.relations[relation_id.index()].kind = kind;
                }
                let list = self.bind_list_args(&target, &args, &owner);
                if let FieldKind::ToMany { list: l, .. } = &mut self.entities[index].fields[fi].kind
                {
                    *l = list;
                }
                continue;
            }
            let via = match named {
                Some(named) => self.named_inverse(relation, named, &candidates, loc),
                None => self.implied_inverse(relation, &candidates, loc),
            };
            let list = self.bind_list_args(&target, &args, &owner);
            let inverse = via.and_then(|via| {
                let target_entity = self.entities.get(target_id.index())?;
                let i = target_entity.fields.iter().position(|f| f.name == via)?;
                Some(FieldId::new(target_id, i))
            });
            if let Some(inverse) = inverse {
                self.relations[relation_id.index()].kind = RelationKind::OneToMany { inverse };
            }
            if let FieldKind::ToMany { list: l, .. } = &mut self.entities[index].fields[fi].kind {
                *l = list;
            }
        }
    }

    /// `@relation(through: "BookTag")` on `Book.tags: [Tag!]!`: the join
    /// type is a third stored type with exactly one to-one field of the
    /// owner's type (`near`; `field:` names it where several could match,
    /// as on a self relation) and exactly one other of the target's type
    /// (`far`).
    fn bind_through(
        &mut self,
        (name, fname, target): (&str, &str, &str),
        (owner_id, target_id): (EntityId, EntityId),
        through: &str,
        named: Option<&str>,
        loc: Option<SourceSpan>,
    ) -> Option<RelationKind> {
        let at = format!("`@relation(through: \"{through}\")` on `{name}.{fname}`");
        let join_name = if through == name || through == target {
            format!("{name}{}", fname.to_upper_camel_case())
        } else {
            through.to_string()
        };
        let sketch = format!(
            "`type {join_name} {{ id: ID! {}: {name}! {}: {target}! }}`",
            name.to_lower_camel_case(),
            if name == target {
                format!("other{target}")
            } else {
                target.to_lower_camel_case()
            }
        );
        let Some(&join_id) = self.entity_ids.get(through) else {
            self.error(
                loc,
                format!("{at}: there is no stored type `{through}`"),
                Some(format!("declare the join type, e.g. {sketch}")),
            );
            return None;
        };
        if join_id == owner_id || join_id == target_id {
            self.error(
                loc,
                format!("{at}: the join type must be a third type, not `{through}` itself"),
                Some(format!(
                    "declare a join type of its own, e.g. {sketch}; a list of `{target}` without a join type is the inverse of a to-one field (`@relation(field:)`)"
                )),
            );
            return None;
        }
        let join = self.entities.get(join_id.index())?;
        let pointing_at = |t: EntityId| -> Vec<(usize, String)> {
            join.fields
                .iter()
                .enumerate()
                .filter(|(_, f)| {
                    matches!(f.kind, FieldKind::ToOne { relation }
                    if self.relations.get(relation.index()).is_some_and(|r| r.target == t))
                })
                .map(|(i, f)| (i, f.name.clone()))
                .collect()
        };
        let near_all = pointing_at(owner_id);
        let far_all = pointing_at(target_id);
        let names = |c: &[(usize, String)]| {
            c.iter()
                .map(|(_, n)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let near = match (named, near_all.as_slice()) {
            (Some(n), all) => match all.iter().find(|(_, f)| f == n) {
                Some(found) => found.clone(),
                None => {
                    self.error(
                        loc,
                        format!("{at}: `{through}.{n}` is not a to-one field of type `{name}`"),
                        Some(if all.is_empty() {
                            format!(
                                "add a field like `{}: {name}!` to `{through}`",
                                name.to_lower_camel_case()
                            )
                        } else {
                            format!(
                                "to-one fields of `{through}` of type `{name}`: {}",
                                names(all)
                            )
                        }),
                    );
                    return None;
                }
            },
            (None, [one]) => one.clone(),
            (None, []) => {
                self.error(
                    loc,
                    format!("{at}: `{through}` has no to-one field of type `{name}`"),
                    Some(format!(
                        "add a field like `{}: {name}!` to `{through}`, e.g. {sketch}",
                        name.to_lower_camel_case()
                    )),
                );
                return None;
            }
            (None, [first, ..]) => {
                self.error(
                    loc,
                    format!(
                        "{at} is ambiguous: `{through}` has several to-one fields of type `{name}` ({})",
                        names(&near_all)
                    ),
                    Some(format!(
                        "name the one that points at this `{name}`: `@relation(through: \"{through}\", field: \"{}\")`",
                        first.1
                    )),
                );
                return None;
            }
        };
        let far: Vec<(usize, String)> = far_all.into_iter().filter(|f| f.0 != near.0).collect();
        let far = match far.as_slice() {
            [one] => one.clone(),
            [] => {
                self.error(
                    loc,
                    format!(
                        "{at}: `{name}.{fname}` lists `{target}`, but `{through}` has no {}to-one field of type `{target}`",
                        if name == target { "other " } else { "" }
                    ),
                    Some(format!(
                        "add a field like `{}: {target}!` to `{through}`, or list the type `{through}` links to",
                        target.to_lower_camel_case()
                    )),
                );
                return None;
            }
            several => {
                self.error(
                    loc,
                    format!(
                        "{at}: `{through}` has several to-one fields of type `{target}` ({})",
                        names(several)
                    ),
                    Some(format!(
                        "a join row links one `{name}` to one `{target}`: keep one to-one field of each type in `{through}`"
                    )),
                );
                return None;
            }
        };
        Some(RelationKind::ManyToMany {
            through: join_id,
            near: FieldId::new(join_id, near.0),
            far: FieldId::new(join_id, far.0),
        })
    }

    /// The inverse named by `@relation(field:)`: one of `candidates`, the
    /// to-one fields of the target whose type is the owner.
    fn named_inverse(
        &mut self,
        (name, fname, target): (&str, &str, &str),
        named: &str,
        candidates: &[String],
        loc: Option<SourceSpan>,
    ) -> Option<String> {
        if candidates.iter().any(|c| c == named) {
            return Some(named.to_string());
        }
        let exists = self
            .entity_named(target)
            .is_some_and(|e| e.field(named).is_some());
        let found = if exists {
            format!("`{target}.{named}` is not a to-one field of type `{name}`")
        } else {
            format!("`{target}` has no field `{named}`")
        };
        self.error(
            loc,
            format!("`@relation(field: \"{named}\")` on `{name}.{fname}`: {found}"),
            Some(inverse_hint(name, target, candidates)),
        );
        None
    }

    /// A type that is only a page of another type's rows with their count
    /// (`type Feed { id: ID! links: [Link!]! count: Int! }`, as tutorials
    /// write it for resolvers of their own): its list field and the listed
    /// type. Such a type is no stored collection; the diagnostics that meet
    /// it say what to write instead.
    pub(super) fn page_wrapper(&self, name: &str) -> Option<(String, String)> {
        let e = self.entity_named(name)?;
        let mut lists = e
            .fields
            .iter()
            .filter(|f| matches!(f.kind, FieldKind::ToMany { .. }));
        let (list, None) = (lists.next()?, lists.next()) else {
            return None;
        };
        let rest: Vec<&Field> = e
            .fields
            .iter()
            .filter(|f| !matches!(f.kind, FieldKind::Id | FieldKind::ToMany { .. }))
            .collect();
        let all_ints = rest.iter().all(|f| {
            matches!(
                f.kind,
                FieldKind::Value {
                    ty: ValueType::Scalar(Scalar::Int),
                    list: None
                }
            )
        });
        if rest.is_empty() || !all_ints {
            return None;
        }
        let target = self.target_of(list)?.name.clone();
        Some((list.name.clone(), target))
    }

    /// The inverse without `@relation`: the target's one to-one field of the
    /// owner's type; none or several is an error.
    fn implied_inverse(
        &mut self,
        (name, fname, target): (&str, &str, &str),
        candidates: &[String],
        loc: Option<SourceSpan>,
    ) -> Option<String> {
        match candidates {
            [one] => Some(one.clone()),
            [] if self.page_wrapper(name).is_some() => {
                self.error(
                    loc,
                    format!(
                        "`{name}.{fname}` lists `{target}`, but `{name}` is only a page of `{target}` rows with their count, which is no stored type"
                    ),
                    Some(format!(
                        "remove `{name}`: return `[{target}!]!` where it was returned and declare a count beside that field (`feedCount: Int!` beside `feed`)"
                    )),
                );
                None
            }
            [] => {
                self.error(
                    loc,
                    format!(
                        "`{name}.{fname}` lists `{target}`, but `{target}` has no to-one field of type `{name}` to be its inverse"
                    ),
                    Some(format!(
                        "add a field like `{}: {name}` to `{target}`, or link the two through a join type: `{fname}: [{target}!]! @relation(through: \"{name}{}\"{})` with `type {name}{} {{ id: ID! {}: {name}! {}: {target}! }}`",
                        name.to_lower_camel_case(),
                        fname.to_upper_camel_case(),
                        if name == target {
                            format!(", field: \"{}\"", name.to_lower_camel_case())
                        } else {
                            String::new()
                        },
                        fname.to_upper_camel_case(),
                        name.to_lower_camel_case(),
                        if name == target { format!("other{target}") } else { target.to_lower_camel_case() },
                    )),
                );
                None
            }
            many => {
                self.error(
                    loc,
                    format!(
                        "`{name}.{fname}` is ambiguous: `{target}` has several fields of type `{name}` ({})",
                        many.join(", ")
                    ),
                    Some(format!(
                        "name the inverse with `@relation(field: \"{}\")`",
                        many[0]
                    )),
                );
                None
            }
        }
    }
}

fn inverse_hint(owner: &str, target: &str, candidates: &[String]) -> String {
    if candidates.is_empty() {
        format!("add a to-one field of type `{owner}` to `{target}` and name it here")
    } else {
        format!(
            "to-one fields of `{target}` of type `{owner}`: {}",
            candidates.join(", ")
        )
    }
}
