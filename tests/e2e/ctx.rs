//! What a test gets: a client, its own namespace, and helpers to create objects the way a user
//! or a controller does and to wait for what the controllers make of them.

use crate::webhook::UNREGISTERED_LABEL;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What every test shares.
pub struct Env {
    pub client: Client,
    /// The kubeconfig of the suite's API server (for processes the tests start).
    pub kubeconfig: std::path::PathBuf,
    /// launchgate's log file (JSON lines).
    pub launchgate_log: std::path::PathBuf,
    /// launchgate's base URL, and a client trusting its CA (for its /metrics).
    pub launchgate_base: String,
    /// launchgate's process (its `/proc/<pid>/status` tells its memory).
    pub launchgate_pid: Option<u32>,
    pub launchgate_client: reqwest::Client,
}

/// One test's context: its namespace, deleted afterwards.
pub struct Ctx {
    pub env: Arc<Env>,
    pub client: Client,
    pub ns: String,
}

/// How long controllers get to act.
pub const CONTROLLER_WAIT: Duration = Duration::from_secs(60);

impl Ctx {
    /// Creates a namespace for `test` (optionally one launchgate does not see yet) and waits for
    /// its `default` ServiceAccount, which pods need.
    pub async fn new(env: Arc<Env>, test: &str, registered: bool) -> Result<Ctx> {
        let client = env.client.clone();
        let base: String = test
            .rsplit("::")
            .next()
            .unwrap_or(test)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let ns = format!(
            "{}-{:04x}",
            base.trim_matches('-'),
            crate::cluster::rand_u64() & 0xffff
        );
        let mut labels = json!({"e2e.launchgate.io/test": "true"});
        if !registered {
            labels[UNREGISTERED_LABEL] = json!("true");
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns, "labels": labels}}))?,
            )
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
        let ctx = Ctx { env, client, ns };
        let sas: Api<ServiceAccount> = ctx.api();
        ctx.wait_for(
            "the default ServiceAccount",
            Duration::from_secs(30),
            || async { Ok(sas.get_opt("default").await?.is_some()) },
        )
        .await?;
        Ok(ctx)
    }

    /// Lets launchgate see this namespace from now on (as if it had just been installed).
    pub async fn register_namespace(&self) -> Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let patch = json!({"metadata": {"labels": {UNREGISTERED_LABEL: null}}});
        namespaces
            .patch(&self.ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        // The API server's webhook plumbing reads namespaces from an informer: wait until a
        // dry-run launch pod in this namespace comes back mutated.
        let probe = self.launch_pod("registration-probe");
        self.wait_for(
            "launchgate to see the namespace",
            Duration::from_secs(20),
            || async {
                let pod = self.create(&probe, true).await?;
                Ok(pod
                    .pointer("/metadata/annotations/launchgate.io~1mutations")
                    .is_some())
            },
        )
        .await
    }

    pub async fn cleanup(&self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &Default::default()).await;
    }

    /// A typed API in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The dynamic API for an object's `apiVersion`/`kind`, in this namespace.
    pub fn api_for(&self, obj: &Value) -> Result<Api<DynamicObject>> {
        Ok(Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &resource_for(obj)?,
        ))
    }

    /// Creates `obj` in this namespace (`dry_run`: `dryRun=All`, nothing persisted) and returns
    /// what the API server stored (or would have).
    pub async fn create(&self, obj: &Value, dry_run: bool) -> Result<Value, kube::Error> {
        let mut obj = obj.clone();
        obj["metadata"]["namespace"] = json!(self.ns);
        let api = self.api_for(&obj).map_err(|e| {
            kube::Error::Service(Box::<dyn std::error::Error + Send + Sync>::from(
                e.to_string(),
            ))
        })?;
        let pp = PostParams {
            dry_run,
            ..Default::default()
        };
        let dynamic: DynamicObject =
            serde_json::from_value(obj).map_err(kube::Error::SerdeError)?;
        let created = api.create(&pp, &dynamic).await?;
        serde_json::to_value(created).map_err(kube::Error::SerdeError)
    }

    /// Creates `obj` with a raw request, returning the HTTP status, the body and the
    /// `Warning` headers, as kubectl prints them.
    pub async fn create_raw(
        &self,
        obj: &Value,
        dry_run: bool,
    ) -> Result<(u16, Value, Vec<String>)> {
        self.create_raw_as(obj, dry_run, None).await
    }

    /// [`Ctx::create_raw`] as another user (`Impersonate-User`, as `kubectl --as` sends it):
    /// the request's `userInfo` is that user's, and RBAC authorises that user.
    pub async fn create_raw_as(
        &self,
        obj: &Value,
        dry_run: bool,
        user: Option<&str>,
    ) -> Result<(u16, Value, Vec<String>)> {
        self.create_raw_impersonating(obj, dry_run, user, &[]).await
    }

    /// [`Ctx::create_raw_as`] with the user's groups too (`Impersonate-Group`, as
    /// `kubectl --as-group` sends them).
    pub async fn create_raw_impersonating(
        &self,
        obj: &Value,
        dry_run: bool,
        user: Option<&str>,
        groups: &[&str],
    ) -> Result<(u16, Value, Vec<String>)> {
        let mut obj = obj.clone();
        obj["metadata"]["namespace"] = json!(self.ns);
        let url = format!(
            "{}{}",
            self.collection_url(&obj)?,
            if dry_run { "?dryRun=All" } else { "" }
        );
        self.send_as(http::Request::post(url), &obj, user, groups)
            .await
    }

    /// Sends `obj` as the body of `request`, as `user` with `groups` when given
    /// (`Impersonate-User`, `Impersonate-Group`): the HTTP status, the body and the `Warning`
    /// headers, as kubectl prints them.
    pub async fn send_as(
        &self,
        request: http::request::Builder,
        obj: &Value,
        user: Option<&str>,
        groups: &[&str],
    ) -> Result<(u16, Value, Vec<String>)> {
        let mut request = request.header("content-type", "application/json");
        if let Some(user) = user {
            request = request.header("impersonate-user", user);
        }
        for group in groups {
            request = request.header("impersonate-group", *group);
        }
        let request = request.body(serde_json::to_vec(obj)?)?;
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await?;
        let status = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all("warning")
            .iter()
            .map(|v| decode_warning(&String::from_utf8_lossy(v.as_bytes())))
            .collect();
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await?
            .to_bytes();
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        Ok((status, body, warnings))
    }

    /// The path of `obj`'s kind in this namespace (`/apis/batch/v1/namespaces/<ns>/jobs`).
    fn collection_url(&self, obj: &Value) -> Result<String> {
        let resource = resource_for(obj)?;
        let group = if resource.group.is_empty() {
            format!("/api/{}", resource.version)
        } else {
            format!("/apis/{}/{}", resource.group, resource.version)
        };
        Ok(format!(
            "{group}/namespaces/{}/{}",
            self.ns, resource.plural
        ))
    }

    /// Replaces the stored `obj` (an UPDATE, `PUT`) as `user` with `groups` (impersonated, as
    /// a controller's service account would send it): the HTTP status and the body. `obj`
    /// carries the `resourceVersion` it was read with.
    pub async fn replace_raw_as(
        &self,
        obj: &Value,
        user: &str,
        groups: &[&str],
    ) -> Result<(u16, Value)> {
        let mut obj = obj.clone();
        obj["metadata"]["namespace"] = json!(self.ns);
        let name = obj["metadata"]["name"]
            .as_str()
            .context("an UPDATE needs a name")?
            .to_string();
        let url = format!("{}/{name}", self.collection_url(&obj)?);
        let (status, body, _) = self
            .send_as(http::Request::put(url), &obj, Some(user), groups)
            .await?;
        Ok((status, body))
    }

    /// Server-side apply of `obj` by `manager`.
    pub async fn apply(&self, obj: &Value, manager: &str) -> Result<Value> {
        let mut obj = obj.clone();
        obj["metadata"]["namespace"] = json!(self.ns);
        let name = obj["metadata"]["name"]
            .as_str()
            .context("apply needs a name")?
            .to_string();
        let api = self.api_for(&obj)?;
        let patched = api
            .patch(
                &name,
                &PatchParams::apply(manager).force(),
                &Patch::Apply(&obj),
            )
            .await?;
        Ok(serde_json::to_value(patched)?)
    }

    /// The stored object, or `None`.
    pub async fn get(&self, obj: &Value, name: &str) -> Result<Option<Value>> {
        let api = self.api_for(obj)?;
        Ok(api
            .get_opt(name)
            .await?
            .map(serde_json::to_value)
            .transpose()?)
    }

    /// Pods in this namespace matching a label selector.
    pub async fn pods(&self, selector: &str) -> Result<Vec<Value>> {
        let pods: Api<Pod> = self.api();
        let list = pods.list(&ListParams::default().labels(selector)).await?;
        list.items
            .into_iter()
            .map(|p| serde_json::to_value(p).map_err(Into::into))
            .collect()
    }

    /// Waits until `n` pods match `selector` (and returns them), failing with the Job
    /// controller's view when they do not come.
    pub async fn wait_for_pods(&self, selector: &str, n: usize) -> Result<Vec<Value>> {
        let got = self
            .wait_for(
                &format!("{n} pods with {selector}"),
                CONTROLLER_WAIT,
                || async { Ok(self.pods(selector).await?.len() >= n) },
            )
            .await;
        if let Err(e) = got {
            bail!("{e}; events: {}", self.events_text().await);
        }
        self.pods(selector).await
    }

    /// This namespace's events, one line each (reasons and messages), for failure messages.
    pub async fn events_text(&self) -> String {
        let events: Api<k8s_openapi::api::core::v1::Event> = self.api();
        match events.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .iter()
                .map(|e| {
                    format!(
                        "{} {}: {}",
                        e.involved_object.name.clone().unwrap_or_default(),
                        e.reason.clone().unwrap_or_default(),
                        e.message.clone().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"),
            Err(e) => format!("(events unreadable: {e})"),
        }
    }

    /// Grants the Role `name` (its `rules`) to `subjects` (a RoleBinding) in the test's
    /// namespace, then waits until each of `requesters` (a user and its groups) may create
    /// `probe` (a dry run): the authorizer reads bindings from an informer.
    pub async fn grant(
        &self,
        name: &str,
        rules: Value,
        subjects: Value,
        probe: &Value,
        requesters: &[(&str, &[&str])],
    ) -> Result<()> {
        let roles: Api<Role> = self.api();
        let role = serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules}))?;
        roles.create(&PostParams::default(), &role).await?;
        let bindings: Api<RoleBinding> = self.api();
        let binding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subjects,
        }))?;
        bindings.create(&PostParams::default(), &binding).await?;
        self.wait_for(
            &format!("the RoleBinding {name:?} to take effect"),
            Duration::from_secs(20),
            || async {
                for (user, groups) in requesters {
                    let (status, _, _) = self
                        .create_raw_impersonating(probe, true, Some(user), groups)
                        .await?;
                    if status == 403 {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
        )
        .await
    }

    /// Polls `check` until it is true or `timeout` passes.
    pub async fn wait_for<F, Fut>(&self, what: &str, timeout: Duration, mut check: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<bool>>,
    {
        self.poll(what, timeout, || {
            let fut = check();
            async move { Ok(fut.await?.then_some(())) }
        })
        .await
    }

    /// Polls `find` until it finds something (and returns it) or `timeout` passes.
    pub async fn poll<T, F, Fut>(&self, what: &str, timeout: Duration, mut find: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>>>,
    {
        let until = Instant::now() + timeout;
        let mut last_err = None;
        loop {
            match find().await {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => {}
                Err(e) => last_err = Some(e),
            }
            if Instant::now() > until {
                match last_err {
                    Some(e) => bail!("timed out after {timeout:?} waiting for {what}: {e:#}"),
                    None => bail!("timed out after {timeout:?} waiting for {what}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The `LaunchgateDenied` Event in the test's namespace (about the object named
    /// `regarding`, when given), waited for up to 15 s.
    pub async fn denied_event(&self, regarding: Option<&str>) -> Result<Event> {
        self.event("LaunchgateDenied", regarding, Duration::from_secs(15))
            .await
    }

    /// An Event of `reason` in the test's namespace (about the object named `regarding`, when
    /// given), waited for up to `timeout`.
    pub async fn event(
        &self,
        reason: &str,
        regarding: Option<&str>,
        timeout: Duration,
    ) -> Result<Event> {
        let events: Api<Event> = self.api();
        self.poll(&format!("the {reason} Event"), timeout, || async {
            Ok(events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && regarding.is_none_or(|name| {
                            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        })
                }))
        })
        .await
    }

    /// Lets the service account `operator` (`system:serviceaccount:<namespace>:<name>`) do what
    /// `rules` allow here, under the Role and RoleBinding `name`, probed with a pod no rule
    /// judges.
    pub async fn grant_operator(&self, name: &str, rules: Value, operator: &str) -> Result<()> {
        let (namespace, account) = operator
            .strip_prefix("system:serviceaccount:")
            .and_then(|s| s.split_once(':'))
            .with_context(|| format!("{operator:?} is not a service account"))?;
        self.grant(
            name,
            rules,
            json!([{"kind": "ServiceAccount", "name": account, "namespace": namespace}]),
            &rbac_probe_pod(),
            &[(operator, &[])],
        )
        .await
    }

    /// launchgate's own /metrics (OpenMetrics text).
    pub async fn launchgate_metrics(&self) -> Result<String> {
        let url = format!("{}/metrics", self.env.launchgate_base);
        Ok(self
            .env
            .launchgate_client
            .get(url)
            .send()
            .await?
            .text()
            .await?)
    }

    /// A minimal launch pod (W&B agent labels) named `name`.
    pub fn launch_pod(&self, name: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"wandb.ai/monitor": "true", "wandb.ai/agent": "e2e"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "train", "image": "acme/train:1"}]
            }
        })
    }
}

/// The API resource of an object, from its `apiVersion` and `kind` (the kinds the suite uses).
pub fn resource_for(obj: &Value) -> Result<ApiResource> {
    let api_version = obj["apiVersion"]
        .as_str()
        .context("object without apiVersion")?;
    let kind = obj["kind"].as_str().context("object without kind")?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "PolicyReport" => "policyreports".to_string(),
        k => format!("{}s", k.to_lowercase()),
    };
    Ok(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        &plural,
    ))
}

/// A `Warning` header's text: `299 - "message"` → `message`.
fn decode_warning(header: &str) -> String {
    let text = header
        .split_once(' ')
        .and_then(|(_, rest)| rest.split_once(' '))
        .map(|(_, quoted)| quoted)
        .unwrap_or(header)
        .trim();
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text)
        .replace("\\\"", "\"")
}

/// A manifest from `tests/fixtures/manifests` as JSON, its namespace removed.
pub fn manifest(name: &str) -> Value {
    let mut value = crate::common::manifest_json(name);
    if let Some(meta) = value["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    value
}

/// The `launchgate.io/mutations` annotation of an object, if launchgate mutated it.
pub fn mutations(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/annotations/launchgate.io~1mutations")
        .and_then(Value::as_str)
}

/// A pod no rule judges (not a launch workload): only RBAC can refuse its creation.
pub fn rbac_probe_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rbac-probe"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

/// A Job no rule judges (not a launch workload): only RBAC can refuse its creation.
pub fn rbac_probe_job() -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rbac-probe"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}}}})
}
