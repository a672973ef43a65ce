//! An UPDATE of what was admitted: the old object's violations, indexed by place, and which
//! of the new object's its rule carries (a warning instead of a denial).

use crate::quantity::Quantity;
use crate::rules::{self, OnUpdate, Violation};
use crate::validate::{Enforcement, LimitReport};
use std::collections::HashMap;

/// Adds the violations `found` on the object to `report`. On an UPDATE of what was admitted in
/// the queue, `admitted` are the violations the old object has by the same rules: one its rule
/// carries ([`Admitted::carries`]) does not block and becomes a warning, except under `audit`.
pub fn add_violations(report: &mut LimitReport, found: Vec<Violation>, admitted: &[Violation]) {
    let admitted = Admitted::new(admitted);
    for violation in found {
        if report.enforcement != Enforcement::Audit && admitted.carries(&violation) {
            let kept = as_carried(violation);
            report.warnings.push(rules::Warning::of(&kept));
            report.unchanged.push(kept);
        } else {
            report.violations.push(violation);
        }
    }
}

/// `violation` as an UPDATE carries it: a warning that says why it passes.
pub fn as_carried(violation: Violation) -> Violation {
    Violation {
        message: format!(
            "{} (already so before this update; allowed because this update does not make it worse)",
            violation.message
        ),
        effect: rules::Effect::Warn,
        ..violation
    }
}

/// Where a violation is: its rule, the config entry, the place in the object and the bound.
/// An UPDATE compares a violation only with the old object's at the same place.
pub(super) type Place<'a> = (
    &'static str,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
);

pub(super) fn place_of(v: &Violation) -> Place<'_> {
    (
        v.rule.id,
        v.key.as_deref(),
        v.path.as_deref(),
        v.limit.as_deref(),
    )
}

/// The violations of the old object of an UPDATE (found the same way on it, which launchgate
/// admitted in this queue), indexed by place once, so that judging the new object's
/// violations is linear in both: each is compared only with the old ones at its place.
#[derive(Debug, Default)]
pub struct Admitted<'a> {
    by_place: HashMap<Place<'a>, Vec<&'a Violation>>,
}

impl<'a> Admitted<'a> {
    /// The index of `violations`.
    pub fn new(violations: &'a [Violation]) -> Self {
        let mut by_place: HashMap<Place<'a>, Vec<&'a Violation>> =
            HashMap::with_capacity(violations.len());
        for v in violations {
            by_place.entry(place_of(v)).or_default().push(v);
        }
        Admitted { by_place }
    }

    /// The old object's violations at `new`'s place: the only ones it is compared with.
    pub fn at_place_of<'s>(&'s self, new: &'s Violation) -> &'s [&'s Violation] {
        self.by_place.get(&place_of(new)).map_or(&[], Vec::as_slice)
    }

    /// True when `new`, found on the object an UPDATE would store, is one its rule lets pass
    /// given what was admitted: the rule's [`OnUpdate`] says how they compare.
    pub fn carries(&self, new: &Violation) -> bool {
        let same_value = |old: &&Violation| old.value == new.value;
        let no_larger = |old: &&Violation| not_larger(new.value.as_deref(), old.value.as_deref());
        match new.rule.update {
            OnUpdate::Every => false,
            OnUpdate::CreateOnly => true,
            OnUpdate::Changed => self.at_place_of(new).iter().any(same_value),
            OnUpdate::Grown => self.at_place_of(new).iter().any(no_larger),
            OnUpdate::GrownOverMaximum if new.over_maximum => {
                self.at_place_of(new).iter().any(no_larger)
            }
            OnUpdate::GrownOverMaximum => self.at_place_of(new).iter().any(same_value),
        }
    }
}

/// True when `new` is no larger than `old`: the same text, or both amounts (a number or a
/// Kubernetes quantity, the first word of the text) with `new` ≤ `old`.
pub(super) fn not_larger(new: Option<&str>, old: Option<&str>) -> bool {
    if new == old {
        return true;
    }
    let amount = |text: &str| {
        let head = text.split_whitespace().next()?;
        Quantity::parse(head.trim_matches('"')).ok()
    };
    match (new.and_then(amount), old.and_then(amount)) {
        (Some(n), Some(o)) => n <= o,
        _ => false,
    }
}
