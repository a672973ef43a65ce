//! What `POST /api/review` answers: a config (launchgate's own, or a W&B queue imported as
//! `import-queue` does) and manifests in, per manifest the verdict, the warnings, the patch as
//! a diff and which rule said what. Pure: the judging is [`crate::judge::judge`], the same call
//! `validate`, `test` and `audit` make, with cluster lookups off; TrainJob runtimes pasted
//! beside the workloads are the cluster's runtimes, as for `validate -f`.

use super::super::import_queue;
use super::super::inputs::{self, describe};
use crate::admission::{AdmissionRequest, Operation};
use crate::cluster::{ClusterView, GivenObjects};
use crate::error::ConfigErrors;
use crate::judge::{Judgement, judge};
use crate::manifest::{InputDocument, parse_documents};
use crate::mutate::labels::MUTATIONS_ANNOTATION;
use crate::policy::{DEFAULT_CONFIG_YAML, Policy};
use crate::rules::Effect;
use crate::server::decision::outcome_label;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How many times a `serve` review judging one object costs, in memory and time: it is mutated
/// and the mutated object validated, both written out as YAML and diffed line by line, and the
/// answer built as JSON. Measured with the release build, a Pod of 8,000 tiny containers: 1.6 s
/// and 265 MiB, where `serve` mutates it in ~0.4 s and is charged ~100 MiB.
const JUDGE_FACTOR: u64 = 4;

/// Most documents one manifest text may hold.
pub(crate) const MAX_DOCUMENTS: usize = 20;

/// How the config text is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ConfigFormat {
    /// A W&B queue when the text is one (a queue config, an export, Terraform JSON), else a
    /// launchgate config.
    #[default]
    Auto,
    /// launchgate's config, as `check-config` and `serve --config` read it.
    Launchgate,
    /// A W&B queue, as `import-queue` reads it.
    Wandb,
}

/// The operation to judge bare objects as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum Op {
    #[default]
    Create,
    Update,
}

/// Who sends the request (exemptions and controllers' pods go by it).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Requester {
    #[serde(default)]
    pub(crate) username: String,
    #[serde(default)]
    pub(crate) groups: Vec<String>,
}

/// The body of `POST /api/review`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ReviewRequest {
    /// The config text; empty or absent: the built-in example policy.
    #[serde(default)]
    pub(crate) config: Option<String>,
    #[serde(default)]
    pub(crate) config_format: ConfigFormat,
    /// W&B queue name (`import-queue --name`), for a config that does not carry one.
    #[serde(default)]
    pub(crate) wandb_queue: Option<String>,
    /// W&B entity (`import-queue --entity`).
    #[serde(default)]
    pub(crate) wandb_entity: Option<String>,
    /// W&B template variables (YAML or JSON, list or map) for a queue config pasted from the UI.
    #[serde(default)]
    pub(crate) wandb_variables: Option<String>,
    /// The manifest text: YAML or JSON, several documents, objects or AdmissionReviews; the
    /// TrainJob runtimes among them are the cluster's.
    pub(crate) manifest: String,
    #[serde(default)]
    pub(crate) operation: Op,
    /// The object before an UPDATE (for bare objects).
    #[serde(default)]
    pub(crate) old_manifest: Option<String>,
    /// Treat bare objects as this queue's (`--queue`).
    #[serde(default)]
    pub(crate) queue: Option<String>,
    /// Namespace for bare objects without one (`-n`).
    #[serde(default)]
    pub(crate) namespace: Option<String>,
    #[serde(default)]
    pub(crate) user_info: Option<Requester>,
}

/// Bad input, said as the CLI says it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct InputError {
    /// Which input is wrong: `config`, `manifest`, `oldManifest`, `wandbVariables`, `request`.
    pub(crate) input: &'static str,
    pub(crate) error: String,
    /// One line per problem (a config's key paths), when there are several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) details: Vec<String>,
}

impl InputError {
    fn new(input: &'static str, error: impl Into<String>) -> Self {
        InputError {
            input,
            error: error.into(),
            details: Vec::new(),
        }
    }
}

/// The policy the request asked for, and what to tell about it.
struct LoadedConfig {
    policy: Policy,
    summary: Value,
}

fn non_empty(text: &Option<String>) -> Option<&str> {
    text.as_deref().map(str::trim).filter(|t| !t.is_empty())
}

