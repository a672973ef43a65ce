//! A batch/v1 Indexed Job wired for PyTorch (the Kubernetes "Job with Pod-to-Pod
//! Communication" pattern) — only on positive evidence that it is distributed training: the
//! annotation `launchgate.io/pytorch: "true"` (`"false"` opts out), the queue's
//! `indexedJobs: true` (every Indexed Job of the queue), or with `indexedJobs: auto` a launcher
//! (torchrun, `python -m torch.distributed.run`, accelerate, deepspeed) in a container's command
//! or PyTorch env the user set. Its world size is `completions`, its master
//! `<job>-0.<subdomain>`; it can never rendezvous when it is not Indexed (explicit opt-in only),
//! has no `completions`, no `subdomain`, runs fewer pods at once than it has ranks, or lets
//! Kueue admit it with fewer pods ([`KUEUE_MIN_PARALLELISM`]): its rendezvous size is written at
//! creation and a partial admission would leave every pod waiting for ranks that never start.

use super::{IndexedJobs, OPT_IN_ANNOTATION, PytorchConfig, host_network_dns_problem, string_at};
use crate::json::Pointer as _;
use crate::workload::{self, ContainerRole, intent::UserIntent};
use serde_json::Value;

/// How a Job came to be wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptIn {
    /// `launchgate.io/pytorch: "true"` on the Job.
    Annotation,
    /// The queue's `indexedJobs: true`.
    Queue,
    /// The queue's `indexedJobs: auto`, and this evidence that the Job is PyTorch training.
    Evidence(&'static str),
}

/// Whether (and how) a batch/v1 Job is opted in.
pub fn opt_in(cfg: &PytorchConfig, job: &Value) -> Option<OptIn> {
    let annotation = job
        .at("/metadata/annotations")
        .and_then(|a| a.get(OPT_IN_ANNOTATION))
        .and_then(Value::as_str);
    match annotation.map(str::trim) {
        Some(v) if v.eq_ignore_ascii_case("true") => Some(OptIn::Annotation),
        Some(v) if v.eq_ignore_ascii_case("false") => None,
        _ => match cfg.indexed_jobs {
            IndexedJobs::All => Some(OptIn::Queue),
            IndexedJobs::Auto => pytorch_evidence(job).map(OptIn::Evidence),
            IndexedJobs::Off => None,
        },
    }
}

/// Env a PyTorch distributed program reads: set by the user, it says the job is one.
const PYTORCH_ENV: [&str; 8] = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_MASTER_ADDR",
    "PET_RDZV_ENDPOINT",
    "PET_RDZV_BACKEND",
];

/// What shows that a Job's training containers run PyTorch distributed: a launcher in a
/// command (`torchrun`, `python -m torch.distributed.run|launch`, `accelerate launch`,
/// `deepspeed`), else PyTorch rendezvous env. `None`: nothing does.
pub fn pytorch_evidence(job: &Value) -> Option<&'static str> {
    pod_spec_evidence(job.at("/spec/template/spec")?.as_object()?)
}

/// [`pytorch_evidence`] in one pod spec.
pub fn pod_spec_evidence(spec: &serde_json::Map<String, Value>) -> Option<&'static str> {
    let apps =
        || workload::containers(spec, &[]).filter(|(slot, _)| slot.role == ContainerRole::App);
    if let Some(found) = apps().find_map(|(_, c)| launcher_of(c)) {
        return Some(found);
    }
    apps()
        .any(|(_, c)| {
            PYTORCH_ENV
                .iter()
                .any(|n| workload::effective_env(c, n).is_some())
        })
        .then_some("PyTorch rendezvous env in a container")
}

/// The multi-process launcher a container's command starts (torchrun,
/// `python -m torch.distributed.run|launch`, `accelerate launch`, `deepspeed`), described.
pub fn launcher_of(c: &serde_json::Map<String, Value>) -> Option<&'static str> {
    {
        let words: Vec<&str> = ["command", "args"]
            .into_iter()
            .filter_map(|k| c.get(k).and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .flat_map(|s| s.split(|ch: char| ch.is_whitespace() || ";&|'\"()`".contains(ch)))
            .filter(|w| !w.is_empty())
            .collect();
        for (i, word) in words.iter().enumerate() {
            let base = word.rsplit('/').next().unwrap_or(word);
            match base {
                "torchrun" => return Some("torchrun in a container's command"),
                "torch.distributed.run" | "torch.distributed.launch" => {
                    return Some("python -m torch.distributed.run in a container's command");
                }
                "deepspeed" => return Some("deepspeed in a container's command"),
                "accelerate" if words.get(i + 1) == Some(&"launch") => {
                    return Some("accelerate launch in a container's command");
                }
                _ => {}
            }
        }
    }
    None
}

/// What an opted-in Job looks like, or why it cannot be wired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// Not a distributed job (not Indexed, opted in by the queue only): left alone.
    NotDistributed,
    Wirable {
        completions: i64,
        subdomain: String,
    },
    Unwirable(Vec<String>),
}

