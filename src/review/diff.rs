//! The JSON Patch from the object as the API server sent it (its JSON text) to the object the
//! mutators left, computed while reading that text again: no second copy of the object.
//!
//! The mutators change the parsed object in place. Diffing needs the original, and a copy of
//! a large object costs as much memory as parsing it; its text is already in memory (the
//! request body), so the diff walks the text with a streaming parser, side by side with the
//! mutated tree, and keeps only what differs. Equal subtrees are read and dropped as they
//! stream by; the memory it needs is that of the operations plus one stack of the keys of the
//! open objects, shared by all of them.
//!
//! The operations are those `json_patch::diff` produces from the parsed original to the mutated
//! object with every object's members visited in sorted key order: replace a changed scalar,
//! descend into changed objects and arrays, add new members and trailing elements, remove
//! missing members and trailing elements.

use crate::json;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::fmt;

/// The JSON Patch from `original` (JSON text) to `mutated`. Fails only when `original` is not
/// JSON.
pub(crate) fn diff(original: &[u8], mutated: &Value) -> Result<Patch, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(original);
    let patch = walk(&mut de, mutated)?;
    de.end()?;
    Ok(patch)
}

/// The same operations from the original as a tree (a small object's copy: cheaper in time
/// than reading its text again). Equal subtrees are skipped after one comparison, so pointers
/// are built only along the paths that changed.
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

/// Records `op(path)` at `pointer` + `step`.
fn record(
    ops: &mut Vec<PatchOperation>,
    pointer: &mut PointerBuf,
    step: Step<'_>,
    op: impl FnOnce(PointerBuf) -> PatchOperation,
) {
    step.push(pointer);
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

/// Walks the original's text next to `mutated`.
fn walk<'de, D: Deserializer<'de>>(original: D, mutated: &Value) -> Result<Patch, D::Error> {
    let mut walk = Walk {
        path: Vec::new(),
        ops: Vec::new(),
        keys: Vec::new(),
    };
    Side {
        right: mutated,
        walk: &mut walk,
    }
    .deserialize(original)?;
    Ok(Patch(walk.ops))
}

/// What the walk carries from value to value.
struct Walk<'r> {
    /// Where the walk is; made into a JSON Pointer only for an operation.
    path: Vec<Step<'r>>,
    /// The operations so far; those of an open object's members are put in order when the
    /// object closes.
    ops: Vec<PatchOperation>,
    /// The members of the open objects that both sides have, innermost last: the mutated
    /// member's key and where its operations start and end in `ops`.
    keys: Vec<(&'r str, usize, usize)>,
}

/// One step of the path: a member of the mutated object, or an element index.
#[derive(Clone, Copy)]
enum Step<'r> {
    Key(&'r str),
    Index(usize),
}

impl Step<'_> {
    fn push(self, pointer: &mut PointerBuf) {
        match self {
            Step::Key(key) => pointer.push_back(key),
            Step::Index(index) => pointer.push_back(index),
        }
    }
}

impl Walk<'_> {
    /// The JSON Pointer of where the walk is.
    fn pointer(&self) -> PointerBuf {
        let mut pointer = PointerBuf::new();
        for step in &self.path {
            step.push(&mut pointer);
        }
        pointer
    }
}

/// One position of the walk: the mutated value there.
struct Side<'r, 'w> {
    right: &'r Value,
    walk: &'w mut Walk<'r>,
}

impl Side<'_, '_> {
    /// The original at this position is the scalar `left`.
    fn scalar<E>(self, left: Value) -> Result<(), E> {
        if left != *self.right {
            self.replace();
        }
        Ok(())
    }

    fn replace(self) {
        let path = self.walk.pointer();
        self.walk
            .ops
            .push(PatchOperation::Replace(ReplaceOperation {
                path,
                value: self.right.clone(),
            }));
    }
}

impl<'de> DeserializeSeed<'de> for Side<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Records `op(path)` at where the walk is + `token`.
fn push_at(
    walk: &mut Walk<'_>,
    token: impl Into<json_patch::jsonptr::Token<'static>>,
    op: impl FnOnce(PointerBuf) -> PatchOperation,
) {
    let mut path = walk.pointer();
    path.push_back(token);
    walk.ops.push(op(path));
}

