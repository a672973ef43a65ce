//! Native policies with least privilege, failing loudly, on the real API server. The chart is
//! rendered (`scripts/helm_check.py`, the real Helm library) and what it gives the pods — its
//! Roles, ClusterRoles and bindings, and the dormant native policy slots — is created as Helm
//! would; the pods' service account is then a test identity that gets 403 creating any
//! admission policy (a MutatingAdmissionPolicy that would make pods privileged among them),
//! deleting or listing one, and touching another product's, while `launchgate serve` running
//! as that identity (impersonated through its kubeconfig) keeps its queues in the pre-created
//! slots. A config with more queues than slots is refused: not ready, the metric, the Event,
//! nothing written; a renamed queue takes its predecessor's slot, which no longer judges.

use crate::ctx::{Ctx, manifest};
use crate::native::{containers_mut, create_in};
use crate::webhook::Launchgate;
use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const ADMISSION: &str = "/apis/admissionregistration.k8s.io/v1";

/// The resource of an object the chart renders that a test creates: RBAC and admission
/// policies.
fn resource(kind: &str) -> Result<(ApiResource, bool)> {
    let (group, namespaced) = match kind {
        "ClusterRole" | "ClusterRoleBinding" => ("rbac.authorization.k8s.io", false),
        "Role" | "RoleBinding" => ("rbac.authorization.k8s.io", true),
        _ if launchgate::native::SlotKind::of(kind).is_some() => {
            ("admissionregistration.k8s.io", false)
        }
        other => bail!("no resource for {other}"),
    };
    let plural = match kind.to_lowercase().strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{}s", kind.to_lowercase()),
    };
    Ok((
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), &plural),
        namespaced,
    ))
}

/// The chart rendered by the real Helm library as release `release` in `namespace` with
/// `values`: every object.
pub(crate) fn render_chart(release: &str, namespace: &str, values: &Value) -> Result<Vec<Value>> {
    let out = std::process::Command::new("python3")
        .arg(crate::common::root().join("scripts/helm_check.py"))
        .args(["render", "--release", release, "--namespace", namespace])
        .args(["--set-json", &values.to_string()])
        .current_dir(crate::common::root())
        .output()
        .context("python3 scripts/helm_check.py (needs `pip install helm-sdkpy`)")?;
    ensure!(
        out.status.success(),
        "rendering the chart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&String::from_utf8(out.stdout)?) {
        let value: Value = serde::Deserialize::deserialize(doc)?;
        if value.is_object() {
            objects.push(value);
        }
    }
    Ok(objects)
}

/// What the chart installs for its pods' rights and its native policy slots: its Roles,
/// ClusterRoles and their bindings, and the slot objects, created as the admin (Helm). The
/// cluster-scoped ones, to delete afterwards.
pub(crate) async fn install(ctx: &Ctx, objects: &[Value]) -> Result<Vec<(ApiResource, String)>> {
    let mut cluster_scoped = Vec::new();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let Ok((resource, namespaced)) = resource(kind) else {
            continue;
        };
        // Hooks (the uninstall hook's rights) are created only when they run.
        if object["metadata"]["annotations"]["helm.sh/hook"].is_string() {
            continue;
        }
        let name = object["metadata"]["name"]
            .as_str()
            .context("a name")?
            .to_string();
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(ctx.client.clone(), &ctx.ns, &resource)
        } else {
            Api::all_with(ctx.client.clone(), &resource)
        };
        api.create(
            &PostParams::default(),
            &serde_json::from_value(object.clone())?,
        )
        .await
        .with_context(|| format!("creating {kind} {name}"))?;
        if !namespaced {
            cluster_scoped.push((resource, name));
        }
    }
    Ok(cluster_scoped)
}

pub(crate) async fn uninstall(ctx: &Ctx, created: &[(ApiResource, String)]) {
    for (resource, name) in created {
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), resource);
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

