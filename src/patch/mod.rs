//! The JSON Patch of a mutation, recorded as the mutators write.
//!
//! The mutators reach the object through [`Node`]s: a value with the path that leads to it.
//! Reading a node is reading the value. Writing records, before the write, what is about to
//! change: a member set or removed ([`Node::set`], [`Node::remove`]), an element appended
//! ([`Node::push`]), or — for any other write, through `DerefMut` — the node itself. The
//! record keeps the value each written place had (moved out when the write replaces it, a
//! copy of that place only when it is changed in place), never a copy of the object. The
//! places are a tree of tokens, so a write finds on its way down whether a place around it is
//! recorded already.
//!
//! [`Recorder::patch`] turns the record into the operations `json_patch::diff` would give
//! from the object as received to the object as mutated, in the same order ([`diff`]): an
//! `add` for a place that was absent, a `remove` for one that is gone, and the diff of the
//! old and new value of each other written place. A write inside a recorded place records
//! nothing more; a place recorded after places inside it takes their old values back into
//! its own.

pub mod diff;

use crate::json;
use json_patch::jsonptr::{PointerBuf, Token};
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
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
    /// Appends this step to a JSON Pointer.
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

/// The most steps one link of a [`Path`] holds: a template's from its kind's root.
const LINK: usize = 6;

/// Where a node is: a link of up to [`LINK`] steps below its parent's path, which it borrows.
/// A node is made for every template, container and member the mutators visit: this costs
/// neither an allocation nor a copy of the steps above it.
#[derive(Debug, Clone, Copy)]
pub struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    steps: [Step<'a>; LINK],
    len: usize,
}

impl Default for Path<'_> {
    fn default() -> Self {
        Path {
            parent: None,
            steps: [Step::Index(0); LINK],
            len: 0,
        }
    }
}

