//! Arguments: what a list field's count, offset, filter, `where` and
//! `orderBy` arguments bind to, and which fields a create or update input
//! sets. `where` inputs and `orderBy` enums are checked once per type and
//! bound to one entity, so one type cannot filter or order two entities.

use apollo_compiler::Node;
use apollo_compiler::ast::{InputValueDefinition, Type};
use apollo_compiler::parser::SourceSpan;
use apollo_compiler::schema::{EnumType, ExtendedType, InputObjectType};

use super::{Binder, type_ref};
use crate::model::*;

pub(super) const COUNT_ARGS: [&str; 4] = ["first", "limit", "count", "take"];
pub(super) const OFFSET_ARGS: [&str; 2] = ["offset", "skip"];

/// An argument, or a `where` input field, as written: what filter
/// diagnostics name.
struct ArgSite<'x> {
    name: &'x str,
    ty: &'x Type,
    owner: &'x str,
    /// "argument", or "field" inside a `where` input.
    noun: &'static str,
}

/// The types checked once and bound to one entity.
#[derive(Debug, Clone, Copy)]
enum Checked {
    /// `where` inputs.
    Where,
    /// `orderBy` enums.
    Order,
}

/// A create or update input being bound: what its diagnostics name.
struct WriteSite<'x> {
    entity: &'x Entity,
    owner: &'x str,
    /// The input object, or the field whose arguments are the values.
    where_: String,
    create: bool,
}

