//! The JSON Patch of a mutation, recorded as the mutators write.
//!
//! The mutators reach the object through [`Node`]s: a value with the path that leads to it.
//! Reading a node is reading the value. Writing records, before the write, what is about to
//! change: a member set or removed ([`Node::set`], [`Node::remove`]), an element appended
//! ([`Node::push`]), or — for any other write, through `DerefMut` — the node itself. The
//! record keeps the value each written place had (moved out when the write replaces it, a
//! copy of that place only when it is changed in place), never a copy of the object.
//!
//! [`Recorder::patch`] turns the record into the operations `json_patch::diff` would give
//! from the object as received to the object as mutated, in the same order ([`diff`]): an
//! `add` for a place that was absent, a `remove` for one that is gone, and the diff of the
//! old and new value of each other written place. A write inside a recorded place records
//! nothing more; a place recorded after places inside it takes their old values back into
//! its own.

pub mod diff;

use crate::json::{self, Pointer as _};
use json_patch::jsonptr::{PointerBuf, Token};
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::ops::{Deref, DerefMut};

/// One step from a value into a member or an element.
#[derive(Debug, Clone, Copy)]
pub enum Step<'a> {
    /// An object member, by its key.
    Key(&'a str),
    /// An array element, by its index.
    Index(usize),
    /// A JSON Pointer token as written (`~1` for `/`, `~0` for `~`): a member, or an element
    /// when it is an index.
    Token(&'a str),
}

impl Step<'_> {
    fn push_onto(self, pointer: &mut PointerBuf) {
        match self {
            Step::Key(key) => pointer.push_back(key),
            Step::Index(index) => pointer.push_back(index),
            Step::Token(token) => pointer.push_back(
                Token::from_encoded(token).unwrap_or_else(|_| Token::new(token.to_string())),
            ),
        }
    }
}

/// The deepest node with a path of its own: a node below it is recorded whole at this depth.
const DEPTH: usize = 16;

/// Where a node is: the steps from the root, kept inline (a node is made for every template,
/// container and member the mutators visit, and costs no allocation).
#[derive(Debug, Clone, Copy)]
pub struct Path<'a> {
    steps: [Step<'a>; DEPTH],
    len: usize,
}

impl Default for Path<'_> {
    fn default() -> Self {
        Path {
            steps: [Step::Index(0); DEPTH],
            len: 0,
        }
    }
}

impl<'a> Path<'a> {
    /// The JSON Pointer of this path.
    pub fn pointer(&self) -> PointerBuf {
        let mut pointer = PointerBuf::new();
        for step in &self.steps[..self.len] {
            step.push_onto(&mut pointer);
        }
        pointer
    }

    /// The path of `steps` below this one; `None` deeper than [`DEPTH`].
    fn join<'b>(&self, steps: &[Step<'b>]) -> Option<Path<'b>>
    where
        'a: 'b,
    {
        let len = self.len + steps.len();
        if len > DEPTH {
            return None;
        }
        let mut path: Path<'b> = *self;
        path.steps[self.len..len].copy_from_slice(steps);
        path.len = len;
        Some(path)
    }
}

/// A place written, with the value it had when the object was received (`None`: absent).
#[derive(Debug)]
struct Entry {
    pointer: PointerBuf,
    old: Option<Value>,
}

/// What the mutators wrote: the places, each with its value before.
#[derive(Debug, Default)]
pub struct Recorder {
    entries: Vec<Entry>,
}

/// True when `inner` is `outer` or a place inside it.
fn is_within(inner: &str, outer: &str) -> bool {
    inner.starts_with(outer) && matches!(inner.as_bytes().get(outer.len()), None | Some(b'/'))
}

