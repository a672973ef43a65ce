//! Native policies fail loudly, with least privilege: the server keeps its set by reading and
//! replacing the slot objects someone else created (never creating or deleting one), serves a
//! config only once the set holds it, never leaves a policy of a queue the served config does
//! not have, and says so — readiness, a metric, an Event — when it cannot.

use super::*;
use crate::server::events::MemoryEventSink;
use crate::server::{budget, metrics::Metrics, reload};
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const SET: &str = "lg";

/// The admission policies of a cluster, in memory: objects by (kind, name) with resource
/// versions, every write in order, and a switch that makes writes fail.
#[derive(Default)]
struct MemorySlots {
    objects: Mutex<BTreeMap<(String, String), Value>>,
    writes: Mutex<Vec<Value>>,
    version: AtomicU64,
    /// Writes left before every further one fails (an API server going away mid-sync).
    writes_left: Mutex<Option<usize>>,
}

impl MemorySlots {
    /// A set of `slots` slots created dormant, as the chart creates it (with a label of Helm's
    /// that is not the server's to remove).
    fn dormant(slots: usize) -> Self {
        let store = MemorySlots::default();
        for mut object in native::dormant_set(SET, slots) {
            object["metadata"]["labels"]["helm.sh/chart"] = "launchgate-0.1.0".into();
            object["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm".into();
            store.put(object);
        }
        store
    }

    fn put(&self, mut object: Value) {
        let version = self.version.fetch_add(1, Ordering::Relaxed) + 1;
        object["metadata"]["resourceVersion"] = version.to_string().into();
        self.objects
            .lock()
            .unwrap()
            .insert(native::key_of(&object), object);
    }

    fn snapshot(&self) -> BTreeMap<(String, String), Value> {
        self.objects.lock().unwrap().clone()
    }

    fn writes(&self) -> Vec<Value> {
        self.writes.lock().unwrap().clone()
    }

    /// The queue each slot's objects are for, by slot: `None` for a dormant object.
    fn owners(&self) -> Vec<Vec<Option<String>>> {
        let objects = self.snapshot();
        let mut slots: BTreeMap<usize, Vec<Option<String>>> = BTreeMap::new();
        for ((_, name), object) in &objects {
            let slot = native::slot_of(SET, name).expect("only slot names");
            slots
                .entry(slot)
                .or_default()
                .push(native::owner(object).map(str::to_string));
        }
        slots.into_values().collect()
    }
}

#[async_trait::async_trait]
impl SlotStore for MemorySlots {
    async fn get(&self, kind: SlotKind, name: &str) -> Result<Option<Value>, StoreError> {
        let key = (kind.kind.to_string(), name.to_string());
        Ok(self.objects.lock().unwrap().get(&key).cloned())
    }

    async fn replace(&self, _: SlotKind, object: &Value) -> Result<Value, StoreError> {
        if let Some(left) = self.writes_left.lock().unwrap().as_mut() {
            if *left == 0 {
                return Err(StoreError::Other("connection refused".into()));
            }
            *left -= 1;
        }
        let key = native::key_of(object);
        let current = self.objects.lock().unwrap().get(&key).cloned();
        let Some(current) = current else {
            return Err(StoreError::Other("not found".into()));
        };
        if current["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"] {
            return Err(StoreError::Conflict);
        }
        self.writes.lock().unwrap().push(object.clone());
        self.put(object.clone());
        Ok(self.objects.lock().unwrap()[&key].clone())
    }
}

/// A config of the queues `keys`, each the built-in example queue.
fn config(keys: &[&str]) -> Arc<Policy> {
    let mut config: Value =
        serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).expect("built-in config");
    let queue = config["queues"]["gpu-queue"].clone();
    let queues: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| (k.to_string(), queue.clone()))
        .collect();
    config["queues"] = Value::Object(queues);
    config["defaultQueue"] = keys[0].into();
    Arc::new(Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).expect("a valid config"))
}

fn pod() -> OwnPod {
    OwnPod {
        namespace: "launchgate".into(),
        name: "launchgate-7d9-x".into(),
        uid: Some("pod-uid".into()),
    }
}

