//! The module layering of the crate, checked on its sources: every module depends only on
//! modules of lower layers, so there is no import cycle, and the mutating and validating
//! paths (`mutate`, `validate`) never import each other. `cargo test --test architecture`
//! prints the module graph it checked.
//!
//! Test code (`#[cfg(test)]` items) may use any layer and is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may use its own layer's leaves only when listed in
/// `SAME_LAYER_USES`; otherwise only lower layers.
const LAYERS: &[&[&str]] = &[
    // Parsing and reading `serde_json` values cheaply.
    &["json", "cel"],
    // Leaves: wire types, the cluster view, config errors, quantities, certificates.
    &[
        "admission",
        "cluster",
        "error",
        "quantity",
        "certs",
        "rules",
    ],
    // The object view: where pod specs live, the one container walk, env reads, edits.
    &["workload"],
    // What a distributed job looks like (both paths read it).
    &["topology"],
    // The two paths, siblings.
    &["mutate", "validate"],
    // The configuration model: each module's config, loaded and checked.
    &["policy"],
    // The pure core: request bytes + policy -> response bytes.
    &["review"],
    // Mutate-then-validate as the API server does it; offline manifests.
    &["judge", "manifest", "native"],
    // Judging what a cluster already runs.
    &["audit"],
    // The shells.
    &["server"],
    &["cli"],
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer of tests/architecture.rs"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without `#[cfg(test)]` items and without comments.
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            // Skip the item: up to its matching closing brace (or a `;` for a one-line item).
            let mut depth = 0i32;
            let mut opened = false;
            for l in lines.by_ref() {
                depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                opened |= l.contains('{');
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        let code = line.split("//").next().unwrap_or_default();
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Top-level crate modules a source text names (`crate::x`).
fn uses(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.chars().next().is_some_and(char::is_lowercase) {
            found.insert(name);
        }
    }
    found
}

/// module -> modules it uses, for every top-level module of src/.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let used = uses(&production_code(&text));
        let entry = graph.entry(module.clone()).or_default();
        entry.extend(used.into_iter().filter(|m| *m != module));
    }
    graph
}

#[test]
fn every_module_depends_only_on_lower_layers() {
    let graph = module_graph();
    let mut wrong = Vec::new();
    for (module, used) in &graph {
        println!("{module} (layer {}) -> {used:?}", layer_of(module));
        for dep in used {
            if layer_of(dep) >= layer_of(module) {
                wrong.push(format!(
                    "{module} (layer {}) uses {dep} (layer {})",
                    layer_of(module),
                    layer_of(dep)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies must run one way:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_module_graph_has_no_cycle() {
    // Follows from the layering; checked on its own so a layering change cannot hide one.
    let graph = module_graph();
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(at) = stack.iter().position(|s| s == m) {
            panic!("import cycle: {} -> {m}", stack[at..].join(" -> "));
        }
        if done.contains(m) {
            return;
        }
        stack.push(m.to_string());
        for dep in graph.get(m).into_iter().flatten() {
            visit(dep, graph, stack, done);
        }
        stack.pop();
        done.insert(m.to_string());
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done);
    }
}

#[test]
fn mutate_and_validate_do_not_import_each_other() {
    let graph = module_graph();
    assert!(
        !graph["mutate"].contains("validate"),
        "{:?}",
        graph["mutate"]
    );
    assert!(
        !graph["validate"].contains("mutate"),
        "{:?}",
        graph["validate"]
    );
}

#[test]
fn the_checker_sees_uses_and_skips_test_code() {
    let code = production_code(
        "use crate::workload::{self, X};\nfn f() { crate::policy::load(); }\n// crate::server\n#[cfg(test)]\nmod tests {\n    use crate::cli;\n}\nfn g() {}\n",
    );
    let found: Vec<String> = uses(&code).into_iter().collect();
    assert_eq!(found, ["policy", "workload"]);
    assert!(code.contains("fn g()"));
}