/// `method` on `path` as `user` (`Impersonate-User`; `None`: the suite's admin): the HTTP
/// status and the body.
async fn send_as(
    ctx: &Ctx,
    user: Option<&str>,
    method: http::Method,
    path: &str,
    body: Option<(&str, &Value)>,
) -> Result<(u16, Value)> {
    let mut request = http::Request::builder().method(method).uri(path);
    if let Some(user) = user {
        request = request.header("impersonate-user", user);
    }
    let bytes = match body {
        Some((content_type, value)) => {
            request = request.header("content-type", content_type);
            serde_json::to_vec(value)?
        }
        None => Vec::new(),
    };
    let response = ctx
        .client
        .send(request.body(bytes)?.map(kube::client::Body::from))
        .await?;
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await?
        .to_bytes();
    Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// The admission policy resource path of `kind` (`…/validatingadmissionpolicies`).
fn collection(kind: &str) -> Result<String> {
    Ok(format!("{ADMISSION}/{}", resource(kind)?.0.plural))
}

/// The object `name` of `kind`, read as the admin.
async fn read(ctx: &Ctx, kind: &str, name: &str) -> Result<Value> {
    let (status, object) = send_as(
        ctx,
        None,
        http::Method::GET,
        &format!("{}/{name}", collection(kind)?),
        None,
    )
    .await?;
    ensure!(status == 200, "reading {kind} {name}: {status} {object}");
    Ok(object)
}

/// The queue each object of the set `set` of `slots` slots is for (`None`: dormant), by
/// (kind, name), read as the admin; and every object's resourceVersion.
pub(crate) async fn owners(
    ctx: &Ctx,
    set: &str,
    slots: usize,
) -> Result<(BTreeMap<(String, String), Option<String>>, Vec<String>)> {
    let mut owners = BTreeMap::new();
    let mut versions = Vec::new();
    for (_, kind, name) in launchgate::native::slot_objects(set, slots) {
        let object = read(ctx, kind.kind, &name).await?;
        versions.push(
            object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        owners.insert(
            (kind.kind.to_string(), name),
            launchgate::native::owner(&object).map(str::to_string),
        );
    }
    Ok((owners, versions))
}

/// The queues of slot 0 and slot 1, each over its four objects: every object of a slot must be
/// for the same queue.
pub(crate) fn slot_queues(
    owners: &BTreeMap<(String, String), Option<String>>,
    set: &str,
) -> Result<Vec<Option<String>>> {
    let mut by_slot: BTreeMap<usize, Vec<Option<String>>> = BTreeMap::new();
    for ((_, name), owner) in owners {
        let slot = launchgate::native::slot_of(set, name).context("a slot name")?;
        by_slot.entry(slot).or_default().push(owner.clone());
    }
    by_slot
        .into_iter()
        .map(|(slot, owners)| {
            ensure!(
                owners.iter().all(|o| o == &owners[0]),
                "slot {slot}'s objects are for different queues: {owners:?}"
            );
            Ok(owners[0].clone())
        })
        .collect()
}

/// A copy of the suite's kubeconfig whose user acts as `user` (`as:`, what `kubectl --as`
/// does): a process using it is that identity to the API server and its RBAC.
pub(crate) fn kubeconfig_as(ctx: &Ctx, user: &str, dir: &Path) -> Result<PathBuf> {
    let mut config: Value = serde_yaml::from_str(&std::fs::read_to_string(&ctx.env.kubeconfig)?)?;
    for entry in config["users"].as_array_mut().context("kubeconfig users")? {
        entry["user"]["as"] = json!(user);
    }
    let path = dir.join("kubeconfig-as");
    std::fs::write(&path, serde_json::to_vec_pretty(&config)?)?;
    Ok(path)
}

/// The built-in example config with the queues `keys`, each its `gpu-queue` (gpus 0..4), the
/// first the default.
pub(crate) fn config(keys: &[&str]) -> Result<String> {
    let mut config: Value = serde_yaml::from_str(launchgate::policy::DEFAULT_CONFIG_YAML)?;
    let queue = config["queues"]["gpu-queue"].clone();
    config["queues"] = Value::Object(
        keys.iter()
            .map(|k| (k.to_string(), queue.clone()))
            .collect(),
    );
    config["defaultQueue"] = json!(keys[0]);
    Ok(serde_yaml::to_string(&config)?)
}

/// A launch Job of `queue` asking 8 GPUs a container (its queues allow 4).
fn over_the_limit(queue: &str, name: &str) -> Value {
    let mut job = manifest("job-demo.yaml");
    job["metadata"]["name"] = json!(name);
    job["metadata"]["labels"]["launchgate.io/queue"] = json!(queue);
    for c in containers_mut(&mut job) {
        c["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
    }
    job
}

/// Whether the native policies (alone in this namespace) deny `job` by its GPU limit.
async fn denied_natively(ctx: &Ctx, job: &Value) -> Result<bool> {
    Ok(match create_in(&ctx.client, &ctx.ns, job, true).await? {
        Ok(_) => false,
        Err(e) => {
            ensure!(
                e.code == 403 && e.message.contains("exceeds maximum 4"),
                "unexpected refusal: {} {}",
                e.code,
                e.message
            );
            true
        }
    })
}

/// The Events in this namespace with `reason` regarding the pod `pod`.
async fn events_about(ctx: &Ctx, pod: &str, reason: &str) -> Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Pod") && r.name.as_deref() == Some(pod)
                })
        })
        .collect())
}

