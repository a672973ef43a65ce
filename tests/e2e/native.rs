//! Native admission policies on the real API server: what `compile-native` writes applies
//! cleanly; alone, it decides every recorded workload of every suite queue exactly as the
//! webhook does (running the config that leaves out what the report says stays in the
//! webhook); and in hybrid mode it keeps enforcing limits and static mutations while the
//! webhook is down.

use crate::apiserver_metrics;
use crate::ctx::{Ctx, manifest, resource_for};
use crate::webhook::{Launchgate, WARN_QUEUE, suite_config};
use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use launchgate::Policy;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

/// The namespace label the differential and hybrid tests bind their webhooks and policies to.
pub const SELECT_LABEL: &str = "e2e.launchgate.io/native";

fn admission_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        &match kind.to_lowercase().strip_suffix('y') {
            Some(stem) => format!("{stem}ies"),
            None => format!("{}s", kind.to_lowercase()),
        },
    )
}

/// `launchgate compile-native -o json` for the config at `path`: its objects.
fn compile_with_cli(path: &std::path::Path) -> Result<Vec<Value>> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_launchgate"))
        .args(["compile-native", "-o", "json", "--config"])
        .arg(path)
        .output()?;
    ensure!(
        out.status.success(),
        "compile-native {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// The built-in queue with every limit set: namespaces, registries, a deadline cap, totals.
pub(crate) fn every_limit_config() -> Result<String> {
    let mut config: Value = serde_yaml::from_str(launchgate::policy::DEFAULT_CONFIG_YAML)?;
    let limits = &mut config["queues"]["gpu-queue"]["limits"];
    limits["allowedNamespaces"] = json!(["wandb", "ml-team"]);
    limits["allowedRegistries"] = json!(["docker.io/acme"]);
    limits["maxActiveDeadlineSeconds"] = json!(86400);
    limits["totals"] = json!({"nvidia.com/gpu": {"maximum": 8}});
    // Denials end with links to the rules' sections, the native policies' as the webhook's.
    config["docsUrl"] = json!("https://docs.example.com/launchgate");
    Ok(serde_yaml::to_string(&config)?)
}

/// `launchgate import-queue` of the recorded Terraform state: the config snippet it writes.
fn imported_terraform_queues() -> Result<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_launchgate"))
        .args(["import-queue"])
        .arg(crate::common::queue_config_path("terraform-show.json"))
        .output()?;
    ensure!(
        out.status.success(),
        "import-queue: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// Every queue config the tests use: the built-in example, the suite's queues, a queue with
/// every limit, the example policy suites' configs, the chart's default, the fuzzing policy,
/// the queues imported from the recorded Terraform state, and a policy per recorded W&B queue
/// config (its template pasted as-is, `gpus` 0..4).
pub(crate) fn test_configs() -> Result<Vec<(String, String)>> {
    let root = crate::common::root();
    let file = |path: &str| -> Result<(String, String)> {
        Ok((path.to_string(), std::fs::read_to_string(root.join(path))?))
    };
    let chart: Value = serde_yaml::from_str(&std::fs::read_to_string(
        root.join("charts/launchgate/values.yaml"),
    )?)?;
    let mut out = vec![
        (
            "the built-in example".to_string(),
            launchgate::policy::DEFAULT_CONFIG_YAML.to_string(),
        ),
        ("the e2e suite's queues".to_string(), suite_config()?),
        (
            "a queue with every limit".to_string(),
            every_limit_config()?,
        ),
        file("examples/policy-tests/strict-queue/config.yaml")?,
        file("fuzz/src/wide-config.yaml")?,
        (
            "the chart's default config".to_string(),
            serde_yaml::to_string(&chart["config"])?,
        ),
        (
            "terraform-show.json, imported".to_string(),
            imported_terraform_queues()?,
        ),
    ];
    let dir = crate::common::root().join("tests/fixtures/wandb-queues");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    for file in files {
        let name = file
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        // A Terraform state lists queues; the others are one queue's config each.
        if name == "terraform-show.json" {
            continue;
        }
        let template = std::fs::read_to_string(&file)?;
        let config = json!({
            "defaultQueue": "q",
            "queues": {"q": {"limits": {"template": template,
                "variables": {"gpus": {"type": "integer", "minimum": 0, "maximum": 4}}}}},
        });
        out.push((name, serde_yaml::to_string(&config)?));
    }
    Ok(out)
}

/// `compile-native` output applies to the API server (`kubectl apply --dry-run=server`) for
/// every config the tests use.
pub async fn compiled_policies_apply_to_the_api_server(ctx: &Ctx) -> Result<()> {
    let dir = tempfile::tempdir()?;
    for (what, text) in test_configs()? {
        Policy::from_yaml(&text).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, &text)?;
        let objects = compile_with_cli(&path)?;
        ensure!(!objects.is_empty(), "{what}: nothing compiled");
        for object in objects {
            let kind = object["kind"].as_str().unwrap_or_default().to_string();
            let api: Api<DynamicObject> =
                Api::all_with(ctx.client.clone(), &admission_resource(&kind));
            let pp = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            api.create(&pp, &serde_json::from_value(object.clone())?)
                .await
                .with_context(|| {
                    format!(
                        "{what}: {kind} {}",
                        object["metadata"]["name"].as_str().unwrap_or("")
                    )
                })?;
        }
    }
    Ok(())
}

/// Creates `obj` in namespace `ns` (optionally as a dry run).
pub(crate) async fn create_in(
    client: &kube::Client,
    ns: &str,
    obj: &Value,
    dry_run: bool,
) -> Result<Result<Value, kube::core::Status>> {
    let mut obj = obj.clone();
    obj["metadata"]["namespace"] = json!(ns);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource_for(&obj)?);
    let pp = PostParams {
        dry_run,
        ..PostParams::default()
    };
    match api.create(&pp, &serde_json::from_value(obj)?).await {
        Ok(created) => Ok(Ok(serde_json::to_value(created)?)),
        Err(kube::Error::Api(e)) => Ok(Err(*e)),
        Err(e) => Err(e.into()),
    }
}

/// A namespace for this test that the suite's own webhook does not see, labelled for `tag`.
pub async fn namespace(ctx: &Ctx, name: &str, tag: &str) -> Result<Ctx> {
    let other = Ctx::new(ctx.env.clone(), name, false).await?;
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {"labels": {SELECT_LABEL: tag}}});
    namespaces
        .patch(&other.ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(other)
}

