//! Reading the offline commands' inputs: several files, directories (recursive) and stdin,
//! each document turned into the admission request the API server would send — except the
//! TrainJob runtimes (ClusterTrainingRuntimes, TrainingRuntimes), which are taken as the
//! cluster's runtimes the TrainJobs beside them are sized by, as the webhook with cluster
//! lookups sizes them.

use crate::admission::{AdmissionRequest, placed_namespace};
use crate::cluster::{GivenObjects, is_given_object};
use crate::manifest::{InputDocument, parse_documents};
use crate::mutate::labels::QUEUE_LABEL;
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One input document as an admission request, with where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    /// `path` (or `-` for stdin), plus `#N` for the N-th document of a multi-document file.
    pub(crate) source: String,
    pub(crate) request: AdmissionRequest,
}

/// File extensions read from a directory.
const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Expands directories (recursively, sorted, only `*.yaml|*.yml|*.json`, hidden entries
/// skipped); files and `-` are kept as given.
pub(crate) fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.as_os_str() != "-" && p.is_dir() {
            let found = files_under(p, &is_manifest)?;
            if found.is_empty() {
                bail!("{}: no *.yaml, *.yml or *.json files", p.display());
            }
            out.extend(found);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The files under `dir` (recursively, sorted, hidden entries skipped) that `keep` accepts:
/// the one directory walk of the CLI (manifest directories, test suites, resource globs).
pub(crate) fn files_under(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) -> Result<()> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading directory {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                !p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
            })
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, keep, out)?;
            } else if keep(&p) {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, keep, &mut out)?;
    Ok(out)
}

/// A manifest file by its extension.
fn is_manifest(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| MANIFEST_EXTENSIONS.contains(&e))
}

/// Reads a file, or stdin for `-`.
pub(crate) fn read_input(path: &Path) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading stdin")?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// One document as a request: an AdmissionReview as it is, a bare object as a CREATE
/// (labelled with `queue` and placed in `namespace` when given).
pub(crate) fn to_request(
    doc: InputDocument,
    queue: Option<&str>,
    namespace: Option<&str>,
) -> Result<AdmissionRequest> {
    match doc {
        InputDocument::Review(r) => Ok(*r),
        InputDocument::Object(mut obj) => {
            if let Some(q) = queue
                && let Some(meta) = obj.as_object_mut()
            {
                let mut meta = crate::patch::Node::scratch(meta);
                crate::workload::metadata_map_mut(&mut meta, "labels")
                    .set(QUEUE_LABEL, Value::String(q.to_string()));
            }
            AdmissionRequest::synthetic_create(obj, namespace).map_err(anyhow::Error::msg)
        }
    }
}

/// A document that is a cluster object rather than a workload — a TrainJob runtime, a DRA
/// ResourceClaimTemplate or ResourceClaim — goes into `runtimes` (`Ok(None)`), placed in
/// `namespace` as bare objects are; any other document is given back. Errors: a malformed
/// one (the caller names where it came from).
pub(crate) fn take_runtime(
    doc: InputDocument,
    runtimes: &mut GivenObjects,
    namespace: Option<&str>,
) -> Result<Option<InputDocument>, String> {
    match doc {
        InputDocument::Object(object) => match is_given_object(&object)? {
            true => add_runtime(runtimes, object, namespace).map(|()| None),
            false => Ok(Some(InputDocument::Object(object))),
        },
        review => Ok(Some(review)),
    }
}

/// Adds a runtime manifest to `runtimes`, placed as a bare object is (`namespace` when given,
/// else its own).
pub(crate) fn add_runtime(
    runtimes: &mut GivenObjects,
    runtime: Value,
    namespace: Option<&str>,
) -> Result<(), String> {
    let placed = placed_namespace(&runtime, namespace).map(str::to_string);
    runtimes.add(runtime, placed.as_deref())
}

/// The documents of one file's text, each named after `shown` (the path as the user gave it),
/// with its position (`#2`) when there are several.
pub(crate) fn named_documents(shown: &str, text: &str) -> Result<Vec<(String, InputDocument)>> {
    let docs = parse_documents(text).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    let several = docs.len() > 1;
    let name = |i: usize| {
        if several {
            format!("{shown}#{}", i + 1)
        } else {
            shown.to_string()
        }
    };
    Ok(docs
        .into_iter()
        .enumerate()
        .map(|(i, d)| (name(i), d))
        .collect())
}

/// What the offline commands read: the workloads to judge, and the TrainJob runtimes given
/// beside them (the cluster's runtimes, for the TrainJobs).
#[derive(Debug, Default)]
pub(crate) struct Inputs {
    pub(crate) workloads: Vec<Input>,
    pub(crate) runtimes: GivenObjects,
    /// The LaunchQueues given, each with where it came from: queues beside the config's.
    pub(crate) launch_queues: Vec<(String, Value)>,
}

