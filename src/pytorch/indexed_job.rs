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
//!
//! Opt-in: the Job annotation `launchgate.io/pytorch: "true"` (or `"false"` to opt out), else
//! the queue's `indexedJobs: true`, which covers the queue's Indexed Jobs (a non-Indexed Job
//! of such a queue is an ordinary single-pod job and is left alone).
//!
//! Everything is written once into `spec.template`, so the controller-made pods (which have
//! only a `generateName` at admission) need nothing further: `MASTER_ADDR` =
//! `<job>-0.<subdomain>`, `MASTER_PORT` = the queue's port, `WORLD_SIZE` = `completions`,
//! `RANK` = a downward-API `fieldRef` on the pod's completion-index annotation.
//!
//! An opted-in Job that can never rendezvous — not Indexed (explicit opt-in only), no
//! `completions`, no `subdomain` (pods get no DNS name), or `parallelism < completions` (not
//! all ranks run at once) — is left unwired with a warning, and denied by the validating
//! webhook when the queue says `onUnwirable: deny`.

use super::config::{IndexedJobs, OPT_IN_ANNOTATION, PytorchConfig};
use super::deferred::{self, Deferred, JOB_PLACEHOLDER};
use super::env::{self, EnvValue, JobWiring, display_name, host_network_dns_problem, string_at};
use super::site::{Site, Warnings, warn_unwirable};
use crate::json::Pointer as _;
use crate::patch::Node;
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

