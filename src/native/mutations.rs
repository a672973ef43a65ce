//! The mutations CEL can express, as `MutatingAdmissionPolicy` JSON Patch expressions: the
//! container and pod `securityContext` defaults, the Job-level defaults (with the backoffLimit
//! intent rule as far as CEL can read it), the queue label, and the Kueue labels. Each mirrors
//! its webhook mutator (`mutate::*`) rule for rule; what it cannot mirror is in the report.

use super::select;
use crate::cel::{self, lit};
use crate::kinds::RunDefault;
use crate::mutate::job_defaults::KEEP_BACKOFF_LIMIT_ANNOTATION;
use crate::mutate::labels::{QUEUE_LABEL, QUEUE_NAME_ANNOTATION, queue_label_value};
use crate::mutate::security_context::SecurityContextConfig;
use crate::mutate::visible_devices::{NO_GPU, VARIABLE as VISIBLE_DEVICES};
use crate::policy::Queue;
use crate::workload::WorkloadKind;
use crate::workload::consumption::Accelerators;
use crate::workload::intent::LAST_APPLIED_ANNOTATION;

/// One JSON Patch `add` operation as a CEL list of one element, guarded by `when`.
fn add_if(when: &str, path: &str, value: &str) -> String {
    format!("({when} ? [JSONPatch{{op: 'add', path: {path}, value: {value}}}] : [])")
}

/// `map.key` is absent or null.
fn unset(map: &str, key: &str) -> String {
    format!("(!has({map}.{key}) || {map}.{key} == null)")
}

/// The container `securityContext` defaults for the container at `c`, JSON Pointer `ptr`, in
/// a pod spec whose `securityContext.seccompProfile` is set when `pod_seccomp` holds.
fn container_defaults(
    cfg: &SecurityContextConfig,
    c: &str,
    ptr: &str,
    pod_seccomp: &str,
) -> String {
    let sc = format!("{c}.securityContext");
    let sys_admin = format!(
        "(has({sc}.capabilities) && has({sc}.capabilities.add) && {sc}.capabilities.add.exists(x, x == 'SYS_ADMIN' || x == 'CAP_SYS_ADMIN'))"
    );
    // A container without a securityContext gets one holding every default at once.
    let mut whole = Vec::new();
    if let Some(ape) = cfg.allow_privilege_escalation {
        whole.push(format!("'allowPrivilegeEscalation': dyn({ape})"));
    }
    if !cfg.drop_capabilities.is_empty() {
        whole.push(format!(
            "'capabilities': dyn({{'drop': {}}})",
            cel::str_list(&cfg.drop_capabilities)
        ));
    }
    let fresh = if whole.is_empty() && cfg.seccomp_profile.is_none() {
        "[]".to_string()
    } else {
        let seccomp = cfg
            .seccomp_profile
            .as_deref()
            .map(|p| format!("'seccompProfile': dyn({{'type': {}}})", lit(p)));
        let with_seccomp: Vec<String> = whole.iter().cloned().chain(seccomp).collect();
        let value = |fields: &[String]| format!("{{{}}}", fields.join(", "));
        let path = format!("{ptr} + '/securityContext'");
        match (whole.is_empty(), cfg.seccomp_profile.is_some()) {
            (true, true) => add_if(&format!("!{pod_seccomp}"), &path, &value(&with_seccomp)),
            (false, true) => format!(
                "({pod_seccomp} ? [JSONPatch{{op: 'add', path: {path}, value: {}}}] : [JSONPatch{{op: 'add', path: {path}, value: {}}}])",
                value(&whole),
                value(&with_seccomp)
            ),
            _ => add_if("true", &path, &value(&whole)),
        }
    };
    // A container with one gets each default it leaves unset.
    let mut each = Vec::new();
    if let Some(ape) = cfg.allow_privilege_escalation {
        let when = if ape {
            unset(&sc, "allowPrivilegeEscalation")
        } else {
            format!("{} && !{sys_admin}", unset(&sc, "allowPrivilegeEscalation"))
        };
        each.push(add_if(
            &when,
            &format!("{ptr} + '/securityContext/allowPrivilegeEscalation'"),
            &ape.to_string(),
        ));
    }
    if !cfg.drop_capabilities.is_empty() {
        let drop = cel::str_list(&cfg.drop_capabilities);
        each.push(format!(
            "({caps_unset} ? [JSONPatch{{op: 'add', path: {ptr} + '/securityContext/capabilities', value: {{'drop': {drop}}}}}] : {drop_unset} ? [JSONPatch{{op: 'add', path: {ptr} + '/securityContext/capabilities/drop', value: {drop}}}] : [])",
            caps_unset = unset(&sc, "capabilities"),
            drop_unset = unset(&format!("{sc}.capabilities"), "drop"),
        ));
    }
    if let Some(profile) = &cfg.seccomp_profile {
        each.push(add_if(
            &format!("!{pod_seccomp} && {}", unset(&sc, "seccompProfile")),
            &format!("{ptr} + '/securityContext/seccompProfile'"),
            &format!("{{'type': {}}}", lit(profile)),
        ));
    }
    let existing = if each.is_empty() {
        "[]".to_string()
    } else {
        format!("({})", each.join(" + "))
    };
    let privileged = format!("(has({sc}) && has({sc}.privileged) && {sc}.privileged == true)");
    format!("({privileged} ? [] : (!has({sc}) || {sc} == null) ? {fresh} : {existing})")
}

