//! Rendering: (policy, variables) -> (inputs to run, inputs dropped).
//!
//! - Every string is substituted (see [`crate::subst`]).
//! - A mapping with a `condition` key (an input, a stream, a processor, or
//!   any other mapping) is removed when the condition is false; when true,
//!   only the `condition` key is removed. A condition is a string in the
//!   condition language or a boolean, and is not substituted itself.
//! - An input with a variable that does not resolve, anywhere inside it, is
//!   dropped and reported; so is an input whose streams were all removed.
//! - Each input gets a stable id: its `id` field, or `<type>-<hash>` where
//!   the hash covers the rendered config (keys in sorted order).
//! - A malformed substitution or a condition that fails to evaluate is an
//!   error of the whole render, with its location.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::cond::{CondError, Condition, EvalOptions};
use crate::dynamic::{self, Dynamic, Mapping};
use crate::error::{PolicyError, Pos};
use crate::exec_script;
use crate::fnv::Fnv64;
use crate::model::{Node, NodeKind, Policy};
use crate::subst::{self, Resolved};
use crate::value::{Map, Value};
use crate::vars::Vars;

/// The key of a rendered input holding the processors its dynamic
/// provider's mapping added (Elastic's hints `processors.*`): they run after
/// the input's `processors` and may not change the event's routing.
pub const PROVIDER_PROCESSORS: &str = "provider_processors";

/// An input that should run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RenderedInput {
    /// Stable id.
    pub id: String,
    /// The rendered settings, with `id` as the first key.
    pub config: Value,
    /// Its position in the policy's `inputs` list.
    #[serde(skip)]
    pub index: usize,
    /// The variables read by the conditions that kept this input and its
    /// parts (streams, processors) in the rendering, without repeats. An
    /// input whose kept parts depend on `kubernetes_leaderelection` is
    /// leader-gated: the runtime ties it to that election's term.
    #[serde(skip)]
    pub condition_vars: Vec<String>,
    /// For an input rendered from a dynamic provider's mapping, the fields
    /// that mapping adds to every event (e.g. `kubernetes.pod.name`,
    /// `container.id`): top-level keys to their values.
    #[serde(skip)]
    pub fields: Option<Value>,
    /// For an input rendered once per shard of a sharded election, which
    /// shard this rendering is (its term is that shard's).
    #[serde(skip)]
    pub shard: Option<u32>,
}

/// A sharded election as the renderer sees it: an input that reads its
/// variables renders once per shard, with `kubernetes_leaderelection.NAME`
/// holding that shard's variables, and gets the id `<id>-shard-<i>`.
#[derive(Debug, Clone)]
pub struct ShardedElection {
    /// The election's name.
    pub name: String,
    /// Each shard's variables (`leader`, `term`, `holder`, `shard`,
    /// `shards`), in shard order.
    pub shards: Vec<Value>,
}

/// An input that was not rendered, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dropped {
    /// The input's `id` as written, or `inputs.<index>` when it has none.
    pub id: String,
    /// Why it was dropped.
    pub reason: String,
}

/// The result of rendering.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rendered {
    /// Inputs to run, in policy order.
    pub inputs: Vec<RenderedInput>,
    /// Inputs not rendered, in policy order.
    pub dropped: Vec<Dropped>,
}

impl Rendered {
    /// The `inspect --format json` document:
    /// `{"inputs": [...], "dropped": [{"id", "reason"}]}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "inputs": self.inputs.iter().map(|i| &i.config).collect::<Vec<_>>(),
            "dropped": self.dropped,
        })
    }
}

enum Out {
    Keep(Value),
    Remove(Option<String>),
}

enum Fail {
    NoMatch(String, Pos),
    Error(PolicyError),
}

