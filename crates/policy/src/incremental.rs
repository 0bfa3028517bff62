//! Rendering that follows a dynamic provider by change: when one object's
//! mappings change (a Pod and its containers), only that object's
//! renderings are redone, so a Pod event costs the same with ten Pods as
//! with a hundred thousand.
//!
//! [`Incremental`] holds what [`crate::render_sharded`] would compute from
//! the same policy, variables and mappings, and the same result comes out
//! ([`Incremental::rendered`]), including its order, its duplicate ids and
//! its reasons. What it keeps per mapping is small: for each input reading
//! the provider, the hash of what the mapping renders it to, when it
//! renders; whole settings only for the renderings that run. When the
//! first of equal renderings goes, the next is rendered again.
//!
//! The policy, the variables and the sharded elections are fixed for one
//! `Incremental`: when they change, build a new one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::dynamic::{self, Mapping};
use crate::error::PolicyError;
use crate::model::{Node, Policy};
use crate::render::{
    self, Ctx, Dropped, ForMapping, Item, Rendered, RenderedInput, ShardedElection, stable_hash,
};
use crate::value::Value;
use crate::vars::Vars;

/// A mapping's place in rendering order: (priority, id).
type Key = (u8, Arc<str>);

/// Where a rendered input or a dropped entry stands in the rendering's
/// order: the policy input it comes from (the policy's length for inputs
/// the mappings bring), the mapping, and its rank among that pair's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Pos {
    index: usize,
    mapping: Option<Key>,
    sub: usize,
}

/// One policy input that renders once per mapping.
struct PerInput {
    index: usize,
    raw_id: String,
    /// What each rendering mapping renders it to (its hash).
    hash_of: HashMap<Arc<str>, u64>,
    /// The mappings rendering each content, in order: the first runs.
    by_content: HashMap<u64, BTreeSet<Key>>,
    /// The id the first of each content runs under.
    running_id: HashMap<u64, String>,
}

/// What changed in the rendering since the last [`Incremental::take_changes`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Changes {
    /// Inputs new or whose rendering may differ: their current rendering.
    pub upserted: Vec<RenderedInput>,
    /// Ids no longer rendered.
    pub removed: Vec<String>,
    /// The dropped list changed.
    pub dropped: bool,
}

/// The rendering of one policy, kept up to date one object at a time.
pub struct Incremental {
    provider: String,
    vars: Vars,
    inputs: Vec<PerInput>,
    /// Every object's mappings as last rendered: their hash and keys (the
    /// mappings themselves stay with their [`MappingSource`]).
    objects: HashMap<String, (u64, Vec<Key>)>,
    /// Every mapping, in rendering order.
    order: BTreeSet<Key>,
    /// Candidates by id: the first position runs, the others are
    /// duplicates.
    by_id: HashMap<String, BTreeMap<Pos, RenderedInput>>,
    /// Dropped entries other than duplicates.
    dropped: BTreeMap<Pos, Dropped>,
    /// Candidates that lost to an earlier one with their id.
    duplicates: BTreeMap<Pos, Dropped>,
    /// The positions each object's mappings brought (inputs by id,
    /// refusals as `None`).
    brought: HashMap<String, Vec<(Pos, Option<String>)>>,
    changed: BTreeSet<String>,
    dropped_changed: bool,
}

impl Incremental {
    /// Renders `policy` with `vars` (without the provider's), the mappings
    /// `source` holds of dynamic provider `provider`, and the `sharded`
    /// elections.
    pub fn new(
        policy: &Policy,
        vars: &Vars,
        provider: &str,
        sharded: &[ShardedElection],
        source: &dyn MappingSource,
    ) -> Result<Self, PolicyError> {
        let mut me = Incremental {
            provider: provider.to_string(),
            vars: vars.clone(),
            inputs: Vec::new(),
            objects: HashMap::new(),
            order: BTreeSet::new(),
            by_id: HashMap::new(),
            dropped: BTreeMap::new(),
            duplicates: BTreeMap::new(),
            brought: HashMap::new(),
            changed: BTreeSet::new(),
            dropped_changed: true,
        };
        let mut ctx = render::context(policy, vars);
        let default_provider = policy.default_provider();
        for (index, input) in policy.inputs().iter().enumerate() {
            let reads = dynamic::reads_provider(input, provider, &default_provider);
            if reads && !render::reads_sharded(input, sharded, &default_provider) {
                me.inputs.push(PerInput {
                    index,
                    raw_id: render::raw_id(input, index),
                    hash_of: HashMap::new(),
                    by_content: HashMap::new(),
                    running_id: HashMap::new(),
                });
                continue;
            }
            let items = render::render_fixed(&mut ctx, policy, input, index, sharded, reads)?;
            for (sub, item) in items.into_iter().enumerate() {
                let pos = Pos {
                    index,
                    mapping: None,
                    sub,
                };
                match item {
                    Item::Input(c) => me.add_candidate(pos, c),
                    Item::Dropped(d) => {
                        me.dropped.insert(pos, d);
                    }
                }
            }
        }
        for object in source.objects() {
            let ms = source.mappings_of(&object);
            me.set_object_quietly(&mut ctx, policy, source, &object, ms)?;
        }
        me.refresh_unrendered(&mut ctx, policy, source)?;
        Ok(me)
    }