impl Recorder {
    /// Records that the place at `pointer`, which held `old()` (`None`: absent), is being
    /// written. Nothing when the place or a place around it is recorded already (its value
    /// before is the one kept); places inside it that were recorded before take their values
    /// back into `old` and are replaced by it.
    pub fn written(&mut self, pointer: PointerBuf, old: impl FnOnce() -> Option<Value>) {
        let here = pointer.as_str();
        if self
            .entries
            .iter()
            .any(|e| is_within(here, e.pointer.as_str()))
        {
            return;
        }
        let mut old = old();
        if self
            .entries
            .iter()
            .any(|e| is_within(e.pointer.as_str(), here))
        {
            // Undo the inner writes on the old value, newest first.
            let mut kept = Vec::with_capacity(self.entries.len());
            let mut inner = Vec::new();
            for entry in std::mem::take(&mut self.entries) {
                if is_within(entry.pointer.as_str(), here) {
                    inner.push(entry);
                } else {
                    kept.push(entry);
                }
            }
            for entry in inner.into_iter().rev() {
                let relative = &entry.pointer.as_str()[here.len()..];
                if let Some(value) = old.as_mut() {
                    restore(value, relative, entry.old);
                }
            }
            self.entries = kept;
        }
        self.entries.push(Entry { pointer, old });
    }

    /// The JSON Patch from the object as received to `object`, which the recorded writes
    /// made: the operations `json_patch::diff` gives, in its order ([`diff`]).
    pub fn patch(self, object: &Value) -> Patch {
        let mut entries = self.entries;
        entries.sort_by(|a, b| diff_order(object, a, b));
        let mut ops = Vec::new();
        for entry in entries {
            match (entry.old, object.at(entry.pointer.as_str())) {
                (None, None) => {}
                (None, Some(now)) => ops.push(PatchOperation::Add(AddOperation {
                    path: entry.pointer,
                    value: now.clone(),
                })),
                (Some(_), None) => ops.push(PatchOperation::Remove(RemoveOperation {
                    path: entry.pointer,
                })),
                (Some(old), Some(now)) => {
                    let mut pointer = entry.pointer;
                    diff::diff_at(&old, now, &mut pointer, &mut ops);
                }
            }
        }
        Patch(ops)
    }
}

/// Puts `old` (`None`: absent) back at `relative` (a JSON Pointer) inside `value`.
fn restore(value: &mut Value, relative: &str, old: Option<Value>) {
    let Some((parent, last)) = relative.rsplit_once('/') else {
        return;
    };
    let Some(parent) = value.at_mut(parent) else {
        return;
    };
    let Ok(token) = Token::from_encoded(last) else {
        return;
    };
    match parent {
        Value::Object(map) => {
            let key = token.decoded();
            match old {
                Some(old) => {
                    map.insert(key.into_owned(), old);
                }
                None => {
                    map.remove(key.as_ref());
                }
            }
        }
        Value::Array(items) => {
            let Ok(index) = token.decoded().parse::<usize>() else {
                return;
            };
            match old {
                Some(old) if index < items.len() => items[index] = old,
                Some(old) => items.push(old),
                None if index < items.len() => {
                    items.remove(index);
                }
                None => {}
            }
        }
        _ => {}
    }
}

/// The order of two recorded places' operations in the diff: depth first, an object's
/// members by key with its removed members last, an array's elements by index.
fn diff_order(object: &Value, a: &Entry, b: &Entry) -> Ordering {
    let mut parent = Some(object);
    let mut a_tokens = a.pointer.tokens();
    let mut b_tokens = b.pointer.tokens();
    loop {
        let (a_token, b_token) = match (a_tokens.next(), b_tokens.next()) {
            (Some(a_token), Some(b_token)) => (a_token, b_token),
            // Recorded places never nest; a place before the places inside it otherwise.
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (None, None) => return Ordering::Equal,
        };
        let (a_key, b_key) = (a_token.decoded(), b_token.decoded());
        if a_key == b_key {
            parent = parent.and_then(|p| step_into(p, &a_key));
            continue;
        }
        return match parent {
            Some(Value::Array(_)) => {
                let index = |key: &str| key.parse::<usize>().unwrap_or(usize::MAX);
                index(&a_key).cmp(&index(&b_key))
            }
            _ => {
                // A member removed from this object: its operation comes after the others.
                let removed = |entry: &Entry, rest: &mut json_patch::jsonptr::Tokens<'_>, key| {
                    rest.next().is_none()
                        && entry.old.is_some()
                        && parent.and_then(|p| json::get(p, key)).is_none()
                };
                let a_removed = removed(a, &mut a_tokens, &a_key);
                let b_removed = removed(b, &mut b_tokens, &b_key);
                (a_removed, a_key.as_ref()).cmp(&(b_removed, b_key.as_ref()))
            }
        };
    }
}

