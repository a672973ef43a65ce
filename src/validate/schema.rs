//! The W&B-style value schema (`type`, `minimum`, `maximum`, `enum`), compiled and checked.

use crate::error::ConfigError;
use crate::quantity::Quantity;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The type of a limited value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    /// A whole number: `8`, `"8"`; not `2.5`, not `"abc"`.
    Integer,
    /// Any number (W&B's UI calls it "float").
    #[serde(alias = "float")]
    Number,
    /// A string, usually with an `enum` of allowed values.
    String,
    /// A Kubernetes quantity (`4`, `4000m`, `12Gi`), compared by value.
    Quantity,
}

impl ValueType {
    pub(super) fn article_name(self) -> &'static str {
        match self {
            ValueType::Integer => "an integer",
            ValueType::Number => "a number",
            ValueType::String => "a string",
            ValueType::Quantity => "a valid quantity",
        }
    }

    fn is_numeric(self) -> bool {
        !matches!(self, ValueType::String)
    }
}

/// The schema keys as written, shared by variables and field limits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchemaKeys<'a> {
    pub value_type: Option<ValueType>,
    pub minimum: Option<&'a Value>,
    pub maximum: Option<&'a Value>,
    pub allowed: Option<&'a [Value]>,
    pub default: Option<&'a Value>,
    pub required: bool,
}

/// A numeric bound or enum member: its exact value and how the config wrote it.
#[derive(Debug, Clone)]
pub(super) struct Written {
    pub value: Quantity,
    pub text: String,
}

#[derive(Debug, Clone)]
pub(super) enum Allowed {
    Numbers(Vec<Written>),
    Strings(Vec<String>),
}

/// A compiled schema (its parts are read to write it in another language: native admission
/// policies).
#[derive(Debug, Clone)]
pub struct Schema {
    pub(super) value_type: ValueType,
    pub(super) minimum: Option<Written>,
    pub(super) maximum: Option<Written>,
    pub(super) allowed: Option<Allowed>,
    pub required: bool,
}

/// Strings as a message lists them: `"a", "b"`.
pub(super) fn quoted(options: &[String]) -> String {
    let quoted: Vec<String> = options
        .iter()
        .map(|o| Value::String(o.clone()).to_string())
        .collect();
    quoted.join(", ")
}

/// What is wrong with a value, as a message words it (`exceeds maximum 4`), and whether it is
/// an amount over the schema's maximum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub text: String,
    pub over_maximum: bool,
}

