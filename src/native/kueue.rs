//! The queue's Kueue labels in CEL, rule for rule as `mutate::kueue`: when a label keeps the
//! queue's setting (the mutation replaces it otherwise), and the violations of a workload whose
//! labels still differ (the validating policy denies them).

use super::select;
use crate::cel::{self, lit};
use crate::kinds::Kueue;
use crate::mutate::kueue::{EXEC_SECONDS_REGEX, KueueConfig, Rule, Setting};
use crate::workload::WorkloadKind;

/// CEL: the request is for a covered kind whose object Kueue manages through its labels
/// ([`Kueue::Suspends`], [`Kueue::Gates`]).
pub fn managed() -> String {
    kinds(Kueue::by_labels)
}

/// CEL: the request is for a covered kind Kueue manages `how`.
fn kinds(how: fn(Kueue) -> bool) -> String {
    cel::any(
        &select::kinds()
            .filter(|k| how(k.spec().kueue))
            .map(WorkloadKind::cel_test)
            .collect::<Vec<_>>(),
    )
}

/// CEL: the label map `labels` (known to exist) keeps `setting`.
pub fn holds(setting: &Setting, labels: &str) -> String {
    let key = lit(setting.label);
    let value = format!("{labels}[{key}]");
    match &setting.rule {
        Rule::Equal(want) => format!("({key} in {labels} && {value} == {})", lit(want)),
        Rule::AtMost(max) => format!(
            "({key} in {labels} && {value}.matches({}) && int({value}) <= {max})",
            lit(EXEC_SECONDS_REGEX)
        ),
    }
}

/// CEL: the message of [`Setting::violation`] for the label map `labels`.
fn message(setting: &Setting, queue_name: &str, labels: &str) -> String {
    let key = lit(setting.label);
    let value = format!("{labels}[{key}]");
    let unset = lit(&setting.violation(queue_name, None));
    // The message with a value, split around it (a label value needs no escaping: the API
    // server has validated it before validating admission).
    let with_value = |sample: &str| {
        let text = setting.violation(queue_name, Some(sample));
        let quoted = format!("{sample:?}");
        let (before, after) = text
            .split_once(&quoted)
            .expect("the value is in the message");
        format!(
            "{} + {value} + {}",
            lit(&format!("{before}\"")),
            lit(&format!("\"{after}"))
        )
    };
    let present = match &setting.rule {
        Rule::Equal(_) => with_value("x"),
        Rule::AtMost(max) => format!(
            "({value}.matches({}) ? {} : {})",
            lit(EXEC_SECONDS_REGEX),
            with_value(&(max + 1).to_string()),
            with_value("x"),
        ),
    };
    format!("({key} in {labels} ? {present} : {unset})")
}

/// CEL: the list of the queue's Kueue settings the request's object breaks (`child`: it is a
/// verified controller's child). A Job, JobSet or PyTorchJob must carry the queue's labels; a
/// Pod only must not carry different non-empty ones.
pub fn violations(cfg: &KueueConfig, queue_name: &str, child: &str) -> Option<String> {
    let settings = cfg.settings();
    if settings.is_empty() {
        return None;
    }
    let labels = "object.metadata.labels";
    let has = format!("(has(object.metadata) && has({labels}) && {labels} != null)");
    let pod = kinds(Kueue::as_pod);
    let managed = managed();
    let each: Vec<String> = settings
        .iter()
        .map(|s| {
            let key = lit(s.label);
            let broken = format!(
                "({pod} ? ({has} && {key} in {labels} && {labels}[{key}] != '' && !{holds}) : !({has} && {holds}))",
                holds = holds(s, labels),
            );
            let msg = format!("({has} ? {} : {})", message(s, queue_name, labels), lit(&s.violation(queue_name, None)));
            format!("({broken} ? [{msg}] : [])")
        })
        .collect();
    Some(format!(
        "({child} || !({pod} || {managed})) ? [] : {}",
        each.join(" + ")
    ))
}
