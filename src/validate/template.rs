//! The queue template: W&B queue config text with `{{var}}` placeholders and `${macro}`s.
//!
//! The text is YAML or JSON, pasted as-is. A placeholder may be quoted (`'{{gpus}}'`) or
//! not (`{{gpus}}`, which YAML would otherwise read as a flow mapping). The template is
//! parsed into a tree, and every scalar leaf becomes a [`TemplateLeaf`]: where it sits
//! (relative to a pod template when it is under one) and what it holds.

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

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template {
    /// The kind the template describes (`apiVersion`/`kind`, else batch/v1 Job); `None`
    /// for a template of an unknown kind.
    pub kind: Option<WorkloadKind>,
    pub leaves: Vec<TemplateLeaf>,
}

const SENTINEL_START: &str = "__launchgate_var_";
const SENTINEL_END: &str = "__";

fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// Replaces each `{{ name }}` with a plain-scalar-safe sentinel, so unquoted placeholders
/// survive YAML parsing; returns the text and the names by sentinel number.
fn protect_placeholders(text: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let name = after[..end].trim();
        out.push_str(&rest[..start]);
        if is_variable_name(name) {
            out.push_str(&format!("{SENTINEL_START}{}{SENTINEL_END}", names.len()));
            names.push(name.to_string());
        } else {
            out.push_str(&rest[start..start + 2 + end + 2]);
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    (out, names)
}

/// Puts `{{name}}` back where a sentinel is.
fn restore_placeholders(text: &str, names: &[String]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(SENTINEL_START) {
        let after = &rest[start + SENTINEL_START.len()..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        let name = after[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|i| names.get(i))
            .filter(|_| after[digits..].starts_with(SENTINEL_END));
        match name {
            Some(name) => {
                out.push_str(&rest[..start]);
                out.push_str("{{");
                out.push_str(name);
                out.push_str("}}");
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

/// Parses the template (a string of YAML/JSON, or an already structured value).
pub fn parse(source: &Value) -> Result<Template, String> {
    let doc = match source {
        Value::String(text) => {
            let (protected, names) = protect_placeholders(text);
            let mut doc: Value = serde_norway::from_str(&protected)
                .map_err(|e| format!("template is not valid YAML or JSON: {e}"))?;
            restore_tree(&mut doc, &names);
            doc
        }
        other => other.clone(),
    };
    if !doc.is_object() {
        return Err("template must be a mapping (a Kubernetes object without apiVersion/kind is read as a batch/v1 Job)".into());
    }
    let has_kind = doc.get("kind").is_some() || doc.get("apiVersion").is_some();
    let kind = if has_kind {
        WorkloadKind::of_object(&doc)
    } else {
        Some(WorkloadKind::BatchJob)
    };
    let pod_templates: Vec<FieldPath> = match kind {
        Some(kind) => workload::templates(kind, &doc)
            .into_iter()
            .map(|(info, _)| FieldPath::parse(&info.path).unwrap_or_default())
            .collect(),
        None => Vec::new(),
    };
    let mut leaves = Vec::new();
    let mut errors = Vec::new();
    collect_leaves(
        &doc,
        &mut Vec::new(),
        &pod_templates,
        &mut leaves,
        &mut errors,
    );
    if let Some(first) = errors.into_iter().next() {
        return Err(first);
    }
    Ok(Template { kind, leaves })
}

fn collect_leaves(
    value: &Value,
    at: &mut Vec<Segment>,
    pod_templates: &[FieldPath],
    leaves: &mut Vec<TemplateLeaf>,
    errors: &mut Vec<String>,
) {
    let content = match value {
        Value::Null => return,
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(Segment::Index(i));
                collect_leaves(item, at, pod_templates, leaves, errors);
                at.pop();
            }
            return;
        }
        Value::Object(map) => {
            for (key, item) in map {
                if key.contains("{{") || key.contains("${") {
                    errors.push(format!(
                        "placeholder in a key at {} ({key:?}): only values can be variables",
                        FieldPath(at.clone())
                    ));
                }
                at.push(Segment::Key(key.clone()));
                collect_leaves(item, at, pod_templates, leaves, errors);
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
    // The innermost pod template containing this leaf, if any.
    let pod_template = pod_templates
        .iter()
        .filter(|t| template_path.starts_with(t))
        .max_by_key(|t| t.0.len());
    let (anchor, path) = match pod_template {
        Some(t) => (
            Anchor::PodTemplate,
            FieldPath(template_path.0[t.0.len()..].to_vec()),
        ),
        None => (Anchor::Root, template_path.clone()),
    };
    leaves.push(TemplateLeaf {
        anchor,
        path,
        template_path,
        content,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SEED_YAML: &str = "spec:
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
        let t = parse(&json!(SEED_YAML)).unwrap();
        assert_eq!(t.kind, Some(WorkloadKind::BatchJob));
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
        let unquoted = SEED_YAML.replace("'{{gpus}}'", "{{ gpus }}");
        let a = parse(&json!(SEED_YAML)).unwrap().leaves;
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
        assert_eq!(t.kind, Some(WorkloadKind::VolcanoJob));
        let gpus = t
            .leaves
            .iter()
            .find(|l| l.variables().any(|v| v == "gpus"))
            .unwrap();
        assert_eq!(gpus.anchor, Anchor::PodTemplate);
        assert_eq!(
            gpus.path.to_string(),
            r#"spec.containers[0].resources.limits["nvidia.com/gpu"]"#
        );
        let workers = t
            .leaves
            .iter()
            .find(|l| l.variables().any(|v| v == "workers"))
            .unwrap();
        assert_eq!(
            (workers.anchor, workers.path.to_string()),
            (Anchor::Root, "spec.tasks[0].replicas".into())
        );
        let pt = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {
            "Worker": {"template": {"spec": {"containers": [{"image": "{{image}}"}]}}}}}});
        let t = parse(&pt).unwrap();
        let image = t
            .leaves
            .iter()
            .find(|l| l.variables().any(|v| v == "image"))
            .unwrap();
        assert_eq!(
            (image.anchor, image.path.to_string()),
            (Anchor::PodTemplate, "spec.containers[0].image".into())
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
