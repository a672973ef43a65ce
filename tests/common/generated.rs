//! Generated launch workloads of every kind launchgate judges — every kind of its registry
//! (`WorkloadKind::all`), each by the generator of its shape ([`generator`]) — as a user
//! submits them: valid for the upstream CRDs, labelled for a queue, with sizes, resources,
//! images, deadlines and Kueue labels drawn around the limits the suite's configs set, so both
//! sides of a comparison meet denials as often as admissions. `sample` draws a fixed,
//! reproducible list of them.

use launchgate::WorkloadKind;
use proptest::prelude::*;
use proptest::strategy::{Union, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};

/// One container: an image from an allowed or another registry, GPUs around the usual bound
/// of 4, cpu and memory around 4 and 12Gi, on limits or on requests only.
fn container(name: &'static str) -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec![
            "acme/train:1",
            "docker.io/acme/train:2",
            "evil.example/miner:1",
        ]),
        0i64..=9,
        prop::sample::select(vec!["1", "4", "5"]),
        prop::sample::select(vec!["4Gi", "12Gi", "13Gi"]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(move |(image, gpus, cpu, memory, on_limits, gpu_as_text)| {
            let gpus = if gpu_as_text {
                json!(gpus.to_string())
            } else {
                json!(gpus)
            };
            let mut resources = json!({"limits": {"nvidia.com/gpu": gpus}});
            let place = if on_limits { "limits" } else { "requests" };
            resources[place]["cpu"] = json!(cpu);
            resources[place]["memory"] = json!(memory);
            json!({"name": name, "image": image, "command": ["python", "train.py"],
                   "resources": resources})
        })
}

/// A pod spec of one training container, sometimes with an init container.
fn pod_spec(restart: &'static str) -> impl Strategy<Value = Value> {
    (container("train"), prop::option::of(container("fetch"))).prop_map(move |(main, init)| {
        let mut spec = json!({"restartPolicy": restart, "containers": [main]});
        if let Some(init) = init {
            spec["initContainers"] = json!([init]);
        }
        spec
    })
}

fn template(restart: &'static str) -> impl Strategy<Value = Value> {
    pod_spec(restart).prop_map(
        |spec| json!({"metadata": {"labels": {"wandb.ai/monitor": "true"}}, "spec": spec}),
    )
}

/// What every generated workload may carry besides its shape: a run-level deadline and a
/// tenant's Kueue labels.
#[derive(Debug, Clone)]
struct Extras {
    deadline: Option<i64>,
    kueue: bool,
}

fn extras() -> impl Strategy<Value = Extras> {
    (
        prop::option::of(prop::sample::select(vec![60i64, 3600, 172800])),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(deadline, kueue)| Extras { deadline, kueue })
}

fn object(api_version: &str, kind: &str, name: String, spec: Value, extras: &Extras) -> Value {
    let mut labels = json!({"wandb.ai/monitor": "true"});
    if extras.kueue {
        labels["kueue.x-k8s.io/queue-name"] = json!("team-b");
    }
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "labels": labels}, "spec": spec})
}

fn pod() -> impl Strategy<Value = Value> {
    (pod_spec("Never"), extras()).prop_map(|(mut spec, x)| {
        if let Some(d) = x.deadline {
            spec["activeDeadlineSeconds"] = json!(d);
        }
        object("v1", "Pod", "gen-pod".into(), spec, &x)
    })
}

fn job() -> impl Strategy<Value = Value> {
    (
        template("Never"),
        1i64..=4,
        prop::option::of(1i64..=4),
        extras(),
    )
        .prop_map(|(template, parallelism, completions, x)| {
            let mut spec = json!({"parallelism": parallelism, "template": template});
            if let Some(c) = completions {
                spec["completions"] = json!(c);
            }
            if let Some(d) = x.deadline {
                spec["activeDeadlineSeconds"] = json!(d);
            }
            object("batch/v1", "Job", "gen-job".into(), spec, &x)
        })
}

fn volcano_job() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec((template("OnFailure"), 1i64..=3), 1..=3),
        any::<bool>(),
        extras(),
    )
        .prop_map(|(tasks, swap, x)| {
            let names = ["master", "worker", "extra"];
            let mut tasks: Vec<Value> = tasks
                .into_iter()
                .enumerate()
                .map(|(i, (t, replicas))| json!({"name": names[i], "replicas": replicas, "template": t}))
                .collect();
            if swap {
                tasks.reverse();
            }
            let spec = json!({"schedulerName": "volcano", "minAvailable": 1, "tasks": tasks});
            object("batch.volcano.sh/v1alpha1", "Job", "gen-vcjob".into(), spec, &x)
        })
}