/// A config that does not load, as `check-config` prints it.
fn invalid_config(e: ConfigErrors) -> InputError {
    InputError {
        input: "config",
        error: "config: invalid config".into(),
        details: e.0.iter().map(ToString::to_string).collect(),
    }
}

fn load_launchgate(text: &str) -> Result<LoadedConfig, InputError> {
    let policy = Policy::from_yaml(text).map_err(invalid_config)?;
    Ok(LoadedConfig {
        summary: json!({
            "source": "launchgate config",
            "queues": policy.queues.keys().collect::<Vec<_>>(),
            // check-config's warnings.
            "notes": policy.warnings.iter().map(|w| format!("warning: {w}")).collect::<Vec<_>>(),
        }),
        policy,
    })
}

/// A W&B queue turned into a launchgate config by `import-queue`'s own import; its only queue
/// is also the default queue, so a workload naming another queue is judged by it (with the
/// warning that says so).
fn load_wandb(request: &ReviewRequest, text: &str) -> Result<LoadedConfig, InputError> {
    let wrapped;
    let text = match non_empty(&request.wandb_variables) {
        None => text,
        Some(variables) => {
            let doc = crate::validate::template::parse_text(text)
                .map_err(|e| InputError::new("config", format!("config: not YAML or JSON: {e}")))?;
            let found = import_queue::find_queues(&doc)
                .map_err(|e| InputError::new("config", format!("config: {e}")))?;
            if !matches!(found.as_slice(), [only] if only.config == doc) {
                return Err(InputError::new(
                    "wandbVariables",
                    "template variables: this config is a queue export that carries its own; leave the variables empty",
                ));
            }
            let variables: Value = serde_yaml::from_str(variables).map_err(|e| {
                InputError::new(
                    "wandbVariables",
                    format!("template variables: not YAML or JSON: {e}"),
                )
            })?;
            wrapped = json!({"config": doc, "template_variables": variables}).to_string();
            &wrapped
        }
    };
    let imported = import_queue::import(
        text,
        non_empty(&request.wandb_queue),
        non_empty(&request.wandb_entity),
    )
    .map_err(|e| InputError::new("config", format!("config: {e}")))?;
    if !imported.errors.is_empty() {
        // As `import-queue` prints it.
        return Err(InputError {
            input: "config",
            error: "config: the snippet does not load yet; fix these (then run `launchgate check-config`):".into(),
            details: imported.errors,
        });
    }
    let mut config: Value = serde_yaml::from_str(&imported.snippet)
        .map_err(|e| InputError::new("config", format!("config: imported snippet: {e}")))?;
    let keys: Vec<String> = config["queues"]
        .as_object()
        .map(|q| q.keys().cloned().collect())
        .unwrap_or_default();
    let mut notes = Vec::new();
    if let [only] = keys.as_slice() {
        config["defaultQueue"] = json!(only);
        notes.push(format!(
            "{only:?} is also the default queue here, so a workload naming another queue is judged by it"
        ));
    }
    let text = serde_yaml::to_string(&config)
        .map_err(|e| InputError::new("config", format!("config: {e}")))?;
    let policy = Policy::from_yaml(&text).map_err(invalid_config)?;
    notes.extend(policy.warnings.iter().map(|w| format!("warning: {w}")));
    Ok(LoadedConfig {
        policy,
        summary: json!({
            "source": "W&B queue, imported as `launchgate import-queue` does",
            "queues": keys,
            "snippet": imported.snippet,
            "enforces": imported.enforces,
            "notes": notes,
        }),
    })
}

fn load_config(request: &ReviewRequest) -> Result<LoadedConfig, InputError> {
    let Some(text) = non_empty(&request.config) else {
        return Ok(LoadedConfig {
            policy: Policy::from_yaml(DEFAULT_CONFIG_YAML)
                .map_err(|e| InputError::new("config", format!("built-in example policy: {e}")))?,
            summary: json!({"source": "built-in example policy", "queues": ["gpu-queue"]}),
        });
    };
    let wandb = match request.config_format {
        ConfigFormat::Launchgate => false,
        ConfigFormat::Wandb => true,
        // A launchgate config has none of the keys a W&B queue is found by.
        ConfigFormat::Auto => crate::validate::template::parse_text(text)
            .ok()
            .is_some_and(|doc| import_queue::find_queues(&doc).is_ok()),
    };
    if wandb {
        load_wandb(request, text)
    } else {
        load_launchgate(text)
    }
}

