//! The queue template: W&B queue config text with `{{var}}` placeholders and `${macro}`s.
//!
//! The text is YAML or JSON, pasted as-is. A placeholder may be quoted (`'{{gpus}}'`) or
//! not (`{{gpus}}`, which YAML would otherwise read as a flow mapping). The template is
//! parsed into a tree, and every scalar leaf becomes a [`TemplateLeaf`]: where it sits
//! (relative to a pod template when it is under one) and what it holds.
//!
//! Every shape a W&B Kubernetes queue config comes in is accepted ([`Wrapper`]): the object
//! itself (the minikube tutorial), the object under `kubernetes:` (the UI and the docs'
//! Kubeflow example), and `resource_args: {kubernetes: …}` (the queue API and the Terraform
//! provider's `resource_config`). The workload kind comes from `kind` and `apiVersion`, from
//! `kind` or `apiVersion` alone, or from the shape: each kind's descriptor names the `spec`
//! fields that sign it ([`crate::kinds::KindSpec::signature`]: `spec.pytorchReplicaSpecs`,
//! `spec.tasks`); a template whose kind cannot be told is an error, never a template that
//! silently checks nothing.

use super::path::{FieldPath, Segment};
use crate::workload::{self, WorkloadKind};
use serde_json::Value;

/// What a template position is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Anchor {
    /// The workload object's root (`spec.backoffLimit`).
    Root,
    /// Each pod template of the workload (`spec.containers[0]...` under it), whatever the kind.
    PodTemplate,
}

/// A part of a string leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// `{{name}}`: a queue variable.
    Variable(String),
    /// `${name}`: filled in by the launch agent; not a variable, matches anything.
    Macro,
}

/// The content of a leaf.
#[derive(Debug, Clone, PartialEq)]
pub enum LeafContent {
    /// A fixed scalar (`restartPolicy: Never`, `cpu: 4`).
    Literal(Value),
    /// A string with placeholders or macros, e.g. `[Variable("gpus")]` or
    /// `[Macro, Text("-pytorch-job")]`.
    Pattern(Vec<Piece>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct TemplateLeaf {
    pub anchor: Anchor,
    /// True when a key on the way holds a `${macro}`: the agent picks the key, so the
    /// position cannot be found in a workload.
    pub under_macro_key: bool,
    /// Relative to the anchor (for a pod template: starts with `spec` or `metadata`).
    pub path: FieldPath,
    /// Where it was in the template, for messages about the config.
    pub template_path: FieldPath,
    pub content: LeafContent,
}

impl TemplateLeaf {
    /// The variables this leaf holds.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        let pieces: &[Piece] = match &self.content {
            LeafContent::Pattern(p) => p,
            LeafContent::Literal(_) => &[],
        };
        pieces.iter().filter_map(|p| match p {
            Piece::Variable(name) => Some(name.as_str()),
            _ => None,
        })
    }
}

/// How the Kubernetes object was wrapped in the queue config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrapper {
    /// The object itself (`spec: …`), as in the W&B minikube tutorial.
    Bare,
    /// `kubernetes: {…}`, as in the W&B UI and the docs' Kubeflow example.
    Kubernetes,
    /// `resource_args: {kubernetes: {…}}`, as the W&B queue API and the Terraform provider's
    /// `resource_config` store it.
    ResourceArgs,
}

impl Wrapper {
    /// The keys in front of the object.
    pub fn prefix(self) -> &'static [&'static str] {
        match self {
            Wrapper::Bare => &[],
            Wrapper::Kubernetes => &["kubernetes"],
            Wrapper::ResourceArgs => &["resource_args", "kubernetes"],
        }
    }

    /// How the shape is called in docs and messages.
    pub fn describe(self) -> &'static str {
        match self {
            Wrapper::Bare => "the object itself",
            Wrapper::Kubernetes => "under `kubernetes:`",
            Wrapper::ResourceArgs => "under `resource_args.kubernetes`",
        }
    }
}

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template {
    /// The kind the template describes.
    pub kind: WorkloadKind,
    pub wrapper: Wrapper,
    pub leaves: Vec<TemplateLeaf>,
    /// `{{variables}}` outside the Kubernetes object (next to `resource_args`), which no
    /// workload has: (variable, where).
    pub stray_variables: Vec<(String, FieldPath)>,
}

