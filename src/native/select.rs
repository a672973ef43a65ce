//! Which requests a queue's native policies act on, in CEL: the same decisions as the webhook's
//! launch-workload test, queue resolution, exemptions and controller verification
//! (`policy::resolve`, `policy::exemption`, `policy::owner`), written as `matchConditions` and
//! variables.

use crate::cel::{self, lit};
use crate::policy::{
    EXEMPTED_BY_ANNOTATION, Exemption, OWN_NAME, Policy, Queue, owner_kinds_of, owner_mark,
};
use crate::workload::WorkloadKind;

/// The kinds native policies cover (a TrainJob's pods come from its runtime: webhook only).
pub const KINDS: [WorkloadKind; 5] = [
    WorkloadKind::Pod,
    WorkloadKind::BatchJob,
    WorkloadKind::VolcanoJob,
    WorkloadKind::PyTorchJob,
    WorkloadKind::JobSet,
];

/// The CEL test for "the request is for a `kind`" (the covered kinds differ in group).
pub fn is_kind(kind: WorkloadKind) -> String {
    format!("request.kind.group == {}", lit(kind.api_group()))
}

/// A PyTorchJob's replica types in the order launchgate reads its pod templates
/// ([`crate::workload::replica_types_in_order`]: byte order of the names). CEL iterates a map
/// in no defined order, so every expression that walks `pytorchReplicaSpecs` walks this list.
pub fn replica_types() -> &'static str {
    "object.spec.pytorchReplicaSpecs.map(k, string(k)).sort()"
}

/// The workload's pod templates (maps with `metadata` and `spec`); none for a Pod.
pub fn templates() -> String {
    format!(
        "({job} ? (has(object.spec) && has(object.spec.template) ? [object.spec.template] : []) : \
         {volcano} ? (has(object.spec) && has(object.spec.tasks) ? object.spec.tasks.filter(t, has(t.template)).map(t, t.template) : []) : \
         {pytorch} ? (has(object.spec) && has(object.spec.pytorchReplicaSpecs) ? {replicas}.filter(k, has(object.spec.pytorchReplicaSpecs[k].template)).map(k, object.spec.pytorchReplicaSpecs[k].template) : []) : \
         {jobset} ? (has(object.spec) && has(object.spec.replicatedJobs) ? object.spec.replicatedJobs.filter(j, has(j.template) && has(j.template.spec) && has(j.template.spec.template)).map(j, j.template.spec.template) : []) : [])",
        job = is_kind(WorkloadKind::BatchJob),
        volcano = is_kind(WorkloadKind::VolcanoJob),
        pytorch = is_kind(WorkloadKind::PyTorchJob),
        jobset = is_kind(WorkloadKind::JobSet),
        replicas = replica_types(),
    )
}

/// Where launch and queue labels are read: the object and its pod templates.
pub fn carriers() -> String {
    format!("([object] + {})", templates())
}