impl OptIn {
    /// What opted the workload in, for a message.
    pub fn describe(self) -> String {
        match self {
            OptIn::Annotation => format!("{OPT_IN_ANNOTATION}: \"true\""),
            OptIn::Queue => "the queue's pytorch.indexedJobs: true".to_string(),
            OptIn::Evidence(evidence) => format!("{evidence}, pytorch.indexedJobs: auto"),
        }
    }
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

/// Reads the shape of an opted-in Job (`intent`: what the user wrote of it).
pub fn shape(job: &Value, how: OptIn, job_name: &str, intent: &UserIntent) -> Shape {
    let display = display_name("Job", job_name);
    let why_opted = how.describe();
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
    let parallelism = parallelism_to_write(job, intent)
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
fn user_wrote_dns(intent: &UserIntent) -> bool {
    intent.wrote(&["spec", "template", "spec", "dnsPolicy"])
}

/// Why an opted-in batch/v1 Job can never rendezvous, judged as the mutation leaves it (an
/// API-defaulted parallelism becomes completions, see [`parallelism_to_write`]).
pub fn problems(cfg: &PytorchConfig, object: &Value, name: &str) -> Vec<String> {
    let Some(how) = opt_in(cfg, object) else {
        return Vec::new();
    };
    let intent = UserIntent::of(object);
    match shape(object, how, name, &intent) {
        Shape::Unwirable(problems) => problems,
        Shape::Wirable { .. } => object
            .at("/spec/template/spec")
            .and_then(Value::as_object)
            .and_then(|spec| host_network_dns_problem(spec, &SPEC_PATH, user_wrote_dns(&intent)))
            .map(|p| format!("{}: {p}", display_name("Job", name)))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

/// The API server defaults an unset `spec.parallelism` to 1 before admission, which would run
/// the ranks one at a time (never a rendezvous). Only when an apply record ([`UserIntent`])
/// shows the user did not write `parallelism` does an opted-in Indexed Job run all ranks at
/// once: this is the `parallelism` (= `completions`) the mutation writes, `None` when it writes
/// none. Without a record an explicit `parallelism: 1` looks exactly like the default, so it is
/// never changed (a sharded job must not become `completions` pods at once).
pub fn parallelism_to_write(job: &Value, intent: &UserIntent) -> Option<i64> {
    let indexed = job.at("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    let completions = job.at("/spec/completions").and_then(Value::as_i64);
    let parallelism = job.at("/spec/parallelism").and_then(Value::as_i64);
    let completions = completions.filter(|c| *c > 1)?;
    let defaulted = indexed
        && matches!(parallelism, None | Some(1))
        && intent.has_records()
        && !intent.wrote(&["spec", "parallelism"]);
    defaulted.then_some(completions)
}

/// Writes [`parallelism_to_write`]: an opted-in Indexed Job whose `parallelism` the API server
/// defaulted runs all its ranks at once.
fn all_ranks_at_once(job: &mut Node<'_, Value>, intent: &UserIntent) -> bool {
    let Some(parallelism) = parallelism_to_write(job, intent) else {
        return false;
    };
    match job.object("spec") {
        Some(mut spec) => {
            spec.set("parallelism", serde_json::json!(parallelism));
            true
        }
        None => false,
    }
}

/// Wires an opted-in Indexed Job's pod template.
pub fn mutate(ctx: &dyn Site, object: &mut Node<'_, Value>, findings: &mut dyn Warnings) -> bool {
    let cfg = ctx.pytorch();
    let Some(how) = opt_in(cfg, object) else {
        return false;
    };
    let job_name = ctx.object_name(object).to_string();
    let mut changed = all_ranks_at_once(object, ctx.intent(object));
    let (completions, subdomain) = match shape(object, how, &job_name, ctx.intent(object)) {
        Shape::NotDistributed => return changed,
        Shape::Unwirable(problems) => {
            warn_unwirable(findings, &problems);
            return changed;
        }
        Shape::Wirable {
            completions,
            subdomain,
        } => (completions, subdomain),
    };
    let wrote_dns = user_wrote_dns(ctx.intent(object));
    ctx.preflight_rendezvous_service(object, &job_name, &subdomain, cfg.port, findings);
    let Some(mut template) = object
        .at_pointer("/spec/template")
        .and_then(Node::into_map_node)
    else {
        return changed;
    };
    if job_name.is_empty() {
        // No name yet (generateName): nothing half-wired in the template; each pod carries
        // the Job's name and gets everything at pod admission.
        changed |= deferred::record(
            &mut template,
            &Deferred {
                master_addr: format!("{JOB_PLACEHOLDER}-0.{subdomain}"),
                port: cfg.port,
                nnodes: completions,
                ranked: true,
                wait_for_master: true,
                jobset_rank: None,
            },
        );
        if let Some(mut spec) = workload::pod_spec_mut(&mut template) {
            changed |= env::ensure_host_network_dns(&mut spec, &SPEC_PATH, wrote_dns, findings);
        }
        return changed;
    }
    let wiring = JobWiring {
        master_addr: Some(format!("{job_name}-0.{subdomain}")),
        master_port: cfg.port,
        nnodes: completions,
    };
    let rank = EnvValue::FieldRef(env::COMPLETION_INDEX_FIELD.into());
    let mut vars = env::job_vars(cfg, &wiring);
    vars.extend(env::rank_vars(cfg, rank.clone()));
    let Some(mut spec) = workload::pod_spec_mut(&mut template) else {
        return changed;
    };
    changed |= env::wire_pod_spec(ctx, &mut spec, &SPEC_PATH, &vars, Some(cfg.port), findings);
    changed |= env::ensure_host_network_dns(&mut spec, &SPEC_PATH, wrote_dns, findings);
    if cfg.wait_for_master.enabled
        && let Some(addr) = &wiring.master_addr
    {
        changed |=
            env::write_wait_for_master(&cfg.wait_for_master, &mut spec, addr, cfg.port, Some(rank));
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pytorch::config::OPT_IN_ANNOTATION;

    use serde_json::json;

    fn job(spec: Value, annotations: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "ddp", "annotations": annotations}, "spec": spec})
    }

    fn good_spec() -> Value {
        json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3,
               "template": {"spec": {"subdomain": "ddp", "containers": [{"name": "t"}]}}})
    }

    #[test]
    fn opt_in_by_annotation_or_queue() {
        let mut cfg = PytorchConfig::default();
        let j = job(good_spec(), json!({}));
        assert_eq!(opt_in(&cfg, &j), None);
        cfg.indexed_jobs = crate::pytorch::config::IndexedJobs::All;
        assert_eq!(opt_in(&cfg, &j), Some(OptIn::Queue));
        let out = job(good_spec(), json!({OPT_IN_ANNOTATION: "false"}));
        assert_eq!(opt_in(&cfg, &out), None);
        cfg.indexed_jobs = crate::pytorch::config::IndexedJobs::Off;
        let inn = job(good_spec(), json!({OPT_IN_ANNOTATION: "true"}));
        assert_eq!(opt_in(&cfg, &inn), Some(OptIn::Annotation));
        assert_eq!(opt_in(&cfg, &json!({"metadata": 3})), None);
    }

    #[test]
    fn parallelism_is_raised_only_when_a_record_shows_the_api_defaulted_it() {
        use crate::mutate::pytorch::MUTATOR;
        use crate::mutate::test_support::mutate_with;
        let mut spec = good_spec();
        spec["parallelism"] = json!(1);
        // kubectl apply without parallelism: last-applied says the API server set the 1.
        let applied = json!({"kubectl.kubernetes.io/last-applied-configuration":
            r#"{"spec":{"completionMode":"Indexed","completions":3}}"#});
        let (out, f) = mutate_with(
            &MUTATOR,
            "pytorch: {indexedJobs: true}",
            job(spec.clone(), applied),
        );
        assert_eq!(out["spec"]["parallelism"], 3);
        assert!(f.warning_texts().is_empty(), "{:?}", f.warning_texts());
        // Written by the user (server-side apply owns it): kept, and unwirable.
        let mut j = job(spec.clone(), json!({}));
        j["metadata"]["managedFields"] = json!([{"operation": "Apply", "manager": "kubectl",
            "fieldsV1": {"f:spec": {"f:parallelism": {}}}}]);
        let (out, f) = mutate_with(&MUTATOR, "pytorch: {indexedJobs: true}", j);
        assert_eq!(out["spec"]["parallelism"], 1);
        assert!(
            f.warning_texts()[0].contains("spec.parallelism 1 < spec.completions 3"),
            "{:?}",
            f.warning_texts()
        );
        // No record (kubectl create, the W&B agent): a 1 may be the user's, so it is kept and
        // the message says how to run every rank at once.
        let (out, f) = mutate_with(
            &MUTATOR,
            "pytorch: {indexedJobs: true}",
            job(spec, json!({})),
        );
        assert_eq!(out["spec"]["parallelism"], 1);
        assert!(
            f.warning_texts()[0].contains("set spec.parallelism: 3"),
            "{:?}",
            f.warning_texts()
        );
    }

    #[test]
    fn pytorch_env_stays_coherent_with_what_the_user_kept() {
        use crate::mutate::pytorch::MUTATOR;
        use crate::mutate::test_support::mutate_with;
        let mut spec = good_spec();
        // WORLD_SIZE as a process count (3 pods × 8 GPUs) and a rendezvous port of their own.
        spec["template"]["spec"]["containers"][0]["env"] = json!([
            {"name": "WORLD_SIZE", "value": "24"},
            {"name": "MASTER_PORT", "value": "29500"}
        ]);
        let (out, f) = mutate_with(
            &MUTATOR,
            "pytorch: {indexedJobs: true}",
            job(spec, json!({})),
        );
        let c = &out["spec"]["template"]["spec"]["containers"][0];
        let value = |n: &str| crate::workload::effective_env_value(c.as_object().unwrap(), n);
        // torchrun's --nnodes counts pods, never the user's process count.
        assert_eq!(value("PET_NNODES"), Some("3"));
        assert_eq!(value("WORLD_SIZE"), Some("24"));
        // The port the containers rendezvous on is the MASTER_PORT they use.
        assert_eq!(value("MASTER_PORT"), Some("29500"));
        assert_eq!(value("PET_MASTER_PORT"), Some("29500"));
        assert_eq!(c["ports"][0]["containerPort"], 29500, "{}", c["ports"]);
        assert!(
            f.warning_texts()
                .iter()
                .any(|w| w.contains("keeps its WORLD_SIZE")),
            "{:?}",
            f.warning_texts()
        );
    }

    #[test]
    fn auto_wires_only_jobs_that_show_they_are_pytorch() {
        use crate::pytorch::config::IndexedJobs;
        let cfg = PytorchConfig {
            indexed_jobs: IndexedJobs::Auto,
            ..PytorchConfig::default()
        };
        let with = |container: Value| {
            let mut spec = good_spec();
            spec["template"]["spec"]["containers"] = json!([container]);
            job(spec, json!({}))
        };
        // A sharded evaluation: an Indexed Job, nothing PyTorch-distributed about it.
        let eval = with(
            json!({"name": "eval", "command": ["python", "eval.py", "--shard=$(JOB_COMPLETION_INDEX)"]}),
        );
        assert_eq!(opt_in(&cfg, &eval), None);
        for (container, evidence) in [
            (
                json!({"name": "t", "command": ["torchrun", "--nproc-per-node=8", "train.py"]}),
                "torchrun",
            ),
            (
                json!({"name": "t", "command": ["/opt/conda/bin/torchrun"]}),
                "torchrun",
            ),
            (
                json!({"name": "t", "command": ["python", "-m", "torch.distributed.run", "t.py"]}),
                "torch.distributed.run",
            ),
            (
                json!({"name": "t", "command": ["bash", "-c"], "args": ["pip install -e . && accelerate launch train.py"]}),
                "accelerate launch",
            ),
            (
                json!({"name": "t", "args": ["deepspeed", "train.py"]}),
                "deepspeed",
            ),
            (
                json!({"name": "t", "env": [{"name": "WORLD_SIZE", "value": "4"}]}),
                "env",
            ),
        ] {
            match opt_in(&cfg, &with(container.clone())) {
                Some(OptIn::Evidence(why)) => {
                    assert!(why.contains(evidence), "{why} for {container}")
                }
                other => panic!("{container}: {other:?}"),
            }
        }
        // "accelerate" alone (e.g. a config step) is no launcher; an init container's command
        // says nothing about the training container.
        assert_eq!(
            opt_in(
                &cfg,
                &with(json!({"name": "t", "command": ["accelerate", "config"]}))
            ),
            None
        );
        let mut init_only = eval.clone();
        init_only["spec"]["template"]["spec"]["initContainers"] =
            json!([{"name": "prep", "command": ["torchrun", "--help"]}]);
        assert_eq!(opt_in(&cfg, &init_only), None);
    }

    #[test]
    fn shapes() {
        // A Job without apply records: the user's intent says nothing.
        let shape_of = |j: &Value, how| shape(j, how, "ddp", &UserIntent::default());
        assert_eq!(
            shape_of(&job(good_spec(), json!({})), OptIn::Queue),
            Shape::Wirable {
                completions: 3,
                subdomain: "ddp".into()
            }
        );
        let mut non_indexed = good_spec();
        non_indexed["completionMode"] = json!("NonIndexed");
        let j = job(non_indexed, json!({}));
        assert_eq!(shape_of(&j, OptIn::Queue), Shape::NotDistributed);
        let Shape::Unwirable(p) = shape_of(&j, OptIn::Annotation) else {
            panic!("explicit opt-in of a non-Indexed Job is unwirable")
        };
        assert!(p[0].contains("not an Indexed Job"), "{p:?}");

        let mut s = good_spec();
        s["parallelism"] = json!(2);
        s["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("subdomain");
        let Shape::Unwirable(p) = shape_of(&job(s, json!({})), OptIn::Queue) else {
            panic!("unwirable")
        };
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].contains("spec.parallelism 2 < spec.completions 3"),
            "{p:?}"
        );
        assert!(p[1].contains("subdomain"), "{p:?}");

        let mut s = good_spec();
        s.as_object_mut().unwrap().remove("completions");
        let Shape::Unwirable(p) = shape_of(&job(s, json!({})), OptIn::Queue) else {
            panic!("unwirable")
        };
        assert!(p[0].contains("spec.completions must be set"), "{p:?}");
        let malformed = json!({"spec": {"completionMode": "Indexed"}});
        let Shape::Unwirable(_) = shape(&malformed, OptIn::Queue, "", &UserIntent::default())
        else {
            panic!("malformed is unwirable")
        };
    }
}