/// The pod-level `securityContext` defaults for the pod spec `p.s` at `p.ptr`.
fn pod_defaults(cfg: &SecurityContextConfig) -> Option<String> {
    if cfg.run_as_non_root.is_none() && cfg.run_as_user.is_none() && cfg.fs_group.is_none() {
        return None;
    }
    let sc = "p.s.securityContext";
    let has_sc = format!("(has({sc}) && {sc} != null)");
    // A container that runs as UID 0 (its own runAsUser, else the pod's) without its own
    // runAsNonRoot: pod-level runAsNonRoot would keep it from starting.
    let pod_uid = format!("({has_sc} && has({sc}.runAsUser) ? {sc}.runAsUser : -1)");
    let roots = format!(
        "((has(p.s.containers) ? p.s.containers : []) + (has(p.s.initContainers) ? p.s.initContainers : [])).exists(c, !(has(c.securityContext) && has(c.securityContext.runAsNonRoot) && c.securityContext.runAsNonRoot != null) && (has(c.securityContext) && has(c.securityContext.runAsUser) ? c.securityContext.runAsUser : {pod_uid}) == 0)"
    );
    let mut fields: Vec<(&str, String, String)> = Vec::new();
    if let Some(v) = cfg.run_as_non_root {
        let guard = if v {
            format!("!{roots}")
        } else {
            "true".into()
        };
        fields.push(("runAsNonRoot", v.to_string(), guard));
    }
    if let Some(v) = cfg.run_as_user {
        fields.push(("runAsUser", v.to_string(), "true".into()));
    }
    if let Some(v) = cfg.fs_group {
        fields.push(("fsGroup", v.to_string(), "true".into()));
    }
    let fresh_parts: Vec<String> = fields
        .iter()
        .map(|(k, v, guard)| add_if(guard, &format!("p.ptr + '/securityContext/{k}'"), v))
        .collect();
    // The API server gives every Pod `securityContext: {}`; other pod templates may have none,
    // then an empty one is added first (and only when a field follows).
    let any_field: Vec<String> = fields.iter().map(|(_, _, g)| g.clone()).collect();
    let existing: Vec<String> = fields
        .iter()
        .map(|(k, v, guard)| {
            add_if(
                &format!("{guard} && {}", unset(sc, k)),
                &format!("p.ptr + '/securityContext/{k}'"),
                v,
            )
        })
        .collect();
    Some(format!(
        "({has_sc} ? ({}) : ({} ? [JSONPatch{{op: 'add', path: p.ptr + '/securityContext', value: {{}}}}] : []) + {})",
        existing.join(" + "),
        cel::any(&any_field),
        fresh_parts.join(" + "),
    ))
}

/// The securityContext mutation, or `None` when the queue turns it off.
pub fn security_context(queue: &Queue) -> Option<String> {
    let cfg = &queue.config.security_context;
    if !cfg.enabled {
        return None;
    }
    let pod_seccomp = "(has(p.s.securityContext) && p.s.securityContext != null && has(p.s.securityContext.seccompProfile) && p.s.securityContext.seccompProfile != null)";
    let per_list = |list: &str| {
        format!(
            "(has(p.s.{list}) ? lists.range(size(p.s.{list})).map(j, {}).flatten() : [])",
            container_defaults(
                cfg,
                &format!("p.s.{list}[j]"),
                &format!("p.ptr + '/{list}/' + string(j)"),
                pod_seccomp
            )
        )
    };
    let pod = pod_defaults(cfg).unwrap_or_else(|| "[]".into());
    Some(format!(
        "{}.map(p, {WINDOWS} ? [] : {pod} + {} + {}).flatten()",
        select::specs(select::Root::Object),
        per_list("containers"),
        per_list("initContainers"),
    ))
}

/// A pod spec `p.s` that is a Windows pod's.
const WINDOWS: &str = "(has(p.s.os) && has(p.s.os.name) && p.s.os.name == 'windows')";

/// The amount `v` (a quantity string or a number) is not zero. An amount that is not a quantity
/// is none (the model counts no other; the API server refuses it after the mutation).
fn nonzero(v: &str) -> String {
    format!(
        "(type({v}) == string ? (isQuantity({v}) && quantity({v}).compareTo(quantity('0')) != 0) : type({v}) == int ? {v} != 0 : type({v}) == double ? {v} != 0.0 : false)"
    )
}

/// A `*`/`?` pattern as an RE2 expression matching the whole name.
fn wild_regex(pattern: &str) -> String {
    let mut out = String::from("^");
    for c in pattern.chars() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '/' => out.push(c),
            c => {
                out.push('\\');
                out.push(c);
            }
        }
    }
    out.push('$');
    out
}

/// The resource name `r` (a CEL string, no DeviceClass's extended name) counts as GPUs by the
/// accelerator map: the first entry that matches decides ([`Accelerators::name_rules`]), as
/// one flat test — an exact name, else a counted pattern no earlier uncounted pattern matches.
fn counted_name(accel: &Accelerators, r: &str) -> String {
    use crate::workload::consumption::NameMatch;
    let mut exact_counted = Vec::new();
    let mut exact_not = Vec::new();
    let mut uncounted_before: Vec<String> = Vec::new();
    let mut patterns = Vec::new();
    for (by, counts) in accel.name_rules() {
        let test = match by {
            NameMatch::Exact(name) => {
                if counts {
                    exact_counted.push(name);
                } else {
                    exact_not.push(name);
                }
                continue;
            }
            NameMatch::Around(prefix, suffix) => {
                let mut parts = Vec::new();
                if !prefix.is_empty() && !suffix.is_empty() {
                    parts.push(format!(
                        "size({r}) >= {}",
                        prefix.chars().count() + suffix.chars().count()
                    ));
                }
                if !prefix.is_empty() {
                    parts.push(format!("{r}.startsWith({})", lit(prefix)));
                }
                if !suffix.is_empty() {
                    parts.push(format!("{r}.endsWith({})", lit(suffix)));
                }
                if parts.is_empty() {
                    "true".to_string()
                } else {
                    format!("({})", parts.join(" && "))
                }
            }
            NameMatch::Wild(pattern) => format!("{r}.matches({})", lit(&wild_regex(pattern))),
        };
        if counts {
            let mut term = vec![test];
            term.extend(uncounted_before.iter().map(|t| format!("!{t}")));
            patterns.push(format!("({})", term.join(" && ")));
        } else {
            uncounted_before.push(test);
        }
    }
    let mut by_pattern = cel::any(&patterns);
    if !exact_not.is_empty() && by_pattern != "false" {
        by_pattern = format!("(!({r} in {}) && {by_pattern})", cel::str_list(&exact_not));
    }
    let mut out = Vec::new();
    if !exact_counted.is_empty() {
        out.push(format!("{r} in {}", cel::str_list(&exact_counted)));
    }
    if by_pattern != "false" {
        out.push(by_pattern);
    }
    cel::any(&out)
}