/// The value of the `launchgate_native_policy_sync_failing` series of `reason`.
async fn failing(server: &Launchgate, reason: &str) -> Result<Option<String>> {
    let (_, text) = server.get("/metrics").await?;
    let series = format!("launchgate_native_policy_sync_failing{{reason=\"{reason}\"}} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(str::to_string))
}

/// The pods' service account, with the chart's rights as rendered: 403 on creating any
/// admission policy (a MutatingAdmissionPolicy that would make pods privileged, and its own
/// slot's name), on deleting, listing or patching its own slots and on touching another
/// product's policy; `get` and `update` of its own slots only. `serve` as that identity then
/// keeps its two queues in the two pre-created slots (and the policies enforce), refuses a
/// config of three queues (not ready, the metric, the Event, nothing written), and gives a
/// renamed queue its predecessor's slot, which no longer judges.
pub async fn the_pods_create_no_admission_policy_and_keep_their_queues_in_the_charts_slots(
    ctx: &Ctx,
) -> Result<()> {
    let id = &ctx.ns[ctx.ns.len() - 4..];
    let release = format!("launchgate-{id}");
    let user = format!("system:serviceaccount:{}:{release}", ctx.ns);
    let pod = format!("{release}-7d9c-x");
    let objects = render_chart(
        &release,
        &ctx.ns,
        &json!({"policyMode": "hybrid", "nativePolicySlots": 2, "clusterLookups": true,
                "events": {"enabled": true}}),
    )?;
    let foreign = format!("{release}-other-vendor");
    let created = install(ctx, &objects).await;
    let dir = tempfile::tempdir()?;
    let mut server: Option<Launchgate> = None;
    let result = async {
        let created = created.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        ensure!(
            created.iter().any(|(r, _)| r.kind == "ValidatingAdmissionPolicy"),
            "the chart created no slot"
        );
        let own = |kind: &str, slot: usize| {
            let suffix = launchgate::native::SlotKind::of(kind).unwrap().suffix;
            format!("{}/{release}-q{slot}-{suffix}", collection(kind).unwrap())
        };
        ctx.wait_for(
            "the chart's ClusterRoleBinding to take effect",
            Duration::from_secs(30),
            || async {
                let (status, body) = send_as(
                    ctx,
                    Some(&user),
                    http::Method::GET,
                    &own("ValidatingAdmissionPolicy", 0),
                    None,
                )
                .await?;
                ensure!(matches!(status, 200 | 403), "reading its slot: {status} {body}");
                Ok(status == 200)
            },
        )
        .await?;

        // No create: the attack (a policy that makes every pod privileged, bound nowhere so it
        // does nothing if this test fails), a binding, a slot's own name past the slots.
        let attack = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": format!("{release}-privileged")},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}]},
                "failurePolicy": "Ignore",
                "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                    "expression": "Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{name: c.name, securityContext: Object.spec.containers.securityContext{privileged: true}})}}"}}],
            },
        });
        let binding = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": format!("{release}-privileged")},
            "spec": {"policyName": format!("{release}-privileged")},
        });
        let mut past_the_slots = launchgate::native::dormant(
            &release,
            2,
            launchgate::native::SlotKind::of("ValidatingAdmissionPolicy").unwrap(),
            &format!("{release}-q2-limits"),
        );
        past_the_slots["metadata"]["labels"] = json!({});
        for object in [&attack, &binding, &past_the_slots] {
            let kind = object["kind"].as_str().unwrap();
            let (status, body) = send_as(
                ctx,
                Some(&user),
                http::Method::POST,
                &collection(kind)?,
                Some(("application/json", object)),
            )
            .await?;
            ensure!(
                status == 403,
                "creating {kind} {} as the pods: {status} {body}",
                object["metadata"]["name"]
            );
        }
        // No delete, no patch of its own slot; no list.
        let own_vap = own("ValidatingAdmissionPolicy", 0);
        let (status, body) = send_as(ctx, Some(&user), http::Method::DELETE, &own_vap, None).await?;
        ensure!(status == 403, "deleting its own slot: {status} {body}");
        let patch = json!({"metadata": {"labels": {"e2e.launchgate.io/patched": "yes"}}});
        let (status, body) = send_as(
            ctx,
            Some(&user),
            http::Method::PATCH,
            &own_vap,
            Some(("application/merge-patch+json", &patch)),
        )
        .await?;
        ensure!(status == 403, "patching its own slot: {status} {body}");
        for kind in ["ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"] {
            let (status, body) =
                send_as(ctx, Some(&user), http::Method::GET, &collection(kind)?, None).await?;
            ensure!(status == 403, "listing {kind}s: {status} {body}");
        }
        // Another product's policy: not readable, not writable, not deletable.
        let mut other = launchgate::native::dormant(
            &release,
            0,
            launchgate::native::SlotKind::of("ValidatingAdmissionPolicy").unwrap(),
            &foreign,
        );
        other["metadata"]["labels"] = json!({});
        let vaps = collection("ValidatingAdmissionPolicy")?;
        let (status, body) = send_as(
            ctx,
            None,
            http::Method::POST,
            &vaps,
            Some(("application/json", &other)),
        )
        .await?;
        ensure!(status == 201, "creating {foreign} as the admin: {status} {body}");
        let mut current = read(ctx, "ValidatingAdmissionPolicy", &foreign).await?;
        current["metadata"]["labels"]["e2e.launchgate.io/touched"] = json!("yes");
        for (method, body) in [
            (http::Method::GET, None),
            (http::Method::PUT, Some(("application/json", &current))),
            (http::Method::DELETE, None),
        ] {
            let (status, answer) =
                send_as(ctx, Some(&user), method.clone(), &format!("{vaps}/{foreign}"), body)
                    .await?;
            ensure!(status == 403, "{method} the foreign {foreign}: {status} {answer}");
        }

        // `serve` as the pods' service account: its two queues fill the two slots (in key
        // order), and the policies enforce in this namespace, which only they judge.
        let (before, _) = owners(ctx, &release, 2).await?;
        ensure!(
            before.values().all(Option::is_none),
            "the chart's slots are not dormant: {before:?}"
        );
        let kubeconfig = kubeconfig_as(ctx, &user, dir.path())?;
        // That kubeconfig is the pods' identity: it may not list admission policies.
        let as_pods = kube::Client::try_from(
            kube::Config::from_custom_kubeconfig(
                kube::config::Kubeconfig::read_from(&kubeconfig)?,
                &kube::config::KubeConfigOptions::default(),
            )
            .await?,
        )?;
        let vaps: Api<DynamicObject> =
            Api::all_with(as_pods, &resource("ValidatingAdmissionPolicy")?.0);
        match vaps.list_metadata(&ListParams::default()).await {
            Err(kube::Error::Api(e)) if e.code == 403 => {}
            other => bail!("the server's kubeconfig is not the pods' identity: {other:?}"),
        }
        let selector = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
            "operator": "In", "values": [ctx.ns]}]});
        let started = Launchgate::start_with(
            dir.path(),
            Some(&kubeconfig),
            "127.0.0.1",
            &config(&["gpu-queue", "extra-queue"])?,
            &[
                format!("--native-policies={release}"),
                "--native-policy-slots=2".into(),
                format!("--native-namespace-selector={selector}"),
                format!("--pod-namespace={}", ctx.ns),
                format!("--pod-name={pod}"),
            ],
        )
        .await?;
        let server = server.insert(started);
        let (held, versions) = owners(ctx, &release, 2).await?;
        ensure!(
            slot_queues(&held, &release)?
                == [Some("extra-queue".to_string()), Some("gpu-queue".to_string())],
            "the slots after the first sync: {held:?}"
        );
        ctx.wait_for(
            "both queues' native policies to deny over the limit",
            Duration::from_secs(60),
            || async {
                Ok(
                    denied_natively(ctx, &over_the_limit("extra-queue", "extra")).await?
                        && denied_natively(ctx, &over_the_limit("gpu-queue", "gpu")).await?,
                )
            },
        )
        .await?;

        // Three queues for two slots (`extra-queue` renamed, one added): refused, said three
        // ways, nothing written; the previous config keeps judging.
        std::fs::write(
            dir.path().join("launchgate-config.yaml"),
            config(&["gpu-queue", "other-queue", "third-queue"])?,
        )?;
        let server = &*server;
        let why = ctx
            .poll("/readyz to say why", Duration::from_secs(30), || async {
                let (status, body) = server.get("/readyz").await?;
                Ok((status == 503).then_some(body))
            })
            .await?;
        ensure!(
            why.contains("3 queues") && why.contains("2 native policy slots"),
            "/readyz: {why}"
        );
        ensure!(
            failing(server, "too_many_queues").await?.as_deref() == Some("1"),
            "launchgate_native_policy_sync_failing{{reason=\"too_many_queues\"}} is not 1"
        );
        ctx.wait_for("the Warning Event", Duration::from_secs(30), || async {
            let found = events_about(ctx, &pod, "NativePoliciesNotInStep").await?;
            Ok(found.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| n.contains("3 queues"))
            }))
        })
        .await?;
        let (after, after_versions) = owners(ctx, &release, 2).await?;
        ensure!(after == held && after_versions == versions, "a refused config wrote: {after:?}");
        ensure!(
            denied_natively(ctx, &over_the_limit("extra-queue", "still")).await?,
            "the previous config no longer enforces"
        );

        // `extra-queue` renamed `other-queue`: it takes the slot, which no longer judges
        // `extra-queue`; ready again, with a Normal Event.
        std::fs::write(
            dir.path().join("launchgate-config.yaml"),
            config(&["gpu-queue", "other-queue"])?,
        )?;
        ctx.wait_for("ready again", Duration::from_secs(30), || async {
            Ok(server.get("/readyz").await?.0 == 200)
        })
        .await?;
        let (renamed, _) = owners(ctx, &release, 2).await?;
        ensure!(
            slot_queues(&renamed, &release)?
                == [Some("other-queue".to_string()), Some("gpu-queue".to_string())],
            "the slots after the rename: {renamed:?}"
        );
        ensure!(
            failing(server, "too_many_queues").await?.as_deref() == Some("0"),
            "the gauge stays up"
        );
        ctx.wait_for("the rename to take effect", Duration::from_secs(60), || async {
            denied_natively(ctx, &over_the_limit("other-queue", "other")).await
        })
        .await?;
        ctx.wait_for("the Normal Event", Duration::from_secs(30), || async {
            Ok(!events_about(ctx, &pod, "NativePoliciesInStep").await?.is_empty())
        })
        .await?;
        Ok(())
    }
    .await;
    if let Some(mut server) = server {
        server.stop();
    }
    if result.is_err() {
        eprintln!(
            "launchgate's log ends:\n{}",
            crate::cluster::tail(&dir.path().join("launchgate.log"), 30)
        );
    }
    let _ = send_as(
        ctx,
        None,
        http::Method::DELETE,
        &format!("{}/{foreign}", collection("ValidatingAdmissionPolicy")?),
        None,
    )
    .await;
    if let Ok(created) = &created {
        uninstall(ctx, created).await;
    }
    result
}