fn pytorch_job() -> impl Strategy<Value = Value> {
    (
        template("Never"),
        template("Never"),
        1i64..=4,
        prop::option::of(1i64..=6),
        extras(),
    )
        .prop_map(|(master, worker, workers, elastic, x)| {
            let mut spec = json!({"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": master},
                "Worker": {"replicas": workers, "restartPolicy": "Never", "template": worker}}});
            if let Some(max) = elastic {
                spec["elasticPolicy"] = json!({"minReplicas": 1, "maxReplicas": max.max(workers)});
            }
            if let Some(d) = x.deadline {
                spec["runPolicy"] = json!({"activeDeadlineSeconds": d});
            }
            object(
                "kubeflow.org/v1",
                "PyTorchJob",
                "gen-ptjob".into(),
                spec,
                &x,
            )
        })
}

fn jobset() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec((template("Never"), 1i64..=3, 1i64..=2), 1..=2),
        extras(),
    )
        .prop_map(|(jobs, x)| {
            let names = ["driver", "workers"];
            let jobs: Vec<Value> = jobs
                .into_iter()
                .enumerate()
                .map(|(i, (t, replicas, parallelism))| {
                    let mut job = json!({"parallelism": parallelism, "completions": parallelism,
                                         "completionMode": "Indexed", "template": t});
                    if let Some(d) = x.deadline {
                        job["activeDeadlineSeconds"] = json!(d);
                    }
                    json!({"name": names[i], "replicas": replicas, "template": {"spec": job}})
                })
                .collect();
            let spec = json!({"replicatedJobs": jobs});
            object(
                "jobset.x-k8s.io/v1alpha2",
                "JobSet",
                "gen-jobset".into(),
                spec,
                &x,
            )
        })
}

fn trainjob() -> impl Strategy<Value = Value> {
    (container("node"), 1i64..=8, extras()).prop_map(|(c, nodes, x)| {
        let spec = json!({"runtimeRef": {"name": "torch-distributed"},
            "trainer": {"image": c["image"], "numNodes": nodes, "resourcesPerNode": c["resources"]}});
        object(
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            "gen-trainjob".into(),
            spec,
            &x,
        )
    })
}

/// A Ray cluster spec: a head and one or two worker groups, autoscaling or not.
fn ray_cluster_spec() -> impl Strategy<Value = Value> {
    (
        template("Always"),
        prop::collection::vec((template("Always"), 0i64..=3, 1i64..=4, 1i64..=2), 1..=2),
        any::<bool>(),
    )
        .prop_map(|(head, groups, autoscale)| {
            let names = ["gpu", "cpu"];
            let groups: Vec<Value> = groups
                .into_iter()
                .enumerate()
                .map(|(i, (t, replicas, max, hosts))| {
                    json!({"groupName": names[i], "replicas": replicas, "minReplicas": 0,
                           "maxReplicas": max.max(replicas), "numOfHosts": hosts,
                           "rayStartParams": {}, "template": t})
                })
                .collect();
            json!({"enableInTreeAutoscaling": autoscale,
                   "headGroupSpec": {"rayStartParams": {}, "template": head},
                   "workerGroupSpecs": groups})
        })
}

fn rayjob() -> impl Strategy<Value = Value> {
    (
        ray_cluster_spec(),
        prop::option::of(pod_spec("Never")),
        extras(),
    )
        .prop_map(|(cluster, submitter, x)| {
            let mut spec = json!({"entrypoint": "python train.py", "rayClusterSpec": cluster,
                                  "shutdownAfterJobFinishes": true});
            if let Some(s) = submitter {
                spec["submitterPodTemplate"] = json!({"spec": s});
            }
            if let Some(d) = x.deadline {
                spec["activeDeadlineSeconds"] = json!(d);
            }
            object("ray.io/v1", "RayJob", "gen-rayjob".into(), spec, &x)
        })
}

fn raycluster() -> impl Strategy<Value = Value> {
    (ray_cluster_spec(), extras())
        .prop_map(|(spec, x)| object("ray.io/v1", "RayCluster", "gen-raycluster".into(), spec, &x))
}

