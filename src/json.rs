//! Reading `serde_json` values cheaply.
//!
//! serde_json keeps objects as `IndexMap`s (the `preserve_order` feature, for a smaller tree):
//! a member lookup hashes its key with SipHash, and comparing two objects looks up every key
//! of one in the other. Kubernetes objects are mostly small maps (an env entry has two
//! members), where a scan is cheaper than a hash, and a copy keeps its members' order, so an
//! in-order comparison needs no lookup at all.
//!
//! The object of a request is parsed by [`parse`]: the same tree as serde_json's own parse, with
//! every object and array allocated once at its exact size. Within [`raw_field_sets`], the field
//! sets of `metadata.managedFields` (each entry's `fieldsV1`, a third of a recorded Pod's bytes)
//! are kept as their JSON text in a string: no rule reads them but the one that reads a
//! server-side apply's intent, which parses the few it needs ([`field_set`]).

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

/// Maps up to this many members are scanned instead of hashed: a container or pod spec as the
/// API server defaults it has 8–14, and comparing a key's length first rejects most members
/// in a few instructions, where SipHash costs about a hundred per lookup.
const SCAN_UP_TO: usize = 16;

/// `map[key]`, scanning small maps.
pub(crate) fn member<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() <= SCAN_UP_TO {
        map.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get(key)
    }
}

/// `map[key]` for writing, scanning small maps.
pub(crate) fn member_mut<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Value> {
    if map.len() <= SCAN_UP_TO {
        map.iter_mut().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get_mut(key)
    }
}

/// `value[key]` when `value` is an object, scanning small maps.
pub(crate) fn get<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    member(value.as_object()?, key)
}

/// JSON Pointer look-ups (RFC 6901) as serde_json's `Value::pointer` does them, without its
/// cost: it unescapes every token into two new strings and looks members up by hash; these
/// borrow the tokens (a token with `~` is unescaped once) and scan small maps.
pub(crate) trait Pointer {
    /// The value at `pointer` (`""` is the whole value), as `Value::pointer`.
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl Pointer for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        pointer
            .strip_prefix('/')?
            .split('/')
            .try_fold(self, |target, token| child(target, &unescape(token)))
    }
}

/// One step of a pointer: `value`'s member `key` (a token unescaped), or the element at the
/// index `key` names in an array.
pub(crate) fn child<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    match value {
        Value::Object(map) => member(map, key),
        Value::Array(items) => items.get(index(key)?),
        _ => None,
    }
}

/// [`child`] for writing.
pub(crate) fn child_mut<'a>(value: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    match value {
        Value::Object(map) => member_mut(map, key),
        Value::Array(items) => items.get_mut(index(key)?),
        _ => None,
    }
}

/// A pointer token with `~1` and `~0` read as `/` and `~`.
pub(crate) fn unescape(token: &str) -> std::borrow::Cow<'_, str> {
    if token.as_bytes().contains(&b'~') {
        token.replace("~1", "/").replace("~0", "~").into()
    } else {
        token.into()
    }
}

/// A key as a pointer token (RFC 6901): `~` written `~0`, `/` written `~1`.
pub(crate) fn escape(key: &str) -> std::borrow::Cow<'_, str> {
    if key.contains(['~', '/']) {
        key.replace('~', "~0").replace('/', "~1").into()
    } else {
        key.into()
    }
}

/// An array index token: digits without a sign or a leading zero (as serde_json reads them).
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
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

/// Parses a JSON value as `serde_json::Value`'s own `Deserialize` does (same members, same
/// order, the last of a repeated key wins), but builds every object and array at its exact
/// size: members are gathered on one stack shared by the whole parse and moved into a map or
/// list allocated once. serde_json grows each map from empty, re-hashing and copying at every
/// doubling and leaving up to half of the last allocation unused.
pub(crate) fn parse<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    let place = RAW_FIELD_SETS.get().then_some(0);
    ValueSeed {
        stacks: &mut Stacks::default(),
        place,
    }
    .deserialize(deserializer)
}