impl<'de> Visitor<'de> for Side<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.scalar(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.scalar(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.scalar(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        // As serde_json parses a float into a `Value`.
        self.scalar(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        if self.right.as_str() != Some(v) {
            self.replace();
        }
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.scalar(Value::Null)
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.scalar(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Value::Array(right) = self.right else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            self.replace();
            return Ok(());
        };
        let walk = self.walk;
        // Elements present on both sides are compared; trailing original elements are removed
        // (each at the same index, as the ones before it are gone); trailing mutated ones added.
        let mut len = 0;
        loop {
            let more = match right.get(len) {
                Some(item) => {
                    walk.path.push(Step::Index(len));
                    let side = Side {
                        right: item,
                        walk: &mut *walk,
                    };
                    let more = seq.next_element_seed(side)?.is_some();
                    walk.path.pop();
                    more
                }
                None => {
                    let more = seq.next_element::<IgnoredAny>()?.is_some();
                    if more {
                        push_at(walk, right.len(), |path| {
                            PatchOperation::Remove(RemoveOperation { path })
                        });
                    }
                    more
                }
            };
            if !more {
                break;
            }
            len += 1;
        }
        for (index, item) in right.iter().enumerate().skip(len) {
            push_at(walk, index, |path| {
                PatchOperation::Add(AddOperation {
                    path,
                    value: item.clone(),
                })
            });
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Value::Object(right) = self.right else {
            while map.next_key::<IgnoredAny>()?.is_some() {
                map.next_value::<IgnoredAny>()?;
            }
            self.replace();
            return Ok(());
        };
        let walk = self.walk;
        let (base_keys, base_ops) = (walk.keys.len(), walk.ops.len());
        let mut removed: Vec<String> = Vec::new();
        while let Some(key) = map.next_key_seed(Key)? {
            match right.get_key_value(key.as_ref()) {
                Some((name, value)) => {
                    let start = walk.ops.len();
                    walk.path.push(Step::Key(name.as_str()));
                    map.next_value_seed(Side {
                        right: value,
                        walk: &mut *walk,
                    })?;
                    walk.path.pop();
                    walk.keys.push((name.as_str(), start, walk.ops.len()));
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                    removed.push(key.into_owned());
                }
            }
        }
        // The common case: the same members, and the operations below them (if any) already in
        // sorted key order. Sorting the keys in place also tells a repeated key (the parsed
        // object kept its last value) without allocating.
        let shared = &mut walk.keys[base_keys..];
        shared.sort_unstable();
        let repeated = shared.windows(2).any(|w| w[0].0 == w[1].0);
        let mut next_start = base_ops;
        let in_order =
            shared
                .iter()
                .filter(|(_, start, end)| start < end)
                .all(|&(_, start, end)| {
                    let ok = start >= next_start;
                    next_start = end;
                    ok
                });
        if in_order && !repeated && removed.is_empty() && shared.len() == right.len() {
            walk.keys.truncate(base_keys);
            return Ok(());
        }
        // Otherwise: each shared member's operations by key (the last of a repeated key wins),
        // new members added, missing ones removed. The operations move; none is copied.
        let mut below: Vec<Option<PatchOperation>> = walk.ops.drain(base_ops..).map(Some).collect();
        let mut spans: Vec<(&str, usize, usize)> = shared
            .iter()
            .map(|&(name, start, end)| (name, start - base_ops, end - base_ops))
            .collect();
        spans.dedup_by(|later, kept| {
            if later.0 == kept.0 {
                *kept = *later;
                true
            } else {
                false
            }
        });
        walk.keys.truncate(base_keys);
        for (name, value) in sorted(right) {
            match spans.binary_search_by(|(key, _, _)| (*key).cmp(name)) {
                Ok(i) => {
                    let (_, from, to) = spans[i];
                    walk.ops
                        .extend(below[from..to].iter_mut().filter_map(Option::take));
                }
                Err(_) => push_at(walk, name.to_string(), |path| {
                    PatchOperation::Add(AddOperation {
                        path,
                        value: value.clone(),
                    })
                }),
            }
        }
        removed.sort();
        removed.dedup();
        for name in removed {
            push_at(walk, name, |path| {
                PatchOperation::Remove(RemoveOperation { path })
            });
        }
        Ok(())
    }
}

/// The members of an object in sorted key order (the order the operations follow, whatever
/// order the map keeps).
fn sorted(map: &Map<String, Value>) -> Vec<(&str, &Value)> {
    let mut members: Vec<(&str, &Value)> = map.iter().map(|(k, v)| (k.as_str(), v)).collect();
    members.sort_unstable_by(|a, b| a.0.cmp(b.0));
    members
}

/// An object key, borrowed from the text when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::diff;
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

    /// The patch from the original's text, checked equal to the one from its tree.
    fn streamed(left: &Value, right: &Value) -> json_patch::Patch {
        let patch = diff(&serde_json::to_vec(left).unwrap(), right).unwrap();
        assert_eq!(patch, super::diff_tree(left, right), "text and tree agree");
        patch
    }

    fn small_value() -> impl Strategy<Value = Value> {
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
        assert_eq!(streamed(&json!({"a": 1}), &json!({"a": 1})).0.len(), 0);
        assert_eq!(streamed(&json!({"a": 1.0}), &json!({"a": 1})).0.len(), 1);
        assert_eq!(streamed(&json!({"a": -1}), &json!({"a": -1})).0.len(), 0);
    }

    #[test]
    fn escaped_keys_and_duplicate_keys_read_as_serde_json_reads_them() {
        let right = json!({"a/b": 2, "k": 3});
        let patch = diff(br#"{"a\/b": 1, "k": 1, "k": 3}"#, &right).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([{"op": "replace", "path": "/a~1b", "value": 2}])
        );
    }

    #[test]
    fn not_json_is_an_error() {
        assert!(diff(b"{\"a\":", &json!({})).is_err());
        assert!(diff(b"{} trailing", &json!({})).is_err());
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
            prop_assert_eq!(streamed(&a, &b), expected(&a, &b));
        }

        #[test]
        fn same_operations_on_edits_of_one_document(a in small_value(), b in small_value()) {
            // Mostly-equal documents: the case the streaming is for.
            let left = json!({"keep": a.clone(), "edit": a.clone(), "list": [a.clone(), 1, a.clone()]});
            let right = json!({"keep": a.clone(), "edit": b.clone(), "list": [a, b]});
            prop_assert_eq!(streamed(&left, &right), expected(&left, &right));
            prop_assert_eq!(streamed(&right, &left), expected(&right, &left));
        }

        #[test]
        fn the_patch_turns_the_original_into_the_mutated(a in small_value(), b in small_value()) {
            let mut patched = a.clone();
            json_patch::patch(&mut patched, &streamed(&a, &b)).unwrap();
            prop_assert_eq!(patched, b);
        }
    }
}