/// A server keeping the set `lg` of `slots` slots, its Events going to `sink`, serving
/// `serving` (not yet offered to the set).
fn server(slots: usize, sink: Arc<MemoryEventSink>, serving: Arc<Policy>) -> AppState {
    let metrics = Metrics::new();
    let target = Target {
        set: SET.into(),
        slots,
        namespace_selector: Some(serde_json::json!({"matchLabels": {"team": "ml"}})),
    };
    let native = Native::new(target, Some((sink, pod())), &metrics);
    AppState {
        policy: ArcSwap::new(serving),
        metrics,
        cluster: Arc::new(crate::cluster::NoCluster),
        shutting_down: AtomicBool::new(false),
        cert_valid: AtomicBool::new(true),
        slots: budget::Slots::new(4),
        budget: budget::MemoryBudget::new(64 << 20),
        read_timeout: Duration::from_secs(1),
        request_deadline: Duration::from_secs(1),
        events: None,
        tracer: None,
        native: Some(native),
        bypass: None,
        launch_queues: None,
    }
}

fn native(state: &AppState) -> &Native {
    state.native.as_ref().unwrap()
}

fn failing(state: &AppState) -> Vec<String> {
    state
        .metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("launchgate_native_policy_sync_failing{") && l.ends_with(" 1"))
        .map(str::to_string)
        .collect()
}