/// Reads the shape of an opted-in Job.
pub fn shape(job: &Value, how: OptIn, job_name: &str) -> Shape {
    let display = display_name(job_name);
    let why_opted = match how {
        OptIn::Annotation => format!("{OPT_IN_ANNOTATION}: \"true\""),
        OptIn::Queue => "the queue's pytorch.indexedJobs: true".to_string(),
        OptIn::Evidence(evidence) => format!("{evidence}, pytorch.indexedJobs: auto"),
    };
    let indexed = job.at("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    if !indexed {
        return match how {
            OptIn::Queue | OptIn::Evidence(_) => Shape::NotDistributed,
            OptIn::Annotation => Shape::Unwirable(vec![format!(
                "{display} asks for PyTorch wiring ({why_opted}) but is not an Indexed Job: set spec.completionMode: Indexed so every pod has a rank"
            )]),
        };
    }
    let mut problems = Vec::new();
    let completions = job.at("/spec/completions").and_then(Value::as_i64);
    let parallelism = parallelism_to_write(job)
        .or_else(|| job.at("/spec/parallelism").and_then(Value::as_i64))
        .unwrap_or(1);
    let subdomain = string_at(job, "/spec/template/spec/subdomain");
    match completions {
        Some(c) if c >= 1 => {
            if parallelism < c {
                problems.push(format!(
                    "{display}: spec.parallelism {parallelism} < spec.completions {c}: set spec.parallelism: {c}; not all {c} ranks run at once, so the job can never rendezvous (PyTorch wiring via {why_opted}; launchgate never changes a parallelism you may have written)"
                ));
            }
        }
        _ => problems.push(format!(
            "{display} (PyTorch wiring via {why_opted}): spec.completions must be set (>= 1); it is the world size"
        )),
    }
    if let Some(min) = job
        .at("/metadata/annotations")
        .and_then(|a| a.get(KUEUE_MIN_PARALLELISM))
        .and_then(Value::as_str)
    {
        problems.push(format!(
            "{display} (PyTorch wiring via {why_opted}) allows Kueue a partial admission ({KUEUE_MIN_PARALLELISM}: {min:?}): admitted with fewer pods, its ranks would wait for a world size written at creation that never arrives; remove the annotation so Kueue admits the job whole"
        ));
    }
    if subdomain.is_none() {
        problems.push(format!(
            "{display} (PyTorch wiring via {why_opted}): spec.template.spec.subdomain is not set, so its pods get no DNS name and MASTER_ADDR cannot resolve; create a headless Service and set subdomain to its name"
        ));
    }
    match (problems.is_empty(), completions, subdomain) {
        (true, Some(completions), Some(subdomain)) => Shape::Wirable {
            completions,
            subdomain: subdomain.to_string(),
        },
        _ => Shape::Unwirable(problems),
    }
}

/// Kueue's annotation allowing it to admit a Job with fewer pods (down to this parallelism).
/// Kueue itself rejects a value of `parallelism` or more, so a job is kept whole only by not
/// carrying it.
pub const KUEUE_MIN_PARALLELISM: &str = "kueue.x-k8s.io/job-min-parallelism";

/// Path of the Job's pod spec, for messages.
pub const SPEC_PATH: &str = "spec.template.spec";

/// Did the user write the template's `dnsPolicy` (the API server defaults it)?
pub fn user_wrote_dns(job: &Value) -> bool {
    UserIntent::of(job).wrote(&["spec", "template", "spec", "dnsPolicy"])
}

/// Why an opted-in batch/v1 Job can never rendezvous, judged as the mutation leaves it (an
/// API-defaulted parallelism becomes completions, see [`parallelism_to_write`]).
pub fn problems(cfg: &PytorchConfig, object: &Value, name: &str) -> Vec<String> {
    match opt_in(cfg, object).map(|how| shape(object, how, name)) {
        Some(Shape::Unwirable(problems)) => problems,
        Some(Shape::Wirable { .. }) => object
            .at("/spec/template/spec")
            .and_then(Value::as_object)
            .and_then(|spec| host_network_dns_problem(spec, SPEC_PATH, user_wrote_dns(object)))
            .map(|p| format!("{}: {p}", display_name(name)))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

fn display_name(job_name: &str) -> String {
    if job_name.is_empty() {
        "Job (generateName)".to_string()
    } else {
        format!("Job {job_name:?}")
    }
}

/// The API server defaults an unset `spec.parallelism` to 1 before admission, which would run
/// the ranks one at a time (never a rendezvous). Only when an apply record ([`UserIntent`])
/// shows the user did not write `parallelism` does an opted-in Indexed Job run all ranks at
/// once: this is the `parallelism` (= `completions`) the mutation writes, `None` when it writes
/// none. Without a record an explicit `parallelism: 1` looks exactly like the default, so it is
/// never changed (a sharded job must not become `completions` pods at once).
pub fn parallelism_to_write(job: &Value) -> Option<i64> {
    let indexed = job.at("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    let completions = job.at("/spec/completions").and_then(Value::as_i64);
    let parallelism = job.at("/spec/parallelism").and_then(Value::as_i64);
    let completions = completions.filter(|c| *c > 1)?;
    let intent = UserIntent::of(job);
    let defaulted = indexed
        && matches!(parallelism, None | Some(1))
        && intent.has_records()
        && !intent.wrote(&["spec", "parallelism"]);
    defaulted.then_some(completions)
}