impl<'a> Path<'a> {
    /// The path of `steps` below `parent`; `None` for more steps than a link holds.
    fn below(parent: &'a Path<'a>, steps: &[Step<'a>]) -> Option<Path<'a>> {
        let mut path = Path {
            parent: Some(parent),
            ..Path::default()
        };
        path.extend(steps).then_some(path)
    }

    /// Adds `steps` to this link; false (and unchanged) when they do not fit.
    fn extend(&mut self, steps: &[Step<'a>]) -> bool {
        let len = self.len + steps.len();
        if len > LINK {
            return false;
        }
        self.steps[self.len..len].copy_from_slice(steps);
        self.len = len;
        true
    }

    /// The steps of this path from the root, then `last` when given.
    fn steps(&self, last: Option<Step<'a>>) -> Vec<Step<'a>> {
        let mut steps = Vec::with_capacity(self.depth() + usize::from(last.is_some()));
        self.collect(&mut steps);
        steps.extend(last);
        steps
    }

    /// How many steps lead here.
    fn depth(&self) -> usize {
        self.len + self.parent.map_or(0, Path::depth)
    }

    fn collect(&self, steps: &mut Vec<Step<'a>>) {
        if let Some(parent) = self.parent {
            parent.collect(steps);
        }
        steps.extend_from_slice(&self.steps[..self.len]);
    }
}

/// The places written, as a tree of tokens: a place is recorded with the value it had when
/// the object was received, and then has no places below it (what is written there is in its
/// record).
#[derive(Debug, Default)]
struct Place {
    /// Recorded here, with the value before (`None`: absent).
    old: Option<Option<Value>>,
    /// The places below, by their (decoded) token: found by a look-up, not a scan, since a
    /// list of thousands of containers has a place per element written.
    below: BTreeMap<String, Place>,
}

/// What the mutators wrote: the places, each with its value before.
#[derive(Debug, Default)]
pub struct Recorder {
    root: Place,
}

/// A step's token, decoded: a key, or an index written in decimal (into `digits`: a look-up
/// by an index allocates nothing).
fn token_of<'s>(step: &Step<'s>, digits: &'s mut itoa::Buffer) -> Cow<'s, str> {
    match *step {
        Step::Key(key) => Cow::Borrowed(key),
        Step::Index(index) => Cow::Borrowed(digits.format(index)),
        Step::Token(token) => json::unescape(token),
    }
}

impl Recorder {
    /// Records that the place at `steps`, which held `old()` (`None`: absent), is being
    /// written. Nothing when the place or a place around it is recorded already (its value
    /// before is the one kept); places inside it that were recorded before take their values
    /// back into `old` and are replaced by it.
    fn written(&mut self, steps: &[Step<'_>], old: impl FnOnce() -> Option<Value>) {
        let mut place = &mut self.root;
        for step in steps {
            if place.old.is_some() {
                return;
            }
            let mut digits = itoa::Buffer::new();
            let token = token_of(step, &mut digits);
            // Looked up by the borrowed token first: most writes go to places known already.
            if !place.below.contains_key(token.as_ref()) {
                place.below.insert(token.to_string(), Place::default());
            }
            place = place
                .below
                .get_mut(token.as_ref())
                .expect("the place was just found or made");
        }
        if place.old.is_some() {
            return;
        }
        let mut old = old();
        if let Some(value) = old.as_mut() {
            restore(value, std::mem::take(&mut place.below));
        }
        place.below.clear();
        place.old = Some(old);
    }

    /// The JSON Patch from the object as received to `object`, which the recorded writes
    /// made: the operations `json_patch::diff` gives, in its order ([`diff`]).
    pub fn patch(self, object: &Value) -> Patch {
        let mut ops = Vec::new();
        emit(self.root, Some(object), &mut PointerBuf::new(), &mut ops);
        Patch(ops)
    }
}

/// Puts back, inside `value`, the values the places `below` it had (their writes undone):
/// an array's elements from the last, so that an appended element is taken away before the
/// ones before it.
fn restore(value: &mut Value, below: BTreeMap<String, Place>) {
    let mut below: Vec<(String, Place)> = below.into_iter().collect();
    if value.is_array() {
        below.sort_by_key(|(token, _)| std::cmp::Reverse(token.parse::<usize>().unwrap_or(0)));
    }
    for (token, place) in below {
        match (place.old, &mut *value) {
            (Some(old), Value::Object(map)) => match old {
                Some(old) => {
                    map.insert(token, old);
                }
                None => {
                    map.remove(&token);
                }
            },
            (Some(old), Value::Array(items)) => {
                let Ok(index) = token.parse::<usize>() else {
                    continue;
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
            (Some(_), _) => {}
            (None, value) => {
                if let Some(inner) = json::child_mut(value, &token) {
                    restore(inner, place.below);
                }
            }
        }
    }
}

/// Appends the operations of `place` (at `pointer`; `now` its value in the mutated object)
/// to `ops`, in the diff's order: depth first, an array's elements by index, an object's
/// members by key with the removed ones after the others.
fn emit(
    place: Place,
    now: Option<&Value>,
    pointer: &mut PointerBuf,
    ops: &mut Vec<PatchOperation>,
) {
    if let Some(old) = place.old {
        match (old, now) {
            (None, None) => {}
            (None, Some(now)) => ops.push(PatchOperation::Add(AddOperation {
                path: pointer.clone(),
                value: now.clone(),
            })),
            (Some(_), None) => ops.push(PatchOperation::Remove(RemoveOperation {
                path: pointer.clone(),
            })),
            (Some(old), Some(now)) => diff::diff_at(&old, now, pointer, ops),
        }
        return;
    }
    let mut below: Vec<(String, Place, Option<&Value>)> = place
        .below
        .into_iter()
        .map(|(token, place)| {
            let child = now.and_then(|n| json::child(n, &token));
            (token, place, child)
        })
        .collect();
    match now {
        Some(Value::Array(_)) => {
            below.sort_by_key(|(token, ..)| token.parse::<usize>().unwrap_or(usize::MAX));
        }
        _ => {
            // A member removed from this object: its operation comes after the others.
            let removed = |place: &Place, child: Option<&Value>| {
                child.is_none() && matches!(place.old, Some(Some(_)))
            };
            below.sort_by(|(a, a_place, a_now), (b, b_place, b_now)| {
                (removed(a_place, *a_now), a).cmp(&(removed(b_place, *b_now), b))
            });
        }
    }
    for (token, place, child) in below {
        pointer.push_back(token.as_str());
        emit(place, child, pointer, ops);
        pointer.pop_back();
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
    ) -> Option<Node<'b, U>> {
        Some(Node {
            path: Path::below(&self.path, &[step]).expect("one step fits a link"),
            value: value(self.value)?,
            recorder: self.recorder.as_deref_mut(),
            recorded: self.recorded,
        })
    }

    /// The node of `value`, which is `steps` below this one. For more steps than a link holds,
    /// this node is recorded whole first (what is written below it is in that record).
    fn below_steps<'b, U>(
        &'b mut self,
        steps: &[Step<'b>],
        value: impl FnOnce(&'b mut T) -> Option<&'b mut U>,
    ) -> Option<Node<'b, U>>
    where
        T: Json,
    {
        if steps.len() > LINK {
            let _ = &mut **self;
        }
        Some(Node {
            path: Path::below(&self.path, steps).unwrap_or_default(),
            value: value(self.value)?,
            recorder: self.recorder.as_deref_mut(),
            recorded: self.recorded,
        })
    }

    /// Records that the place `step` below this node, which holds `old`, is being written.
    fn record(&mut self, step: Step<'_>, old: impl FnOnce() -> Option<Value>) {
        if !self.recorded
            && let Some(recorder) = self.recorder.as_deref_mut()
        {
            recorder.written(&self.path.steps(Some(step)), old);
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
            path: *path,
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
            (Step::Token(token), value) => json::child_mut(value, &json::unescape(token)),
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
        self.below_steps(steps, |value| walk(value, steps))
    }
}

impl MapNode<'_> {
    /// The node at `steps` below this object, if there is one.
    pub fn at_steps<'b>(&'b mut self, steps: &[Step<'b>]) -> Option<Node<'b, Value>> {
        let [Step::Key(key), rest @ ..] = steps else {
            return None;
        };
        self.below_steps(steps, |map| walk(json::member_mut(map, key)?, rest))
    }
}

impl<T> Node<'_, T> {
    /// This node again, for a shorter while.
    pub fn reborrow(&mut self) -> Node<'_, T> {
        Node {
            value: self.value,
            path: self.path,
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
        let mut path = self.path;
        if !path.extend(&[Step::Key(key)]) {
            // The link is full: this node is recorded whole, and so is what is below it.
            let _ = &mut *self;
        }
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
                recorder.written(&self.path.steps(None), || Some(value.to_value()));
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

    /// The recorded places: their pointers and values before.
    fn places(recorder: &Recorder) -> Vec<(String, Option<Value>)> {
        fn walk(place: &Place, at: String, out: &mut Vec<(String, Option<Value>)>) {
            if let Some(old) = &place.old {
                out.push((at.clone(), old.clone()));
            }
            for (token, below) in &place.below {
                walk(below, format!("{at}/{token}"), out);
            }
        }
        let mut out = Vec::new();
        walk(&recorder.root, String::new(), &mut out);
        out
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
        assert_eq!(places(&recorder).len(), 1);
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
        assert_eq!(
            places(&recorder),
            [("/a".to_string(), Some(before["a"].clone()))]
        );
        let patch = recorder.patch(&object);
        assert_eq!(patch, diff::diff_tree(&before, &object));
        assert_eq!(patch.0.len(), 3);
    }
}