/// The resource `r` (a CEL string) of amount `v` makes a container ask for GPUs, or for
/// something the accelerator map cannot count, as [`Accounting::container`] reads it: a name
/// the map counts with an amount other than zero, or a DeviceClass's extended name of a class
/// the map does not know.
///
/// [`Accounting::container`]: crate::workload::consumption::Accounting::container
fn asks_gpus(accel: &Accelerators, r: &str, v: &str) -> String {
    use crate::workload::consumption::DEVICE_CLASS_RESOURCE_PREFIX;
    let classes = accel.device_classes();
    let known: Vec<&str> = classes.iter().map(|(c, _)| *c).collect();
    let counted: Vec<&str> = classes
        .iter()
        .filter(|(_, g)| *g)
        .map(|(c, _)| *c)
        .collect();
    let class = format!(
        "{r}.substring({})",
        DEVICE_CLASS_RESOURCE_PREFIX.chars().count()
    );
    let prefix = lit(DEVICE_CLASS_RESOURCE_PREFIX);
    format!(
        "(({r}.startsWith({prefix}) && !({class} in {})) || (({r}.startsWith({prefix}) ? {class} in {} : {}) && {}))",
        cel::str_list(&known),
        cel::str_list(&counted),
        counted_name(accel, r),
        nonzero(v),
    )
}

/// The container `c` asks for no GPU, as the consumption model says
/// ([`crate::workload::consumption::ContainerAsk::asks_no_gpu`]) where CEL can read it: no
/// resource the map counts (its limit, else its request where the limit is no quantity) and no claim at all (a claim's
/// devices are read from the cluster: a container that uses one is left to the webhook).
fn asks_no_gpu(accel: &Accelerators, c: &str) -> String {
    let res = format!("{c}.resources");
    let limits = format!("{res}.limits");
    let requests = format!("{res}.requests");
    let has = |m: &str| format!("has({m}) && {m} != null");
    format!(
        "(!({has_res}) || (!({has_claims} && size({res}.claims) > 0) && !({has_limits} && {limits}.exists(r, {by_limit})) && !({has_requests} && {requests}.exists(r, !({has_limits} && r in {limits} && (type({limits}[r]) != string || isQuantity({limits}[r]))) && {by_request}))))",
        has_res = has(&res),
        has_claims = has(&format!("{res}.claims")),
        has_limits = has(&limits),
        has_requests = has(&requests),
        by_limit = asks_gpus(accel, "r", &format!("{limits}[r]")),
        by_request = asks_gpus(accel, "r", &format!("{requests}[r]")),
    )
}

/// No GPU by environment, or `None` when the queue turns it off: `NVIDIA_VISIBLE_DEVICES=void`
/// appended to the env of every container (app and init) that asks for no GPU and leaves the
/// variable unset, as `mutate::visible_devices` writes it; `specs` is the pod templates'
/// variable.
pub fn visible_devices(queue: &Queue, specs: &str) -> Option<String> {
    if !queue.config.visible_devices.enabled {
        return None;
    }
    let entry = format!(
        "{{'name': {}, 'value': {}}}",
        lit(VISIBLE_DEVICES),
        lit(NO_GPU)
    );
    let c = "p.s[l][j]";
    let ptr = "p.ptr + '/' + l + '/' + string(j)";
    Some(format!(
        "{specs}.map(p, {WINDOWS} ? [] : ['containers', 'initContainers'].map(l, (l in p.s && p.s[l] != null) ? lists.range(size(p.s[l])).filter(j, !(has({c}.env) && {c}.env != null && {c}.env.exists(e, has(e.name) && e.name == {var})) && {no_gpu}).map(j, (has({c}.env) && {c}.env != null) ? JSONPatch{{op: 'add', path: {ptr} + '/env/' + string(size({c}.env)), value: {entry}}} : JSONPatch{{op: 'add', path: {ptr} + '/env', value: [{entry}]}}) : []).flatten()).flatten()",
        var = lit(VISIBLE_DEVICES),
        no_gpu = asks_no_gpu(&queue.accelerators, c),
    ))
}

/// The violations of `visibleDevices.tenantValue` as lines naming the queue, the container,
/// the value and why, in the webhook's words (`mutate::visible_devices::violations`; for a
/// container with GPUs or a claim, without the list of them): the last env entry of the
/// variable in every container of every pod template (app, init, ephemeral) that is not the
/// literal `void`, a Windows pod's aside; none for a verified controller's child (`child`),
/// whose root was judged. `specs` is the pod templates' variable.
pub fn visible_devices_violations(queue: &Queue, specs: &str, child: &str) -> Option<String> {
    if !queue.config.visible_devices.enabled {
        return None;
    }
    let var = lit(VISIBLE_DEVICES);
    let from = "(has(x.e.valueFrom) && x.e.valueFrom != null)";
    let set = format!(
        "({from} ? {} : {var} + '=\"' + (has(x.e.value) ? x.e.value : '') + '\"')",
        lit(&format!(
            "{VISIBLE_DEVICES} from valueFrom (launchgate cannot read it)"
        ))
    );
    let none = lit(&format!(
        ": the NVIDIA container toolkit would show it the GPUs the value names (\"all\": every GPU of its node); remove it (launchgate then writes {NO_GPU}) or set {NO_GPU} (visibleDevices: {NO_GPU})"
    ));
    let some = lit(&format!(
        ", which would replace the list of the GPUs allocated to it (\"all\": every GPU of its node); remove it (visibleDevices: {NO_GPU})"
    ));
    let where_ = "x.at + ' (' + x.name + ')'";
    Some(format!(
        "{child} ? [] : {specs}.filter(p, !{WINDOWS}).map(p, ['containers', 'initContainers', 'ephemeralContainers'].map(l, (l in p.s && p.s[l] != null) ? lists.range(size(p.s[l])).filter(i, has(p.s[l][i].env) && p.s[l][i].env != null && p.s[l][i].env.exists(e, has(e.name) && e.name == {var})).map(i, {{'at': dyn(p.at + '.' + l + '[' + string(i) + ']'), 'c': dyn(p.s[l][i]), 'name': dyn(has(p.s[l][i].name) ? p.s[l][i].name : ''), 'e': dyn(p.s[l][i].env.filter(e, has(e.name) && e.name == {var})[size(p.s[l][i].env.filter(e, has(e.name) && e.name == {var})) - 1])}}).filter(x, {from} || !has(x.e.value) || x.e.value != {void}).map(x, {prefix} + ({no_gpu} ? {where_} + ' asks for no GPU but sets ' + {set} + {none} : {where_} + ' sets ' + {set} + {some})) : []).flatten()).flatten()",
        prefix = lit(&format!("queue {:?}: ", queue.name)),
        no_gpu = asks_no_gpu(&queue.accelerators, "x.c"),
        void = lit(NO_GPU),
    ))
}

