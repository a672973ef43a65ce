//! The module layering of the crate, checked on its sources: every module depends only on
//! modules of lower layers, so there is no import cycle, and the mutating and validating
//! paths (`mutate`, `validate`) never import each other. Inside every module, its parts
//! (submodules, at any depth) form no import cycle either. `cargo test --test architecture`
//! prints the graphs it checked.
//!
//! Test code (`#[cfg(test)]` items) may use any layer and is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may use its own layer's leaves only when listed in
/// `SAME_LAYER_USES`; otherwise only lower layers.
const LAYERS: &[&[&str]] = &[
    // Parsing and reading `serde_json` values cheaply.
    &["json", "cel"],
    // Leaves: wire types, config errors, quantities, certificates, the recorded JSON Patch.
    &["admission", "error", "quantity", "certs", "rules", "patch"],
    // The model of the kinds: one descriptor per kind.
    &["kinds"],
    // The cluster view: the workloads, Services and runtimes a request may read, by kind.
    &["cluster"],
    // The object view: where pod specs live, the one container walk, env reads, edits.
    &["workload"],
    // Distributed PyTorch: per kind, the topology of a distributed job (master, world size,
    // ranks, why it can never rendezvous) and the wiring it drives (both paths read it).
    &["pytorch"],
    // The launch guardrails (both paths read them; they read the rendezvous size of `pytorch`).
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
    // The documentation's reference pages, written from the shells' definitions.
    &["reference"],
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

/// Every module of src/ by its path (`["mutate", "guardrails"]`), with its file.
fn module_tree() -> BTreeMap<Vec<String>, PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut tree = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let mut path: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if path.last().is_some_and(|last| last == "mod") {
            path.pop();
        }
        // The crate root (lib.rs) and the binary (main.rs, another crate) are no part.
        if path == ["lib"] || path == ["main"] {
            continue;
        }
        tree.insert(path, file);
    }
    tree
}

/// Reads the module paths of a source text, as `use` trees or in expressions.
struct PathReader<'a> {
    code: &'a [u8],
    at: usize,
}

impl PathReader<'_> {
    fn skip_space(&mut self) {
        while self.code.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.code[self.at..].starts_with(token.as_bytes()) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_space();
        let start = self.at;
        while self
            .code
            .get(self.at)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            self.at += 1;
        }
        (self.at > start).then(|| String::from_utf8_lossy(&self.code[start..self.at]).into())
    }

    /// The paths that continue a prefix: `::a::b`, `::{a, b::{self, c}}`, `::*`.
    fn tails(&mut self) -> Vec<Vec<String>> {
        let before = self.at;
        if !self.eat("::") {
            return vec![Vec::new()];
        }
        if self.eat("{") {
            let mut out = Vec::new();
            loop {
                let start = self.at;
                if self.eat("}") {
                    break;
                }
                out.extend(self.item());
                self.eat(",");
                if self.at == start {
                    break;
                }
            }
            return out;
        }
        if self.eat("*") {
            return vec![Vec::new()];
        }
        match self.ident() {
            Some(segment) => self
                .tails()
                .into_iter()
                .map(|tail| [vec![segment.clone()], tail].concat())
                .collect(),
            None => {
                // `::<T>` (a turbofish) or anything else: the path ends here.
                self.at = before;
                vec![Vec::new()]
            }
        }
    }

    /// One item of a `{…}` group.
    fn item(&mut self) -> Vec<Vec<String>> {
        match self.ident().as_deref() {
            Some("self") => vec![Vec::new()],
            Some(segment) => {
                let paths = self
                    .tails()
                    .into_iter()
                    .map(|tail| [vec![segment.to_string()], tail].concat())
                    .collect();
                if self.eat("as ") {
                    self.ident();
                }
                paths
            }
            None => {
                self.eat("*");
                Vec::new()
            }
        }
    }
}

/// The modules a file of module `here` names: every path that starts at `crate`, `super`,
/// `self` or one of `here`'s own submodules, resolved to the deepest module it reaches.
fn modules_named(
    code: &str,
    here: &[String],
    tree: &BTreeMap<Vec<String>, PathBuf>,
) -> BTreeSet<Vec<String>> {
    let bytes = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut found = BTreeSet::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts_path =
            is_ident(bytes[at]) && (at == 0 || !(is_ident(bytes[at - 1]) || bytes[at - 1] == b':'));
        if !starts_path {
            at += 1;
            continue;
        }
        let mut reader = PathReader { code: bytes, at };
        let first = reader.ident().unwrap();
        let after_first = reader.at;
        let base: Option<Vec<String>> = match first.as_str() {
            "crate" => Some(Vec::new()),
            "self" => Some(here.to_vec()),
            "super" => {
                let mut base = here[..here.len().saturating_sub(1)].to_vec();
                loop {
                    let before = reader.at;
                    if reader.eat("::") && reader.ident().as_deref() == Some("super") {
                        base.pop();
                    } else {
                        reader.at = before;
                        break;
                    }
                }
                Some(base)
            }
            child => {
                let path = [here.to_vec(), vec![child.to_string()]].concat();
                tree.contains_key(&path).then_some(path)
            }
        };
        if let Some(base) = base
            && bytes[reader.at..].starts_with(b"::")
        {
            for tail in reader.tails() {
                let mut module = base.clone();
                for segment in tail {
                    module.push(segment);
                    if !tree.contains_key(&module) {
                        module.pop();
                        break;
                    }
                }
                found.insert(module);
            }
        }
        at = after_first.max(at + 1);
    }
    found
}

