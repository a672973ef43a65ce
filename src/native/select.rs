//! Which requests a queue's native policies act on, in CEL: the same decisions as the webhook's
//! launch-workload test, queue resolution, exemptions and controller verification
//! (`policy::resolve`, `policy::exemption`, `policy::owner`), written as `matchConditions` and
//! variables.

use crate::cel::{self, Identifier, lit};
use crate::kinds::{Cond, From, Holders, Naming, Num, Position, RoleMark};
use crate::policy::{EXEMPTED_BY_ANNOTATION, Exemption, OWN_NAME, Policy, Queue, owner_mark};
use crate::workload::WorkloadKind;

/// The kinds native policies cover: those whose descriptor says so
/// ([`crate::kinds::KindSpec::native`]), in [`crate::kinds::ALL`]'s order.
pub fn kinds() -> impl Iterator<Item = WorkloadKind> {
    WorkloadKind::all().filter(|k| k.spec().native.is_ok())
}

/// `base` followed by the field `key` (a map index where the key is no CEL identifier).
fn sel(base: &str, key: &str) -> String {
    if cel::is_identifier(key) {
        format!("{base}.{key}")
    } else {
        format!("{base}[{}]", lit(key))
    }
}

/// True when the map `base` has the field `key`.
fn has(base: &str, key: &str) -> String {
    if cel::is_identifier(key) {
        format!("has({base}.{key})")
    } else {
        format!("{} in {base}", lit(key))
    }
}

/// The field `at` under `base`, and the tests that each step of it exists (in order, so each
/// may be evaluated only when the ones before it hold).
pub(crate) fn reach(base: &str, at: &[&str]) -> (String, Vec<String>) {
    let mut value = base.to_string();
    let mut steps = Vec::new();
    for key in at {
        steps.push(has(&value, key));
        value = sel(&value, key);
    }
    (value, steps)
}

/// A CEL integer literal (`i64::MIN` has none: it is written as a difference).
fn int(n: i64) -> String {
    if n == i64::MIN {
        format!("({} - 1)", i64::MIN + 1)
    } else {
        n.to_string()
    }
}

/// Which object of the request a compiled expression reads: the request's object, or the
/// object as it was before an UPDATE. One generator reads either, so what is decided of the
/// old object (was it a launch workload of this queue?) is decided as of the new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    /// `object`.
    Object,
    /// `oldObject` (an UPDATE's; null on CREATE).
    Old,
}

impl Root {
    /// The CEL variable.
    pub fn cel(self) -> &'static str {
        match self {
            Root::Object => "object",
            Root::Old => "oldObject",
        }
    }
}

/// Where a compiled [`Num`] or [`Cond`] reads: the object's root, the holder of the position,
/// and the CEL variable holding the holder's map key (a [`Holders::Keyed`] holder).
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    pub root: Root,
    pub holder: &'a str,
    pub key: Option<&'a str>,
}

impl Scope<'_> {
    fn base(&self, from: From) -> &str {
        match from {
            From::Holder => self.holder,
            From::Object => self.root.cel(),
        }
    }
}

/// A count in CEL: the same value as [`Num::eval`] for the holder in `scope` (a product and
/// a difference saturate, as in Rust, where CEL's would be an error). The items of the lists it
/// combines counts in are `dyn`: the API server's CEL wants one type per list literal, and a
/// field of an object it does not type (a policy over several kinds), or of an int-or-string
/// field, is `dyn` where a literal is `int`.
pub fn num(n: &Num, scope: Scope) -> String {
    match n {
        Num::Lit(v) => int(*v),
        Num::Int { from, at, default } => {
            let (value, mut steps) = reach(scope.base(*from), at);
            steps.push(format!("type({value}) == int"));
            format!("({} ? {value} : {})", steps.join(" && "), int(*default))
        }
        Num::Min(a, b) => format!("[dyn({}), dyn({})].min()", num(a, scope), num(b, scope)),
        Num::Max(a, b) => format!("[dyn({}), dyn({})].max()", num(a, scope), num(b, scope)),
        Num::Mul(a, b) => {
            let (max, min) = (int(i64::MAX), int(i64::MIN));
            format!(
                "[[dyn({}), dyn({})]].map(v, v[0] == 0 || v[1] == 0 ? 0 : v[0] > 0 && v[1] > 0 ? (v[0] > {max} / v[1] ? {max} : v[0] * v[1]) : v[0] < 0 && v[1] < 0 ? (v[0] < {max} / v[1] ? {max} : v[0] * v[1]) : v[0] > 0 ? (v[1] < {min} / v[0] ? {min} : v[0] * v[1]) : (v[0] < {min} / v[1] ? {min} : v[0] * v[1]))[0]",
                num(a, scope),
                num(b, scope)
            )
        }
        Num::Add(a, b) => {
            let (max, min) = (int(i64::MAX), int(i64::MIN));
            format!(
                "[[dyn({}), dyn({})]].map(v, v[1] > 0 ? (v[0] > {max} - v[1] ? {max} : v[0] + v[1]) : (v[0] < {min} - v[1] ? {min} : v[0] + v[1]))[0]",
                num(a, scope),
                num(b, scope)
            )
        }
        Num::Sub(a, b) => {
            let (max, min) = (int(i64::MAX), int(i64::MIN));
            format!(
                "[[dyn({}), dyn({})]].map(v, v[1] < 0 ? (v[0] > {max} + v[1] ? {max} : v[0] - v[1]) : (v[0] < {min} + v[1] ? {min} : v[0] - v[1]))[0]",
                num(a, scope),
                num(b, scope)
            )
        }
        Num::If {
            when,
            then,
            otherwise,
        } => format!(
            "({} ? {} : {})",
            cond(when, scope),
            num(then, scope),
            num(otherwise, scope)
        ),
        Num::Scaled {
            from,
            at,
            of,
            default,
        } => {
            let (value, steps) = reach(scope.base(*from), at);
            let reached = steps.join(" && ");
            // `N%`: every character but the last a digit (each digit removed, `%` is left).
            let digits = (0..10).fold(value.clone(), |text, d| {
                format!("{text}.replace('{d}', '')")
            });
            format!(
                "({reached} && type({value}) == int ? {value} : {reached} && type({value}) == string && size({value}) >= 2 && size({value}) <= {most} && {value}.endsWith('%') && {digits} == '%' ? [[dyn(int({value}.replace('%', ''))), dyn({of})]].map(p, (p[0] * (p[1] < 0 ? 0 : p[1] > {max} ? {max} : p[1]) + 99) / 100)[0] : {default})",
                most = crate::kinds::PERCENT_DIGITS + 1,
                of = num(of, scope),
                max = i32::MAX,
                default = int(*default),
            )
        }
    }
}

/// A condition in CEL: the same as [`Cond::holds`] for the holder in `scope`.
pub fn cond(c: &Cond, scope: Scope) -> String {
    match c {
        Cond::True { from, at } => {
            let (value, mut steps) = reach(scope.base(*from), at);
            steps.push(format!("type({value}) == bool"));
            steps.push(value);
            format!("({})", steps.join(" && "))
        }
        Cond::Has { from, at } => {
            let (value, mut steps) = reach(scope.base(*from), at);
            steps.push(format!("{value} != null"));
            format!("({})", steps.join(" && "))
        }
        Cond::OneOf { from, at, any_of } => {
            let (value, mut steps) = reach(scope.base(*from), at);
            steps.push(format!("type({value}) == string"));
            steps.push(format!(
                "{value} in [{}]",
                any_of.iter().map(|v| lit(v)).collect::<Vec<_>>().join(", ")
            ));
            format!("({})", steps.join(" && "))
        }
        Cond::KeyIs(want) => match scope.key {
            Some(k) => format!("{k}.lowerAscii() == {}", lit(&want.to_ascii_lowercase())),
            None => "false".into(),
        },
    }
}