impl Inputs {
    /// Parses one file's text, its documents named after `shown` (the path as the user gave
    /// it): runtimes to [`Inputs::runtimes`], the rest as requests to [`Inputs::workloads`].
    pub(crate) fn add_text(
        &mut self,
        shown: &str,
        text: &str,
        queue: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<()> {
        let docs = named_documents(shown, text)?;
        if docs.is_empty() {
            bail!("{shown}: no documents");
        }
        for (source, d) in docs {
            if let InputDocument::Object(object) = &d
                && crate::policy::launchqueue::is_launch_queue(object)
            {
                self.launch_queues.push((source, object.clone()));
                continue;
            }
            let Some(d) = take_runtime(d, &mut self.runtimes, namespace)
                .map_err(|e| anyhow::anyhow!("{source}: invalid runtime: {e}"))?
            else {
                continue;
            };
            let request =
                to_request(d, queue, namespace).with_context(|| format!("{source}: invalid"))?;
            self.workloads.push(Input { source, request });
        }
        Ok(())
    }
}

/// Every document of every path (files, directories, `-`). Runtimes alone are no input: there
/// must be a workload to judge.
pub(crate) fn load(
    paths: &[PathBuf],
    queue: Option<&str>,
    namespace: Option<&str>,
) -> Result<Inputs> {
    let mut out = Inputs::default();
    for path in expand_paths(paths)? {
        let text = read_input(&path)?;
        out.add_text(&path.display().to_string(), &text, queue, namespace)?;
    }
    if out.workloads.is_empty() {
        let given: Vec<String> = out
            .runtimes
            .describe()
            .into_iter()
            .chain(
                out.launch_queues
                    .iter()
                    .map(|(source, _)| format!("LaunchQueue ({source})")),
            )
            .collect();
        bail!(
            "no workload to judge: the documents given are TrainJob runtimes and LaunchQueues only ({})",
            given.join(", ")
        );
    }
    Ok(out)
}

/// `Kind name` of a request's object (`generateName*` when it has no name yet).
pub(crate) fn describe(req: &AdmissionRequest) -> String {
    let name = if req.name.is_empty() {
        req.object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/generateName"))
            .and_then(Value::as_str)
            .map(|g| format!("{g}*"))
            .unwrap_or_else(|| "<unnamed>".into())
    } else {
        req.name.clone()
    };
    format!("{} {}", req.kind.kind, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_walked_recursively_for_manifests_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        for f in [
            "a/b/z.yaml",
            "a/x.yml",
            "c.json",
            "notes.txt",
            ".git/h.yaml",
        ] {
            std::fs::write(root.join(f), "kind: Pod\n").unwrap();
        }
        let got = expand_paths(&[root.to_path_buf(), PathBuf::from("-")]).unwrap();
        let rel: Vec<String> = got
            .iter()
            .map(|p| {
                p.strip_prefix(root)
                    .map_or("-".into(), |r| r.display().to_string())
            })
            .collect();
        assert_eq!(rel, ["a/b/z.yaml", "a/x.yml", "c.json", "-"]);
        let empty = tempfile::tempdir().unwrap();
        assert!(expand_paths(&[empty.path().to_path_buf()]).is_err());
    }

    #[test]
    fn documents_are_named_by_file_and_position() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\n";
        let read = |shown: &str, text: &str, queue, namespace| {
            let mut inputs = Inputs::default();
            inputs
                .add_text(shown, text, queue, namespace)
                .map(|()| inputs)
        };
        let inputs = read("x.yaml", text, Some("q"), Some("ns"))
            .unwrap()
            .workloads;
        let sources: Vec<&str> = inputs.iter().map(|i| i.source.as_str()).collect();
        assert_eq!(sources, ["x.yaml#1", "x.yaml#2"]);
        let obj = inputs[1].request.object.as_ref().unwrap();
        assert_eq!(obj["metadata"]["labels"][QUEUE_LABEL], "q");
        assert_eq!(inputs[1].request.namespace.as_deref(), Some("ns"));
        assert!(read("e.yaml", "", None, None).is_err());
        assert!(read("k.yaml", "metadata: {}\n", None, None).is_err());
    }

    #[test]
    fn runtimes_beside_the_workloads_are_the_clusters_not_workloads() {
        let runtime = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {name: torch}\nspec: {}\n";
        let text = format!("{runtime}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: a}}\n");
        let mut inputs = Inputs::default();
        inputs.add_text("x.yaml", &text, None, None).unwrap();
        let sources: Vec<&str> = inputs.workloads.iter().map(|i| i.source.as_str()).collect();
        assert_eq!(sources, ["x.yaml#2"]);
        assert_eq!(inputs.runtimes.describe(), ["ClusterTrainingRuntime torch"]);
        // A malformed runtime is named by where it is.
        let nameless =
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata: {}\n";
        let err = Inputs::default()
            .add_text("r.yaml", nameless, None, None)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "r.yaml: invalid runtime: TrainingRuntime without metadata.name"
        );
    }
}