impl Binder<'_> {
    /// Count, offset, filters, `where` and `orderBy` of a list field.
    pub(super) fn bind_list_args(
        &mut self,
        entity: &str,
        args: &[&Node<InputValueDefinition>],
        owner: &str,
    ) -> ListBinding {
        let mut list = ListBinding::default();
        for arg in args {
            let aname = arg.name.as_str();
            let loc = arg.location();
            if COUNT_ARGS.contains(&aname) || OFFSET_ARGS.contains(&aname) {
                self.bind_paging_arg(&mut list, arg, owner);
            } else if aname == "where" {
                list.where_arg = self.bind_where_arg(entity, arg, owner);
            } else if aname == "orderBy" {
                list.order_by = self.bind_order_arg(entity, arg, owner);
            } else if let Some(f) = self.bind_filter(entity, aname, &arg.ty, loc, owner) {
                list.filters.push(f);
            }
        }
        list
    }

    /// The arguments of a count (`booksCount` at the root or beside a
    /// to-many field): filters and `where`, as the list's; paging and
    /// order mean nothing to a count and are errors.
    pub(super) fn bind_count_args(
        &mut self,
        entity: &str,
        args: &[&Node<InputValueDefinition>],
        owner: &str,
    ) -> ListBinding {
        let mut kept = Vec::with_capacity(args.len());
        for arg in args {
            let aname = arg.name.as_str();
            if COUNT_ARGS.contains(&aname) || OFFSET_ARGS.contains(&aname) || aname == "orderBy" {
                self.error(
                    arg.location(),
                    format!("`{owner}` is a count and cannot take `{aname}`"),
                    Some("a count takes the list's filters and `where`; it counts every matching row whatever the page size".into()),
                );
            } else {
                kept.push(*arg);
            }
        }
        self.bind_list_args(entity, &kept, owner)
    }

    /// A count or offset argument: an `Int`, at most one of each per field.
    fn bind_paging_arg(
        &mut self,
        list: &mut ListBinding,
        arg: &Node<InputValueDefinition>,
        owner: &str,
    ) {
        let aname = arg.name.as_str();
        let loc = arg.location();
        let is_count = COUNT_ARGS.contains(&aname);
        let what = if is_count { "count" } else { "offset" };
        if arg.ty.inner_named_type() != "Int" || arg.ty.is_list() {
            self.error(
                loc,
                format!(
                    "argument `{aname}` of `{owner}` is the {what} and must be `Int`, found `{}`",
                    arg.ty
                ),
                Some(format!("declare it `{aname}: Int`")),
            );
            return;
        }
        let slot = if is_count {
            &mut list.count
        } else {
            &mut list.offset
        };
        if let Some(prev) = slot.replace(aname.to_string()) {
            self.error(
                loc,
                format!("`{owner}` has two {what} arguments, `{prev}` and `{aname}`"),
                Some("keep one".into()),
            );
        }
    }

    /// Binds an argument (or `where` input field) named `<field><suffix>`.
    pub(super) fn bind_filter(
        &mut self,
        entity: &str,
        name: &str,
        ty: &Type,
        loc: Option<SourceSpan>,
        owner: &str,
    ) -> Option<Filter> {
        let e = self.entity_named(entity)?;
        let parsed = parse_filter_name(e, name);
        // Inside a `where` input the names are input fields, not arguments.
        let in_input = owner.starts_with("input ");
        let noun = if in_input { "field" } else { "argument" };
        let Some((field, op)) = parsed else {
            let fields = stored_field_names(e);
            let lead = if in_input {
                "fields of a `where` input are `AND`, `OR`, `NOT`, a to-many field with `_some`, `_every` or `_none`, or"
            } else {
                "arguments are a count (first|limit|count|take), an offset (offset|skip), `where`, `orderBy`, or"
            };
            self.error(
                loc,
                format!("{noun} `{name}` of `{owner}` binds to nothing"),
                Some(format!(
                    "{lead} a field of `{entity}` ({fields}) with an optional operator suffix ({})",
                    FilterOp::suffix_list()
                )),
            );
            return None;
        };
        let f = e.field(&field)?;
        let tname = f.filter_type()?.graphql_name().to_string();
        let site = ArgSite {
            name,
            ty,
            owner,
            noun,
        };
        if let Some((message, hint)) = filter_problem(&site, entity, f, op, &tname) {
            self.error(loc, message, Some(hint));
            return None;
        }
        Some(Filter {
            arg: name.to_string(),
            field,
            op,
        })
    }

    /// A `where` argument: an input object bound to `entity`.
    pub(super) fn bind_where_arg(
        &mut self,
        entity: &str,
        arg: &Node<InputValueDefinition>,
        owner: &str,
    ) -> Option<ArgOfType> {
        let tname = arg.ty.inner_named_type().to_string();
        let def = self.schema.types.get(tname.as_str());
        if !def.is_some_and(ExtendedType::is_input_object) || arg.ty.is_list() {
            self.error(
                arg.location(),
                format!("argument `where` of `{owner}` must be an input object, found `{}`", arg.ty),
                Some(format!("declare `input {entity}Where {{ ... }}` with fields named after `{entity}`'s fields, plus AND/OR/NOT")),
            );
            return None;
        }
        self.bind_where_input(&tname, entity, arg.location(), owner)
            .then(|| ArgOfType {
                arg: arg.name.to_string(),
                type_name: tname,
            })
    }

    /// Whether a `where` input or `orderBy` enum checked before may serve
    /// `entity`: `Some(true)` when it was bound to it, `Some(false)` when it
    /// was refused or bound to another entity (reported here); `None` when
    /// it is not checked yet.
    fn checked_before(
        &mut self,
        checked: Checked,
        tname: &str,
        entity: &str,
        loc: Option<SourceSpan>,
        owner: &str,
    ) -> Option<bool> {
        let cache = match checked {
            Checked::Where => &self.checked_where,
            Checked::Order => &self.checked_order,
        };
        let other = match cache.get(tname)? {
            Some(e) if e == entity => return Some(true),
            Some(e) => e.clone(),
            None => return Some(false),
        };
        let (verb, what) = match checked {
            Checked::Where => ("filters", "input"),
            Checked::Order => ("orders", "enum"),
        };
        self.error(
            loc,
            format!("`{owner}` {verb} `{entity}` with `{tname}`, which {verb} `{other}`"),
            Some(format!("declare a separate {what} for `{entity}`")),
        );
        Some(false)
    }

    /// Checks a `where` input for `entity` (once per input type).
    fn bind_where_input(
        &mut self,
        tname: &str,
        entity: &str,
        use_loc: Option<SourceSpan>,
        owner: &str,
    ) -> bool {
        if let Some(reusable) = self.checked_before(Checked::Where, tname, entity, use_loc, owner) {
            return reusable;
        }
        // Provisionally bound, so that an input reaching itself through a
        // relation filter (`CategoryWhere.children_some: CategoryWhere`)
        // ends; a refusal is recorded below.
        self.checked_where
            .insert(tname.to_string(), Some(entity.to_string()));
        let schema = self.schema;
        let Some(ExtendedType::InputObject(input)) = schema.types.get(tname) else {
            self.checked_where.insert(tname.to_string(), None);
            return false;
        };
        let Some(w) = self.where_input(input, entity) else {
            self.checked_where.insert(tname.to_string(), None);
            return false;
        };
        self.checked_where
            .insert(tname.to_string(), Some(entity.to_string()));
        self.where_inputs.push(w);
        true
    }

    /// The fields of a `where` input: `AND`/`OR` lists and `NOT` of the
    /// same input, the rest filters on `entity`. Every field is checked
    /// before the input is refused, so one run reports each problem.
    fn where_input(&mut self, input: &InputObjectType, entity: &str) -> Option<WhereInput> {
        let tname = input.name.as_str();
        let mut w = WhereInput {
            name: tname.to_string(),
            entity: entity.to_string(),
            filters: Vec::new(),
            relations: Vec::new(),
            and: None,
            or: None,
            not: None,
        };
        let mut ok = true;
        let owner = format!("input {tname}");
        for f in input.fields.values() {
            let fname = f.name.as_str();
            let same = f.ty.inner_named_type() == tname;
            match fname {
                "AND" | "OR" => {
                    let good = same && f.ty.is_list() && !f.ty.item_type().is_list();
                    if !good {
                        ok = false;
                        self.error(
                            f.location(),
                            format!("`{tname}.{fname}` must be `[{tname}!]`, found `{}`", f.ty),
                            None,
                        );
                    } else if fname == "AND" {
                        w.and = Some(fname.to_string());
                    } else {
                        w.or = Some(fname.to_string());
                    }
                }
                "NOT" => {
                    if !same || f.ty.is_list() {
                        ok = false;
                        self.error(
                            f.location(),
                            format!("`{tname}.NOT` must be `{tname}`, found `{}`", f.ty),
                            None,
                        );
                    } else {
                        w.not = Some(fname.to_string());
                    }
                }
                _ if self.relation_filter_target(entity, fname).is_some() => {
                    match self.bind_relation_filter(entity, fname, &f.ty, f.location(), &owner) {
                        Some(r) => w.relations.push(r),
                        None => ok = false,
                    }
                }
                _ => match self.bind_filter(entity, fname, &f.ty, f.location(), &owner) {
                    Some(filter) => w.filters.push(filter),
                    None => ok = false,
                },
            }
        }
        ok.then_some(w)
    }

    /// The to-many field, quantifier and target entity that a `where`
    /// input field or policy key named `<toMany>_some|_every|_none` of
    /// `entity` filters through.
    pub(super) fn relation_filter_target(
        &self,
        entity: &str,
        name: &str,
    ) -> Option<(String, Quantifier, String)> {
        let e = self.entity_named(entity)?;
        let (f, q) = Quantifier::parse(e, name)?;
        let target = self.target_of(f)?;
        Some((f.name.clone(), q, target.name.clone()))
    }

    /// A `where` input field filtering through a to-many relation: its
    /// type is a `where` input of the relation's target.
    fn bind_relation_filter(
        &mut self,
        entity: &str,
        name: &str,
        ty: &Type,
        loc: Option<SourceSpan>,
        owner: &str,
    ) -> Option<RelationFilter> {
        let (field, quantifier, target) = self.relation_filter_target(entity, name)?;
        let tname = ty.inner_named_type().to_string();
        let is_input = self
            .schema
            .types
            .get(tname.as_str())
            .is_some_and(ExtendedType::is_input_object);
        if !is_input || ty.is_list() {
            self.error(
                loc,
                format!(
                    "field `{name}` of `{owner}` filters through `{entity}.{field}` and must be a `where` input of `{target}`, found `{ty}`"
                ),
                Some(format!("declare it `{name}: {target}Where`")),
            );
            return None;
        }
        self.bind_where_input(&tname, &target, loc, owner)
            .then(|| RelationFilter {
                arg: name.to_string(),
                field,
                quantifier,
                input: tname,
            })
    }

    /// An `orderBy` argument: an enum (or a list of one) bound to `entity`,
    /// checked once per enum.
    pub(super) fn bind_order_arg(
        &mut self,
        entity: &str,
        arg: &Node<InputValueDefinition>,
        owner: &str,
    ) -> Option<ArgOfType> {
        let tname = arg.ty.inner_named_type().to_string();
        let def = self.schema.types.get(tname.as_str());
        let nested = arg.ty.is_list() && arg.ty.item_type().is_list();
        if !def.is_some_and(ExtendedType::is_enum) || nested {
            self.error(
                arg.location(),
                format!("argument `orderBy` of `{owner}` must be an enum or a list of one, found `{}`", arg.ty),
                Some(format!(
                    "declare `enum {entity}OrderBy {{ {f}_ASC {f}_DESC ... }}` and `orderBy: [{entity}OrderBy!]`",
                    f = self
                        .entity_named(entity)
                        .and_then(|e| e.stored_fields().find(|f| f.is_orderable() && f.name != "id"))
                        .map_or("id", |f| f.name.as_str())
                )),
            );
            return None;
        }
        let bound = ArgOfType {
            arg: arg.name.to_string(),
            type_name: tname.clone(),
        };
        if let Some(reusable) =
            self.checked_before(Checked::Order, &tname, entity, arg.location(), owner)
        {
            return reusable.then_some(bound);
        }
        self.checked_order.insert(tname.clone(), None);
        let schema = self.schema;
        let Some(ExtendedType::Enum(en)) = schema.types.get(tname.as_str()) else {
            return None;
        };
        let values = self.order_values(en, entity)?;
        self.checked_order
            .insert(tname.clone(), Some(entity.to_string()));
        self.order_enums.push(OrderEnum {
            name: tname,
            entity: entity.to_string(),
            values,
        });
        Some(bound)
    }

    /// The values of an `orderBy` enum: each `<field>_ASC` or `<field>_DESC`
    /// of an orderable field of `entity`; every bad value is reported.
    fn order_values(&mut self, en: &EnumType, entity: &str) -> Option<Vec<OrderValue>> {
        let e = self.entity_named(entity)?;
        let mut values = Vec::new();
        let mut problems = Vec::new();
        for v in en.values.values() {
            let value = v.value.as_str();
            let parsed = value
                .strip_suffix("_ASC")
                .map(|f| (f, false))
                .or_else(|| value.strip_suffix("_DESC").map(|f| (f, true)));
            let good = parsed.and_then(|(f, desc)| {
                e.field(f)
                    .filter(|fd| fd.is_orderable())
                    .map(|_| OrderValue {
                        value: value.to_string(),
                        field: f.to_string(),
                        desc,
                    })
            });
            match good {
                Some(ov) => values.push(ov),
                None => problems.push((v.location(), value.to_string())),
            }
        }
        let tname = en.name.as_str();
        let had_problems = !problems.is_empty();
        for (loc, value) in problems {
            self.error(
                loc,
                format!("value `{value}` of the orderBy enum `{tname}` names no sortable field of `{entity}`"),
                Some(format!("values are `<field>_ASC` or `<field>_DESC` for a non-list field of `{entity}`, e.g. `id_ASC`")),
            );
        }
        (!had_problems).then_some(values)
    }

    /// Create/update values: one input object argument, or entity fields as arguments.
    pub(super) fn bind_write_input(
        &mut self,
        entity: &Entity,
        args: &[&Node<InputValueDefinition>],
        owner: &str,
        create: bool,
        loc: Option<SourceSpan>,
    ) -> Option<WriteInput> {
        let schema = self.schema;
        let object = match args {
            [a] => match schema.types.get(a.ty.inner_named_type()) {
                Some(ExtendedType::InputObject(i)) if !a.ty.is_list() => Some((a, i)),
                _ => None,
            },
            _ => None,
        };
        type Located<'n> = (&'n Node<InputValueDefinition>, Option<SourceSpan>);
        let (values, where_): (Vec<Located>, String) = match &object {
            Some((a, input)) => (
                input
                    .fields
                    .values()
                    .map(|f| (&f.node, f.location()))
                    .collect(),
                format!("input `{}`", a.ty.inner_named_type()),
            ),
            None => (
                args.iter().map(|a| (*a, a.location())).collect(),
                format!("`{owner}`"),
            ),
        };
        let site = WriteSite {
            entity,
            owner,
            where_,
            create,
        };
        let mut ok = true;
        let mut fields = Vec::new();
        for (v, vloc) in &values {
            ok &= self.write_value(&site, v, *vloc, &mut fields);
        }
        if create {
            let given: Vec<&str> = values.iter().map(|(v, _)| v.name.as_str()).collect();
            ok &= self.required_on_create(&site, &given, &fields, loc);
        }
        if !ok {
            return None;
        }
        Some(match object {
            Some((a, input)) => WriteInput::Object {
                arg: a.name.to_string(),
                type_name: input.name.to_string(),
                fields,
            },
            None => WriteInput::Args { fields },
        })
    }

    /// One value of a create/update input: a field of the entity, of the
    /// type the field takes. Adds it to `fields` when it sets one; `false`
    /// after a diagnostic.
    fn write_value(
        &mut self,
        site: &WriteSite<'_>,
        v: &InputValueDefinition,
        vloc: Option<SourceSpan>,
        fields: &mut Vec<String>,
    ) -> bool {
        let WriteSite {
            entity,
            owner,
            where_,
            create,
        } = site;
        let vname = v.name.as_str();
        let Some(f) = entity.field(vname) else {
            self.error(
                vloc,
                format!("`{vname}` of {where_} is not a field of `{}`", entity.name),
                Some(format!(
                    "{} takes the fields of `{}` by name, or one input object argument",
                    owner, entity.name
                )),
            );
            return false;
        };
        let expect = match &f.kind {
            FieldKind::Count { .. } => {
                self.error(
                    vloc,
                    format!(
                        "`{vname}` of {where_} sets the count `{}.{vname}`",
                        entity.name
                    ),
                    Some("a count is computed; it cannot be set".into()),
                );
                return false;
            }
            FieldKind::ToMany { .. }
                if *create
                    && v.ty.is_list()
                    && !v.ty.item_type().is_list()
                    && matches!(
                        self.schema.types.get(v.ty.inner_named_type()),
                        Some(ExtendedType::InputObject(_))
                    ) =>
            {
                // Nested create: new rows of the relation's target, in a
                // declared input (or the derived one `schema print`
                // writes). The binder adds the value to every create
                // (`nested.rs`) and keeps the declared type.
                return self.nested_input(entity, f, v, vloc, where_);
            }
            FieldKind::ToMany { .. }
                if *create
                    && !v.ty.is_list()
                    && v.ty.inner_named_type().as_str()
                        == super::nested::connect_name(&entity.name, vname)
                    && self.connectable(f).is_some() =>
            {
                // Nested create's links to existing rows (`{connect:
                // [ids]}`), as `schema print` writes it: the binder adds
                // the value to every create (`nested.rs`).
                return true;
            }
            FieldKind::ToMany { relation, .. } => {
                let target = self.target_of(f).map_or(String::new(), |t| t.name.clone());
                let via = match self.relations[relation.index()].kind {
                    RelationKind::OneToMany { inverse } => self
                        .entities
                        .get(inverse.entity.index())
                        .and_then(|t| t.fields.get(inverse.index()))
                        .map_or(String::new(), |v| v.name.clone()),
                    _ => String::new(),
                };
                let hint = if *create && !via.is_empty() {
                    format!(
                        "leave `{vname}` out: every create takes new `{target}` rows in it (nested create, input `{}`); or declare it as a list of an input of `{target}`'s fields without `{via}`. An existing `{target}` is attached by setting `{target}.{via}`",
                        super::nested::input_name(&entity.name, vname)
                    )
                } else {
                    format!("set `{target}.{via}` on each `{target}` instead")
                };
                self.error(
                    vloc,
                    format!(
                        "`{vname}` of {where_} sets the to-many field `{}.{vname}`",
                        entity.name
                    ),
                    Some(hint),
                );
                return false;
            }
            _ if f.is_server_set() => {
                self.error(
                    vloc,
                    format!(
                        "`{vname}` of {where_} sets `{}.{vname}`, which the server sets",
                        entity.name
                    ),
                    Some(format!(
                        "remove `{vname}`: `@createdAt` and `@updatedAt` fields are read-only"
                    )),
                );
                return false;
            }
            FieldKind::Id if !create => {
                self.error(
                    vloc,
                    format!("`id` of {where_}: an update cannot change the id"),
                    None,
                );
                return false;
            }
            _ => f.input_type(),
        };
        let Some(expect) = expect else { return true };
        let required = *create && entity.required_on_create(f);
        let got = type_ref(&v.ty);
        if got.nullable() != &expect {
            self.error(
                vloc,
                format!(
                    "`{vname}` of {where_} has type `{got}`, but `{}.{vname}` takes `{expect}`",
                    entity.name
                ),
                Some(format!(
                    "declare it `{vname}: {expect}{}`",
                    if required { "!" } else { "" }
                )),
            );
            return false;
        }
        if required && !got.is_non_null() {
            self.error(
                vloc,
                format!(
                    "`{vname}` of {where_} must be `{expect}!` because `{}.{vname}` is required",
                    entity.name
                ),
                None,
            );
            return false;
        }
        fields.push(vname.to_string());
        true
    }

    /// A declared input of new children (nested create), the value `v`
    /// of a create of `entity` for its to-many field `f`: the input's
    /// fields bind to the child type's fields by name as a create input's
    /// do, and the to-one field that points back to the new row may not
    /// appear (the store sets it). Each input is checked once per relation
    /// (an input that nests itself ends). `false` after a diagnostic.
    fn nested_input(
        &mut self,
        entity: &Entity,
        f: &Field,
        v: &InputValueDefinition,
        vloc: Option<SourceSpan>,
        where_: &str,
    ) -> bool {
        let vname = v.name.as_str();
        let type_name = v.ty.inner_named_type().as_str();
        let Some(ExtendedType::InputObject(input)) = self.schema.types.get(type_name) else {
            return false;
        };
        let Some((child, via)) = self.one_to_many(f) else {
            let target = self.target_of(f).map_or(String::new(), |t| t.name.clone());
            self.error(
                vloc,
                format!(
                    "`{vname}` of {where_} creates `{target}` rows through `{}.{vname}`, which is not a one-to-many relation",
                    entity.name
                ),
                Some(format!(
                    "nested create makes rows of one-to-many relations; write the join rows of `{}.{vname}` through their own type",
                    entity.name
                )),
            );
            return false;
        };
        let key = (type_name.to_string(), child.name.clone(), via.clone());
        if let Some(ok) = self.checked_nested.get(&key) {
            return *ok;
        }
        // Provisionally good: an input that nests itself (a tree) ends here.
        self.checked_nested.insert(key.clone(), true);
        let owner = format!("`{}.{vname}`", entity.name);
        let site = WriteSite {
            entity: &child,
            owner: &owner,
            where_: format!("input `{type_name}`"),
            create: true,
        };
        let mut ok = true;
        let mut fields = Vec::new();
        let values: Vec<(&Node<InputValueDefinition>, Option<SourceSpan>)> = input
            .fields
            .values()
            .map(|c| (&c.node, c.location()))
            .collect();
        for (cv, cloc) in &values {
            if cv.name.as_str() == via {
                ok = false;
                self.error(
                    *cloc,
                    format!(
                        "`{via}` of input `{type_name}` points back to the new `{}`: nested create sets it",
                        entity.name
                    ),
                    Some(format!(
                        "remove `{via}` from `{type_name}`: each new `{}` of `{}.{vname}` gets the new `{}`",
                        child.name, entity.name, entity.name
                    )),
                );
                continue;
            }
            ok &= self.write_value(&site, cv, *cloc, &mut fields);
        }
        let mut given: Vec<&str> = values.iter().map(|(cv, _)| cv.name.as_str()).collect();
        given.push(via.as_str());
        ok &= self.required_on_create(&site, &given, &fields, input.location());
        self.checked_nested.insert(key, ok);
        ok
    }

    /// A create must be able to set every field required on create; `false`
    /// after a diagnostic for each one it cannot.
    fn required_on_create(
        &mut self,
        site: &WriteSite<'_>,
        given: &[&str],
        fields: &[String],
        loc: Option<SourceSpan>,
    ) -> bool {
        let entity = site.entity;
        let mut ok = true;
        for f in entity.stored_fields() {
            if entity.required_on_create(f)
                && !fields.contains(&f.name)
                && given.iter().all(|v| *v != f.name.as_str())
            {
                ok = false;
                let expect = match f.kind {
                    FieldKind::ToOne { .. } => "ID".to_string(),
                    _ => f.ty.nullable().to_string(),
                };
                self.error(
                    loc,
                    format!(
                        "{} cannot set the required field `{}.{}`",
                        site.where_, entity.name, f.name
                    ),
                    Some(created_hint(entity, f, &expect)),
                );
            }
        }
        ok
    }
}

