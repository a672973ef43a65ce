//! Upserts by name for env vars, ports, volumes and volume mounts: never a duplicate name,
//! never a second append on reinvocation.

use super::name_of;
use crate::json;
use crate::patch::MapNode;
use serde_json::{Map, Value};

/// What happened to an upserted item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsert {
    Added,
    Replaced,
    /// Present already with the same value, or present and kept (no override).
    Unchanged,
}

impl Upsert {
    pub fn changed(self) -> bool {
        !matches!(self, Upsert::Unchanged)
    }
}

/// An absolute path with repeated and trailing slashes removed (`/srv//nfs/` → `/srv/nfs`), so
/// two spellings of one NFS export or mount path compare equal.
pub fn normalise_path(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

/// The container's volume mount at `path` (paths compared normalised), if it has one.
pub fn mount_at<'a>(container: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let wanted = normalise_path(path);
    json::member(container, "volumeMounts")?
        .as_array()?
        .iter()
        .find(|m| {
            json::get(m, "mountPath")
                .and_then(Value::as_str)
                .is_some_and(|p| normalise_path(p) == wanted)
        })
}

/// Deep-merges the object `from` into `into` (objects member by member, anything else
/// replaced); true when `into` changed. Nothing when `from` is not an object.
pub fn deep_merge(into: &mut MapNode<'_>, from: &Value) -> bool {
    let Some(from) = from.as_object() else {
        return false;
    };
    let mut changed = false;
    for (k, v) in from {
        match (json::member(into, k), v) {
            (Some(Value::Object(_)), Value::Object(_)) => {
                changed |= deep_merge(&mut into.object(k).expect("an object member"), v);
            }
            (Some(existing), _) if existing == v => {}
            _ => {
                into.set(k, v.clone());
                changed = true;
            }
        }
    }
    changed
}

/// Upserts `item` (which has a `name`) into `map[list]`. An existing entry with that name is
/// kept unless `replace` is set, in which case it is replaced in place.
///
/// When the name appears more than once (an `env` list that a controller appended to), the
/// **last** entry is the one compared and replaced: it is the one the kubelet uses.
pub fn upsert_named(map: &mut MapNode<'_>, list: &str, item: Value, replace: bool) -> Upsert {
    let name = name_of(&item).unwrap_or_default();
    let mut items = map.array_or_new(list);
    match items.iter().rposition(|e| name_of(e) == Some(name)) {
        Some(index) if json::same(&items[index], &item) => Upsert::Unchanged,
        Some(index) if replace => {
            items.replace(index, item);
            Upsert::Replaced
        }
        Some(_) => Upsert::Unchanged,
        None => {
            items.push(item);
            Upsert::Added
        }
    }
}

/// Upserts a literal env var `name=value`.
pub fn upsert_env(container: &mut MapNode<'_>, name: &str, value: &str, replace: bool) -> Upsert {
    upsert_named(
        container,
        "env",
        serde_json::json!({"name": name, "value": value}),
        replace,
    )
}

/// True when `port` is a TCP port declaration with number `number` (protocol defaults to TCP).
fn is_tcp_port(port: &Value, number: i64) -> bool {
    json::get(port, "containerPort").and_then(Value::as_i64) == Some(number)
        && json::get(port, "protocol")
            .and_then(Value::as_str)
            .unwrap_or("TCP")
            == "TCP"
}

/// True when `container` declares TCP port `number` (under any name).
pub fn declares_tcp_port(container: &Map<String, Value>, number: i64) -> bool {
    json::member(container, "ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|p| is_tcp_port(p, number))
}

/// Adds `{name, containerPort}` unless a port with that name *or* that number (TCP) exists.
pub fn ensure_port(container: &mut MapNode<'_>, name: &str, port: i64) -> bool {
    let mut ports = container.array_or_new("ports");
    if ports
        .iter()
        .any(|p| name_of(p) == Some(name) || is_tcp_port(p, port))
    {
        return false;
    }
    ports.push(serde_json::json!({"name": name, "containerPort": port, "protocol": "TCP"}));
    true
}

/// Removes an empty array left behind by [`MapNode::array_or_new`] when nothing was added.
pub fn drop_if_empty(map: &mut MapNode<'_>, key: &str) {
    if json::member(map, key)
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        map.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::Node;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn env_upsert_never_duplicates() {
        let mut c = obj(json!({"name": "c", "env": [{"name": "A", "value": "user"}]}));
        assert_eq!(
            upsert_env(&mut Node::scratch(&mut c), "A", "ours", false),
            Upsert::Unchanged
        );
        assert_eq!(crate::workload::effective_env_value(&c, "A"), Some("user"));
        assert_eq!(
            upsert_env(&mut Node::scratch(&mut c), "A", "ours", true),
            Upsert::Replaced
        );
        assert_eq!(crate::workload::effective_env_value(&c, "A"), Some("ours"));
        assert_eq!(
            upsert_env(&mut Node::scratch(&mut c), "A", "ours", true),
            Upsert::Unchanged
        );
        assert_eq!(
            upsert_env(&mut Node::scratch(&mut c), "B", "1", false),
            Upsert::Added
        );
        assert_eq!(
            upsert_env(&mut Node::scratch(&mut c), "B", "1", false),
            Upsert::Unchanged
        );
        assert_eq!(c["env"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn env_upsert_follows_the_effective_last_entry() {
        // The W&B agent appended a second A: the kubelet uses "agent".
        let mut c =
            obj(json!({"env": [{"name": "A", "value": "user"}, {"name": "A", "value": "agent"}]}));
        assert_eq!(crate::workload::effective_env_value(&c, "A"), Some("agent"));
        assert_eq!(
            upsert_env(&mut Node::scratch(&mut c), "A", "agent", false),
            Upsert::Unchanged
        );
        assert_eq!(
            upsert_env(&mut Node::scratch(&mut c), "A", "ours", true),
            Upsert::Replaced
        );
        assert_eq!(
            c["env"],
            json!([{"name": "A", "value": "user"}, {"name": "A", "value": "ours"}]),
            "the effective entry is replaced, the shadowed one left"
        );
        assert_eq!(crate::workload::effective_env_value(&c, "A"), Some("ours"));
        assert_eq!(
            upsert_env(&mut Node::scratch(&mut c), "A", "ours", true),
            Upsert::Unchanged
        );
    }

    #[test]
    fn port_checks_name_and_number() {
        let mut c = obj(json!({"ports": [{"name": "pytorchjob-port", "containerPort": 123}]}));
        assert!(!ensure_port(
            &mut Node::scratch(&mut c),
            "pytorchjob-port",
            23456
        ));
        let mut c = obj(json!({"ports": [{"name": "http", "containerPort": 23456}]}));
        assert!(!ensure_port(
            &mut Node::scratch(&mut c),
            "pytorchjob-port",
            23456
        ));
        let mut c = obj(json!({}));
        assert!(ensure_port(
            &mut Node::scratch(&mut c),
            "pytorchjob-port",
            23456
        ));
        assert!(!ensure_port(
            &mut Node::scratch(&mut c),
            "pytorchjob-port",
            23456
        ));
        assert_eq!(c["ports"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn non_array_lists_are_replaced_safely() {
        let mut c = obj(json!({"env": "garbage"}));
        assert_eq!(
            upsert_env(&mut Node::scratch(&mut c), "A", "1", false),
            Upsert::Added
        );
        assert_eq!(c["env"], json!([{"name": "A", "value": "1"}]));
    }
}
