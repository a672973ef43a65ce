//! The I/O shell of the audit: list the launch workloads page by page through a
//! `kube::Client` (read-only), judge each page with the pure [`super::evaluate`] and drop the
//! objects, then optionally server-side apply the reports (PolicyReports or OpenReports).
//!
//! Memory stays bounded by one page of objects plus one small [`super::AuditEntry`] per launch
//! workload (and the TrainJob runtimes, listed before the TrainJobs they size). A kind whose
//! CRD is not installed (Volcano, Kubeflow) is skipped with a note.

use super::{
    AuditEntry, AuditReport, ListedKind, POLICY_REPORT_NAME, ReportFormat, evaluate, policy_report,
    policy_reports,
};
use crate::cluster::{
    CLUSTER_RUNTIME, ClusterView, GivenObjects, NAMESPACED_RUNTIME, RUNTIME_VERSION, TRAINER_GROUP,
    runtime_plural,
};
use crate::policy::Policy;
use anyhow::{Context, Result};
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::Value;
use std::io::Write;

/// Field manager of the reports launchgate applies.
pub(crate) const FIELD_MANAGER: &str = "launchgate-audit";

/// How to run an audit.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// Only this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Objects per list request (`limit`); the `continue` token fetches the next page.
    pub page_size: u32,
    /// Server-side apply one report per namespace (needs the report format's CRD).
    pub write_policy_reports: bool,
    /// Which report API to write.
    pub report_format: ReportFormat,
    /// Print a progress line on stderr (the CLI sets this when stderr is a terminal).
    pub progress: bool,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            namespace: None,
            page_size: 500,
            write_policy_reports: false,
            report_format: ReportFormat::default(),
            progress: false,
        }
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The resources the API server serves in `group/version` (empty when it serves none: the CRD
/// is not installed).
async fn served_resources(
    client: &kube::Client,
    group: &str,
    version: &str,
) -> Result<Vec<String>> {
    let (root, gv) = if group.is_empty() {
        ("api", version.to_string())
    } else {
        ("apis", format!("{group}/{version}"))
    };
    let req = hyper::Request::get(format!("/{root}/{gv}")).body(Vec::new())?;
    match client.request::<Value>(req).await {
        Ok(list) => Ok(list
            .get("resources")
            .and_then(Value::as_array)
            .map(|rs| {
                rs.iter()
                    .filter_map(|r| r.get("name").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()),
        Err(e) if is_not_found(&e) => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("discovering {gv}")),
    }
}

/// True when the API server serves `kind` (its CRD is installed).
async fn serves(client: &kube::Client, kind: &ListedKind) -> Result<bool> {
    Ok(served_resources(client, kind.group, kind.version)
        .await?
        .iter()
        .any(|r| r == kind.plural))
}

/// Lists the TrainJob runtimes the TrainJobs are sized by: every ClusterTrainingRuntime, and
/// the TrainingRuntimes of the audited namespace (all namespaces without one). A kind that is
/// not installed or cannot be listed (RBAC) leaves its runtimes unknown, with a note: the
/// queue's `limits.unverifiableRuntime` decides, as in the webhook without cluster lookups.
async fn list_runtimes(
    client: &kube::Client,
    opts: &AuditOptions,
    report: &mut AuditReport,
) -> Result<GivenObjects> {
    let mut runtimes = GivenObjects::default();
    let served = served_resources(client, TRAINER_GROUP, RUNTIME_VERSION).await?;
    for kind in [CLUSTER_RUNTIME, NAMESPACED_RUNTIME] {
        let listed = ListedKind {
            group: TRAINER_GROUP,
            version: RUNTIME_VERSION,
            kind,
            plural: runtime_plural(kind),
            optional: true,
        };
        if !served.iter().any(|r| r == listed.plural) {
            continue;
        }
        let namespace = if kind == CLUSTER_RUNTIME {
            None
        } else {
            opts.namespace.as_deref()
        };
        match list_all(client, &listed, namespace, opts.page_size).await {
            Ok(items) => {
                for item in items {
                    let item = super::as_listed(&listed, item);
                    let namespace = crate::admission::placed_namespace(&item, None).map(str::to_string);
                    if let Err(e) = runtimes.add(item, namespace.as_deref()) {
                        report
                            .notes
                            .push(format!("a {kind} is not read: {e}"));
                    }
                }
                runtimes.listed_all(kind);
            }
            Err(e) => report.notes.push(format!(
                "{} could not be listed ({e:#}): a TrainJob that leaves its size to one is judged as without cluster lookups (limits.unverifiableRuntime)",
                listed.resource_name(),
            )),
        }
    }
    Ok(runtimes)
}

/// Every object of one kind, page by page.
async fn list_all(
    client: &kube::Client,
    kind: &ListedKind,
    namespace: Option<&str>,
    page_size: u32,
) -> Result<Vec<Value>> {
    let request = kube::core::Request::new(collection_path(kind, namespace));
    let mut out = Vec::new();
    let mut continue_token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(page_size.max(1));
        if let Some(token) = continue_token.take() {
            lp = lp.continue_token(&token);
        }
        let mut page: Value = client.request(request.list(&lp)?).await?;
        if let Some(Value::Array(items)) = page.get_mut("items").map(Value::take) {
            out.extend(items);
        }
        continue_token = next_page(&page);
        if continue_token.is_none() {
            return Ok(out);
        }
    }
}

/// The URL path of the objects of `kind`, in `namespace` or in all namespaces.
fn collection_path(kind: &ListedKind, namespace: Option<&str>) -> String {
    let prefix = if kind.group.is_empty() {
        format!("/api/{}", kind.version)
    } else {
        format!("/apis/{}/{}", kind.group, kind.version)
    };
    match namespace {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{}", kind.plural),
        None => format!("{prefix}/{}", kind.plural),
    }
}

struct Progress {
    enabled: bool,
    listed: usize,
}

impl Progress {
    fn show(&mut self, kind: &ListedKind, judged: usize) {
        if self.enabled {
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[2Kaudit: {} object(s) listed, {judged} launch workload(s) judged ({})",
                self.listed,
                kind.resource_name()
            );
            let _ = err.flush();
        }
    }

    fn done(&self) {
        if self.enabled {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
        }
    }
}

/// How often one kind's list is read again after its continue token expired, before the
/// audit gives up (a cluster compacting faster than a page can be judged).
const MAX_LIST_RESTARTS: usize = 3;

/// Lists one kind page by page, judging each page before fetching the next.
async fn audit_kind(
    client: &kube::Client,
    policy: &Policy,
    runtimes: &dyn ClusterView,
    kind: &ListedKind,
    opts: &AuditOptions,
    report: &mut AuditReport,
    progress: &mut Progress,
) -> Result<()> {
    let request = kube::core::Request::new(collection_path(kind, opts.namespace.as_deref()));
    let mut continue_token: Option<String> = None;
    // Where this kind's results start, to list it again from the start when its continue
    // token expires (410 Gone: the snapshot it paged through was compacted away).
    let start = (report.entries.len(), report.listed, report.skipped);
    let mut restarts = 0;
    loop {
        let mut lp = ListParams::default().limit(opts.page_size.max(1));
        let paging = continue_token.is_some();
        if let Some(token) = continue_token.take() {
            lp = lp.continue_token(&token);
        }
        let req = request.list(&lp)?;
        let mut page: Value = match client.request(req).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.code == 410 && paging && restarts < MAX_LIST_RESTARTS => {
                restarts += 1;
                report.entries.truncate(start.0);
                (report.listed, report.skipped) = (start.1, start.2);
                report.notes.push(format!(
                    "the list of {} expired while paging (410 Gone) and was read again from the start",
                    kind.resource_name()
                ));
                continue;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("listing {}", kind.resource_name()));
            }
        };
        let items = match page.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        for item in items {
            report.listed += 1;
            progress.listed += 1;
            match evaluate(policy, runtimes, kind, item) {
                Some(entry) => report.entries.push(entry),
                None => report.skipped += 1,
            }
        }
        progress.show(kind, report.entries.len());
        continue_token = next_page(&page);
        if continue_token.is_none() {
            return Ok(());
        }
    }
}