pub(crate) struct Ctx<'a> {
    file: &'a str,
    vars: &'a Vars,
    default_provider: String,
    conditions: HashMap<String, Result<Condition, CondError>>,
    /// Variables of the true conditions met in the current input.
    condition_vars: Vec<String>,
    /// The dynamic provider being rendered, if any.
    provider: Option<String>,
    /// A string of the current input read that provider's variables.
    used_provider: bool,
    /// One of those variables describes the mapping's own object (a Pod,
    /// a container), not what every mapping shares (its node, the scope).
    used_own: bool,
    /// The mapping being rendered shares its node's variables with the
    /// node's other mappings ([`dynamic::Mapping::shares_node`]).
    shares_node: bool,
}

/// Where a column inside a one-line scalar lands in the file.
pub(crate) fn column_in_file(node: &Node, col_in_text: usize) -> Pos {
    match &node.kind {
        NodeKind::Str { value, quoted } if !value.contains('\n') => Pos::new(
            node.pos.line,
            node.pos.column + usize::from(*quoted) + col_in_text.saturating_sub(1),
        ),
        _ => node.pos,
    }
}

impl Ctx<'_> {
    fn condition(&mut self, node: &Node) -> Result<bool, Fail> {
        let src = match &node.kind {
            NodeKind::Bool(b) => return Ok(*b),
            NodeKind::Str { value, .. } => value,
            _ => {
                return Err(Fail::Error(
                    PolicyError::new(self.file, node.pos, format!("`condition` must be a string or a boolean, found {}", node.type_name()))
                        .with_hint("quote the expression, e.g. condition: \"${kubernetes_leaderelection.leader} == true\""),
                ));
            }
        };
        let parsed = self
            .conditions
            .entry(src.clone())
            .or_insert_with(|| Condition::parse(src));
        let result = match parsed {
            Ok(c) => {
                let r = c.eval(self.vars, EvalOptions::default());
                if let Ok(true) = r {
                    for v in c.variables() {
                        if !self.condition_vars.iter().any(|x| x == v) {
                            self.condition_vars.push(v.to_string());
                        }
                    }
                }
                r
            }
            Err(e) => Err(e.clone()),
        };
        result.map_err(|e| {
            let mut err = PolicyError::new(
                self.file,
                column_in_file(node, e.column),
                format!(
                    "condition `{src}` failed at column {}: {}",
                    e.column, e.message
                ),
            );
            if let Some(h) = e.hint {
                err = err.with_hint(h);
            }
            Fail::Error(err)
        })
    }

    fn node(&mut self, node: &Node) -> Result<Out, Fail> {
        Ok(Out::Keep(match &node.kind {
            NodeKind::Null => Value::Null,
            NodeKind::Bool(b) => Value::Bool(*b),
            NodeKind::Int(i) => Value::Int(*i),
            NodeKind::Float(f) => Value::Float(*f),
            NodeKind::Str { value, .. } => {
                if !subst::may_contain_vars(value) {
                    Value::Str(value.clone())
                } else {
                    let t = subst::parse(value, &self.default_provider).map_err(|e| {
                        Fail::Error(
                            PolicyError::new(self.file, column_in_file(node, e.column), e.message)
                                .with_hint(e.hint),
                        )
                    })?;
                    match t.apply(self.vars) {
                        Resolved::Value(v) => {
                            if let Some(p) = &self.provider {
                                for alt in t.refs().flat_map(|r| r.alts.iter()) {
                                    if let subst::Alt::Var(n) = alt
                                        && let Some(rest) = n
                                            .strip_prefix(p.as_str())
                                            .and_then(|r| r.strip_prefix('.'))
                                    {
                                        self.used_provider = true;
                                        self.used_own |= !(self.shares_node
                                            && dynamic::shared_by_every_mapping(rest));
                                    }
                                }
                            }
                            v
                        }
                        Resolved::NoMatch(r) => return Err(Fail::NoMatch(r, node.pos)),
                        Resolved::Optional(r) => return Ok(Out::Remove(Some(r))),
                    }
                }
            }
            NodeKind::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    if let Out::Keep(v) = self.node(item)? {
                        out.push(v);
                    }
                }
                Value::List(out)
            }
            NodeKind::Map(entries) => {
                if let Some((_, cond)) = entries.iter().find(|(k, _)| k.name == "condition") {
                    let text = cond
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("{:?}", cond.to_value()));
                    if !self.condition(cond)? {
                        return Ok(Out::Remove(Some(format!(
                            "condition `{text}` (line {}) is false",
                            cond.pos.line
                        ))));
                    }
                }
                let mut m = Vec::with_capacity(entries.len());
                for (k, v) in entries {
                    if k.name == "condition" {
                        continue;
                    }
                    if let Out::Keep(v) = self.node(v)? {
                        m.push((k.name.clone(), v));
                    }
                }
                Value::Map(Map::from_entries(m))
            }
        }))
    }
}

