//! The variables launchgate writes, shared by every workload kind, and how they are written:
//! upserted by name into the training containers (never appended twice, never into sidecars),
//! the user's value kept unless the queue says `override: true`.
//!
//! | env:// (`init_process_group`) | torchrun (`PET_*`)   | value                                  |
//! |-------------------------------|----------------------|----------------------------------------|
//! | `MASTER_ADDR`                 | `PET_MASTER_ADDR`    | DNS name of the rank-0 pod             |
//! | `MASTER_PORT`                 | `PET_MASTER_PORT`    | rendezvous port                        |
//! | `WORLD_SIZE`                  | `PET_NNODES`         | number of pods (nodes), not processes  |
//! | `RANK`                        | `PET_NODE_RANK`      | index of this pod, 0 on the master     |
//! |                               | `PET_NPROC_PER_NODE` | `nprocPerNode` of the queue, if set    |
//!
//! A user who set only one name of an address/port pair gets the other one with the same
//! value, so env:// and torchrun never disagree about where the master is.

use super::config::{PytorchConfig, WaitForMasterConfig};
use super::site::{Site, Warnings};
use crate::json::Pointer as _;
use crate::patch::MapNode;
use crate::workload;
use crate::workload::edit;
use serde_json::{Map, Value, json};

/// What every pod of one job shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobWiring {
    /// `None` when it cannot be derived (a Job with only `generateName`).
    pub master_addr: Option<String>,
    pub master_port: u16,
    /// Pods that rendezvous (master + workers).
    pub nnodes: i64,
}

/// The only `dnsPolicy` under which a `hostNetwork` pod resolves cluster DNS names.
pub const HOST_NETWORK_DNS_POLICY: &str = "ClusterFirstWithHostNet";

/// Why a `hostNetwork` pod spec that must resolve `MASTER_ADDR` cannot, if it cannot: a
/// `dnsPolicy` the user wrote that is neither `ClusterFirstWithHostNet` nor `None` (their own
/// `dnsConfig`). `user_wrote_dns` comes from [`crate::workload::intent`] for built-in kinds
/// (the API server defaults `ClusterFirst`) and is "present" for custom resources.
pub fn host_network_dns_problem(
    pod_spec: &Map<String, Value>,
    spec_path: &dyn std::fmt::Display,
    user_wrote_dns: bool,
) -> Option<String> {
    if pod_spec.get("hostNetwork").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let policy = pod_spec.get("dnsPolicy").and_then(Value::as_str)?;
    if !user_wrote_dns || policy == HOST_NETWORK_DNS_POLICY || policy == "None" {
        return None;
    }
    Some(format!(
        "{spec_path} uses hostNetwork with dnsPolicy: {policy}, which you wrote; pod DNS names such as MASTER_ADDR resolve from a hostNetwork pod only with dnsPolicy: {HOST_NETWORK_DNS_POLICY} (set that, or leave dnsPolicy out and launchgate sets it)"
    ))
}

/// `metadata.name` of an object or template.
pub fn string_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.at(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// How a message names the `kind` called `name` (`Job "train"`; `Job (generateName)` for one
/// with no name yet).
pub fn display_name(kind: &str, name: &str) -> String {
    if name.is_empty() {
        format!("{kind} (generateName)")
    } else {
        format!("{kind} {name:?}")
    }
}

/// Name of the rendezvous container port.
pub const PORT_NAME: &str = "pytorchjob-port";
/// Name of the wait-for-master init container (the Volcano plugin's name, so it skips its own).
pub const WAIT_FOR_MASTER: &str = "wait-for-master";
/// Downward-API path of a batch/v1 Indexed Job pod's completion index.
pub const COMPLETION_INDEX_FIELD: &str =
    "metadata.annotations['batch.kubernetes.io/job-completion-index']";

pub const MASTER_ADDR: &str = "MASTER_ADDR";
pub const MASTER_PORT: &str = "MASTER_PORT";
pub const WORLD_SIZE: &str = "WORLD_SIZE";
pub const RANK: &str = "RANK";
pub const PET_MASTER_ADDR: &str = "PET_MASTER_ADDR";
pub const PET_MASTER_PORT: &str = "PET_MASTER_PORT";
pub const PET_NNODES: &str = "PET_NNODES";
pub const PET_NODE_RANK: &str = "PET_NODE_RANK";
pub const PET_NPROC_PER_NODE: &str = "PET_NPROC_PER_NODE";

/// Names that mean the same thing and take the same value: each torchrun `PET_*` variable and
/// its env:// counterpart, as the container sees them.
const TWINS: [(&str, &str); 4] = [
    (MASTER_ADDR, PET_MASTER_ADDR),
    (MASTER_PORT, PET_MASTER_PORT),
    (WORLD_SIZE, PET_NNODES),
    (RANK, PET_NODE_RANK),
];

fn twin_of(name: &str) -> Option<&'static str> {
    TWINS.iter().find_map(|(a, b)| {
        if *a == name {
            Some(*b)
        } else if *b == name {
            Some(*a)
        } else {
            None
        }
    })
}

