//! Volcano Jobs with the `pytorch` plugin, and their pods.
//!
//! **Job** (`spec.plugins.pytorch`, args `--master`, `--worker`, `--port`; defaults
//! master/worker/23456): checked (the master task exists and has exactly one replica), then
//! every task template gets what all pods share — `MASTER_ADDR` (`<hostname>.<subdomain>` of
//! master pod 0, by default `<job>-<master>-0.<job>`), `MASTER_PORT`, `WORLD_SIZE` (master +
//! worker replicas only, never extra tasks) — and the master and worker templates get the
//! `pytorchjob-port` port and the annotation [`RANK_OFFSET_ANNOTATION`] (the rank of the task's
//! pod 0), which the Volcano controller copies onto every pod.
//!
//! **Pod** (`volcano.sh/job-name`, `volcano.sh/task-spec`, `volcano.sh/task-index`): `RANK` =
//! rank offset + task index, from the annotation, never from the pod name. A pod without the
//! offset annotation comes from a Job launchgate never mutated: the owner Job is read from the
//! cluster view and the pod gets everything; offline, it gets `RANK` (assuming the default
//! task names) and a warning about the rest. Pods of other tasks get no `RANK` and no port.

use super::deferred::{self, Deferred};
use super::env::{self, EnvValue};
use super::warn_unwirable;
use crate::json::Pointer as _;
use crate::mutate::{Findings, MutationContext};
use crate::topology::PytorchConfig;
use crate::topology::volcano::{
    NO_RANK, PluginArgs, RANK_OFFSET_ANNOTATION, TASK_INDEX_KEY, VolcanoPodPlace, analyse,
    parse_plugin_args, pod_place, pytorch_plugin,
};
use crate::workload::intent::UserIntent;
use crate::workload::{self, WorkloadKind};
use serde_json::{Map, Value, json};

fn set_annotation(template: &mut Map<String, Value>, key: &str, value: &str) -> bool {
    let annotations = workload::metadata_map_mut(template, "annotations");
    if annotations.get(key).and_then(Value::as_str) == Some(value) {
        return false;
    }
    annotations.insert(key.into(), json!(value));
    true
}

/// Records on every task template that its pods take no PyTorch rank: the pods of a Volcano
/// Job without the pytorch plugin (MPI, TensorFlow, plain), or of one that can never
/// rendezvous, get no `RANK`/`PET_*` at pod admission, also without cluster lookups.
fn record_no_rank(object: &mut Value) -> bool {
    let mut changed = false;
    workload::for_each_template_mut(WorkloadKind::VolcanoJob, object, |_, template| {
        changed |= set_annotation(template, RANK_OFFSET_ANNOTATION, NO_RANK);
    });
    changed
}

/// Wires a Volcano Job's task templates.
pub fn mutate_job(
    ctx: &MutationContext<'_>,
    cfg: &PytorchConfig,
    object: &mut Value,
    findings: &mut Findings,
) -> bool {
    let Some(plugin_args) = pytorch_plugin(object) else {
        return record_no_rank(object);
    };
    if let (_, Some(problem)) = parse_plugin_args(plugin_args) {
        findings.warn(format!(
            "launchgate: {problem}; the Volcano pytorch plugin ignores the rest of its arguments, and so does launchgate"
        ));
    }
    let job_name = ctx.object_name(object).to_string();
    let job = match analyse(object, &job_name) {
        Ok(Some(job)) => job,
        Ok(None) => return false,
        Err(problems) => {
            warn_unwirable(findings, &problems);
            return record_no_rank(object);
        }
    };
    let vars = env::job_vars(cfg, &job.wiring);
    let mut changed = false;
    workload::for_each_template_mut(WorkloadKind::VolcanoJob, object, |info, template| {
        let Some(name) = &info.name else {
            return;
        };
        let offset = job.rank_offset(name);
        let offset_text = offset.map_or(NO_RANK.to_string(), |o| o.to_string());
        changed |= set_annotation(template, RANK_OFFSET_ANNOTATION, &offset_text);
        if let Some(addr) = &job.deferred_addr {
            // No name yet: nothing half-wired in the template; the pods complete it.
            changed |= deferred::record(
                template,
                &Deferred {
                    master_addr: addr.clone(),
                    port: job.args.port,
                    nnodes: job.wiring.nnodes,
                    ranked: offset.is_some(),
                    wait_for_master: *name == job.args.worker,
                    jobset_rank: None,
                },
            );
        }
        let Some(spec) = workload::pod_spec_mut(template) else {
            return;
        };
        if offset.is_some() {
            let wrote_dns = spec.contains_key("dnsPolicy");
            changed |= env::ensure_host_network_dns(spec, &info.spec_path(), wrote_dns, findings);
        }
        if job.deferred_addr.is_some() {
            return;
        }
        let port = offset.map(|_| job.args.port);
        changed |= env::wire_pod_spec(ctx, spec, &info.spec_path(), &vars, port, findings);
        if cfg.wait_for_master.enabled
            && *name == job.args.worker
            && let Some(addr) = &job.wiring.master_addr
        {
            changed |=
                env::write_wait_for_master(&cfg.wait_for_master, spec, addr, job.args.port, None);
        }
    });
    changed
}