fn non_empty_list(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::List(l)) if !l.is_empty())
}

/// Renders the inputs of `policy` with `vars`.
pub fn render(policy: &Policy, vars: &Vars) -> Result<Rendered, PolicyError> {
    render_with(policy, vars, None)
}

/// What one input renders to against one set of variables.
enum One {
    Input(Map, Vec<String>),
    Dropped(String),
}

/// Renders the inputs of `policy` with `vars` and, when given, the
/// mappings of a dynamic provider: an input that reads that provider's
/// variables (anywhere: strings, conditions) renders once per mapping (see
/// [`crate::dynamic`]); the others render once.
pub fn render_with(
    policy: &Policy,
    vars: &Vars,
    dynamic: Option<&Dynamic<'_>>,
) -> Result<Rendered, PolicyError> {
    render_sharded(policy, vars, dynamic, &[])
}

/// [`render_with`], and inputs that read a sharded election's variables
/// render once per shard (see [`ShardedElection`]).
pub fn render_sharded(
    policy: &Policy,
    vars: &Vars,
    dynamic: Option<&Dynamic<'_>>,
    sharded: &[ShardedElection],
) -> Result<Rendered, PolicyError> {
    let mut ctx = context(policy, vars);
    // One variable store per mapping, built the first time an input needs it.
    let mut per_mapping: Option<Vec<Vars>> = None;
    let mut out = Rendered::default();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (index, input) in policy.inputs().iter().enumerate() {
        let dynamic =
            dynamic.filter(|d| dynamic::reads_provider(input, d.provider, &ctx.default_provider));
        let Some(d) = dynamic.filter(|_| !reads_sharded(input, sharded, &ctx.default_provider))
        else {
            for item in render_fixed(&mut ctx, policy, input, index, sharded, dynamic.is_some())? {
                match item {
                    Item::Input(c) => push_candidate(&mut out, &mut seen, c),
                    Item::Dropped(d) => out.dropped.push(d),
                }
            }
            continue;
        };
        let raw_id = raw_id(input, index);
        let stores = per_mapping.get_or_insert_with(|| {
            d.mappings
                .iter()
                .map(|m| {
                    let mut v = vars.clone();
                    v.set_provider(d.provider, m.vars.clone());
                    v
                })
                .collect()
        });
        let mut contents: Vec<u64> = Vec::new();
        let mut last_reason = None;
        for (m, store) in d.mappings.iter().zip(stores.iter()) {
            match render_for_mapping(&mut ctx, policy, input, d.provider, m, store)? {
                ForMapping::Rendered(r) => {
                    // A pod's mapping and its containers' may render the
                    // same input: the first (the pod's) runs.
                    if contents.contains(&r.hash) {
                        continue;
                    }
                    contents.push(r.hash);
                    let c = mapping_candidate(index, d.provider, m, r);
                    push_candidate(&mut out, &mut seen, c);
                }
                ForMapping::Dropped(reason) => last_reason = Some(reason),
            }
        }
        if contents.is_empty() {
            let reason = unrendered_reason(d.provider, d.mappings.len(), last_reason);
            out.dropped.push(Dropped { id: raw_id, reason });
        }
    }
    if let Some(d) = dynamic {
        push_brought(&mut out, &mut seen, policy.inputs().len(), d);
    }
    Ok(out)
}

/// What rendering one input gives, in order.
pub(crate) enum Item {
    Input(RenderedInput),
    Dropped(Dropped),
}