/// A value to write: literal, or a downward-API field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue {
    Literal(String),
    FieldRef(String),
}

impl EnvValue {
    /// The env entry as the API server stores it (`fieldRef.apiVersion` defaulted to `v1`,
    /// so a second pass over a stored object finds it equal).
    pub fn entry(&self, name: &str) -> Value {
        match self {
            EnvValue::Literal(v) => json!({"name": name, "value": v}),
            EnvValue::FieldRef(path) => json!({
                "name": name,
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}
            }),
        }
    }
}

/// The job-wide variables, in the order they are written.
pub fn job_vars(cfg: &PytorchConfig, wiring: &JobWiring) -> Vec<(&'static str, EnvValue)> {
    let mut vars = Vec::new();
    let port = EnvValue::Literal(wiring.master_port.to_string());
    let nnodes = EnvValue::Literal(wiring.nnodes.to_string());
    if let Some(addr) = &wiring.master_addr {
        vars.push((MASTER_ADDR, EnvValue::Literal(addr.clone())));
    }
    vars.push((MASTER_PORT, port.clone()));
    vars.push((WORLD_SIZE, nnodes.clone()));
    if cfg.torchrun {
        if let Some(addr) = &wiring.master_addr {
            vars.push((PET_MASTER_ADDR, EnvValue::Literal(addr.clone())));
        }
        vars.push((PET_MASTER_PORT, port));
        vars.push((PET_NNODES, nnodes));
        if let Some(nproc) = cfg.nproc_per_node {
            vars.push((PET_NPROC_PER_NODE, EnvValue::Literal(nproc.to_string())));
        }
    }
    vars
}

/// The per-pod rank variables.
pub fn rank_vars(cfg: &PytorchConfig, rank: EnvValue) -> Vec<(&'static str, EnvValue)> {
    let mut vars = vec![(RANK, rank.clone())];
    if cfg.torchrun {
        vars.push((PET_NODE_RANK, rank));
    }
    vars
}

fn renamed(entry: &Value, name: &str) -> Value {
    let mut e = entry.clone();
    if let Some(m) = e.as_object_mut() {
        m.insert("name".into(), json!(name));
    }
    e
}

fn describe(entry: &Value) -> String {
    match crate::json::get(entry, "value") {
        Some(Value::String(v)) => format!("{v:?}"),
        _ => "(valueFrom)".into(),
    }
}