/// Every pod template of the workload as `{'tat': its dotted path, 't': the template, 'at':
/// its spec's dotted path, 'ptr': its spec's JSON Pointer, 's': the spec, 'role': the Volcano
/// task / PyTorchJob replica type / replicated job it is, or what a Pod carries of them, 'n':
/// how many of its pods can run at once}`.
pub fn specs() -> String {
    let entry = |tat: &str, t: &str, ptr: &str, role: &str, n: &str| {
        format!(
            "{{'tat': dyn({tat}), 't': dyn({t}), 'at': dyn({tat} + ({tat} == '' ? 'spec' : '.spec')), 'ptr': dyn({ptr}), 's': dyn({t}.spec), 'role': dyn({role}), 'n': dyn([{n}].map(n, n < 0 ? 0 : n)[0])}}"
        )
    };
    let int_or =
        |v: &str, default: &str| format!("(has({v}) && type({v}) == int ? {v} : {default})");
    // A batch/v1 Job runs min(parallelism, completions) pods at once.
    let at_once = |job: &str| {
        format!(
            "[{}].map(par, has({job}.completions) && type({job}.completions) == int && {job}.completions < par ? {job}.completions : par)[0]",
            int_or(&format!("{job}.parallelism"), "1")
        )
    };
    let label = |key: &str| {
        format!(
            "(has(object.metadata.labels) && {k} in object.metadata.labels ? [object.metadata.labels[{k}]] : [])",
            k = lit(key)
        )
    };
    let annotation = |key: &str| {
        format!(
            "(has(object.metadata.annotations) && {k} in object.metadata.annotations ? [object.metadata.annotations[{k}]] : [])",
            k = lit(key)
        )
    };
    let pod_role = format!(
        "[{} + {} + {} + {}].map(r, size(r) > 0 ? r[0] : '')[0]",
        label("volcano.sh/task-spec"),
        annotation("volcano.sh/task-spec"),
        label("training.kubeflow.org/replica-type"),
        label("jobset.sigs.k8s.io/replicatedjob-name"),
    );
    let pod = entry("''", "object", "'/spec'", &pod_role, "1");
    let job = entry(
        "'spec.template'",
        "object.spec.template",
        "'/spec/template/spec'",
        "''",
        &at_once("object.spec"),
    );
    let task = entry(
        "'spec.tasks[' + string(i) + '].template'",
        "object.spec.tasks[i].template",
        "'/spec/tasks/' + string(i) + '/template/spec'",
        "(has(object.spec.tasks[i].name) ? object.spec.tasks[i].name : '')",
        &int_or("object.spec.tasks[i].replicas", "1"),
    );
    let replica = entry(
        "'spec.pytorchReplicaSpecs.' + k + '.template'",
        "object.spec.pytorchReplicaSpecs[k].template",
        &format!(
            "'/spec/pytorchReplicaSpecs/' + {} + '/template/spec'",
            cel::pointer_segment("k")
        ),
        "k",
        // The Worker replicas of an elastic PyTorchJob scale up to maxReplicas.
        &format!(
            "[{}].map(r, k.lowerAscii() == 'worker' && has(object.spec.elasticPolicy) && has(object.spec.elasticPolicy.maxReplicas) && type(object.spec.elasticPolicy.maxReplicas) == int && object.spec.elasticPolicy.maxReplicas > r ? object.spec.elasticPolicy.maxReplicas : r)[0]",
            int_or("object.spec.pytorchReplicaSpecs[k].replicas", "1")
        ),
    );
    let rjob = entry(
        "'spec.replicatedJobs[' + string(i) + '].template.spec.template'",
        "object.spec.replicatedJobs[i].template.spec.template",
        "'/spec/replicatedJobs/' + string(i) + '/template/spec/template/spec'",
        "(has(object.spec.replicatedJobs[i].name) ? object.spec.replicatedJobs[i].name : '')",
        &format!(
            "{} * {}",
            int_or("object.spec.replicatedJobs[i].replicas", "1"),
            at_once("object.spec.replicatedJobs[i].template.spec")
        ),
    );
    format!(
        "({pod_is} ? (has(object.spec) ? [{pod}] : []) : \
         {job_is} ? (has(object.spec) && has(object.spec.template) && has(object.spec.template.spec) ? [{job}] : []) : \
         {volcano_is} ? (has(object.spec) && has(object.spec.tasks) ? lists.range(size(object.spec.tasks)).filter(i, has(object.spec.tasks[i].template) && has(object.spec.tasks[i].template.spec)).map(i, {task}) : []) : \
         {pytorch_is} ? (has(object.spec) && has(object.spec.pytorchReplicaSpecs) ? {replicas}.filter(k, has(object.spec.pytorchReplicaSpecs[k].template) && has(object.spec.pytorchReplicaSpecs[k].template.spec)).map(k, {replica}) : []) : \
         {jobset_is} ? (has(object.spec) && has(object.spec.replicatedJobs) ? lists.range(size(object.spec.replicatedJobs)).filter(i, has(object.spec.replicatedJobs[i].template) && has(object.spec.replicatedJobs[i].template.spec) && has(object.spec.replicatedJobs[i].template.spec.template) && has(object.spec.replicatedJobs[i].template.spec.template.spec)).map(i, {rjob}) : []) : [])",
        pod_is = is_kind(WorkloadKind::Pod),
        job_is = is_kind(WorkloadKind::BatchJob),
        volcano_is = is_kind(WorkloadKind::VolcanoJob),
        pytorch_is = is_kind(WorkloadKind::PyTorchJob),
        jobset_is = is_kind(WorkloadKind::JobSet),
        replicas = replica_types(),
    )
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

/// A launch workload: the object or one of its pod templates carries a launch or queue label.
pub fn is_launch(policy: &Policy) -> String {
    let rules = &policy.config.match_rules;
    let keys: Vec<&String> = rules
        .launch_labels
        .iter()
        .chain(&rules.queue_labels)
        .collect();
    carries_label(&keys)
}

/// True when the object or one of its pod templates carries one of the labels `keys`.
pub fn carries_label<S: AsRef<str>>(keys: &[S]) -> String {
    if keys.is_empty() {
        return "false".into();
    }
    format!(
        "{}.exists(c, has(c.metadata) && has(c.metadata.labels) && {}.exists(k, k in c.metadata.labels))",
        carriers(),
        cel::str_list(keys)
    )
}

/// The value of env var `name` as the first container of the workload that sets it non-empty
/// sees it (the last entry of that name), or `''`.
fn env_value(name: &str) -> String {
    let n = lit(name);
    format!(
        "[{specs}.map(p, {containers}).flatten().filter(c, has(c.env) && c.env.exists(e, e.name == {n})).map(c, c.env.filter(e, e.name == {n})[size(c.env.filter(e, e.name == {n})) - 1]).map(e, has(e.value) ? e.value : '').filter(v, v != '')].map(vs, size(vs) > 0 ? vs[0] : '')[0]",
        specs = specs(),
        containers = spec_containers("p.s"),
    )
}

/// The queue named by the workload's queue labels (first key found on the object or a
/// template, when non-empty), or `''`.
pub fn label_value(policy: &Policy) -> String {
    let keys = &policy.config.match_rules.queue_labels;
    if keys.is_empty() {
        return "''".into();
    }
    format!(
        "[{keys}.map(k, {carriers}.filter(c, has(c.metadata) && has(c.metadata.labels) && k in c.metadata.labels).map(c, c.metadata.labels[k])).filter(vs, size(vs) > 0 && vs[0] != '').map(vs, vs[0])].map(found, size(found) > 0 ? found[0] : '')[0]",
        keys = cel::str_list(keys),
        carriers = carriers(),
    )
}

/// The config key of the queue a launch workload belongs to, or `''`: the same order as the
/// webhook (queue label, container env with the entity, namespace default, global default).
pub fn queue_key(policy: &Policy) -> String {
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
    let mut unique: Vec<(String, String)> = Vec::new();
    let mut ambiguous: Vec<String> = Vec::new();
    for q in policy.queues.values().filter(|q| q.entity.is_some()) {
        if ambiguous.contains(&q.name) {
            continue;
        }
        if let Some(at) = unique.iter().position(|(n, _)| *n == q.name) {
            unique.remove(at);
            ambiguous.push(q.name.clone());
        } else {
            unique.push((q.name.clone(), q.key.clone()));
        }
    }
    let by_label = cel::str_map(by_label);
    let unique = cel::str_map(unique);
    let requested = format!(
        "[{}].map(l, l != '' ? l : {})[0]",
        label_value(policy),
        policy
            .config
            .match_rules
            .queue_env
            .as_deref()
            .map_or("''".into(), env_value)
    );
    let entity = policy
        .config
        .match_rules
        .queue_entity_env
        .as_deref()
        .map_or("''".into(), env_value);
    let lookup = format!(
        "r == '' ? '' : r.contains('/') ? (r in {direct} ? r : '') : \
         [{entity}].map(e, (e != '' && (e + '/' + r) in {direct}) ? e + '/' + r : r in {direct} ? r : r in {by_label} ? {by_label}[r] : e != '' ? '' : r in {unique} ? {unique}[r] : '')[0]"
    );
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
            pod_specs(),
            cel::any_wildcard(&e.images, "(has(c.image) ? c.image : '')")
        );
        let some = format!("{}.exists(s, size({containers}) > 0)", pod_specs());
        parts.push(format!("({fits} && {some})"));
    }
    cel::all(&parts)
}

