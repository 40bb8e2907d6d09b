//! Per-request batching of relation loads: every to-one and to-many field of
//! one level is loaded with one store call per relation (and argument set),
//! never one per row.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use async_graphql::dataloader::Loader;
use gatehouse_schema::{EntityId, RelationId};
use gatehouse_store::{
    AccessContext, EntityStore, Filter, ListQuery, Row, Store, StoreError, WriteTxn,
};

/// Loads rows from the store in batches.
#[derive(Debug, Clone)]
pub struct StoreLoader {
    pub(crate) store: Store,
    /// The request's caller: a loader serves one request.
    pub(crate) access: AccessContext,
    /// A mutation request's transaction: its reads see its writes.
    pub(crate) txn: Option<WriteTxn>,
}

impl StoreLoader {
    /// The rows of `entity`, in the request's transaction if it has one.
    fn entity_at(&self, entity: EntityId) -> EntityStore {
        match &self.txn {
            Some(t) => t.entity_at(entity),
            None => self.store.entity_at(entity),
        }
    }
}

/// A to-one load: the row `id` of `entity`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OneKey {
    pub entity: EntityId,
    pub id: String,
}

/// What a to-many field lists: the rows of `target` its `relation` gives
/// the parent (children through the inverse, or rows linked by join rows).
#[derive(Debug)]
pub struct ChildSpec {
    /// Identity of (target, relation, query) used to group keys into one load.
    pub sig: String,
    pub target: EntityId,
    pub relation: RelationId,
    pub query: ListQuery,
}

/// A load for one parent: what to load (`spec`: a to-many list or a count)
/// and whose. Keys with the same spec signature are batched into one load.
#[derive(Debug)]
pub struct ParentKey<S> {
    pub spec: Arc<S>,
    pub parent: String,
}

/// A to-many load for one parent.
pub type ManyKey = ParentKey<ChildSpec>;
/// A count load for one parent.
pub type CountKey = ParentKey<CountSpec>;

/// A spec's identity for batching: the keys of one signature load together.
pub trait Signature {
    /// Identity of the spec (target, relation, and the query or filter).
    fn signature(&self) -> &str;
}

impl Signature for ChildSpec {
    fn signature(&self) -> &str {
        &self.sig
    }
}

impl Signature for CountSpec {
    fn signature(&self) -> &str {
        &self.sig
    }
}

impl<S> Clone for ParentKey<S> {
    fn clone(&self) -> Self {
        ParentKey {
            spec: self.spec.clone(),
            parent: self.parent.clone(),
        }
    }
}

impl<S: Signature> PartialEq for ParentKey<S> {
    fn eq(&self, other: &Self) -> bool {
        self.spec.signature() == other.spec.signature() && self.parent == other.parent
    }
}

impl<S: Signature> Eq for ParentKey<S> {}

impl<S: Signature> Hash for ParentKey<S> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.spec.signature().hash(state);
        self.parent.hash(state);
    }
}

/// What a count field counts: the rows of `target` its `relation` gives
/// the parent that match `filter`.
#[derive(Debug)]
pub struct CountSpec {
    /// Identity of (target, relation, filter) used to group keys into one load.
    pub sig: String,
    pub target: EntityId,
    pub relation: RelationId,
    pub filter: Option<Filter>,
}

impl Loader<CountKey> for StoreLoader {
    type Value = u64;
    type Error = Arc<StoreError>;

    /// One grouped count per (relation, filter), whatever the number of
    /// parents.
    async fn load(&self, keys: &[CountKey]) -> Result<HashMap<CountKey, u64>, Self::Error> {
        let mut groups: HashMap<&str, (Arc<CountSpec>, Vec<String>)> = HashMap::new();
        for k in keys {
            groups
                .entry(k.spec.sig.as_str())
                .or_insert_with(|| (k.spec.clone(), Vec::new()))
                .1
                .push(k.parent.clone());
        }
        let mut out = HashMap::new();
        for (_, (spec, parents)) in groups {
            let counts = self
                .entity_at(spec.target)
                .count_related(&self.access, spec.relation, &parents, spec.filter.as_ref())
                .await
                .map_err(Arc::new)?;
            for parent in parents {
                let n = counts.get(&parent).copied().unwrap_or(0);
                out.insert(
                    CountKey {
                        spec: spec.clone(),
                        parent,
                    },
                    n,
                );
            }
        }
        Ok(out)
    }
}

impl Loader<OneKey> for StoreLoader {
    type Value = Row;
    type Error = Arc<StoreError>;

    async fn load(&self, keys: &[OneKey]) -> Result<HashMap<OneKey, Row>, Self::Error> {
        let mut by_entity: HashMap<EntityId, Vec<String>> = HashMap::new();
        for k in keys {
            by_entity.entry(k.entity).or_default().push(k.id.clone());
        }
        let mut out = HashMap::new();
        for (entity, ids) in by_entity {
            let rows = self
                .entity_at(entity)
                .get_many(&self.access, &ids, None)
                .await
                .map_err(Arc::new)?
                .into_rows();
            for row in rows {
                let Some(id) = row.get("id").and_then(|v| v.as_str()).map(str::to_string) else {
                    continue;
                };
                out.insert(OneKey { entity, id }, row);
            }
        }
        Ok(out)
    }
}

impl Loader<ManyKey> for StoreLoader {
    type Value = Vec<Row>;
    type Error = Arc<StoreError>;

    async fn load(&self, keys: &[ManyKey]) -> Result<HashMap<ManyKey, Vec<Row>>, Self::Error> {
        let mut groups: HashMap<&str, (Arc<ChildSpec>, Vec<String>)> = HashMap::new();
        for k in keys {
            groups
                .entry(k.spec.sig.as_str())
                .or_insert_with(|| (k.spec.clone(), Vec::new()))
                .1
                .push(k.parent.clone());
        }
        let mut out = HashMap::new();
        for (_, (spec, parents)) in groups {
            let children = self
                .entity_at(spec.target)
                .related(&self.access, spec.relation, &parents, &spec.query)
                .await
                .map_err(Arc::new)?;
            let mut grouped: HashMap<String, Vec<Row>> =
                parents.iter().map(|p| (p.clone(), Vec::new())).collect();
            for (row, parent) in children.rows.into_rows().into_iter().zip(children.parents) {
                if let Some(rows) = grouped.get_mut(&parent) {
                    rows.push(row);
                }
            }
            for (parent, rows) in grouped {
                out.insert(
                    ManyKey {
                        spec: spec.clone(),
                        parent,
                    },
                    rows,
                );
            }
        }
        Ok(out)
    }
}