/// Lists every launch workload (Jobs, Volcano Jobs, PyTorchJobs, Pods without a launch owner),
/// judges each against `policy` as a CREATE now (launchgate's mutation, then its validation)
/// and returns the report; with `write_policy_reports`, also applies one report per
/// namespace that has launch workloads. Reads nothing else and writes nothing else.
pub async fn run(
    client: kube::Client,
    policy: &Policy,
    opts: &AuditOptions,
) -> Result<AuditReport> {
    let mut report = AuditReport::default();
    let mut progress = Progress {
        enabled: opts.progress,
        listed: 0,
    };
    // The TrainJob runtimes, listed when the TrainJobs are reached.
    let mut runtimes: Option<GivenObjects> = None;
    for kind in &super::listed_kinds() {
        if kind.optional && !serves(&client, kind).await? {
            report.notes.push(format!(
                "{} ({}) is not installed in this cluster: skipped",
                kind.resource_name(),
                kind.api_version()
            ));
            continue;
        }
        if kind.group == TRAINER_GROUP && runtimes.is_none() {
            runtimes = Some(list_runtimes(&client, opts, &mut report).await?);
        }
        let view: &dyn ClusterView = match &runtimes {
            Some(runtimes) => runtimes,
            None => &crate::cluster::NoCluster,
        };
        audit_kind(
            &client,
            policy,
            view,
            kind,
            opts,
            &mut report,
            &mut progress,
        )
        .await?;
    }
    progress.done();
    if opts.write_policy_reports {
        let format = opts.report_format;
        if serves(&client, &format.resource()).await? {
            let (written, skipped) = write_policy_reports(&client, format, &report.entries).await?;
            report.policy_reports = written;
            report.notes.extend(
                skipped
                    .into_iter()
                    .map(|ns| format!("namespace {ns} is being deleted: no report written there")),
            );
            clear_stale_reports(&client, opts, &mut report).await?;
        } else {
            report.notes.push(format!(
                "the {} CRD ({}) is not installed: no reports written",
                format.resource().kind,
                format.resource_name()
            ));
        }
    }
    Ok(report)
}