/// The pod specs of the object: a Pod's own, a workload's templates'.
fn pod_specs() -> String {
    format!(
        "({} ? (has(object.spec) ? [object.spec] : []) : {}.filter(t, has(t.spec)).map(t, t.spec))",
        is_kind(WorkloadKind::Pod),
        templates()
    )
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
        let kinds: Vec<String> = [
            WorkloadKind::Pod,
            WorkloadKind::BatchJob,
            WorkloadKind::VolcanoJob,
            WorkloadKind::PyTorchJob,
            WorkloadKind::JobSet,
            WorkloadKind::TrainJob,
        ]
        .iter()
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
    for kind in KINDS {
        let mut claims = Vec::new();
        for owner in owner_kinds_of(kind) {
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
                        format!(
                            "(has(object.metadata.labels) && {k} in object.metadata.labels && object.metadata.labels[{k}] == {expected}) || (has(object.metadata.annotations) && {k} in object.metadata.annotations && object.metadata.annotations[{k}] == {expected})"
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
            is_kind(kind),
            cel::any(&claims)
        ));
    }
    cel::any(&per_kind)
}

/// The `matchConditions` every policy of `queue` carries: a launch workload of this queue,
/// not exempted. (A matchCondition cannot read policy variables, so each is self-contained.)
pub fn match_conditions(policy: &Policy, queue: &Queue) -> Vec<(String, String)> {
    let mut out = vec![
        ("launch-workload".to_string(), is_launch(policy)),
        (
            "queue".to_string(),
            format!("{} == {}", queue_key(policy), lit(&queue.key)),
        ),
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
                    carriers(),
                    marked("c")
                ),
                format!(
                    "{}.all(c, !{} || c.metadata.annotations[{key}] == {name})",
                    carriers(),
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