/// The Job-level defaults, or `None` when the queue turns them off: every kind's run-level
/// defaults as its descriptor states them ([`crate::kinds::Run::defaults`]). Never for a
/// workload a verified controller made (its owner got them).
pub fn job_defaults(queue: &Queue, child: &str) -> Option<String> {
    let cfg = &queue.config.job_defaults;
    if !cfg.enabled {
        return None;
    }
    let branches: String = select::kinds()
        .filter_map(|k| {
            let ops = run_defaults(cfg, k);
            (!ops.is_empty()).then(|| format!("{} ? {} : ", k.cel_test(), ops.join(" + ")))
        })
        .collect();
    Some(format!(
        "(!has(object.spec) || {child}) ? [] : {branches}[]"
    ))
}

/// One run-level default, compiled: what gates it, the value it writes, and its place.
struct Compiled<'d> {
    default: &'d RunDefault,
    /// What must hold for it to be written, besides the holder's parents existing.
    gates: Vec<String>,
    value: String,
    /// The holder (CEL).
    holder: String,
    /// Its field is unset (CEL, read in the holder).
    unset: String,
}

/// The run-level defaults of `kind`'s descriptor ([`crate::kinds::Run::defaults`]) as JSON
/// Patch operations, each written where the Rust mutation writes it
/// (`mutate::job_defaults`): its gates, its holder (created where the descriptor says so, once
/// for every default under it), what counts as unset, and a misplaced field's value honoured.
/// Whether the user wrote an API-defaulted field is read from a server-side apply manager
/// owning it or its key in kubectl's last-applied-configuration text.
fn run_defaults(
    cfg: &crate::mutate::job_defaults::JobDefaultsConfig,
    kind: WorkloadKind,
) -> Vec<String> {
    use crate::kinds::{Cond, From, Replaces, Setting};
    let scope = select::Scope {
        root: select::Root::Object,
        holder: "object",
        key: None,
    };
    let mut compiled: Vec<Compiled<'_>> = Vec::new();
    // The fields written `true` so far, each with the CEL test for "it is written".
    let mut writes_true: Vec<(&[&str], String)> = Vec::new();
    for d in kind.spec().run.defaults {
        let configured = match d.setting {
            Setting::BackoffLimit => cfg.backoff_limit.map(|v| v.to_string()),
            Setting::Ttl => cfg.ttl_seconds_after_finished.map(|v| v.to_string()),
            Setting::VolcanoMaxRetry => cfg.volcano_max_retry.map(|v| v.to_string()),
            Setting::RestartPolicy => cfg.restart_policy.as_deref().map(lit),
            Setting::EndWithRun => kind.spec().run.ends.written().map(|v| match v {
                serde_json::Value::String(t) => lit(&t),
                other => other.to_string(),
            }),
        };
        let Some((key, parents)) = d.at.split_last() else {
            continue;
        };
        let Some((_, above)) = parents.split_last() else {
            continue;
        };
        let mut gates = Vec::new();
        // A misplaced field's integer is written in its stead (the configured value, else
        // nothing, without one).
        let misplaced = d.misplaced.map(|at| {
            let (value, mut steps) = select::reach("object", at);
            steps.push(format!("type({value}) == int"));
            (value, format!("({})", steps.join(" && ")))
        });
        let value = match (misplaced, configured) {
            (Some((m, has_m)), Some(v)) => format!("({has_m} ? {m} : {v})"),
            (Some((m, has_m)), None) => {
                gates.push(has_m);
                m
            }
            (None, Some(v)) => v,
            (None, None) => continue,
        };
        if let Some(when) = &d.when {
            // A field an earlier default of this pass writes `true` holds here too, as it does
            // for the Rust mutation, which reads the object it has just written.
            let written_true = match when {
                Cond::True {
                    from: From::Object,
                    at,
                } => writes_true
                    .iter()
                    .find(|(field, _)| field == at)
                    .map(|(_, writes)| writes.clone()),
                _ => None,
            };
            gates.push(match written_true {
                Some(writes) => format!("({} || {writes})", select::cond(when, scope)),
                None => select::cond(when, scope),
            });
        }
        if let Some(unless) = &d.unless {
            gates.push(format!("!{}", select::cond(unless, scope)));
        }
        let holder = format!("object.{}", parents.join("."));
        let current = format!("{holder}.{key}");
        let unset = match d.replaces {
            Replaces::Absent => format!("(!has({current}) || {current} == null)"),
            Replaces::Value(v) => format!(
                "((!has({current}) || {current} == null || {current} == {v}) && !(has({current}) && {current} == {value}))"
            ),
            Replaces::ApiDefault(api) => {
                let treat =
                    d.setting != Setting::BackoffLimit || cfg.treat_api_default_backoff_as_unset;
                let mut explicit = vec![written_by_apply(d.at), written_in_last_applied(key)];
                if d.setting == Setting::BackoffLimit {
                    let keep = lit(KEEP_BACKOFF_LIMIT_ANNOTATION);
                    explicit.push(format!(
                        "(has(object.metadata.annotations) && {keep} in object.metadata.annotations && object.metadata.annotations[{keep}] == 'true')"
                    ));
                }
                let replaced = if treat && value != api.to_string() {
                    format!(" || ({current} == {api} && !({}))", explicit.join(" || "))
                } else {
                    String::new()
                };
                format!("(!has({current}) || type({current}) != int{replaced})")
            }
            Replaces::ValueOrApiDefault { unset, api } => {
                let explicit = [written_by_apply(d.at), written_in_last_applied(key)].join(" || ");
                format!(
                    "((!has({current}) || {current} == null || {current} == {unset} || ({current} == {api} && !({explicit}))) && !(has({current}) && {current} == {value}))"
                )
            }
            Replaces::Text(t) => format!(
                "(!has({current}) || type({current}) != string || {current} == {})",
                lit(t)
            ),
        };
        if d.setting == Setting::EndWithRun && !d.make {
            let mut writes = parent_gates(above);
            writes.extend(gates.iter().cloned());
            writes.push(format!("{} && {unset}", is_map(&holder)));
            writes_true.push((d.at, format!("({})", writes.join(" && "))));
        }
        compiled.push(Compiled {
            default: d,
            gates,
            value,
            holder,
            unset,
        });
    }
    let mut out = Vec::new();
    for (i, c) in compiled.iter().enumerate() {
        let (_, parents) = c.default.at.split_last().expect("compiled from a path");
        let (_, above) = parents.split_last().expect("compiled from a holder");
        let write = |c: &Compiled<'_>| {
            guarded(
                &c.gates,
                add_if(
                    &format!("{} && {}", is_map(&c.holder), c.unset),
                    &pointer(c.default.at),
                    &c.value,
                ),
            )
        };
        let op = if !c.default.make {
            write(c)
        } else if compiled[..i]
            .iter()
            .any(|e| e.default.make && e.holder == c.holder)
        {
            // Written with the first default under the same holder.
            continue;
        } else {
            // The holder is created once, when any default under it is written, as the Rust
            // mutation creates it for the first and writes the rest into it.
            let group: Vec<&Compiled<'_>> = compiled[i..]
                .iter()
                .filter(|e| e.default.make && e.holder == c.holder)
                .collect();
            let any: Vec<String> = group
                .iter()
                .map(|e| match e.gates.as_slice() {
                    [] => "true".to_string(),
                    g => format!("({})", g.join(" && ")),
                })
                .collect();
            let create = format!(
                "({} ? [JSONPatch{{op: 'add', path: {}, value: {{}}}}] : [])",
                cel::any(&any),
                pointer(parents)
            );
            let adds = group.iter().map(|e| {
                guarded(
                    &e.gates,
                    format!(
                        "[JSONPatch{{op: 'add', path: {}, value: {}}}]",
                        pointer(e.default.at),
                        e.value
                    ),
                )
            });
            let writes = group.iter().map(|e| write(e));
            format!(
                "((!has({h}) || {h} == null) ? {create} + {} : {})",
                adds.collect::<Vec<_>>().join(" + "),
                writes.collect::<Vec<_>>().join(" + "),
                h = c.holder,
            )
        };
        out.push(guarded(&parent_gates(above), op));
    }
    out
}

