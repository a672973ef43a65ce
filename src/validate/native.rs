//! A queue's limits as CEL, for a `ValidatingAdmissionPolicy`: each check is an expression
//! giving the list of violation lines (`queue "q": <place>=<value> <problem> (<limit>)`), the
//! way [`super::check_limits`] words them. The checks read the object through a policy
//! variable `specs` (every pod template with its spec, role and pods at once) and a boolean
//! expression saying whether the object is a verified controller-made child (then only the
//! per-pod rules apply).
//!
//! What the webhook checks that CEL here does not — the strict template contract, a variable
//! inside a longer string, root-level positions bound by task or replica name — is returned as
//! gaps, and [`LimitsCel::subset`] writes the limits without them, so the two can be compared.

use super::binding::{self, container_of};
use super::path::{FieldPath, Segment};
use super::schema::{Allowed, Schema, ValueType, quoted};
use super::template::{Anchor, Piece};
use super::{LimitsConfig, QueueLimits, VariableConfig, VariableLimit};
use crate::cel::{self, Identifier, ident, lit};
use crate::rules::{self, Rule};
use crate::workload::{CONTAINER_LISTS, WorkloadKind};

/// A queue's limits compiled to CEL.
#[derive(Debug, Default)]
pub struct LimitsCel {
    /// Named CEL expressions for the policy's `variables`, in order (a later one may read an
    /// earlier one as `variables.<name>`).
    pub variables: Vec<(Identifier, String)>,
    /// The names among `variables` holding violation lines, in the webhook's order, each with
    /// the rule its lines break.
    pub checks: Vec<(Identifier, &'static Rule)>,
    /// What each check enforces, in words.
    pub described: Vec<String>,
    /// What stays in the webhook: (config key, why).
    pub gaps: Vec<(String, String)>,
    unsupported_variables: Vec<String>,
    strict: bool,
}

impl LimitsCel {
    fn place(&mut self, name: Identifier, expression: String) -> String {
        let reference = name.reference();
        self.variables.push((name, expression));
        reference
    }

    /// A variable name made of `prefix` and the number of variables so far.
    fn next(&self, prefix: Identifier) -> Identifier {
        prefix.numbered(self.variables.len())
    }

    fn check(&mut self, rule: &'static Rule, name: Identifier, expression: String) {
        self.variables.push((name.clone(), expression));
        self.checks.push((name, rule));
    }

