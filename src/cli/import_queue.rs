//! `launchgate import-queue FILE`: a W&B queue — the config pasted in the UI, a queue as
//! W&B's API returns it, or a Terraform `wandb_run_queue` resource (`terraform show -json`,
//! `.tf.json`) — turned into a launchgate queue snippet, with one line per limit it will
//! enforce, so the user sees what is checked before installing it.
//!
//! [`import`] is pure: text in, snippet and report out. The snippet is compiled with the same
//! checks as `check-config`; a queue that would not load (e.g. a `{{var}}` without a schema,
//! which the UI keeps apart from the config) is reported as errors, never printed as "ok".

use crate::policy::{Config, Policy, QueueConfig};
use crate::validate::LimitsConfig;
use serde_json::{Map, Value, json};

/// One W&B queue found in the input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FoundQueue {
    pub(crate) name: Option<String>,
    pub(crate) entity: Option<String>,
    /// The resource config: the Kubernetes object, bare or wrapped.
    pub(crate) config: Value,
    /// W&B's template variables (map or list), when the input has them.
    pub(crate) variables: Option<Value>,
    /// The config as the user wrote it, when the input is the config itself.
    pub(crate) text: Option<String>,
}

/// The result of an import.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Imported {
    /// The launchgate config snippet (YAML), `queues: {<key>: {limits: …}}`.
    pub(crate) snippet: String,
    /// What the queues enforce, one line per limit, each starting with the queue key.
    pub(crate) enforces: Vec<String>,
    /// Why the snippet would not load (empty when it loads).
    pub(crate) errors: Vec<String>,
    /// What loads but does not hold as written, as `check-config` warns about it.
    pub(crate) warnings: Vec<String>,
}

const CONFIG_KEYS: [&str; 3] = ["resource_config", "resourceConfig", "config"];
const VARIABLE_KEYS: [&str; 2] = ["template_variables", "templateVariables"];

/// A JSON string value (Terraform and GraphQL carry configs as JSON text, an export may carry
/// the YAML as written) parsed as the limits parse a template — an unquoted `{{var}}` is a
/// placeholder, as `check-config` reads it — else as is.
fn decoded(value: &Value) -> Value {
    match value {
        Value::String(text) => crate::validate::template::parse_text(text)
            .ok()
            .filter(|v| v.is_object() || v.is_array())
            .unwrap_or_else(|| value.clone()),
        other => other.clone(),
    }
}

fn text_of(map: &Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| map.get(*k).and_then(Value::as_str))
        .map(str::to_string)
}

/// True for a queue config itself: a Kubernetes object, bare or wrapped.
fn is_queue_config(map: &Map<String, Value>) -> bool {
    [
        "resource_args",
        "kubernetes",
        "spec",
        "apiVersion",
        "kind",
        "metadata",
    ]
    .iter()
    .any(|k| map.contains_key(*k))
}

/// A queue record (API export or Terraform resource values) in `map`, if it is one.
fn queue_record(map: &Map<String, Value>) -> Option<FoundQueue> {
    if let Some(inner) = map.get("defaultResourceConfig").and_then(Value::as_object) {
        let mut found = queue_record(inner)?;
        found.name = found.name.or_else(|| text_of(map, &["name"]));
        found.entity = found
            .entity
            .or_else(|| text_of(map, &["entityName", "entity_name", "entity"]));
        return Some(found);
    }
    let config = CONFIG_KEYS.iter().find_map(|k| map.get(*k)).map(decoded)?;
    Some(FoundQueue {
        name: text_of(map, &["name", "queue_name", "queueName"]),
        entity: text_of(map, &["entity_name", "entityName", "entity"]),
        config,
        variables: VARIABLE_KEYS
            .iter()
            .find_map(|k| map.get(*k))
            .map(decoded)
            .filter(|v| !v.is_null()),
        text: None,
    })
}

/// Every W&B queue in a document.
pub(crate) fn find_queues(doc: &Value) -> Result<Vec<FoundQueue>, String> {
    let Some(map) = doc.as_object() else {
        return Err("expected a mapping: a W&B queue config, a queue export or a Terraform wandb_run_queue resource".into());
    };
    // `terraform show -json` (state or plan).
    let modules = ["values", "planned_values"]
        .iter()
        .filter_map(|k| map.get(*k)?.get("root_module"));
    let mut found = Vec::new();
    for module in modules {
        for resource in module
            .get("resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if resource.get("type").and_then(Value::as_str) == Some("wandb_run_queue")
                && let Some(values) = resource.get("values").and_then(Value::as_object)
                && let Some(queue) = queue_record(values)
            {
                found.push(queue);
            }
        }
    }
    // Terraform JSON configuration (`.tf.json`).
    if let Some(resources) = map
        .get("resource")
        .and_then(|r| r.get("wandb_run_queue"))
        .and_then(Value::as_object)
    {
        for values in resources.values().filter_map(Value::as_object) {
            if let Some(queue) = queue_record(values) {
                found.push(queue);
            }
        }
    }
    if !found.is_empty() {
        return Ok(found);
    }
    if is_queue_config(map) {
        return Ok(vec![FoundQueue {
            name: None,
            entity: None,
            config: doc.clone(),
            variables: None,
            text: None,
        }]);
    }
    match queue_record(map) {
        Some(queue) => Ok(vec![queue]),
        None => Err("no W&B queue found: expected a queue config (a Kubernetes object, bare, under `kubernetes:` or under `resource_args.kubernetes`), a queue export with `config`/`resource_config` and `template_variables`, or Terraform JSON with a wandb_run_queue resource".into()),
    }
}