/// The Events written so far (they are written in the background), once there are `n`.
async fn events(sink: &MemoryEventSink, n: usize) -> Vec<k8s_openapi::api::events::v1::Event> {
    for _ in 0..200 {
        if sink.events.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sink.events.lock().unwrap().clone()
}

/// Replays `writes` over `before`, checking after each one that no binding binds a policy of
/// another queue, and that no object of a queue in `gone` is left once an object of a queue in
/// `new` has been written.
fn replay_holds_the_order(
    before: &BTreeMap<(String, String), Value>,
    writes: &[Value],
    gone: &[&str],
    new: &[&str],
) {
    let mut objects = before.clone();
    for (i, write) in writes.iter().enumerate() {
        objects.insert(native::key_of(write), write.clone());
        for (slot, kind, name) in native::slot_objects(SET, 2) {
            if kind.binding {
                continue;
            }
            let owner_of = |kind: &str| {
                objects[&(kind.to_string(), name.clone())]["metadata"]["annotations"]
                    [native::QUEUE_KEY_ANNOTATION]
                    .as_str()
                    .map(str::to_string)
            };
            let binding = format!("{}Binding", kind.kind);
            if let (Some(p), Some(b)) = (owner_of(kind.kind), owner_of(&binding)) {
                assert_eq!(
                    p, b,
                    "write {i}: {name}: slot {slot}'s binding binds another queue's policy"
                );
            }
        }
        let owners: Vec<&str> = objects.values().filter_map(native::owner).collect();
        if owners.iter().any(|o| new.contains(o)) {
            assert!(
                !owners.iter().any(|o| gone.contains(o)),
                "write {i}: a queue that is gone still has a policy after the new config's first write: {owners:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_config_is_served_once_the_cluster_holds_it_and_one_it_cannot_hold_never_is() {
    let store = MemorySlots::dormant(2);
    let sink = Arc::new(MemoryEventSink::default());
    let first = config(&["a", "b"]);
    let state = server(2, sink.clone(), first.clone());

    // At start: not ready until the set holds the config.
    assert!(reload::accept(&state, first.clone(), "hash-ab".into()));
    assert!(
        state.not_ready().unwrap().contains("not synced yet"),
        "{:?}",
        state.not_ready()
    );
    native(&state).sync_waiting(&store, &state).await;
    assert_eq!(state.not_ready(), None);
    assert!(Arc::ptr_eq(&state.policy.load_full(), &first));
    assert_eq!(
        store.owners(),
        [
            vec![Some("a".to_string()); 4],
            vec![Some("b".to_string()); 4]
        ]
    );
    // Written over Helm's objects: its labels stay (no field it set is taken from it), and the
    // hash of the served config is on every object.
    for object in store.snapshot().values() {
        assert_eq!(
            object["metadata"]["labels"]["helm.sh/chart"],
            "launchgate-0.1.0"
        );
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
        assert_eq!(
            object["metadata"]["annotations"]["launchgate.io/config-hash"],
            "hash-ab"
        );
    }
    assert!(failing(&state).is_empty(), "{:?}", failing(&state));

    // `b` renamed `c` and a queue `d` added: three queues for two slots. Refused: the previous
    // config keeps serving, nothing is written, and the server says why, three ways.
    let writes = store.writes().len();
    let before = store.snapshot();
    let overflowing = config(&["a", "c", "d"]);
    assert!(!reload::accept(&state, overflowing, "hash-acd".into()));
    native(&state).sync_waiting(&store, &state).await;
    assert!(Arc::ptr_eq(&state.policy.load_full(), &first));
    assert_eq!(store.writes().len(), writes);
    assert_eq!(store.snapshot(), before);
    let why = state.not_ready().expect("not ready");
    assert!(
        why.contains("3 queues") && why.contains("2 native policy slots"),
        "{why}"
    );
    assert_eq!(
        failing(&state),
        ["launchgate_native_policy_sync_failing{reason=\"too_many_queues\"} 1"]
    );
    assert!(
        state
            .metrics
            .encode()
            .contains("launchgate_config_last_reload_successful 0")
    );
    let written = events(&sink, 1).await;
    let event = written.last().expect("an Event");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.reason.as_deref(), Some(REASON_NOT_IN_STEP));
    assert!(event.note.as_deref().unwrap().contains("3 queues"));
    let regarding = event.regarding.as_ref().unwrap();
    assert_eq!(
        (
            regarding.kind.as_deref(),
            regarding.name.as_deref(),
            regarding.uid.as_deref()
        ),
        (Some("Pod"), Some("launchgate-7d9-x"), Some("pod-uid"))
    );
    assert_eq!(event.metadata.namespace.as_deref(), Some("launchgate"));

    // `b` renamed `c` alone: served once the set holds it. `c` takes the slot `b` had, which
    // is made dormant before anything of the new config is written.
    let renamed = config(&["a", "c"]);
    assert!(reload::accept(&state, renamed.clone(), "hash-ac".into()));
    assert!(Arc::ptr_eq(&state.policy.load_full(), &first));
    native(&state).sync_waiting(&store, &state).await;
    assert!(Arc::ptr_eq(&state.policy.load_full(), &renamed));
    assert_eq!(state.not_ready(), None);
    assert!(failing(&state).is_empty());
    assert_eq!(
        store.owners(),
        [
            vec![Some("a".to_string()); 4],
            vec![Some("c".to_string()); 4]
        ]
    );
    replay_holds_the_order(&before, &store.writes()[writes..], &["b"], &["c"]);
    let written = events(&sink, 2).await;
    assert_eq!(written.len(), 2);
    assert_eq!(written[1].type_.as_deref(), Some("Normal"));
    assert_eq!(written[1].reason.as_deref(), Some(REASON_IN_STEP));

    // `c` removed: its slot is dormant again, as the chart created it; nothing is deleted.
    let only_a = config(&["a"]);
    assert!(reload::accept(&state, only_a.clone(), "hash-a".into()));
    native(&state).sync_waiting(&store, &state).await;
    assert!(Arc::ptr_eq(&state.policy.load_full(), &only_a));
    assert_eq!(store.snapshot().len(), 8);
    assert_eq!(store.owners()[1], vec![None; 4]);
    for (slot, kind, name) in native::slot_objects(SET, 2).into_iter().skip(4) {
        let live = &store.snapshot()[&(kind.kind.to_string(), name.clone())];
        let dormant = native::dormant(SET, slot, kind, &name);
        assert_eq!(live["spec"], dormant["spec"], "{name}");
        assert_eq!(
            live["metadata"]["labels"]["helm.sh/chart"],
            "launchgate-0.1.0"
        );
        for key in live["metadata"]["labels"]
            .as_object()
            .unwrap()
            .keys()
            .chain(
                live["metadata"]["annotations"]
                    .as_object()
                    .into_iter()
                    .flat_map(|a| a.keys()),
            )
        {
            assert!(
                !key.starts_with("launchgate.io/")
                    || dormant["metadata"]["labels"].get(key).is_some(),
                "{name} keeps {key}"
            );
        }
    }
}

#[tokio::test]
async fn a_fresh_start_with_more_queues_than_slots_serves_nothing_and_writes_nothing() {
    let store = MemorySlots::dormant(2);
    let sink = Arc::new(MemoryEventSink::default());
    let overflowing = config(&["a", "b", "c"]);
    let state = server(2, sink.clone(), overflowing.clone());
    assert!(!reload::accept(&state, overflowing, "hash".into()));
    native(&state).sync_waiting(&store, &state).await;
    assert!(store.writes().is_empty());
    let why = state.not_ready().expect("never ready");
    assert!(
        why.contains("config refused") && why.contains("3 queues"),
        "{why}"
    );
    assert_eq!(events(&sink, 1).await.len(), 1);
    // No config is in force.
    assert!(
        !state.metrics.encode().contains("launchgate_config_info{"),
        "{}",
        state.metrics.encode()
    );
}

#[tokio::test]
async fn a_missing_slot_object_is_named_and_nothing_is_written() {
    let store = MemorySlots::dormant(2);
    store
        .objects
        .lock()
        .unwrap()
        .retain(|(kind, name), _| !(kind.starts_with("Validating") && name == "lg-q1-limits"));
    let sink = Arc::new(MemoryEventSink::default());
    let wanted = config(&["a", "b"]);
    let state = server(2, sink.clone(), wanted.clone());
    assert!(reload::accept(&state, wanted, "hash".into()));
    native(&state).sync_waiting(&store, &state).await;
    assert!(store.writes().is_empty());
    let why = state.not_ready().expect("not ready");
    assert!(
        why.contains("ValidatingAdmissionPolicy lg-q1-limits")
            && why.contains("ValidatingAdmissionPolicyBinding lg-q1-limits")
            && why.contains("compile-native --dormant-slots"),
        "{why}"
    );
    assert_eq!(
        failing(&state),
        ["launchgate_native_policy_sync_failing{reason=\"missing_objects\"} 1"]
    );
    // Created (by an admin): the next round syncs.
    for object in native::dormant_set(SET, 2) {
        if !store.snapshot().contains_key(&native::key_of(&object)) {
            store.put(object);
        }
    }
    native(&state).sync_waiting(&store, &state).await;
    assert_eq!(state.not_ready(), None);
}

#[tokio::test]
async fn a_sync_cut_short_keeps_the_previous_config_serving_until_it_completes() {
    let store = MemorySlots::dormant(2);
    let sink = Arc::new(MemoryEventSink::default());
    let first = config(&["a", "b"]);
    let state = server(2, sink.clone(), first.clone());
    assert!(reload::accept(&state, first.clone(), "hash-ab".into()));
    native(&state).sync_waiting(&store, &state).await;
    let before = store.snapshot();
    let writes = store.writes().len();

    // The API server goes away after three writes of the next sync.
    *store.writes_left.lock().unwrap() = Some(3);
    let renamed = config(&["a", "c"]);
    assert!(reload::accept(&state, renamed.clone(), "hash-ac".into()));
    native(&state).sync_waiting(&store, &state).await;
    assert_eq!(store.writes().len(), writes + 3);
    assert!(Arc::ptr_eq(&state.policy.load_full(), &first));
    let why = state.not_ready().expect("not ready");
    assert!(why.contains("connection refused"), "{why}");
    assert_eq!(
        failing(&state),
        ["launchgate_native_policy_sync_failing{reason=\"api_error\"} 1"]
    );

    // Back: the retry completes it, and only then is the new config served.
    *store.writes_left.lock().unwrap() = None;
    native(&state).sync_waiting(&store, &state).await;
    assert!(Arc::ptr_eq(&state.policy.load_full(), &renamed));
    assert_eq!(state.not_ready(), None);
    replay_holds_the_order(&before, &store.writes()[writes..], &["b"], &["c"]);
    assert_eq!(
        store.owners(),
        [
            vec![Some("a".to_string()); 4],
            vec![Some("c".to_string()); 4]
        ]
    );
}

#[tokio::test]
async fn a_concurrent_writer_is_read_again_never_overwritten_unseen() {
    let store = MemorySlots::dormant(1);
    // Someone else (another replica, Helm) changed an object after it was read: the replace
    // conflicts, the server reads it again and writes over what is there now.
    let sink = Arc::new(MemoryEventSink::default());
    let wanted = config(&["a"]);
    let state = server(1, sink, wanted.clone());
    let mut live = read_set(&store, &native(&state).target).await.unwrap();
    let key = (
        "MutatingAdmissionPolicy".to_string(),
        "lg-q0-mutate".to_string(),
    );
    let mut changed = store.snapshot()[&key].clone();
    changed["metadata"]["labels"]["someone"] = "else".into();
    store.put(changed);
    let desired = native::slot_set(&wanted, SET, 1, None, None, &BTreeMap::new()).unwrap();
    replace(&store, &mut live, &desired[&key]).await.unwrap();
    let stored = &store.snapshot()[&key];
    assert_eq!(stored["metadata"]["labels"]["someone"], "else");
    assert_eq!(native::owner(stored), Some("a"));
}

/// The emergency bypass: while the release namespace carries the annotation, every object of
/// the set is made dormant (a binding an admin deleted left missing, no error), a config read
/// meanwhile is neither written nor served, the pod stays ready and says why (an Event); once it
/// is lifted, the config read meanwhile is synced and served, and the pod is ready only then.
#[tokio::test]
async fn the_emergency_bypass_holds_the_set_dormant_until_it_is_lifted() {
    let store = MemorySlots::dormant(2);
    let sink = Arc::new(MemoryEventSink::default());
    let first = config(&["a", "b"]);
    let mut state = server(2, sink.clone(), first.clone());
    let bypass = Arc::new(crate::server::bypass::Bypass::new("launchgate".into()));
    bypass.record(Ok(None), &state.metrics);
    state.bypass = Some(bypass.clone());
    assert!(reload::accept(&state, first.clone(), "hash-ab".into()));
    native(&state).sync_waiting(&store, &state).await;
    assert_eq!(
        store.owners(),
        [
            vec![Some("a".to_string()); 4],
            vec![Some("b".to_string()); 4]
        ]
    );

    bypass.record(Ok(Some("alice: INC-7".into())), &state.metrics);
    native(&state).hold_dormant(&store, &state.metrics).await;
    assert_eq!(store.owners(), [vec![None; 4], vec![None; 4]]);
    for (slot, kind, name) in native::slot_objects(SET, 2) {
        let live = &store.snapshot()[&(kind.kind.to_string(), name.clone())];
        assert_eq!(
            live["spec"],
            native::dormant(SET, slot, kind, &name)["spec"],
            "{name}"
        );
        // Helm's labels stay.
        assert_eq!(
            live["metadata"]["labels"]["helm.sh/chart"],
            "launchgate-0.1.0"
        );
    }
    assert_eq!(state.not_ready(), None, "ready while bypassed");
    assert!(failing(&state).is_empty(), "{:?}", failing(&state));
    let written = events(&sink, 1).await;
    let event = written.last().expect("an Event");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.reason.as_deref(), Some(REASON_BYPASS));

    // Held: another round writes nothing; a policy an older replica (or an admin) put back is
    // made dormant again; a binding an admin deleted stays deleted and is no error.
    let writes = store.writes().len();
    native(&state).hold_dormant(&store, &state.metrics).await;
    assert_eq!(store.writes().len(), writes);
    let mut restored = store.snapshot()[&(
        "ValidatingAdmissionPolicy".to_string(),
        "lg-q0-limits".to_string(),
    )]
        .clone();
    restored["spec"]["validations"] = serde_json::json!([{"expression": "false"}]);
    store.put(restored);
    let deleted = (
        "ValidatingAdmissionPolicyBinding".to_string(),
        "lg-q1-limits".to_string(),
    );
    store.objects.lock().unwrap().remove(&deleted);
    native(&state).hold_dormant(&store, &state.metrics).await;
    assert_eq!(store.writes().len(), writes + 1);
    assert_eq!(
        store.snapshot()[&(
            "ValidatingAdmissionPolicy".to_string(),
            "lg-q0-limits".to_string()
        )]["spec"],
        native::dormant(
            SET,
            0,
            SlotKind::of("ValidatingAdmissionPolicy").unwrap(),
            "lg-q0-limits"
        )["spec"]
    );
    assert!(!store.snapshot().contains_key(&deleted));
    assert_eq!(state.not_ready(), None);

    // A config read while bypassed waits: nothing written, the previous one served.
    let renamed = config(&["a", "c"]);
    assert!(reload::accept(&state, renamed.clone(), "hash-ac".into()));
    let writes = store.writes().len();
    native(&state).hold_dormant(&store, &state.metrics).await;
    assert_eq!(store.writes().len(), writes);
    assert!(Arc::ptr_eq(&state.policy.load_full(), &first));

    // Lifted (the binding back, as `helm upgrade` renders a missing slot object): not ready
    // until the set holds the config read meanwhile, then served.
    store.put(native::dormant(
        SET,
        1,
        SlotKind::of(&deleted.0).unwrap(),
        &deleted.1,
    ));
    bypass.record(Ok(None), &state.metrics);
    assert!(
        state.not_ready().is_some(),
        "ready once lifted, before the set is synced"
    );
    native(&state).resume(&state.metrics);
    assert!(state.not_ready().is_some());
    native(&state).sync_waiting(&store, &state).await;
    assert_eq!(state.not_ready(), None);
    assert!(Arc::ptr_eq(&state.policy.load_full(), &renamed));
    assert_eq!(
        store.owners(),
        [
            vec![Some("a".to_string()); 4],
            vec![Some("c".to_string()); 4]
        ]
    );

    // Bypassed and lifted again with nothing new read: the served config is written back.
    bypass.record(Ok(Some("bob".into())), &state.metrics);
    native(&state).hold_dormant(&store, &state.metrics).await;
    assert_eq!(store.owners(), [vec![None; 4], vec![None; 4]]);
    bypass.record(Ok(None), &state.metrics);
    native(&state).resume(&state.metrics);
    native(&state).sync_waiting(&store, &state).await;
    assert_eq!(state.not_ready(), None);
    assert_eq!(
        store.owners(),
        [
            vec![Some("a".to_string()); 4],
            vec![Some("c".to_string()); 4]
        ]
    );
}