/// `value`'s member or element named by a pointer token.
fn step_into<'v>(value: &'v Value, token: &str) -> Option<&'v Value> {
    match value {
        Value::Object(map) => json::member(map, token),
        Value::Array(items) => items.get(token.parse::<usize>().ok()?),
        _ => None,
    }
}

/// A JSON value a [`Node`] can hold: a whole value, an object, an array.
pub trait Json {
    /// A copy as a `Value`.
    fn to_value(&self) -> Value;
}

impl Json for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

impl Json for Map<String, Value> {
    fn to_value(&self) -> Value {
        Value::Object(self.clone())
    }
}

impl Json for Vec<Value> {
    fn to_value(&self) -> Value {
        Value::Array(self.clone())
    }
}

/// A value of the object being mutated, with where it is and the [`Recorder`] its writes go
/// to. Derefs to the value: reading is free; writing through `DerefMut` records the whole
/// node (once), so the narrower writes ([`Node::set`], [`Node::remove`], [`Node::push`]) are
/// the ones to use on a node that is not small.
///
/// A node without a recorder is a value of launchgate's own (a scratch copy): its writes are
/// not recorded.
pub struct Node<'a, T> {
    value: &'a mut T,
    path: Path<'a>,
    recorder: Option<&'a mut Recorder>,
    /// This node or a node around it is recorded: its writes need no more records.
    recorded: bool,
}

impl<'a> Node<'a, Value> {
    /// The root of the object being mutated, its writes recorded in `recorder`.
    pub fn root(value: &'a mut Value, recorder: &'a mut Recorder) -> Self {
        Node {
            value,
            path: Path::default(),
            recorder: Some(recorder),
            recorded: false,
        }
    }
}

impl<'a, T> Node<'a, T> {
    /// A value of launchgate's own: nothing written to it is recorded.
    pub fn scratch(value: &'a mut T) -> Self {
        Node {
            value,
            path: Path::default(),
            recorder: None,
            recorded: true,
        }
    }

    /// The node of `value`, which is `step` below this one.
    fn below<'b, U>(
        &'b mut self,
        step: Step<'b>,
        value: impl FnOnce(&'b mut T) -> Option<&'b mut U>,
    ) -> Option<Node<'b, U>>
    where
        T: Json,
    {
        let path = self.path_below(&[step]);
        Some(Node {
            path,
            value: value(self.value)?,
            recorder: self.recorder.as_deref_mut(),
            recorded: self.recorded,
        })
    }

    /// The path of `steps` below this node. Past [`DEPTH`] this node is recorded whole (what
    /// is written below it is then in that record) and its own path is given.
    fn path_below<'b>(&mut self, steps: &[Step<'b>]) -> Path<'b>
    where
        T: Json,
        'a: 'b,
    {
        match self.path.join(steps) {
            Some(path) => path,
            None => {
                let _ = &mut **self;
                self.path
            }
        }
    }

    /// Records that the place `step` below this node, which holds `old`, is being written.
    fn record(&mut self, step: Step<'_>, old: impl FnOnce() -> Option<Value>) {
        if !self.recorded
            && let Some(recorder) = self.recorder.as_deref_mut()
        {
            let mut pointer = self.path.pointer();
            step.push_onto(&mut pointer);
            recorder.written(pointer, old);
        }
    }

    /// Records `old` as the value before a write of the place `step` below this node (taken
    /// after the write, when the write gave it back).
    fn record_old(&mut self, step: Step<'_>, old: Option<Value>) {
        self.record(step, || old);
    }
}