pub(crate) fn rank_value(
    place: &VolcanoPodPlace,
    offset: i64,
    findings: &mut Findings,
) -> Option<EnvValue> {
    match place.index {
        Some(index) => match offset.checked_add(index) {
            Some(rank) => Some(EnvValue::Literal(rank.to_string())),
            None => {
                findings.warn(format!(
                    "launchgate: pod of Volcano Job {:?} task {:?}: {RANK_OFFSET_ANNOTATION} {offset} + {TASK_INDEX_KEY} {index} is out of range; RANK was not set",
                    place.job_name, place.task
                ));
                None
            }
        },
        None => {
            findings.warn(format!(
                "launchgate: pod of Volcano Job {:?} task {:?} has no numeric {TASK_INDEX_KEY} annotation; RANK was not set",
                place.job_name, place.task
            ));
            None
        }
    }
}

/// Env that Volcano's other distributed-framework plugins write into every pod.
const OTHER_FRAMEWORK_ENV: [&str; 2] = ["MPI_HOST", "TF_CONFIG"];

fn other_framework_env(pod: &Value) -> Option<&'static str> {
    let spec = pod.get("spec")?.as_object()?;
    OTHER_FRAMEWORK_ENV.into_iter().find(|var| {
        workload::containers(spec, &[]).any(|(_, c)| workload::effective_env(c, var).is_some())
    })
}