/// Creates the compiled native objects, their bindings narrowed to namespaces labelled `tag`;
/// returns what to delete afterwards.
pub async fn install_native(
    client: &kube::Client,
    objects: &[Value],
    tag: &str,
) -> Result<Vec<(ApiResource, String)>> {
    let mut created = Vec::new();
    // The validating policies first: once the mutating ones act, the others are in place too.
    let validating = objects.iter().filter(|o| {
        o["kind"]
            .as_str()
            .is_some_and(|k| k.starts_with("Validating"))
    });
    let mutating = objects.iter().filter(|o| {
        o["kind"]
            .as_str()
            .is_some_and(|k| k.starts_with("Mutating"))
    });
    for object in validating.chain(mutating) {
        let mut object = object.clone();
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let name = format!(
            "{}-{tag}",
            object["metadata"]["name"].as_str().unwrap_or("")
        );
        object["metadata"]["name"] = json!(name);
        if kind.ends_with("Binding") {
            let policy = format!(
                "{}-{tag}",
                object["spec"]["policyName"].as_str().unwrap_or("")
            );
            object["spec"]["policyName"] = json!(policy);
            object["spec"]["matchResources"] =
                json!({"namespaceSelector": {"matchLabels": {SELECT_LABEL: tag}}});
        }
        let resource = admission_resource(&kind);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        api.create(&PostParams::default(), &serde_json::from_value(object)?)
            .await
            .with_context(|| format!("creating {kind} {name}"))?;
        created.push((resource, name));
    }
    Ok(created)
}

/// After a test, pass or fail: the webhook unregistered and stopped, the native objects and the
/// namespaces deleted.
async fn clean_up(
    ctx: &Ctx,
    mut webhook: Launchgate,
    installed: Vec<(ApiResource, String)>,
    namespaces: &[&Ctx],
) {
    webhook.unregister(&ctx.client).await;
    for (resource, name) in installed {
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        let _ = api.delete(&name, &Default::default()).await;
    }
    webhook.stop();
    for ns in namespaces {
        ns.cleanup().await;
    }
}

/// One config judged two ways: the webhook alone (running the config the native policies are
/// equivalent to) in one namespace, the compiled native policies alone in another.
pub(crate) struct Sides {
    pub(crate) policy: Policy,
    compiled: Vec<Value>,
    tag: String,
    webhook: Launchgate,
    installed: Vec<(ApiResource, String)>,
    pub(crate) webhook_ns: Ctx,
    pub(crate) native_ns: Ctx,
}

impl Sides {
    /// Starts the webhook for `config` (YAML) and makes both namespaces; nothing is registered
    /// yet ([`Sides::install`]); `id` tells this pair from others of the same test.
    pub(crate) async fn start(ctx: &Ctx, config: &str, id: &str) -> Result<Sides> {
        let policy = Policy::from_yaml(config).map_err(|e| anyhow::anyhow!("{e}"))?;
        let compiled = launchgate::native::compile(&policy, &Default::default()).objects;
        let equivalent = serde_yaml::to_string(&launchgate::native::native_subset(&policy))?;
        let tag = format!("{id}-{}", &ctx.ns[ctx.ns.len() - 4..]);
        let webhook_ns =
            namespace(ctx, &format!("{id}-webhook"), &format!("{tag}-webhook")).await?;
        let native_ns =
            match namespace(ctx, &format!("{id}-native"), &format!("{tag}-native")).await {
                Ok(ns) => ns,
                Err(e) => {
                    webhook_ns.cleanup().await;
                    return Err(e);
                }
            };
        let dir = tempfile::tempdir()?;
        let webhook =
            match Launchgate::start_with(dir.path(), None, "127.0.0.1", &equivalent, &[]).await {
                Ok(w) => w,
                Err(e) => {
                    webhook_ns.cleanup().await;
                    native_ns.cleanup().await;
                    return Err(e);
                }
            };
        Ok(Sides {
            policy,
            compiled,
            tag,
            webhook,
            installed: Vec::new(),
            webhook_ns,
            native_ns,
        })
    }

    /// Registers the webhook and creates the native policies, then waits until both act: every
    /// queue's mutation on both sides, and both sides judging an over-limit pod alike.
    pub(crate) async fn install(&mut self, ctx: &Ctx) -> Result<()> {
        let tag = self.tag.clone();
        self.webhook
            .register_with(
                &ctx.client,
                &format!("{tag}-webhook"),
                &[json!({"key": SELECT_LABEL, "operator": "In", "values": [format!("{tag}-webhook")]})],
                None,
            )
            .await?;
        self.installed =
            install_native(&ctx.client, &self.compiled, &format!("{tag}-native")).await?;
        for queue in self.policy.queues.values() {
            let mut probe = ctx.launch_pod("probe");
            probe["metadata"]["labels"]["launchgate.io/queue"] = json!(queue.name);
            // Within most queues' limits (one requires a deadline).
            probe["spec"]["activeDeadlineSeconds"] = json!(60);
            let mut over = probe.clone();
            over["spec"]["containers"][0]["resources"] =
                json!({"limits": {"nvidia.com/gpu": "99"}});
            let mutated = |made: &Outcome| {
                made.as_ref()
                    .is_ok_and(|p| p.pointer("/metadata/labels/launchgate.io~1queue").is_some())
            };
            ctx.wait_for(
                &format!("both sides to take effect for queue {}", queue.key),
                Duration::from_secs(120),
                || async {
                    let (w, n) = self.judge(ctx, &probe).await?;
                    let (ow, on) = self.judge(ctx, &over).await?;
                    Ok((mutated(&w) || w.is_err())
                        && (mutated(&n) || n.is_err())
                        && w.is_ok() == n.is_ok()
                        && ow.is_ok() == on.is_ok())
                },
            )
            .await?;
        }
        Ok(())
    }