    /// `cfg` without what these checks leave to the webhook: `strict` off, and each variable
    /// the checks cannot place made an unchecked string (so it bounds nothing).
    pub fn subset(&self, cfg: &LimitsConfig) -> LimitsConfig {
        let mut out = cfg.clone();
        if self.strict {
            out.strict = false;
        }
        for name in &self.unsupported_variables {
            if let Some(v) = out.variables.get_mut(name) {
                *v = VariableConfig {
                    value_type: Some(ValueType::String),
                    ..VariableConfig::default()
                };
            }
        }
        out
    }
}

/// How a variable position is placed in CEL, or why it cannot be.
fn placeable(
    location: &super::VariableLocation,
    template_kind: Option<WorkloadKind>,
) -> Result<(), String> {
    if !matches!(location.pattern.as_slice(), [Piece::Variable(_)]) {
        return Err(format!(
            "{} is part of a longer string ({:?}); CEL here has no pattern capture",
            location.template_path, location.written
        ));
    }
    if location.anchor == Anchor::Root
        && !template_kind.is_some_and(|k| {
            matches!(
                k.spec().positions,
                [crate::kinds::Position {
                    naming: crate::kinds::Naming::None,
                    ..
                }]
            )
        })
    {
        return Err(format!(
            "{} is bound by task, replica or node name",
            location.template_path
        ));
    }
    Ok(())
}

/// `written` (a CEL string expression, `None` at the object root) followed by the index of a
/// `[*]`, held by the CEL variable `index`.
fn step_index(written: Option<&str>, index: &str) -> String {
    let w = written.unwrap_or("''");
    format!("{w} + '[' + string({index}) + ']'")
}

/// Every place `path` designates under the value list `c` (a CEL variable holding `[]` or
/// `[value]`), written from `written`: a CEL list of `{'at': place, 'v': [] or [value]}`.
///
/// A run of keys and fixed indexes is read by one guarded access (`c[0].a.b[1]` behind the
/// type and presence test of every step) and its place by one string literal, not by a list
/// and a comprehension per step: the API server evaluates this for every container of every
/// request, and each comprehension allocates.
fn resolve(c: &str, written: Option<&str>, path: &[Segment], depth: usize) -> String {
    let run = path
        .iter()
        .take_while(|s| !matches!(s, Segment::AnyIndex))
        .count();
    if run == 0 {
        // Nothing left, or a `[*]`: the run ends only there.
        let Some((_, rest)) = path.split_first() else {
            return format!(
                "[{{'at': dyn({}), 'v': dyn({c})}}]",
                written.unwrap_or("''")
            );
        };
        let next = format!("c{depth}");
        let i = format!("i{depth}");
        return format!(
            "(size({c}) > 0 && type({c}[0]) == list ? lists.range(size({c}[0])).map({i}, [[{c}[0][{i}]]].map({next}, {})[0]).flatten() : [])",
            resolve(&next, Some(&step_index(written, &i)), rest, depth + 1)
        );
    }
    let (steps, rest) = path.split_at(run);
    let mut value = format!("{c}[0]");
    let mut guard = vec![format!("size({c}) > 0")];
    for segment in steps {
        match segment {
            Segment::Key(k) => {
                let k = lit(k);
                guard.push(format!("type({value}) == map && {k} in {value}"));
                value = format!("{value}[{k}]");
            }
            Segment::Index(i) => {
                guard.push(format!("type({value}) == list && size({value}) > {i}"));
                value = format!("{value}[{i}]");
            }
            Segment::AnyIndex => unreachable!("a run holds no [*]"),
        }
    }
    let found = format!("({} ? [{value}] : [])", guard.join(" && "));
    let written = run_text(written, steps);
    if rest.is_empty() {
        return format!("[{{'at': dyn({written}), 'v': dyn({found})}}]");
    }
    let next = format!("c{depth}");
    format!(
        "[{found}].map({next}, {})[0]",
        resolve(&next, Some(&written), rest, depth + 1)
    )
}

/// `written` followed by the keys and fixed indexes `steps`, their text as one literal.
fn run_text(written: Option<&str>, steps: &[Segment]) -> String {
    let mut text = String::from(if written.is_some() { "x" } else { "" });
    for segment in steps {
        super::path::push_segment(&mut text, segment);
    }
    match written {
        Some(w) => format!("{w} + {}", lit(&text[1..])),
        None => lit(&text),
    }
}

/// `v` is a number or a bool.
fn scalar(v: &str) -> String {
    format!("(type({v}) == int || type({v}) == uint || type({v}) == double || type({v}) == bool)")
}

/// A value as a message shows it.
fn show(v: &str) -> String {
    format!(
        "(type({v}) == string ? {v} : {} ? string({v}) : '<object>')",
        scalar(v)
    )
}

/// What is wrong with the (present) value `v` under `schema`, as a CEL string (`''`: nothing).
fn problem(v: &str, schema: &Schema) -> String {
    if schema.value_type == ValueType::String {
        let check = match &schema.allowed {
            Some(Allowed::Strings(options)) => format!(
                "((type({v}) == string ? {v} : string({v})) in {} ? '' : {})",
                cel::str_list(options),
                lit(&format!("is not one of {}", quoted(options)))
            ),
            _ => "''".into(),
        };
        return format!(
            "((type({v}) == string || {}) ? {check} : 'is not a string')",
            scalar(v)
        );
    }
    let mut steps = Vec::new();
    if schema.value_type == ValueType::Integer {
        steps.push(("!q.isInteger()".to_string(), lit("is not an integer")));
    }
    if let Some(max) = &schema.maximum {
        steps.push((
            format!("q.compareTo(quantity({})) > 0", lit(&max.value.to_string())),
            lit(&format!("exceeds maximum {}", max.text)),
        ));
    }
    if let Some(min) = &schema.minimum {
        steps.push((
            format!("q.compareTo(quantity({})) < 0", lit(&min.value.to_string())),
            lit(&format!("is below minimum {}", min.text)),
        ));
    }
    if let Some(Allowed::Numbers(options)) = &schema.allowed {
        let values: Vec<String> = options
            .iter()
            .map(|o| format!("quantity({})", lit(&o.value.to_string())))
            .collect();
        let shown: Vec<&str> = options.iter().map(|o| o.text.as_str()).collect();
        steps.push((
            format!("![{}].exists(o, q.compareTo(o) == 0)", values.join(", ")),
            lit(&format!("is not one of {}", shown.join(", "))),
        ));
    }
    let mut chain = "''".to_string();
    for (cond, text) in steps.into_iter().rev() {
        chain = format!("{cond} ? {text} : {chain}");
    }
    format!(
        "[type({v}) == string ? (isQuantity({v}) ? {v} : '') : (type({v}) == int || type({v}) == uint || type({v}) == double) ? string({v}) : ''].map(s, s == '' ? {} : [quantity(s)].map(q, {chain})[0])[0]",
        lit(&format!("is not {}", schema.value_type.article_name()))
    )
}

/// The violation lines of the places in `places` (a CEL list of `{'at', 'v'}`) under `schema`.
fn check_places(prefix: &str, places: &str, schema: &Schema, source: &str) -> String {
    let missing = if schema.required {
        format!(
            "[{} + e.at + {}]",
            lit(prefix),
            lit(&format!(" is missing ({source} is required)"))
        )
    } else {
        "[]".into()
    };
    format!(
        "{places}.map(e, size(e.v) == 0 || e.v[0] == null ? {missing} : [{}].filter(x, x != '').map(x, {} + e.at + '=' + {} + ' ' + x + {})).flatten()",
        problem("e.v[0]", schema),
        lit(prefix),
        show("e.v[0]"),
        lit(&format!(" ({source})")),
    )
}

/// The places a pod-template-anchored template position designates in the pod template
/// entry `p` (see `native::select::specs`): its container by name, else by position among the
/// app containers that are not sidecars (init containers by position).
fn container_places(
    list: &'static str,
    index: usize,
    name: Option<&str>,
    rest: &[Segment],
    sidecars: &[String],
) -> String {
    let items = format!("(has(p.s.{list}) ? p.s.{list} : [])");
    let base = format!("p.at + '.{list}'");
    let found = match name {
        Some(name) => format!(
            "lists.range(size(cs)).filter(j, has(cs[j].name) && cs[j].name == {})",
            lit(name)
        ),
        None if list == CONTAINER_LISTS[0] => format!(
            "lists.range(size(cs)).filter(j, !(has(cs[j].name) && cs[j].name in {}))",
            cel::str_list(sidecars)
        ),
        None => "lists.range(size(cs))".into(),
    };
    let (nth, absent) = match name {
        Some(name) => (0, format!("[name={name}]")),
        None => (index, format!("[{index}]")),
    };
    let absent_at = format!("{base} + {}", lit(&absent));
    format!(
        "[{items}].map(cs, [{found}].map(js, size(js) > {nth} ? [[cs[js[{nth}]]]].map(c0, {present})[0] : [dyn([])].map(c0, {absent})[0])[0])[0]",
        present = resolve(
            "c0",
            Some(&format!("{base} + '[' + string(js[{nth}]) + ']'")),
            rest,
            1
        ),
        absent = resolve("c0", Some(&absent_at), rest, 1),
    )
}

/// The places a position designates in every pod template `p` of `variables.specs` it binds
/// to (`role`: only the pod templates of that role).
fn pod_template_places(role: Option<&str>, body: &str) -> String {
    let binds = match role {
        Some(role) => format!(
            ".filter(p, p.role != '' && p.role.lowerAscii() == {})",
            lit(&role.to_ascii_lowercase())
        ),
        None => String::new(),
    };
    format!("variables.specs{binds}.map(p, {body}).flatten()")
}

/// The places `path` designates under each pod template map `p.t`.
fn template_path_places(path: &FieldPath) -> String {
    let Some((Segment::Key(first), rest)) = path.0.split_first() else {
        return "[]".into();
    };
    let first_step = format!(
        "p.tat + (p.tat == '' ? '' : '.') + {}",
        lit(&FieldPath(vec![Segment::Key(first.clone())]).to_string())
    );
    format!(
        "[{first} in p.t ? [p.t[{first}]] : []].map(c0, {})[0]",
        resolve("c0", Some(&first_step), rest, 1),
        first = lit(first),
    )
}

/// The places a root-anchored path designates in the object.
fn root_places(path: &FieldPath) -> String {
    format!("[[object]].map(c, {})[0]", resolve("c", None, &path.0, 1))
}

impl QueueLimits {
    /// The limits as CEL checks for queue `queue` (config key `at`), with the workload's
    /// sidecar container names; `child` is the CEL test for a verified controller-made object.
    pub fn to_cel(&self, queue: &str, at: &str, sidecars: &[String], child: &str) -> LimitsCel {
        let mut out = LimitsCel::default();
        let prefix = format!("queue {queue:?}: ");
        let workload_only = |expr: String| format!("({child} ? [] : {expr})");

        if !self.allowed_namespaces.is_empty() {
            out.check(
                rules::LIMITS_ALLOWED_NAMESPACES,
                ident!("allowedNamespaces"),
                format!(
                    "request.namespace in {} ? [] : [{} + request.namespace + {}]",
                    cel::str_list(&self.allowed_namespaces),
                    lit(&format!("{prefix}namespace \"")),
                    lit(&format!(
                        "\" is not allowed (allowedNamespaces: {})",
                        self.allowed_namespaces.join(", ")
                    ))
                ),
            );
        }

        let mut placed: Vec<VariableLimit> = Vec::new();
        for variable in &self.variables {
            let problems: Vec<String> = variable
                .locations
                .iter()
                .filter_map(|l| placeable(l, self.template_kind).err())
                .collect();
            if !problems.is_empty() {
                out.unsupported_variables.push(variable.name.clone());
                out.gaps.push((
                    format!("{at}.variables.{}", variable.name),
                    problems.join("; "),
                ));
                continue;
            }
            placed.push(variable.clone());
            let source = format!("variable {:?}", variable.name);
            for location in &variable.locations {
                let places = match location.anchor {
                    Anchor::Root => root_places(&location.path),
                    Anchor::PodTemplate => {
                        let container = container_of(&location.path);
                        let (role, name) = self.shape.binding_of(
                            &location.template_path,
                            &location.path,
                            container.map(|(l, i, _)| (l, i)),
                        );
                        let body = match container {
                            Some((list, index, rest)) => {
                                container_places(list, index, name, rest, sidecars)
                            }
                            None => template_path_places(&location.path),
                        };
                        pod_template_places(role, &body)
                    }
                };
                let places = out.place(out.next(ident!("p")), places);
                let mut check = check_places(&prefix, &places, &variable.schema, &source);
                if location.anchor == Anchor::Root {
                    // Root positions mean something only for the template's own kind.
                    let kind_test = self
                        .template_kind
                        .map(WorkloadKind::cel_test)
                        .unwrap_or_else(|| "false".into());
                    check = format!("({kind_test} ? {check} : [])");
                }
                if !super::check::is_per_pod(location.anchor, &location.path) {
                    check = workload_only(check);
                }
                let name = out.next(ident!("c"));
                out.check(rules::LIMITS_VARIABLES, name, check);
            }
        }

        for field in &self.fields {
            let places = match field.anchor {
                Anchor::Root => root_places(&field.path),
                Anchor::PodTemplate => {
                    pod_template_places(None, &template_path_places(&field.path))
                }
            };
            let places = out.place(out.next(ident!("p")), places);
            let mut check = check_places(
                &prefix,
                &places,
                &field.schema,
                &format!("field {:?}", field.written),
            );
            if !super::check::is_per_pod(field.anchor, &field.path) {
                check = workload_only(check);
            }
            out.check(rules::LIMITS_FIELDS, out.next(ident!("c")), check);
        }

        // The envelope holds every container no position looked at, from the positions placed
        // here (a variable left to the webhook bounds nothing in the compared subset either).
        let reached: Vec<String> = out
            .variables
            .iter()
            .filter(|(name, _)| name.as_str().starts_with('p'))
            .map(|(name, _)| name.reference())
            .collect();
        let reached = if reached.is_empty() {
            "[]".to_string()
        } else {
            format!("({}).map(e, e.at)", reached.join(" + "))
        };
        let reached = out.place(ident!("reached"), reached);
        for (n, ceiling) in binding::envelope(&placed, &self.fields).iter().enumerate() {
            let path = FieldPath(vec![
                Segment::Key("resources".into()),
                Segment::Key(ceiling.kind.clone()),
                Segment::Key(ceiling.resource.clone()),
            ]);
            let per_container = |list: &str| {
                format!(
                    "(has(p.s.{list}) ? lists.range(size(p.s.{list})).map(j, [[p.s.{list}[j]]].map(c0, {})[0]).flatten() : [])",
                    resolve(
                        "c0",
                        Some(&format!("p.at + '.{list}[' + string(j) + ']'")),
                        &path.0,
                        1
                    )
                )
            };
            let places = format!(
                "variables.specs.map(p, {} + {}).flatten().filter(e, size(e.v) > 0 && e.v[0] != null && !(e.at in {reached}))",
                per_container("containers"),
                per_container("initContainers")
            );
            out.check(
                ceiling.source.rule,
                ident!("envelope").numbered(n),
                check_places(
                    &prefix,
                    &places,
                    &ceiling.schema,
                    &format!("{}, which holds every container", ceiling.source.text),
                ),
            );
        }

        if !self.fixed_values.is_empty() {
            out.strict = true;
            out.gaps.push((
                format!("{at}.strict"),
                crate::rules::LIMITS_STRICT
                    .native
                    .reason()
                    .unwrap_or_default()
                    .into(),
            ));
        }

        // What the controller of a kind whose pods come from a runtime makes (the JobSet Trainer
        // makes for a TrainJob) is held to the totals too, as in the webhook: it is the first
        // object that shows the run's size.
        let trainer_jobset = crate::cel::any(
            &WorkloadKind::all()
                .filter(|k| k.spec().runtime.is_some())
                .flat_map(|k| k.spec().makes)
                .filter_map(|m| WorkloadKind::named(m.kind))
                .map(WorkloadKind::cel_test)
                .collect::<Vec<_>>(),
        );
        for total in &self.totals {
            out.check(
                rules::LIMITS_TOTALS,
                out.next(ident!("c")),
                format!(
                    "(({child}) && !({trainer_jobset}) ? [] : {})",
                    total_check(&prefix, &total.resource, &total.schema)
                ),
            );
        }

        if let Some(maximum) = self.max_active_deadline_seconds {
            out.check(
                rules::LIMITS_MAX_ACTIVE_DEADLINE_SECONDS,
                ident!("deadline"),
                workload_only(deadline_check(&prefix, maximum)),
            );
        }

        if !self.allowed_registries.is_empty() {
            out.check(
                rules::LIMITS_ALLOWED_REGISTRIES,
                ident!("registries"),
                registry_check(&prefix, &self.allowed_registries),
            );
        }
        let left: Vec<String> = out
            .unsupported_variables
            .iter()
            .map(|v| format!("variable {v:?}"))
            .collect();
        out.described = self
            .describe()
            .into_iter()
            .filter(|line| {
                !line.starts_with("strict") && !left.iter().any(|l| line.starts_with(l.as_str()))
            })
            .collect();
        out
    }
}

/// How much of `resource` a container counts (its limit, else its request), as a double.
fn amount(c: &str, resource: &str) -> String {
    let r = lit(resource);
    let qd = |x: &str| {
        format!(
            "[type({x}) == string ? {x} : (type({x}) == int || type({x}) == uint || type({x}) == double) ? string({x}) : ''].map(s, s != '' && isQuantity(s) ? quantity(s).asApproximateFloat() : 0.0)[0]"
        )
    };
    format!(
        "(has({c}.resources) && has({c}.resources.limits) && {r} in {c}.resources.limits ? {} : has({c}.resources) && has({c}.resources.requests) && {r} in {c}.resources.requests ? {} : 0.0)",
        qd(&format!("{c}.resources.limits[{r}]")),
        qd(&format!("{c}.resources.requests[{r}]")),
    )
}

/// Σ over pod templates of the pods that can run at once × the per-pod amount (the pod
/// resource formula with native sidecars), against the total's schema.
fn total_check(prefix: &str, resource: &str, schema: &Schema) -> String {
    let app = format!(
        "([0.0] + (has(p.s.containers) ? p.s.containers.map(c, {}) : [])).sum()",
        amount("c", resource)
    );
    let init = "(has(p.s.initContainers) ? p.s.initContainers : [])";
    let sidecar = |x: &str| format!("(has({x}.restartPolicy) && {x}.restartPolicy == 'Always')");
    let sidecars_before = |upto: &str| {
        format!(
            "([0.0] + lists.range({upto}).filter(k, {}).map(k, {})).sum()",
            sidecar(&format!("{init}[k]")),
            amount(&format!("{init}[k]"), resource)
        )
    };
    let init_peak = format!(
        "([0.0] + lists.range(size({init})).map(j, {} ? {} : {} + {})).max()",
        sidecar(&format!("{init}[j]")),
        sidecars_before("j + 1"),
        amount(&format!("{init}[j]"), resource),
        sidecars_before("j"),
    );
    let per_pod = format!(
        "[{app} + {}, {init_peak}].max()",
        sidecars_before(&format!("size({init})"))
    );
    let total = format!("([0.0] + variables.specs.map(p, double(p.n) * {per_pod})).sum()");
    let mut checks = Vec::new();
    if let Some(max) = &schema.maximum {
        checks.push((
            format!(
                "t > quantity({}).asApproximateFloat()",
                lit(&max.value.to_string())
            ),
            format!("exceeds maximum {}", max.text),
        ));
    }
    if let Some(min) = &schema.minimum {
        checks.push((
            format!(
                "t < quantity({}).asApproximateFloat()",
                lit(&min.value.to_string())
            ),
            format!("is below minimum {}", min.text),
        ));
    }
    let lines: Vec<String> = checks
        .into_iter()
        .map(|(cond, problem)| {
            format!(
                "({cond} ? [{} + string(t) + {}] : [])",
                lit(&format!("{prefix}total {resource} over all pods=")),
                lit(&format!(" {problem} (totals)"))
            )
        })
        .collect();
    if lines.is_empty() {
        return "[]".into();
    }
    format!("[{total}].map(t, {})[0]", lines.join(" + "))
}

/// `activeDeadlineSeconds` set (on the workload at its kind's own field, on every Job of a kind
/// whose deadline is each Job's, or on every pod template) and at most `maximum`; a kind whose
/// run nothing but deletion ends never satisfies it. The request's kind chooses
/// ([`super::check::run_deadline`], as in the webhook).
fn deadline_check(prefix: &str, maximum: i64) -> String {
    use super::check::RunDeadline;
    let set = "size(e.v) > 0 && e.v[0] != null";
    let within = format!(
        "((type(e.v[0]) == int && e.v[0] <= {maximum}) || (type(e.v[0]) == string && isQuantity(e.v[0]) && quantity(e.v[0]).compareTo(quantity('{maximum}')) <= 0))"
    );
    let places = |dotted: &str| root_places(&FieldPath::parse(dotted).unwrap_or_default());
    let pods = pod_template_places(
        None,
        &template_path_places(&FieldPath::parse("spec.activeDeadlineSeconds").unwrap_or_default()),
    );
    let missing = lit(&format!(
        "{prefix}activeDeadlineSeconds is not set; the queue allows at most {maximum} (maxActiveDeadlineSeconds), so set it on the workload or on every pod template"
    ));
    let shape = |deadline: &RunDeadline| -> String {
        // Any of `rs` set, or every one of `js` (each Job's) or of `ps` (each pod template's).
        let (rs, js) = match deadline {
            RunDeadline::Run(dotted) => (places(dotted), "[]".to_string()),
            RunDeadline::EachJob(paths) => (
                "[]".to_string(),
                paths
                    .iter()
                    .map(|p| places(p))
                    .collect::<Vec<_>>()
                    .join(" + "),
            ),
            RunDeadline::Pods => ("[]".to_string(), "[]".to_string()),
            RunDeadline::Never { why, set } => {
                return format!(
                    "[{}]",
                    lit(&format!(
                        "{prefix}{why}, so no deadline bounds it; the queue allows at most {maximum} (maxActiveDeadlineSeconds): use {set}"
                    ))
                );
            }
        };
        format!(
            "[{rs}].map(rs, [{js}].map(js, [{pods}].map(ps, (rs.exists(e, {set}) || (size(js) > 0 && js.all(e, {set})) || (size(ps) > 0 && ps.all(e, {set})) ? [] : [{missing}]) + (rs + js + ps).filter(e, {set} && !{within}).map(e, {p} + e.at + '=' + {shown} + {over}))[0])[0])[0]",
            p = lit(prefix),
            shown = show("e.v[0]"),
            over = lit(&format!(
                " exceeds maximum {maximum} (maxActiveDeadlineSeconds)"
            )),
        )
    };
    // The kinds by the place of their deadline, in the registry's order.
    let mut shapes: Vec<(RunDeadline, Vec<String>)> = Vec::new();
    for kind in WorkloadKind::all() {
        let deadline = super::check::run_deadline(kind);
        match shapes.iter_mut().find(|(d, _)| *d == deadline) {
            Some((_, tests)) => tests.push(kind.cel_test()),
            None => shapes.push((deadline, vec![kind.cel_test()])),
        }
    }
    let mut out = "[]".to_string();
    for (deadline, tests) in shapes.iter().rev() {
        out = format!("({}) ? {} : {out}", crate::cel::any(tests), shape(deadline));
    }
    out
}

/// Every container image (app, init, ephemeral) from one of the normalised `prefixes`.
fn registry_check(prefix: &str, prefixes: &[String]) -> String {
    let normalised = "[x.c.image.split('/')[0]].map(first, !x.c.image.contains('/') ? 'docker.io/library/' + x.c.image : (first.contains('.') || first.contains(':') || first == 'localhost') ? x.c.image : 'docker.io/' + x.c.image)[0]";
    let allowed = format!(
        "[{normalised}].map(img, {}.exists(pre, img == pre || (img.startsWith(pre) && (img.substring(size(pre)).startsWith('/') || img.substring(size(pre)).startsWith(':') || img.substring(size(pre)).startsWith('@')))))[0]",
        cel::str_list(prefixes)
    );
    let containers = "variables.specs.map(p, ['containers', 'initContainers', 'ephemeralContainers'].map(l, l in p.s ? lists.range(size(p.s[l])).map(i, {'at': dyn(p.at + '.' + l + '[' + string(i) + '].image'), 'c': dyn(p.s[l][i])}) : []).flatten()).flatten()";
    format!(
        "{containers}.map(x, !has(x.c.image) || type(x.c.image) != string ? [{p} + x.at + '=<none>' + {tail}] : {allowed} ? [] : [{p} + x.at + '=\"' + x.c.image + '\"' + {tail}]).flatten()",
        p = lit(prefix),
        tail = lit(&format!(
            " is not from an allowed registry (allowedRegistries: {})",
            prefixes.join(", ")
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::eval::{V, eval};
    use crate::validate::path::{self, FieldPath};
    use serde_json::json;

    /// The compiled place walk designates the places, and reads the values, that the webhook's
    /// path walk does: on well-formed values, on values of the wrong type at every step, and
    /// on absent ones.
    #[test]
    fn compiled_places_are_the_path_walks() {
        let documents = [
            json!({"resources": {"limits": {"cpu": "2", "nvidia.com/gpu": 4}}, "env": [
                {"name": "A", "value": "1"}, {"name": "B"}, "x"], "ports": [{"containerPort": 80}],
                "args": ["a", 1, null], "a": [{"b": [0, {"c": true}]}, {"b": "no"}, {}]}),
            json!({"resources": "none", "env": {"name": "A"}, "ports": [], "args": "x", "a": [[]]}),
            json!({"resources": {"limits": ["cpu"]}, "env": [], "ports": [1], "a": [{"b": [1]}]}),
            json!({"resources": {"limits": null}}),
            json!({}),
            json!(7),
        ];
        let paths = [
            "resources.limits.cpu",
            "resources.limits[\"nvidia.com/gpu\"]",
            "env[*].value",
            "env[*]",
            "ports[0].containerPort",
            "args[*]",
            "a[*].b[1].c",
            "a[*].b[*]",
            "resources",
        ];
        for text in paths {
            let field = FieldPath::parse(text).unwrap();
            let cel = resolve("c", Some("'spec'"), &field.0, 0);
            for doc in &documents {
                let want: Vec<V> = path::resolve(doc, "spec", &field.0)
                    .into_iter()
                    .map(|(at, v)| {
                        V::Map(vec![
                            (V::Str("at".into()), V::Str(at)),
                            (
                                V::Str("v".into()),
                                V::List(v.map(V::from_json).into_iter().collect()),
                            ),
                        ])
                    })
                    .collect();
                let got = eval(&cel, &[("c", V::List(vec![V::from_json(doc)]))])
                    .unwrap_or_else(|e| panic!("{text} on {doc}: {e}\n{cel}"));
                assert_eq!(got, V::List(want), "{text} on {doc}");
            }
        }
    }
}