/// The input's `id` as written, or `inputs.<index>` when it has none.
pub(crate) fn raw_id(input: &Node, index: usize) -> String {
    match input.get("id").map(|n| &n.kind) {
        Some(NodeKind::Str { value, .. }) => value.clone(),
        Some(NodeKind::Int(i)) => i.to_string(),
        _ => format!("inputs.{index}"),
    }
}

/// Whether `input` reads the variables of one of the `sharded` elections.
pub(crate) fn reads_sharded(
    input: &Node,
    sharded: &[ShardedElection],
    default_provider: &str,
) -> bool {
    sharded
        .iter()
        .any(|g| reads_election(input, &g.name, default_provider))
}

/// Renders an input whose renderings no mapping decides: once, or once per
/// shard of the sharded election it reads (`reads_dynamic`: it also reads
/// the dynamic provider, which only a sharded input may not).
pub(crate) fn render_fixed(
    ctx: &mut Ctx<'_>,
    policy: &Policy,
    input: &Node,
    index: usize,
    sharded: &[ShardedElection],
    reads_dynamic: bool,
) -> Result<Vec<Item>, PolicyError> {
    let raw_id = raw_id(input, index);
    if let Some(group) = sharded
        .iter()
        .find(|g| reads_election(input, &g.name, &ctx.default_provider))
    {
        if reads_dynamic {
            return Ok(vec![Item::Dropped(Dropped {
                id: raw_id,
                reason: format!(
                    "it reads the variables of sharded election `{}` and of a dynamic provider: an input renders once per shard or once per mapping, not both; split it in two inputs",
                    group.name
                ),
            })]);
        }
        return render_shards(ctx, policy, input, group, index, raw_id);
    }
    Ok(vec![match render_one(ctx, policy, input)? {
        One::Input(config, condition_vars) => {
            Item::Input(candidate(index, config, condition_vars, None))
        }
        One::Dropped(reason) => Item::Dropped(Dropped { id: raw_id, reason }),
    }])
}

/// Why an input reading `provider` rendered for none of its `mappings`
/// (`last`: the last mapping's reason, when there was one).
pub(crate) fn unrendered_reason(provider: &str, mappings: usize, last: Option<String>) -> String {
    match last {
        None => format!(
            "it reads `{provider}` variables and that provider publishes nothing yet (no pod or container matches its settings)"
        ),
        Some(r) => format!(
            "it reads `{provider}` variables and none of the {mappings} mappings renders it (last: {r})"
        ),
    }
}

/// One input rendered against one mapping's variables, before its id.
pub(crate) struct MappingRendering {
    pub(crate) config: Map,
    pub(crate) condition_vars: Vec<String>,
    /// Its settings took values of the mapping's own object (a Pod, a
    /// container), not only what every mapping shares.
    pub(crate) describes: bool,
    /// It read the provider anywhere in its settings.
    pub(crate) used_provider: bool,
    /// [`stable_hash`] of `config`: equal renderings of one input run once.
    pub(crate) hash: u64,
}

/// What one input renders to against one mapping.
pub(crate) enum ForMapping {
    Rendered(MappingRendering),
    Dropped(String),
}

/// A fresh rendering context for `policy` with `vars`.
pub(crate) fn context<'a>(policy: &'a Policy, vars: &'a Vars) -> Ctx<'a> {
    Ctx {
        file: &policy.file,
        vars,
        default_provider: policy.default_provider(),
        conditions: HashMap::new(),
        condition_vars: Vec::new(),
        provider: None,
        used_provider: false,
        used_own: false,
        shares_node: false,
    }
}

