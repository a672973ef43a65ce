//! The queue template's contract on a place: a variable's or a field limit's schema (types,
//! enums, ranges, maxima) and the template's fixed values.

use super::Evaluation;
use crate::quantity::Quantity;
use crate::rules::{self, Violation};
use crate::validate::binding::Source;
use crate::validate::schema::{Schema, display_value};
use crate::validate::template::{self, LeafContent, TemplateLeaf};
use serde_json::Value;

/// Literal template values compare by value when both are numbers/quantities (`4` == `"4"`).
pub(super) fn same_literal(template: &Value, actual: &Value) -> bool {
    if template == actual {
        return true;
    }
    match (template, actual) {
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => false,
        _ => match (Quantity::from_json(template), Quantity::from_json(actual)) {
            (Some(Ok(a)), Some(Ok(b))) => a == b,
            _ => false,
        },
    }
}

impl<'a> Evaluation<'a> {
    pub(super) fn check_schema(
        &mut self,
        place: &str,
        value: Option<&Value>,
        schema: &Schema,
        source: &Source,
    ) {
        let text = &source.text;
        match value {
            None | Some(Value::Null) => {
                if schema.required {
                    self.report(
                        source
                            .violation(format!("{place} is missing ({text} is required)"))
                            .at(place)
                            .limit("required"),
                    );
                }
            }
            Some(value) => {
                if let Some(problem) = schema.problem(value) {
                    let shown = display_value(value, Some(schema.value_type));
                    self.report(
                        source
                            .violation(format!("{place}={shown} {problem} ({text})"))
                            .at(place)
                            .value(shown)
                            .bound(problem.text, problem.over_maximum),
                    );
                }
            }
        }
    }

    pub(super) fn check_fixed_value(&mut self, leaf: &TemplateLeaf) {
        for (place, value) in self.template_places(leaf.anchor, &leaf.template_path, &leaf.path) {
            let (message, value, limit) = match (&leaf.content, value) {
                (LeafContent::Literal(expected), None | Some(Value::Null)) => (
                    format!(
                        "{place} is missing; the queue template sets it to {expected} (strict)"
                    ),
                    None,
                    expected.to_string(),
                ),
                (LeafContent::Literal(expected), Some(actual))
                    if !same_literal(expected, actual) =>
                {
                    (
                        format!(
                            "{place}={actual} differs from the queue template's {expected} (strict)"
                        ),
                        Some(actual.to_string()),
                        expected.to_string(),
                    )
                }
                (LeafContent::Pattern(pattern), actual)
                    if actual
                        .and_then(Value::as_str)
                        .is_none_or(|s| template::match_pattern(pattern, s).is_none()) =>
                {
                    let shown = actual.map_or("<missing>".to_string(), Value::to_string);
                    let written = crate::validate::pattern_text(pattern);
                    (
                        format!(
                            "{place}={shown} does not match the queue template's {written:?} (strict)"
                        ),
                        Some(shown),
                        written,
                    )
                }
                _ => continue,
            };
            let violation = Violation::new(rules::LIMITS_STRICT, message)
                .at(&place)
                .limit(limit);
            self.report(Violation { value, ..violation });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_compare_numbers_by_value() {
        use serde_json::json;
        assert!(same_literal(&json!(4), &json!("4")));
        assert!(same_literal(&json!(4), &json!("4000m")));
        assert!(same_literal(&json!("Never"), &json!("Never")));
        assert!(!same_literal(&json!("Never"), &json!("OnFailure")));
        assert!(!same_literal(&json!(0), &json!(1)));
        assert!(!same_literal(&json!(0), &json!([0])));
    }
}