/// Upserts `vars` into one container. Returns true when it changed something.
pub fn write_env(
    container: &mut MapNode<'_>,
    vars: &[(&'static str, EnvValue)],
    cfg: &PytorchConfig,
    where_: &dyn std::fmt::Display,
    findings: &mut dyn Warnings,
) -> bool {
    let mut changed = false;
    let mut from_env_from = Vec::new();
    for (name, ours) in vars {
        let our_entry = ours.entry(name);
        // A value the container may get from envFrom is not overridden behind its back.
        if let Some(source) = workload::env_from_source(container, name) {
            from_env_from.push((*name, source));
            continue;
        }
        if cfg.override_user_values {
            changed |= edit::upsert_named(container, "env", our_entry, true).changed();
            continue;
        }
        // A pair mirrors the value you set on its twin, except PET_NNODES: a WORLD_SIZE you
        // wrote may count processes (nodes × GPUs), while torchrun's --nnodes counts pods.
        let twin_entry = twin_of(name)
            .filter(|_| *name != PET_NNODES)
            .and_then(|t| workload::effective_env(container, t).map(|e| renamed(e, name)));
        match workload::effective_env(container, name) {
            // A torchrun twin mirroring the user's env:// value is not worth a second warning.
            Some(existing)
                if *existing == our_entry
                    || (name.starts_with("PET_") && Some(existing) == twin_entry.as_ref()) => {}
            Some(existing) => findings.warn(crate::rules::PYTORCH_ENV_KEPT, format!(
                "launchgate: {where_} keeps its {name}={} (launchgate would set {}; `pytorch.override: true` replaces it)",
                describe(existing),
                describe(&our_entry),
            )),
            None => {
                let desired = twin_entry.unwrap_or(our_entry);
                changed |= edit::upsert_named(container, "env", desired, false).changed();
            }
        }
    }
    if !from_env_from.is_empty() {
        findings.env_from(where_, &from_env_from);
    }
    if cfg.torchrun {
        changed |= follow_shadowed_twins(container);
    }
    changed
}

/// Volcano's pytorch plugin appends `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE` (and `RANK` on
/// master and worker pods) to every container of every pod, after the template's entries;
/// before Volcano v1.12 its `WORLD_SIZE` is the sum of *every* task's replicas, a tensorboard
/// task included. The kubelet uses the last entry, so that sum would be the world size the
/// program sees. When the env ends with the plugin's block and the template (launchgate's
/// wiring, or the user) set a `WORLD_SIZE` before it, the block's `WORLD_SIZE` is set to the
/// template's: the rendezvous size. Idempotent (a second pass finds them equal).
pub fn keep_template_world_size(container: &mut MapNode<'_>) -> bool {
    let Some(env) = crate::json::member_mut(container, "env").and_then(Value::as_array_mut) else {
        return false;
    };
    let names: Vec<Option<&str>> = env.iter().map(workload::name_of).collect();
    let ends_with = |tail: &[&str]| {
        names.len() >= tail.len()
            && names[names.len() - tail.len()..]
                .iter()
                .zip(tail)
                .all(|(n, t)| *n == Some(*t))
    };
    let block_ws = if ends_with(&[MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK]) {
        names.len() - 2
    } else if ends_with(&[MASTER_ADDR, MASTER_PORT, WORLD_SIZE]) {
        names.len() - 1
    } else {
        return false;
    };
    let Some(template) = names[..block_ws - 2]
        .iter()
        .rposition(|n| *n == Some(WORLD_SIZE))
    else {
        return false;
    };
    if env[block_ws] == env[template] {
        return false;
    }
    env[block_ws] = env[template].clone();
    true
}

/// Makes each `PET_*` variable that mirrors a *shadowed* entry of its env:// twin follow the
/// entry the container actually sees. When a controller appends its own value after the pod
/// template's (Volcano's pytorch plugin appends `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE` and
/// `RANK`), the kubelet uses the appended one; a `PET_*` copy of the earlier value would send
/// torchrun elsewhere than `init_process_group("env://")`.
pub fn follow_shadowed_twins(container: &mut MapNode<'_>) -> bool {
    let mut changed = false;
    for (env_name, pet_name) in TWINS {
        if !workload::env_is_shadowed(container, env_name) {
            continue;
        }
        let (Some(effective), Some(pet)) = (
            workload::effective_env(container, env_name),
            workload::effective_env(container, pet_name),
        ) else {
            continue;
        };
        let wanted = renamed(effective, pet_name);
        if *pet == wanted {
            continue;
        }
        let mirrors_shadowed = container
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|e| workload::name_of(e) == Some(env_name))
            .any(|e| renamed(e, pet_name) == *pet);
        if mirrors_shadowed {
            changed |= edit::upsert_named(container, "env", wanted, true).changed();
        }
    }
    changed
}

/// Declares the rendezvous port unless a port of that name or number is already there.
/// Never a second port of the same name.
pub fn write_port(
    container: &mut MapNode<'_>,
    port: u16,
    where_: &dyn std::fmt::Display,
    findings: &mut dyn Warnings,
) -> bool {
    let same_name_other_number = container
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| workload::name_of(p) == Some(PORT_NAME))
        .and_then(|p| p.get("containerPort"))
        .filter(|n| n.as_i64() != Some(i64::from(port)))
        .cloned();
    if let Some(number) = same_name_other_number {
        findings.warn(crate::rules::PYTORCH_PORT_KEPT, format!(
            "launchgate: {where_} declares port {PORT_NAME} as {number} but the rendezvous port is {port}; it was left as is"
        ));
    }
    let changed = edit::ensure_port(container, PORT_NAME, i64::from(port));
    edit::drop_if_empty(container, "ports");
    changed
}

