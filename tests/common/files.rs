//! The files the tests read, by name: recorded AdmissionReviews (`tests/fixtures/admission`),
//! manifests (`tests/fixtures/manifests`), W&B queue configs (`tests/fixtures/wandb-queues`),
//! CRDs (`tests/fixtures/crds`) and golden results (`tests/golden`).

use launchgate::admission::AdmissionRequest;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The repository root: where Cargo.toml is, and where [`super::launchgate`] runs.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The kinds as the chart reads them (`charts/launchgate/files/kinds.json`, generated from the
/// descriptors by `launchgate::native::webhooks::chart_kinds`): per kind, in the descriptors'
/// order, its `webhook.rules` name, API group, version and resource, the resources its
/// admission rules cover (the resource and the subresources that are judged) and its scale
/// subresource. The chart's webhook rules, its scale webhook, the rules the server registers
/// and the audit's read access are all built from it.
pub fn chart_kinds() -> Value {
    launchgate::native::webhooks::chart_kinds()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// An absolute path as a string, ready for a command line as much as for `std::fs`.
fn path_string(path: PathBuf) -> String {
    path.into_os_string()
        .into_string()
        .expect("the repository path is UTF-8")
}

const ADMISSION: &str = "tests/fixtures/admission";

/// The path of the recorded AdmissionReview `name`.
pub fn fixture_path(name: &str) -> String {
    path_string(root().join(ADMISSION).join(name))
}

/// The recorded AdmissionReview `name`, as the API server sent it.
pub fn fixture_bytes(name: &str) -> Vec<u8> {
    read(Path::new(&fixture_path(name)))
}

/// The recorded AdmissionReview `name` as JSON.
pub fn fixture_json(name: &str) -> Value {
    serde_json::from_slice(&fixture_bytes(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The request of the recorded AdmissionReview `name`, parsed as the server parses it.
pub fn fixture_request(name: &str) -> AdmissionRequest {
    launchgate::review::parse_request(&fixture_bytes(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every recorded AdmissionReview, by file name.
pub fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = root().join(ADMISSION);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                read(&p),
            )
        })
        .collect();
    out.sort();
    out
}

/// The path of the manifest `name` (a workload as a user writes it).
pub fn manifest_path(name: &str) -> String {
    path_string(root().join("tests/fixtures/manifests").join(name))
}

/// The manifest `name` as JSON.
pub fn manifest_json(name: &str) -> Value {
    let text = read_text(Path::new(&manifest_path(name)));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The W&B queue config `name`, as written.
pub fn queue_config(name: &str) -> String {
    read_text(&root().join("tests/fixtures/wandb-queues").join(name))
}

/// The path of the W&B queue config `name`.
pub fn queue_config_path(name: &str) -> String {
    path_string(root().join("tests/fixtures/wandb-queues").join(name))
}

/// The CRD fixtures of `tests/fixtures/crds` (the PolicyReport the audit writes), sorted.
pub fn crd_paths() -> Vec<PathBuf> {
    let dir = root().join("tests/fixtures/crds");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    out.sort();
    out
}

/// Where the real upstream CRDs are (Volcano, PyTorchJob v1, Trainer v2, JobSet, Kueue, with
/// their full schemas, so the API server prunes as in production): `$LAUNCHGATE_E2E_CRDS`, else
/// `../shared/k8s/crds` next to the repository.
pub fn upstream_crd_dir() -> PathBuf {
    std::env::var_os("LAUNCHGATE_E2E_CRDS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/k8s/crds"))
}

/// The upstream CRDs of [`upstream_crd_dir`] as text (`*.yaml`, or `*.yaml.xz` unpacked with
/// `xz -dc`), sorted by file name.
pub fn upstream_crds() -> Result<Vec<(String, String)>, String> {
    let dir = upstream_crd_dir();
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        format!(
            "{}: {e} (the real upstream CRDs; set LAUNCHGATE_E2E_CRDS)",
            dir.display()
        )
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".yaml") || name.ends_with(".yaml.xz")
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = if name.ends_with(".xz") {
            let unpacked = std::process::Command::new("xz")
                .arg("-dc")
                .arg(&path)
                .output()
                .map_err(|e| format!("xz -dc {}: {e}", path.display()))?;
            if !unpacked.status.success() {
                return Err(format!(
                    "xz -dc {}: {}",
                    path.display(),
                    String::from_utf8_lossy(&unpacked.stderr)
                ));
            }
            String::from_utf8(unpacked.stdout).map_err(|e| format!("{name}: {e}"))?
        } else {
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?
        };
        out.push((name, text));
    }
    if out.is_empty() {
        return Err(format!("{}: no CRDs", dir.display()));
    }
    Ok(out)
}

/// The CRD fixture `name` as written.
pub fn crd_text(name: &str) -> String {
    read_text(&root().join("tests/fixtures/crds").join(name))
}

/// Where the golden result for the recorded AdmissionReview `name` lives.
pub fn golden_path(name: &str) -> PathBuf {
    root().join("tests/golden").join(name)
}

/// The runbook's emergency bypass commands (`docs/operations.md`, "Emergency bypass"): the
/// ` ```sh ` block right after `<!-- emergency-bypass: <which> -->` on `page` (`on`: the
/// bypass, `off`: the way back), its lines as written. The e2e test runs them; the docs tests
/// hold every other page that shows them to the same text.
pub fn emergency_bypass_block(page: &Path, which: &str) -> Vec<String> {
    let text = String::from_utf8(read(page)).expect("UTF-8");
    let marker = format!("<!-- emergency-bypass: {which} -->");
    // Other comments (the docs test's marker) may stand between the name and the block.
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim() != marker)
        .skip(1)
        .skip_while(|l| l.trim().starts_with("<!--"));
    assert_eq!(
        lines.next().map(str::trim),
        Some("```sh"),
        "{}: no ```sh block right after {marker}",
        page.display()
    );
    lines
        .take_while(|l| l.trim() != "```")
        .map(str::to_string)
        .collect()
}

/// The runbook page that holds the emergency bypass.
pub fn runbook() -> PathBuf {
    root().join("docs/operations.md")
}