/// The manifests as admission requests, with the operation, old object and requester asked,
/// and the TrainJob runtimes among them.
fn requests(
    request: &ReviewRequest,
) -> Result<(Vec<(String, AdmissionRequest)>, GivenObjects), InputError> {
    if request.manifest.trim().is_empty() {
        return Err(InputError::new(
            "manifest",
            "manifest: empty; paste a Kubernetes object (YAML or JSON) or pick an example",
        ));
    }
    let docs = inputs::named_documents("manifest", &request.manifest)
        .map_err(|e| InputError::new("manifest", e.to_string()))?;
    if docs.is_empty() {
        return Err(InputError::new("manifest", "manifest: no documents"));
    }
    if docs.len() > MAX_DOCUMENTS {
        return Err(InputError::new(
            "manifest",
            format!(
                "manifest: {} documents; at most {MAX_DOCUMENTS} at once",
                docs.len()
            ),
        ));
    }
    let old = match (request.operation, non_empty(&request.old_manifest)) {
        (Op::Update, Some(text)) => {
            let docs = parse_documents(text)
                .map_err(|e| InputError::new("oldManifest", format!("old manifest: {e}")))?;
            match docs.as_slice() {
                [InputDocument::Object(obj)] => Some(obj.clone()),
                _ => {
                    return Err(InputError::new(
                        "oldManifest",
                        "old manifest: expected one object (the object as it was before the update)",
                    ));
                }
            }
        }
        _ => None,
    };
    let user = request
        .user_info
        .as_ref()
        .filter(|u| !u.username.trim().is_empty() || !u.groups.is_empty())
        .map(|u| json!({"username": u.username.trim(), "groups": u.groups}));
    let mut out = Vec::new();
    let mut runtimes = GivenObjects::default();
    for (source, doc) in docs {
        let Some(doc) = inputs::take_runtime(doc, &mut runtimes, non_empty(&request.namespace))
            .map_err(|e| InputError::new("manifest", format!("{source}: invalid runtime: {e}")))?
        else {
            continue;
        };
        // A recorded AdmissionReview is answered as it is; bare objects take the operation
        // and requester asked for.
        let bare = matches!(doc, InputDocument::Object(_));
        let mut req = inputs::to_request(
            doc,
            non_empty(&request.queue),
            non_empty(&request.namespace),
        )
        .map_err(|e| InputError::new("manifest", format!("{source}: {e}")))?;
        if bare {
            if request.operation == Op::Update {
                let Some(old) = &old else {
                    return Err(InputError::new(
                        "oldManifest",
                        "old manifest: an UPDATE needs the object as it was before the update",
                    ));
                };
                req.operation = Operation::Update;
                req.old_object = Some(old.clone());
            }
            if user.is_some() {
                req.user_info = user.clone();
            }
        }
        out.push((source, req));
    }
    if out.is_empty() {
        return Err(InputError::new(
            "manifest",
            "manifest: TrainJob runtimes only; paste the workload to judge beside them",
        ));
    }
    Ok((out, runtimes))
}

fn yaml(value: Option<&Value>) -> String {
    value
        .map(|v| serde_yaml::to_string(v).unwrap_or_else(|e| format!("# not printable: {e}\n")))
        .unwrap_or_default()
}

/// One line of the before/after diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DiffLine {
    /// ` ` unchanged, `-` only before, `+` only after.
    pub(crate) tag: char,
    pub(crate) text: String,
}

/// Longest-common-subsequence table cells allowed for the changed middle; past it the middle
/// is shown as removed then added.
const DIFF_CELLS: usize = 4_000_000;