impl std::ops::Deref for Problem {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl From<Problem> for String {
    fn from(problem: Problem) -> String {
        problem.text
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// How a value looks in a message: strings as written for numeric types, JSON otherwise.
pub fn display_value(value: &Value, value_type: Option<ValueType>) -> String {
    match value {
        Value::String(s) if value_type.is_some_and(ValueType::is_numeric) && !s.is_empty() => {
            if s.chars().all(|c| !c.is_whitespace() && !c.is_control()) {
                s.clone()
            } else {
                value.to_string()
            }
        }
        _ => value.to_string(),
    }
}

/// The exact numeric value of `value` under `value_type`, or why there is none.
fn numeric(value: &Value, value_type: ValueType) -> Result<Quantity, String> {
    let not_a = || format!("is not {}", value_type.article_name());
    let quantity = match Quantity::from_json(value) {
        None => return Err(not_a()),
        Some(Err(e)) if value_type == ValueType::Quantity => {
            return Err(format!("is not a valid quantity ({e})"));
        }
        Some(Err(_)) => return Err(not_a()),
        Some(Ok(q)) => q,
    };
    if value_type == ValueType::Integer && !quantity.is_integer() {
        return Err(not_a());
    }
    Ok(quantity)
}

fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn written_text(value: &Value) -> String {
    text_of(value).unwrap_or_else(|| value.to_string())
}

impl Schema {
    /// Compiles the keys found at `at` (e.g. `queues.q.limits.variables.gpus`).
    pub fn compile(
        keys: &SchemaKeys<'_>,
        at: &str,
        errors: &mut Vec<ConfigError>,
    ) -> Option<Schema> {
        let Some(value_type) = keys.value_type else {
            errors.push(ConfigError::new(
                format!("{at}.type"),
                "missing `type` (one of integer, number, string, quantity)",
            ));
            return None;
        };
        let before = errors.len();
        let mut bound = |key: &str, value: Option<&Value>| -> Option<Written> {
            let value = value?;
            if value_type == ValueType::String {
                errors.push(ConfigError::new(
                    format!("{at}.{key}"),
                    format!("`{key}` does not apply to type string (use `enum`)"),
                ));
                return None;
            }
            match numeric(value, value_type) {
                Ok(q) => Some(Written {
                    value: q,
                    text: written_text(value),
                }),
                Err(why) => {
                    errors.push(ConfigError::new(
                        format!("{at}.{key}"),
                        format!("{key} {} {why}", display_value(value, Some(value_type))),
                    ));
                    None
                }
            }
        };
        let minimum = bound("minimum", keys.minimum);
        let maximum = bound("maximum", keys.maximum);
        if let (Some(min), Some(max)) = (&minimum, &maximum)
            && min.value > max.value
        {
            errors.push(ConfigError::new(
                format!("{at}.minimum"),
                format!("minimum {} is greater than maximum {}", min.text, max.text),
            ));
        }
        let allowed = keys
            .allowed
            .map(|items| compile_enum(items, value_type, &format!("{at}.enum"), errors));
        if errors.len() > before {
            return None;
        }
        let schema = Schema {
            value_type,
            minimum,
            maximum,
            allowed,
            required: keys.required,
        };
        if let Some(default) = keys.default
            && let Some(problem) = schema.problem(default)
        {
            errors.push(ConfigError::new(
                format!("{at}.default"),
                format!(
                    "default {} does not satisfy its own schema: it {problem}",
                    display_value(default, Some(value_type))
                ),
            ));
            return None;
        }
        Some(schema)
    }

    /// The largest value this schema allows — its `maximum`, or the largest numeric `enum`
    /// member — and a quantity schema holding only that bound. `None` for strings and for
    /// schemas without an upper bound.
    pub fn ceiling(&self) -> Option<(Quantity, Schema)> {
        let enum_top = match &self.allowed {
            Some(Allowed::Numbers(options)) => options.iter().max_by_key(|o| o.value).cloned(),
            _ => None,
        };
        let top = match (&self.maximum, enum_top) {
            _ if self.value_type == ValueType::String => return None,
            (Some(max), Some(e)) => std::cmp::min_by_key(max.clone(), e, |w| w.value),
            (Some(max), None) => max.clone(),
            (None, Some(e)) => e,
            (None, None) => return None,
        };
        let value = top.value;
        let schema = Schema {
            value_type: ValueType::Quantity,
            minimum: None,
            maximum: Some(top),
            allowed: None,
            required: false,
        };
        Some((value, schema))
    }

    /// What the schema allows, in words: `integer 0..4`, `string, one of "a", "b"`,
    /// `quantity at most 12Gi`, `any string (nothing enforced)`.
    pub fn describe(&self) -> String {
        let type_name = match self.value_type {
            ValueType::Integer => "integer",
            ValueType::Number => "number",
            ValueType::String => "string",
            ValueType::Quantity => "quantity",
        };
        let mut parts = vec![match (&self.minimum, &self.maximum) {
            (Some(min), Some(max)) => format!("{type_name} {}..{}", min.text, max.text),
            (Some(min), None) => format!("{type_name} at least {}", min.text),
            (None, Some(max)) => format!("{type_name} at most {}", max.text),
            (None, None) => type_name.to_string(),
        }];
        match &self.allowed {
            Some(Allowed::Strings(options)) => parts.push(format!("one of {}", quoted(options))),
            Some(Allowed::Numbers(options)) => parts.push(format!(
                "one of {}",
                options
                    .iter()
                    .map(|o| o.text.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            None if self.value_type == ValueType::String => {
                parts[0] = "any string".into();
            }
            None => {}
        }
        if self.required {
            parts.push("required".into());
        }
        parts.join(", ")
    }

    /// What is wrong with `value`, e.g. `exceeds maximum 4`; `None` when it satisfies the schema.
    pub fn problem(&self, value: &Value) -> Option<Problem> {
        let other = |text: String| Problem {
            text,
            over_maximum: false,
        };
        if self.value_type == ValueType::String {
            let Some(text) = text_of(value) else {
                return Some(other("is not a string".into()));
            };
            if let Some(Allowed::Strings(options)) = &self.allowed
                && !options.contains(&text)
            {
                return Some(other(format!("is not one of {}", quoted(options))));
            }
            return None;
        }
        let quantity = match numeric(value, self.value_type) {
            Ok(q) => q,
            Err(why) => return Some(other(why)),
        };
        if let Some(max) = &self.maximum
            && quantity > max.value
        {
            return Some(Problem {
                text: format!("exceeds maximum {}", max.text),
                over_maximum: true,
            });
        }
        if let Some(min) = &self.minimum
            && quantity < min.value
        {
            return Some(other(format!("is below minimum {}", min.text)));
        }
        if let Some(Allowed::Numbers(options)) = &self.allowed
            && !options.iter().any(|o| o.value == quantity)
        {
            let list: Vec<&str> = options.iter().map(|o| o.text.as_str()).collect();
            return Some(other(format!("is not one of {}", list.join(", "))));
        }
        None
    }
}

fn compile_enum(
    items: &[Value],
    value_type: ValueType,
    at: &str,
    errors: &mut Vec<ConfigError>,
) -> Allowed {
    if items.is_empty() {
        errors.push(ConfigError::new(
            at,
            "enum is empty: no value could ever be allowed",
        ));
    }
    if value_type == ValueType::String {
        let mut strings = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => strings.push(s.clone()),
                other => errors.push(ConfigError::new(
                    format!("{at}[{i}]"),
                    format!("enum value {other} is not a string (the variable's type is string)"),
                )),
            }
        }
        return Allowed::Strings(strings);
    }
    let mut numbers = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match numeric(item, value_type) {
            Ok(value) => numbers.push(Written {
                value,
                text: written_text(item),
            }),
            Err(why) => errors.push(ConfigError::new(
                format!("{at}[{i}]"),
                format!("enum value {} {why}", display_value(item, Some(value_type))),
            )),
        }
    }
    Allowed::Numbers(numbers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(
        value_type: ValueType,
        min: Option<Value>,
        max: Option<Value>,
        allowed: Option<Vec<Value>>,
    ) -> Schema {
        let keys = SchemaKeys {
            value_type: Some(value_type),
            minimum: min.as_ref(),
            maximum: max.as_ref(),
            allowed: allowed.as_deref(),
            default: None,
            required: false,
        };
        let mut errors = Vec::new();
        Schema::compile(&keys, "v", &mut errors).unwrap_or_else(|| panic!("{errors:?}"))
    }

    #[test]
    fn schemas_describe_what_they_allow() {
        let gpus = schema(ValueType::Integer, Some(json!(0)), Some(json!(4)), None);
        assert_eq!(gpus.describe(), "integer 0..4");
        let memory = schema(ValueType::Quantity, None, Some(json!("12Gi")), None);
        assert_eq!(memory.describe(), "quantity at most 12Gi");
        let instance = schema(
            ValueType::String,
            None,
            None,
            Some(vec![json!("ml.m4.xlarge"), json!("ml.p3.xlarge")]),
        );
        assert_eq!(
            instance.describe(),
            r#"string, one of "ml.m4.xlarge", "ml.p3.xlarge""#
        );
        assert_eq!(
            schema(ValueType::String, None, None, None).describe(),
            "any string"
        );
    }

    #[test]
    fn integer_bounds_and_type() {
        let gpus = schema(ValueType::Integer, Some(json!(0)), Some(json!(4)), None);
        assert_eq!(gpus.problem(&json!(4)), None);
        assert_eq!(gpus.problem(&json!("2")), None);
        assert_eq!(gpus.problem(&json!(0)), None);
        assert_eq!(
            gpus.problem(&json!(8)).as_deref(),
            Some("exceeds maximum 4")
        );
        assert_eq!(
            gpus.problem(&json!("8")).as_deref(),
            Some("exceeds maximum 4")
        );
        assert_eq!(
            gpus.problem(&json!(-1)).as_deref(),
            Some("is below minimum 0")
        );
        assert_eq!(
            gpus.problem(&json!(2.5)).as_deref(),
            Some("is not an integer")
        );
        assert_eq!(
            gpus.problem(&json!("2.5")).as_deref(),
            Some("is not an integer")
        );
        assert_eq!(
            gpus.problem(&json!("abc")).as_deref(),
            Some("is not an integer")
        );
        assert_eq!(
            gpus.problem(&json!(true)).as_deref(),
            Some("is not an integer")
        );
    }

    #[test]
    fn number_bounds_accept_fractions() {
        let lr = schema(
            ValueType::Number,
            Some(json!(0.0001)),
            Some(json!(0.1)),
            None,
        );
        assert_eq!(lr.problem(&json!(0.05)), None);
        assert_eq!(lr.problem(&json!("1e-2")), None);
        assert_eq!(
            lr.problem(&json!(0.2)).as_deref(),
            Some("exceeds maximum 0.1")
        );
        assert_eq!(
            lr.problem(&json!(0.00001)).as_deref(),
            Some("is below minimum 0.0001")
        );
        assert_eq!(
            lr.problem(&json!("fast")).as_deref(),
            Some("is not a number")
        );
    }

    #[test]
    fn quantity_bounds_compare_by_value() {
        let memory = schema(ValueType::Quantity, None, Some(json!("12Gi")), None);
        assert_eq!(memory.problem(&json!("12Gi")), None);
        assert_eq!(memory.problem(&json!("12884901888")), None);
        assert_eq!(memory.problem(&json!("11.5Gi")), None);
        assert_eq!(
            memory.problem(&json!("13000Mi")).as_deref(),
            Some("exceeds maximum 12Gi")
        );
        assert_eq!(
            memory.problem(&json!("13G")).as_deref(),
            Some("exceeds maximum 12Gi")
        );
        let cpu = schema(
            ValueType::Quantity,
            Some(json!("100m")),
            Some(json!(4)),
            None,
        );
        assert_eq!(cpu.problem(&json!("4000m")), None);
        assert_eq!(cpu.problem(&json!(4)), None);
        assert_eq!(
            cpu.problem(&json!("4001m")).as_deref(),
            Some("exceeds maximum 4")
        );
        assert_eq!(
            cpu.problem(&json!("50m")).as_deref(),
            Some("is below minimum 100m")
        );
        assert!(
            cpu.problem(&json!("4 cores"))
                .unwrap()
                .starts_with("is not a valid quantity")
        );
    }

    #[test]
    fn enums_of_strings_and_numbers() {
        let instance = schema(
            ValueType::String,
            None,
            None,
            Some(vec![json!("ml.m4.xlarge"), json!("ml.p3.xlarge")]),
        );
        assert_eq!(instance.problem(&json!("ml.p3.xlarge")), None);
        assert_eq!(
            instance.problem(&json!("ml.p4d.24xlarge")).as_deref(),
            Some(r#"is not one of "ml.m4.xlarge", "ml.p3.xlarge""#)
        );
        assert_eq!(
            instance.problem(&json!({"a": 1})).as_deref(),
            Some("is not a string")
        );
        let gpus = schema(
            ValueType::Integer,
            None,
            None,
            Some(vec![json!(1), json!(2), json!(4)]),
        );
        assert_eq!(gpus.problem(&json!("2")), None);
        assert_eq!(
            gpus.problem(&json!(3)).as_deref(),
            Some("is not one of 1, 2, 4")
        );
        let memory = schema(
            ValueType::Quantity,
            None,
            None,
            Some(vec![json!("1Gi"), json!("2Gi")]),
        );
        assert_eq!(memory.problem(&json!("1024Mi")), None);
    }

    #[test]
    fn bad_schemas_are_explained() {
        let min = json!(5);
        let max = json!(4);
        let half = json!(2.5);
        let word = json!("big");
        let strings = [json!("a"), json!(1)];
        let table: Vec<(SchemaKeys<'_>, &str, &str)> = vec![
            (
                SchemaKeys {
                    value_type: Some(ValueType::Integer),
                    minimum: Some(&min),
                    maximum: Some(&max),
                    ..Default::default()
                },
                "v.minimum",
                "minimum 5 is greater than maximum 4",
            ),
            (
                SchemaKeys {
                    value_type: Some(ValueType::Integer),
                    maximum: Some(&half),
                    ..Default::default()
                },
                "v.maximum",
                "maximum 2.5 is not an integer",
            ),
            (
                SchemaKeys {
                    value_type: Some(ValueType::Quantity),
                    maximum: Some(&word),
                    ..Default::default()
                },
                "v.maximum",
                "maximum big is not a valid quantity",
            ),
            (
                SchemaKeys {
                    value_type: Some(ValueType::String),
                    allowed: Some(&strings),
                    ..Default::default()
                },
                "v.enum[1]",
                "enum value 1 is not a string",
            ),
            (
                SchemaKeys {
                    value_type: Some(ValueType::String),
                    maximum: Some(&max),
                    ..Default::default()
                },
                "v.maximum",
                "does not apply to type string",
            ),
            (
                SchemaKeys {
                    value_type: Some(ValueType::Integer),
                    maximum: Some(&max),
                    default: Some(&min),
                    ..Default::default()
                },
                "v.default",
                "default 5 does not satisfy its own schema: it exceeds maximum 4",
            ),
            (SchemaKeys::default(), "v.type", "missing `type`"),
        ];
        for (keys, path, message) in table {
            let mut errors = Vec::new();
            assert!(Schema::compile(&keys, "v", &mut errors).is_none(), "{path}");
            assert!(
                errors
                    .iter()
                    .any(|e| e.path == path && e.message.contains(message)),
                "{path}: {message}: got {errors:?}"
            );
        }
    }
}