/// `ops` where every gate holds, else no operation.
fn guarded(gates: &[String], ops: String) -> String {
    if gates.is_empty() {
        ops
    } else {
        format!("({} ? {ops} : [])", gates.join(" && "))
    }
}

/// The holder's parents (from the object's root) exist.
fn parent_gates(above: &[&str]) -> Vec<String> {
    let mut at = "object".to_string();
    above
        .iter()
        .map(|k| {
            at = format!("{at}.{k}");
            format!("has({at}) && {at} != null")
        })
        .collect()
}

/// `at` is a map.
fn is_map(at: &str) -> String {
    format!("has({at}) && type({at}) == map")
}

/// The JSON Pointer of a path, as a CEL string.
fn pointer(keys: &[&str]) -> String {
    lit(&keys
        .iter()
        .map(|k| format!("/{}", crate::json::escape(k)))
        .collect::<String>())
}

/// A server-side apply manager owns the field at `at` (from the object's root).
fn written_by_apply(at: &[&str]) -> String {
    let mut path = "m.fieldsV1".to_string();
    let mut steps = vec!["has(m.fieldsV1)".to_string()];
    for k in at {
        let f = lit(&format!("f:{k}"));
        steps.push(format!("{f} in {path}"));
        path = format!("{path}[{f}]");
    }
    format!(
        "(has(object.metadata.managedFields) && object.metadata.managedFields.exists(m, m.operation == 'Apply' && (!has(m.subresource) || m.subresource == '') && {}))",
        steps.join(" && ")
    )
}

/// kubectl's last-applied-configuration names the key (as text: CEL cannot parse the JSON).
fn written_in_last_applied(key: &str) -> String {
    let applied = lit(LAST_APPLIED_ANNOTATION);
    format!(
        "(has(object.metadata.annotations) && {applied} in object.metadata.annotations && object.metadata.annotations[{applied}].contains({}))",
        lit(&format!("\"{key}\":"))
    )
}

/// Labels written into the metadata of the map `map` (JSON Pointer expression `ptr`): each
/// (key, CEL value, CEL condition on the existing labels `map.metadata.labels`), added where
/// its condition holds or the map has no labels yet; `metadata` and `labels` are created
/// first where missing.
fn upsert_labels(map: &str, ptr: &str, labels: &[(String, String, String)]) -> String {
    let has_meta = format!("(has({map}.metadata) && {map}.metadata != null)");
    let has_labels =
        format!("({has_meta} && has({map}.metadata.labels) && {map}.metadata.labels != null)");
    let ensure = format!(
        "(!{has_meta} ? [JSONPatch{{op: 'add', path: {ptr} + '/metadata', value: {{'labels': {{}}}}}}] : !{has_labels} ? [JSONPatch{{op: 'add', path: {ptr} + '/metadata/labels', value: {{}}}}] : [])"
    );
    let each: Vec<String> = labels
        .iter()
        .map(|(k, v, when)| {
            add_if(
                &format!("(!{has_labels} || ({when}))"),
                &format!(
                    "{ptr} + {}",
                    lit(&format!("/metadata/labels/{}", crate::json::escape(k)))
                ),
                v,
            )
        })
        .collect();
    format!("({ensure} + {})", each.join(" + "))
}

