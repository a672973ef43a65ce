//! The JSON Patch from one tree to another, as `json_patch::diff` produces it with every
//! object's members visited in sorted key order: replace a changed scalar, descend into
//! changed objects and arrays, add new members and trailing elements, remove missing members
//! and trailing elements. [`super::Recorder`] gives its operations in this order; the tests
//! and debug builds hold the recorded patch equal to this diff.

use super::Step;
use crate::json;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

/// The operations from `original` to `mutated`. Equal subtrees are skipped after one
/// comparison, so pointers are built only along the paths that changed.
pub(crate) fn diff_tree(original: &Value, mutated: &Value) -> Patch {
    let mut ops = Vec::new();
    diff_values(original, mutated, &mut PointerBuf::new(), &mut ops, &[]);
    Patch(ops)
}

/// The member of `metadata` where an object records which manager wrote which field: often
/// the largest part of a Pod or Job (40–50% of the recorded ones), read by the mutators (who
/// wrote a field) and never written by them (the mutate path asserts it in debug builds).
const MANAGED_FIELDS: &str = "managedFields";

/// `metadata.managedFields` of `object`, if it has them.
pub(crate) fn managed_fields(object: &Value) -> Option<&Value> {
    json::get(json::get(object, "metadata")?, MANAGED_FIELDS)
}

/// A copy of `object` to diff the mutated object against with [`diff_copy`]: all of it but
/// `metadata.managedFields`, which the mutators never change, so copying and comparing it
/// would only cost time.
pub(crate) fn copy_without_managed_fields(object: &Value) -> Value {
    let Some(map) = object.as_object() else {
        return object.clone();
    };
    map.iter()
        .map(|(key, value)| {
            let value = match value {
                Value::Object(metadata) if key == "metadata" => Value::Object(
                    metadata
                        .iter()
                        .filter(|(key, _)| *key != MANAGED_FIELDS)
                        .map(|(key, value)| (key.clone(), value.clone()))
                        .collect(),
                ),
                _ => value.clone(),
            };
            (key.clone(), value)
        })
        .collect::<Map<String, Value>>()
        .into()
}

/// [`diff_tree`] from a copy made by [`copy_without_managed_fields`]: the mutated object's
/// `metadata.managedFields` is not compared (the copy has none).
pub(crate) fn diff_copy(copy: &Value, mutated: &Value) -> Patch {
    let mut ops = Vec::new();
    let omitted = ["metadata", MANAGED_FIELDS];
    diff_values(copy, mutated, &mut PointerBuf::new(), &mut ops, &omitted);
    Patch(ops)
}

/// The operations from `old` to `new`, the values at `pointer`, appended to `ops`.
pub(crate) fn diff_at(
    old: &Value,
    new: &Value,
    pointer: &mut PointerBuf,
    ops: &mut Vec<PatchOperation>,
) {
    if !json::same(old, new) {
        diff_values(old, new, pointer, ops, &[]);
    }
}

/// Records `op(path)` at `pointer` + `step`.
fn record(
    ops: &mut Vec<PatchOperation>,
    pointer: &mut PointerBuf,
    step: Step<'_>,
    op: impl FnOnce(PointerBuf) -> PatchOperation,
) {
    step.push_onto(pointer);
    ops.push(op(pointer.clone()));
    pointer.pop_back();
}