/// Renders `input` against mapping `m`, whose variables (the policy's and
/// the mapping's under `provider`) are `store`; `ctx` lends its parsed
/// conditions.
pub(crate) fn render_for_mapping(
    ctx: &mut Ctx<'_>,
    policy: &Policy,
    input: &Node,
    provider: &str,
    m: &Mapping,
    store: &Vars,
) -> Result<ForMapping, PolicyError> {
    let mut mctx = Ctx {
        file: ctx.file,
        vars: store,
        default_provider: ctx.default_provider.clone(),
        conditions: std::mem::take(&mut ctx.conditions),
        condition_vars: Vec::new(),
        provider: Some(provider.to_string()),
        used_provider: false,
        used_own: false,
        shares_node: m.shares_node,
    };
    let one = render_one(&mut mctx, policy, input);
    ctx.conditions = std::mem::take(&mut mctx.conditions);
    Ok(match one? {
        One::Input(config, condition_vars) => ForMapping::Rendered(MappingRendering {
            hash: stable_hash(&Value::Map(config.clone())),
            config,
            condition_vars,
            describes: mctx.used_own,
            used_provider: mctx.used_provider,
        }),
        One::Dropped(reason) => ForMapping::Dropped(reason),
    })
}

/// The input a mapping's rendering runs as, at position `index` of the
/// policy's inputs.
pub(crate) fn mapping_candidate(
    index: usize,
    provider: &str,
    m: &Mapping,
    r: MappingRendering,
) -> RenderedInput {
    // A rendering that reads nothing of its mapping's own object (only the
    // node, or only conditions) is the same for every Pod: its id names
    // its content, not the first Pod that rendered it, so it does not
    // restart when that Pod goes, and it carries none of that Pod's fields
    // or processors.
    let id = if r.describes {
        format!("{}-{}-{}", config_id(&r.config), provider, m.id)
    } else {
        format!(
            "{}-{}-{:08x}",
            config_id(&r.config),
            provider,
            r.hash as u32
        )
    };
    let mut config = r.config;
    config.insert("id", Value::Str(id));
    // The mapping's processors (a Pod's hints: untrusted) run after the
    // input's own, apart from them, so the pipeline can keep them from
    // re-routing events.
    if r.describes && !m.processors.is_empty() {
        config.insert(PROVIDER_PROCESSORS, Value::List(m.processors.clone()));
    }
    // Only an input whose settings took the mapping's values describes its
    // pod or container (as in Elastic Agent: conditions alone add
    // nothing); one that read only the node gets the node's fields.
    let fields = if r.describes {
        Some(m.fields.clone())
    } else if r.used_provider {
        dynamic::shared_fields(&m.fields)
    } else {
        None
    };
    candidate(index, config, r.condition_vars, fields)
}

/// Whether `input` reads a variable of election `name`.
fn reads_election(input: &Node, name: &str, default_provider: &str) -> bool {
    let prefix = format!("{}.{name}", crate::elections::PROVIDER);
    dynamic::reads_provider(input, &prefix, default_provider)
}

/// Renders `input` once per shard of `group`: rendering `i` sees the
/// shard's variables under `kubernetes_leaderelection.NAME` and gets the id
/// `<id>-shard-<i>`. When no shard renders it (this agent leads none), it
/// is one dropped input with the last shard's reason.
fn render_shards(
    ctx: &mut Ctx<'_>,
    policy: &Policy,
    input: &Node,
    group: &ShardedElection,
    index: usize,
    raw_id: String,
) -> Result<Vec<Item>, PolicyError> {
    let mut out = Vec::new();
    let provider = crate::elections::PROVIDER;
    let base = match ctx.vars.lookup(provider) {
        Some(Value::Map(m)) => m.clone(),
        _ => Map::new(),
    };
    let mut last_reason = None;
    let mut rendered_any = false;
    for (i, shard_vars) in group.shards.iter().enumerate() {
        let mut store = ctx.vars.clone();
        let mut own = base.clone();
        own.insert(&group.name, shard_vars.clone());
        store.set_provider(provider, Value::Map(own));
        let mut sctx = Ctx {
            file: ctx.file,
            vars: &store,
            default_provider: ctx.default_provider.clone(),
            conditions: std::mem::take(&mut ctx.conditions),
            condition_vars: Vec::new(),
            provider: None,
            used_provider: false,
            used_own: false,
            shares_node: false,
        };
        let one = render_one(&mut sctx, policy, input);
        ctx.conditions = sctx.conditions;
        match one? {
            One::Input(mut config, condition_vars) => {
                let id = format!("{}-shard-{i}", config_id(&config));
                config.insert("id", Value::Str(id));
                let mut c = candidate(index, config, condition_vars, None);
                c.shard = u32::try_from(i).ok();
                out.push(Item::Input(c));
                rendered_any = true;
            }
            One::Dropped(reason) => last_reason = Some(reason),
        }
    }
    if !rendered_any {
        let reason = match last_reason {
            Some(r) => format!(
                "no shard of election `{}` renders it (last: {r})",
                group.name
            ),
            None => format!("election `{}` has no shards", group.name),
        };
        out.push(Item::Dropped(Dropped { id: raw_id, reason }));
    }
    Ok(out)
}