const SENTINEL_START: &str = "__launchgate_var_";
const SENTINEL_END: &str = "__";

fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// Replaces each `{{ name }}` and `${name}` with a plain-scalar-safe sentinel, so unquoted
/// placeholders and macros survive YAML parsing (even in flow collections, where `{`/`}`
/// are syntax); returns the text and what each sentinel stands for (`{{name}}`, `${name}`).
fn protect_placeholders(text: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut originals = Vec::new();
    let mut rest = text;
    loop {
        let placeholder = rest.find("{{");
        let macro_ = rest.find("${");
        let (start, is_macro) = match (placeholder, macro_) {
            (Some(p), Some(m)) if m < p => (m, true),
            (Some(p), _) => (p, false),
            (None, Some(m)) => (m, true),
            (None, None) => break,
        };
        let after = &rest[start + 2..];
        let close = if is_macro { "}" } else { "}}" };
        let Some(end) = after.find(close) else { break };
        let name = after[..end].trim();
        let valid = if is_macro {
            !name.is_empty()
                && after[..end]
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_')
        } else {
            is_variable_name(name)
        };
        out.push_str(&rest[..start]);
        let consumed = start + 2 + end + close.len();
        if valid {
            out.push_str(&format!(
                "{SENTINEL_START}{}{SENTINEL_END}",
                originals.len()
            ));
            originals.push(if is_macro {
                format!("${{{name}}}")
            } else {
                format!("{{{{{name}}}}}")
            });
        } else {
            out.push_str(&rest[start..consumed]);
        }
        rest = &rest[consumed..];
    }
    out.push_str(rest);
    (out, originals)
}

/// Puts `{{name}}` / `${name}` back where a sentinel is.
fn restore_placeholders(text: &str, originals: &[String]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(SENTINEL_START) {
        let after = &rest[start + SENTINEL_START.len()..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        let original = after[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|i| originals.get(i))
            .filter(|_| after[digits..].starts_with(SENTINEL_END));
        match original {
            Some(original) => {
                out.push_str(&rest[..start]);
                out.push_str(original);
                rest = &after[digits + SENTINEL_END.len()..];
            }
            None => {
                out.push_str(&rest[..start + SENTINEL_START.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn restore_tree(value: &mut Value, names: &[String]) {
    match value {
        Value::String(s) => *s = restore_placeholders(s, names),
        Value::Array(items) => items.iter_mut().for_each(|v| restore_tree(v, names)),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (key, mut v) in entries {
                restore_tree(&mut v, names);
                map.insert(restore_placeholders(&key, names), v);
            }
        }
        _ => {}
    }
}

/// The first `{{ name }}` with a valid name: (start, end, piece).
fn find_placeholder(text: &str) -> Option<(usize, usize, Piece)> {
    let mut from = 0;
    while let Some(offset) = text[from..].find("{{") {
        let start = from + offset;
        let end = text[start + 2..].find("}}")? + start + 2;
        let name = text[start + 2..end].trim();
        if is_variable_name(name) {
            return Some((start, end + 2, Piece::Variable(name.to_string())));
        }
        from = start + 2;
    }
    None
}

/// Splits a string into text, `{{variables}}` and `${macros}`.
pub fn pieces(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        let placeholder = find_placeholder(rest);
        let macro_ = rest.find("${").and_then(|start| {
            let end = rest[start + 2..].find('}')? + start + 2;
            Some((start, end + 1, Piece::Macro))
        });
        let next = match (placeholder, macro_) {
            (Some(p), Some(m)) => Some(if m.0 < p.0 { m } else { p }),
            (p, m) => p.or(m),
        };
        let Some((start, end, piece)) = next else {
            literal.push_str(rest);
            break;
        };
        literal.push_str(&rest[..start]);
        if !literal.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut literal)));
        }
        out.push(piece);
        rest = &rest[end..];
    }
    if !literal.is_empty() {
        out.push(Piece::Text(literal));
    }
    out
}

/// Matches `value` against a pattern; returns the text captured by each non-text piece, in
/// order, or `None` when the literal parts do not match. Gaps take the shortest text that
/// lets the next literal part match (the last literal part must end the value).
pub fn match_pattern<'v>(pattern: &[Piece], value: &'v str) -> Option<Vec<&'v str>> {
    let mut rest = value;
    let mut captures = Vec::new();
    for (i, piece) in pattern.iter().enumerate() {
        match piece {
            Piece::Text(text) => rest = rest.strip_prefix(text.as_str())?,
            Piece::Variable(_) | Piece::Macro => match pattern.get(i + 1) {
                None => {
                    captures.push(rest);
                    rest = "";
                }
                Some(Piece::Text(next)) => {
                    let at = if i + 2 == pattern.len() {
                        rest.strip_suffix(next.as_str())?.len()
                    } else {
                        rest.find(next.as_str())?
                    };
                    captures.push(&rest[..at]);
                    rest = &rest[at..];
                }
                Some(_) => captures.push(""),
            },
        }
    }
    rest.is_empty().then_some(captures)
}