/// Writes `vars` (and the port, when `port` is set) into every training container.
///
/// On a `hostNetwork` pod the API server defaults every port's `hostPort` to its
/// `containerPort` and rejects a pod that declares the same host port twice, so there the port
/// goes only to the first training container, and not at all when any container of the pod
/// already declares that number.
pub fn wire_pod_spec(
    ctx: &dyn Site,
    pod_spec: &mut MapNode<'_>,
    spec_path: &dyn std::fmt::Display,
    vars: &[(&'static str, EnvValue)],
    port: Option<u16>,
    findings: &mut dyn Warnings,
) -> bool {
    let cfg = ctx.pytorch();
    let host_network =
        crate::json::member(pod_spec, "hostNetwork").and_then(Value::as_bool) == Some(true);
    let mut host_port_taken = host_network
        && port.is_some_and(|port| {
            workload::containers(pod_spec, ctx.sidecars())
                .any(|(_, c)| edit::declares_tcp_port(c, i64::from(port)))
        });
    let mut changed = false;
    ctx.for_each_training_container(pod_spec, spec_path, &mut |where_, c| {
        changed |= write_env(c, vars, cfg, where_, findings);
        // The port is the one the container rendezvous on: a MASTER_PORT you kept wins.
        let port = port.map(|p| {
            workload::effective_env_value(c, MASTER_PORT)
                .and_then(|v| v.parse::<u16>().ok())
                .filter(|v| *v != 0)
                .unwrap_or(p)
        });
        if let Some(port) = port
            && !host_port_taken
        {
            changed |= write_port(c, port, where_, findings);
            host_port_taken = host_network && edit::declares_tcp_port(c, i64::from(port));
        }
    });
    changed
}

/// On a `hostNetwork` pod spec, sets `dnsPolicy: ClusterFirstWithHostNet` unless the user
/// wrote a `dnsPolicy` (then [`host_network_dns_problem`] explains, and the caller warns or
/// denies). Returns true when it changed the spec.
pub fn ensure_host_network_dns(
    pod_spec: &mut MapNode<'_>,
    spec_path: &dyn std::fmt::Display,
    user_wrote_dns: bool,
    findings: &mut dyn Warnings,
) -> bool {
    if crate::json::member(pod_spec, "hostNetwork").and_then(Value::as_bool) != Some(true) {
        return false;
    }
    if let Some(problem) = host_network_dns_problem(pod_spec, spec_path, user_wrote_dns) {
        findings.warn(
            crate::rules::PYTORCH_HOST_NETWORK_DNS,
            format!("launchgate: {problem}"),
        );
        return false;
    }
    let current = crate::json::member(pod_spec, "dnsPolicy").and_then(Value::as_str);
    if matches!(current, Some(HOST_NETWORK_DNS_POLICY | "None")) {
        return false;
    }
    pod_spec.insert("dnsPolicy".into(), json!(HOST_NETWORK_DNS_POLICY));
    true
}

/// The wait script: TCP connect (not only DNS), bounded by `WAIT_TIMEOUT_SECONDS`; a pod whose
/// `NODE_RANK` is 0 is the master and does not wait for itself. Everything it needs comes from
/// the init container's env, so nothing user-controlled is spliced into shell text.
pub const WAIT_SCRIPT: &str = r#"if [ "${NODE_RANK:-}" = "0" ]; then
  echo "node rank 0 is the master: not waiting"
  exit 0
fi
echo "Waiting up to ${WAIT_TIMEOUT_SECONDS}s for the master ${MASTER_ADDR}:${MASTER_PORT} to accept TCP connections..."
start=$(date +%s)
until nc -z -w 2 "${MASTER_ADDR}" "${MASTER_PORT}" 2>/dev/null; do
  if [ $(( $(date +%s) - start )) -ge "${WAIT_TIMEOUT_SECONDS}" ]; then
    echo "Timed out after ${WAIT_TIMEOUT_SECONDS}s waiting for ${MASTER_ADDR}:${MASTER_PORT}" >&2
    exit 1
  fi
  sleep 2
done
echo "Master ${MASTER_ADDR}:${MASTER_PORT} is accepting connections""#;

/// Adds the wait-for-master init container unless one of that name exists.
/// `node_rank` (when set) lets rank 0 skip the wait on templates shared by all ranks.
pub fn write_wait_for_master(
    cfg: &WaitForMasterConfig,
    pod_spec: &mut MapNode<'_>,
    master_addr: &str,
    master_port: u16,
    node_rank: Option<EnvValue>,
) -> bool {
    let exists = pod_spec
        .get("initContainers")
        .and_then(Value::as_array)
        .is_some_and(|list| {
            list.iter()
                .any(|c| workload::name_of(c) == Some(WAIT_FOR_MASTER))
        });
    if exists {
        return false;
    }
    let mut env = vec![
        EnvValue::Literal(master_addr.to_string()).entry(MASTER_ADDR),
        EnvValue::Literal(master_port.to_string()).entry(MASTER_PORT),
        EnvValue::Literal(cfg.timeout_seconds.to_string()).entry("WAIT_TIMEOUT_SECONDS"),
    ];
    if let Some(rank) = node_rank {
        env.push(rank.entry("NODE_RANK"));
    }
    let mut resources = Map::new();
    for (key, list) in [
        ("requests", &cfg.resources.requests),
        ("limits", &cfg.resources.limits),
    ] {
        if !list.is_empty() {
            resources.insert(key.into(), json!(list));
        }
    }
    let container = json!({
        "name": WAIT_FOR_MASTER,
        "image": cfg.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", WAIT_SCRIPT],
        "env": env,
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "runAsUser": 65534,
            "seccompProfile": {"type": "RuntimeDefault"}
        }
    });
    pod_spec.array_or_new("initContainers").push(container);
    true
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plugins_appended_world_size_is_the_rendezvous_size() {
        let e = |n: &str, v: &str| json!({"name": n, "value": v});
        // The template (launchgate's wiring: master + 2 workers), then the plugin's block
        // counting a tensorboard task too, with RANK on a worker pod.
        let mut c = json!({"env": [e("HF_HOME", "/c"), e("MASTER_ADDR", "j-master-0.j"),
            e("MASTER_PORT", "23456"), e("WORLD_SIZE", "3"), e("PET_NNODES", "3"),
            e("MASTER_ADDR", "j-master-0.j"), e("MASTER_PORT", "23456"), e("WORLD_SIZE", "4"),
            e("RANK", "2")]});
        let c = c.as_object_mut().unwrap();
        assert!(keep_template_world_size(&mut Node::scratch(c)));
        assert_eq!(workload::effective_env_value(c, "WORLD_SIZE"), Some("3"));
        assert!(
            !keep_template_world_size(&mut Node::scratch(c)),
            "idempotent"
        );
        // A tensorboard pod: no RANK in the block.
        let mut t = json!({"env": [e("WORLD_SIZE", "3"), e("MASTER_ADDR", "a"),
            e("MASTER_PORT", "1"), e("WORLD_SIZE", "4")]});
        assert!(keep_template_world_size(&mut Node::scratch(
            t.as_object_mut().unwrap()
        )));
        assert_eq!(t["env"][3]["value"], "3");
        // No template WORLD_SIZE (nothing wired): the plugin's value stays.
        let mut plain = json!({"env": [e("MASTER_ADDR", "a"), e("MASTER_PORT", "1"),
            e("WORLD_SIZE", "4"), e("RANK", "0")]});
        assert!(!keep_template_world_size(&mut Node::scratch(
            plain.as_object_mut().unwrap()
        )));
        // Not the plugin's block (the user's own duplicates): untouched.
        let mut user = json!({"env": [e("WORLD_SIZE", "8"), e("WORLD_SIZE", "2")]});
        assert!(!keep_template_world_size(&mut Node::scratch(
            user.as_object_mut().unwrap()
        )));
    }

    use super::*;
    use crate::mutate::Findings;
    use crate::patch::Node;
    use crate::pytorch::config::NprocPerNode;

    fn cfg() -> PytorchConfig {
        PytorchConfig::default()
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn names(c: &Map<String, Value>) -> Vec<&str> {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect()
    }

    fn wiring() -> JobWiring {
        JobWiring {
            master_addr: Some("j-master-0.j".into()),
            master_port: 23456,
            nnodes: 3,
        }
    }

    #[test]
    fn job_vars_follow_the_torchrun_switch() {
        let mut c = cfg();
        c.torchrun = false;
        let names: Vec<_> = job_vars(&c, &wiring()).iter().map(|v| v.0).collect();
        assert_eq!(names, [MASTER_ADDR, MASTER_PORT, WORLD_SIZE]);
        c.torchrun = true;
        c.nproc_per_node = Some(NprocPerNode::Auto);
        let vars = job_vars(&c, &wiring());
        assert_eq!(
            vars.last().unwrap(),
            &(PET_NPROC_PER_NODE, EnvValue::Literal("auto".into()))
        );
        assert!(vars.contains(&(PET_NNODES, EnvValue::Literal("3".into()))));
        let no_addr = JobWiring {
            master_addr: None,
            ..wiring()
        };
        assert!(
            job_vars(&c, &no_addr)
                .iter()
                .all(|(n, _)| *n != MASTER_ADDR && *n != PET_MASTER_ADDR)
        );
    }

    #[test]
    fn user_values_are_kept_and_mirrored_to_the_twin() {
        let mut c = obj(json!({"name": "t", "env": [{"name": "MASTER_PORT", "value": "29500"}]}));
        let mut f = Findings::default();
        assert!(write_env(
            &mut Node::scratch(&mut c),
            &job_vars(&cfg(), &wiring()),
            &cfg(),
            &"c",
            &mut f
        ));
        assert_eq!(
            workload::effective_env_value(&c, MASTER_PORT),
            Some("29500")
        );
        assert_eq!(
            workload::effective_env_value(&c, PET_MASTER_PORT),
            Some("29500")
        );
        assert_eq!(f.warning_texts().len(), 1, "{:?}", f.warning_texts());
        assert!(f.warning_texts()[0].contains("keeps its MASTER_PORT=\"29500\""));
        // A second pass changes nothing and warns the same once.
        let before = c.clone();
        let mut f = Findings::default();
        assert!(!write_env(
            &mut Node::scratch(&mut c),
            &job_vars(&cfg(), &wiring()),
            &cfg(),
            &"c",
            &mut f
        ));
        assert_eq!(c, before);
        assert_eq!(f.warning_texts().len(), 1, "{:?}", f.warning_texts());
    }

    #[test]
    fn reads_and_writes_follow_the_last_entry() {
        // The W&B agent appended MASTER_PORT: the container sees 29500, not 1234.
        let mut c = obj(json!({"name": "t", "env": [
            {"name": "MASTER_PORT", "value": "1234"},
            {"name": "MASTER_PORT", "value": "29500"}
        ]}));
        let mut f = Findings::default();
        write_env(
            &mut Node::scratch(&mut c),
            &job_vars(&cfg(), &wiring()),
            &cfg(),
            &"c",
            &mut f,
        );
        assert_eq!(
            workload::effective_env_value(&c, PET_MASTER_PORT),
            Some("29500")
        );
        assert!(
            f.warning_texts()[0].contains("MASTER_PORT=\"29500\""),
            "{:?}",
            f.warning_texts()
        );
        // override replaces the effective (last) entry, so the container sees ours.
        let mut o = cfg();
        o.override_user_values = true;
        let mut c = obj(json!({"name": "t", "env": [
            {"name": "WORLD_SIZE", "value": "1"},
            {"name": "WORLD_SIZE", "value": "16"}
        ]}));
        write_env(
            &mut Node::scratch(&mut c),
            &job_vars(&o, &wiring()),
            &o,
            &"c",
            &mut f,
        );
        assert_eq!(workload::effective_env_value(&c, WORLD_SIZE), Some("3"));
        assert_eq!(workload::effective_env_value(&c, PET_NNODES), Some("3"));
    }

    #[test]
    fn twins_follow_an_appended_env_value() {
        // The template had MASTER_PORT=29500 mirrored into PET_MASTER_PORT; Volcano's pytorch
        // plugin then appended its own MASTER_PORT, which is what the container sees.
        let mut c = obj(json!({"name": "t", "env": [
            {"name": "MASTER_PORT", "value": "29500"},
            {"name": "PET_MASTER_PORT", "value": "29500"},
            {"name": "PET_NNODES", "value": "9"},
            {"name": "MASTER_PORT", "value": "23456"},
            {"name": "WORLD_SIZE", "value": "3"}
        ]}));
        assert!(follow_shadowed_twins(&mut Node::scratch(&mut c)));
        assert_eq!(
            workload::effective_env_value(&c, PET_MASTER_PORT),
            Some("23456")
        );
        assert_eq!(
            workload::effective_env_value(&c, PET_NNODES),
            Some("9"),
            "a twin that mirrors no shadowed entry is the user's"
        );
        assert!(
            !follow_shadowed_twins(&mut Node::scratch(&mut c)),
            "idempotent"
        );
        // A twin the user set to something else entirely is left alone.
        let mut c = obj(json!({"name": "t", "env": [
            {"name": "MASTER_ADDR", "value": "a"},
            {"name": "PET_MASTER_ADDR", "value": "mine"},
            {"name": "MASTER_ADDR", "value": "b"}
        ]}));
        assert!(!follow_shadowed_twins(&mut Node::scratch(&mut c)));
    }

    #[test]
    fn override_replaces_in_place_without_duplicates() {
        let mut c = obj(json!({"name": "t", "env": [
            {"name": "WORLD_SIZE", "value": "16"},
            {"name": "OTHER", "value": "x"}
        ]}));
        let mut o = cfg();
        o.override_user_values = true;
        let mut f = Findings::default();
        assert!(write_env(
            &mut Node::scratch(&mut c),
            &job_vars(&o, &wiring()),
            &o,
            &"c",
            &mut f
        ));
        assert_eq!(names(&c)[0], WORLD_SIZE, "replaced where it was");
        assert_eq!(workload::effective_env_value(&c, WORLD_SIZE), Some("3"));
        let n = names(&c);
        let mut unique = n.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(n.len(), unique.len(), "{n:?}");
        assert!(!write_env(
            &mut Node::scratch(&mut c),
            &job_vars(&o, &wiring()),
            &o,
            &"c",
            &mut f
        ));
    }

    #[test]
    fn field_ref_matches_the_api_defaulted_form() {
        let e = EnvValue::FieldRef(COMPLETION_INDEX_FIELD.into()).entry(RANK);
        assert_eq!(e["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        let mut c = obj(json!({"name": "t", "env": [e.clone()]}));
        let mut f = Findings::default();
        let vars = rank_vars(&cfg(), EnvValue::FieldRef(COMPLETION_INDEX_FIELD.into()));
        assert!(write_env(
            &mut Node::scratch(&mut c),
            &vars,
            &cfg(),
            &"c",
            &mut f
        ));
        assert!(f.warning_texts().is_empty());
        assert_eq!(names(&c), [RANK, PET_NODE_RANK]);
    }

    #[test]
    fn port_is_never_declared_twice_by_name() {
        let mut f = Findings::default();
        let mut c = obj(json!({"ports": [{"name": PORT_NAME, "containerPort": 123}]}));
        assert!(!write_port(&mut Node::scratch(&mut c), 23456, &"c", &mut f));
        assert_eq!(c["ports"].as_array().unwrap().len(), 1);
        assert!(
            f.warning_texts()[0].contains("123"),
            "{:?}",
            f.warning_texts()
        );
        let mut c = obj(json!({"name": "t"}));
        assert!(write_port(&mut Node::scratch(&mut c), 23456, &"c", &mut f));
        assert_eq!(
            c["ports"],
            json!([{"name": PORT_NAME, "containerPort": 23456, "protocol": "TCP"}])
        );
        assert!(!write_port(&mut Node::scratch(&mut c), 23456, &"c", &mut f));
        let mut c = obj(json!({"name": "t", "ports": [{"name": "http", "containerPort": 23456}]}));
        assert!(!write_port(&mut Node::scratch(&mut c), 23456, &"c", &mut f));
    }

    #[test]
    fn host_network_pods_get_cluster_first_with_host_net() {
        let mut f = Findings::default();
        // The API server's default ClusterFirst is replaced.
        let mut spec = obj(json!({"hostNetwork": true, "dnsPolicy": "ClusterFirst"}));
        assert!(ensure_host_network_dns(
            &mut Node::scratch(&mut spec),
            &"spec",
            false,
            &mut f
        ));
        assert_eq!(spec["dnsPolicy"], HOST_NETWORK_DNS_POLICY);
        assert!(!ensure_host_network_dns(
            &mut Node::scratch(&mut spec),
            &"spec",
            false,
            &mut f
        ));
        let mut spec = obj(json!({"hostNetwork": true}));
        assert!(ensure_host_network_dns(
            &mut Node::scratch(&mut spec),
            &"spec",
            false,
            &mut f
        ));
        assert!(f.warning_texts().is_empty());
        // A dnsPolicy the user wrote is kept, and explained.
        let mut spec = obj(json!({"hostNetwork": true, "dnsPolicy": "ClusterFirst"}));
        assert!(!ensure_host_network_dns(
            &mut Node::scratch(&mut spec),
            &"spec",
            true,
            &mut f
        ));
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert!(
            f.warning_texts()[0].contains("dnsPolicy: ClusterFirst, which you wrote")
                && f.warning_texts()[0].contains("ClusterFirstWithHostNet"),
            "{:?}",
            f.warning_texts()
        );
        // Own DNS config, and pods on the pod network, are left alone.
        for spec in [
            json!({"hostNetwork": true, "dnsPolicy": "None"}),
            json!({"dnsPolicy": "ClusterFirst"}),
        ] {
            let mut spec = obj(spec);
            let before = spec.clone();
            assert!(!ensure_host_network_dns(
                &mut Node::scratch(&mut spec),
                &"spec",
                true,
                &mut f
            ));
            assert!(!ensure_host_network_dns(
                &mut Node::scratch(&mut spec),
                &"spec",
                false,
                &mut f
            ));
            assert_eq!(spec, before);
        }
    }

    #[test]
    fn wait_for_master_is_added_once_with_tcp_check() {
        let cfg = WaitForMasterConfig::default();
        let mut spec = obj(json!({"containers": []}));
        assert!(write_wait_for_master(
            &cfg,
            &mut Node::scratch(&mut spec),
            "m-0.j",
            23456,
            None
        ));
        assert!(!write_wait_for_master(
            &cfg,
            &mut Node::scratch(&mut spec),
            "m-0.j",
            23456,
            None
        ));
        let init = &spec["initContainers"][0];
        assert_eq!(init["image"], "busybox:1.36.1");
        assert!(init["command"][2].as_str().unwrap().contains("nc -z"));
        assert_eq!(
            init["env"][0],
            json!({"name": "MASTER_ADDR", "value": "m-0.j"})
        );
        assert_eq!(init["env"][2]["value"], "300");
        assert_eq!(init["resources"]["limits"]["cpu"], "100m");
        assert_eq!(spec["initContainers"].as_array().unwrap().len(), 1);
    }
}
