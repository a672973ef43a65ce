//! A Volcano Job with the `pytorch` plugin (args `--master`, `--worker`, `--port`; defaults
//! master/worker/23456): its master task (exactly one replica), its world size (master +
//! worker replicas, never extra tasks), the rank of each task's pod 0, and a Volcano pod's
//! place in its Job (`volcano.sh/job-name`, `volcano.sh/task-spec`, `volcano.sh/task-index`) —
//! and the wiring of the Job and of its pods:
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

use super::config::DEFAULT_PORT;
use super::deferred::{self, Deferred, JOB_PLACEHOLDER};
use super::env::{self, EnvValue, JobWiring, display_name, host_network_dns_problem, string_at};
use super::site::{Site, Warnings, warn_unwirable};
use crate::json::Pointer as _;
use crate::patch::Node;
use crate::workload::{self, WorkloadKind};
use serde_json::{Map, Value};

/// Template (and so pod) annotation: rank of the task's pod 0, or `none` for a task whose
/// pods take no rank (e.g. tensorboard).
pub const RANK_OFFSET_ANNOTATION: &str = "launchgate.io/pytorch-rank-offset";
pub const NO_RANK: &str = "none";

const JOB_NAME_KEY: &str = "volcano.sh/job-name";
const TASK_SPEC_KEY: &str = "volcano.sh/task-spec";
pub const TASK_INDEX_KEY: &str = "volcano.sh/task-index";

/// The pytorch plugin's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginArgs {
    pub master: String,
    pub worker: String,
    pub port: u16,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs {
            master: "master".into(),
            worker: "worker".into(),
            port: DEFAULT_PORT,
        }
    }
}

/// Flags the plugin knows that take a value (the wait-master ones are Volcano's business).
const VALUE_FLAGS: [&str; 5] = [
    "master",
    "worker",
    "port",
    "wait-master-timeout",
    "wait-master-image",
];
const BOOL_FLAGS: [&str; 1] = ["wait-master-enabled"];

/// Parses the plugin args like Go's `flag` package (`-f v`, `--f=v`, bool flags bare).
/// Like Go's `ContinueOnError`, parsing stops at the first bad argument and the defaults stay
/// for the rest; the problem is returned for a warning.
pub fn parse_plugin_args(args: Option<&Value>) -> (PluginArgs, Option<String>) {
    let mut out = PluginArgs::default();
    let Some(args) = args.filter(|a| !a.is_null()) else {
        return (out, None);
    };
    let Some(list) = args
        .as_array()
        .and_then(|items| items.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
    else {
        let problem = "spec.plugins.pytorch must be a list of strings";
        return (out, Some(problem.into()));
    };
    let mut i = 0;
    while i < list.len() {
        let arg = list[i];
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return (out, Some(format!("unexpected plugin argument {arg:?}")));
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (flag, None),
        };
        if BOOL_FLAGS.contains(&name) {
            i += 1;
            continue;
        }
        if !VALUE_FLAGS.contains(&name) {
            return (out, Some(format!("unknown plugin argument {arg:?}")));
        }
        let value = match inline {
            Some(v) => v,
            None => {
                i += 1;
                match list.get(i) {
                    Some(v) => v,
                    None => return (out, Some(format!("plugin argument {arg:?} needs a value"))),
                }
            }
        };
        match name {
            "master" => out.master = value.to_string(),
            "worker" => out.worker = value.to_string(),
            "port" => match value.parse::<u16>() {
                Ok(p) if p > 0 => out.port = p,
                _ => {
                    return (
                        out,
                        Some(format!("plugin argument --port={value:?} is not a port")),
                    );
                }
            },
            _ => {}
        }
        i += 1;
    }
    (out, None)
}

/// A Volcano Job's `spec.plugins.pytorch`, if the plugin is enabled.
pub fn pytorch_plugin(job: &Value) -> Option<Option<&Value>> {
    let plugins = job.at("/spec/plugins")?.as_object()?;
    plugins
        .contains_key("pytorch")
        .then(|| plugins.get("pytorch"))
}