/// For every module (the crate root is `[]`), the import graph of its direct parts: part `a`
/// uses part `b` when code anywhere inside `a` names anything inside `b`. A module's own file
/// (its facade: shared types, a table of its parts) is the module itself, not one of its
/// parts: its parts may use it and it may use them.
fn part_graphs() -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let tree = module_tree();
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (here, file) in &tree {
        let code = production_code(&std::fs::read_to_string(file).unwrap());
        for there in modules_named(&code, here, &tree) {
            if here.starts_with(&there) || there.starts_with(here) {
                continue;
            }
            let common = here.iter().zip(&there).take_while(|(a, b)| a == b).count();
            graphs
                .entry(here[..common].to_vec())
                .or_default()
                .entry(here[common].clone())
                .or_default()
                .insert(there[common].clone());
        }
    }
    graphs
}

/// The first import cycle of a graph, if any.
fn cycle_in(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| s == m) {
            return Some([&stack[at..], &[m.to_string()]].concat());
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.to_string());
        for dep in graph.get(m).into_iter().flatten() {
            if let Some(cycle) = visit(dep, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_has_an_import_cycle_among_its_parts() {
    let mut cycles = Vec::new();
    for (module, graph) in part_graphs() {
        let name = if module.is_empty() {
            "crate".to_string()
        } else {
            module.join("::")
        };
        for (part, used) in &graph {
            println!("{name}: {part} -> {used:?}");
        }
        if let Some(cycle) = cycle_in(&graph) {
            cycles.push(format!("in {name}: {}", cycle.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_path_reader_resolves_use_trees_super_self_and_own_parts() {
    let tree: BTreeMap<Vec<String>, PathBuf> = [
        vec!["a"],
        vec!["a", "b"],
        vec!["a", "c"],
        vec!["a", "c", "d"],
        vec!["e"],
    ]
    .into_iter()
    .map(|p| (p.iter().map(|s| s.to_string()).collect(), PathBuf::new()))
    .collect();
    let at = |code: &str, here: &[&str]| -> Vec<String> {
        let here: Vec<String> = here.iter().map(|s| s.to_string()).collect();
        modules_named(code, &here, &tree)
            .into_iter()
            .map(|m| m.join("::"))
            .collect()
    };
    assert_eq!(
        at("use super::{b::{self, X}, c::d::Y as Z, W};", &["a", "c"]),
        ["a", "a::b", "a::c::d"]
    );
    assert_eq!(
        at("fn f() { super::super::b::g::<u8>(); }", &["a", "c", "d"]),
        ["a::b"]
    );
    assert_eq!(
        at("use crate::a::{\n    c::{d, self},\n};", &["e"]),
        ["a::c", "a::c::d"]
    );
    assert_eq!(
        at("let x = d::f(); self::d::g(); b::h();", &["a", "c"]),
        ["a::c::d"]
    );
    assert_eq!(
        at("x::crate::a; Self::b; y.e::f", &["a"]),
        Vec::<String>::new()
    );
}

/// What only a kind's descriptor (`src/kinds/`) and the PyTorch wiring (`src/pytorch/`, which is
/// per kind by nature) may name: a kind by its handle (`WorkloadKind::VolcanoJob`) or its
/// object kind, and the fields of a kind's spec. Everything else reads the descriptors.
const KIND_TOKENS: &[&str] = &[
    "WorkloadKind::Pod",
    "WorkloadKind::BatchJob",
    "WorkloadKind::VolcanoJob",
    "WorkloadKind::PyTorchJob",
    "WorkloadKind::JobSet",
    "WorkloadKind::TrainJob",
    "\"PyTorchJob\"",
    "\"TrainJob\"",
    "\"JobSet\"",
    "\"RayJob\"",
    "\"RayCluster\"",
    "\"MPIJob\"",
    "pytorchReplicaSpecs",
    "mpiReplicaSpecs",
    "replicatedJobs",
    "rayClusterSpec",
    "workerGroupSpecs",
    "headGroupSpec",
    "runPolicy",
    "minAvailable",
    "maxRetry",
    "runtimeRef",
    "numNodes",
    "spec.failurePolicy",
    "spec/failurePolicy",
];

#[test]
fn only_the_descriptors_name_a_kind_or_its_fields() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with("kinds/")
            || rel.starts_with("pytorch/")
            || rel == "rules.rs"
            || rel.ends_with("_tests.rs")
        {
            continue;
        }
        let code = production_code(&std::fs::read_to_string(&file).unwrap());
        for token in KIND_TOKENS {
            if code.contains(token) {
                found.push(format!("{rel}: {token}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "product code outside src/kinds/ and src/pytorch/ names a kind or its fields (make it a descriptor field):\n{}",
        found.join("\n")
    );
}
