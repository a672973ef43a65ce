//! The module layering of the crate, checked on its sources: every module depends only on
//! modules of lower layers, so there is no import cycle, and the mutating and validating
//! paths (`mutate`, `validate`) never import each other. Inside every module, its parts
//! (submodules, at any depth) form no import cycle either. Outside the descriptors
//! (`src/kinds/`), the PyTorch wiring (`src/pytorch/`) and the rule table (`src/rules.rs`),
//! nothing names a kind or its fields. `cargo test --test architecture` prints the graphs it
//! checked.
//!
//! The sources are read as Rust syntax (`syn`), not as text: the files are those `src/lib.rs`
//! and `src/main.rs` reach through their `mod` declarations; test code — an item, field, arm
//! or statement under `#[cfg(test)]` (or a `cfg` that implies `test`), a `#[test]` function, a
//! file declared by a `#[cfg(test)] mod` — may use any layer and name anything, and is not
//! read; every other item is. A dependency is any path that reaches a module of the crate:
//! `use` trees, paths in types and expressions, paths inside macro calls and attributes.
//! Doc comments are not read.

use proc_macro2::{Span, TokenStream, TokenTree};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};

/// The layers, lowest first. A module may use only modules of lower layers.
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

// ---------------------------------------------------------------------------------------------
// Reading a source file as Rust syntax.

/// What a file's product code holds, each with its line.
#[derive(Debug, Default, Clone)]
struct Read {
    /// Every path of two segments or more (`use` trees expanded, paths in types, expressions,
    /// patterns, macro calls and attributes), with the inline modules it sits in.
    paths: Vec<(Vec<String>, Vec<String>, usize)>,
    /// Every string literal's value.
    literals: Vec<(String, usize)>,
    /// Every identifier.
    idents: Vec<(String, usize)>,
    /// The `mod x;` declarations of product code: the name and its `#[path]`, if any.
    mods: Vec<(String, Option<String>)>,
    /// The `mod x;` declarations of test code.
    test_mods: Vec<(String, Option<String>)>,
}

/// Whether attributes make their item test code: `#[test]` (or `#[tokio::test]`…), or a
/// `#[cfg(…)]` that holds only under `test`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if attr.path().is_ident("cfg") {
            attr.parse_args::<syn::Meta>()
                .is_ok_and(|meta| implies_test(&meta))
        } else {
            attr.path()
                .segments
                .last()
                .is_some_and(|s| s.ident == "test")
        }
    })
}

