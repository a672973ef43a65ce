//! Reading `serde_json` values cheaply.
//!
//! serde_json keeps objects as `IndexMap`s (the `preserve_order` feature, for a smaller tree):
//! a member lookup hashes its key with SipHash, and comparing two objects looks up every key
//! of one in the other. Kubernetes objects are mostly small maps (an env entry has two
//! members), where a scan is cheaper than a hash, and a copy keeps its members' order, so an
//! in-order comparison needs no lookup at all.

use serde_json::{Map, Value};

/// Maps up to this many members are scanned instead of hashed.
const SCAN_UP_TO: usize = 8;

/// `map[key]`, scanning small maps.
pub(crate) fn member<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() <= SCAN_UP_TO {
        map.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get(key)
    }
}

/// `value[key]` when `value` is an object, scanning small maps.
pub(crate) fn get<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    member(value.as_object()?, key)
}

/// `left == right`, comparing objects member by member in their order: an object and its copy
/// (mutated or not) keep their common members in the same order, so this needs no key lookup.
/// Objects whose members are in another order fall back to serde_json's comparison.
pub(crate) fn same(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            if l.len() != r.len() {
                return false;
            }
            for ((l_key, l_value), (r_key, r_value)) in l.iter().zip(r) {
                if l_key != r_key {
                    return l == r;
                }
                if !same(l_value, r_value) {
                    return false;
                }
            }
            true
        }
        (Value::Array(l), Value::Array(r)) => {
            l.len() == r.len() && l.iter().zip(r).all(|(l, r)| same(l, r))
        }
        _ => left == right,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn members_are_found_in_small_and_large_maps() {
        let small = json!({"name": "a", "value": "b"});
        assert_eq!(get(&small, "value"), Some(&json!("b")));
        assert_eq!(get(&small, "valueFrom"), None);
        let large: Map<String, Value> = (0..20).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(member(&large, "k17"), Some(&json!(17)));
        assert_eq!(member(&large, "k20"), None);
        assert_eq!(get(&json!([1]), "k"), None);
    }

    #[test]
    fn objects_in_another_order_are_the_same() {
        let a = json!({"a": 1, "b": {"c": [1, 2]}});
        let b: Value = serde_json::from_str(r#"{"b": {"c": [1, 2]}, "a": 1}"#).unwrap();
        assert!(same(&a, &b));
        assert!(!same(&a, &json!({"a": 1, "b": {"c": [1, 3]}})));
        assert!(!same(&a, &json!({"a": 1})));
        assert!(!same(&json!(1), &json!(1.0)));
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0i64..4).prop_map(Value::from),
            "[ab]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[abc]", inner), 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn same_is_serde_json_equality(a in value(), b in value()) {
            prop_assert_eq!(same(&a, &b), a == b);
            let reversed = match &b {
                Value::Object(m) => Value::Object(m.iter().rev().map(|(k, v)| (k.clone(), v.clone())).collect()),
                other => other.clone(),
            };
            prop_assert_eq!(same(&a, &reversed), a == b);
            prop_assert!(same(&a, &a.clone()));
        }
    }
}