/// The labels launchgate writes on the object itself: the queue label (kept as is unless it is
/// the queue's raw name where that is no label value) and, for the kinds Kueue manages and not
/// on a JobSet's Jobs, the Kueue labels where they do not keep the queue's settings; with the
/// queue's full name in an annotation where the label value is not the name.
fn label_entries(
    queue: &Queue,
    labels: &str,
    kueue_when: Option<&str>,
) -> Vec<(String, String, String)> {
    let value = queue_label_value(&queue.name);
    let key = lit(QUEUE_LABEL);
    let when = if value != queue.name {
        format!(
            "!({key} in {labels}) || {labels}[{key}] == {}",
            lit(&queue.name)
        )
    } else {
        format!("!({key} in {labels})")
    };
    let mut out = vec![(QUEUE_LABEL.to_string(), lit(&value), when)];
    if let (Some(cfg), Some(kueue_when)) = (&queue.config.kueue, kueue_when) {
        for setting in cfg.settings() {
            out.push((
                setting.label.to_string(),
                lit(&setting.value()),
                format!("{kueue_when} && !{}", super::kueue::holds(&setting, labels)),
            ));
        }
    }
    out
}

/// The queue-name annotation where the queue label is written with a value that is not the
/// queue's name.
fn queue_name_annotation(queue: &Queue, map: &str, ptr: &str, label_written: &str) -> String {
    if queue_label_value(&queue.name) == queue.name {
        return "[]".into();
    }
    let annotations = format!("{map}.metadata.annotations");
    let has = format!("(has({map}.metadata) && has({annotations}) && {annotations} != null)");
    let key = lit(QUEUE_NAME_ANNOTATION);
    format!(
        "({label_written} ? ({has} ? ({key} in {annotations} ? [] : [JSONPatch{{op: 'add', path: {ptr} + {}, value: {name}}}]) : [JSONPatch{{op: 'add', path: {ptr} + '/metadata/annotations', value: {{{key}: {name}}}}}]) : [])",
        lit(&format!(
            "/metadata/annotations/{}",
            crate::json::escape(QUEUE_NAME_ANNOTATION)
        )),
        name = lit(&queue.name),
    )
}

/// The queue's Kueue labels alone, on the object itself, where they do not keep the queue's
/// settings: what an UPDATE judged as a CREATE writes of what a CREATE writes (as the webhook's
/// `mutate::kueue` on such an UPDATE: an UPDATE never rewrites pod templates, and the queue
/// label is the one that brought the workload in). Only for the kinds Kueue manages through
/// their labels, never for a verified controller's child; `None` when the queue sets no Kueue
/// label.
pub fn kueue_labels(queue: &Queue, child: &str) -> Option<String> {
    let settings = queue.config.kueue.as_ref()?.settings();
    if settings.is_empty() {
        return None;
    }
    let labels = "object.metadata.labels";
    let entries: Vec<(String, String, String)> = settings
        .iter()
        .map(|s| {
            (
                s.label.to_string(),
                lit(&s.value()),
                format!("!{}", super::kueue::holds(s, labels)),
            )
        })
        .collect();
    Some(format!(
        "({} && !{child}) ? {} : []",
        super::kueue::managed(),
        upsert_labels("object", "''", &entries)
    ))
}

