//! A Volcano Job with the `pytorch` plugin (args `--master`, `--worker`, `--port`; defaults
//! master/worker/23456): its master task (exactly one replica), its world size (master +
//! worker replicas, never extra tasks), the rank of each task's pod 0, and a Volcano pod's
//! place in its Job (`volcano.sh/job-name`, `volcano.sh/task-spec`, `volcano.sh/task-index`).

use super::{DEFAULT_PORT, JOB_PLACEHOLDER, JobWiring, host_network_dns_problem, string_at};
use crate::json::Pointer as _;
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
    let list: Vec<&str> = match args {
        None | Some(Value::Null) => return (out, None),
        Some(Value::Array(items)) => match items.iter().map(Value::as_str).collect() {
            Some(list) => list,
            None => {
                return (
                    out,
                    Some("spec.plugins.pytorch must be a list of strings".into()),
                );
            }
        },
        Some(_) => {
            return (
                out,
                Some("spec.plugins.pytorch must be a list of strings".into()),
            );
        }
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

impl VolcanoPytorchJob {
    /// Rank of pod 0 of `task`, `None` for tasks that take no rank.
    pub fn rank_offset(&self, task: &str) -> Option<i64> {
        if task == self.args.master {
            Some(0)
        } else if task == self.args.worker {
            Some(self.master_replicas)
        } else {
            None
        }
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
    let display = if job_name.is_empty() {
        "Volcano Job (generateName)".to_string()
    } else {
        format!("Volcano Job {job_name:?}")
    };
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