thread_local! {
    /// Set while [`raw_field_sets`] runs on this thread.
    static RAW_FIELD_SETS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `read` (a `serde_json` read from text, whose objects are parsed by [`parse`]) keeping
/// each `metadata.managedFields[*].fieldsV1` of those objects as a string holding its JSON text.
/// Only for a tree that is read and patched, never written out whole: the string stands where
/// the API server's object has the field set.
pub(crate) fn raw_field_sets<T>(read: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            RAW_FIELD_SETS.set(self.0);
        }
    }
    let _reset = Reset(RAW_FIELD_SETS.replace(true));
    read()
}

/// The arrays and objects a request's field set may nest: serde_json enters at most 127, and
/// six enclose a field set (the review, its request, the object, `metadata`, `managedFields`
/// and the entry). Kept as text, a field set is held to the same bound as when parsed whole.
const FIELD_SET_NESTING: usize = 127 - 6;

/// How deep `text` (JSON) nests arrays and objects.
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for byte in text.bytes() {
        match (in_string, byte) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A managed-fields entry's `fieldsV1` as [`raw_field_sets`] keeps it: an object as a string
/// of its text, anything else (never sent by the API server) parsed as usual.
fn field_set_text(raw: Box<RawValue>) -> Result<Value, serde_json::Error> {
    // Nesting never exceeds the count of `{` and `[` (in strings too): that count, found by
    // memchr's vector search, settles almost every field set without the exact scan.
    let openers = memchr::memchr2_iter(b'{', b'[', raw.get().as_bytes()).count();
    if openers > FIELD_SET_NESTING && nesting(raw.get()) > FIELD_SET_NESTING {
        return Err(serde::de::Error::custom("recursion limit exceeded"));
    }
    if raw.get().starts_with('{') {
        Ok(Value::String(Box::<str>::from(raw).into_string()))
    } else {
        ValueSeed {
            stacks: &mut Stacks::default(),
            place: None,
        }
        .deserialize(&mut serde_json::Deserializer::from_str(raw.get()))
    }
}

/// A managed-fields entry's `fieldsV1` as a tree, whether it was parsed as one or kept as its
/// text ([`raw_field_sets`]). A string is read as the text of an object (so a tree and its
/// text read the same); `None` when it is not one.
pub(crate) fn field_set(fields: &Value) -> Option<Cow<'_, Value>> {
    match fields {
        Value::String(text) if text.starts_with('{') => {
            serde_json::from_str(text).ok().map(Cow::Owned)
        }
        Value::String(_) => None,
        tree => Some(Cow::Borrowed(tree)),
    }
}

/// The steps from an object to its field sets: members by key, `None` for any element of a list.
const FIELD_SETS: [Option<&str>; 4] = [
    Some("metadata"),
    Some("managedFields"),
    None,
    Some("fieldsV1"),
];

/// Where a value being parsed is, as far as [`raw_field_sets`] needs to know: how many steps of
/// [`FIELD_SETS`] lead to it (`FIELD_SETS.len()`: a field set), or `None` elsewhere.
type Place = Option<usize>;

/// The place of member `key` (`None`: an element) of a value at `place`.
fn step(place: Place, key: Option<&str>) -> Place {
    place
        .filter(|&steps| FIELD_SETS.get(steps) == Some(&key))
        .map(|steps| steps + 1)
}

/// [`parse`] for an optional field: `null` or absent is `None`, as serde reads an `Option`.
pub(crate) fn parse_optional<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Value>, D::Error> {
    Ok(Some(parse(deserializer)?).filter(|v| !v.is_null()))
}

/// The members and items of the objects and arrays still open, innermost last.
#[derive(Default)]
struct Stacks {
    members: Vec<(String, Value)>,
    items: Vec<Value>,
}

