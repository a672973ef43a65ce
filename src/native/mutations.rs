//! The mutations CEL can express, as `MutatingAdmissionPolicy` JSON Patch expressions: the
//! container and pod `securityContext` defaults, the Job-level defaults (with the backoffLimit
//! intent rule as far as CEL can read it), the queue label, and the Kueue labels. Each mirrors
//! its webhook mutator (`mutate::*`) rule for rule; what it cannot mirror is in the report.

use super::select::{self, is_kind};
use crate::cel::{self, lit};
use crate::mutate::job_defaults::{API_DEFAULT_BACKOFF_LIMIT, KEEP_BACKOFF_LIMIT_ANNOTATION};
use crate::mutate::labels::{QUEUE_LABEL, QUEUE_NAME_ANNOTATION, queue_label_value};
use crate::mutate::security_context::SecurityContextConfig;
use crate::policy::Queue;
use crate::workload::WorkloadKind;
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
    let windows = "(has(p.s.os) && has(p.s.os.name) && p.s.os.name == 'windows')";
    Some(format!(
        "{}.map(p, {windows} ? [] : {pod} + {} + {}).flatten()",
        select::specs(),
        per_list("containers"),
        per_list("initContainers"),
    ))
}

/// The Job-level defaults, or `None` when the queue turns them off. Never for a Job a
/// JobSet's controller made (its JobSet got them).
pub fn job_defaults(queue: &Queue, child: &str) -> Option<String> {
    let cfg = &queue.config.job_defaults;
    if !cfg.enabled {
        return None;
    }
    let set_if_absent = |holder: &str, ptr: &str, key: &str, value: Option<i64>| {
        value.map(|v| {
            add_if(
                &unset(holder, key),
                &lit(&format!("{ptr}/{key}")),
                &v.to_string(),
            )
        })
    };
    // batch/v1 Job.
    let mut job = Vec::new();
    if let Some(limit) = cfg.backoff_limit {
        let keep = lit(KEEP_BACKOFF_LIMIT_ANNOTATION);
        let applied = lit(LAST_APPLIED_ANNOTATION);
        // Did the user write spec.backoffLimit? The keep annotation; a server-side apply
        // manager owning it; a client-side apply record naming it.
        let explicit = format!(
            "((has(object.metadata.annotations) && {keep} in object.metadata.annotations && object.metadata.annotations[{keep}] == 'true') || \
             (has(object.metadata.managedFields) && object.metadata.managedFields.exists(m, m.operation == 'Apply' && (!has(m.subresource) || m.subresource == '') && has(m.fieldsV1) && 'f:spec' in m.fieldsV1 && 'f:backoffLimit' in m.fieldsV1['f:spec'])) || \
             (has(object.metadata.annotations) && {applied} in object.metadata.annotations && object.metadata.annotations[{applied}].contains('\"backoffLimit\":')))"
        );
        let per_index =
            "(has(object.spec.backoffLimitPerIndex) && object.spec.backoffLimitPerIndex != null)";
        let absent = unset("object.spec", "backoffLimit");
        let api_default = if cfg.treat_api_default_backoff_as_unset
            && limit != API_DEFAULT_BACKOFF_LIMIT
        {
            format!(
                "(!{absent} && object.spec.backoffLimit == {API_DEFAULT_BACKOFF_LIMIT} && !{explicit} && !{per_index})"
            )
        } else {
            "false".into()
        };
        job.push(add_if(
            &format!("({absent} && !{per_index}) || {api_default}"),
            "'/spec/backoffLimit'",
            &limit.to_string(),
        ));
    }
    job.extend(set_if_absent(
        "object.spec",
        "/spec",
        "ttlSecondsAfterFinished",
        cfg.ttl_seconds_after_finished,
    ));
    if let Some(policy) = &cfg.restart_policy {
        job.push(add_if(
            "has(object.spec.template) && has(object.spec.template.spec) && (!has(object.spec.template.spec.restartPolicy) || object.spec.template.spec.restartPolicy == null || object.spec.template.spec.restartPolicy == 'Always')",
            "'/spec/template/spec/restartPolicy'",
            &lit(policy),
        ));
    }
    // Volcano Job: maxRetry 0 is unset to Volcano.
    let mut volcano = Vec::new();
    volcano.extend(set_if_absent(
        "object.spec",
        "/spec",
        "ttlSecondsAfterFinished",
        cfg.ttl_seconds_after_finished,
    ));
    if let Some(retry) = cfg.volcano_max_retry {
        volcano.push(add_if(
            &format!(
                "({} || object.spec.maxRetry == 0) && {}",
                unset("object.spec", "maxRetry"),
                if retry == 0 { "false" } else { "true" }
            ),
            "'/spec/maxRetry'",
            &retry.to_string(),
        ));
    }
    // PyTorchJob: runPolicy; a ttlSecondsAfterFinished written at spec level is honoured there.
    let mut pytorch = Vec::new();
    let run_policy_entries: Vec<(&str, String)> = [
        ("backoffLimit", cfg.backoff_limit.map(|v| v.to_string())),
        (
            "ttlSecondsAfterFinished",
            match cfg.ttl_seconds_after_finished {
                Some(v) => Some(format!(
                    "(has(object.spec.ttlSecondsAfterFinished) && type(object.spec.ttlSecondsAfterFinished) == int ? object.spec.ttlSecondsAfterFinished : {v})"
                )),
                None => Some("object.spec.ttlSecondsAfterFinished".into()),
            },
        ),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect();
    if !run_policy_entries.is_empty() {
        let ttl_known = cfg.ttl_seconds_after_finished.is_some();
        let guard_of = |k: &str| {
            if k == "ttlSecondsAfterFinished" && !ttl_known {
                "(has(object.spec.ttlSecondsAfterFinished) && type(object.spec.ttlSecondsAfterFinished) == int)".to_string()
            } else {
                "true".to_string()
            }
        };
        let existing: Vec<String> = run_policy_entries
            .iter()
            .map(|(k, v)| {
                add_if(
                    &format!("{} && {}", guard_of(k), unset("object.spec.runPolicy", k)),
                    &lit(&format!("/spec/runPolicy/{k}")),
                    v,
                )
            })
            .collect();
        let any_entry: Vec<String> = run_policy_entries
            .iter()
            .map(|(k, _)| guard_of(k))
            .collect();
        pytorch.push(format!(
            "(has(object.spec.runPolicy) && object.spec.runPolicy != null ? ({}) : ({} ? [JSONPatch{{op: 'add', path: '/spec/runPolicy', value: {{}}}}] : []) + ({}))",
            existing.join(" + "),
            cel::any(&any_entry),
            run_policy_entries
                .iter()
                .map(|(k, v)| add_if(&guard_of(k), &lit(&format!("/spec/runPolicy/{k}")), v))
                .collect::<Vec<_>>()
                .join(" + ")
        ));
    }
    // JobSet: failurePolicy.maxRestarts from backoffLimit, and ttlSecondsAfterFinished.
    let mut jobset = Vec::new();
    jobset.extend(set_if_absent(
        "object.spec",
        "/spec",
        "ttlSecondsAfterFinished",
        cfg.ttl_seconds_after_finished,
    ));
    if let Some(limit) = cfg.backoff_limit {
        jobset.push(format!(
            "(!has(object.spec.failurePolicy) || object.spec.failurePolicy == null ? [JSONPatch{{op: 'add', path: '/spec/failurePolicy', value: {{'maxRestarts': {limit}}}}}] : {})",
            add_if(
                &unset("object.spec.failurePolicy", "maxRestarts"),
                "'/spec/failurePolicy/maxRestarts'",
                &limit.to_string()
            )
        ));
    }
    let branch = |ops: &[String]| {
        if ops.is_empty() {
            "[]".to_string()
        } else {
            ops.join(" + ")
        }
    };
    // Every other kind the native policies cover: its descriptor's run-level defaults.
    let written = [
        WorkloadKind::BatchJob,
        WorkloadKind::VolcanoJob,
        WorkloadKind::PyTorchJob,
        WorkloadKind::JobSet,
    ];
    let others: String = select::kinds()
        .filter(|k| !written.contains(k) && !k.spec().run.defaults.is_empty())
        .map(|k| format!("{} ? {} : ", k.cel_test(), branch(&run_defaults(cfg, k))))
        .collect();
    Some(format!(
        "(!has(object.spec) || {child}) ? [] : {job_is} ? {job} : {volcano_is} ? {volcano} : {pytorch_is} ? {pytorch} : {jobset_is} ? {jobset} : {others}[]",
        job_is = is_kind(WorkloadKind::BatchJob),
        volcano_is = is_kind(WorkloadKind::VolcanoJob),
        pytorch_is = is_kind(WorkloadKind::PyTorchJob),
        jobset_is = is_kind(WorkloadKind::JobSet),
        job = branch(&job),
        volcano = branch(&volcano),
        pytorch = branch(&pytorch),
        jobset = branch(&jobset),
    ))
}

/// The run-level defaults of `kind`'s descriptor ([`crate::kinds::Run::defaults`]) as JSON
/// Patch operations, each written where the Rust mutation writes it
/// (`mutate::job_defaults`): its gates, its holder (created where the descriptor says so),
/// and what counts as unset. Whether the user wrote an API-defaulted field is read from a
/// server-side apply manager owning it or its key in kubectl's last-applied-configuration text
/// (as for a Job's `backoffLimit`).
fn run_defaults(
    cfg: &crate::mutate::job_defaults::JobDefaultsConfig,
    kind: WorkloadKind,
) -> Vec<String> {
    use crate::kinds::{Cond, From, Replaces, Setting};
    let scope = select::Scope {
        holder: "object",
        key: None,
    };
    let mut out = Vec::new();
    // The fields written `true` so far, each with the CEL test for "it is written".
    let mut writes_true: Vec<(&[&str], String)> = Vec::new();
    for d in kind.spec().run.defaults {
        let value = match d.setting {
            Setting::BackoffLimit => cfg.backoff_limit.map(|v| v.to_string()),
            Setting::Ttl => cfg.ttl_seconds_after_finished.map(|v| v.to_string()),
            Setting::VolcanoMaxRetry => cfg.volcano_max_retry.map(|v| v.to_string()),
            Setting::RestartPolicy => cfg.restart_policy.as_deref().map(lit),
            Setting::EndWithRun => Some("true".to_string()),
        };
        // A misplaced field's value (a PyTorchJob's) is honoured by that kind's own branch.
        let (Some(value), None) = (value, d.misplaced) else {
            continue;
        };
        let Some((key, parents)) = d.at.split_last() else {
            continue;
        };
        let Some((last, above)) = parents.split_last() else {
            continue;
        };
        let mut gates = Vec::new();
        let mut at = "object".to_string();
        for k in above {
            at = format!("{at}.{k}");
            gates.push(format!("has({at}) && {at} != null"));
        }
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
        let holder = format!("{at}.{last}");
        let current = format!("{holder}.{key}");
        let pointer = |keys: &[&str]| {
            lit(&keys
                .iter()
                .map(|k| format!("/{}", pointer_escape(k)))
                .collect::<String>())
        };
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
            Replaces::Text(t) => format!(
                "(!has({current}) || type({current}) != string || {current} == {})",
                lit(t)
            ),
        };
        let holder_is_map = format!("has({holder}) && type({holder}) == map");
        let write = add_if(
            &format!("{holder_is_map} && {unset}"),
            &pointer(d.at),
            &value,
        );
        let op = if d.make {
            format!(
                "(!has({holder}) || {holder} == null ? [JSONPatch{{op: 'add', path: {}, value: {{{}: {value}}}}}] : {write})",
                pointer(parents),
                lit(key)
            )
        } else {
            write
        };
        if d.setting == Setting::EndWithRun && !d.make {
            let mut writes = gates.clone();
            writes.push(format!("{holder_is_map} && {unset}"));
            writes_true.push((d.at, format!("({})", writes.join(" && "))));
        }
        out.push(if gates.is_empty() {
            op
        } else {
            format!("({} ? {op} : [])", gates.join(" && "))
        });
    }
    out
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

/// A JSON Pointer segment for a literal key (RFC 6901).
fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
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
                    lit(&format!("/metadata/labels/{}", pointer_escape(k)))
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
            pointer_escape(QUEUE_NAME_ANNOTATION)
        )),
        name = lit(&queue.name),
    )
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