/// Everything known about a wirable Volcano PyTorch job.
#[derive(Debug, Clone)]
pub struct VolcanoPytorchJob {
    pub args: PluginArgs,
    pub master_replicas: i64,
    pub wiring: JobWiring,
    /// When `wiring.master_addr` is unknown (the Job has only a `generateName`): the address
    /// with [`JOB_PLACEHOLDER`] for the Job's name, completed at pod admission.
    pub deferred_addr: Option<String>,
}

impl PluginArgs {
    /// Rank of pod 0 of `task` behind `master_replicas` master pods, `None` for tasks that
    /// take no rank.
    fn rank_offset(&self, task: &str, master_replicas: i64) -> Option<i64> {
        if task == self.master {
            Some(0)
        } else if task == self.worker {
            Some(master_replicas)
        } else {
            None
        }
    }
}

impl VolcanoPytorchJob {
    /// Rank of pod 0 of `task`, `None` for tasks that take no rank.
    pub fn rank_offset(&self, task: &str) -> Option<i64> {
        self.args.rank_offset(task, self.master_replicas)
    }
}

fn task_replicas(task: &Value) -> i64 {
    // Volcano's `replicas` is an int32 without a default: absent means 0.
    task.get("replicas").and_then(Value::as_i64).unwrap_or(0)
}

/// Checks a Volcano Job with the pytorch plugin and derives its wiring.
/// `Ok(None)`: not a PyTorch job. `Err`: a PyTorch job that can never rendezvous.
pub fn analyse(job: &Value, job_name: &str) -> Result<Option<VolcanoPytorchJob>, Vec<String>> {
    let Some(plugin_args) = pytorch_plugin(job) else {
        return Ok(None);
    };
    let (args, _) = parse_plugin_args(plugin_args);
    let display = display_name("Volcano Job", job_name);
    let tasks: Vec<&Value> = job
        .at("/spec/tasks")
        .and_then(Value::as_array)
        .map(|t| t.iter().collect())
        .unwrap_or_default();
    let task_name = |t: &Value| workload::name_of(t).unwrap_or_default().to_string();
    let Some((master_index, master)) = tasks
        .iter()
        .enumerate()
        .find(|(_, t)| task_name(t) == args.master)
    else {
        let names: Vec<String> = tasks.iter().map(|t| task_name(t)).collect();
        return Err(vec![format!(
            "{display} uses the pytorch plugin but has no master task {:?} (tasks: {}); no pod could get RANK 0",
            args.master,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )]);
    };
    let master_replicas = task_replicas(master);
    if master_replicas != 1 {
        return Err(vec![format!(
            "{display}: spec.tasks[{master_index}].replicas of the PyTorch master task {:?} is {master_replicas}; it must be exactly 1 (every master pod would get RANK 0 and the job could never rendezvous)",
            args.master
        )]);
    }
    // Replicas come from the request: add them checked (a sum past i64 has no WORLD_SIZE).
    let Some(nnodes) = tasks
        .iter()
        .filter(|t| task_name(t) == args.worker)
        .map(|t| task_replicas(t).max(0))
        .try_fold(master_replicas, i64::checked_add)
    else {
        return Err(vec![format!(
            "{display}: the replicas of the PyTorch worker tasks {:?} add up to more than {}, so WORLD_SIZE cannot be set and the job could never rendezvous",
            args.worker,
            i64::MAX
        )]);
    };
    let hostname = string_at(master, "/template/spec/hostname").map(str::to_string);
    let subdomain = string_at(master, "/template/spec/subdomain").map(str::to_string);
    // The Volcano svc plugin's names (`<job>-<task>-<index>.<job>`) unless the master
    // template sets its own; without a Job name, the same with a placeholder for the pods.
    let name = if job_name.is_empty() {
        JOB_PLACEHOLDER
    } else {
        job_name
    };
    let addr = format!(
        "{}.{}",
        hostname
            .clone()
            .unwrap_or_else(|| format!("{name}-{}-0", args.master)),
        subdomain.clone().unwrap_or_else(|| name.to_string())
    );
    let (master_addr, deferred_addr) = if addr.contains(JOB_PLACEHOLDER) {
        (None, Some(addr))
    } else {
        (Some(addr), None)
    };
    Ok(Some(VolcanoPytorchJob {
        wiring: JobWiring {
            master_addr,
            master_port: args.port,
            nnodes,
        },
        args,
        master_replicas,
        deferred_addr,
    }))
}