struct ValueSeed<'s> {
    stacks: &'s mut Stacks,
    place: Place,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let stacks = self.stacks;
        let place = step(self.place, None);
        let start = stacks.items.len();
        while let Some(item) = seq.next_element_seed(ValueSeed {
            stacks: &mut *stacks,
            place,
        })? {
            stacks.items.push(item);
        }
        Ok(Value::Array(stacks.items.drain(start..).collect()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let stacks = self.stacks;
        let start = stacks.members.len();
        while let Some(key) = map.next_key::<String>()? {
            let place = step(self.place, Some(&key));
            let value = if place == Some(FIELD_SETS.len()) {
                field_set_text(map.next_value::<Box<RawValue>>()?)
                    .map_err(serde::de::Error::custom)?
            } else {
                map.next_value_seed(ValueSeed {
                    stacks: &mut *stacks,
                    place,
                })?
            };
            stacks.members.push((key, value));
        }
        Ok(Value::Object(stacks.members.drain(start..).collect()))
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

    fn parsed(text: &str) -> Result<Value, serde_json::Error> {
        parse(&mut serde_json::Deserializer::from_str(text))
    }

    #[test]
    fn the_fixtures_parse_to_serde_jsons_tree_in_the_same_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission");
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let ours = parsed(&text).unwrap();
            let theirs: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(ours, theirs);
            assert_eq!(ours.to_string(), theirs.to_string(), "member order");
        }
    }

    /// `value` with every managed-fields entry's `fieldsV1` read back from its text.
    fn field_sets_as_trees(mut value: Value) -> Value {
        if let Some(entries) = value
            .pointer_mut("/metadata/managedFields")
            .and_then(Value::as_array_mut)
        {
            for entry in entries {
                if let Some(fields) = entry.get_mut("fieldsV1") {
                    *fields = field_set(fields).unwrap().into_owned();
                }
            }
        }
        value
    }

    #[test]
    fn field_sets_kept_as_text_read_back_as_the_trees_they_were() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission");
        let mut kept = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let review: Value = serde_json::from_str(&text).unwrap();
            let object = review["request"]["object"].to_string();
            let raw = raw_field_sets(|| parsed(&object)).unwrap();
            let sets = raw
                .pointer("/metadata/managedFields")
                .and_then(Value::as_array);
            for set in sets.into_iter().flatten() {
                assert!(set["fieldsV1"].is_string(), "{set}");
                kept += 1;
            }
            let back = field_sets_as_trees(raw);
            assert_eq!(back.to_string(), object, "member order");
        }
        assert!(kept >= 20, "{kept}");
        // Outside `raw_field_sets`, and outside an object's own managed fields, trees are trees.
        let nested = r#"{"spec": {"metadata": {"managedFields": [{"fieldsV1": {"f:a": {}}}]}},
            "metadata": {"managedFields": [{"fieldsV1": {"f:b": {}}}, {"fieldsV1": null}]}}"#;
        let raw = raw_field_sets(|| parsed(nested)).unwrap();
        assert_eq!(
            raw["spec"]["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:a": {}})
        );
        assert_eq!(
            raw["metadata"]["managedFields"][0]["fieldsV1"],
            json!(r#"{"f:b": {}}"#)
        );
        assert_eq!(raw["metadata"]["managedFields"][1]["fieldsV1"], Value::Null);
        assert_eq!(
            parsed(nested).unwrap(),
            serde_json::from_str::<Value>(nested).unwrap()
        );
        let keyed = r#"{"metadata": {"managedFields": {"": {"fieldsV1": {"f:c": {}}}}}}"#;
        let raw = raw_field_sets(|| parsed(keyed)).unwrap();
        assert_eq!(
            raw,
            serde_json::from_str::<Value>(keyed).unwrap(),
            "not a list's entry"
        );
        assert!(!RAW_FIELD_SETS.get());
    }

    /// A field set nested too deep is refused kept as text exactly when it is parsed whole,
    /// whether it opens few objects or many (more than the bound, side by side).
    #[test]
    fn a_field_set_kept_as_text_nests_as_deep_as_a_tree() {
        let chain = |open: &str, close: &str, depth: usize| {
            format!("{}{{}}{}", open.repeat(depth - 1), close.repeat(depth - 1))
        };
        let wide = |inner: &str| {
            let siblings: Vec<String> = (0..2 * FIELD_SET_NESTING)
                .map(|i| format!("\"f:a{i}\": {{}}"))
                .collect();
            format!("{{{}, \"f:z\": {inner}}}", siblings.join(", "))
        };
        let mut sets = Vec::new();
        for depth in [
            1,
            FIELD_SET_NESTING - 1,
            FIELD_SET_NESTING,
            FIELD_SET_NESTING + 1,
        ] {
            for (open, close) in [("{\"f:a\":", "}"), ("[", "]")] {
                sets.push((chain(open, close, depth), depth));
            }
            if depth > 1 {
                sets.push((wide(&chain("{\"f:a\":", "}", depth - 1)), depth));
            }
        }
        for (set, depth) in sets {
            assert_eq!(nesting(&set), depth);
            let review = format!(
                r#"{{"request": {{"uid": "u", "operation": "CREATE",
                    "kind": {{"group": "", "version": "v1", "kind": "Pod"}},
                    "object": {{"metadata": {{"managedFields": [{{"fieldsV1": {set}}}]}}}}}}}}"#
            );
            let read = || serde_json::from_str::<crate::admission::AdmissionReviewRequest>(&review);
            let whole = read().is_ok();
            assert_eq!(whole, depth <= FIELD_SET_NESTING, "depth {depth}");
            let kept = raw_field_sets(read);
            assert_eq!(kept.is_ok(), whole, "depth {depth}: {kept:?}");
        }
        assert_eq!(nesting(r#"{"a": "[[{\"", "b": [1]}"#), 2);
    }

    #[test]
    fn a_field_set_reads_the_same_from_its_tree_and_its_text() {
        let tree = json!({"f:spec": {"f:backoffLimit": {}}});
        assert_eq!(field_set(&tree).unwrap().as_ref(), &tree);
        assert_eq!(field_set(&json!(tree.to_string())).unwrap().as_ref(), &tree);
        assert_eq!(field_set(&json!("f:spec")), None);
        assert_eq!(field_set(&json!("{not json")), None);
        assert_eq!(field_set(&Value::Null).unwrap().as_ref(), &Value::Null);
    }

    #[test]
    fn numbers_repeated_keys_and_errors_read_as_serde_json_reads_them() {
        for text in [
            r#"{"a": 1, "b": -2, "c": 1.5, "d": 18446744073709551615, "e": 1e400}"#,
            r#"{"a": 1, "b": 2, "a": 3}"#,
            r#"{"k\u00e9y": "v\n", "n": null, "t": [true, false, [], {}]}"#,
            r#"{"a": [1, 2"#,
            r#"{"a" 1}"#,
            "",
        ] {
            let theirs = serde_json::from_str::<Value>(text);
            match parsed(text) {
                Ok(ours) => {
                    let theirs = theirs.unwrap();
                    assert_eq!(ours.to_string(), theirs.to_string(), "{text}");
                }
                Err(e) => assert!(theirs.is_err(), "{text}: {e}"),
            }
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = "[".repeat(100_000);
        assert!(parsed(&text).is_err());
    }

    #[test]
    fn an_optional_null_is_none() {
        let read = |text: &str| parse_optional(&mut serde_json::Deserializer::from_str(text));
        assert_eq!(read("null").unwrap(), None);
        assert_eq!(read("{}").unwrap(), Some(json!({})));
    }

    #[test]
    fn pointers_read_as_serde_json_reads_them() {
        let v = json!({"a/b": {"m~n": [10, {"x": 1}]}, "": {"": 2}, "k": [0, 1]});
        for p in [
            "",
            "/a~1b",
            "/a~1b/m~0n/1/x",
            "/a~1b/m~0n/0",
            "/",
            "//",
            "/k/01",
            "/k/+1",
            "/k/1",
            "/k/2",
            "/k/-1",
            "a",
            "/a~1b/m~0n/1/x/y",
            "/missing",
            "/a~2b",
            "/k/",
        ] {
            assert_eq!(v.at(p), v.pointer(p), "{p:?}");
        }
    }

    proptest! {
        #[test]
        fn parsing_gives_serde_jsons_tree(v in value()) {
            let text = v.to_string();
            let ours = parsed(&text).unwrap();
            prop_assert_eq!(ours.to_string(), text);
        }

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

/// What parsing a JSON text will build, counted without building anything: the number of values
/// (objects, arrays, strings, numbers, booleans, nulls), of object members, of containers (the
/// objects in a `containers`, `initContainers` or `ephemeralContainers` list, whatever their
/// depth) and the bytes of every string (keys included).
///
/// One pass over the bytes with no allocation. What a text costs in memory depends on its
/// shape, not its length: `[0,0,0]` is a 32-byte value per 2 bytes of text, and the API server
/// defaults every container of a Pod, which launchgate then mutates, so a dense object costs
/// many times its body. The server charges its memory budget from this (see
/// `server::budget`). The text is not validated: a malformed one gives some count, and the
/// parse that follows reports the error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    pub values: u64,
    pub members: u64,
    pub containers: u64,
    pub string_bytes: u64,
}

/// Keys whose array holds containers.
const CONTAINER_LISTS: [&[u8]; 3] = [b"containers", b"initContainers", b"ephemeralContainers"];

/// Counts the [`Shape`] of a JSON text.
pub fn shape(text: &[u8]) -> Shape {
    let mut s = Shape::default();
    let mut depth = 0usize;
    // The depth inside a container list (its elements open at this depth), and whether the
    // last key named one.
    let mut list_depth: Option<usize> = None;
    let mut key_names_list = false;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                // The string's end: the next quote not escaped by a backslash.
                let start = i + 1;
                let mut j = start;
                while j < text.len() {
                    match memchr::memchr2(b'"', b'\\', &text[j..]) {
                        Some(k) if text[j + k] == b'\\' => j += k + 2,
                        Some(k) => {
                            j += k;
                            break;
                        }
                        None => j = text.len(),
                    }
                }
                let end = j.min(text.len());
                s.string_bytes += (end.saturating_sub(start)) as u64;
                let next = text
                    .get(end + 1..)
                    .and_then(|rest| rest.iter().find(|b| !b.is_ascii_whitespace()));
                // A string followed by ':' is a member's key, else a value.
                if next == Some(&b':') {
                    s.members += 1;
                    key_names_list = CONTAINER_LISTS.contains(&&text[start..end]);
                } else {
                    s.values += 1;
                    key_names_list = false;
                }
                i = end + 1;
                continue;
            }
            b'{' => {
                s.values += 1;
                if list_depth == Some(depth) {
                    s.containers += 1;
                }
                depth += 1;
                key_names_list = false;
            }
            b'[' => {
                s.values += 1;
                depth += 1;
                if key_names_list && list_depth.is_none() {
                    list_depth = Some(depth);
                }
                key_names_list = false;
            }
            b'}' | b']' => {
                if list_depth == Some(depth) {
                    list_depth = None;
                }
                depth = depth.saturating_sub(1);
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                s.values += 1;
                key_names_list = false;
                // Skip the rest of the scalar.
                while i + 1 < text.len()
                    && !matches!(
                        text[i + 1],
                        b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t'
                    )
                {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    s
}

#[cfg(test)]
mod shape_tests {
    use super::{Shape, shape};

    #[test]
    fn values_members_and_string_bytes_are_counted() {
        assert_eq!(
            shape(br#"{"a": [1, -2.5e3, true, null], "bc": "x\"y", "d": {}}"#),
            Shape {
                values: 8,
                members: 3,
                containers: 0,
                string_bytes: 1 + 2 + 4 + 1,
            }
        );
        let pod =
            br#"{"spec": {"containers": [{"name": "a", "env": [{"name": "x"}]}, {"name": "b"}],
            "initContainers": [{"name": "i"}], "volumes": [{"name": "v"}]},
            "ephemeralContainers": [], "x": {"containers": [{}]}}"#;
        assert_eq!(shape(pod).containers, 4);
        assert_eq!(shape(b"[0,0,0]").values, 4);
        assert_eq!(shape(br#"["a\\", "b"]"#).values, 3);
        // Malformed text: some count, never a panic.
        for bad in [
            &b"\"abc"[..],
            b"{\"a\":",
            b"\\",
            b"\"\\",
            b"tru",
            b"",
            b"}}]]",
        ] {
            let _ = shape(bad);
        }
    }

    #[test]
    fn a_review_counts_like_its_parse() {
        let text = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/admission/create-pod-launch-acme-mnist-mzxkz.json"),
        )
        .unwrap();
        fn count(v: &serde_json::Value, s: &mut Shape) {
            s.values += 1;
            match v {
                serde_json::Value::String(t) => s.string_bytes += t.len() as u64,
                serde_json::Value::Array(a) => a.iter().for_each(|v| count(v, s)),
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        s.members += 1;
                        s.string_bytes += k.len() as u64;
                        count(v, s);
                    }
                }
                _ => {}
            }
        }
        let mut expected = Shape::default();
        count(&serde_json::from_slice(&text).unwrap(), &mut expected);
        let got = shape(&text);
        assert_eq!(
            (got.values, got.members),
            (expected.values, expected.members)
        );
        assert_eq!(got.containers, 1);
        // Escapes are counted as written (a little more than the decoded string).
        assert!(got.string_bytes >= expected.string_bytes);
    }
}