/// W&B's variables (map or list; a `schema` may be JSON text) as a `limits.variables` value.
fn variables_value(variables: &Value) -> Value {
    let fix = |entry: &Value| -> Value {
        let mut entry = entry.clone();
        if let Some(map) = entry.as_object_mut()
            && let Some(schema) = map.get("schema").map(decoded)
        {
            map.insert("schema".into(), schema);
        }
        entry
    };
    match variables {
        Value::Array(items) => Value::Array(items.iter().map(fix).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), fix(v))).collect()),
        other => other.clone(),
    }
}

/// Converts the queues in `text` (YAML or JSON) into a launchgate snippet. `name`/`entity`
/// name a queue the input does not name (a config pasted from the UI).
pub(crate) fn import(
    text: &str,
    name: Option<&str>,
    entity: Option<&str>,
) -> Result<Imported, String> {
    // Parsed as the limits parse a template, so `{{gpus}}` quoted or not is accepted alike.
    let doc: Value = crate::validate::template::parse_text(text).map_err(|e| {
        format!("not YAML or JSON: {e} (for a .tf file, use `terraform show -json`)")
    })?;
    let mut queues = find_queues(&doc)?;
    if let [only] = queues.as_mut_slice()
        && only.config == doc
    {
        // The config itself: kept as the user wrote it.
        only.text = Some(text.to_string());
    }
    let mut imported = Imported::default();
    let mut snippet_queues = Map::new();
    let mut config = Config::default();
    for (i, queue) in queues.iter().enumerate() {
        let queue_name = name
            .map(str::to_string)
            .or_else(|| queue.name.clone())
            .unwrap_or_else(|| {
                if queues.len() == 1 {
                    "imported-queue".to_string()
                } else {
                    format!("imported-queue-{i}")
                }
            });
        let queue_entity = entity.map(str::to_string).or_else(|| queue.entity.clone());
        let key = match &queue_entity {
            Some(e) => format!("{e}/{queue_name}"),
            None => queue_name,
        };
        let template = match &queue.text {
            Some(text) => text.clone(),
            None => serde_yaml::to_string(&queue.config).map_err(|e| e.to_string())?,
        };
        let variables = queue
            .variables
            .as_ref()
            .map_or_else(|| json!({}), variables_value);
        let limits = json!({"enforcement": "deny", "template": template, "variables": variables});
        // Placeholders the input gives no schema for: listed with an empty schema, which
        // does not load until the user fills in the type and bounds.
        let parsed: Result<LimitsConfig, _> = serde_json::from_value(limits);
        let mut limits_cfg = match parsed {
            Ok(l) => l,
            Err(e) => {
                imported
                    .errors
                    .push(format!("queues.{key}.limits.variables: {e}"));
                continue;
            }
        };
        if let Ok(t) = crate::validate::template::parse(&Value::String(template.clone())) {
            for leaf in &t.leaves {
                for var in leaf.variables() {
                    limits_cfg.variables.entry(var.to_string()).or_default();
                }
            }
        }
        let mut written = serde_json::to_value(&limits_cfg).map_err(|e| e.to_string())?;
        for variable in written["variables"]
            .as_object_mut()
            .into_iter()
            .flat_map(|m| m.values_mut())
        {
            if let Some(map) = variable.as_object_mut()
                && map.get("required") == Some(&json!(false))
            {
                map.remove("required");
            }
        }
        if let Some(map) = written.as_object_mut() {
            map.retain(|k, v| {
                k == "enforcement"
                    || k == "template"
                    || k == "variables"
                    || !(v == &json!([]) || v == &json!({}) || v == &json!(false))
            });
        }
        snippet_queues.insert(key.clone(), json!({"limits": written}));
        config.queues.insert(
            key,
            QueueConfig {
                limits: limits_cfg,
                ..QueueConfig::default()
            },
        );
    }
    imported.snippet =
        serde_yaml::to_string(&json!({"queues": snippet_queues})).map_err(|e| e.to_string())?;
    match Policy::from_config(config) {
        Ok(policy) => {
            imported
                .warnings
                .extend(policy.warnings.iter().map(ToString::to_string));
            for queue in policy.queues.values() {
                let lines = queue.limits.describe();
                if lines.is_empty() {
                    imported
                        .errors
                        .push(format!("queues.{}: nothing to enforce", queue.key));
                }
                for line in lines {
                    imported.enforces.push(format!("{}: {line}", queue.key));
                }
            }
        }
        Err(errors) => imported
            .errors
            .extend(errors.0.iter().map(ToString::to_string)),
    }
    Ok(imported)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERRAFORM_STATE: &str = r#"{"values": {"root_module": {"resources": [{
        "type": "wandb_run_queue", "name": "gpu",
        "values": {"name": "gpu-queue", "entity_name": "acme", "resource": "kubernetes",
          "resource_config": "{\"resource_args\":{\"kubernetes\":{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"image\":\"${image_uri}\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"{{gpus}}\"}}}]}}}}}}",
          "template_variables": "{\"variable1\":{\"name\":\"gpus\",\"description\":\"GPUs\",\"schema\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":4,\"default\":1}}}"}}]}}}"#;

    #[test]
    fn terraform_state_becomes_an_entity_queue_with_its_limits() {
        let out = import(TERRAFORM_STATE, None, None).unwrap();
        assert_eq!(out.errors, Vec::<String>::new());
        assert_eq!(
            out.enforces,
            vec![
                r#"acme/gpu-queue: variable "gpus" (integer 0..4): spec.containers[0].resources.limits["nvidia.com/gpu"] of every pod template"#
            ]
        );
        let snippet: Value = serde_yaml::from_str(&out.snippet).unwrap();
        let limits = &snippet["queues"]["acme/gpu-queue"]["limits"];
        assert_eq!(limits["variables"]["gpus"]["schema"]["maximum"], 4);
        assert!(
            limits["template"]
                .as_str()
                .unwrap()
                .contains("resource_args")
        );
        // The snippet loads as a config.
        Policy::from_yaml(&out.snippet).unwrap();
    }

    #[test]
    fn a_ui_config_without_schemas_is_reported_not_passed() {
        let text = "kubernetes:\n  kind: PyTorchJob\n  spec:\n    pytorchReplicaSpecs:\n      Worker:\n        template:\n          spec:\n            containers:\n              - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n";
        let out = import(text, Some("k8s"), Some("acme")).unwrap();
        assert!(out.enforces.is_empty());
        assert_eq!(
            out.errors,
            vec![
                "queues.acme/k8s.limits.variables.gpus.type: missing `type` (one of integer, number, string, quantity)"
            ]
        );
        assert!(out.snippet.contains("acme/k8s"), "{}", out.snippet);
    }

    #[test]
    fn export_with_a_variable_list_and_json_schemas() {
        let text = r#"{"name": "q", "entityName": "team", "defaultResourceConfig": {
            "resource": "kubernetes",
            "config": {"resource_args": {"kubernetes": {"kind": "Job", "spec": {"template": {"spec": {"containers": [{"resources": {"limits": {"memory": "{{mem}}"}}}]}}}}}},
            "templateVariables": [{"name": "mem", "schema": "{\"type\": \"string\", \"enum\": [\"8Gi\", \"16Gi\"]}"}]}}"#;
        let out = import(text, None, None).unwrap();
        assert_eq!(out.errors, Vec::<String>::new());
        assert_eq!(
            out.enforces,
            vec![
                r#"team/q: variable "mem" (string, one of "8Gi", "16Gi"): spec.containers[0].resources.limits.memory of every pod template"#
            ]
        );
    }

    #[test]
    fn a_trainjob_or_jobset_queue_imports_with_what_it_enforces() {
        let trainjob = r#"{"name": "llm", "entityName": "team", "defaultResourceConfig": {
            "resource": "kubernetes",
            "config": {"resource_args": {"kubernetes": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": "{{nodes}}",
                    "resourcesPerNode": {"limits": {"nvidia.com/gpu": "{{gpus}}"}}}}}}},
            "templateVariables": [{"name": "nodes", "schema": "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 4}"},
                                  {"name": "gpus", "schema": "{\"type\": \"integer\", \"maximum\": 8}"}]}}"#;
        let out = import(trainjob, None, None).unwrap();
        assert_eq!(out.errors, Vec::<String>::new());
        let text = out.enforces.join("\n");
        assert!(text.contains("spec.trainer.numNodes"), "{text}");
        assert!(text.contains("spec.trainer.resourcesPerNode"), "{text}");
        let jobset = "kubernetes:\n  kind: JobSet\n  spec:\n    replicatedJobs:\n      - name: workers\n        replicas: '{{workers}}'\n        template: {spec: {template: {spec: {containers: [{name: t}]}}}}\n";
        let out = import(jobset, Some("q"), None).unwrap();
        assert_eq!(
            out.errors,
            [
                "queues.q.limits.variables.workers.type: missing `type` (one of integer, number, string, quantity)"
            ]
        );
    }

    #[test]
    fn placeholders_quoted_or_not_import_as_check_config_reads_them() {
        let quoted = "spec:\n  template:\n    spec:\n      containers:\n        - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n";
        let bare = quoted.replace("'{{gpus}}'", "{{gpus}}");
        for text in [quoted, bare.as_str()] {
            let out = import(text, Some("q"), None).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(
                out.errors,
                [
                    "queues.q.limits.variables.gpus.type: missing `type` (one of integer, number, string, quantity)"
                ],
                "{text}"
            );
            // The template as imported is the text as written: check-config reads it the same.
            let snippet: serde_json::Value = serde_yaml::from_str(&out.snippet).unwrap();
            assert_eq!(snippet["queues"]["q"]["limits"]["template"], text);
        }
    }

    #[test]
    fn an_export_whose_config_text_has_unquoted_placeholders_imports() {
        let config = "spec:\n  template:\n    spec:\n      containers:\n        - resources: {limits: {nvidia.com/gpu: {{gpus}}}}\n";
        let variables = "\ntemplate_variables:\n  gpus: {schema: {type: integer, maximum: 4}}\n";
        let yaml_export = format!(
            "name: q\nconfig: |\n{}{variables}",
            config
                .lines()
                .map(|l| format!("  {l}\n"))
                .collect::<String>()
        );
        let json_export = json!({"name": "q", "config": config,
            "template_variables": {"gpus": {"schema": {"type": "integer", "maximum": 4}}}})
        .to_string();
        for text in [yaml_export, json_export] {
            let out = import(&text, None, None).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(out.errors, Vec::<String>::new(), "{text}");
            assert_eq!(
                out.enforces,
                [
                    r#"q: variable "gpus" (integer at most 4): spec.containers[0].resources.limits["nvidia.com/gpu"] of every pod template"#
                ],
                "{text}"
            );
            // The snippet loads as check-config reads it.
            Policy::from_yaml(&out.snippet).unwrap();
        }
    }

    #[test]
    fn a_cap_on_limits_alone_is_warned_about_as_check_config_does() {
        let text = r#"{"name": "q", "config": {"spec": {"template": {"spec": {"containers": [{"resources": {"limits": {"cpu": "{{cpu}}"}}}]}}}},
            "template_variables": {"cpu": {"schema": {"type": "quantity", "maximum": "8"}}}}"#;
        let out = import(text, None, None).unwrap();
        assert_eq!(out.errors, Vec::<String>::new());
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        assert!(
            out.warnings[0].starts_with(
                r#"queues.q.limits: variable "cpu" (quantity at most 8) caps resources.limits.cpu only"#
            ),
            "{:?}",
            out.warnings
        );
    }

    #[test]
    fn unknown_input_is_explained() {
        assert!(
            import("- a\n", None, None)
                .unwrap_err()
                .contains("expected a mapping")
        );
        assert!(
            import("foo: 1\n", None, None)
                .unwrap_err()
                .contains("no W&B queue found")
        );
        assert!(
            import("a: [\n", None, None)
                .unwrap_err()
                .contains("not YAML or JSON")
        );
    }
}