/// The problems [`super::problems`] denies for a Volcano Job: it can never rendezvous, or a
/// hostNetwork master/worker task keeps a `dnsPolicy` under which `MASTER_ADDR` cannot resolve
/// (a custom resource's template is not defaulted, so a present `dnsPolicy` is the user's).
pub fn job_problems(object: &Value, object_name: &str) -> Vec<String> {
    let job = match analyse(object, object_name) {
        Err(problems) => return problems,
        Ok(None) => return Vec::new(),
        Ok(Some(job)) => job,
    };
    workload::templates(WorkloadKind::VolcanoJob, object)
        .into_iter()
        .filter(|(info, _)| {
            info.name
                .as_deref()
                .is_some_and(|name| job.rank_offset(name).is_some())
        })
        .filter_map(|(info, template)| {
            let spec = workload::pod_spec(template)?;
            host_network_dns_problem(spec, &info.spec_path(), spec.contains_key("dnsPolicy"))
        })
        .map(|p| format!("Volcano Job {object_name:?}: {p}"))
        .collect()
}

/// Where a Volcano pod sits in its Job, from its labels/annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolcanoPodPlace {
    pub job_name: String,
    pub task: String,
    /// `volcano.sh/task-index`, if present and a number.
    pub index: Option<i64>,
    /// `launchgate.io/pytorch-rank-offset` copied from a template launchgate wired.
    pub rank_offset: Option<Option<i64>>,
}

fn meta_value<'a>(pod: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    workload::annotation(pod, key)
        .or_else(|| workload::label(pod, key))
        .filter(|s| !s.is_empty())
}

/// Reads a pod's place in its Volcano Job; `None` for pods that are not Volcano Job pods.
pub fn pod_place(pod: &Map<String, Value>) -> Option<VolcanoPodPlace> {
    let job_name = meta_value(pod, JOB_NAME_KEY)?.to_string();
    let task = meta_value(pod, TASK_SPEC_KEY)
        .unwrap_or("default")
        .to_string();
    let index = meta_value(pod, TASK_INDEX_KEY)
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|i| *i >= 0);
    let rank_offset = workload::annotation(pod, RANK_OFFSET_ANNOTATION).map(|v| {
        if v == NO_RANK {
            None
        } else {
            v.parse::<i64>().ok()
        }
    });
    Some(VolcanoPodPlace {
        job_name,
        task,
        index,
        rank_offset,
    })
}

/// Records on every task template that its pods take no PyTorch rank: the pods of a Volcano
/// Job without the pytorch plugin (MPI, TensorFlow, plain), or of one that can never
/// rendezvous, get no `RANK`/`PET_*` at pod admission, also without cluster lookups.
fn record_no_rank(object: &mut Node<'_, Value>) -> bool {
    let mut changed = false;
    workload::for_each_template_mut(WorkloadKind::VolcanoJob, object, |_, template| {
        changed |= workload::set_annotation(template, RANK_OFFSET_ANNOTATION, NO_RANK);
    });
    changed
}