/// The kinds a template can describe, for messages: `Pod (v1), Job (batch/v1), …`.
fn known_kinds() -> String {
    WorkloadKind::all()
        .map(|k| format!("{} ({})", k.api_kind(), k.api_version()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Finds the Kubernetes object in a queue config: bare, under `kubernetes:`, or under
/// `resource_args.kubernetes`.
pub fn unwrap(doc: &Value) -> Result<(Wrapper, &Value), String> {
    let Some(map) = doc.as_object() else {
        return Err("template must be a mapping: the W&B queue config (a Kubernetes object, bare, under `kubernetes:` or under `resource_args.kubernetes`)".into());
    };
    let looks_bare = ["apiVersion", "kind", "spec"]
        .iter()
        .any(|k| map.contains_key(*k));
    if let Some(args) = map.get("resource_args") {
        if looks_bare {
            return Err("template has both `resource_args` and a top-level apiVersion/kind/spec: give the queue config in one shape".into());
        }
        let Some(args) = args.as_object() else {
            return Err("`resource_args` must be a mapping with a `kubernetes` entry".into());
        };
        return match args.get("kubernetes") {
            Some(inner) if inner.is_object() => Ok((Wrapper::ResourceArgs, inner)),
            Some(_) => {
                Err("`resource_args.kubernetes` must be a mapping (the Kubernetes object)".into())
            }
            None => Err(format!(
                "`resource_args` has no `kubernetes` entry (found: {}): launchgate checks Kubernetes queues only",
                args.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        };
    }
    if let Some(inner) = map.get("kubernetes")
        && !looks_bare
    {
        return match inner {
            Value::Object(_) => Ok((Wrapper::Kubernetes, inner)),
            _ => Err("`kubernetes` must be a mapping (the Kubernetes object)".into()),
        };
    }
    Ok((Wrapper::Bare, doc))
}

/// The workload kind of a (unwrapped) template object, or why it cannot be told.
pub fn infer_kind(object: &Value) -> Result<WorkloadKind, String> {
    let text = |key: &str| -> Result<Option<&str>, String> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.contains("{{") || s.contains("${") => Err(format!(
                "`{key}: {s}` is filled in at launch, so the workload kind cannot be known"
            )),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(format!("`{key}` must be a string, got {other}")),
        }
    };
    let api_version = text("apiVersion")?;
    let kind = text("kind")?;
    let spec = object.get("spec");
    let has = |key: &str| spec.and_then(|s| s.get(key)).is_some();
    let unknown = |what: String| {
        Err(format!(
            "{what} is not a workload kind launchgate checks ({}), so no limit of this queue could ever apply",
            known_kinds()
        ))
    };
    // A kind's signature: one of its `spec` fields is there.
    let signed = |k: &WorkloadKind| k.spec().signature.iter().any(|f| has(f));
    match (api_version, kind) {
        (Some(api_version), Some(kind)) => {
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            match WorkloadKind::from_gvk(group, version, kind) {
                Some(k) => Ok(k),
                None => unknown(format!("kind {kind:?} of apiVersion {api_version:?}")),
            }
        }
        // Kinds of the same name (a Volcano Job, a batch/v1 Job) are told apart by signature.
        (None, Some(name)) => {
            let named: Vec<WorkloadKind> = WorkloadKind::all()
                .filter(|k| k.api_kind() == name)
                .collect();
            match named.iter().find(|k| signed(k)).or_else(|| {
                named
                    .iter()
                    .find(|k| named.len() == 1 || k.spec().signature.is_empty())
            }) {
                Some(k) => Ok(*k),
                None => unknown(format!("kind {name:?}")),
            }
        }
        // An apiVersion that also serves kinds launchgate does not check (kubeflow.org/v1's
        // TFJob) is a kind of it only with its signature.
        (Some(api_version), None) => {
            match WorkloadKind::all()
                .filter(|k| k.api_version() == api_version)
                .find(|k| signed(k) || !k.spec().shared_version)
            {
                Some(k) => Ok(k),
                None => unknown(format!("apiVersion {api_version:?} without a `kind`")),
            }
        }
        // A template that names neither `apiVersion` nor `kind` and has no kind's signature is
        // W&B Launch's default resource.
        (None, None) => Ok(WorkloadKind::all()
            .find(signed)
            .unwrap_or_else(WorkloadKind::launch_default)),
    }
}

/// A W&B template's text (YAML or JSON) as a tree, with its `{{variable}}` placeholders kept
/// whether they are quoted or not (`gpus: {{gpus}}` is not YAML on its own). Every reader of
/// a queue's template text (the limits, `import-queue`) parses it here, so they accept the same
/// forms.
pub(crate) fn parse_text(text: &str) -> Result<Value, serde_yaml::Error> {
    let (protected, names) = protect_placeholders(text);
    let mut doc: Value = serde_yaml::from_str(&protected)?;
    restore_tree(&mut doc, &names);
    Ok(doc)
}

/// Parses the template (a string of YAML/JSON, or an already structured value).
pub fn parse(source: &Value) -> Result<Template, String> {
    let doc = match source {
        Value::String(text) => {
            parse_text(text).map_err(|e| format!("template is not valid YAML or JSON: {e}"))?
        }
        other => other.clone(),
    };
    let (wrapper, object) = unwrap(&doc)?;
    let prefix: Vec<Segment> = wrapper
        .prefix()
        .iter()
        .map(|k| Segment::Key((*k).to_string()))
        .collect();
    let kind = infer_kind(object).map_err(|why| {
        if wrapper == Wrapper::Bare {
            why
        } else {
            format!("{}: {why}", FieldPath(prefix.clone()))
        }
    })?;
    let pod_templates: Vec<FieldPath> = workload::templates(kind, object)
        .into_iter()
        .map(|(info, _)| FieldPath::parse(&info.path_text).unwrap_or_default())
        .collect();
    let mut walk = Walk {
        pod_templates: &pod_templates,
        prefix_len: prefix.len(),
        leaves: Vec::new(),
        errors: Vec::new(),
    };
    walk.collect(object, &mut prefix.clone(), false);
    if let Some(first) = walk.errors.into_iter().next() {
        return Err(first);
    }
    // Placeholders next to the object (e.g. beside `resource_args`) land in no workload.
    let mut stray_variables = Vec::new();
    if let Some((last, parents)) = wrapper.prefix().split_last() {
        let mut outside = doc.clone();
        let parent: String = parents.iter().map(|k| format!("/{k}")).collect();
        if let Some(map) = outside.pointer_mut(&parent).and_then(Value::as_object_mut) {
            map.remove(*last);
        }
        let mut outer = Walk {
            pod_templates: &[],
            prefix_len: 0,
            leaves: Vec::new(),
            errors: Vec::new(),
        };
        outer.collect(&outside, &mut Vec::new(), false);
        for leaf in &outer.leaves {
            for name in leaf.variables() {
                stray_variables.push((name.to_string(), leaf.template_path.clone()));
            }
        }
    }
    Ok(Template {
        kind,
        wrapper,
        leaves: walk.leaves,
        stray_variables,
    })
}

struct Walk<'a> {
    pod_templates: &'a [FieldPath],
    /// Segments of the wrapper in front of the object (not part of workload paths).
    prefix_len: usize,
    leaves: Vec<TemplateLeaf>,
    errors: Vec<String>,
}

impl Walk<'_> {
    fn collect(&mut self, value: &Value, at: &mut Vec<Segment>, under_macro_key: bool) {
        let content = match value {
            Value::Null => return,
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    at.push(Segment::Index(i));
                    self.collect(item, at, under_macro_key);
                    at.pop();
                }
                return;
            }
            Value::Object(map) => {
                for (key, item) in map {
                    if key.contains("{{") && find_placeholder(key).is_some() {
                        self.errors.push(format!(
                            "placeholder in a key at {} ({key:?}): only values can be variables",
                            FieldPath(at.clone())
                        ));
                    }
                    let macro_key = key.contains("${");
                    at.push(Segment::Key(key.clone()));
                    self.collect(item, at, under_macro_key || macro_key);
                    at.pop();
                }
                return;
            }
            Value::String(s) if s.contains("{{") || s.contains("${") => {
                let pattern = pieces(s);
                if pattern.iter().all(|p| matches!(p, Piece::Text(_))) {
                    LeafContent::Literal(value.clone())
                } else {
                    LeafContent::Pattern(pattern)
                }
            }
            scalar => LeafContent::Literal(scalar.clone()),
        };
        let template_path = FieldPath(at.clone());
        let object_path = FieldPath(at[self.prefix_len.min(at.len())..].to_vec());
        // The innermost pod template containing this leaf, if any.
        let pod_template = self
            .pod_templates
            .iter()
            .filter(|t| object_path.starts_with(t))
            .max_by_key(|t| t.0.len());
        let (anchor, path) = match pod_template {
            Some(t) => (
                Anchor::PodTemplate,
                FieldPath(object_path.0[t.0.len()..].to_vec()),
            ),
            None => (Anchor::Root, object_path),
        };
        self.leaves.push(TemplateLeaf {
            anchor,
            under_macro_key,
            path,
            template_path,
            content,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template leaf that holds `{{variable}}`.
    fn holding<'a>(t: &'a Template, variable: &str) -> &'a TemplateLeaf {
        t.leaves
            .iter()
            .find(|l| l.variables().any(|v| v == variable))
            .unwrap_or_else(|| panic!("no leaf holds {{{{{variable}}}}}"))
    }
    use serde_json::json;

    const MINIKUBE_TEMPLATE: &str = "spec:
  template:
    spec:
      containers:
        - image: ${image_uri}
          resources:
            limits:
              cpu: 4
              memory: 12Gi
              nvidia.com/gpu: '{{gpus}}'
      restartPolicy: Never
  backoffLimit: 0
";

    fn leaf<'t>(t: &'t Template, path: &str) -> &'t TemplateLeaf {
        t.leaves
            .iter()
            .find(|l| l.template_path.to_string() == path)
            .unwrap_or_else(|| panic!("no leaf {path} in {:#?}", t.leaves))
    }

    #[test]
    fn seed_template_yields_pod_relative_variable_location() {
        let t = parse(&json!(MINIKUBE_TEMPLATE)).unwrap();
        assert_eq!(t.kind, WorkloadKind::BatchJob);
        let gpus = leaf(
            &t,
            r#"spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#,
        );
        assert_eq!(gpus.anchor, Anchor::PodTemplate);
        assert_eq!(
            gpus.path.to_string(),
            r#"spec.containers[0].resources.limits["nvidia.com/gpu"]"#
        );
        assert_eq!(
            gpus.content,
            LeafContent::Pattern(vec![Piece::Variable("gpus".into())])
        );
        let image = leaf(&t, "spec.template.spec.containers[0].image");
        assert_eq!(image.content, LeafContent::Pattern(vec![Piece::Macro]));
        let backoff = leaf(&t, "spec.backoffLimit");
        assert_eq!(backoff.anchor, Anchor::Root);
        assert_eq!(backoff.content, LeafContent::Literal(json!(0)));
    }

    #[test]
    fn json_form_and_unquoted_placeholders_parse_the_same() {
        let json_text = r#"{"spec":{"template":{"spec":{"containers":[{"image":"${image_uri}",
            "resources":{"limits":{"cpu":4,"memory":"12Gi","nvidia.com/gpu":"{{gpus}}"}}}],
            "restartPolicy":"Never"}},"backoffLimit":0}}"#;
        let unquoted = MINIKUBE_TEMPLATE.replace("'{{gpus}}'", "{{ gpus }}");
        let a = parse(&json!(MINIKUBE_TEMPLATE)).unwrap().leaves;
        assert_eq!(a, parse(&json!(json_text)).unwrap().leaves);
        assert_eq!(a, parse(&json!(unquoted)).unwrap().leaves);
    }

    #[test]
    fn volcano_and_pytorch_templates_map_to_their_pod_templates() {
        let vc = "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
spec:
  schedulerName: volcano
  tasks:
    - name: worker
      replicas: '{{workers}}'
      template:
        spec:
          containers:
            - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}