/// A line diff of two texts: common head and tail kept, the middle by longest common
/// subsequence.
pub(crate) fn line_diff(before: &str, after: &str) -> Vec<DiffLine> {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let line = |tag, text: &str| DiffLine {
        tag,
        text: text.to_string(),
    };
    let mut out: Vec<DiffLine> = a[..head].iter().map(|t| line(' ', t)).collect();
    if am.len().saturating_mul(bm.len()) > DIFF_CELLS {
        out.extend(am.iter().map(|t| line('-', t)));
        out.extend(bm.iter().map(|t| line('+', t)));
    } else {
        // lcs[i][j]: the longest common subsequence of am[i..] and bm[j..].
        let w = bm.len() + 1;
        let mut lcs = vec![0u32; (am.len() + 1) * w];
        for i in (0..am.len()).rev() {
            for j in (0..bm.len()).rev() {
                lcs[i * w + j] = if am[i] == bm[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < am.len() || j < bm.len() {
            if i < am.len() && j < bm.len() && am[i] == bm[j] {
                out.push(line(' ', am[i]));
                i += 1;
                j += 1;
            } else if j < bm.len() && (i == am.len() || lcs[i * w + j + 1] >= lcs[(i + 1) * w + j])
            {
                out.push(line('+', bm[j]));
                j += 1;
            } else {
                out.push(line('-', am[i]));
                i += 1;
            }
        }
    }
    out.extend(a[a.len() - tail..].iter().map(|t| line(' ', t)));
    out
}

/// The mutations the patch recorded in the object's `launchgate.io/mutations` annotation.
fn mutations(before: Option<&Value>, after: Option<&Value>) -> Vec<String> {
    let read = |o: Option<&Value>| {
        o.and_then(|o| o.pointer("/metadata/annotations"))
            .and_then(|a| a.get(MUTATIONS_ANNOTATION))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match read(after) {
        Some(names) if read(before).as_deref() != Some(&names) => names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Which rule said what, in the order the cluster asks: queue and exemptions, the mutating
/// webhook, then the validating webhook on the mutated object.
fn trail(j: &Judgement, before: Option<&Value>) -> Vec<Value> {
    let entry = |stage: &str, rule: &str, effect: &str, message: &str| json!({"stage": stage, "rule": rule, "effect": effect, "message": message});
    let mut out = Vec::new();
    let m = &j.mutation.summary;
    if let Some(why) = j.skip_reason() {
        let rule = match &m.exempted_by {
            Some(name) => format!("exemption {name:?}"),
            None => "match".into(),
        };
        out.push(entry("match", &rule, "skipped", &why));
    } else if let Some(queue) = j.queue() {
        out.push(entry(
            "match",
            "queue",
            "judged",
            &format!("judged by queue {queue:?}"),
        ));
    }
    for name in mutations(before, j.mutated.as_ref()) {
        out.push(entry(
            "mutate",
            &format!("mutation {name}"),
            "patched",
            "changed the object (see the diff)",
        ));
    }
    // Each warning under its rule's or notice's id.
    for w in &j.mutation.summary.warnings {
        out.push(entry("mutate", w.rule, "warned", &w.message));
    }
    if !j.mutation.response.allowed {
        out.push(entry("mutate", "mutate", "denied", &j.message()));
    }
    if let Some(v) = &j.validation {
        let s = &v.summary;
        // Each violation under its rule's id, as `launchgate_violations_total` counts it; a
        // violation an UPDATE left as it was is a warning naming its rule.
        for violation in &s.violations {
            let effect = match violation.effect {
                Effect::Deny => "denied",
                Effect::Warn => "warned",
                Effect::Audit => "audited",
            };
            out.push(entry(
                "validate",
                violation.rule.id,
                effect,
                &violation.message,
            ));
        }
        for unchanged in &s.unchanged {
            out.push(entry(
                "validate",
                unchanged.rule.id,
                "warned",
                &unchanged.message,
            ));
        }
        let said = |w: &crate::rules::Warning| {
            s.violations
                .iter()
                .chain(&s.unchanged)
                .any(|v| v.message == w.message)
        };
        for w in &s.warnings {
            if !said(w) {
                out.push(entry("validate", w.rule, "warned", &w.message));
            }
        }
        if !v.response.allowed && s.violations.is_empty() {
            out.push(entry("validate", "validate", "denied", &j.message()));
        }
        if v.response.allowed && s.outcome != crate::review::Outcome::Skipped {
            let says = if j.warnings().is_empty() && s.violations.is_empty() {
                "allowed: the mutated object is within the queue's limits"
            } else {
                "allowed, with the warnings above"
            };
            out.push(entry("validate", "verdict", outcome_label(s), says));
        }
    }
    out
}

fn result(
    source: String,
    request: &AdmissionRequest,
    policy: &Policy,
    cluster: &dyn ClusterView,
) -> Value {
    let j = judge(policy, request, cluster);
    let before = request.object.as_ref();
    let (before_text, after_text) = (yaml(before), yaml(j.mutated.as_ref()));
    let verdict = if j.skipped() {
        "skipped"
    } else if j.allowed() {
        "allowed"
    } else {
        "denied"
    };
    json!({
        "source": source,
        "object": describe(request),
        "kind": request.kind.kind,
        "name": request.name,
        "namespace": request.namespace,
        "operation": j.mutation.summary.operation,
        "user": request
            .user_info
            .as_ref()
            .and_then(|u| u.get("username"))
            .and_then(Value::as_str)
            .unwrap_or_default(),
        "queue": j.queue(),
        "verdict": verdict,
        "allowed": j.allowed(),
        "skipped": j.skipped(),
        "skipReason": j.skip_reason(),
        "deniedBy": j.denied_by().map(|s| s.as_str()),
        "message": j.message(),
        "warnings": j.warnings(),
        "auditViolations": j.audit_violations(),
        "patch": j.mutation.patch,
        "before": before_text,
        "after": after_text,
        "diff": line_diff(&before_text, &after_text),
        "trail": trail(&j, before),
    })
}

/// Judges the request's manifests under its config.
#[cfg(test)]
pub(crate) fn review(request: &ReviewRequest) -> Result<Value, InputError> {
    Ok(prepare(request)?.judge())
}

/// A request read and checked, not judged yet: its config and admission requests.
pub(crate) struct Prepared {
    config: LoadedConfig,
    requests: Vec<(String, AdmissionRequest)>,
    runtimes: GivenObjects,
}

/// Reads the config and the manifests of `request` (bounded by the body limit and
/// [`MAX_DOCUMENTS`]); the judging, whose memory follows the objects' shape, is
/// [`Prepared::judge`].
pub(crate) fn prepare(request: &ReviewRequest) -> Result<Prepared, InputError> {
    let config = load_config(request)?;
    let (requests, runtimes) = requests(request)?;
    Ok(Prepared {
        config,
        requests,
        runtimes,
    })
}

impl Prepared {
    /// What judging every object costs in memory and time: each admission request charged as
    /// `serve` charges its AdmissionReview ([`review_cost`](crate::server::budget::review_cost)),
    /// [`JUDGE_FACTOR`] times over.
    pub(crate) fn cost(&self) -> crate::server::budget::ReviewCost {
        use crate::server::budget::{ReviewCost, review_cost};
        self.requests
            .iter()
            .fold(ReviewCost::default(), |total, (_, req)| {
                // An AdmissionRequest always serialises; an empty body would be charged nothing.
                let body = serde_json::to_vec(req).unwrap_or_default();
                total.plus(review_cost(&body).times(JUDGE_FACTOR))
            })
    }

    /// The verdict on every object.
    pub(crate) fn judge(self) -> Value {
        let Prepared {
            config,
            requests,
            runtimes,
        } = self;
        let results: Vec<Value> = requests
            .into_iter()
            .map(|(source, req)| result(source, &req, &config.policy, &runtimes))
            .collect();
        json!({"config": config.summary, "runtimes": runtimes.describe(), "results": results})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EIGHT_GPUS: &str =
        include_str!("../../../examples/policy-tests/builtin/resources/train-8-gpus.yaml");
    const TWO_GPUS: &str =
        include_str!("../../../examples/policy-tests/builtin/resources/train-2-gpus.yaml");

    fn ask(config: Option<&str>, manifest: &str) -> Result<Value, InputError> {
        review(&ReviewRequest {
            config: config.map(str::to_string),
            manifest: manifest.into(),
            ..ReviewRequest::default()
        })
    }

    #[test]
    fn the_diff_keeps_common_lines_and_marks_the_changes() {
        let got: String = line_diff("a\nb\nc\nd\n", "a\nc\nx\nd\n")
            .iter()
            .map(|l| format!("{}{}\n", l.tag, l.text))
            .collect();
        assert_eq!(got, " a\n-b\n c\n+x\n d\n");
        assert!(line_diff("", "").is_empty());
        let added: Vec<char> = line_diff("", "a\nb\n").iter().map(|l| l.tag).collect();
        assert_eq!(added, ['+', '+']);
    }

    #[test]
    fn the_built_in_policy_denies_eight_gpus_with_the_rule_that_said_so() {
        let answer = ask(None, EIGHT_GPUS).unwrap();
        let r = &answer["results"][0];
        assert_eq!(r["verdict"], "denied", "{r}");
        assert_eq!(r["deniedBy"], "validate");
        let message = r["message"].as_str().unwrap();
        assert!(
            message.contains(r#"queue "gpu-queue""#) && message.contains("exceeds maximum 4"),
            "{message}"
        );
        let rules: Vec<&str> = r["trail"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["rule"].as_str().unwrap())
            .collect();
        assert!(rules.contains(&"limits.variables"), "{rules:?}");
        assert!(rules.contains(&"mutation security-context"), "{rules:?}");
    }

    #[test]
    fn a_wandb_queue_with_variables_judges_like_its_import() {
        let config = "kubernetes:\n  spec:\n    template:\n      spec:\n        containers:\n          - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n";
        let mut request = ReviewRequest {
            config: Some(config.into()),
            wandb_queue: Some("gpu-queue".into()),
            manifest: EIGHT_GPUS.into(),
            ..ReviewRequest::default()
        };
        let err = review(&request).unwrap_err();
        assert_eq!(err.input, "config");
        assert_eq!(
            err.details,
            [
                "queues.gpu-queue.limits.variables.gpus.type: missing `type` (one of integer, number, string, quantity)"
            ]
        );
        request.wandb_variables =
            Some("gpus: {schema: {type: integer, minimum: 0, maximum: 4}}".into());
        let answer = review(&request).unwrap();
        assert_eq!(answer["results"][0]["verdict"], "denied");
        assert!(
            answer["config"]["enforces"][0]
                .as_str()
                .unwrap()
                .starts_with("gpu-queue: variable \"gpus\"")
        );
        request.manifest = TWO_GPUS.into();
        let r = &review(&request).unwrap()["results"][0];
        assert_eq!(r["verdict"], "allowed", "{r}");
        assert!(
            r["diff"].as_array().unwrap().iter().any(
                |l| l["tag"] == "+" && l["text"].as_str().unwrap().contains("securityContext:")
            ),
            "{r}"
        );
    }

    #[test]
    fn bad_config_and_manifests_are_explained() {
        let err = ask(
            Some("queues: {q: {limits: {enforcment: deny}}}\n"),
            TWO_GPUS,
        )
        .unwrap_err();
        assert_eq!(
            (err.input, err.error.as_str()),
            ("config", "config: invalid config")
        );
        assert!(err.details[0].contains("enforcment"), "{err:?}");
        let err = ask(None, "   ").unwrap_err();
        assert_eq!(err.input, "manifest");
        let err = ask(None, "kind: [\n").unwrap_err();
        assert!(err.error.starts_with("manifest: "), "{err:?}");
        let err = ask(None, "metadata: {name: x}\n").unwrap_err();
        assert!(err.error.contains("apiVersion"), "{err:?}");
        let many =
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\n".repeat(MAX_DOCUMENTS + 1);
        assert!(ask(None, &many).unwrap_err().error.contains("at most"));
        let update = ReviewRequest {
            manifest: TWO_GPUS.into(),
            operation: Op::Update,
            ..ReviewRequest::default()
        };
        assert_eq!(review(&update).unwrap_err().input, "oldManifest");
    }

    #[test]
    fn an_exemption_goes_by_who_asks() {
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: kaniko, namespace: wandb, labels: {wandb: launch, wandb.ai/monitor: 'true'}}\nspec: {containers: [{name: k, image: 'gcr.io/kaniko-project/executor:v1.8.0'}]}\n";
        let by = |username: &str| {
            let request = ReviewRequest {
                manifest: pod.into(),
                user_info: Some(Requester {
                    username: username.into(),
                    groups: vec![],
                }),
                ..ReviewRequest::default()
            };
            review(&request).unwrap()["results"][0].clone()
        };
        let agent = by("system:serviceaccount:wandb:wandb-launch-serviceaccount-agent");
        assert_eq!(agent["verdict"], "skipped", "{agent}");
        assert_eq!(
            agent["trail"][0]["rule"],
            "exemption \"wandb-image-builds\""
        );
        assert_eq!(by("alice")["skipped"], false);
    }
}