    /// `object` changed in `source` (or is gone from it): renders only
    /// what its mappings render.
    pub fn refresh(
        &mut self,
        policy: &Policy,
        source: &dyn MappingSource,
        object: &str,
    ) -> Result<(), PolicyError> {
        let vars = self.vars.clone();
        let mut ctx = render::context(policy, &vars);
        let mappings = source.mappings_of(object);
        self.set_object_quietly(&mut ctx, policy, source, object, mappings)?;
        self.refresh_unrendered(&mut ctx, policy, source)
    }

    /// What [`crate::render_sharded`] renders with the current mappings.
    pub fn rendered(&self) -> Rendered {
        let mut inputs: Vec<(&Pos, &RenderedInput)> = self
            .by_id
            .values()
            .filter_map(|c| c.iter().next())
            .collect();
        inputs.sort_by(|a, b| a.0.cmp(b.0));
        Rendered {
            inputs: inputs.into_iter().map(|(_, c)| c.clone()).collect(),
            dropped: self.dropped(),
        }
    }

    /// The inputs not rendered, in order.
    pub fn dropped(&self) -> Vec<Dropped> {
        let mut all: Vec<(&Pos, &Dropped)> =
            self.dropped.iter().chain(self.duplicates.iter()).collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all.into_iter().map(|(_, d)| d.clone()).collect()
    }

    /// The rendering of input `id`, if it runs.
    pub fn input(&self, id: &str) -> Option<&RenderedInput> {
        self.by_id.get(id).and_then(|c| c.values().next())
    }

    /// What changed since the last call.
    pub fn take_changes(&mut self) -> Changes {
        let mut out = Changes {
            dropped: std::mem::take(&mut self.dropped_changed),
            ..Changes::default()
        };
        for id in std::mem::take(&mut self.changed) {
            match self.input(&id) {
                Some(c) => out.upserted.push(c.clone()),
                None => out.removed.push(id),
            }
        }
        out
    }

    fn set_object_quietly(
        &mut self,
        ctx: &mut Ctx<'_>,
        policy: &Policy,
        source: &dyn MappingSource,
        object: &str,
        mut mappings: Vec<Mapping>,
    ) -> Result<(), PolicyError> {
        dynamic::sort(&mut mappings);
        let hash = dynamic::mappings_hash(&mappings);
        let (old_hash, old) = self.objects.remove(object).unwrap_or_default();
        if old_hash == hash && old.len() == mappings.len() {
            if !mappings.is_empty() {
                self.objects.insert(object.to_string(), (hash, old));
            }
            return Ok(());
        }
        for k in &old {
            self.order.remove(k);
        }
        for i in 0..self.inputs.len() {
            for k in &old {
                self.unrender(ctx, policy, source, object, i, k)?;
            }
        }
        for (pos, id) in self.brought.remove(object).unwrap_or_default() {
            match id {
                Some(id) => self.remove_candidate(&id, &pos),
                None => {
                    self.dropped.remove(&pos);
                    self.dropped_changed = true;
                }
            }
        }
        let keys: Vec<Key> = mappings.iter().map(key).collect();
        for k in &keys {
            self.order.insert(k.clone());
        }
        // Each mapping's variables, built once for all inputs.
        let stores: Vec<Vars> = mappings
            .iter()
            .map(|m| {
                let mut v = self.vars.clone();
                v.set_provider(&self.provider, m.vars.clone());
                v
            })
            .collect();
        for i in 0..self.inputs.len() {
            for ((m, k), store) in mappings.iter().zip(&keys).zip(&stores) {
                self.render_into(ctx, policy, i, m, k, store)?;
            }
        }
        self.bring(policy, object, &mappings, &keys);
        if !mappings.is_empty() {
            self.objects.insert(object.to_string(), (hash, keys));
        }
        Ok(())
    }