/// A `cfg` predicate that holds only when `test` does: `test`, `all(test, …)`,
/// `any(test, all(test, …))`.
fn implies_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(path) => path.is_ident("test"),
        syn::Meta::List(list) => {
            let inner = list
                .parse_args_with(Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
                .unwrap_or_default();
            if list.path.is_ident("all") {
                inner.iter().any(implies_test)
            } else if list.path.is_ident("any") {
                !inner.is_empty() && inner.iter().all(implies_test)
            } else {
                false
            }
        }
        syn::Meta::NameValue(_) => false,
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

fn line(span: Span) -> usize {
    span.start().line
}

/// The `#[path = "…"]` of a module declaration.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

#[derive(Default)]
struct Reader {
    read: Read,
    /// The inline modules (`mod x { … }`) the visit is in.
    inline: Vec<String>,
}

impl Reader {
    fn path(&mut self, segments: Vec<String>, at: usize) {
        if segments.len() >= 2 {
            self.read.paths.push((segments, self.inline.clone(), at));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let at = line(n.ident.span());
                if n.ident == "self" {
                    self.path(prefix.clone(), at);
                } else {
                    self.path([prefix.clone(), vec![n.ident.to_string()]].concat(), at);
                }
            }
            syn::UseTree::Rename(r) => {
                let at = line(r.ident.span());
                if r.ident == "self" {
                    self.path(prefix.clone(), at);
                } else {
                    self.path([prefix.clone(), vec![r.ident.to_string()]].concat(), at);
                }
            }
            syn::UseTree::Glob(g) => self.path(prefix.clone(), line(g.star_token.span)),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    /// The tokens of a macro call or an attribute: their literals, identifiers and paths
    /// (`a::b::c`).
    fn tokens(&mut self, stream: TokenStream) {
        let trees: Vec<TokenTree> = stream.into_iter().collect();
        let is_colon =
            |t: Option<&TokenTree>| matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == ':');
        for (i, tree) in trees.iter().enumerate() {
            match tree {
                TokenTree::Group(group) => self.tokens(group.stream()),
                TokenTree::Literal(lit) => {
                    if let Ok(s) = syn::parse_str::<syn::LitStr>(&lit.to_string()) {
                        self.read.literals.push((s.value(), line(lit.span())));
                    }
                }
                TokenTree::Ident(ident) => {
                    self.read
                        .idents
                        .push((ident.to_string(), line(ident.span())));
                    // A path starts at an identifier no `::` comes before.
                    if i >= 1 && is_colon(trees.get(i - 1)) {
                        continue;
                    }
                    let mut segments = vec![ident.to_string()];
                    let mut at = i;
                    while is_colon(trees.get(at + 1)) && is_colon(trees.get(at + 2)) {
                        match trees.get(at + 3) {
                            Some(TokenTree::Ident(next)) => segments.push(next.to_string()),
                            _ => break,
                        }
                        at += 3;
                    }
                    self.path(segments, line(ident.span()));
                }
                TokenTree::Punct(_) => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for Reader {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test(item_attrs(item)) {
            if let syn::Item::Mod(m) = item
                && m.content.is_none()
            {
                self.read
                    .test_mods
                    .push((m.ident.to_string(), path_attr(&m.attrs)));
            }
            return;
        }
        visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_none() {
            self.read
                .mods
                .push((m.ident.to_string(), path_attr(&m.attrs)));
        }
        self.inline.push(m.ident.to_string());
        visit::visit_item_mod(self, m);
        self.inline.pop();
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => return visit::visit_trait_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !is_test(&field.attrs) {
            visit::visit_field(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !is_test(&variant.attrs) {
            visit::visit_variant(self, variant);
        }
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        if !is_test(&arm.attrs) {
            visit::visit_arm(self, arm);
        }
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if !is_test(&local.attrs) {
            visit::visit_local(self, local);
        }
    }

    fn visit_stmt_macro(&mut self, m: &'ast syn::StmtMacro) {
        if !is_test(&m.attrs) {
            visit::visit_stmt_macro(self, m);
        }
    }

    fn visit_field_value(&mut self, fv: &'ast syn::FieldValue) {
        if !is_test(&fv.attrs) {
            visit::visit_field_value(self, fv);
        }
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        match &attr.meta {
            // Doc comments are prose.
            syn::Meta::NameValue(nv) if nv.path.is_ident("doc") => {}
            syn::Meta::NameValue(nv) => self.visit_expr(&nv.value),
            syn::Meta::List(list) => self.tokens(list.tokens.clone()),
            syn::Meta::Path(_) => {}
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        for attr in &item.attrs {
            self.visit_attribute(attr);
        }
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if let Some(first) = path.segments.first() {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.path(segments, line(first.ident.span()));
        }
        visit::visit_path(self, path);
    }

    fn visit_ident(&mut self, ident: &'ast proc_macro2::Ident) {
        self.read
            .idents
            .push((ident.to_string(), line(ident.span())));
    }

    fn visit_lit_str(&mut self, lit: &'ast syn::LitStr) {
        self.read.literals.push((lit.value(), line(lit.span())));
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.tokens(mac.tokens.clone());
    }
}

/// Reads a file's product code.
fn read(text: &str) -> Result<Read, syn::Error> {
    let file = syn::parse_file(text)?;
    let mut reader = Reader::default();
    reader.visit_file(&file);
    Ok(reader.read)
}

// ---------------------------------------------------------------------------------------------
// The crate's files and modules.

/// A source file of the crate: its module path (`["validate", "check"]`; `[]` for the crate
/// root), its path under src/, whether it is test code, and (product code) its text, read.
#[derive(Debug)]
struct SourceFile {
    module: Vec<String>,
    rel: String,
    text: String,
    read: Read,
    test: bool,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every file `src/lib.rs` reaches through its `mod` declarations, and those of test code,
/// then `src/main.rs` (another crate, of no module of the library); read once for all tests.
fn source_files() -> &'static [SourceFile] {
    static FILES: OnceLock<Vec<SourceFile>> = OnceLock::new();
    FILES.get_or_init(read_source_files)
}

fn read_source_files() -> Vec<SourceFile> {
    let src = src_dir();
    let mut out = Vec::new();
    fn walk(src: &Path, file: PathBuf, module: Vec<String>, test: bool, out: &mut Vec<SourceFile>) {
        let rel = file
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if test {
            // A test module's own modules are test code too; none has any.
            out.push(SourceFile {
                module,
                rel,
                text: String::new(),
                read: Read::default(),
                test,
            });
            return;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let read = read(&text).unwrap_or_else(|e| panic!("src/{rel}: {e}"));
        let (mods, test_mods) = (read.mods.clone(), read.test_mods.clone());
        out.push(SourceFile {
            module: module.clone(),
            rel: rel.clone(),
            text,
            read,
            test,
        });
        let dir = file.parent().unwrap().to_path_buf();
        let own_dir = match file.file_stem().unwrap().to_str().unwrap() {
            "mod" | "lib" | "main" => dir.clone(),
            stem => dir.join(stem),
        };
        let decls = mods.iter().map(|d| (d, false));
        let test_decls = test_mods.iter().map(|d| (d, true));
        for ((name, path), test) in decls.chain(test_decls) {
            let child = match path {
                Some(path) => dir.join(path),
                None if own_dir.join(format!("{name}.rs")).exists() => {
                    own_dir.join(format!("{name}.rs"))
                }
                None => own_dir.join(name).join("mod.rs"),
            };
            assert!(
                child.exists(),
                "src/{rel}: mod {name}: no {}",
                child.display()
            );
            let module = [module.clone(), vec![name.clone()]].concat();
            walk(src, child, module, test, out);
        }
    }
    walk(&src, src.join("lib.rs"), Vec::new(), false, &mut out);
    walk(
        &src,
        src.join("main.rs"),
        vec!["main".into()],
        false,
        &mut out,
    );
    out
}

/// What a file's paths resolve against: the crate's modules and the names the crate root
/// re-exports (`crate::Policy` is `policy`'s).
struct Crate {
    modules: BTreeSet<Vec<String>>,
    reexports: BTreeMap<String, String>,
}

impl Crate {
    fn of_sources(files: &[SourceFile]) -> Crate {
        let modules: BTreeSet<Vec<String>> = files
            .iter()
            .filter(|f| f.module.first().is_none_or(|m| m != "main"))
            .map(|f| f.module.clone())
            .collect();
        let lib = files.iter().find(|f| f.rel == "lib.rs").unwrap();
        let mut reexports = BTreeMap::new();
        for (path, _, _) in &lib.read.paths {
            if let [module, name] = path.as_slice()
                && modules.contains(std::slice::from_ref(module))
            {
                reexports.insert(name.clone(), module.clone());
            }
        }
        Crate { modules, reexports }
    }

    /// The deepest module of the crate a path in module `here` (`inline`: the inline modules
    /// it sits in) reaches: paths from `crate`, `self`, `super` or one of `here`'s own modules.
    /// `None` for a path outside the crate (another crate, a local item).
    fn resolve(&self, path: &[String], here: &[String], inline: &[String]) -> Option<Vec<String>> {
        let here: Vec<String> = [here, inline].concat();
        let (mut base, rest) = match path.first()?.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (here.clone(), &path[1..]),
            "super" => {
                let mut base = here.clone();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                (base, rest)
            }
            child => {
                let module = [here.clone(), vec![child.to_string()]].concat();
                if !self.modules.contains(&module) {
                    return None;
                }
                (module, &path[1..])
            }
        };
        for (i, segment) in rest.iter().enumerate() {
            base.push(segment.clone());
            if !self.modules.contains(&base) {
                base.pop();
                if i == 0
                    && base.is_empty()
                    && let Some(module) = self.reexports.get(segment)
                {
                    base.push(module.clone());
                }
                break;
            }
        }
        Some(base)
    }
}

/// The modules of the crate a file of module `module` names, with the line of each.
fn modules_named(krate: &Crate, module: &[String], read: &Read) -> Vec<(Vec<String>, usize)> {
    read.paths
        .iter()
        .filter_map(|(path, inline, at)| Some((krate.resolve(path, module, inline)?, *at)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The kinds: what only their descriptors may name.

/// How a kind's token is found in a string literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Match {
    /// Wherever it stands as a word: a kind's name, group or resource, a camelCase field
    /// name, a label key of its controller.
    Word,
    /// Only as a segment of a field path (`/spec/replicas`, `spec.tasks[0]`): a field name in
    /// lowercase is an English word too (`replicas`, `tasks`, `trainer`) and a launchgate
    /// config key may be one (`pytorch`).
    Segment,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    text: String,
    how: Match,
    /// Whether it counts in prose (a literal with spaces: a message, a description). A message
    /// may call a kind by its name; it may not spell the kind's fields, group or labels.
    in_prose: bool,
    /// The kind whose descriptor holds it.
    kind: String,
}

/// The names Kubernetes' own Pod and batch/v1 Job use (every field name of their API types,
/// as src/validate/api_fields.json holds them): the shared vocabulary every part of launchgate
/// speaks.
fn kubernetes_vocabulary() -> BTreeSet<String> {
    fn keys(value: &Value, out: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(properties)) = map.get("properties") {
                    out.extend(properties.keys().cloned());
                }
                map.values().for_each(|v| keys(v, out));
            }
            Value::Array(list) => list.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(src_dir().join("validate/api_fields.json")).unwrap();
    let mut out = BTreeSet::new();
    keys(&serde_json::from_str(&text).unwrap(), &mut out);
    out
}

/// Every string a value's `Debug` form holds (a descriptor's, in full: every field, at any
/// depth), and whether it is a segment of a path from an object's root (in a list that starts
/// at `spec` or `metadata`: `["spec", "tasks"]`) rather than a word alone (a role, a value, a
/// mark).
fn debug_strings(debug: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    // The open brackets, with the index in `out` of a list's first string.
    let mut open: Vec<(char, Option<usize>)> = Vec::new();
    let mut chars = debug.chars();
    while let Some(c) = chars.next() {
        match c {
            '[' | '{' | '(' => open.push((c, None)),
            ']' | '}' | ')' => {
                if let Some(('[', Some(first))) = open.pop() {
                    let from_root =
                        matches!(out[first], (ref s, _) if s == "spec" || s == "metadata");
                    for (_, in_path) in &mut out[first..] {
                        *in_path = from_root;
                    }
                }
            }
            '"' => {
                let mut s = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => s.extend(chars.next()),
                        c => s.push(c),
                    }
                }
                if let Some(('[', first @ None)) = open.last_mut() {
                    *first = Some(out.len());
                }
                out.push((s, false));
            }
            _ => {}
        }
    }
    out
}

/// Whether a string is a label or annotation key (`ray.io/group`: a DNS prefix, then a name).
fn is_label_key(s: &str) -> bool {
    s.split_once('/')
        .is_some_and(|(prefix, _)| prefix.contains('.'))
}

/// Whether a string is a field path: names joined by `.` or `/` (`spec.runPolicy`,
/// `/spec/runPolicy`, `replicatedJobs`).
fn is_field_path(s: &str) -> bool {
    let s = s.strip_prefix('/').unwrap_or(s);
    !s.is_empty()
        && s.split(['.', '/']).all(|segment| {
            segment.starts_with(|c: char| c.is_ascii_alphabetic())
                && segment.chars().all(|c| c.is_ascii_alphanumeric())
        })
}

/// The tokens of one kind of a CRD: its identity (name, `kind`, API group, resource, webhook
/// rule) and every string its descriptor holds that is not prose or a version — the field
/// names of its paths, the label keys and identities of its controller — less the Kubernetes
/// vocabulary (`shared`). A field name in lowercase counts only where the descriptor writes it
/// in a path (`spec.failurePolicy.rules`, `["spec", "tasks"]`): a word alone is a role, a
/// value or a label (`head`, `trainer`, `app`).
fn tokens_of_kind(
    name: &str,
    identity: &[&str],
    strings: &[(String, bool)],
    shared: &BTreeSet<String>,
) -> Vec<Token> {
    let token = |text: &str, how| Token {
        text: text.to_string(),
        how,
        in_prose: true,
        kind: name.to_string(),
    };
    let mut out: Vec<Token> = identity
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_empty() && !shared.contains(**s))
        .map(|(i, s)| Token {
            // The name and the `kind`.
            in_prose: i >= 2,
            ..token(s, Match::Word)
        })
        .collect();
    for (s, from_root) in strings {
        let version = s.starts_with('v')
            && s[1..].starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric());
        if s.is_empty() || s.contains(char::is_whitespace) || version || shared.contains(s) {
            continue;
        }
        if is_label_key(s) || !is_field_path(s) {
            // A label key, an annotation, a controller's identity.
            out.push(token(s, Match::Word));
            continue;
        }
        let path = s.strip_prefix('/').unwrap_or(s);
        let in_path = *from_root || path.contains(['.', '/']);
        for segment in path.split(['.', '/']) {
            if shared.contains(segment) {
                continue;
            }
            let inner_upper = segment.chars().skip(1).any(|c| c.is_ascii_uppercase());
            if inner_upper {
                // camelCase or PascalCase: a field, a runtime kind, an action.
                out.push(token(segment, Match::Word));
            } else if in_path && segment.starts_with(|c: char| c.is_ascii_lowercase()) {
                out.push(token(segment, Match::Segment));
            }
            // One capitalised word (`Worker`, `Running`) is a value, not a field.
        }
    }
    out.sort_by(|a, b| a.text.cmp(&b.text));
    out.dedup_by(|a, b| a.text == b.text);
    out
}

/// What the registry's descriptors make a kind's own: the tokens of every kind of a CRD (an
/// API group with a dot). Kubernetes' own kinds (a Pod, a batch/v1 Job) are the vocabulary
/// every part speaks: their names and fields are no kind's own.
fn kind_tokens() -> Vec<Token> {
    /// A registered kind: its API group, its identity and every string of its descriptor.
    struct Registered {
        group: &'static str,
        identity: [&'static str; 5],
        strings: Vec<(String, bool)>,
    }
    let kinds: Vec<Registered> = launchgate::WorkloadKind::all()
        .map(|k| {
            let spec = k.spec();
            Registered {
                group: spec.group,
                identity: [
                    spec.name,
                    spec.kind,
                    spec.group,
                    spec.resource,
                    spec.webhook_rule,
                ],
                strings: debug_strings(&format!("{spec:?}")),
            }
        })
        .collect();
    let mut shared = kubernetes_vocabulary();
    for kind in kinds.iter().filter(|k| !k.group.contains('.')) {
        for (s, _) in &kind.strings {
            let s = s.strip_prefix('/').unwrap_or(s).to_string();
            if is_field_path(&s) {
                shared.extend(s.split(['.', '/']).map(String::from));
            }
            shared.insert(s);
        }
    }
    let crds: Vec<&Registered> = kinds.iter().filter(|k| k.group.contains('.')).collect();
    // A kind's identity is its own, wherever else it is written (a TrainJob's descriptor
    // names the JobSet it makes).
    let mut out = Vec::new();
    for kind in &crds {
        out.extend(tokens_of_kind(
            kind.identity[0],
            &kind.identity,
            &[],
            &shared,
        ));
    }
    let identities: BTreeSet<&str> = kinds.iter().flat_map(|k| k.identity).collect();
    for kind in &crds {
        let strings: Vec<(String, bool)> = kind
            .strings
            .iter()
            .filter(|(s, _)| !identities.contains(s.as_str()))
            .cloned()
            .collect();
        out.extend(tokens_of_kind(kind.identity[0], &[], &strings, &shared));
    }
    let mut seen = BTreeSet::new();
    out.retain(|token| seen.insert(token.text.clone()));
    out
}

/// Whether a token stands in a text: not inside a longer word (an identifier character or a
/// `-`, and for a dotted token a `.`, on neither side), and for a [`Match::Segment`] next to a
/// path separator; in prose only if it counts there.
fn stands_in(token: &Token, text: &str) -> bool {
    if !token.in_prose && text.contains(char::is_whitespace) {
        return false;
    }
    let dotted = token.text.contains('.');
    let joins = |c: Option<char>| {
        c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-' || (dotted && c == '.'))
    };
    text.match_indices(token.text.as_str()).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + token.text.len()..].chars().next();
        if joins(before) || joins(after) {
            return false;
        }
        match token.how {
            Match::Word => true,
            Match::Segment => {
                matches!(before, Some('.' | '/')) || matches!(after, Some('.' | '/' | '['))
            }
        }
    })
}

/// Where a kind may be named: its descriptor, the PyTorch wiring (per kind by nature), the
/// rule table (whose entries say which kinds a rule is about).
fn may_name_kinds(rel: &str) -> bool {
    rel.starts_with("kinds/") || rel.starts_with("pytorch/") || rel == "rules.rs"
}

/// Where a kind's token means something else, or is held to the descriptor another way:
/// (file under src/, token, why). Each is needed (an unused entry fails the test).
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "native/mod.rs",
        "failurePolicy",
        "the failurePolicy of an admission policy and of a webhook (admissionregistration.k8s.io), \
         not a JobSet's",
    ),
    (
        "native/slots.rs",
        "failurePolicy",
        "the failurePolicy of the native admission policies the slots hold",
    ),
    (
        "native/webhooks.rs",
        "failurePolicy",
        "the failurePolicy of the webhook configurations launchgate registers",
    ),
    (
        "policy/mod.rs",
        "pytorch",
        "the key of a queue's own `pytorch` settings in launchgate's config, not Volcano's plugin",
    ),
    (
        "cli/playground/mod.rs",
        "pytorchjob",
        "the name of a playground example, a PyTorchJob's manifest",
    ),
    (
        "cli/playground/mod.rs",
        "pytorch",
        "a directory of the policy-test examples the playground lists",
    ),
];