/// The inputs the mappings bring themselves, after the policy's: each
/// distinct config once per Pod (a Pod's hints apply to all its
/// containers), with its mapping's fields; and what the mappings refused,
/// as dropped. Never once across Pods: the same config in two Pods (two
/// namespaces) is two inputs, each with its own Pod's fields.
fn push_brought(
    out: &mut Rendered,
    seen: &mut HashMap<String, usize>,
    index: usize,
    d: &Dynamic<'_>,
) {
    let mut contents: HashSet<(&str, u64)> = HashSet::new();
    for m in d.mappings {
        for input in &m.inputs {
            let Value::Map(config) = input else { continue };
            if !contents.insert((m.object(), stable_hash(input))) {
                continue;
            }
            let mut config = config.clone();
            let id = format!("{}-{}-{}", config_id(&config), d.provider, m.id);
            config.insert("id", Value::Str(id));
            push_input(out, seen, index, config, Vec::new(), Some(m.fields.clone()));
        }
        for reason in &m.refused {
            out.dropped.push(Dropped {
                id: format!("hints-{}-{}", d.provider, m.id),
                reason: reason.clone(),
            });
        }
    }
}

/// The `id` a rendered config names, as text (empty when it has none).
pub(crate) fn config_id(config: &Map) -> String {
    match config.get("id") {
        Some(Value::Str(s)) => s.clone(),
        Some(Value::Int(i)) => i.to_string(),
        Some(Value::Float(f)) => f.to_string(),
        _ => String::new(),
    }
}

/// Renders one input against `ctx`'s variables.
fn render_one(ctx: &mut Ctx<'_>, policy: &Policy, input: &Node) -> Result<One, PolicyError> {
    ctx.condition_vars.clear();
    ctx.used_provider = false;
    ctx.used_own = false;
    // A Pod's value never becomes code or the program.
    if let Some(c) = exec_script::code_from_pod(input, dynamic::POD_PROVIDER, &ctx.default_provider)
    {
        return Ok(One::Dropped(format!(
            "{}; {}",
            c.message(),
            exec_script::CodeFromPod::hint()
        )));
    }
    let had_streams =
        matches!(input.get("streams").map(|n| &n.kind), Some(NodeKind::List(l)) if !l.is_empty());
    let rendered = match ctx.node(input) {
        Ok(Out::Keep(v)) => v,
        Ok(Out::Remove(reason)) => {
            return Ok(One::Dropped(reason.unwrap_or_else(|| "removed".into())));
        }
        Err(Fail::NoMatch(var, pos)) => {
            return Ok(One::Dropped(format!(
                "variable {var} could not be resolved (line {} column {})",
                pos.line, pos.column
            )));
        }
        Err(Fail::Error(e)) => return Err(e),
    };
    let Value::Map(mut config) = rendered else {
        return Ok(One::Dropped("not a mapping".into()));
    };
    // `enabled: false` turns an input or a stream off, as in Elastic Agent.
    if matches!(config.get("enabled"), Some(Value::Bool(false))) {
        return Ok(One::Dropped("disabled (`enabled: false`)".into()));
    }
    if let Some(Value::List(streams)) = config.get("streams") {
        let kept: Vec<Value> = streams
            .iter()
            .filter(|s| !matches!(s, Value::Map(m) if matches!(m.get("enabled"), Some(Value::Bool(false)))))
            .cloned()
            .collect();
        if kept.len() != streams.len() {
            config.insert("streams", Value::List(kept));
        }
    }
    if had_streams && !non_empty_list(config.get("streams")) {
        return Ok(One::Dropped(
            "all of its streams were removed by their conditions or `enabled: false`".into(),
        ));
    }
    match config.get("id") {
        None | Some(Value::Null | Value::Str(_) | Value::Int(_) | Value::Float(_)) => {}
        Some(other) => {
            let pos = input.get("id").map_or(input.pos, |n| n.pos);
            return Err(PolicyError::new(
                &policy.file,
                pos,
                format!(
                    "`id` must be a string or a number, found {}",
                    other.type_name()
                ),
            )
            .with_hint("quote the id, or remove it to get a generated one"));
        }
    }
    Ok(One::Input(config, std::mem::take(&mut ctx.condition_vars)))
}