    /// Renders input `i` for mapping `m`, whose variables are `store`.
    fn render_into(
        &mut self,
        ctx: &mut Ctx<'_>,
        policy: &Policy,
        i: usize,
        m: &Mapping,
        k: &Key,
        store: &Vars,
    ) -> Result<(), PolicyError> {
        let input = input_node(policy, self.inputs[i].index);
        let ForMapping::Rendered(r) =
            render::render_for_mapping(ctx, policy, input, &self.provider, m, store)?
        else {
            return Ok(());
        };
        let k = k.clone();
        let p = &mut self.inputs[i];
        p.hash_of.insert(k.1.clone(), r.hash);
        let set = p.by_content.entry(r.hash).or_default();
        set.insert(k.clone());
        if set.iter().next() != Some(&k) {
            return Ok(());
        }
        let hash = r.hash;
        let index = p.index;
        // It comes before the one that ran this content.
        if let Some(before) = p.running_id.remove(&hash) {
            let pos = self.first_pos_of(i, hash, &k);
            if let Some(pos) = pos {
                self.remove_candidate(&before, &pos);
            }
        }
        let c = render::mapping_candidate(index, &self.provider, m, r);
        self.inputs[i].running_id.insert(hash, c.id.clone());
        self.add_candidate(
            Pos {
                index,
                mapping: Some(k),
                sub: 0,
            },
            c,
        );
        Ok(())
    }

    /// The position of the candidate that ran content `hash` of input `i`
    /// before `newcomer` came first.
    fn first_pos_of(&self, i: usize, hash: u64, newcomer: &Key) -> Option<Pos> {
        let p = &self.inputs[i];
        let second = p.by_content.get(&hash)?.iter().find(|k| *k != newcomer)?;
        Some(Pos {
            index: p.index,
            mapping: Some(second.clone()),
            sub: 0,
        })
    }

    /// Takes the mapping with key `k` (already out of [`Self::order`] and
    /// of [`Self::objects`]) out of input `i`'s renderings; the next
    /// mapping of equal content runs instead, unless it belongs to
    /// `leaving`, the object whose old mappings are all going.
    fn unrender(
        &mut self,
        ctx: &mut Ctx<'_>,
        policy: &Policy,
        source: &dyn MappingSource,
        leaving: &str,
        i: usize,
        k: &Key,
    ) -> Result<(), PolicyError> {
        let k = k.clone();
        let p = &mut self.inputs[i];
        let Some(hash) = p.hash_of.remove(&k.1) else {
            return Ok(());
        };
        let index = p.index;
        let Some(set) = p.by_content.get_mut(&hash) else {
            return Ok(());
        };
        let was_first = set.iter().next() == Some(&k);
        set.remove(&k);
        let next = set.iter().next().cloned();
        if set.is_empty() {
            p.by_content.remove(&hash);
        }
        if !was_first {
            return Ok(());
        }
        if let Some(id) = p.running_id.remove(&hash) {
            self.remove_candidate(
                &id,
                &Pos {
                    index,
                    mapping: Some(k),
                    sub: 0,
                },
            );
        }
        let Some(next) = next else { return Ok(()) };
        if object_of(&next) == leaving {
            return Ok(());
        }
        let Some(nm) = self.mapping(source, &next) else {
            return Ok(());
        };
        let mut store = self.vars.clone();
        store.set_provider(&self.provider, nm.vars.clone());
        let input = input_node(policy, index);
        if let ForMapping::Rendered(r) =
            render::render_for_mapping(ctx, policy, input, &self.provider, &nm, &store)?
        {
            let c = render::mapping_candidate(index, &self.provider, &nm, r);
            self.inputs[i].running_id.insert(hash, c.id.clone());
            self.add_candidate(
                Pos {
                    index,
                    mapping: Some(next),
                    sub: 0,
                },
                c,
            );
        }
        Ok(())
    }

    /// The inputs `object`'s mappings bring and the hints they refused
    /// (as [`crate::render_sharded`] adds them after the policy's).
    fn bring(&mut self, policy: &Policy, object: &str, mappings: &[Mapping], keys: &[Key]) {
        let index = policy.inputs().len();
        let mut contents: BTreeSet<u64> = BTreeSet::new();
        let mut placed = Vec::new();
        for (m, k) in mappings.iter().zip(keys) {
            let mut sub = 0;
            for input in &m.inputs {
                let Value::Map(config) = input else { continue };
                if !contents.insert(stable_hash(input)) {
                    continue;
                }
                let mut config = config.clone();
                let id = format!("{}-{}-{}", render::config_id(&config), self.provider, m.id);
                config.insert("id", Value::Str(id));
                let c = render::candidate(index, config, Vec::new(), Some(m.fields.clone()));
                let pos = Pos {
                    index,
                    mapping: Some(k.clone()),
                    sub,
                };
                sub += 1;
                placed.push((pos.clone(), Some(c.id.clone())));
                self.add_candidate(pos, c);
            }
            for reason in &m.refused {
                let pos = Pos {
                    index,
                    mapping: Some(k.clone()),
                    sub,
                };
                sub += 1;
                self.dropped.insert(
                    pos.clone(),
                    Dropped {
                        id: format!("hints-{}-{}", self.provider, m.id),
                        reason: reason.clone(),
                    },
                );
                self.dropped_changed = true;
                placed.push((pos, None));
            }
        }
        if !placed.is_empty() {
            self.brought.insert(object.to_string(), placed);
        }
    }