/// The `slots` dormant slots of set `set`, as `launchgate compile-native --dormant-slots`
/// prints them for an admin to create.
pub(crate) fn dormant_slots(set: &str, slots: usize) -> Result<Vec<Value>> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_launchgate"))
        .args(["compile-native", "-o", "json"])
        .arg(format!("--dormant-slots={slots}"))
        .arg(format!("--policy-set={set}"))
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// `serve --native-policies` outside the chart (docs/native-policies.md, "Without the chart"),
/// its slots created once by an admin with `compile-native --dormant-slots`, started with more queues than slots: it serves `/healthz`
/// but is never ready (`/readyz` says why), sets the metric, writes the Event, and writes no
/// slot.
pub async fn a_server_with_more_queues_than_slots_is_never_ready(ctx: &Ctx) -> Result<()> {
    let id = &ctx.ns[ctx.ns.len() - 4..];
    let set = format!("e2e-full-{id}");
    let pod = format!("launchgate-{id}");
    let objects = dormant_slots(&set, 2)?;
    ensure!(objects.len() == 8, "{} objects", objects.len());
    let created = install(ctx, &objects).await;
    let dir = tempfile::tempdir()?;
    let mut server: Option<Launchgate> = None;
    let result = async {
        created.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let (_, versions) = owners(ctx, &set, 2).await?;
        let started = Launchgate::start_serving(
            dir.path(),
            Some(&ctx.env.kubeconfig),
            "127.0.0.1",
            &config(&["a-queue", "b-queue", "c-queue"])?,
            &[
                format!("--native-policies={set}"),
                "--native-policy-slots=2".into(),
                format!("--pod-namespace={}", ctx.ns),
                format!("--pod-name={pod}"),
            ],
        )
        .await?;
        let server = server.insert(started);
        ctx.wait_for("the Warning Event", Duration::from_secs(30), || async {
            Ok(!events_about(ctx, &pod, "NativePoliciesNotInStep")
                .await?
                .is_empty())
        })
        .await?;
        // Still not ready after several reload intervals.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (status, why) = server.get("/readyz").await?;
        ensure!(status == 503, "/readyz: {status} {why}");
        ensure!(
            why.contains("config refused") && why.contains("3 queues"),
            "/readyz: {why}"
        );
        ensure!(
            failing(server, "too_many_queues").await?.as_deref() == Some("1"),
            "the metric"
        );
        let (held, after) = owners(ctx, &set, 2).await?;
        ensure!(
            held.values().all(Option::is_none) && after == versions,
            "a refused config wrote: {held:?}"
        );
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