/// What to do about a required field a create cannot set: add it, or for a
/// time the server sets, say so on the field.
fn created_hint(entity: &Entity, f: &Field, expect: &str) -> String {
    let add = format!("add `{}: {expect}!`", f.name);
    match f.kind {
        FieldKind::Value {
            ty: ValueType::Scalar(Scalar::DateTime),
            list: None,
        } => format!(
            "{add}, or if the server sets it, declare `{}.{}: DateTime! @createdAt` (or `@updatedAt`)",
            entity.name, f.name
        ),
        _ => add,
    }
}

/// Why a filter argument cannot bind to `f` with `op`, as (message, hint);
/// `tname` is the type the field's filters compare with.
fn filter_problem(
    site: &ArgSite<'_>,
    entity: &str,
    f: &Field,
    op: FilterOp,
    tname: &str,
) -> Option<(String, String)> {
    let ArgSite {
        name,
        ty,
        owner,
        noun,
    } = site;
    let field = f.name.as_str();
    let fdesc = format!("`{entity}.{field}`");
    let arg_base = ty.inner_named_type().as_str();
    // Whether the operator applies is the Model's rule; the argument's
    // declared type is checked here, before the operator, so that the
    // first problem named is the one the user wrote.
    let refusal = f.check_filter_op(op).err();
    match op {
        FilterOp::IsNull => (arg_base != "Boolean" || ty.is_list()).then(|| {
            (
                format!("{noun} `{name}` of `{owner}` must be `Boolean`, found `{ty}`"),
                format!("declare it `{name}: Boolean`"),
            )
        }),
        _ if refusal == Some(OpRefusal::ListField) => Some((
            format!(
                "operator `{}` does not apply to the list field {fdesc}",
                op.label()
            ),
            format!("list fields take `{field}_contains: {tname}` and `{field}_is_null: Boolean`"),
        )),
        FilterOp::In | FilterOp::NotIn => {
            let ok = matches!(ty.item_type(), t if ty.is_list() && !t.is_list() && t.inner_named_type() == tname);
            (!ok).then(|| {
                (
                    format!("{noun} `{name}` of `{owner}` must be a list of `{tname}` like {fdesc}, found `{ty}`"),
                    format!("declare it `{name}: [{tname}!]`"),
                )
            })
        }
        _ if ty.is_list() || arg_base != tname => Some((
            format!("{noun} `{name}` of `{owner}` has type `{ty}`, but {fdesc} is `{tname}`"),
            format!("declare it `{name}: {tname}`"),
        )),
        _ => match refusal {
            Some(OpRefusal::NotOrdered) => Some((
                format!(
                    "operator `{}` needs an ordered field, but {fdesc} is `{tname}`",
                    op.label()
                ),
                format!("ordered types are {}", ordered_types()),
            )),
            Some(OpRefusal::NotTaken) => Some((
                format!(
                    "operator `{}` does not apply to {fdesc} (`{tname}`)",
                    op.label()
                ),
                format!(
                    "{fdesc} takes: {}",
                    f.filter_ops()
                        .iter()
                        .map(|o| o.label())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
            Some(_) => Some((
                format!(
                    "operator `{}` needs a String or ID field, but {fdesc} is `{tname}`",
                    op.label()
                ),
                "text operators apply to String and ID fields".into(),
            )),
            None => None,
        },
    }
}

/// The scalars `_lt` applies to, for hints: from the scalar table.
fn ordered_types() -> String {
    Scalar::ALL
        .iter()
        .filter(|s| s.info().ops.contains(&FilterOp::Lt))
        .map(|s| s.graphql_name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `<field>` or `<field><suffix>` for a stored field of `entity`: the field
/// and the operator. `where` inputs, filter arguments and `@policy` rules
/// all name filters this way.
pub(super) fn parse_filter_name(entity: &Entity, name: &str) -> Option<(String, FilterOp)> {
    if entity.field(name).is_some_and(Field::is_stored) {
        return Some((name.to_string(), FilterOp::Eq));
    }
    FilterOp::SUFFIXED.iter().find_map(|(suffix, op)| {
        let base = name.strip_suffix(suffix)?;
        entity
            .field(base)
            .filter(|f| f.is_stored())
            .map(|_| (base.to_string(), *op))
    })
}

/// The stored fields of `entity`, as a filter that binds to nothing lists
/// them.
pub(super) fn stored_field_names(entity: &Entity) -> String {
    let fields: Vec<&str> = entity.stored_fields().map(|f| f.name.as_str()).collect();
    fields.join(", ")
}