/// An MPIJob v2: a CPU or GPU launcher and 1..4 GPU workers (the operator's `Worker` key
/// spelled as it requires), sometimes cleaning up its workers at the end.
fn mpijob() -> impl Strategy<Value = Value> {
    (
        template("Never"),
        template("Never"),
        1i64..=4,
        prop::option::of(prop::sample::select(vec!["Running", "None"])),
        extras(),
    )
        .prop_map(|(launcher, worker, workers, clean, x)| {
            let mut spec = json!({"slotsPerWorker": 1, "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": launcher},
                "Worker": {"replicas": workers, "template": worker}}});
            if let Some(c) = clean {
                spec["runPolicy"]["cleanPodPolicy"] = json!(c);
            }
            if let Some(d) = x.deadline {
                spec["runPolicy"]["activeDeadlineSeconds"] = json!(d);
            }
            object(
                "kubeflow.org/v2beta1",
                "MPIJob",
                "gen-mpijob".into(),
                spec,
                &x,
            )
        })
}

/// A LeaderWorkerSet: 1..3 groups of 1..4 pods, its leader from a template of its own or from
/// the worker template, sometimes surging in a rolling update (a number of groups, or a
/// percentage of them). It has no deadline.
fn leaderworkerset() -> impl Strategy<Value = Value> {
    (
        prop::option::of(template("Always")),
        template("Always"),
        1i64..=3,
        1i64..=4,
        prop::option::of(prop_oneof![
            (0i64..=1).prop_map(|n| json!(n)),
            prop::sample::select(&["25%", "50%", "100%"][..]).prop_map(|p| json!(p)),
        ]),
        extras(),
    )
        .prop_map(|(leader, worker, groups, size, surge, x)| {
            let mut spec = json!({"replicas": groups,
                "leaderWorkerTemplate": {"size": size, "workerTemplate": worker}});
            if let Some(leader) = leader {
                spec["leaderWorkerTemplate"]["leaderTemplate"] = leader;
            }
            if let Some(s) = surge {
                spec["rolloutStrategy"] = json!({"type": "RollingUpdate",
                    "rollingUpdateConfiguration": {"maxSurge": s}});
            }
            object(
                "leaderworkerset.x-k8s.io/v1",
                "LeaderWorkerSet",
                "gen-lws".into(),
                spec,
                &x,
            )
        })
}

/// The generator of a registered kind's workloads, by its name in the registry
/// (`WorkloadKind::as_str`): each kind's CRD asks for its own shape (its required fields, where
/// its pod templates sit and how they are named), so each kind has one. `None` for a kind
/// without one.
fn generator(kind: &str) -> Option<BoxedStrategy<Value>> {
    Some(match kind {
        "Pod" => pod().boxed(),
        "Job" => job().boxed(),
        "VolcanoJob" => volcano_job().boxed(),
        "PyTorchJob" => pytorch_job().boxed(),
        "JobSet" => jobset().boxed(),
        "TrainJob" => trainjob().boxed(),
        "RayJob" => rayjob().boxed(),
        "RayCluster" => raycluster().boxed(),
        "MPIJob" => mpijob().boxed(),
        "LeaderWorkerSet" => leaderworkerset().boxed(),
        _ => return None,
    })
}

/// The registered kinds [`generator`] has no generator for, each with what to add.
pub fn missing_generators() -> Vec<String> {
    WorkloadKind::all()
        .filter(|k| generator(k.as_str()).is_none())
        .map(|k| {
            format!(
                "{name} ({api_version} {kind}) is registered but has no generator: add a \
                 `\"{name}\" => …` arm to `generator` in tests/common/generated.rs that draws a \
                 valid {kind} of its CRD, labelled for a queue",
                name = k.as_str(),
                api_version = k.api_version(),
                kind = k.api_kind(),
            )
        })
        .collect()
}

/// A launch workload of any registered kind, each kind as likely as another.
pub fn workload() -> BoxedStrategy<Value> {
    let missing = missing_generators();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    Union::new(WorkloadKind::all().filter_map(|k| generator(k.as_str()))).boxed()
}

/// `n` generated workloads, the same every run for a `seed`, each named `<kind>-<i>` and sent
/// to one of `queues` in turn (by the `launchgate.io/queue` label).
pub fn sample(n: usize, seed: u8, queues: &[String]) -> Vec<Value> {
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = workload();
    (0..n)
        .map(|i| {
            let mut w = strategy
                .new_tree(&mut runner)
                .expect("the generators never reject")
                .current();
            let name = format!("{}-{i}", w["metadata"]["name"].as_str().unwrap_or("gen"));
            w["metadata"]["name"] = json!(name);
            if !queues.is_empty() {
                w["metadata"]["labels"]["launchgate.io/queue"] = json!(queues[i % queues.len()]);
            }
            w
        })
        .collect()
}