/// Wires a Volcano Job's task templates.
pub fn mutate_job(
    ctx: &dyn Site,
    object: &mut Node<'_, Value>,
    findings: &mut dyn Warnings,
) -> bool {
    let cfg = ctx.pytorch();
    let Some(plugin_args) = pytorch_plugin(object) else {
        return record_no_rank(object);
    };
    if let (_, Some(problem)) = parse_plugin_args(plugin_args) {
        findings.warn(crate::rules::PYTORCH_VOLCANO_PLUGIN, format!(
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
        changed |= workload::set_annotation(template, RANK_OFFSET_ANNOTATION, &offset_text);
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
        let Some(mut spec) = workload::pod_spec_mut(template) else {
            return;
        };
        if offset.is_some() {
            let wrote_dns = spec.contains_key("dnsPolicy");
            changed |=
                env::ensure_host_network_dns(&mut spec, &info.spec_path(), wrote_dns, findings);
        }
        if job.deferred_addr.is_some() {
            return;
        }
        let port = offset.map(|_| job.args.port);
        changed |= env::wire_pod_spec(ctx, &mut spec, &info.spec_path(), &vars, port, findings);
        if cfg.wait_for_master.enabled
            && *name == job.args.worker
            && let Some(addr) = &job.wiring.master_addr
        {
            changed |= env::write_wait_for_master(
                &cfg.wait_for_master,
                &mut spec,
                addr,
                job.args.port,
                None,
            );
        }
    });
    changed
}

pub(crate) fn rank_value(
    place: &VolcanoPodPlace,
    offset: i64,
    findings: &mut dyn Warnings,
) -> Option<EnvValue> {
    match place.index {
        Some(index) => match offset.checked_add(index) {
            Some(rank) => Some(EnvValue::Literal(rank.to_string())),
            None => {
                findings.warn(crate::rules::PYTORCH_RANK_UNSET, format!(
                    "launchgate: pod of Volcano Job {:?} task {:?}: {RANK_OFFSET_ANNOTATION} {offset} + {TASK_INDEX_KEY} {index} is out of range; RANK was not set",
                    place.job_name, place.task
                ));
                None
            }
        },
        None => {
            findings.warn(crate::rules::PYTORCH_RANK_UNSET, format!(
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
    ctx: &dyn Site,
    object: &mut Node<'_, Value>,
    findings: &mut dyn Warnings,
) -> bool {
    let cfg = ctx.pytorch();
    let Some(place) = object.as_object().and_then(pod_place) else {
        return false;
    };
    // The plugin's appended WORLD_SIZE is the effective one: keep it the rendezvous size in
    // every container it wrote into (all of them, in every task's pods, tensorboard's too),
    // before anything reads it and before the PET_* twins follow it.
    let mut changed = false;
    if let Some(mut spec) = object.object("spec") {
        workload::for_each_container_mut(&mut spec, &[], |slot, c| {
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
            let namespace = ctx.namespace().unwrap_or("default");
            match ctx
                .cluster()
                .workload(WorkloadKind::VolcanoJob, namespace, &place.job_name)
            {
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
                        dns_wrote =
                            Some(template_dns || ctx.intent(object).wrote(&["spec", "dnsPolicy"]));
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
                        findings.warn(crate::rules::PYTORCH_POD_UNWIRED, format!(
                            "launchgate: this Volcano pod carries {var} (another framework's plugin) and its Job {namespace}/{} was never seen by launchgate; no PyTorch env was written",
                            place.job_name
                        ));
                        return changed;
                    }
                    let Some(offset) = PluginArgs::default().rank_offset(&place.task, 1) else {
                        return changed;
                    };
                    let why = if ctx.cluster().is_connected() {
                        "was not found"
                    } else {
                        "cannot be read offline"
                    };
                    findings.warn(crate::rules::PYTORCH_DEFAULT_TASKS, format!(
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
    let Some(mut spec) = object.object("spec") else {
        return changed;
    };
    changed |= env::wire_pod_spec(ctx, &mut spec, &"spec", &vars, port, findings);
    if let Some(wrote) = dns_wrote {
        changed |= env::ensure_host_network_dns(&mut spec, &"spec", wrote, findings);
    }
    if cfg.wait_for_master.enabled
        && let Some((addr, port)) = wait_for
    {
        changed |= env::write_wait_for_master(&cfg.wait_for_master, &mut spec, &addr, port, None);
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