";
        let t = parse(&json!(vc)).unwrap();
        assert_eq!(t.kind, WorkloadKind::VolcanoJob);
        let gpus = holding(&t, "gpus");
        assert_eq!(gpus.anchor, Anchor::PodTemplate);
        assert_eq!(
            gpus.path.to_string(),
            r#"spec.containers[0].resources.limits["nvidia.com/gpu"]"#
        );
        let workers = holding(&t, "workers");
        assert_eq!(
            (workers.anchor, workers.path.to_string()),
            (Anchor::Root, "spec.tasks[0].replicas".into())
        );
        let pt = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {
            "Worker": {"template": {"spec": {"containers": [{"image": "{{image}}"}]}}}}}});
        let t = parse(&pt).unwrap();
        let image = holding(&t, "image");
        assert_eq!(
            (image.anchor, image.path.to_string()),
            (Anchor::PodTemplate, "spec.containers[0].image".into())
        );
    }

    #[test]
    fn every_wandb_shape_finds_the_same_pod_template_position() {
        let object = json!({"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1", "spec": {"pytorchReplicaSpecs": {
            "Worker": {"replicas": 2, "template": {"spec": {"containers": [
                {"image": "${image_uri}", "resources": {"limits": {"nvidia.com/gpu": "{{gpus}}"}}}]}}}}}});
        let shapes = [
            (object.clone(), Wrapper::Bare, ""),
            (
                json!({"kubernetes": object}),
                Wrapper::Kubernetes,
                "kubernetes.",
            ),
            (
                json!({"resource_args": {"kubernetes": object}}),
                Wrapper::ResourceArgs,
                "resource_args.kubernetes.",
            ),
        ];
        for (doc, wrapper, prefix) in shapes {
            for source in [doc.clone(), json!(doc.to_string())] {
                let t = parse(&source).unwrap();
                assert_eq!((t.kind, t.wrapper), (WorkloadKind::PyTorchJob, wrapper));
                let gpus = holding(&t, "gpus");
                assert_eq!(gpus.anchor, Anchor::PodTemplate);
                assert_eq!(
                    gpus.path.to_string(),
                    r#"spec.containers[0].resources.limits["nvidia.com/gpu"]"#
                );
                assert_eq!(
                    gpus.template_path.to_string(),
                    format!(
                        r#"{prefix}spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#
                    )
                );
            }
        }
    }

    #[test]
    fn kind_is_inferred_with_or_without_api_version() {
        let kind = |v: Value| infer_kind(&v);
        assert_eq!(
            kind(json!({"kind": "PyTorchJob"})),
            Ok(WorkloadKind::PyTorchJob)
        );
        assert_eq!(kind(json!({"kind": "Job"})), Ok(WorkloadKind::BatchJob));
        assert_eq!(
            kind(json!({"kind": "Job", "spec": {"tasks": []}})),
            Ok(WorkloadKind::VolcanoJob)
        );
        assert_eq!(kind(json!({"kind": "Pod"})), Ok(WorkloadKind::Pod));
        assert_eq!(
            kind(json!({"apiVersion": "batch.volcano.sh/v1alpha1"})),
            Ok(WorkloadKind::VolcanoJob)
        );
        assert_eq!(
            kind(json!({"spec": {"pytorchReplicaSpecs": {}}})),
            Ok(WorkloadKind::PyTorchJob)
        );
        assert_eq!(
            kind(json!({"spec": {"tasks": [{"template": {}}]}})),
            Ok(WorkloadKind::VolcanoJob)
        );
        assert_eq!(
            kind(json!({"spec": {"template": {}}})),
            Ok(WorkloadKind::BatchJob)
        );
        assert_eq!(kind(json!({})), Ok(WorkloadKind::BatchJob));
        assert_eq!(
            kind(json!({"spec": {"replicatedJobs": []}})),
            Ok(WorkloadKind::JobSet)
        );
        assert_eq!(
            kind(json!({"spec": {"trainer": {}}})),
            Ok(WorkloadKind::TrainJob)
        );
        assert_eq!(
            kind(json!({"apiVersion": "kubeflow.org/v1", "spec": {"pytorchReplicaSpecs": {}}})),
            Ok(WorkloadKind::PyTorchJob)
        );
        assert_eq!(
            kind(json!({"apiVersion": "jobset.x-k8s.io/v1alpha2"})),
            Ok(WorkloadKind::JobSet)
        );
        // The message lists every registered kind.
        let err = kind(json!({"kind": "TFJob"})).unwrap_err();
        for k in WorkloadKind::all() {
            let shown = format!("{} ({})", k.api_kind(), k.api_version());
            assert!(err.contains(&shown), "{err}");
        }
        for bad in [
            json!({"kind": "TFJob"}),
            json!({"kind": "Job", "apiVersion": "kubeflow.org/v1"}),
            json!({"kind": "TFJob", "apiVersion": "kubeflow.org/v1"}),
            json!({"kind": "${kind}"}),
            json!({"kind": 3}),
            json!({"apiVersion": "kubeflow.org/v1"}),
        ] {
            let err = kind(bad.clone()).unwrap_err();
            assert!(
                err.contains("not a workload kind")
                    || err.contains("cannot be known")
                    || err.contains("must be a string"),
                "{bad}: {err}"
            );
        }
        let err = parse(&json!("kubernetes:\n  kind: TFJob\n  spec: {}\n")).unwrap_err();
        assert!(err.starts_with("kubernetes: kind \"TFJob\""), "{err}");
    }

    #[test]
    fn wrappers_are_checked() {
        for (doc, expected) in [
            (
                json!({"resource_args": {"sagemaker": {}}}),
                "no `kubernetes` entry (found: sagemaker)",
            ),
            (json!({"kubernetes": "x"}), "must be a mapping"),
            (
                json!({"resource_args": {"kubernetes": {}}, "spec": {}}),
                "in one shape",
            ),
        ] {
            let err = parse(&doc).unwrap_err();
            assert!(err.contains(expected), "{doc}: {err}");
        }
        let t = parse(&json!({"resource_args": {"kubernetes": {"spec": {}}}, "note": "{{gpus}}"}))
            .unwrap();
        assert_eq!(t.stray_variables.len(), 1);
        assert_eq!(t.stray_variables[0].1.to_string(), "note");
    }

    #[test]
    fn unquoted_macros_parse_in_flow_collections() {
        let t = parse(&json!(
            "spec: {template: {spec: {containers: [{image: ${image_uri}, args: [${run_id}, '{{x}}'], resources: {limits: {nvidia.com/gpu: {{ gpus }}}}}]}}}\n"
        ))
        .unwrap();
        assert_eq!(
            leaf(&t, "spec.template.spec.containers[0].image").content,
            LeafContent::Pattern(vec![Piece::Macro])
        );
        assert_eq!(
            leaf(&t, "spec.template.spec.containers[0].args[0]").content,
            LeafContent::Pattern(vec![Piece::Macro])
        );
        assert_eq!(
            leaf(
                &t,
                r#"spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#
            )
            .content,
            LeafContent::Pattern(vec![Piece::Variable("gpus".into())])
        );
        // Not a macro: left as written.
        let t = parse(&json!("metadata: {name: 'a-${not a macro}'}\n")).unwrap();
        assert_eq!(
            leaf(&t, "metadata.name").content,
            LeafContent::Pattern(vec![Piece::Text("a-".into()), Piece::Macro])
        );
    }

    #[test]
    fn macros_are_accepted_anywhere() {
        let t = parse(&json!(
            "metadata:\n  name: ${run_id}-job\n  labels:\n    ${project_name}: yes\nspec:\n  template:\n    spec:\n      containers:\n        - image: ${image_uri}\n          args: [--project, '${project_name}', '${entity_name}/${run_name}']\n"
        ))
        .unwrap();
        let label = t
            .leaves
            .iter()
            .find(|l| l.template_path.to_string().starts_with("metadata.labels"))
            .unwrap();
        assert!(label.under_macro_key);
        let arg = leaf(&t, "spec.template.spec.containers[0].args[2]");
        assert_eq!(
            arg.content,
            LeafContent::Pattern(vec![Piece::Macro, Piece::Text("/".into()), Piece::Macro])
        );
    }

    #[test]
    fn bad_templates_are_explained() {
        assert!(
            parse(&json!("spec: [unclosed"))
                .unwrap_err()
                .contains("not valid YAML")
        );
        assert!(
            parse(&json!("- a\n- b"))
                .unwrap_err()
                .contains("must be a mapping")
        );
        assert!(
            parse(&json!("spec:\n  '{{k}}': 1\n"))
                .unwrap_err()
                .contains("placeholder in a key")
        );
    }

    #[test]
    fn patterns_split_and_match() {
        let p = pieces("${project}-{{size}}-run");
        assert_eq!(
            p,
            vec![
                Piece::Macro,
                Piece::Text("-".into()),
                Piece::Variable("size".into()),
                Piece::Text("-run".into())
            ]
        );
        assert_eq!(
            match_pattern(&p, "mnist-large-run"),
            Some(vec!["mnist", "large"])
        );
        assert_eq!(match_pattern(&p, "a-b-c-run"), Some(vec!["a", "b-c"]));
        assert_eq!(match_pattern(&p, "mnist-large-walk"), None);
        assert_eq!(
            match_pattern(&pieces("{{x}}"), "anything"),
            Some(vec!["anything"])
        );
        assert_eq!(match_pattern(&pieces("acme/{{x}}"), "evil/x"), None);
        assert_eq!(
            pieces("{{ not a name }}"),
            vec![Piece::Text("{{ not a name }}".into())]
        );
        assert_eq!(
            pieces("{{ not valid }}{{yes}}"),
            vec![
                Piece::Text("{{ not valid }}".into()),
                Piece::Variable("yes".into())
            ]
        );
    }
}