/// Gives `config` its final id and adds it to `out`, unless an earlier
/// input has that id.
fn push_input(
    out: &mut Rendered,
    seen: &mut HashMap<String, usize>,
    index: usize,
    config: Map,
    condition_vars: Vec<String>,
    fields: Option<Value>,
) {
    push_candidate(out, seen, candidate(index, config, condition_vars, fields));
}

/// Adds `c` to `out`, unless an earlier input has its id.
fn push_candidate(out: &mut Rendered, seen: &mut HashMap<String, usize>, c: RenderedInput) {
    if let Some(first) = seen.get(&c.id) {
        out.dropped.push(duplicate(c.id, *first));
        return;
    }
    seen.insert(c.id.clone(), c.index);
    out.inputs.push(c);
}

/// An input dropped because input `first` of the policy renders with its id.
pub(crate) fn duplicate(id: String, first: usize) -> Dropped {
    Dropped {
        id,
        reason: format!("duplicate id: inputs.{first} renders with the same id"),
    }
}

/// `config` with its final id first: its `id`, or `<type>-<hash>`.
pub(crate) fn candidate(
    index: usize,
    mut config: Map,
    condition_vars: Vec<String>,
    fields: Option<Value>,
) -> RenderedInput {
    let id = match config.get("id") {
        Some(Value::Str(_) | Value::Int(_) | Value::Float(_)) => config_id(&config),
        _ => {
            let kind = match config.get("type") {
                Some(Value::Str(t)) => t.clone(),
                _ => "input".to_string(),
            };
            format!("{kind}-{:016x}", stable_hash(&Value::Map(config.clone())))
        }
    };
    config.insert_first("id", Value::Str(id.clone()));
    RenderedInput {
        id,
        config: Value::Map(config),
        index,
        condition_vars,
        fields,
        shard: None,
    }
}

/// A 64-bit FNV-1a hash of a value in a canonical form (map keys sorted,
/// every value tagged with its type). Stable across runs and platforms.
pub fn stable_hash(v: &Value) -> u64 {
    let mut h = Fnv64::new();
    hash_into(v, &mut h);
    h.finish()
}

fn feed(h: &mut Fnv64, bytes: &[u8]) {
    h.write(bytes);
}

fn hash_into(v: &Value, h: &mut Fnv64) {
    match v {
        Value::Null => feed(h, b"n"),
        Value::Bool(b) => feed(h, if *b { b"t" } else { b"f" }),
        Value::Int(i) => {
            feed(h, b"i");
            feed(h, &i.to_le_bytes());
        }
        Value::Float(f) => {
            feed(h, b"d");
            feed(h, &f.to_bits().to_le_bytes());
        }
        Value::Str(s) => {
            feed(h, b"s");
            feed(h, &(s.len() as u64).to_le_bytes());
            feed(h, s.as_bytes());
        }
        Value::List(l) => {
            feed(h, b"l");
            feed(h, &(l.len() as u64).to_le_bytes());
            for x in l {
                hash_into(x, h);
            }
        }
        Value::Map(m) => {
            feed(h, b"m");
            feed(h, &(m.len() as u64).to_le_bytes());
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (k, x) in entries {
                feed(h, &(k.len() as u64).to_le_bytes());
                feed(h, k.as_bytes());
                hash_into(x, h);
            }
        }
    }
}