    /// Lists as dropped, with why, each input that no mapping renders.
    fn refresh_unrendered(
        &mut self,
        ctx: &mut Ctx<'_>,
        policy: &Policy,
        source: &dyn MappingSource,
    ) -> Result<(), PolicyError> {
        for i in 0..self.inputs.len() {
            let p = &self.inputs[i];
            let pos = Pos {
                index: p.index,
                mapping: None,
                sub: 0,
            };
            if !p.hash_of.is_empty() {
                if self.dropped.remove(&pos).is_some() {
                    self.dropped_changed = true;
                }
                continue;
            }
            // None renders: the last mapping's reason is the one reported.
            let last = match self.order.iter().next_back().cloned() {
                Some(k) => match self.mapping(source, &k) {
                    Some(m) => {
                        let mut store = self.vars.clone();
                        store.set_provider(&self.provider, m.vars.clone());
                        let input = input_node(policy, p.index);
                        match render::render_for_mapping(
                            ctx,
                            policy,
                            input,
                            &self.provider,
                            &m,
                            &store,
                        )? {
                            ForMapping::Dropped(r) => Some(r),
                            ForMapping::Rendered(_) => None,
                        }
                    }
                    None => None,
                },
                None => None,
            };
            let p = &self.inputs[i];
            let d = Dropped {
                id: p.raw_id.clone(),
                reason: render::unrendered_reason(&self.provider, self.order.len(), last),
            };
            if self.dropped.get(&pos) != Some(&d) {
                self.dropped.insert(pos, d);
                self.dropped_changed = true;
            }
        }
        Ok(())
    }

    /// The mapping with key `k`, as `source` holds it now.
    fn mapping(&self, source: &dyn MappingSource, k: &Key) -> Option<Mapping> {
        source
            .mappings_of(object_of(k))
            .into_iter()
            .find(|m| *m.id == *k.1 && m.priority == k.0)
    }

    fn add_candidate(&mut self, pos: Pos, c: RenderedInput) {
        let id = c.id.clone();
        self.forget_duplicates(&id);
        self.by_id.entry(id.clone()).or_default().insert(pos, c);
        self.note_duplicates(&id);
        self.changed.insert(id);
    }

    fn remove_candidate(&mut self, id: &str, pos: &Pos) {
        self.forget_duplicates(id);
        if let Some(group) = self.by_id.get_mut(id) {
            group.remove(pos);
            if group.is_empty() {
                self.by_id.remove(id);
            }
        }
        self.note_duplicates(id);
        self.changed.insert(id.to_string());
    }

    fn forget_duplicates(&mut self, id: &str) {
        if let Some(group) = self.by_id.get(id) {
            for pos in group.keys().skip(1) {
                self.duplicates.remove(pos);
                self.dropped_changed = true;
            }
        }
    }

    fn note_duplicates(&mut self, id: &str) {
        if let Some(group) = self.by_id.get(id) {
            let mut it = group.iter();
            let Some((_, first)) = it.next() else { return };
            for (pos, _) in it {
                self.duplicates
                    .insert(pos.clone(), render::duplicate(id.to_string(), first.index));
                self.dropped_changed = true;
            }
        }
    }
}

/// Where an [`Incremental`] finds mappings: it keeps none itself, so a
/// provider's objects are held once, by the provider.
pub trait MappingSource {
    /// Every object that has mappings now.
    fn objects(&self) -> Vec<String>;
    /// The mappings of `object` now (none when it is gone), in any order.
    fn mappings_of(&self, object: &str) -> Vec<Mapping>;
}

/// Mappings held by object ([`Mapping::object`]): a [`MappingSource`] for
/// tests and tools.
#[derive(Debug, Clone, Default)]
pub struct HeldMappings(pub BTreeMap<String, Vec<Mapping>>);

impl HeldMappings {
    /// `mappings` grouped by object.
    pub fn new(mappings: Vec<Mapping>) -> Self {
        let mut held = BTreeMap::<String, Vec<Mapping>>::new();
        for m in mappings {
            held.entry(m.object().to_string()).or_default().push(m);
        }
        HeldMappings(held)
    }
}

impl MappingSource for HeldMappings {
    fn objects(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }

    fn mappings_of(&self, object: &str) -> Vec<Mapping> {
        self.0.get(object).cloned().unwrap_or_default()
    }
}

/// The object of the mapping with key `k` (see [`Mapping::object`]).
fn object_of(k: &Key) -> &str {
    k.1.split_once('.').map_or(&*k.1, |(o, _)| o)
}

fn key(m: &Mapping) -> Key {
    (m.priority, Arc::from(m.id.as_str()))
}

fn input_node(policy: &Policy, index: usize) -> &Node {
    &policy.inputs()[index]
}