/// Server-side applies the reports; returns `namespace/name` of each written, and the
/// namespaces skipped because they are being deleted (or are gone) since their workloads were
/// listed — a namespace deleted during an audit is no failure of it.
async fn write_policy_reports(
    client: &kube::Client,
    format: ReportFormat,
    entries: &[AuditEntry],
) -> Result<(Vec<String>, Vec<String>)> {
    let now = unix_now();
    let (mut written, mut skipped) = (Vec::new(), Vec::new());
    for report in policy_reports(format, entries, now) {
        match apply_report(client, format, &report).await {
            Ok(name) => written.push(name),
            Err(e) if e.downcast_ref().is_some_and(namespace_going) => skipped.push(
                report
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ),
            Err(e) => return Err(e),
        }
    }
    Ok((written, skipped))
}

/// Whether the API server refused to write into a namespace because it is being deleted
/// (`NamespaceTerminating`) or is gone (the namespace not found).
fn namespace_going(e: &kube::Error) -> bool {
    let kube::Error::Api(status) = e else {
        return false;
    };
    let details = status.details.as_ref();
    match status.code {
        403 => details.is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")),
        404 => details.is_some_and(|d| d.kind == "namespaces"),
        _ => false,
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Server-side applies one report; returns its `namespace/name`.
async fn apply_report(
    client: &kube::Client,
    format: ReportFormat,
    report: &Value,
) -> Result<String> {
    let namespace = report
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let request = kube::core::Request::new(collection_path(&format.resource(), Some(namespace)));
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let req = request.patch(POLICY_REPORT_NAME, &params, &Patch::Apply(report))?;
    client.request::<Value>(req).await.with_context(|| {
        format!(
            "applying {} {namespace}/{POLICY_REPORT_NAME}",
            format.resource().kind
        )
    })?;
    Ok(format!("{namespace}/{POLICY_REPORT_NAME}"))
}

/// A namespace whose launch workloads are all gone keeps its last report unless it is replaced:
/// find launchgate's reports (by label) in the audited scope and empty those not written now.
async fn clear_stale_reports(
    client: &kube::Client,
    opts: &AuditOptions,
    report: &mut AuditReport,
) -> Result<()> {
    let format = opts.report_format;
    let path = collection_path(&format.resource(), opts.namespace.as_deref());
    let request = kube::core::Request::new(path);
    let mut continue_token: Option<String> = None;
    let mut stale = Vec::new();
    loop {
        let mut lp = ListParams::default()
            .labels("app.kubernetes.io/managed-by=launchgate")
            .limit(opts.page_size.max(1));
        if let Some(token) = continue_token.take() {
            lp = lp.continue_token(&token);
        }
        let page: Value = match client.request(request.list(&lp)?).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                report.notes.push(
                    format!("not allowed to list {}: reports of namespaces without launch workloads were left as they were", format.resource_name()),
                );
                return Ok(());
            }
            Err(e) => return Err(e).context(format!("listing {}", format.resource_name())),
        };
        for item in page
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = item.pointer("/metadata/name").and_then(Value::as_str);
            let ns = item.pointer("/metadata/namespace").and_then(Value::as_str);
            if let (Some(POLICY_REPORT_NAME), Some(ns)) = (name, ns)
                && !report
                    .policy_reports
                    .iter()
                    .any(|w| w == &format!("{ns}/{POLICY_REPORT_NAME}"))
            {
                stale.push(ns.to_string());
            }
        }
        continue_token = next_page(&page);
        if continue_token.is_none() {
            break;
        }
    }
    let now = unix_now();
    for ns in stale {
        let written = apply_report(client, format, &policy_report(format, &ns, &[], now)).await?;
        report.policy_reports.push(format!("{written} (emptied)"));
    }
    Ok(())
}