/// The labels mutation: the queue label on the object and its pod templates (so controller-made
/// pods carry it), the Kueue labels on the object, and the queue-name annotation.
pub fn labels(queue: &Queue, child: &str) -> String {
    let kueue_when = format!("({} && !{child})", super::kueue::managed());
    let for_map = |map: &str, ptr: &str, kueue: Option<&str>| {
        let labels = format!("{map}.metadata.labels");
        let entries = label_entries(queue, &labels, kueue);
        let has_labels = format!(
            "(has({map}.metadata) && {map}.metadata != null && has({labels}) && {labels} != null)"
        );
        let written = format!("(!{has_labels} || ({}))", entries[0].2);
        // The annotation is decided on the labels before they are written.
        format!(
            "{} + {}",
            queue_name_annotation(queue, map, ptr, &written),
            upsert_labels(map, ptr, &entries)
        )
    };
    let templates = select::template_pointers();
    format!(
        "{} + (has(object.spec) ? {templates}.map(x, {}).flatten() : [])",
        for_map("object", "''", Some(&kueue_when)),
        for_map("x.t", "x.ptr", None),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{Cond, Replaces, Setting};
    use crate::mutate::test_support::{mutate_with, queue_yaml};
    use crate::native::eval::{V, eval};
    use serde_json::{Value, json};

    /// What one dimension of the generated objects does to the object.
    #[derive(Clone)]
    enum Put {
        Nothing,
        /// The path's maps exist.
        Ensure(&'static [&'static str]),
        Set(&'static [&'static str], Value),
    }

    fn put(object: &mut Value, put: &Put) {
        let (at, value) = match put {
            Put::Nothing => return,
            Put::Ensure(at) => (*at, None),
            Put::Set(at, v) => (*at, Some(v.clone())),
        };
        let mut here = object;
        for (i, k) in at.iter().enumerate() {
            let map = here.as_object_mut().expect("a map on the way");
            if i + 1 == at.len()
                && let Some(v) = &value
            {
                map.insert(k.to_string(), v.clone());
                return;
            }
            here = map.entry(k.to_string()).or_insert_with(|| json!({}));
        }
    }

    /// The states of a default's field: its holder absent, the field absent, null, the value
    /// it replaces, another value.
    fn field_states(d: &'static RunDefault) -> Vec<Put> {
        let (_, parents) = d.at.split_last().unwrap();
        let other = match d.setting {
            Setting::RestartPolicy => json!("Never"),
            Setting::EndWithRun => json!(false),
            _ => json!(5),
        };
        let mut out = vec![
            Put::Nothing,
            Put::Ensure(parents),
            Put::Set(d.at, Value::Null),
            Put::Set(d.at, other),
        ];
        if d.setting == Setting::EndWithRun {
            out.push(Put::Set(d.at, json!("None")));
        }
        match d.replaces {
            Replaces::Absent => {}
            Replaces::Value(v) | Replaces::ApiDefault(v) => out.push(Put::Set(d.at, json!(v))),
            Replaces::ValueOrApiDefault { unset, api } => {
                out.push(Put::Set(d.at, json!(unset)));
                out.push(Put::Set(d.at, json!(api)));
            }
            Replaces::Text(t) => out.push(Put::Set(d.at, json!(t))),
        }
        out
    }

    fn cond_states(c: &Cond) -> Vec<Put> {
        match c {
            Cond::True { at, .. } => vec![Put::Nothing, Put::Set(at, json!(true))],
            Cond::Has { at, .. } => vec![Put::Nothing, Put::Set(at, json!(1))],
            Cond::OneOf { at, any_of, .. } => vec![Put::Nothing, Put::Set(at, json!(any_of[0]))],
            Cond::KeyIs(_) => vec![Put::Nothing],
        }
    }

    /// Every combination of the dimensions' states.
    fn objects(base: &Value, dimensions: &[Vec<Put>]) -> Vec<Value> {
        let mut out = vec![base.clone()];
        for states in dimensions {
            out = out
                .iter()
                .flat_map(|o| {
                    states.iter().map(move |p| {
                        let mut o = o.clone();
                        put(&mut o, p);
                        o
                    })
                })
                .collect();
        }
        out
    }

    /// The compiled defaults of every kind the native policies cover write, on every
    /// combination of its fields' states, what the webhook's job-defaults mutation writes.
    #[test]
    fn every_kinds_run_defaults_compile_to_what_the_webhook_writes() {
        let configs = [
            "{}",
            "{jobDefaults: {ttlSecondsAfterFinished: null, restartPolicy: Never}}",
            "{jobDefaults: {backoffLimit: 6, volcanoMaxRetry: 2}}",
            "{jobDefaults: {backoffLimit: null, treatApiDefaultBackoffAsUnset: false}}",
        ];
        let mut checked = 0;
        for kind in select::kinds() {
            let defaults = kind.spec().run.defaults;
            if defaults.is_empty() {
                continue;
            }
            let mut dimensions: Vec<Vec<Put>> = Vec::new();
            for d in defaults {
                dimensions.push(field_states(d));
                for c in d.when.iter().chain(&d.unless) {
                    dimensions.push(cond_states(c));
                }
                if let Some(m) = d.misplaced {
                    dimensions.push(vec![Put::Nothing, Put::Set(m, json!(7))]);
                }
            }
            // What the user wrote, as kubectl's client-side apply records it.
            let mut written = json!({});
            for d in defaults {
                put(&mut written, &Put::Set(d.at, json!(1)));
            }
            dimensions.push(vec![
                Put::Nothing,
                Put::Set(
                    &["metadata", "annotations"],
                    json!({LAST_APPLIED_ANNOTATION: written.to_string()}),
                ),
            ]);
            let (group, version, _) = kind.api_resource();
            let request = V::from_json(&json!({"kind": {
                "group": group, "version": version, "kind": kind.api_kind()}}));
            let base = json!({"apiVersion": kind.api_version(), "kind": kind.api_kind(),
                "metadata": {"name": "w"}, "spec": {}});
            for config in configs {
                let policy = queue_yaml(config).unwrap();
                let expr = job_defaults(policy.queue("q").unwrap(), "false").unwrap();
                for object in objects(&base, &dimensions) {
                    let ops = eval(
                        &expr,
                        &[
                            ("object", V::from_json(&object)),
                            ("request", request.clone()),
                        ],
                    )
                    .unwrap_or_else(|e| panic!("{kind:?} {config}: {e} on {object}"));
                    let patch: json_patch::Patch = serde_json::from_value(ops.into_json()).unwrap();
                    let mut native = object.clone();
                    json_patch::patch(&mut native, &patch)
                        .unwrap_or_else(|e| panic!("{kind:?} {config}: {e} on {object}"));
                    let (webhook, _) = mutate_with(
                        &crate::mutate::job_defaults::MUTATOR,
                        config,
                        object.clone(),
                    );
                    assert_eq!(native, webhook, "{kind:?} {config} on {object}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    /// The containers the visible-devices tests put in a pod: every way of asking for a GPU
    /// (or something the map may count), and every state of the variable in env.
    fn visible_devices_containers() -> Vec<Value> {
        let resources = [
            json!(null),
            json!({"limits": {"cpu": "2", "memory": "4Gi"}}),
            json!({"limits": {"nvidia.com/gpu": "1"}}),
            json!({"limits": {"nvidia.com/gpu": 2}}),
            json!({"limits": {"nvidia.com/gpu": "0"}}),
            json!({"limits": {"nvidia.com/gpu": "0"}, "requests": {"nvidia.com/gpu": "1"}}),
            json!({"limits": {"nvidia.com/gpu": "lots"}, "requests": {"nvidia.com/gpu": "1"}}),
            json!({"requests": {"amd.com/gpu": 1.5}}),
            json!({"limits": {"nvidia.com/mig-1g.10gb": "1"}}),
            json!({"limits": {"gpu.intel.com/xe": "1"}}),
            json!({"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}}),
            json!({"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "0"}}),
            json!({"limits": {"deviceclass.resource.kubernetes.io/fpga.example.com": "0"}}),
            json!({"limits": {"deviceclass.resource.kubernetes.io/compute-domain-daemon.nvidia.com": "1"}}),
            json!({"limits": {"example.com/a-gpu1": "1", "example.com/nic": "4", "vendor.io/gpu": "1"}}),
            json!({"claims": [{"name": "dev"}]}),
        ];
        let envs = [
            json!(null),
            json!([]),
            json!([{"name": "A", "value": "1"}]),
            json!([{"name": VISIBLE_DEVICES, "value": "all"}]),
            json!([{"name": VISIBLE_DEVICES, "value": "all"}, {"name": VISIBLE_DEVICES, "value": "void"}]),
            json!([{"name": VISIBLE_DEVICES, "value": "void"}, {"name": VISIBLE_DEVICES, "value": "0"}]),
            json!([{"name": VISIBLE_DEVICES, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
            json!([{"name": VISIBLE_DEVICES}]),
        ];
        let mut out = Vec::new();
        for (i, r) in resources.iter().enumerate() {
            for (j, e) in envs.iter().enumerate() {
                let mut c = json!({"name": format!("c{i}-{j}"), "image": "acme/t:1"});
                if !r.is_null() {
                    c["resources"] = r.clone();
                }
                if !e.is_null() {
                    c["env"] = e.clone();
                }
                out.push(c);
            }
        }
        out
    }

    /// The compiled visible-devices mutation writes, on every way of asking for a GPU and every
    /// state of the variable, what the webhook's mutation writes (offline, where a claim cannot
    /// be read, both leave its container alone); the compiled check finds the tenant values the
    /// webhook's rule finds, in the same containers.
    #[test]
    fn visible_devices_compile_to_what_the_webhook_writes_and_denies() {
        let configs = ["{}", "{limits: {enforcement: warn}}"];
        // A map of other names: a pattern with `?`, names that count as nothing, an exact
        // name that overrides a pattern, classes of no GPU.
        let custom = "accelerators:\n  resources:\n    \"*/gpu\": 1\n    \"example.com/?-gpu*\": 1\n    example.com/nic: 0\n    vendor.io/gpu: 0\n  deviceClasses:\n    gpu.nvidia.com: {gpusPerDevice: 1}\n    compute-domain-daemon.nvidia.com: {gpusPerDevice: 0}\n";
        let containers = visible_devices_containers();
        let mut checked = 0;
        for (extra, config) in configs.iter().map(|c| ("", *c)).chain([(custom, "{}")]) {
            let policy = crate::policy::Policy::from_yaml(&format!(
                "{extra}defaultQueue: q\nqueues:\n  q: {config}\n"
            ))
            .unwrap();
            let queue = policy.queue("q").unwrap();
            let mutation = visible_devices(queue, "variables.specs").unwrap();
            let check = visible_devices_violations(queue, "variables.specs", "false").unwrap();
            for (k, chunk) in containers.chunks(9).enumerate() {
                let mut spec = json!({"containers": chunk, "initContainers": [chunk[0].clone()],
                    "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "t"}]});
                if k % 4 == 0 {
                    spec["os"] = json!({"name": if k % 8 == 0 { "linux" } else { "windows" }});
                }
                let object = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "labels": {"wandb.ai/monitor": "true"}},
                    "spec": spec});
                let request =
                    V::from_json(&json!({"kind": {"group": "", "version": "v1", "kind": "Pod"}}));
                let walk = [("object", V::from_json(&object)), ("request", request)];
                let specs = eval(&select::specs(select::Root::Object), &walk).unwrap();
                let variables = V::Map(vec![(V::Str("specs".into()), specs)]);
                let env = [("variables", variables)];
                let ops = eval(&mutation, &env).unwrap_or_else(|e| panic!("{e} on {object}"));
                let patch: json_patch::Patch = serde_json::from_value(ops.into_json()).unwrap();
                let mut native = object.clone();
                json_patch::patch(&mut native, &patch).unwrap();
                let full = format!("defaultQueue: q\nqueues:\n  q: {config}\n");
                let (webhook, _) = if extra.is_empty() {
                    mutate_with(
                        &crate::mutate::visible_devices::MUTATOR,
                        config,
                        object.clone(),
                    )
                } else {
                    mutate_with_policy(&format!("{extra}{full}"), object.clone())
                };
                assert_eq!(native, webhook, "{config} on {object}");
                // The tenant values, in the same containers.
                let lines = eval(&check, &env).unwrap_or_else(|e| panic!("{e} on {object}"));
                let lines: Vec<String> = lines
                    .into_json()
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| l.as_str().unwrap().to_string())
                    .collect();
                let mut by_cel: Vec<String> = lines
                    .iter()
                    .map(|l| l.split(" (").next().unwrap().to_string())
                    .collect();
                let accounting = crate::workload::consumption::Accounting {
                    accelerators: &queue.accelerators,
                    claims: &crate::cluster::NoCluster,
                    namespace: "default",
                };
                let found = crate::mutate::visible_devices::violations(
                    "q",
                    WorkloadKind::Pod,
                    &object,
                    &accounting,
                );
                // In the webhook's words where the container asks for no GPU.
                for v in &found {
                    assert_eq!(
                        v.message.contains("asks for no GPU"),
                        lines.contains(&v.message),
                        "{}\n{lines:?}",
                        v.message
                    );
                }
                let mut by_webhook: Vec<String> = found
                    .iter()
                    .map(|v| v.message.split(" (").next().unwrap().to_string())
                    .collect();
                by_cel.sort();
                by_webhook.sort();
                assert_eq!(by_cel, by_webhook, "{object}");
                checked += 1;
            }
        }
        assert!(checked >= 30, "{checked}");
    }

    /// [`mutate_with`] of the visible-devices mutator under a whole config (`accelerators` too).
    fn mutate_with_policy(config: &str, object: Value) -> (Value, crate::mutate::Findings) {
        let policy = crate::policy::Policy::from_yaml(config).unwrap();
        let queue = policy.queue("q").unwrap();
        let request =
            crate::admission::AdmissionRequest::synthetic_create(object.clone(), None).unwrap();
        let ctx = crate::mutate::MutationContext {
            kind: WorkloadKind::Pod,
            queue_name: &queue.name,
            settings: queue.mutation_settings(),
            sidecars: &[],
            request: &request,
            cluster: &crate::cluster::NoCluster,
            child: false,
            runtime: None,
            admitted: None,
            outside_exemption: None,
            intent: Default::default(),
        };
        let mut out = object;
        let mut findings = crate::mutate::Findings::default();
        let mut recorder = crate::patch::Recorder::default();
        (crate::mutate::visible_devices::MUTATOR.run)(
            &ctx,
            &mut crate::patch::Node::root(&mut out, &mut recorder),
            &mut findings,
        );
        (out, findings)
    }
}