/// Wires one pod of a Volcano Job.
pub fn mutate_pod(
    ctx: &MutationContext<'_>,
    cfg: &PytorchConfig,
    object: &mut Value,
    findings: &mut Findings,
) -> bool {
    let Some(place) = object.as_object().and_then(pod_place) else {
        return false;
    };
    // The plugin's appended WORLD_SIZE is the effective one: keep it the rendezvous size in
    // every container it wrote into (all of them, in every task's pods, tensorboard's too),
    // before anything reads it and before the PET_* twins follow it.
    let mut changed = false;
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        workload::for_each_container_mut(spec, &[], |slot, c| {
            if slot.list == workload::CONTAINER_LISTS[0] {
                changed |= env::keep_template_world_size(c);
            }
        });
    }
    let mut vars = Vec::new();
    let mut port = None;
    let mut wait_for = None;
    // Set when this pass wires a pod whose Job launchgate never saw: its DNS is decided here.
    let mut dns_wrote = None;
    match place.rank_offset {
        // The template was wired by launchgate: only the rank is per pod.
        Some(Some(offset)) => {
            if let Some(rank) = rank_value(&place, offset, findings) {
                vars = env::rank_vars(cfg, rank);
            }
        }
        Some(None) => return changed,
        None => {
            let namespace = ctx.request.namespace.as_deref().unwrap_or("default");
            match ctx.cluster.volcano_job(namespace, &place.job_name) {
                Some(job_object) => {
                    let job = match analyse(&job_object, &place.job_name) {
                        Ok(Some(job)) => job,
                        Ok(None) => return changed,
                        Err(problems) => {
                            warn_unwirable(findings, &problems);
                            return changed;
                        }
                    };
                    vars = env::job_vars(cfg, &job.wiring);
                    if let Some(offset) = job.rank_offset(&place.task) {
                        port = Some(job.args.port);
                        // The Job's template is not defaulted: a dnsPolicy there is the user's.
                        let template_dns = job_object
                            .at("/spec/tasks")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .find(|t| workload::name_of(t) == Some(&place.task))
                            .and_then(|t| t.at("/template/spec/dnsPolicy"))
                            .is_some();
                        dns_wrote = Some(
                            template_dns || UserIntent::of(object).wrote(&["spec", "dnsPolicy"]),
                        );
                        if let Some(rank) = rank_value(&place, offset, findings) {
                            vars.extend(env::rank_vars(cfg, rank));
                        }
                        if place.task == job.args.worker {
                            wait_for = job.wiring.master_addr.clone().map(|a| (a, job.args.port));
                        }
                    }
                }
                None => {
                    // Volcano's MPI and TensorFlow plugins (whose default task names are also
                    // master/worker) leave their own env on the pod: not a PyTorch pod.
                    if let Some(var) = other_framework_env(object) {
                        findings.warn(format!(
                            "launchgate: this Volcano pod carries {var} (another framework's plugin) and its Job {namespace}/{} was never seen by launchgate; no PyTorch env was written",
                            place.job_name
                        ));
                        return changed;
                    }
                    let defaults = PluginArgs::default();
                    let offset = if place.task == defaults.master {
                        Some(0)
                    } else if place.task == defaults.worker {
                        Some(1)
                    } else {
                        None
                    };
                    let Some(offset) = offset else { return changed };
                    let why = if ctx.cluster.is_connected() {
                        "was not found"
                    } else {
                        "cannot be read offline"
                    };
                    findings.warn(format!(
                        "launchgate: the owner Volcano Job {namespace}/{} of this pod {why}: RANK is set from {TASK_INDEX_KEY} assuming the default task names (master/worker, 1 master); MASTER_ADDR, MASTER_PORT and WORLD_SIZE are left to the Job",
                        place.job_name
                    ));
                    if let Some(rank) = rank_value(&place, offset, findings) {
                        vars = env::rank_vars(cfg, rank);
                    }
                }
            }
        }
    }
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return changed;
    };
    changed |= env::wire_pod_spec(ctx, spec, "spec", &vars, port, findings);
    if let Some(wrote) = dns_wrote {
        changed |= env::ensure_host_network_dns(spec, "spec", wrote, findings);
    }
    if cfg.wait_for_master.enabled
        && let Some((addr, port)) = wait_for
    {
        changed |= env::write_wait_for_master(&cfg.wait_for_master, spec, &addr, port, None);
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(list: Value) -> (PluginArgs, Option<String>) {
        parse_plugin_args(Some(&list))
    }

    #[test]
    fn plugin_args_parse_like_go_flags() {
        assert_eq!(args(json!([])).0, PluginArgs::default());
        assert_eq!(parse_plugin_args(None).0, PluginArgs::default());
        let (a, p) = args(json!([
            "--master=chief",
            "-worker",
            "wk",
            "--port=5000",
            "--wait-master-enabled"
        ]));
        assert_eq!(p, None);
        assert_eq!(
            (a.master.as_str(), a.worker.as_str(), a.port),
            ("chief", "wk", 5000)
        );
        let (a, p) = args(json!(["--port=nope", "--master=x"]));
        assert!(p.unwrap().contains("--port"));
        assert_eq!(
            a,
            PluginArgs::default(),
            "parsing stops at the bad argument"
        );
        assert!(args(json!(["--bogus=1"])).1.unwrap().contains("unknown"));
        assert!(
            args(json!(["--master"]))
                .1
                .unwrap()
                .contains("needs a value")
        );
        assert!(args(json!("--port=1")).1.is_some());
        assert!(args(json!([1])).1.is_some());
    }

    fn job(tasks: Value) -> Value {
        json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
               "metadata": {"name": "test-pytorch"},
               "spec": {"plugins": {"pytorch": []}, "tasks": tasks}})
    }

    #[test]
    fn analysis_counts_master_and_workers_only() {
        let j = job(json!([
            {"name": "master", "replicas": 1, "template": {}},
            {"name": "worker", "replicas": 2, "template": {}},
            {"name": "extra", "replicas": 2, "template": {}}
        ]));
        let a = analyse(&j, "test-pytorch").unwrap().unwrap();
        assert_eq!(a.wiring.nnodes, 3);
        assert_eq!(
            a.wiring.master_addr.as_deref(),
            Some("test-pytorch-master-0.test-pytorch")
        );
        assert_eq!(a.rank_offset("worker"), Some(1));
        assert_eq!(a.rank_offset("extra"), None);
    }

    #[test]
    fn master_template_hostname_and_subdomain_win() {
        let j = job(json!([{"name": "master", "replicas": 1,
                            "template": {"spec": {"hostname": "h", "subdomain": "s"}}}]));
        let a = analyse(&j, "test-pytorch").unwrap().unwrap();
        assert_eq!(a.wiring.master_addr.as_deref(), Some("h.s"));
        assert_eq!(a.wiring.nnodes, 1);
        let a = analyse(&j, "").unwrap().unwrap();
        assert_eq!(
            a.wiring.master_addr.as_deref(),
            Some("h.s"),
            "no Job name needed"
        );
        let j = job(
            json!([{"name": "master", "replicas": 1, "template": {"spec": {"hostname": "h"}}}]),
        );
        let a = analyse(&j, "").unwrap().unwrap();
        assert_eq!(a.wiring.master_addr, None);
        assert_eq!(a.deferred_addr.as_deref(), Some("h.{job}"));
        let j = job(json!([{"name": "master", "replicas": 1, "template": {}}]));
        let a = analyse(&j, "").unwrap().unwrap();
        assert_eq!(a.deferred_addr.as_deref(), Some("{job}-master-0.{job}"));
    }

    #[test]
    fn custom_names_and_port() {
        let mut j = job(json!([
            {"name": "chief", "replicas": 1}, {"name": "wk", "replicas": 3}
        ]));
        j["spec"]["plugins"]["pytorch"] = json!(["--master=chief", "--worker=wk", "--port=5000"]);
        let a = analyse(&j, "test-pytorch").unwrap().unwrap();
        assert_eq!(
            a.wiring.master_addr.as_deref(),
            Some("test-pytorch-chief-0.test-pytorch")
        );
        assert_eq!((a.wiring.master_port, a.wiring.nnodes), (5000, 4));
    }

    #[test]
    fn unwirable_jobs_are_explained() {
        let e = analyse(
            &job(json!([{"name": "worker", "replicas": 1}])),
            "test-pytorch",
        )
        .unwrap_err();
        assert!(
            e[0].contains("no master task \"master\" (tasks: worker)"),
            "{e:?}"
        );
        let e = analyse(
            &job(json!([{"name": "master", "replicas": 2}])),
            "test-pytorch",
        )
        .unwrap_err();
        assert!(
            e[0].contains("spec.tasks[0].replicas")
                && e[0].contains("is 2")
                && e[0].contains("exactly 1"),
            "{e:?}"
        );
        let e = analyse(&job(json!([{"name": "master"}])), "test-pytorch").unwrap_err();
        assert!(e[0].contains("is 0"), "{e:?}");
        assert!(analyse(&job(json!("garbage")), "x").is_err());
        let no_plugin = json!({"spec": {"tasks": []}});
        assert!(analyse(&no_plugin, "x").unwrap().is_none());
    }

    #[test]
    fn pod_place_reads_annotations_not_names() {
        let pod = json!({"metadata": {"name": "weird", "annotations": {
            "volcano.sh/job-name": "j", "volcano.sh/task-spec": "worker", "volcano.sh/task-index": "4"}}});
        let p = pod_place(pod.as_object().unwrap()).unwrap();
        assert_eq!(
            (p.job_name.as_str(), p.task.as_str(), p.index),
            ("j", "worker", Some(4))
        );
        assert_eq!(p.rank_offset, None);
        let pod = json!({"metadata": {"labels": {"volcano.sh/job-name": "j"},
            "annotations": {"volcano.sh/task-index": "x", RANK_OFFSET_ANNOTATION: "none"}}});
        let p = pod_place(pod.as_object().unwrap()).unwrap();
        assert_eq!(
            (p.task.as_str(), p.index, p.rank_offset),
            ("default", None, Some(None))
        );
        assert!(pod_place(json!({"metadata": {}}).as_object().unwrap()).is_none());
    }
}