impl<'a> Node<'a, Value> {
    /// This node as an object, if it is one.
    pub fn as_map_node(&mut self) -> Option<Node<'_, Map<String, Value>>> {
        let Node {
            value,
            path,
            recorder,
            recorded,
        } = self;
        Some(Node {
            value: value.as_object_mut()?,
            path: path.clone(),
            recorder: recorder.as_deref_mut(),
            recorded: *recorded,
        })
    }

    /// [`Node::as_map_node`] for as long as this node lives.
    pub fn into_map_node(self) -> Option<Node<'a, Map<String, Value>>> {
        Some(Node {
            value: self.value.as_object_mut()?,
            path: self.path,
            recorder: self.recorder,
            recorded: self.recorded,
        })
    }

    /// The object member `key` of this node, if it is an object with one.
    pub fn object<'b>(&'b mut self, key: &'b str) -> Option<Node<'b, Map<String, Value>>> {
        self.below(Step::Key(key), |v| {
            json::member_mut(v.as_object_mut()?, key)?.as_object_mut()
        })
    }
}

/// A node of an object.
pub type MapNode<'a> = Node<'a, Map<String, Value>>;

/// The value at `steps` below `value`.
fn walk<'v>(value: &'v mut Value, steps: &[Step<'_>]) -> Option<&'v mut Value> {
    steps
        .iter()
        .try_fold(value, |value, step| match (step, value) {
            (Step::Key(key), Value::Object(map)) => json::member_mut(map, key),
            (Step::Index(index), Value::Array(items)) => items.get_mut(*index),
            (Step::Token(token), value) => value.at_mut(&format!("/{token}")),
            _ => None,
        })
}

/// The steps of a JSON Pointer.
fn steps_of(pointer: &str) -> Option<Vec<Step<'_>>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    Some(
        pointer
            .strip_prefix('/')?
            .split('/')
            .map(Step::Token)
            .collect(),
    )
}

impl Node<'_, Value> {
    /// The node at `pointer` (a JSON Pointer) below this one, if there is one.
    pub fn at_pointer<'b>(&'b mut self, pointer: &'b str) -> Option<Node<'b, Value>> {
        self.at_steps(&steps_of(pointer)?)
    }

    /// The node at `steps` below this one, if there is one.
    pub fn at_steps<'b>(&'b mut self, steps: &[Step<'b>]) -> Option<Node<'b, Value>> {
        Some(Node {
            path: self.path_below(steps),
            value: walk(self.value, steps)?,
            recorder: self.recorder.as_deref_mut(),
            recorded: self.recorded,
        })
    }
}

impl MapNode<'_> {
    /// The node at `steps` below this object, if there is one.
    pub fn at_steps<'b>(&'b mut self, steps: &[Step<'b>]) -> Option<Node<'b, Value>> {
        let [Step::Key(key), rest @ ..] = steps else {
            return None;
        };
        Some(Node {
            path: self.path_below(steps),
            value: walk(json::member_mut(self.value, key)?, rest)?,
            recorder: self.recorder.as_deref_mut(),
            recorded: self.recorded,
        })
    }
}

impl<T> Node<'_, T> {
    /// This node again, for a shorter while.
    pub fn reborrow(&mut self) -> Node<'_, T> {
        Node {
            value: self.value,
            path: self.path.clone(),
            recorder: self.recorder.as_deref_mut(),
            recorded: self.recorded,
        }
    }
}

impl<'a> Node<'a, Map<String, Value>> {
    /// The member `key` if it is an object.
    pub fn object<'b>(&'b mut self, key: &'b str) -> Option<Node<'b, Map<String, Value>>> {
        self.below(Step::Key(key), |map| {
            json::member_mut(map, key)?.as_object_mut()
        })
    }

    /// The member `key` if it is an array.
    pub fn array<'b>(&'b mut self, key: &'b str) -> Option<Node<'b, Vec<Value>>> {
        self.below(Step::Key(key), |map| {
            json::member_mut(map, key)?.as_array_mut()
        })
    }

    /// The member `key` as an object, set to `{}` first when it is absent or not an object.
    pub fn object_or_new<'b>(&'b mut self, key: &'b str) -> Node<'b, Map<String, Value>> {
        let new = !json::member(self.value, key).is_some_and(Value::is_object);
        if new {
            self.set(key, Value::Object(Map::new()));
        }
        let mut node = self.object(key).expect("just made an object");
        // Written whole already: what is written into it is in that record.
        node.recorded |= new;
        node
    }