/// Everything that breaks the architecture in one file (`rel`: its path under src/, which says
/// its module), as `src/<rel>:<line>: …` lines.
fn check_source(rel: &str, text: &str, krate: &Crate, tokens: &[Token]) -> Vec<String> {
    let read = match read(text) {
        Ok(read) => read,
        Err(e) => return vec![format!("src/{rel}: not Rust: {e}")],
    };
    let mut found = Vec::new();
    let module = module_of(rel);
    if let Some(own) = module.first().filter(|m| *m != "main") {
        for (there, at) in modules_named(krate, &module, &read) {
            let Some(dep) = there.first() else { continue };
            if dep != own && layer_of(dep) >= layer_of(own) {
                found.push(format!(
                    "src/{rel}:{at}: {own} (layer {}) uses {} (layer {})",
                    layer_of(own),
                    there.join("::"),
                    layer_of(dep)
                ));
            }
        }
    }
    if !may_name_kinds(rel) {
        for (path, _, at) in &read.paths {
            if let Some(i) = path.iter().position(|s| s == "WorkloadKind")
                && path
                    .get(i + 1)
                    .is_some_and(|s| s.starts_with(|c: char| c.is_ascii_uppercase()))
            {
                found.push(format!(
                    "src/{rel}:{at}: names the kind {}",
                    path[i..i + 2].join("::")
                ));
            }
        }
        let allowed = |token: &Token| {
            ALLOWED
                .iter()
                .any(|(file, text, _)| *file == rel && *text == token.text)
        };
        for token in tokens.iter().filter(|t| !allowed(t)) {
            for (literal, at) in &read.literals {
                if stands_in(token, literal) {
                    found.push(format!(
                        "src/{rel}:{at}: {literal:?} names {} of {}",
                        token.text, token.kind
                    ));
                }
            }
            // An identifier names a kind or a field as a Rust name can: `RayJob`, `runPolicy`
            // (a type named for a runtime kind is a name of launchgate's own).
            let identifier = token.how == Match::Word
                && token.text.chars().all(|c| c.is_ascii_alphanumeric())
                && token.text.chars().any(|c| c.is_ascii_uppercase())
                && (!token.in_prose || token.text.starts_with(|c: char| c.is_ascii_lowercase()));
            if identifier {
                for (ident, at) in &read.idents {
                    if *ident == token.text {
                        found.push(format!(
                            "src/{rel}:{at}: the identifier {ident} names {} of {}",
                            token.text, token.kind
                        ));
                    }
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The module of a file by its path under src/ (`validate/check.rs`: `["validate", "check"]`).
fn module_of(rel: &str) -> Vec<String> {
    let mut path: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    if path == ["lib"] {
        path.clear();
    }
    path
}

// ---------------------------------------------------------------------------------------------
// The checks on the crate.

fn product_files() -> impl Iterator<Item = &'static SourceFile> {
    source_files().iter().filter(|f| !f.test)
}

#[test]
fn every_source_file_is_read_or_is_test_code() {
    let reached: BTreeSet<&str> = source_files().iter().map(|f| f.rel.as_str()).collect();
    let mut all = Vec::new();
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
    rust_files(&src_dir(), &mut all);
    let missed: Vec<String> = all
        .iter()
        .map(|f| {
            f.strip_prefix(src_dir())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .filter(|rel| !reached.contains(rel.as_str()))
        .collect();
    assert!(missed.is_empty(), "files no `mod` declares: {missed:?}");
}

#[test]
fn no_file_breaks_the_layers_or_names_a_kind() {
    let krate = Crate::of_sources(source_files());
    let tokens = kind_tokens();
    let mut found = Vec::new();
    for file in product_files() {
        found.extend(check_source(&file.rel, &file.text, &krate, &tokens));
    }
    assert!(
        found.is_empty(),
        "dependencies must run one way, and outside src/kinds/, src/pytorch/ and src/rules.rs \
         nothing names a kind or its fields (make it a descriptor field):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_allowance_is_needed() {
    let tokens = kind_tokens();
    for (file, token, why) in ALLOWED {
        assert!(!why.is_empty());
        let Some(token) = tokens.iter().find(|t| t.text == *token) else {
            panic!("allowance for {token} in {file}: no kind's token");
        };
        let source = product_files()
            .find(|f| f.rel == *file)
            .unwrap_or_else(|| panic!("allowance for {file}: no such file"));
        assert!(
            source
                .read
                .literals
                .iter()
                .any(|(l, _)| stands_in(token, l)),
            "allowance for {} in {file} is not used",
            token.text
        );
    }
}

/// module -> modules it uses, for every top-level module of src/.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let krate = Crate::of_sources(source_files());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in product_files() {
        let Some(own) = file.module.first().filter(|m| *m != "main") else {
            continue;
        };
        let entry = graph.entry(own.clone()).or_default();
        for (there, _) in modules_named(&krate, &file.module, &file.read) {
            if let Some(dep) = there.first().filter(|d| *d != own) {
                entry.insert(dep.clone());
            }
        }
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
    assert_eq!(cycle_in(&graph), None);
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

/// For every module (the crate root is `[]`), the import graph of its direct parts: part `a`
/// uses part `b` when code anywhere inside `a` names anything inside `b`. A module's own file
/// (its facade: shared types, a table of its parts) is the module itself, not one of its
/// parts: its parts may use it and it may use them.
fn part_graphs() -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let krate = Crate::of_sources(source_files());
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in product_files().filter(|f| f.module.first().is_some_and(|m| m != "main")) {
        let here = &file.module;
        for (there, _) in modules_named(&krate, here, &file.read) {
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

// ---------------------------------------------------------------------------------------------
// The checker, on sources written for it.

fn the_crate() -> Crate {
    Crate::of_sources(source_files())
}

#[test]
fn paths_resolve_through_use_trees_super_self_own_parts_and_reexports() {
    let krate = Crate {
        modules: [
            vec![],
            vec!["a"],
            vec!["a", "b"],
            vec!["a", "c"],
            vec!["a", "c", "d"],
            vec!["e"],
        ]
        .into_iter()
        .map(|p| p.iter().map(|s| s.to_string()).collect())
        .collect(),
        reexports: [("Thing".to_string(), "e".to_string())].into(),
    };
    let at = |code: &str, here: &[&str]| -> Vec<String> {
        let here: Vec<String> = here.iter().map(|s| s.to_string()).collect();
        let mut out: Vec<String> = modules_named(&krate, &here, &read(code).unwrap())
            .into_iter()
            .map(|(m, _)| m.join("::"))
            .collect();
        out.sort();
        out.dedup();
        out
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
        at(
            "fn f() { let x = d::f(); self::d::g(); b::h(); }",
            &["a", "c"]
        ),
        ["a::c::d"]
    );
    assert_eq!(
        at(
            "fn f() -> crate::Thing { x!(crate::a::b::y()); todo!() }",
            &["a", "c"]
        ),
        ["a::b", "e"]
    );
    assert_eq!(
        at("fn f() { y.e(); Self::b(); }", &["a"]),
        Vec::<String>::new()
    );
    // In an inline module, `super` is the file's module.
    assert_eq!(at("mod m { use super::b::X; }", &["a"]), ["a::b"]);
}

/// A file of the lowest layer whose test module holds braces in its strings (a reader counting
/// braces would take the module to run to the end of the file, or to end early), then product
/// code with an upward import and a kind's API group, and a kind named through a macro and an
/// attribute.
const PLANTED: &str = r##"
pub fn parse(text: &str) -> usize { text.len() }

#[cfg(test)]
mod tests {
    use crate::review;
    #[test]
    fn braces() {
        assert_eq!(super::parse("{{{"), 3);
        assert_eq!(super::parse(r#"{"a": "}"}"#), 8);
        assert_eq!(super::parse("}"), 1);
        let _ = "ray.io/group";
    }
}

pub fn after_the_tests() -> &'static str {
    let _ = crate::policy::Policy::default;
    "leaderworkerset.x-k8s.io"
}

#[derive(serde::Deserialize)]
pub struct Spec {
    #[serde(rename = "rayClusterSpec")]
    pub cluster: u8,
}

pub fn named() -> String {
    format!("{}/spec/replicatedJobs", crate::WorkloadKind::JobSet.as_str())
}
"##;

#[test]
fn the_checker_reads_past_braces_in_strings_and_skips_only_test_code() {
    let krate = the_crate();
    // A kind added to the registry brings its tokens: LeaderWorkerSet's (its group, and its
    // webhook rule within it), derived as every registered kind's are.
    let tokens = kind_tokens();
    let found = check_source("json.rs", PLANTED, &krate, &tokens);
    let lines: Vec<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(
        lines,
        [
            "src/json.rs:17: json (layer 0) uses policy (layer 8)",
            "src/json.rs:18: \"leaderworkerset.x-k8s.io\" names leaderworkerset of LeaderWorkerSet",
            "src/json.rs:18: \"leaderworkerset.x-k8s.io\" names leaderworkerset.x-k8s.io of LeaderWorkerSet",
            "src/json.rs:23: \"rayClusterSpec\" names rayClusterSpec of RayJob",
            "src/json.rs:28: \"{}/spec/replicatedJobs\" names replicatedJobs of JobSet",
            "src/json.rs:28: json (layer 0) uses kinds (layer 2)",
            "src/json.rs:28: names the kind WorkloadKind::JobSet",
            "src/json.rs:28: the identifier JobSet names JobSet of JobSet",
        ],
        "{found:#?}"
    );
    // The same file with the test module only: nothing.
    let tests_only = PLANTED.split("pub fn after_the_tests").next().unwrap();
    assert_eq!(
        check_source("json.rs", tests_only, &krate, &tokens),
        Vec::<String>::new()
    );
    // Where kinds may be named, only the layering is checked.
    let found = check_source("kinds/planted.rs", PLANTED, &krate, &tokens);
    assert_eq!(
        found,
        ["src/kinds/planted.rs:17: kinds (layer 2) uses policy (layer 8)"],
        "{found:#?}"
    );
}

#[test]
fn test_code_is_what_cfg_test_and_test_functions_mark() {
    let read = read(
        r#"
#[cfg(all(test, feature = "x"))]
fn a() { "in a"; }
#[cfg(any(test, feature = "x"))]
fn b() { "in b"; }
#[cfg(not(test))]
fn c() { "in c"; }
#[test]
fn d() { "in d"; }
#[tokio::test]
async fn e() { "in e"; }
impl X {
    #[cfg(test)]
    fn f() { "in f"; }
    fn g() { "in g"; }
}
struct Y {
    #[cfg(test)]
    h: [u8; { "in h"; 1 }],
}
#[cfg(test)]
mod t;
mod u;
"#,
    )
    .unwrap();
    let literals: Vec<&str> = read.literals.iter().map(|(l, _)| l.as_str()).collect();
    // `b`'s attribute is product code too.
    assert_eq!(literals, ["x", "in b", "in c", "in g"]);
    assert_eq!(read.mods, [("u".to_string(), None)]);
    assert_eq!(read.test_mods, [("t".to_string(), None)]);
}

#[test]
fn a_token_stands_as_a_word_or_a_path_segment() {
    let word = |text: &str| Token {
        text: text.into(),
        how: Match::Word,
        in_prose: true,
        kind: "K".into(),
    };
    let segment = Token {
        how: Match::Segment,
        ..word("replicas")
    };
    assert!(stands_in(
        &word("runPolicy"),
        "set spec.runPolicy.backoffLimit"
    ));
    assert!(!stands_in(&word("runPolicy"), "runPolicyX"));
    assert!(stands_in(&word("ray.io"), "ray.io/group"));
    assert!(!stands_in(&word("ray.io"), "xray.io"));
    assert!(!stands_in(&word("kubeflow.org"), "trainer.kubeflow.org"));
    assert!(stands_in(&segment, "/spec/replicas"));
    assert!(stands_in(&segment, "spec.replicas[0]"));
    assert!(!stands_in(&segment, "replicas"));
    assert!(!stands_in(&segment, "the replicas of a position"));
    assert!(!stands_in(&word("volcano"), "examples/volcano-job.yaml"));
    let name = Token {
        in_prose: false,
        ..word("RayJob")
    };
    assert!(stands_in(&name, "RayJob"));
    assert!(stands_in(&name, "{}/RayJob"));
    assert!(!stands_in(&name, "a RayJob's deadline"));
}

#[test]
fn the_tokens_come_from_every_registered_kind() {
    let tokens = kind_tokens();
    for token in &tokens {
        println!("{} ({:?}, {})", token.text, token.how, token.kind);
    }
    let has = |text: &str| tokens.iter().any(|t| t.text == text);
    for spec in launchgate::WorkloadKind::all().map(|k| k.spec()) {
        if spec.group.contains('.') {
            assert!(has(spec.name) && has(spec.group), "{}", spec.name);
        } else {
            assert!(!has(spec.name) && !has(spec.resource), "{}", spec.name);
        }
    }
    for field in [
        "pytorchReplicaSpecs",
        "replicatedJobs",
        "runPolicy",
        "minAvailable",
    ] {
        assert!(has(field), "{field}");
    }
    // Kubernetes' own fields are everyone's.
    for field in [
        "template",
        "containers",
        "backoffLimit",
        "activeDeadlineSeconds",
    ] {
        assert!(!has(field), "{field}");
    }
}