/// A CEL string concatenation of literal text and string expressions.
#[derive(Default)]
struct Text(Vec<(bool, String)>);

impl Text {
    fn lit(mut self, text: &str) -> Self {
        if text.is_empty() {
            return self;
        }
        match self.0.last_mut() {
            Some((true, last)) => last.push_str(text),
            _ => self.0.push((true, text.to_string())),
        }
        self
    }

    fn expr(mut self, expr: String) -> Self {
        self.0.push((false, expr));
        self
    }

    fn cel(&self) -> String {
        if self.0.is_empty() {
            return "''".into();
        }
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(is_lit, t)| if *is_lit { lit(t) } else { t.clone() })
            .collect();
        parts.join(" + ")
    }
}

/// The map `map`'s keys in the order launchgate reads a [`Holders::Keyed`] position
/// ([`crate::workload::replica_types_in_order`]: byte order). CEL iterates a map in no defined
/// order, so every expression that walks such a map walks this list.
pub fn keyed_order(map: &str) -> String {
    format!("{map}.map(k, string(k)).sort()")
}

/// One holder of a position, inside a compiled walk over the position's holders.
pub struct Place {
    /// The object walked.
    pub root: Root,
    /// The position.
    pub position: &'static Position,
    /// The holder (a CEL map; `object` for a Pod).
    pub holder: String,
    /// The CEL variable holding the holder's map key ([`Holders::Keyed`]).
    pub key: Option<&'static str>,
    /// The pod template (a CEL map).
    pub template: String,
    /// The template's dotted path, as [`crate::workload::TemplateInfo::path`] (a CEL string).
    path: Text,
    /// The template's JSON Pointer (a CEL string).
    pointer: Text,
}

impl Place {
    /// The template's dotted path (a CEL string).
    pub fn path(&self) -> String {
        self.path.cel()
    }

    /// The dotted path of the template's pod spec (a CEL string).
    pub fn spec_path(&self) -> String {
        match self.position.holders {
            Holders::Root => lit("spec"),
            _ => Text(self.path.0.clone()).lit(".spec").cel(),
        }
    }

    /// The template's JSON Pointer (a CEL string).
    pub fn pointer(&self) -> String {
        self.pointer.cel()
    }

    /// The JSON Pointer of the template's pod spec (a CEL string).
    pub fn spec_pointer(&self) -> String {
        Text(self.pointer.0.clone()).lit("/spec").cel()
    }

    /// The holder's name a queue template's holder binds by ([`Naming`]), or `''`.
    pub fn name(&self) -> String {
        match self.position.naming {
            Naming::None => "''".into(),
            Naming::Field(f) => {
                let value = sel(&self.holder, f);
                format!(
                    "({} && type({value}) == string ? {value} : '')",
                    has(&self.holder, f)
                )
            }
            Naming::Key => self.key.unwrap_or("''").to_string(),
        }
    }

    /// How many pods of this holder can run at once ([`Position::at_most`]), never below 0.
    pub fn at_most(&self) -> String {
        let n = num(
            &self.position.at_most,
            Scope {
                root: self.root,
                holder: &self.holder,
                key: self.key,
            },
        );
        format!("[{n}].map(n, n < 0 ? 0 : n)[0]")
    }
}

/// The list of `body`'s values for every holder of `position` in `root` whose template has the
/// fields `needs`, in the order the Rust walk visits them ([`crate::workload::templates`]).
pub fn walk(
    root: Root,
    position: &'static Position,
    needs: &[&str],
    body: impl Fn(&Place) -> String,
) -> String {
    let at = position.holders.path();
    let (holders, guard) = reach(root.cel(), at);
    let mut path = Text::default().lit(&at.join("."));
    let mut pointer = Text::default();
    for key in at {
        pointer = pointer.lit(&format!("/{}", crate::json::escape(key)));
    }
    let (holder, key, var) = match position.holders {
        Holders::Root | Holders::At(_) => (holders.clone(), None, None),
        Holders::Each(_) => {
            path = path.lit("[").expr("string(i)".into()).lit("]");
            pointer = pointer.lit("/").expr("string(i)".into());
            (format!("{holders}[i]"), None, Some("i"))
        }
        Holders::Keyed(_) => {
            path = path.lit(".").expr("k".into());
            pointer = pointer.lit("/").expr(cel::pointer_segment("k"));
            (format!("{holders}[k]"), Some("k"), Some("k"))
        }
    };
    let mut template_at: Vec<&str> = position.template.to_vec();
    for key in position.template {
        let dot = if path.0.is_empty() { "" } else { "." };
        path = path.lit(&format!("{dot}{key}"));
        pointer = pointer.lit(&format!("/{}", crate::json::escape(key)));
    }
    let (template, _) = reach(&holder, position.template);
    template_at.extend(needs);
    let (_, exists) = reach(&holder, &template_at);
    let place = Place {
        root,
        position,
        holder: holder.clone(),
        key,
        template,
        path,
        pointer,
    };
    let body = body(&place);
    match (position.holders, var) {
        (Holders::Each(_), Some(i)) => format!(
            "({} ? lists.range(size({holders})).filter({i}, {}).map({i}, {body}) : [])",
            cel::all(&guard),
            cel::all(&exists)
        ),
        (Holders::Keyed(_), Some(k)) => format!(
            "({} ? {}.filter({k}, {}).map({k}, {body}) : [])",
            cel::all(&guard),
            keyed_order(&holders),
            cel::all(&exists)
        ),
        _ => {
            let mut all = guard;
            all.extend(exists);
            format!("({} ? [{body}] : [])", cel::all(&all))
        }
    }
}