    /// The member `key` as an array, set to `[]` first when it is absent or not an array.
    pub fn array_or_new<'b>(&'b mut self, key: &'b str) -> Node<'b, Vec<Value>> {
        let new = !json::member(self.value, key).is_some_and(Value::is_array);
        if new {
            self.set(key, Value::Array(Vec::new()));
        }
        let mut node = self.array(key).expect("just made an array");
        node.recorded |= new;
        node
    }

    /// Sets the member `key` to `value`.
    pub fn set(&mut self, key: &str, value: Value) {
        let old = match json::member_mut(self.value, key) {
            Some(slot) => Some(std::mem::replace(slot, value)),
            None => {
                self.value.insert(key.to_string(), value);
                None
            }
        };
        self.record_old(Step::Key(key), old);
    }

    /// Removes the member `key`; true when there was one.
    pub fn remove(&mut self, key: &str) -> bool {
        let Some(old) = self.value.remove(key) else {
            return false;
        };
        self.record_old(Step::Key(key), Some(old));
        true
    }
}

impl<'a> MapNode<'a> {
    /// [`MapNode::object_or_new`] for as long as this node lives.
    pub fn into_object_or_new(mut self, key: &'a str) -> MapNode<'a> {
        let new = !json::member(self.value, key).is_some_and(Value::is_object);
        if new {
            self.set(key, Value::Object(Map::new()));
        }
        let path = self.path_below(&[Step::Key(key)]);
        let Node {
            value,
            recorder,
            recorded,
            ..
        } = self;
        Node {
            path,
            value: json::member_mut(value, key)
                .and_then(Value::as_object_mut)
                .expect("just made an object"),
            recorder,
            recorded: recorded || new,
        }
    }
}

impl<'a> Node<'a, Vec<Value>> {
    /// Appends `value`.
    pub fn push(&mut self, value: Value) {
        let index = self.value.len();
        self.value.push(value);
        self.record(Step::Index(index), || None);
    }

    /// Replaces the element at `index` (which must exist) with `value`.
    pub fn replace(&mut self, index: usize, value: Value) {
        let old = std::mem::replace(&mut self.value[index], value);
        self.record_old(Step::Index(index), Some(old));
    }
}

impl<T> Deref for Node<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.value
    }
}