/// `omitted`: the path, from here, of a member left out of the comparison (none when empty).
fn diff_values(
    left: &Value,
    right: &Value,
    pointer: &mut PointerBuf,
    ops: &mut Vec<PatchOperation>,
    omitted: &[&str],
) {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            // Both sides in sorted key order, walked together: no key lookups.
            let mut left = sorted(l).into_iter().peekable();
            let mut removed = Vec::new();
            for (key, r_value) in sorted(r) {
                if omitted == [key] {
                    continue;
                }
                while let Some((l_key, _)) = left.next_if(|(l_key, _)| *l_key < key) {
                    removed.push(l_key);
                }
                match left.next_if(|(l_key, _)| *l_key == key) {
                    Some((_, l_value)) if json::same(l_value, r_value) => {}
                    Some((_, l_value)) => {
                        let below = match omitted {
                            [first, rest @ ..] if *first == key => rest,
                            _ => &[],
                        };
                        pointer.push_back(key);
                        diff_values(l_value, r_value, pointer, ops, below);
                        pointer.pop_back();
                    }
                    None => record(ops, pointer, Step::Key(key), |path| {
                        PatchOperation::Add(AddOperation {
                            path,
                            value: r_value.clone(),
                        })
                    }),
                }
            }
            removed.extend(left.map(|(l_key, _)| l_key));
            for key in removed {
                record(ops, pointer, Step::Key(key), |path| {
                    PatchOperation::Remove(RemoveOperation { path })
                });
            }
        }
        (Value::Array(l), Value::Array(r)) => {
            for (index, (l_item, r_item)) in l.iter().zip(r).enumerate() {
                if !json::same(l_item, r_item) {
                    pointer.push_back(index);
                    diff_values(l_item, r_item, pointer, ops, &[]);
                    pointer.pop_back();
                }
            }
            for _ in r.len()..l.len() {
                record(ops, pointer, Step::Index(r.len()), |path| {
                    PatchOperation::Remove(RemoveOperation { path })
                });
            }
            for (index, item) in r.iter().enumerate().skip(l.len()) {
                record(ops, pointer, Step::Index(index), |path| {
                    PatchOperation::Add(AddOperation {
                        path,
                        value: item.clone(),
                    })
                });
            }
        }
        _ if json::same(left, right) => {}
        _ => ops.push(PatchOperation::Replace(ReplaceOperation {
            path: pointer.clone(),
            value: right.clone(),
        })),
    }
}

/// The members of an object in sorted key order (the order the operations follow, whatever
/// order the map keeps).
fn sorted(map: &Map<String, Value>) -> Vec<(&str, &Value)> {
    let mut members: Vec<(&str, &Value)> = map.iter().map(|(k, v)| (k.as_str(), v)).collect();
    members.sort_unstable_by(|a, b| a.0.cmp(b.0));
    members
}

#[cfg(test)]
pub(crate) mod tests {

    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    /// The oracle: `json_patch::diff` on copies whose objects hold their members in sorted
    /// key order.
    fn expected(left: &Value, right: &Value) -> json_patch::Patch {
        fn sorted(v: &Value) -> Value {
            match v {
                Value::Object(m) => {
                    let mut members: Vec<_> = m.iter().collect();
                    members.sort_by(|a, b| a.0.cmp(b.0));
                    Value::Object(
                        members
                            .into_iter()
                            .map(|(k, v)| (k.clone(), sorted(v)))
                            .collect::<Map<_, _>>(),
                    )
                }
                Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
                other => other.clone(),
            }
        }
        json_patch::diff(&sorted(left), &sorted(right))
    }

    fn tree(left: &Value, right: &Value) -> json_patch::Patch {
        super::diff_tree(left, right)
    }