/// Per covered kind, `each` of its positions joined (`None`: nothing for the kind), chosen by
/// the request's kind; `[]` for any other.
fn by_kind(each: impl Fn(&'static Position) -> Option<String>) -> String {
    let mut out = String::from("(");
    for kind in kinds() {
        let lists: Vec<String> = kind.spec().positions.iter().filter_map(&each).collect();
        if !lists.is_empty() {
            out.push_str(&format!("{} ? {} : ", kind.cel_test(), lists.join(" + ")));
        }
    }
    out.push_str("[])");
    out
}

/// `body` for every pod template of the workload `root`; none for a Pod.
fn each_template(root: Root, body: impl Fn(&Place) -> String + Copy) -> String {
    by_kind(|position| {
        (!matches!(position.holders, Holders::Root)).then(|| walk(root, position, &[], body))
    })
}

/// The pod templates of the workload `root` (maps with `metadata` and `spec`); none for a Pod.
pub fn templates(root: Root) -> String {
    each_template(root, |p| p.template.clone())
}

/// Every pod template of the workload with its JSON Pointer: `{'t': the template, 'ptr': its
/// JSON Pointer}`; none for a Pod.
pub fn template_pointers() -> String {
    each_template(Root::Object, |p| {
        format!("{{'t': dyn({}), 'ptr': dyn({})}}", p.template, p.pointer())
    })
}

/// Where launch and queue labels are read: the object `root` and its pod templates.
pub fn carriers(root: Root) -> String {
    format!("([{}] + {})", root.cel(), templates(root))
}

/// What a bare Pod carries of the holder it was made for ([`crate::kinds::KindSpec::role_marks`]
/// of every kind, in order), or `''`.
fn pod_role(root: Root) -> String {
    let object = root.cel();
    let found: Vec<String> = WorkloadKind::all()
        .flat_map(|k| k.spec().role_marks)
        .map(|carried| {
            let (field, key) = match carried {
                RoleMark::Label(key) => ("labels", lit(key)),
                RoleMark::Annotation(key) => ("annotations", lit(key)),
            };
            format!(
                "(has({object}.metadata.{field}) && {key} in {object}.metadata.{field} ? [{object}.metadata.{field}[{key}]] : [])"
            )
        })
        .collect();
    if found.is_empty() {
        return "''".into();
    }
    format!("[{}].map(r, size(r) > 0 ? r[0] : '')[0]", found.join(" + "))
}

/// Every pod template of the workload `root` as `{'tat': its dotted path, 't': the template,
/// 'at': its spec's dotted path, 'ptr': its spec's JSON Pointer, 's': the spec, 'role': the
/// name of its holder (a Volcano task, a PyTorchJob replica type, a replicated job), or what a
/// Pod carries of one, 'n': how many of its pods can run at once}`.
pub fn specs(root: Root) -> String {
    by_kind(|position| {
        Some(walk(root, position, &["spec"], |p| {
            let role = match position.holders {
                Holders::Root => pod_role(root),
                _ => p.name(),
            };
            format!(
                "{{'tat': dyn({}), 't': dyn({t}), 'at': dyn({}), 'ptr': dyn({}), 's': dyn({t}.spec), 'role': dyn({role}), 'n': dyn({})}}",
                p.path(),
                p.spec_path(),
                p.spec_pointer(),
                p.at_most(),
                t = p.template,
            )
        }))
    })
}

/// Every container of the pod spec `spec`: app containers, then init containers.
fn spec_containers(spec: &str) -> String {
    format!(
        "((has({spec}.containers) ? {spec}.containers : []) + (has({spec}.initContainers) ? {spec}.initContainers : []))"
    )
}

/// True when a map (an object or template) carries label `key`.
fn has_label(map: &str, key: &str) -> String {
    format!(
        "(has({map}.metadata) && has({map}.metadata.labels) && {} in {map}.metadata.labels)",
        lit(key)
    )
}

/// A launch workload: the object `root` or one of its pod templates carries a launch or queue
/// label (never only a label that names the queue, `match.queueNameLabels`).
pub fn is_launch(policy: &Policy, root: Root) -> String {
    carries_label(&launch_label_keys(policy), root)
}

/// The labels that make a launch workload: the launch labels and the queue labels
/// ([`crate::policy::MatchRules::marking_labels`], as the webhook's `Policy::classify`).
pub fn launch_label_keys(policy: &Policy) -> Vec<&String> {
    policy.config.match_rules.marking_labels().collect()
}

/// True when the object `root` or one of its pod templates carries one of the labels `keys`.
pub fn carries_label<S: AsRef<str>>(keys: &[S], root: Root) -> String {
    if keys.is_empty() {
        return "false".into();
    }
    format!(
        "{}.exists(c, has(c.metadata) && has(c.metadata.labels) && {}.exists(k, k in c.metadata.labels))",
        carriers(root),
        cel::str_list(keys)
    )
}

/// The value of env var `name` as the first container of the workload `root` that sets it
/// non-empty sees it (the last entry of that name), or `''`. (It walks the pod specs alone,
/// not [`specs`]: the queue is read on every request, of the old object too.)
fn env_value(name: &str, root: Root) -> String {
    let n = lit(name);
    format!(
        "[{specs}.map(s, {containers}).flatten().filter(c, has(c.env) && c.env.exists(e, e.name == {n})).map(c, c.env.filter(e, e.name == {n})[size(c.env.filter(e, e.name == {n})) - 1]).map(e, has(e.value) ? e.value : '').filter(v, v != '')].map(vs, size(vs) > 0 ? vs[0] : '')[0]",
        specs = pod_specs(root),
        containers = spec_containers("s"),
    )
}

/// The queue named by the queue labels, then the labels that only name it, of the workload
/// `root` (first key found on the object or a template, when non-empty), or `''`.
pub fn label_value(policy: &Policy, root: Root) -> String {
    let keys: Vec<&String> = policy.config.match_rules.naming_labels().collect();
    if keys.is_empty() {
        return "''".into();
    }
    // The carriers are walked once (bound to `cs`), not once per key.
    format!(
        "[{carriers}].map(cs, [{keys}.map(k, cs.filter(c, has(c.metadata) && has(c.metadata.labels) && k in c.metadata.labels).map(c, c.metadata.labels[k])).filter(vs, size(vs) > 0 && vs[0] != '').map(vs, vs[0])].map(found, size(found) > 0 ? found[0] : '')[0])[0]",
        keys = cel::str_list(&keys),
        carriers = carriers(root),
    )
}

/// The config key of the queue the launch workload `root` belongs to, or `''`: the same order
/// as the webhook (queue label, container env with the entity, namespace default, global
/// default).
pub fn queue_key(policy: &Policy, root: Root) -> String {
    let direct = cel::str_map(policy.queues.keys().map(|k| (k.as_str(), k.as_str())));
    // A label value launchgate wrote for a queue name that is no label value.
    let mut by_label: Vec<(String, String)> = Vec::new();
    for q in policy.queues.values() {
        let value = crate::mutate::labels::queue_label_value(&q.name);
        if value != q.name
            && !policy.queues.contains_key(value.as_ref())
            && !by_label.iter().any(|(v, _)| *v == value)
        {
            by_label.push((value.into_owned(), q.key.clone()));
        }
    }
    // A name configured only as `entity/name`, under exactly one entity.
    let scoped: Vec<&Queue> = policy
        .queues
        .values()
        .filter(|q| q.entity.is_some())
        .collect();
    let unique = scoped
        .iter()
        .filter(|q| scoped.iter().filter(|o| o.name == q.name).count() == 1)
        .map(|q| (q.name.as_str(), q.key.as_str()));
    let by_label = cel::str_map(by_label);
    let unique = cel::str_map(unique);
    let requested = format!(
        "[{}].map(l, l != '' ? l : {})[0]",
        label_value(policy, root),
        policy
            .config
            .match_rules
            .queue_env
            .as_deref()
            .map_or("''".into(), |env| env_value(env, root))
    );
    let entity = policy
        .config
        .match_rules
        .queue_entity_env
        .as_deref()
        .map_or("''".into(), |env| env_value(env, root));
    // Without a queue configured under an entity, the entity changes nothing (no `e/r` key,
    // no name unique to one entity): it is not read at all.
    let lookup = if policy.queues.values().all(|q| q.entity.is_none()) {
        format!(
            "r == '' ? '' : r.contains('/') ? (r in {direct} ? r : '') : r in {direct} ? r : r in {by_label} ? {by_label}[r] : ''"
        )
    } else {
        format!(
            "r == '' ? '' : r.contains('/') ? (r in {direct} ? r : '') : \
             [{entity}].map(e, (e != '' && (e + '/' + r) in {direct}) ? e + '/' + r : r in {direct} ? r : r in {by_label} ? {by_label}[r] : e != '' ? '' : r in {unique} ? {unique}[r] : '')[0]"
        )
    };
    let namespaces = cel::str_map(
        policy
            .config
            .namespace_queues
            .iter()
            .map(|(ns, q)| (ns.as_str(), q.as_str())),
    );
    let fallback = format!(
        "(request.namespace in {namespaces} ? {namespaces}[request.namespace] : {})",
        lit(policy.config.default_queue.as_deref().unwrap_or_default())
    );
    format!(
        "[[{requested}].map(r, {lookup})[0]].map(k, k != '' ? k : [{fallback}].map(f, f in {direct} ? f : '')[0])[0]"
    )
}

/// The request's service account as `namespace/name`, or `''`.
const SERVICE_ACCOUNT: &str = "(request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.substring(22).contains(':') ? request.userInfo.username.substring(22).replace(':', '/', 1) : '')";

/// True when exemption `e` applies to the request (who, where, and the labels it narrows to).
fn exemption_applies(e: &Exemption) -> String {
    let mut parts = Vec::new();
    if !(e.users.is_empty() && e.groups.is_empty() && e.service_accounts.is_empty()) {
        let mut who = vec![cel::any_wildcard(&e.users, "request.userInfo.username")];
        if !e.groups.is_empty() {
            who.push(format!(
                "request.userInfo.groups.exists(g, {})",
                cel::any_wildcard(&e.groups, "g")
            ));
        }
        if !e.service_accounts.is_empty() {
            who.push(format!(
                "({SERVICE_ACCOUNT} != '' && {})",
                cel::any_wildcard(&e.service_accounts, SERVICE_ACCOUNT)
            ));
        }
        parts.push(cel::any(&who));
    }
    if !e.namespaces.is_empty() {
        parts.push(cel::any_wildcard(&e.namespaces, "request.namespace"));
    }
    // On the object itself, not on a pod template.
    for (k, v) in &e.labels {
        parts.push(format!(
            "({} && object.metadata.labels[{}] == {})",
            has_label("object", k),
            lit(k),
            lit(v)
        ));
    }
    if !e.images.is_empty() {
        // Every container (of every pod spec, and there is one) runs one of the images with
        // the image's own entrypoint.
        let containers = spec_containers("s");
        let fits = format!(
            "{}.all(s, {containers}.all(c, {} && !has(c.command)))",
            pod_specs(Root::Object),
            cel::any_wildcard(&e.images, "(has(c.image) ? c.image : '')")
        );
        let some = format!(
            "{}.exists(s, size({containers}) > 0)",
            pod_specs(Root::Object)
        );
        parts.push(format!("({fits} && {some})"));
    }
    cel::all(&parts)
}

/// The pod specs of the object `root`: a Pod's own, a workload's templates', in the order of
/// [`specs`].
fn pod_specs(root: Root) -> String {
    by_kind(|position| {
        Some(walk(root, position, &["spec"], |p| {
            format!("{}.spec", p.template)
        }))
    })
}

/// True when one of `exemptions` applies.
pub fn exempt(exemptions: &[Exemption]) -> String {
    let each: Vec<String> = exemptions.iter().map(exemption_applies).collect();
    cel::any(&each)
}

/// True when the object is verifiably made by its launch workload's controller (a pod of a
/// Job, Volcano Job or PyTorchJob; a Job of a JobSet; the JobSet of a TrainJob): its first
/// controller owner reference of a launch kind names an owner kind whose controller
/// (`match.podCreators`) sends the request, and it carries that controller's mark of the owner.
pub fn is_verified_child(policy: &Policy) -> String {
    let creators = &policy.config.match_rules.pod_creators;
    let launch_ref = {
        let kinds: Vec<String> = WorkloadKind::all()
            .map(|k| {
                format!(
                    "(r.apiVersion == {} && r.kind == {})",
                    lit(&k.api_version()),
                    lit(k.api_kind())
                )
            })
            .collect();
        cel::any(&kinds)
    };
    let mut per_kind = Vec::new();
    for kind in kinds() {
        let mut claims = Vec::new();
        for owner in kind.made_by() {
            let (keys, field) = owner_mark(owner, kind);
            let users = creators
                .get(owner.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            let expected = format!("r.{field}");
            let each: Vec<String> = keys
                    .iter()
                    .map(|&k| {
                        if k == OWN_NAME {
                            return format!("(has(object.metadata.name) && object.metadata.name == {expected})");
                        }
                        let k = lit(k);
                        // Parenthesised whole: the mark is one operand of the claim's `&&`.
                        format!(
                            "((has(object.metadata.labels) && {k} in object.metadata.labels && object.metadata.labels[{k}] == {expected}) || (has(object.metadata.annotations) && {k} in object.metadata.annotations && object.metadata.annotations[{k}] == {expected}))"
                        )
                    })
                    .collect();
            let mark = cel::any(&each);
            claims.push(format!(
                "(r.apiVersion == {} && r.kind == {} && {} && has(r.{field}) && r.{field} != '' && {mark})",
                lit(&owner.api_version()),
                lit(owner.api_kind()),
                cel::any_wildcard(users, "request.userInfo.username"),
            ));
        }
        if claims.is_empty() {
            continue;
        }
        per_kind.push(format!(
            "({} && has(object.metadata.ownerReferences) && [object.metadata.ownerReferences.filter(r, has(r.controller) && r.controller == true && {launch_ref})].map(rs, size(rs) > 0 && [rs[0]].map(r, {})[0])[0])",
            kind.cel_test(),
            cel::any(&claims)
        ));
    }
    cel::any(&per_kind)
}

/// The `matchConditions` every policy of `queue` carries: a launch workload of this queue
/// ([`in_queue`], one condition each), not exempted. (A matchCondition cannot read policy
/// variables, so each is self-contained.)
pub fn match_conditions(policy: &Policy, queue: &Queue) -> Vec<(String, String)> {
    let mut out = vec![
        (
            "launch-workload".to_string(),
            is_launch(policy, Root::Object),
        ),
        ("queue".to_string(), of_queue(policy, queue, Root::Object)),
    ];
    let global = &policy.config.match_rules.exemptions;
    if !global.is_empty() {
        out.push(("not-exempt".into(), format!("!{}", exempt(global))));
    }
    if !queue.config.exemptions.is_empty() {
        out.push((
            "not-exempt-by-queue".into(),
            format!("!{}", exempt(&queue.config.exemptions)),
        ));
    }
    let all: Vec<&Exemption> = global.iter().chain(&queue.config.exemptions).collect();
    if !all.is_empty() {
        out.push((
            "not-exempt-by-owner".into(),
            format!("!({} && {})", is_verified_child(policy), inherits(&all)),
        ));
    }
    out
}

/// True when the queue `root` resolves to is `queue` (whether it is a launch workload is
/// [`is_launch`]'s).
fn of_queue(policy: &Policy, queue: &Queue, root: Root) -> String {
    format!("{} == {}", queue_key(policy, root), lit(&queue.key))
}

/// True when `root` is a launch workload of `queue`: the policies' matchConditions on the
/// request's object, and on an UPDATE's old object what decides whether the UPDATE is judged
/// against it (`Policy::in_queue`, the webhook's test).
pub fn in_queue(policy: &Policy, queue: &Queue, root: Root) -> String {
    format!(
        "({} && {})",
        is_launch(policy, root),
        of_queue(policy, queue, root)
    )
}

/// An UPDATE that brings the object into `queue`: the old object was no launch workload of it
/// (none at all, or another queue's: [`in_queue`] of `oldObject`), so nothing of it was judged
/// here and the UPDATE is judged as a CREATE, by every rule, as the webhook judges it
/// (`review::select::admitted_before`). The policies bind it to [`ENTERS_QUEUE`].
pub fn enters_queue(policy: &Policy, queue: &Queue) -> String {
    format!(
        "request.operation == 'UPDATE' && !{}",
        in_queue(policy, queue, Root::Old)
    )
}

/// The policy variable holding [`enters_queue`].
pub const ENTERS_QUEUE: Identifier = Identifier::new("entersQueue");

/// An UPDATE of an exempt workload — the old object carries launchgate's mark on itself, which
/// launchgate writes with those of its pod templates — from a requester no exemption covers
/// (the policies' matchConditions leave out the ones that are) that is neither a verified
/// controller's child nor a controller of `match.workloadUpdaters` (Kueue admitting the run):
/// judged as that requester's CREATE, as the webhook judges it. An exemption belongs to the
/// requesters it names, not to the object. (An old object that was not in the queue makes the
/// UPDATE one that [enters it](enters_queue), judged as a CREATE whoever sends it.)
pub fn update_outside_exemption(policy: &Policy) -> String {
    let key = lit(EXEMPTED_BY_ANNOTATION);
    format!(
        "(request.operation == 'UPDATE' && !variables.child && has(oldObject.metadata) && has(oldObject.metadata.annotations) && {key} in oldObject.metadata.annotations && !{updater})",
        updater = workload_updater(policy)
    )
}

/// True when the request is judged as a CREATE: a CREATE, an UPDATE that [enters the
/// queue](enters_queue), and, where an exemption can be inherited, an UPDATE [outside the
/// exemption](update_outside_exemption) that admitted the workload. Any other UPDATE is of
/// what was admitted in the queue: the webhook compares it with the old object, the native
/// policies leave it alone.
pub fn judged_as_create(policy: &Policy) -> String {
    let mut parts = vec![
        "request.operation == 'CREATE'".to_string(),
        ENTERS_QUEUE.reference(),
    ];
    if policy.exemptions_configured() {
        parts.push(update_outside_exemption(policy));
    }
    cel::any(&parts)
}

/// True when the request comes from a controller of `match.workloadUpdaters`.
fn workload_updater(policy: &Policy) -> String {
    cel::any_wildcard(
        &policy.config.match_rules.workload_updaters,
        "request.userInfo.username",
    )
}

/// Where an exemption can be inherited (any is configured): a CEL test that passes unless the
/// workload — not a verified controller's child — carries launchgate's exemption mark that the
/// native policies cannot prove launchgate wrote, and the message for it. A mark is kept only by
/// an UPDATE of a workload that already was a launch workload of the queue (it does not
/// [enter it](enters_queue)) and carried the same mark on itself, from a controller of
/// `match.workloadUpdaters` (anyone else no exemption covers is judged as creating it:
/// [`update_outside_exemption`]); on CREATE, and on an UPDATE that brings a workload into the
/// queue, it is refused (`exemptions.unearnedMark`).
pub fn unproven_marks(policy: &Policy) -> Option<(String, String)> {
    if !policy.exemptions_configured() {
        return None;
    }
    let key = lit(EXEMPTED_BY_ANNOTATION);
    let own_mark = |root: &str| {
        format!(
            "(has({root}.metadata) && has({root}.metadata.annotations) && {key} in {root}.metadata.annotations ? {root}.metadata.annotations[{key}] : '')"
        )
    };
    let expression = format!(
        "variables.child || !{carriers}.exists(c, has(c.metadata) && has(c.metadata.annotations) && {key} in c.metadata.annotations) || (request.operation == 'UPDATE' && !{entered} && {old} == {new} && {new} != '' && {updater})",
        entered = ENTERS_QUEUE.reference(),
        updater = workload_updater(policy),
        carriers = carriers(Root::Object),
        old = own_mark("oldObject"),
        new = own_mark("object"),
    );
    let message = format!(
        "launchgate: the workload (or a pod template) carries {EXEMPTED_BY_ANNOTATION}, which only launchgate writes on a workload an exemption covers; the native policies cannot prove it did (rule exemptions.unearnedMark): remove it"
    );
    Some((expression, message))
}

/// True when the object carries launchgate's exemption mark (on itself or its pod templates),
/// every mark it carries names the same one of `exemptions`, and that exemption covers the
/// request's namespace: what a verified child inherits (`policy::exemption::inherited`).
fn inherits(exemptions: &[&Exemption]) -> String {
    let key = lit(EXEMPTED_BY_ANNOTATION);
    let marked = |c: &str| {
        format!(
            "(has({c}.metadata) && has({c}.metadata.annotations) && {key} in {c}.metadata.annotations)"
        )
    };
    let each: Vec<String> = exemptions
        .iter()
        .map(|e| {
            let name = lit(&e.name);
            let mut parts = vec![
                format!(
                    "{}.exists(c, {} && c.metadata.annotations[{key}] == {name})",
                    carriers(Root::Object),
                    marked("c")
                ),
                format!(
                    "{}.all(c, !{} || c.metadata.annotations[{key}] == {name})",
                    carriers(Root::Object),
                    marked("c")
                ),
            ];
            if !e.namespaces.is_empty() {
                parts.push(cel::any_wildcard(&e.namespaces, "request.namespace"));
            }
            cel::all(&parts)
        })
        .collect();
    cel::any(&each)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{Deadline, KindSpec, Run};
    use crate::native::eval::{V, eval, parse};
    use crate::workload;
    use serde_json::{Value, json};

    // A kind that is none of launchgate's, shaped like a KubeRay RayJob: a head group at a
    // nested path, a list of worker groups bound by `groupName` that autoscale up to
    // `maxReplicas` when the cluster says so, each `replicas × numOfHosts` pods, and a
    // submitter pod template that is the holder itself.
    static REPLICAS: Num = Num::holder(&["replicas"], 1);
    static HOSTS: Num = Num::holder(&["numOfHosts"], 1);
    static MAX_REPLICAS: Num = Num::holder(&["maxReplicas"], i64::MIN);
    static GROUPS: Num = Num::Max(&REPLICAS, &MAX_REPLICAS);
    static PODS: Num = Num::Mul(&REPLICAS, &HOSTS);
    static SCALED: Num = Num::Mul(&GROUPS, &HOSTS);
    static TEST_RAY: KindSpec = KindSpec {
        name: "TestRayJob",
        group: "ray.example.com",
        version: "v1",
        kind: "RayJob",
        resource: "rayjobs",
        positions: &[
            Position {
                role: "head",
                holders: Holders::At(&["spec", "rayClusterSpec", "headGroupSpec"]),
                template: &["template"],
                naming: Naming::None,
                replicas: Num::Lit(1),
                at_most: Num::Lit(1),
            },
            Position {
                role: "worker group",
                holders: Holders::Each(&["spec", "rayClusterSpec", "workerGroupSpecs"]),
                template: &["template"],
                naming: Naming::Field("groupName"),
                replicas: Num::Mul(&REPLICAS, &HOSTS),
                at_most: Num::If {
                    when: Cond::True {
                        from: From::Object,
                        at: &["spec", "rayClusterSpec", "enableInTreeAutoscaling"],
                    },
                    then: &SCALED,
                    otherwise: &PODS,
                },
            },
            Position {
                role: "submitter",
                holders: Holders::At(&["spec", "submitterPodTemplate"]),
                template: &[],
                naming: Naming::None,
                replicas: Num::Lit(1),
                at_most: Num::If {
                    when: Cond::Has {
                        from: From::Object,
                        at: &["spec", "submitterPodTemplate", "spec"],
                    },
                    then: &Num::Lit(1),
                    otherwise: &Num::Lit(0),
                },
            },
        ],
        run: Run {
            deadline: Deadline::Run(
                "/spec",
                "activeDeadlineSeconds",
                "spec.activeDeadlineSeconds",
            ),
            ends: crate::kinds::Ends::WithRun,
            ..Run::UNSTATED
        },
        webhook_rule: "testrayjob",
        ..KindSpec::BASE
    };

    // Groups of `size` pods, one of them a leader of its own template: the followers of every
    // group, a difference saturating at both ends.
    static GROUP_SIZE: Num = Num::holder(&["size"], 1);
    static LEADERS: Num = Num::object(&["spec", "replicas"], 1);
    static FOLLOWERS: Num = Num::Sub(&GROUP_SIZE, &Num::Lit(1));
    static BELOW: Num = Num::Sub(&LEADERS, &GROUP_SIZE);
    static ABOVE: Num = Num::Add(&LEADERS, &GROUP_SIZE);
    static TEST_GROUPS: &[Position] = &[Position {
        role: "follower",
        holders: Holders::At(&["spec", "group"]),
        template: &["template"],
        naming: Naming::None,
        replicas: Num::Mul(&LEADERS, &FOLLOWERS),
        at_most: Num::Max(&Num::Sub(&BELOW, &FOLLOWERS), &ABOVE),
    }];

    fn template(image: &str) -> Value {
        json!({"metadata": {"labels": {"app": image}}, "spec": {"containers": [{"name": "main", "image": image}]}})
    }

    /// Every field a count or condition reads, with where from, and whether it is an
    /// int-or-percent field (`Num::Scaled`).
    fn reads(n: &Num, out: &mut Vec<(From, &'static [&'static str], bool)>) {
        match n {
            Num::Lit(_) => {}
            Num::Int { from, at, .. } => out.push((*from, at, false)),
            Num::Scaled { from, at, of, .. } => {
                out.push((*from, at, true));
                reads(of, out);
            }
            Num::Min(a, b) | Num::Max(a, b) | Num::Mul(a, b) | Num::Add(a, b) | Num::Sub(a, b) => {
                reads(a, out);
                reads(b, out);
            }
            Num::If {
                when,
                then,
                otherwise,
            } => {
                match when {
                    Cond::True { from, at }
                    | Cond::Has { from, at }
                    | Cond::OneOf { from, at, .. } => out.push((*from, at, false)),
                    Cond::KeyIs(_) => {}
                }
                reads(then, out);
                reads(otherwise, out);
            }
        }
    }

    fn set(base: &mut Value, at: &[&str], value: Value) {
        let mut v = base;
        for (i, key) in at.iter().enumerate() {
            if !v.is_object() {
                *v = json!({});
            }
            let map = v.as_object_mut().unwrap();
            if i + 1 == at.len() {
                map.insert(key.to_string(), value);
                return;
            }
            v = map.entry(key.to_string()).or_insert_with(|| json!({}));
        }
    }

    /// The compiled count of every position (of every kind, and of the RayJob-like one)
    /// equals `Num::eval` on every combination of absent, integer, negative, huge and
    /// wrongly typed values of the fields it reads, and every map key.
    #[test]
    fn counts_compile_to_cel_that_counts_as_the_descriptor_does() {
        let candidates = [
            None,
            Some(json!(0)),
            Some(json!(3)),
            Some(json!(7)),
            Some(json!(-2)),
            Some(json!(i64::MAX)),
            Some(json!("3")),
            Some(json!(true)),
            Some(json!(false)),
            Some(json!(null)),
            Some(json!(2.5)),
        ];
        // An int-or-percent field (`Num::Scaled`) is also tried with percentages: valid,
        // too long, and not one.
        let percentages = [
            Some(json!("50%")),
            Some(json!("100%")),
            Some(json!("1000000000%")),
            Some(json!("5a%")),
        ];
        let all: Vec<Option<Value>> = candidates.iter().chain(&percentages).cloned().collect();
        let positions = crate::kinds::all()
            .flat_map(|k| k.positions)
            .chain(TEST_RAY.positions)
            .chain(TEST_GROUPS);
        let mut checked = 0;
        for position in positions {
            for n in [&position.replicas, &position.at_most] {
                let mut fields = Vec::new();
                reads(n, &mut fields);
                let mut seen = Vec::new();
                fields.retain(|f| {
                    let new = !seen.contains(f);
                    seen.push(*f);
                    new
                });
                let keys: &[Option<&str>] = match position.holders {
                    Holders::Keyed(_) => &[Some("Worker"), Some("worker"), Some("Master")],
                    _ => &[None],
                };
                let text = num(
                    n,
                    Scope {
                        root: Root::Object,
                        holder: "h",
                        key: keys[0].map(|_| "k"),
                    },
                );
                let program = parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
                let tried: Vec<&[Option<Value>]> = fields
                    .iter()
                    .map(|&(_, _, scaled)| if scaled { &all[..] } else { &candidates[..] })
                    .collect();
                let combos: usize = tried.iter().map(|t| t.len()).product();
                for combo in 0..combos {
                    let (mut object, mut holder) = (json!({}), json!({}));
                    let mut c = combo;
                    for ((from, at, _), tried) in fields.iter().zip(&tried) {
                        let value = &tried[c % tried.len()];
                        c /= tried.len();
                        if let Some(value) = value {
                            let base = match from {
                                From::Holder => &mut holder,
                                From::Object => &mut object,
                            };
                            set(base, at, value.clone());
                        }
                    }
                    for key in keys {
                        let mut vars = vec![
                            ("object", V::from_json(&object)),
                            ("h", V::from_json(&holder)),
                        ];
                        if let Some(k) = key {
                            vars.push(("k", V::Str(k.to_string())));
                        }
                        let want = n.eval(&object, &holder, *key);
                        let got = program.run(&vars);
                        assert_eq!(
                            got,
                            Ok(V::Int(want)),
                            "{} ({}): {text}\nobject {object}\nholder {holder}\nkey {key:?}",
                            position.role,
                            if std::ptr::eq(n, &position.replicas) {
                                "replicas"
                            } else {
                                "at_most"
                            },
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    /// What the compiled walk of a kind's positions gives, evaluated on `object`: per
    /// template its dotted path, its name, the pods it runs at once, the template, and the
    /// JSON Pointer of its spec.
    fn walked(kind: &'static KindSpec, object: &Value) -> Vec<Value> {
        let lists: Vec<String> = kind
            .positions
            .iter()
            .map(|position| {
                walk(Root::Object, position, &["spec"], |p| {
                    format!(
                        "{{'path': {}, 'name': {}, 'n': {}, 't': {}, 'ptr': {}, 'at': {}}}",
                        p.path(),
                        p.name(),
                        p.at_most(),
                        p.template,
                        p.spec_pointer(),
                        p.spec_path(),
                    )
                })
            })
            .collect();
        let text = lists.join(" + ");
        let got = eval(&text, &[("object", V::from_json(object))])
            .unwrap_or_else(|e| panic!("{e}: {text}"));
        let V::List(items) = got else {
            panic!("not a list: {got:?}")
        };
        items.into_iter().map(V::into_json).collect()
    }

    /// What the Rust walk gives for the same object (pod templates with a spec).
    fn rust_walk(kind: &'static KindSpec, object: &Value) -> Vec<Value> {
        workload::templates(WorkloadKind::of_spec(kind), object)
            .into_iter()
            .filter(|(_, t)| t.contains_key("spec"))
            .map(|(info, t)| {
                let at = info.spec_path_text();
                json!({"path": info.path_text.clone(), "name": info.name.clone().unwrap_or_default(),
                    "n": info.at_most, "t": t, "at": at})
            })
            .collect()
    }

    fn check_walk(kind: &'static KindSpec, object: &Value) -> usize {
        let got = walked(kind, object);
        for entry in &got {
            let ptr = entry["ptr"].as_str().unwrap();
            assert_eq!(
                object.pointer(ptr),
                Some(&entry["t"]["spec"]),
                "{ptr} in {object}"
            );
        }
        let without_ptr: Vec<Value> = got
            .into_iter()
            .map(|mut e| {
                e.as_object_mut().unwrap().remove("ptr");
                e
            })
            .collect();
        assert_eq!(without_ptr, rust_walk(kind, object), "{object}");
        without_ptr.len()
    }

    /// A new kind's pod templates are selected, named and counted by CEL compiled from its
    /// descriptor alone, as the Rust walk reads them.
    #[test]
    fn a_new_kinds_templates_are_walked_from_its_descriptor() {
        let cluster = |autoscale: Value| {
            json!({"apiVersion": "ray.example.com/v1", "kind": "RayJob",
            "metadata": {"name": "r"},
            "spec": {
                "submitterPodTemplate": template("submit"),
                "rayClusterSpec": {
                    "enableInTreeAutoscaling": autoscale,
                    "headGroupSpec": {"template": template("head")},
                    "workerGroupSpecs": [
                        {"groupName": "gpu", "replicas": 2, "numOfHosts": 2, "maxReplicas": 5, "template": template("gpu")},
                        {"replicas": 3},
                        {"groupName": "cpu", "template": template("cpu")},
                        {"groupName": "big", "replicas": 4, "maxReplicas": 1, "template": template("big")},
                    ]}}})
        };
        let scaled = walked(&TEST_RAY, &cluster(json!(true)));
        let counts: Vec<(&str, &str, i64)> = scaled
            .iter()
            .map(|e| {
                (
                    e["path"].as_str().unwrap(),
                    e["name"].as_str().unwrap(),
                    e["n"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            counts,
            [
                ("spec.rayClusterSpec.headGroupSpec.template", "", 1),
                (
                    "spec.rayClusterSpec.workerGroupSpecs[0].template",
                    "gpu",
                    10
                ),
                ("spec.rayClusterSpec.workerGroupSpecs[2].template", "cpu", 1),
                ("spec.rayClusterSpec.workerGroupSpecs[3].template", "big", 4),
                ("spec.submitterPodTemplate", "", 1),
            ]
        );
        assert_eq!(
            scaled[1]["ptr"],
            "/spec/rayClusterSpec/workerGroupSpecs/0/template/spec"
        );
        assert_eq!(check_walk(&TEST_RAY, &cluster(json!(true))), 5);
        // Without autoscaling the workers count as written.
        let fixed = walked(&TEST_RAY, &cluster(json!(false)));
        assert_eq!(fixed[1]["n"], 4);
        for autoscale in [json!(false), json!("true"), json!(null)] {
            assert_eq!(check_walk(&TEST_RAY, &cluster(autoscale)), 5);
        }
        // Missing holders and templates are skipped, never an error.
        for object in [
            json!({"spec": {}}),
            json!({}),
            json!({"spec": {"rayClusterSpec": {}}}),
            json!({"spec": {"rayClusterSpec": {"headGroupSpec": {}, "workerGroupSpecs": []}}}),
            json!({"spec": {"rayClusterSpec": {"headGroupSpec": {"template": {"metadata": {}}}}}}),
            json!({"spec": {"submitterPodTemplate": {"metadata": {}}}}),
        ] {
            assert_eq!(check_walk(&TEST_RAY, &object), 0, "{object}");
        }
    }

    /// The walks of launchgate's own kinds, and the per-kind choice of `specs()`, give what
    /// the Rust walk gives.
    #[test]
    fn the_kinds_specs_are_the_rust_walks() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"training.kubeflow.org/replica-type": "worker"}},
                "spec": {"containers": [{"name": "main"}]}}),
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "spec": {"parallelism": 4, "completions": 2, "template": template("job")}}),
            json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "spec": {"tasks": [{"name": "master", "template": template("m")}, {"replicas": -1, "template": template("x")}, {"name": "w", "replicas": 3, "template": template("w")}]}}),
            json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "spec": {"elasticPolicy": {"maxReplicas": 6}, "pytorchReplicaSpecs": {
                    "Worker": {"replicas": 2, "template": template("w")},
                    "Master": {"template": template("m")},
                    "a/b~c": {"replicas": 9, "template": template("odd")}}}}),
            json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "spec": {"replicatedJobs": [{"name": "workers", "replicas": 3, "template": {"spec": {"parallelism": 2, "template": template("w")}}},
                    {"name": "driver", "template": {"spec": {"template": template("d")}}}]}}),
        ];
        let specs = specs(Root::Object);
        for object in objects {
            let kind = WorkloadKind::of_object(&object).unwrap();
            let spec = kind.spec();
            assert!(check_walk(spec, &object) > 0, "{object}");
            let request = json!({"kind": {"group": kind.api_group(), "kind": kind.api_kind()}});
            let got = eval(
                &specs,
                &[
                    ("object", V::from_json(&object)),
                    ("request", V::from_json(&request)),
                ],
            )
            .unwrap();
            let got: Vec<(String, i64, String)> = match got.into_json() {
                Value::Array(items) => items
                    .iter()
                    .map(|e| {
                        assert_eq!(object.pointer(e["ptr"].as_str().unwrap()), Some(&e["s"]));
                        (
                            e["tat"].as_str().unwrap().to_string(),
                            e["n"].as_i64().unwrap(),
                            e["role"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect(),
                other => panic!("{other}"),
            };
            let want: Vec<(String, i64, String)> = workload::templates(kind, &object)
                .into_iter()
                .map(|(info, _)| {
                    let role = info.name.clone().unwrap_or_else(|| {
                        if info.is_pod() {
                            "worker".into()
                        } else {
                            String::new()
                        }
                    });
                    (info.path().to_string(), info.at_most, role)
                })
                .collect();
            assert_eq!(got, want, "{object}");
        }
    }

    #[test]
    fn a_mark_alone_does_not_make_a_verified_child() {
        let policy = Policy::from_yaml(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
        let program = parse(&is_verified_child(&policy)).unwrap();
        // A pod of a Volcano Job, marked by annotation only (as the tenant can write it).
        let pod = |user: &str| {
            let object = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "generateName": "run-",
                    "annotations": {"volcano.sh/job-name": "run"},
                    "ownerReferences": [{
                        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                        "name": "run", "uid": "u-1", "controller": true,
                    }],
                },
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            });
            let request = json!({
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "userInfo": {"username": user},
            });
            program
                .run(&[
                    ("object", V::from_json(&object)),
                    ("request", V::from_json(&request)),
                ])
                .unwrap()
        };
        assert_eq!(
            pod("system:serviceaccount:volcano-system:volcano-controllers"),
            V::Bool(true)
        );
        assert_eq!(pod("system:serviceaccount:team-a:default"), V::Bool(false));
        assert_eq!(pod("alice"), V::Bool(false));
    }

    /// Evaluates `program` as a compiled policy of `queue` does for the request: the request's
    /// object, old object and requester, `variables.child` as given, and
    /// `variables.entersQueue` as the policy computes it ([`enters_queue`]).
    fn ask_policy(
        policy: &Policy,
        queue: &str,
        program: &crate::native::eval::Program,
        operation: &str,
        user: &str,
        (object, old): (&Value, &Value),
        child: bool,
    ) -> V {
        let kind = WorkloadKind::of_object(object).unwrap();
        let request = V::from_json(
            &json!({"operation": operation, "userInfo": {"username": user},
            "namespace": "research",
            "kind": {"group": kind.api_group(), "version": kind.api_resource().1, "kind": kind.api_kind()}}),
        );
        let mut vars = vec![
            ("object", V::from_json(object)),
            ("oldObject", V::from_json(old)),
            ("request", request),
        ];
        let enters = eval(&enters_queue(policy, policy.queue(queue).unwrap()), &vars).unwrap();
        vars.push((
            "variables",
            V::Map(vec![
                (V::Str("child".into()), V::Bool(child)),
                (V::Str(ENTERS_QUEUE.as_str().into()), enters),
            ]),
        ));
        program.run(&vars).unwrap()
    }

    #[test]
    fn an_update_of_a_marked_workload_is_judged_unless_a_controller_sends_it() {
        let policy = Policy::from_yaml(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
        let judged = parse(&judged_as_create(&policy)).unwrap();
        let (kept, _) = unproven_marks(&policy).unwrap();
        let kept = parse(&kept).unwrap();
        let kueue = "system:serviceaccount:kueue-system:kueue-controller-manager";
        let mark = json!({EXEMPTED_BY_ANNOTATION: "wandb-image-builds"});
        let job = |annotations: &Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "annotations": annotations,
                    "labels": {"wandb.ai/monitor": "true"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}})
        };
        let marked = job(&mark);
        let ask = |program, operation, user, old: &Value, child| {
            ask_policy(
                &policy,
                "gpu-queue",
                program,
                operation,
                user,
                (&marked, old),
                child,
            )
        };
        // A tenant's UPDATE of a marked workload: judged as her CREATE, its mark refused.
        assert_eq!(
            ask(&judged, "UPDATE", "alice", &marked, false),
            V::Bool(true)
        );
        assert_eq!(
            ask(&kept, "UPDATE", "alice", &marked, false),
            V::Bool(false)
        );
        // Kueue's, and a verified controller's child: compared with what was admitted.
        assert_eq!(
            ask(&judged, "UPDATE", kueue, &marked, false),
            V::Bool(false)
        );
        assert_eq!(ask(&kept, "UPDATE", kueue, &marked, false), V::Bool(true));
        assert_eq!(
            ask(&judged, "UPDATE", "alice", &marked, true),
            V::Bool(false)
        );
        // One that labels a workload into the queue is judged as a CREATE whoever sends it,
        // its mark refused even from Kueue; an unmarked workload's UPDATE within the queue is
        // not judged; a CREATE is.
        let mut outside = marked.clone();
        outside["metadata"]["labels"] = json!({});
        for user in ["alice", kueue] {
            assert_eq!(ask(&judged, "UPDATE", user, &outside, false), V::Bool(true));
        }
        assert_eq!(ask(&kept, "UPDATE", kueue, &outside, false), V::Bool(false));
        let unmarked = job(&json!({}));
        assert_eq!(
            ask(&judged, "UPDATE", "alice", &unmarked, false),
            V::Bool(false)
        );
        assert_eq!(
            ask(&judged, "CREATE", "alice", &Value::Null, false),
            V::Bool(true)
        );
    }

    /// A workload of `kind` built from its descriptor: every position holds pod templates
    /// (two holders of a listed or keyed position), the object labelled `labels`, the `i`-th
    /// template `template_labels(i)`, every container with `env`. A Pod is its own template.
    fn workload_of(
        kind: WorkloadKind,
        labels: &Value,
        template_labels: &dyn Fn(usize) -> Value,
        env: &Value,
    ) -> Value {
        let spec = json!({"containers": [{"name": "c", "image": "x", "env": env}]});
        let mut object = json!({"apiVersion": kind.api_version(), "kind": kind.api_kind(),
            "metadata": {"name": "w", "labels": labels}});
        let mut n = 0;
        let mut template = || {
            n += 1;
            json!({"metadata": {"labels": template_labels(n - 1)}, "spec": spec.clone()})
        };
        for position in kind.spec().positions {
            let mut holder = |name: &str| {
                let mut h = json!({});
                set(&mut h, position.template, template());
                if position.template.is_empty() {
                    h = template();
                }
                if let Naming::Field(f) = position.naming {
                    h[f] = json!(name);
                }
                h
            };
            match position.holders {
                Holders::Root => object["spec"] = spec.clone(),
                Holders::At(at) => {
                    let h = holder("");
                    set(&mut object, at, h);
                }
                Holders::Each(at) => {
                    let hs = json!([holder("b"), holder("a")]);
                    set(&mut object, at, hs);
                }
                Holders::Keyed(at) => {
                    // Written Worker first: the byte order (Master first) decides.
                    let worker = holder("");
                    let master = holder("");
                    set(&mut object, at, json!({"Worker": worker, "Master": master}));
                }
            }
        }
        object
    }

    /// Whether an object is a launch workload of a queue — on an UPDATE's old object, what
    /// decides whether the UPDATE is judged as a CREATE — is decided by the compiled CEL
    /// exactly as by the webhook (`Policy::in_queue`), for the old object and the new alike:
    /// every kind, labels on the object or its templates (templates naming different
    /// queues), empty queue labels, a queue named only by env, by its label value, under an
    /// entity, by the namespace's default or the global one, an unknown queue, none at all.
    #[test]
    fn an_objects_queue_is_decided_as_the_webhook_decides_it() {
        let configs = [
            "defaultQueue: a\nnamespaceQueues: {teamb: b}\nqueues:\n  a: {}\n  b: {}\n  Team GPU: {}\n",
            "match:\n  launchLabels: [wandb.ai/monitor]\n  queueLabels: [launchgate.io/queue, kueue.x-k8s.io/queue-name]\nnamespaceQueues: {teamb: acme/gpu}\nqueues:\n  gpu: {}\n  acme/gpu: {}\n  acme/only: {}\n  b: {}\n",
        ];
        let mut checked = 0;
        let mut judged = 0;
        for config in configs {
            let policy = Policy::from_yaml(config).unwrap();
            let mut names: Vec<String> = policy.queues.values().map(|q| q.name.clone()).collect();
            names.extend(
                policy
                    .queues
                    .values()
                    .map(|q| crate::mutate::labels::queue_label_value(&q.name).into_owned()),
            );
            names.extend([
                "".to_string(),
                "unknown".to_string(),
                "acme/gpu".to_string(),
            ]);
            let mut variants: Vec<(Value, Option<String>, Value)> = vec![
                (json!({}), None, json!([])),
                (json!({"app": "web"}), None, json!([])),
                (json!({"wandb.ai/monitor": "true"}), None, json!([])),
                (
                    json!({"wandb.ai/monitor": "true"}),
                    None,
                    json!([{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "b"},
                        {"name": "WANDB_LAUNCH_QUEUE_ENTITY", "value": "acme"}]),
                ),
                (
                    json!({"wandb.ai/monitor": "true"}),
                    None,
                    json!([{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "gpu"},
                        {"name": "WANDB_LAUNCH_QUEUE_ENTITY", "value": "acme"}]),
                ),
                (json!({"kueue.x-k8s.io/queue-name": ""}), None, json!([])),
                (
                    json!({"queue": "", "launchgate.io/queue": "b"}),
                    None,
                    json!([]),
                ),
            ];
            for name in &names {
                variants.push((json!({"launchgate.io/queue": name}), None, json!([])));
                // `queue` only names the queue (`match.queueNameLabels`): alone it marks
                // nothing; on a workload a launch or queue label marks, it names the queue.
                variants.push((json!({"queue": name}), None, json!([])));
                variants.push((
                    json!({"queue": name, "wandb.ai/monitor": "true"}),
                    None,
                    json!([]),
                ));
                variants.push((
                    json!({"queue": name, "launchgate.io/queue": ""}),
                    None,
                    json!([]),
                ));
                variants.push((
                    json!({"kueue.x-k8s.io/queue-name": name, "wandb.ai/monitor": "true"}),
                    None,
                    json!([]),
                ));
                // Named on the templates only.
                variants.push((json!({}), Some(name.clone()), json!([])));
            }
            for queue in policy.queues.values() {
                let programs = [Root::Object, Root::Old]
                    .map(|root| (root, parse(&in_queue(&policy, queue, root)).unwrap()));
                for kind in kinds() {
                    for (labels, on_templates, env) in &variants {
                        // The first template names the queue, the others `b`.
                        let template_labels = |i: usize| match on_templates {
                            Some(name) if i == 0 => json!({"launchgate.io/queue": name}),
                            Some(_) => json!({"launchgate.io/queue": "b"}),
                            None => json!({}),
                        };
                        let object = workload_of(kind, labels, &template_labels, env);
                        for namespace in ["teamb", "research"] {
                            let want = policy.in_queue(kind, &object, Some(namespace), queue);
                            let request = V::from_json(&json!({"namespace": namespace,
                                "kind": {"group": kind.api_group(), "version": kind.api_resource().1,
                                    "kind": kind.api_kind()}}));
                            for (root, program) in &programs {
                                let got = program
                                    .run(&[
                                        (root.cel(), V::from_json(&object)),
                                        ("request", request.clone()),
                                    ])
                                    .unwrap_or_else(|e| panic!("{e}: {object}"));
                                assert_eq!(
                                    got,
                                    V::Bool(want),
                                    "queue {} ({root:?}) in {namespace}: {object}\n{config}",
                                    queue.key
                                );
                                checked += 1;
                            }
                            judged += usize::from(want);
                        }
                    }
                }
            }
        }
        // Both answers are well represented.
        assert!(checked > 5_000 && judged > 500, "{checked} {judged}");
    }

    #[test]
    fn a_kind_is_told_by_its_group_where_no_other_kind_shares_it() {
        assert_eq!(
            WorkloadKind::VolcanoJob.cel_test(),
            "request.kind.group == 'batch.volcano.sh'"
        );
        assert_eq!(WorkloadKind::Pod.cel_test(), "request.kind.group == ''");
        // The covered kinds are the descriptors that say so, in the registry's order.
        let covered: Vec<&str> = kinds().map(|k| k.as_str()).collect();
        let said: Vec<&str> = WorkloadKind::all()
            .filter(|k| k.spec().native.is_ok())
            .map(|k| k.as_str())
            .collect();
        assert_eq!(covered, said);
        assert!(covered.starts_with(&["Pod", "Job", "VolcanoJob", "PyTorchJob", "JobSet"]));
        assert!(!covered.contains(&"TrainJob"));
    }
}