impl<T: Json> DerefMut for Node<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        if !self.recorded {
            if let Some(recorder) = self.recorder.as_deref_mut() {
                let value = &*self.value;
                recorder.written(self.path.pointer(), || Some(value.to_value()));
            }
            self.recorded = true;
        }
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A step of a path into a generated document, owning its key.
    #[derive(Debug, Clone)]
    enum Owned {
        Key(String),
        Index(usize),
    }

    /// The path `choices` pick through `value`: at each object or array, the member or
    /// element `choice % len`; it stops at a scalar, an empty container or the last choice.
    fn pick(value: &Value, choices: &[u8]) -> Vec<Owned> {
        let mut out = Vec::new();
        let mut here = value;
        for &choice in choices {
            match here {
                Value::Object(map) if !map.is_empty() => {
                    let (key, next) = map.iter().nth(usize::from(choice) % map.len()).unwrap();
                    out.push(Owned::Key(key.clone()));
                    here = next;
                }
                Value::Array(items) if !items.is_empty() => {
                    let index = usize::from(choice) % items.len();
                    out.push(Owned::Index(index));
                    here = &items[index];
                }
                _ => break,
            }
        }
        out
    }

    fn steps(owned: &[Owned]) -> Vec<Step<'_>> {
        owned
            .iter()
            .map(|s| match s {
                Owned::Key(k) => Step::Key(k),
                Owned::Index(i) => Step::Index(*i),
            })
            .collect()
    }

    /// One write through a node: each of the editor's writes, and a write through
    /// `DerefMut` (the node recorded whole).
    fn write(node: &mut Node<'_, Value>, op: u8, key: &str, value: Value) {
        if let Some(mut map) = node.as_map_node() {
            match op % 7 {
                0 => map.set(key, value),
                1 => {
                    map.remove(key);
                }
                2 => map.object_or_new(key).set("k", value),
                3 => map.array_or_new(key).push(value),
                4 => {
                    let mut list = map.array_or_new(key);
                    if list.is_empty() {
                        list.push(json!(null));
                    } else {
                        list.replace(usize::from(op) % list.len(), value);
                    }
                }
                5 => {
                    let mut inner = map.object_or_new(key);
                    inner.set("a", value.clone());
                    inner.remove("a");
                    inner.set("b", value);
                }
                _ => {
                    map.insert(key.to_string(), value);
                }
            }
        } else if let Value::Array(items) = &mut **node {
            items.retain(|v| !v.is_null());
            items.push(value);
        } else {
            **node = value;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn the_recorded_patch_is_the_diff(
            original in super::diff::tests::small_value(),
            edits in prop::collection::vec(
                (prop::collection::vec(any::<u8>(), 0..4), any::<u8>(),
                 prop::sample::select(vec!["a", "b", "k", "x/y", "m~n", ""]),
                 super::diff::tests::small_value()),
                0..6,
            ),
        ) {
            let mut object = json!({"root": original.clone()});
            let before = object.clone();
            let mut recorder = Recorder::default();
            {
                let mut root = Node::root(&mut object, &mut recorder);
                for (choices, op, key, value) in edits {
                    let path = pick(&root, &choices);
                    let steps = steps(&path);
                    if let Some(mut node) = root.at_steps(&steps) {
                        write(&mut node, op, key, value);
                    }
                }
            }
            let patch = recorder.patch(&object);
            prop_assert_eq!(&patch, &diff::diff_tree(&before, &object));
            let mut patched = before;
            json_patch::patch(&mut patched, &patch).unwrap();
            prop_assert_eq!(patched, object);
        }
    }

    #[test]
    fn removed_members_come_after_the_others_as_in_the_diff() {
        let mut object = json!({"a": 1, "c": 1, "l": [0, 1]});
        let before = object.clone();
        let mut recorder = Recorder::default();
        let mut root = Node::root(&mut object, &mut recorder);
        let mut map = root.as_map_node().unwrap();
        map.remove("a");
        map.array_or_new("l").push(json!(2));
        map.set("c", json!(2));
        map.set("b", json!(1));
        let patch = recorder.patch(&object);
        assert_eq!(patch, diff::diff_tree(&before, &object));
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "add", "path": "/b", "value": 1},
                {"op": "replace", "path": "/c", "value": 2},
                {"op": "add", "path": "/l/2", "value": 2},
                {"op": "remove", "path": "/a"}
            ])
        );
    }

    #[test]
    fn writes_inside_an_added_place_are_in_its_add() {
        let mut object = json!({"spec": {}});
        let mut recorder = Recorder::default();
        let mut root = Node::root(&mut object, &mut recorder);
        let mut spec = root.object("spec").unwrap();
        let mut extra = spec.object_or_new("extra");
        extra.set("x", json!(1));
        extra.set("y", json!(2));
        assert_eq!(recorder.entries.len(), 1);
        assert_eq!(
            serde_json::to_value(recorder.patch(&object)).unwrap(),
            json!([{"op": "add", "path": "/spec/extra", "value": {"x": 1, "y": 2}}])
        );
    }

    #[test]
    fn a_place_recorded_after_places_inside_it_keeps_their_old_values() {
        let mut object = json!({"a": {"b": 1, "c": [1]}, "z": 0});
        let before = object.clone();
        let mut recorder = Recorder::default();
        let mut root = Node::root(&mut object, &mut recorder);
        let mut a = root.object("a").unwrap();
        a.set("b", json!(2));
        a.array_or_new("c").push(json!(2));
        // Written whole now: the two places inside it give way to it.
        a.insert("d".into(), json!(3));
        assert_eq!(recorder.entries.len(), 1);
        assert_eq!(recorder.entries[0].old, Some(before["a"].clone()));
        let patch = recorder.patch(&object);
        assert_eq!(patch, diff::diff_tree(&before, &object));
        assert_eq!(patch.0.len(), 3);
    }
}