    /// Small JSON documents with the keys that need escaping in a pointer.
    pub(crate) fn small_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0i64..4).prop_map(Value::from),
            (-2i64..0).prop_map(Value::from),
            Just(json!(1.5)),
            prop::sample::select(vec!["a", "b", "x/y", "m~n", "", "q\"uote"]).prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(
                    (
                        prop::sample::select(vec!["a", "b", "c", "x/y", "m~n", "", "é\n"])
                            .prop_map(str::to_string),
                        inner
                    ),
                    0..5
                )
                .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn the_fixtures_patches_are_the_oracles_operations() {
        let policy = crate::Policy::embedded_default();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission");
        let mut patched = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let body = std::fs::read(entry.unwrap().path()).unwrap();
            let request = crate::review::parse_request(&body).unwrap();
            let Some(original) = request.object.as_ref() else {
                continue;
            };
            let answer = crate::review(
                &policy,
                crate::Endpoint::Mutate,
                &body,
                &crate::cluster::NoCluster,
            )
            .unwrap();
            let response: Value = serde_json::from_slice(&answer.body).unwrap();
            let Some(b64) = response["response"]["patch"].as_str() else {
                continue;
            };
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap();
            let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
            let mut mutated = original.clone();
            json_patch::patch(&mut mutated, &patch).unwrap();
            assert_eq!(patch, expected(original, &mutated));
            patched += 1;
        }
        assert!(patched >= 5, "the fixtures exercise the diff");
    }

    #[test]
    fn numbers_compare_as_parsed_values_do() {
        // 1 and 1.0 are different JSON numbers to serde_json, so a float becoming an integer
        // is a change; the same integer written again is not.
        assert_eq!(tree(&json!({"a": 1}), &json!({"a": 1})).0.len(), 0);
        assert_eq!(tree(&json!({"a": 1.0}), &json!({"a": 1})).0.len(), 1);
        assert_eq!(tree(&json!({"a": -1}), &json!({"a": -1})).0.len(), 0);
    }

    #[test]
    fn a_copy_without_managed_fields_gives_the_same_operations() {
        let original = json!({"metadata": {"name": "j", "labels": {"a": "1"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"backoffLimit": 6}});
        let copy = super::copy_without_managed_fields(&original);
        assert_eq!(super::managed_fields(&copy), None);
        assert!(super::managed_fields(&original).is_some());
        assert_eq!(copy.pointer("/metadata/labels/a"), Some(&json!("1")));
        let mut mutated = original.clone();
        mutated["metadata"]["labels"]["b"] = json!("2");
        mutated["spec"]["backoffLimit"] = json!(3);
        mutated["spec"]["ttlSecondsAfterFinished"] = json!(60);
        let patch = super::diff_copy(&copy, &mutated);
        assert_eq!(patch, super::diff_tree(&original, &mutated));
        assert_eq!(patch.0.len(), 3);
        assert_eq!(super::diff_copy(&copy, &original).0.len(), 0);
        // Not an object, or no metadata: copied whole.
        assert_eq!(super::copy_without_managed_fields(&json!([1])), json!([1]));
    }

    proptest! {
        #[test]
        fn a_copy_without_managed_fields_diffs_as_the_whole(
            a in small_value(), b in small_value(), managed in small_value()
        ) {
            // Any documents under metadata and spec; managedFields the same on both sides.
            let left = json!({"metadata": {"x": a.clone(), "managedFields": managed.clone()}, "spec": a});
            let right = json!({"metadata": {"x": b.clone(), "managedFields": managed}, "spec": b});
            let copy = super::copy_without_managed_fields(&left);
            prop_assert_eq!(super::diff_copy(&copy, &right), expected(&left, &right));
        }

        #[test]
        fn same_operations_as_json_patch_diff(a in small_value(), b in small_value()) {
            prop_assert_eq!(tree(&a, &b), expected(&a, &b));
        }

        #[test]
        fn same_operations_on_edits_of_one_document(a in small_value(), b in small_value()) {
            // Mostly-equal documents: the case the streaming is for.
            let left = json!({"keep": a.clone(), "edit": a.clone(), "list": [a.clone(), 1, a.clone()]});
            let right = json!({"keep": a.clone(), "edit": b.clone(), "list": [a, b]});
            prop_assert_eq!(tree(&left, &right), expected(&left, &right));
            prop_assert_eq!(tree(&right, &left), expected(&right, &left));
        }

        #[test]
        fn the_patch_turns_the_original_into_the_mutated(a in small_value(), b in small_value()) {
            let mut patched = a.clone();
            json_patch::patch(&mut patched, &tree(&a, &b)).unwrap();
            prop_assert_eq!(patched, b);
        }
    }
}