/// `launchgate import-queue` arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct ImportQueueArgs {
    /// The W&B queue: its config (YAML/JSON, as in the UI), a queue export, or Terraform JSON
    /// (`terraform show -json`, `.tf.json`) with wandb_run_queue resources; `-` for stdin.
    pub(crate) file: std::path::PathBuf,
    /// The W&B queue name, for a config that does not carry one.
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// The W&B entity the queue lives in (the queue is keyed `entity/name`).
    #[arg(long)]
    pub(crate) entity: Option<String>,
}

/// Prints the snippet on stdout and what it enforces (or why it would not load) on stderr;
/// exits 2 when the snippet would not load.
pub(crate) fn run(args: &ImportQueueArgs) -> anyhow::Result<std::process::ExitCode> {
    let text = super::inputs::read_input(&args.file)?;
    let imported = import(&text, args.name.as_deref(), args.entity.as_deref())
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    out!("{}", imported.snippet)?;
    for line in &imported.enforces {
        eprintln!("enforces {line}");
    }
    for warning in &imported.warnings {
        eprintln!("warning: {warning}");
    }
    if imported.errors.is_empty() {
        return Ok(std::process::ExitCode::SUCCESS);
    }
    eprintln!(
        "{}: the snippet does not load yet; fix these (then run `launchgate check-config`):",
        args.file.display()
    );
    for error in &imported.errors {
        eprintln!("  {error}");
    }
    Ok(std::process::ExitCode::from(2))
}