/// The `continue` token of a list page, when another page follows.
fn next_page(page: &Value) -> Option<String> {
    page.pointer("/metadata/continue")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_report_for_a_namespace_being_deleted_is_skipped_not_failed() {
        // As the API server answers (its Status object).
        let refused = |code: u16, kind: &str, cause: &str| {
            let status: kube::core::Status = serde_json::from_value(json!({
                "status": "Failure", "message": "refused", "reason": "Forbidden", "code": code,
                "details": {"kind": kind, "causes": [{"reason": cause}]},
            }))
            .unwrap();
            kube::Error::Api(Box::new(status))
        };
        assert!(namespace_going(&refused(
            403,
            "policyreports",
            "NamespaceTerminating"
        )));
        assert!(namespace_going(&refused(404, "namespaces", "")));
        // Anything else still fails the audit: RBAC, a missing CRD, a conflict.
        assert!(!namespace_going(&refused(403, "policyreports", "")));
        assert!(!namespace_going(&refused(404, "policyreports", "")));
        assert!(!namespace_going(&refused(
            409,
            "policyreports",
            "NamespaceTerminating"
        )));
    }
    use super::*;
    use crate::audit::AuditResult;
    use http_body_util::{BodyExt, Full};
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

    /// An in-process stand-in for the API server: answers discovery, paginated lists of Jobs
    /// (3 pages), an empty Pod list, 404 for Kubeflow, and records every request.
    fn fake_api(volcano: bool, policy_reports_crd: bool) -> (kube::Client, Seen) {
        fake_api_expiring(volcano, policy_reports_crd, 0)
    }

    /// [`fake_api`] whose Job list answers the last page's continue token with 410 Gone the
    /// first `expirations` times (the token expired between two pages).
    fn fake_api_expiring(
        volcano: bool,
        policy_reports_crd: bool,
        expirations: usize,
    ) -> (kube::Client, Seen) {
        let seen: Seen = Arc::default();
        let log = seen.clone();
        let expired = Arc::new(Mutex::new(0usize));
        let svc = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
            let log = log.clone();
            let expired = expired.clone();
            async move {
                let method = req.method().to_string();
                let uri = req.uri().to_string();
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let body_json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                log.lock()
                    .unwrap()
                    .push((method.clone(), uri.clone(), body_json.clone()));
                let path = uri.split('?').next().unwrap_or("").to_string();
                let query = uri.split_once('?').map_or("", |(_, q)| q).to_string();
                let job = |name: &str, gpus: &str| {
                    json!({"metadata": {"name": name, "namespace": "wandb", "uid": name,
                        "labels": {"wandb.ai/monitor": "true"}},
                        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 60,
                            "template": {"spec": {"restartPolicy": "Never", "containers": [
                                {"name": "main", "image": "acme/train:1",
                                 "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}})
                };
                let (status, answer) = match (method.as_str(), path.as_str()) {
                    ("GET", "/apis/batch.volcano.sh/v1alpha1") if volcano => (
                        200,
                        json!({"kind": "APIResourceList", "resources": [{"name": "jobs"}]}),
                    ),
                    ("GET", "/apis/wgpolicyk8s.io/v1alpha2") if policy_reports_crd => (
                        200,
                        json!({"kind": "APIResourceList", "resources": [{"name": "policyreports"}, {"name": "policyreports/status"}]}),
                    ),
                    ("GET", "/apis/batch/v1/jobs")
                        if query.contains("continue=p3")
                            && *expired.lock().unwrap() < expirations =>
                    {
                        *expired.lock().unwrap() += 1;
                        (
                            410,
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "message": "The provided continue parameter is too old to display a consistent list result.",
                                "reason": "Expired", "code": 410}),
                        )
                    }
                    ("GET", "/apis/batch/v1/jobs") => {
                        let (items, next) = if query.contains("continue=p2") {
                            (vec![job("j2", "8")], "p3")
                        } else if query.contains("continue=p3") {
                            (vec![job("j3", "1")], "")
                        } else {
                            (vec![job("j1", "1")], "p2")
                        };
                        (
                            200,
                            json!({"kind": "JobList", "metadata": {"continue": next}, "items": items}),
                        )
                    }
                    ("GET", "/apis/batch.volcano.sh/v1alpha1/jobs") => {
                        (200, json!({"metadata": {}, "items": []}))
                    }
                    ("GET", "/api/v1/pods") => (
                        200,
                        json!({"metadata": {}, "items": [
                        {"metadata": {"name": "web", "namespace": "default"},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}}]}),
                    ),
                    ("PATCH", p) if p.starts_with("/apis/wgpolicyk8s.io/") => (200, body_json),
                    ("GET", "/apis/wgpolicyk8s.io/v1alpha2/policyreports") => (
                        200,
                        json!({
                        "metadata": {}, "items": [
                            {"metadata": {"name": "launchgate", "namespace": "wandb"}},
                            {"metadata": {"name": "launchgate", "namespace": "old-ns"}},
                            {"metadata": {"name": "other-tool", "namespace": "old-ns"}}]}),
                    ),
                    ("GET", p) if p.contains("/namespaces/") => {
                        (200, json!({"metadata": {}, "items": []}))
                    }
                    _ => (
                        404,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "not found", "reason": "NotFound", "code": 404}),
                    ),
                };
                let resp = hyper::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Full::new(bytes::Bytes::from(
                        serde_json::to_vec(&answer).unwrap(),
                    )))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        (kube::Client::new(svc, "default"), seen)
    }

    #[tokio::test]
    async fn lists_page_by_page_and_skips_missing_crds() {
        let (client, seen) = fake_api(true, false);
        let opts = AuditOptions {
            page_size: 1,
            write_policy_reports: true,
            ..AuditOptions::default()
        };
        let report = run(client, &Policy::embedded_default(), &opts)
            .await
            .unwrap();
        let names: Vec<(&str, AuditResult)> = report
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.result))
            .collect();
        assert_eq!(
            names,
            [
                ("j1", AuditResult::Pass),
                ("j2", AuditResult::Fail),
                ("j3", AuditResult::Pass)
            ]
        );
        assert_eq!((report.listed, report.skipped), (4, 1));
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.contains("pytorchjobs.kubeflow.org")),
            "{:?}",
            report.notes
        );
        assert!(
            report.notes.iter().any(|n| n.contains("PolicyReport CRD")),
            "{:?}",
            report.notes
        );
        assert!(report.policy_reports.is_empty());
        let seen = seen.lock().unwrap();
        let job_lists: Vec<&str> = seen
            .iter()
            .filter(|(_, u, _)| u.starts_with("/apis/batch/v1/jobs"))
            .map(|(_, u, _)| u.as_str())
            .collect();
        assert_eq!(job_lists.len(), 3, "{job_lists:?}");
        assert!(job_lists.iter().all(|u| u.contains("limit=1")));
        assert!(job_lists[1].contains("continue=p2") && job_lists[2].contains("continue=p3"));
        assert!(
            seen.iter().all(|(m, _, _)| m == "GET"),
            "read-only without --policy-reports CRD"
        );
        assert!(!seen.iter().any(|(_, u, _)| u.contains("pytorchjobs")));
    }

    #[tokio::test]
    async fn an_expired_continue_token_restarts_the_list() {
        let opts = AuditOptions {
            page_size: 1,
            ..AuditOptions::default()
        };
        let (client, seen) = fake_api_expiring(false, false, 1);
        let report = run(client, &Policy::embedded_default(), &opts)
            .await
            .unwrap();
        let names: Vec<&str> = report.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["j1", "j2", "j3"], "each Job once");
        assert_eq!((report.listed, report.skipped), (4, 1));
        assert!(
            report.notes.iter().any(|n| n.contains("410 Gone")),
            "{:?}",
            report.notes
        );
        let job_lists = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, u, _)| u.starts_with("/apis/batch/v1/jobs"))
            .count();
        assert_eq!(
            job_lists, 6,
            "three pages, the last expired, then three again"
        );
        // A cluster that expires every token: a clear error, not an endless loop.
        let (client, _) = fake_api_expiring(false, false, usize::MAX);
        let err = run(client, &Policy::embedded_default(), &opts)
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("listing jobs.batch"), "{err:#}");
    }

    #[tokio::test]
    async fn applies_one_policy_report_per_namespace() {
        let (client, seen) = fake_api(false, true);
        let opts = AuditOptions {
            namespace: None,
            write_policy_reports: true,
            ..AuditOptions::default()
        };
        let report = run(client, &Policy::embedded_default(), &opts)
            .await
            .unwrap();
        assert_eq!(
            report.policy_reports,
            ["wandb/launchgate", "old-ns/launchgate (emptied)"]
        );
        assert!(report.notes.iter().any(|n| n.contains("batch.volcano.sh")));
        let seen = seen.lock().unwrap();
        let lists: Vec<&str> = seen
            .iter()
            .filter(|(m, u, _)| {
                m == "GET" && u.starts_with("/apis/wgpolicyk8s.io/v1alpha2/policyreports?")
            })
            .map(|(_, u, _)| u.as_str())
            .collect();
        assert_eq!(lists.len(), 1);
        assert!(
            lists[0].contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dlaunchgate"),
            "{}",
            lists[0]
        );
        let (_, _, emptied) = seen
            .iter()
            .find(|(m, u, _)| m == "PATCH" && u.contains("/namespaces/old-ns/"))
            .unwrap();
        assert_eq!(emptied["results"], json!([]));
        assert_eq!(emptied["summary"]["fail"], 0);
        let (_, uri, body) = seen.iter().find(|(m, _, _)| m == "PATCH").unwrap();
        assert!(
            uri.starts_with(
                "/apis/wgpolicyk8s.io/v1alpha2/namespaces/wandb/policyreports/launchgate?"
            ),
            "{uri}"
        );
        assert!(uri.contains("fieldManager=launchgate-audit") && uri.contains("force=true"));
        assert_eq!(body["kind"], "PolicyReport");
        assert_eq!(body["summary"]["fail"], 1);
        assert_eq!(body["summary"]["pass"], 2);
    }

    #[tokio::test]
    async fn a_namespace_limits_the_lists() {
        let (client, seen) = fake_api(false, false);
        let opts = AuditOptions {
            namespace: Some("wandb".into()),
            ..AuditOptions::default()
        };
        let report = run(client, &Policy::embedded_default(), &opts)
            .await
            .unwrap();
        assert!(
            report.entries.is_empty(),
            "the fake serves no namespaced lists"
        );
        let seen = seen.lock().unwrap();
        assert!(
            seen.iter()
                .any(|(_, u, _)| u.starts_with("/apis/batch/v1/namespaces/wandb/jobs?")),
            "{seen:?}"
        );
    }
}