    /// The first difference in judging `obj`, waiting out the moment the API server takes to
    /// load new policies and bindings (resource by resource): up to [`SETTLE_TRIES`] tries, 1 s apart, until
    /// the two agree.
    pub(crate) async fn settled_difference(
        &self,
        ctx: &Ctx,
        obj: &Value,
    ) -> Result<Option<String>> {
        let mut attempt = 0;
        loop {
            let (by_webhook, by_native) = self.judge(ctx, obj).await?;
            let found = difference(obj, by_webhook, by_native);
            attempt += 1;
            if found.is_none() || attempt == SETTLE_TRIES {
                return Ok(found);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Both sides' outcomes for a dry-run create of `obj`.
    pub(crate) async fn judge(&self, ctx: &Ctx, obj: &Value) -> Result<(Outcome, Outcome)> {
        let (by_webhook, by_native) = tokio::join!(
            create_in(&ctx.client, &self.webhook_ns.ns, obj, true),
            create_in(&ctx.client, &self.native_ns.ns, obj, true)
        );
        Ok((by_webhook?, by_native?))
    }

    /// The webhook unregistered and stopped, the native objects and the namespaces deleted.
    pub(crate) async fn clean_up(self, ctx: &Ctx) {
        clean_up(
            ctx,
            self.webhook,
            self.installed,
            &[&self.webhook_ns, &self.native_ns],
        )
        .await;
    }
}

/// A PyTorchJob whose replicas name different queues (the Master a deny queue, the Worker a
/// warn queue, and the reverse), over a GPU limit, created by dry run 30 times each: the native
/// policies decide as the webhook does every time (the queue of the first replica type in name
/// order, whatever order the API server's CEL walks the replica map in).
///
/// Under the full suite's load the API server has once been seen not to apply a freshly
/// created mutating policy to this kind for minutes while applying it to pods; a difference
/// is therefore judged again on a second, fresh install (new namespaces, new policy objects),
/// and only a difference both installs show fails the test (the first is printed either way).
pub async fn a_pytorchjob_is_judged_the_same_every_time(ctx: &Ctx) -> Result<()> {
    let first = judged_the_same_every_time(ctx, "replica-order").await;
    let Err(e) = first else {
        return Ok(());
    };
    eprintln!("e2e: {} first install: {e:#}", ctx.ns);
    judged_the_same_every_time(ctx, "replica-again").await
}

/// One install of [`a_pytorchjob_is_judged_the_same_every_time`].
async fn judged_the_same_every_time(ctx: &Ctx, id: &str) -> Result<()> {
    let mut sides = Sides::start(ctx, &suite_config()?, id).await?;
    let result =
        async {
            sides.install(ctx).await?;
            let mut differences = Vec::new();
            let mut denied = 0;
            for (master, worker) in [("gpu-queue", WARN_QUEUE), (WARN_QUEUE, "gpu-queue")] {
                let mut job = manifest("ptjob.yaml");
                for (replica, queue) in [("Master", master), ("Worker", worker)] {
                    job["spec"]["pytorchReplicaSpecs"][replica]["template"]["metadata"]["labels"]
                        ["launchgate.io/queue"] = json!(queue);
                }
                for c in containers_mut(&mut job) {
                    c["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
                }
                if let Some(d) = sides.settled_difference(ctx, &job).await? {
                    differences.push(format!("Master in {master}, Worker in {worker}: {d}"));
                }
                for attempt in 0..30 {
                    let (by_webhook, by_native) = sides.judge(ctx, &job).await?;
                    denied += usize::from(by_webhook.is_err());
                    if let Some(d) = difference(&job, by_webhook, by_native) {
                        differences.push(format!(
                            "Master in {master}, Worker in {worker}, try {attempt}: {d}"
                        ));
                    }
                }
            }
            // The deny queue's Master decides one of the two: 30 denials by the webhook.
            ensure!(
                denied == 30,
                "the webhook denied {denied} of 60 creates, not 30"
            );
            ensure!(
                differences.is_empty(),
                "{} of 60 creates differ:\n{}",
                differences.len(),
                differences.join("\n")
            );
            Ok(())
        }
        .await;
    sides.clean_up(ctx).await;
    result
}

/// What a created object is, for comparing two of them: without identity, timestamps, field
/// managers, the random token volume suffix, and the decision-trail annotation the native
/// policies do not write (in the compiler's report).
fn comparable(obj: &Value) -> Value {
    let mut v = crate::workloads::comparable(obj);
    // A name the API server generated differs from one create to the next.
    if let (Some(_), Some(name)) = (
        v["metadata"]["generateName"].as_str(),
        v["metadata"]["name"].as_str().map(str::to_string),
    ) {
        let text = serde_json::to_string(&v)
            .unwrap_or_default()
            .replace(&name, "<generated>");
        v = serde_json::from_str(&text).unwrap_or(v);
    }
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("namespace");
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("launchgate.io/mutations");
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    v
}

/// The links to the rules' sections a denial ends with (`see <docsUrl>/reference/rules.html#…`,
/// on a line of its own from the webhook, after ` — ` from a native policy), when its config
/// names a documentation site.
fn rule_links(message: &str) -> BTreeSet<String> {
    message
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|word| word.contains(launchgate::rules::RULES_PAGE))
        .map(str::to_string)
        .collect()
}

/// The limits a denial names: `variable "gpus"`, `field "…"`, `totals`,
/// `maxActiveDeadlineSeconds`, `allowedRegistries: …`, `kueue.…`, `visibleDevices: void` (the
/// parentheses that name a limit).
fn limits_named(message: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = message;
    while let Some(open) = rest.find('(') {
        let inner = &rest[open + 1..];
        let Some(close) = inner.find(')') else { break };
        let named = &inner[..close];
        if [
            "variable \"",
            "field \"",
            "totals",
            "maxActiveDeadlineSeconds",
            "allowedRegistries",
            "allowedNamespaces",
            "kueue.",
            "visibleDevices",
        ]
        .iter()
        .any(|p| named.starts_with(p))
        {
            out.insert(named.to_string());
        }
        rest = &inner[close + 1..];
    }
    out
}

/// The recorded workloads: the user-written manifests of every kind and the JobSet and
/// TrainJob of the recorded admission requests, as a user submits them.
fn recorded_workloads() -> Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for file in [
        "job-demo.yaml",
        "indexed-job-ddp.yaml",
        "wandb-job.yaml",
        "vcjob.yaml",
        "ptjob.yaml",
        "pod-master-0.yaml",
        "pod-worker-0.yaml",
        "kaniko-pod.yaml",
    ] {
        out.push((file.to_string(), manifest(file)));
    }
    for file in ["create-jobset-ddp.json", "create-trainjob-llama-ft.json"] {
        let review = crate::common::fixture_json(file);
        let mut object = review["request"]["object"].clone();
        if let Some(meta) = object["metadata"].as_object_mut() {
            for key in [
                "uid",
                "creationTimestamp",
                "resourceVersion",
                "managedFields",
                "generation",
                "namespace",
            ] {
                meta.remove(key);
            }
        }
        if let Some(o) = object.as_object_mut() {
            o.remove("status");
        }
        out.push((file.to_string(), object));
    }
    Ok(out)
}

/// Every container of every pod spec in `obj`.
pub(crate) fn containers_mut(obj: &mut Value) -> Vec<&mut Value> {
    fn walk<'a>(v: &'a mut Value, out: &mut Vec<&'a mut Value>) {
        match v {
            Value::Object(map) => {
                for (k, child) in map.iter_mut() {
                    if (k == "containers" || k == "initContainers") && child.is_array() {
                        out.extend(child.as_array_mut().into_iter().flatten());
                    } else {
                        walk(child, out);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(obj, &mut out);
    out
}

/// The variants of one workload: as recorded, over the GPU and memory limits, from another
/// registry, with a tenant's Kueue labels, and with `NVIDIA_VISIBLE_DEVICES=all` in every
/// container.
fn variants(obj: &Value) -> Vec<(&'static str, Value)> {
    let mut over = obj.clone();
    for c in containers_mut(&mut over) {
        c["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
        c["resources"]["limits"]["memory"] = json!("13Gi");
    }
    if let Some(trainer) = over.pointer_mut("/spec/trainer") {
        trainer["numNodes"] = json!(8);
    }
    let mut elsewhere = obj.clone();
    for c in containers_mut(&mut elsewhere) {
        c["image"] = json!("evil.example/miner:1");
    }
    let mut kueue = obj.clone();
    kueue["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("team-b");
    kueue["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = json!("999999");
    let mut all = obj.clone();
    for c in containers_mut(&mut all) {
        let mut env = c["env"].as_array().cloned().unwrap_or_default();
        env.push(json!({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}));
        c["env"] = Value::Array(env);
    }
    vec![
        ("as recorded", obj.clone()),
        ("over the limits", over),
        ("another registry", elsewhere),
        ("a tenant's Kueue labels", kueue),
        ("NVIDIA_VISIBLE_DEVICES=all", all),
    ]
}

type Outcome = Result<Value, kube::core::Status>;

/// How the webhook's and the native policies' outcomes for `obj` differ, if they do.
fn difference(obj: &Value, by_webhook: Outcome, by_native: Outcome) -> Option<String> {
    let trainjob = obj["kind"] == "TrainJob";
    match (by_webhook, by_native) {
        (_, Ok(native)) if trainjob => {
            let label = "/metadata/labels/launchgate.io~1mutations";
            (native.pointer(label).is_some()
                || native["metadata"]["labels"] != obj["metadata"]["labels"])
                .then(|| "the native policies touched a TrainJob".to_string())
        }
        (Ok(w), Ok(n)) => {
            let (w, n) = (comparable(&w), comparable(&n));
            (w != n).then(|| format!("admitted differently\n webhook: {w}\n  native: {n}"))
        }
        (Err(w), Err(n)) => {
            let (lw, ln) = (limits_named(&w.message), limits_named(&n.message));
            let links = (rule_links(&w.message), rule_links(&n.message));
            (w.code != n.code || lw != ln || lw.is_empty() || links.0 != links.1).then(|| {
                format!(
                    "denied differently\n webhook: {} {}\n  native: {} {}",
                    w.code, w.message, n.code, n.message
                )
            })
        }
        (Ok(_), Err(n)) => Some(format!("only the native policies deny: {}", n.message)),
        (Err(w), Ok(_)) => Some(format!("only the webhook denies: {}", w.message)),
    }
}

/// How many times (1 s apart) a case is judged until both sides agree, before its difference
/// counts: the API server compiles a policy's expressions for each resource the first time it
/// admits one, which on a loaded machine takes seconds for the larger walks — and, with the whole
/// suite running beside it (every queue's limits policy also carrying the exemption-mark check),
/// more than 30 s for some of the suite config's policies.
const SETTLE_TRIES: usize = 90;

/// How many times each case is judged once both sides have taken effect (CEL that depends on
/// something undefined, such as map order, shows as a difference between repetitions).
const REPEATS: usize = 10;

/// How many dry-run creates are in flight at once.
const IN_FLIGHT: usize = 8;

/// The webhook alone and the compiled policies alone, each in its own namespace, judge every
/// recorded workload of every kind in every queue of every config the tests use (as recorded,
/// over the limits, from another registry), each case [`REPEATS`] times: the stored objects are
/// equal and the denials name the same limits, every time. The webhook runs the equivalent
/// config (`compile-native --equivalent-config`); what that leaves out is what the report
/// lists. A TrainJob is the webhook's only: the native policies leave it alone.
pub async fn native_policies_decide_as_the_webhook_does(ctx: &Ctx) -> Result<()> {
    let policy = Policy::from_yaml(&suite_config()?).map_err(|e| anyhow::anyhow!("{e}"))?;
    let compiled = launchgate::native::compile(&policy, &Default::default());
    ensure!(
        compiled
            .report
            .webhook_only
            .iter()
            .any(|g| g.what == "TrainJob"),
        "the report does not say TrainJobs stay in the webhook"
    );
    let workloads = recorded_workloads()?;
    let (judged, configs) = differential(ctx, "differential", |_, sides| {
        let mut cases = Vec::new();
        for (file, object) in &workloads {
            for queue in sides.policy.queues.values() {
                for (variant, mut obj) in variants(object) {
                    obj["metadata"]["labels"]["launchgate.io/queue"] = json!(queue.name);
                    cases.push((format!("{file} in queue {}, {variant}", queue.key), obj));
                }
            }
        }
        cases
    })
    .await?;
    println!(
        "e2e: differential: {judged} cases of {configs} configs, each judged {} times alike",
        REPEATS + 1
    );
    Ok(())
}

/// How many generated workloads each config of the suite judges.
const GENERATED_PER_CONFIG: usize = 32;

/// The differential of [`native_policies_decide_as_the_webhook_does`] on generated workloads of
/// every kind (`common::generated`: Pods, Jobs, Volcano Jobs, PyTorchJobs, JobSets, TrainJobs,
/// RayJobs, RayClusters and MPIJobs, sized and labelled around the limits), a fixed sample per
/// config spread over its queues: identical decisions and objects, every time. Every kind of
/// launchgate's registry is among them.
pub async fn native_policies_decide_as_the_webhook_does_on_generated_workloads(
    ctx: &Ctx,
) -> Result<()> {
    let mut kinds = BTreeSet::new();
    let (judged, configs) = differential(ctx, "generated", |n, sides| {
        let queues: Vec<String> = sides
            .policy
            .queues
            .values()
            .map(|q| q.name.clone())
            .collect();
        let seed = u8::try_from(n % 256).unwrap_or_default();
        crate::common::generated::sample(GENERATED_PER_CONFIG, seed, &queues)
            .into_iter()
            .map(|w| {
                kinds.insert((
                    w["apiVersion"].as_str().unwrap_or_default().to_string(),
                    w["kind"].as_str().unwrap_or_default().to_string(),
                ));
                let name = w["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                (format!("generated {name}"), w)
            })
            .collect()
    })
    .await?;
    ensure!(judged >= 500, "only {judged} generated cases judged");
    for listed in launchgate::audit::listed_kinds() {
        let api_version = match listed.group {
            "" => listed.version.to_string(),
            group => format!("{group}/{}", listed.version),
        };
        ensure!(
            kinds.contains(&(api_version.clone(), listed.kind.to_string())),
            "no generated {} ({api_version}) was judged",
            listed.kind
        );
    }
    println!(
        "e2e: differential: {judged} generated workloads ({}) of {configs} configs, each judged {} times alike",
        kinds
            .into_iter()
            .map(|(_, kind)| kind)
            .collect::<Vec<_>>()
            .join(", "),
        REPEATS + 1
    );
    Ok(())
}

/// Runs every config the tests use on both sides (the webhook alone in one namespace, the
/// compiled policies alone in another) and judges the cases `cases_for(config index, sides)`
/// gives, each settled and then [`REPEATS`] more times ([`judge_cases`]); the cases of a
/// config that differ are judged again on a fresh install. Fails with every difference both
/// installs show; returns how many cases and configs were judged.
async fn differential(
    ctx: &Ctx,
    id: &str,
    mut cases_for: impl FnMut(usize, &Sides) -> Vec<(String, Value)>,
) -> Result<(usize, usize)> {
    let mut differences = Vec::new();
    let mut judged = 0;
    let mut configs = 0;
    for (n, (what, config)) in test_configs()?.into_iter().enumerate() {
        configs += 1;
        let sides = Sides::start(ctx, &config, &format!("{id}{n}")).await?;
        let cases = cases_for(n, &sides);
        let (cases, found) = judge_cases(ctx, sides, cases)
            .await
            .with_context(|| what.clone())?;
        judged += cases;
        if found.is_empty() {
            continue;
        }
        // Under the whole suite's load the API server has been seen not to apply a freshly
        // created policy to one kind for minutes: a difference counts only if a second, fresh
        // install (new namespaces, new policy objects) shows it too. The first is printed.
        let differing: Vec<&String> = found.iter().map(|(case, _)| case).collect();
        eprintln!(
            "e2e: {what}: {} of {cases} cases differ on the first install, judged again on a fresh one:\n{}",
            found.len(),
            found
                .iter()
                .map(|(case, d)| format!("{case}: {d}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let sides = Sides::start(ctx, &config, &format!("{id}{n}r")).await?;
        let again: Vec<(String, Value)> = cases_for(n, &sides)
            .into_iter()
            .filter(|(case, _)| differing.contains(&case))
            .collect();
        let (_, found) = judge_cases(ctx, sides, again)
            .await
            .with_context(|| what.clone())?;
        differences.extend(
            found
                .into_iter()
                .map(|(case, d)| format!("{what}: {case}: {d}")),
        );
    }
    ensure!(
        configs > 10 && judged > 500,
        "only {judged} cases of {configs} configs judged"
    );
    if !differences.is_empty() {
        bail!(
            "{} of {judged} cases differ:\n{}",
            differences.len(),
            differences.join("\n")
        );
    }
    Ok((judged, configs))
}

/// Installs `sides` and judges `cases` on them, each settled and then [`REPEATS`] more times,
/// then cleans the sides up: how many cases were judged, and each that differs (its name, the
/// difference).
async fn judge_cases(
    ctx: &Ctx,
    mut sides: Sides,
    cases: Vec<(String, Value)>,
) -> Result<(usize, Vec<(String, String)>)> {
    use futures_util::StreamExt as _;
    let result = async {
        sides.install(ctx).await?;
        let sides = &sides;
        let found: Vec<Result<Option<(String, String)>>> = futures_util::stream::iter(cases)
            .map(|(case, obj)| async move {
                // The API server loads new policies and bindings a moment after they are
                // created, resource by resource: wait that out, then every repetition counts.
                if let Some(d) = sides.settled_difference(ctx, &obj).await? {
                    return Ok(Some((case, d)));
                }
                for attempt in 0..REPEATS {
                    let (by_webhook, by_native) = sides.judge(ctx, &obj).await?;
                    if let Some(d) = difference(&obj, by_webhook, by_native) {
                        return Ok(Some((case, format!("repetition {attempt}: {d}"))));
                    }
                }
                Ok(None)
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        let mut out = (0, Vec::new());
        for f in found {
            out.0 += 1;
            if let Some(d) = f? {
                out.1.push(d);
            }
        }
        Ok::<_, anyhow::Error>(out)
    }
    .await;
    sides.clean_up(ctx).await;
    result
}

/// Hybrid mode: native policies for the limits and the static mutations, the webhook (failure
/// policy Ignore) for the rest. With the webhook process stopped, an over-limit Job is still
/// denied and a new launch Job still gets its securityContext and Job defaults.
pub async fn hybrid_mode_enforces_while_the_webhook_is_down(ctx: &Ctx) -> Result<()> {
    let text = suite_config()?;
    let policy = Policy::from_yaml(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let compiled = launchgate::native::compile(&policy, &Default::default());
    let tag = format!("hybrid-{}", &ctx.ns[ctx.ns.len() - 4..]);
    let ns = namespace(ctx, "native-hybrid", &tag).await?;
    let dir = tempfile::tempdir()?;
    let mut webhook = Launchgate::start_with(dir.path(), None, "127.0.0.1", &text, &[]).await?;
    let mut installed = Vec::new();
    let result = async {
        // The native policies first: a Job and a Pod get their queue label from them alone.
        installed = install_native(&ctx.client, &compiled.objects, &tag).await?;
        let pod = ctx.launch_pod("probe");
        let mut job = manifest("job-demo.yaml");
        job["metadata"]["name"] = json!("probe");
        let labelled = |v: &Value| v.pointer("/metadata/labels/launchgate.io~1queue").is_some();
        ctx.wait_for(
            "the native policies to take effect",
            Duration::from_secs(120),
            || async {
                let p = create_in(&ctx.client, &ns.ns, &pod, true).await?;
                let j = create_in(&ctx.client, &ns.ns, &job, true).await?;
                Ok(p.is_ok_and(|p| labelled(&p)) && j.is_ok_and(|j| labelled(&j)))
            },
        )
        .await?;
        webhook
            .register_with(
                &ctx.client,
                &tag,
                &[json!({"key": SELECT_LABEL, "operator": "In", "values": [tag]})],
                Some("Ignore"),
            )
            .await?;
        ctx.wait_for(
            "the webhook to take effect",
            Duration::from_secs(120),
            || async {
                let made = create_in(&ctx.client, &ns.ns, &pod, true).await?;
                Ok(made.is_ok_and(|p| crate::ctx::mutations(&p).is_some()))
            },
        )
        .await?;
        ensure!(webhook.stop().is_some(), "the webhook process did not stop");

        let mut over = manifest("job-demo.yaml");
        over["metadata"]["name"] = json!("over-the-limit");
        for c in containers_mut(&mut over) {
            c["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
        }
        match create_in(&ctx.client, &ns.ns, &over, false).await? {
            Ok(_) => bail!("an over-limit Job was admitted while the webhook was down"),
            Err(e) => ensure!(
                e.code == 403 && e.message.contains("exceeds maximum 4 (variable \"gpus\")"),
                "unexpected denial: {} {}",
                e.code,
                e.message
            ),
        }

        let mut job = manifest("job-demo.yaml");
        job["metadata"]["name"] = json!("while-the-webhook-is-down");
        let stored = match create_in(&ctx.client, &ns.ns, &job, false).await? {
            Ok(stored) => stored,
            Err(e) => bail!(
                "a launch Job was refused while the webhook was down: {}",
                e.message
            ),
        };
        ensure!(
            crate::ctx::mutations(&stored).is_none(),
            "the webhook answered although it was stopped"
        );
        ensure!(
            stored["spec"]["backoffLimit"] == 0 && stored["spec"]["ttlSecondsAfterFinished"] == 60,
            "no Job defaults: {}",
            stored["spec"]
        );
        for c in stored["spec"]["template"]["spec"]["containers"]
            .as_array()
            .context("containers")?
        {
            let sc = &c["securityContext"];
            ensure!(
                sc["allowPrivilegeEscalation"] == false
                    && sc["capabilities"]["drop"] == json!(["ALL"])
                    && sc["seccompProfile"]["type"] == "RuntimeDefault",
                "container not hardened: {c}"
            );
        }
        Ok(())
    }
    .await;
    clean_up(ctx, webhook, installed, &[&ns]).await;
    result
}

/// `policyMode: native`: an UPDATE that brings a Job into a queue is judged by the compiled
/// policies as a CREATE, as the webhook judges it (`updates::a_relabelled_job_is_judged_as_a_create`).
/// In a namespace only the capped queue's compiled objects see (totals 16, 4 GPUs a
/// container, the Kueue LocalQueue `team-a`): a 16 × 4-GPU Job created outside any queue, and
/// the same Job created in another queue, then labelled into the capped queue, are refused
/// naming the totals; a Job within the limits relabelled is stored with the queue's Kueue label
/// written by the mutating policy; a Job already in the queue (over its cap, stored before the
/// policies) passes Kueue's admission UPDATE and a tenant's label change — an UPDATE within the
/// queue is the webhook's to compare, as the report says.
pub async fn a_relabelled_job_is_judged_as_a_create_natively(ctx: &Ctx) -> Result<()> {
    use crate::updates::{
        CAPPED_QUEUE, KUEUE, capped_config, launch_labels, message, outside_job, service_account,
        update_as,
    };
    let policy = Policy::from_yaml(&capped_config()?).map_err(|e| anyhow::anyhow!("{e}"))?;
    let compiled = launchgate::native::compile(&policy, &Default::default());
    let tag = format!("relabel-{}", &ctx.ns[ctx.ns.len() - 4..]);
    let ns = namespace(ctx, "native-relabel", &tag).await?;
    // Only the capped queue's objects (as `updates::native_policies_refuse_a_mark_they_cannot_prove`).
    let capped: Vec<Value> = compiled
        .objects
        .iter()
        .filter(|o| {
            o["metadata"]["annotations"][launchgate::native::QUEUE_KEY_ANNOTATION] == CAPPED_QUEUE
        })
        .cloned()
        .collect();
    let mut installed = Vec::new();
    let result = async {
        ensure!(
            capped.iter().any(|o| o["kind"] == "ValidatingAdmissionPolicy"
                && o["spec"]["matchConstraints"]["resourceRules"][0]["operations"]
                    == json!(["CREATE", "UPDATE"])),
            "the capped queue's limits policy does not judge UPDATEs"
        );
        let with_deadline = |mut job: Value| {
            job["spec"]["activeDeadlineSeconds"] = json!(3600);
            job
        };
        let create = |job: Value| {
            let ns = &ns;
            async move {
                create_in(&ctx.client, &ns.ns, &job, false)
                    .await?
                    .map_err(|s| anyhow::anyhow!("creating {}: {}", job["metadata"]["name"], s.message))
            }
        };
        // Stored before the policies: a Job already in the queue, over its 4-GPU cap.
        let mut admitted = with_deadline(outside_job("admitted", 1, 8));
        admitted["metadata"]["labels"] = launch_labels();
        admitted["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("team-a");
        let admitted = create(admitted).await?;
        installed = install_native(&ctx.client, &capped, &tag).await?;
        let mut wide_in = with_deadline(outside_job("probe", 16, 4));
        wide_in["metadata"]["labels"] = launch_labels();
        let mut fits = with_deadline(outside_job("probe", 1, 1));
        fits["metadata"]["labels"] = launch_labels();
        let kueue_label =
            |v: &Value| v.pointer("/metadata/labels/kueue.x-k8s.io~1queue-name").cloned();
        // The API server loads new policies a moment after they are created, resource by
        // resource; under load a mutating one has taken minutes.
        ctx.wait_for(
            "the native policies to take effect",
            Duration::from_secs(300),
            || async {
                let made = create_in(&ctx.client, &ns.ns, &fits, true).await?;
                let refused = create_in(&ctx.client, &ns.ns, &wide_in, true).await?;
                Ok(made.is_ok_and(|j| kueue_label(&j) == Some(json!("team-a")))
                    && matches!(&refused, Err(s) if s.code == 403))
            },
        )
        .await?;

        let totals = "exceeds maximum 16 (totals)";
        // Created outside any queue, and in another queue (whose policies do not act here).
        let mut elsewhere = with_deadline(outside_job("elsewhere", 16, 4));
        elsewhere["metadata"]["labels"] =
            json!({"wandb.ai/monitor": "true", "launchgate.io/queue": "gpu-queue"});
        for job in [with_deadline(outside_job("outside", 16, 4)), elsewhere] {
            let stored = create(job).await?;
            let name = stored["metadata"]["name"].clone();
            let (status, body) = update_as(&ns, &stored, None, |job| {
                job["metadata"]["labels"] = launch_labels();
            })
            .await?;
            ensure!(status == 403, "{name} relabelled into the queue: {status} {body}");
            let text = message(&body);
            ensure!(
                text.contains("total nvidia.com/gpu over all pods=") && text.contains(totals),
                "{name}: {text:?} does not name the totals"
            );
        }
        // Within the limits: stored, the queue's Kueue label written on the UPDATE.
        let clean = create(with_deadline(outside_job("clean", 1, 1))).await?;
        let (status, body) = update_as(&ns, &clean, None, |job| {
            job["metadata"]["labels"] = launch_labels();
        })
        .await?;
        ensure!(status == 200, "a Job within the limits relabelled: {status} {body}");
        ensure!(
            kueue_label(&body) == Some(json!("team-a")),
            "no Kueue label written: {}",
            body["metadata"]
        );
        ensure!(
            body["spec"]["template"] == clean["spec"]["template"],
            "an UPDATE rewrote the pod template: {}",
            body["spec"]["template"]
        );
        // Already in the queue: Kueue's admission, and a tenant's label change, pass.
        ns.grant(
            "kueue",
            json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "update"]}]),
            json!([service_account(KUEUE)]),
            &crate::ctx::rbac_probe_job(),
            &[(KUEUE, &[])],
        )
        .await?;
        let (status, body) = update_as(&ns, &admitted, Some((KUEUE, &[])), |job| {
            job["spec"]["suspend"] = json!(false);
            job["spec"]["template"]["spec"]["nodeSelector"] =
                json!({"cloud.example.com/gpu": "a100"});
        })
        .await?;
        ensure!(status == 200, "Kueue's admission UPDATE: {status} {body}");
        let (status, body) = update_as(&ns, &admitted, None, |job| {
            job["metadata"]["labels"]["note"] = json!("x");
        })
        .await?;
        ensure!(status == 200, "a tenant's label change in the queue: {status} {body}");
        Ok(())
    }
    .await;
    for (resource, name) in installed {
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        let _ = api.delete(&name, &Default::default()).await;
    }
    ns.cleanup().await;
    result
}

/// The names of the native objects of `set` of `kind` in the cluster.
async fn set_names(client: &kube::Client, kind: &str, set: &str) -> Result<BTreeSet<String>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &admission_resource(kind));
    let list = api
        .list_metadata(
            &kube::api::ListParams::default().labels(&format!("launchgate.io/policy-set={set}")),
        )
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|i| i.metadata.name)
        .collect())
}

/// `serve --native-policies=<set>` outside the chart: an admin creates the set's slots once
/// (`compile-native --dormant-slots`), the server writes the config's queues into them, makes a
/// removed queue's slot dormant again (deleting nothing), and `delete-webhooks
/// --native-policies=<set>` (the chart's uninstall hook) removes them all.
pub async fn the_server_keeps_native_policies_in_step_with_its_config(ctx: &Ctx) -> Result<()> {
    use crate::native_rbac::{config, dormant_slots, install, owners, slot_queues, uninstall};
    let set = format!("e2e-{}", &ctx.ns[ctx.ns.len() - 4..]);
    let created = install(ctx, &dormant_slots(&set, 2)?).await;
    let dir = tempfile::tempdir()?;
    let mut server: Option<Launchgate> = None;
    let result = async {
        created.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let started = Launchgate::start_with(
            dir.path(),
            Some(&ctx.env.kubeconfig),
            "127.0.0.1",
            &config(&["gpu-queue", "extra-queue"])?,
            // Bound to this test's namespace only: unbound, the set's mutations would label
            // other tests' workloads with this config's default queue while it runs.
            &[
                format!("--native-policies={set}"),
                "--native-policy-slots=2".into(),
                format!(
                    "--native-namespace-selector={}",
                    json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                        "operator": "In", "values": [ctx.ns]}]})
                ),
            ],
        )
        .await?;
        server = Some(started);
        // Ready only once the set holds the config: slots in key order.
        let (held, _) = owners(ctx, &set, 2).await?;
        ensure!(
            slot_queues(&held, &set)?
                == [
                    Some("extra-queue".to_string()),
                    Some("gpu-queue".to_string())
                ],
            "{held:?}"
        );
        // The config without the extra queue: its slot is dormant again, nothing deleted.
        std::fs::write(
            dir.path().join("launchgate-config.yaml"),
            config(&["gpu-queue"])?,
        )?;
        ctx.wait_for(
            "the removed queue's slot to be dormant",
            Duration::from_secs(60),
            || async {
                let (held, _) = owners(ctx, &set, 2).await?;
                Ok(slot_queues(&held, &set)? == [None, Some("gpu-queue".to_string())])
            },
        )
        .await?;
        for kind in ["MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"] {
            let names = set_names(&ctx.client, kind, &set).await?;
            ensure!(names.len() == 2, "{kind}s of the set: {names:?}");
            let api: Api<DynamicObject> =
                Api::all_with(ctx.client.clone(), &admission_resource(kind));
            let suffix = launchgate::native::SlotKind::of(kind)
                .context("slot kind")?
                .suffix;
            let slot0 = serde_json::to_value(api.get(&format!("{set}-q0-{suffix}")).await?)?;
            ensure!(
                slot0["spec"]["matchConditions"]
                    == json!([{"name": "dormant", "expression": "false"}]),
                "slot 0's {kind} is not dormant: {}",
                slot0["spec"]
            );
        }
        // Uninstall.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_launchgate"))
            .args(["delete-webhooks", "--native-policies", &set])
            .env("KUBECONFIG", &ctx.env.kubeconfig)
            .output()?;
        ensure!(
            out.status.success(),
            "delete-webhooks: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(server) = server.as_mut() {
            server.stop();
        }
        for kind in [
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ] {
            let left = set_names(&ctx.client, kind, &set).await?;
            ensure!(left.is_empty(), "{kind}s left after uninstall: {left:?}");
        }
        Ok(())
    }
    .await;
    if let Some(mut server) = server {
        server.stop();
    }
    if let Ok(created) = &created {
        uninstall(ctx, created).await;
    }
    result
}

/// Which series of a metric count: a test on its labels.
type Selector<'a> = Box<dyn Fn(&str) -> bool + 'a>;

/// The API server's measurement of what admission costs with the webhook and with the native
/// policies of the same (built-in example) policy: the same launch Job created by dry run 300
/// times into a namespace only the webhook sees and 300 times into one only the native
/// policies see, interleaved. Reports the API server's duration histograms per webhook and per
/// policy (read from its `/metrics`) and what the client waited; asserts that every create was
/// admitted and that the API server counted each of them. Run it alone for figures that are
/// not shared with other tests, as docs/native-policies.md ("Cost, measured by the API server")
/// says: `cargo test --test e2e -- native::admission_cost_webhook_vs_native --exact`.
pub async fn admission_cost_webhook_vs_native(ctx: &Ctx) -> Result<()> {
    const CREATES: usize = 300;
    let text = launchgate::policy::DEFAULT_CONFIG_YAML;
    let policy = Policy::from_yaml(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let compiled = launchgate::native::compile(&policy, &Default::default());
    let id = &ctx.ns[ctx.ns.len() - 4..];
    let tag = format!("cost-{id}");
    let prefix = format!("cost-{id}");
    let webhook_ns = namespace(ctx, "native-cost-webhook", &format!("{tag}-webhook")).await?;
    let native_ns = namespace(ctx, "native-cost-native", &format!("{tag}-native")).await?;
    let dir = tempfile::tempdir()?;
    let mut webhook = Launchgate::start_with(dir.path(), None, "127.0.0.1", text, &[]).await?;
    let mut installed = Vec::new();
    let result = async {
        webhook
            .register_named(
                &ctx.client,
                &format!("{tag}-webhook"),
                &[json!({"key": SELECT_LABEL, "operator": "In", "values": [format!("{tag}-webhook")]})],
                None,
                Some(&prefix),
            )
            .await?;
        installed = install_native(&ctx.client, &compiled.objects, &format!("{tag}-native")).await?;
        let mut job = manifest("job-demo.yaml");
        job["metadata"]["name"] = json!("cost");
        let hardened = |v: &Value| {
            v.pointer("/spec/template/spec/containers/0/securityContext/allowPrivilegeEscalation")
                == Some(&json!(false))
        };
        for ns in [&webhook_ns.ns, &native_ns.ns] {
            ctx.wait_for("the policy to take effect", Duration::from_secs(120), || async {
                Ok(create_in(&ctx.client, ns, &job, true).await?.is_ok_and(|j| hardened(&j)))
            })
            .await?;
        }
        // Warm both paths (connections, CEL caches) before the first reading.
        for _ in 0..20 {
            create_in(&ctx.client, &webhook_ns.ns, &job, true).await?.ok();
            create_in(&ctx.client, &native_ns.ns, &job, true).await?.ok();
        }
        // Blocks of creates, alternating between the two namespaces so that the machine's
        // load hits both alike; the API server's histograms are read around each block.
        const BLOCK: usize = 50;
        let step = "apiserver_admission_step_admission_duration_seconds";
        let step_of = |kind: &'static str| {
            move |l: &str| {
                l.contains("operation=\"CREATE\"") && l.contains(&format!("type=\"{kind}\""))
            }
        };
        let webhook_metric = "apiserver_admission_webhook_admission_duration_seconds";
        let hook_of = |hook: &str| format!("name=\"{prefix}-{hook}.launchgate.io\"");
        let (mutate_hook, validate_hook) = (hook_of("mutate"), hook_of("validate"));
        let policy_label = format!("-{tag}-native\"");
        // Every histogram the API server keeps per admission policy, for this test's policies
        // (they all have series once the warm-up's creates were judged).
        let warm = apiserver_metrics::scrape(&ctx.client).await?;
        let families: BTreeSet<String> = warm
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(&policy_label))
            .filter_map(|l| l.split_once("_count{").map(|(name, _)| name.to_string()))
            .filter(|name| name.ends_with("_seconds"))
            .collect();
        ensure!(!families.is_empty(), "the API server reports no duration per admission policy");
        let mut measured: std::collections::BTreeMap<(usize, String), apiserver_metrics::Histogram> =
            Default::default();
        let mut waits = [Vec::new(), Vec::new()];
        for round in 0..CREATES / BLOCK {
            for turn in 0..2 {
                // Which goes first alternates from round to round.
                let side = (turn + round) % 2;
                let ns = [&webhook_ns.ns, &native_ns.ns][side];
                let before = apiserver_metrics::scrape(&ctx.client).await?;
                for _ in 0..BLOCK {
                    let start = std::time::Instant::now();
                    let made = create_in(&ctx.client, ns, &job, true).await?;
                    waits[side].push(start.elapsed().as_secs_f64() * 1000.0);
                    match made {
                        Ok(made) => ensure!(hardened(&made), "not mutated in {ns}: {made}"),
                        Err(e) => bail!("refused in {ns}: {}", e.message),
                    }
                }
                let after = apiserver_metrics::scrape(&ctx.client).await?;
                let mut series: Vec<(String, String, Selector)> = vec![
                    ("admit step".into(), step.into(), Box::new(step_of("admit"))),
                    ("validate step".into(), step.into(), Box::new(step_of("validate"))),
                    ("webhook mutate".into(), webhook_metric.into(), Box::new(|l: &str| l.contains(&mutate_hook))),
                    ("webhook validate".into(), webhook_metric.into(), Box::new(|l: &str| l.contains(&validate_hook))),
                ];
                for family in &families {
                    series.push((family.clone(), family.clone(), Box::new(|l: &str| l.contains(&policy_label))));
                }
                for (what, metric, select) in series {
                    let h = apiserver_metrics::Histogram::read(&after, &metric, &select)
                        .since(&apiserver_metrics::Histogram::read(&before, &metric, &select));
                    let total = measured.entry((side, what)).or_default();
                    total.count += h.count;
                    total.sum += h.sum;
                }
            }
        }
        for hook in ["webhook mutate", "webhook validate"] {
            let calls = measured.get(&(0, hook.to_string())).map_or(0.0, |h| h.count);
            ensure!(
                calls as usize == CREATES,
                "the API server counted {calls} calls of {hook}, not {CREATES}"
            );
        }
        let mut lines = Vec::new();
        let admission = |side: usize| {
            ["admit step", "validate step"]
                .iter()
                .filter_map(|what| measured.get(&(side, what.to_string())))
                .map(|h| h.sum * 1000.0 / CREATES as f64)
                .sum::<f64>()
        };
        lines.push(format!(
            "native / webhook: {:.2}× the webhook's admission time per create",
            admission(1) / admission(0)
        ));
        for (side, name) in [(0, "webhook"), (1, "native")] {
            let per_create = |what: &str| {
                measured
                    .get(&(side, what.to_string()))
                    .map_or(0.0, |h| h.sum * 1000.0 / CREATES as f64)
            };
            let (admit, validate) = (per_create("admit step"), per_create("validate step"));
            lines.push(format!(
                "{name}: admission {:.3} ms per create (admit step {admit:.3} ms, validate step {validate:.3} ms)",
                admit + validate
            ));
            for ((s, what), h) in &measured {
                if *s == side && !what.ends_with(" step") && h.count > 0.0 {
                    lines.push(format!(
                        "{name}: {what}: {} calls, mean {:.3} ms, {:.3} ms per create",
                        h.count,
                        h.mean_ms(),
                        h.sum * 1000.0 / CREATES as f64
                    ));
                }
            }
            let waits = &mut waits[side];
            waits.sort_by(f64::total_cmp);
            let mean = waits.iter().sum::<f64>() / waits.len() as f64;
            let at = |q: f64| waits[((q * waits.len() as f64) as usize).min(waits.len() - 1)];
            lines.push(format!(
                "{name}: client waited mean {mean:.2} ms, p50 {:.2} ms, p99 {:.2} ms",
                at(0.5),
                at(0.99)
            ));
        }
        for line in lines {
            println!("e2e: admission cost, {CREATES} dry-run creates of a launch Job: {line}");
        }
        Ok(())
    }
    .await;
    clean_up(ctx, webhook, installed, &[&webhook_ns, &native_ns]).await;
    result
}
