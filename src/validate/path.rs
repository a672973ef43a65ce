//! Field paths: `containers[*].resources.limits["nvidia.com/gpu"]`.
//!
//! Written form: dotted keys, list indices `[i]`, `[*]` for every item of a list, and keys
//! containing `.`, `/` (or anything else that is not a plain name) as `["key"]`.

use serde_json::Value;
use std::fmt;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    Key(String),
    Index(usize),
    /// `[*]`: every item of a list.
    AnyIndex,
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FieldPath(pub Vec<Segment>);

fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Appends `segment` to a written path.
pub fn push_segment(out: &mut String, segment: &Segment) {
    match segment {
        Segment::Key(key) if is_plain_key(key) => {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(key);
        }
        Segment::Key(key) => out.push_str(&format!("[{}]", Value::String(key.clone()))),
        Segment::Index(i) => out.push_str(&format!("[{i}]")),
        Segment::AnyIndex => out.push_str("[*]"),
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        for segment in &self.0 {
            push_segment(&mut out, segment);
        }
        f.write_str(&out)
    }
}

impl FieldPath {
    /// Parses a written path. Errors say what is wrong and where.
    pub fn parse(text: &str) -> Result<FieldPath, String> {
        let chars: Vec<char> = text.chars().collect();
        let mut segments = Vec::new();
        let mut i = 0;
        let mut expect_key = true;
        if chars.is_empty() {
            return Err("empty path".into());
        }
        while i < chars.len() {
            match chars[i] {
                '[' => {
                    let close = chars[i..]
                        .iter()
                        .position(|&c| c == ']')
                        .map(|p| p + i)
                        .ok_or_else(|| format!("unclosed `[` at offset {i}"))?;
                    let inner: String = chars[i + 1..close].iter().collect();
                    let segment = if inner == "*" {
                        Segment::AnyIndex
                    } else if let Some(quoted) = quoted_key(&inner) {
                        Segment::Key(quoted?)
                    } else if !inner.is_empty() && inner.chars().all(|c| c.is_ascii_digit()) {
                        Segment::Index(
                            inner
                                .parse()
                                .map_err(|_| format!("list index {inner} is too large"))?,
                        )
                    } else {
                        return Err(format!(
                            "`[{inner}]` is neither an index, `[*]` nor a quoted key like [\"nvidia.com/gpu\"]"
                        ));
                    };
                    segments.push(segment);
                    i = close + 1;
                    expect_key = false;
                }
                '.' => {
                    if expect_key {
                        return Err(format!("empty key at offset {i}"));
                    }
                    i += 1;
                    expect_key = true;
                    if i == chars.len() {
                        return Err("path ends with `.`".into());
                    }
                }
                _ => {
                    if !expect_key {
                        return Err(format!("expected `.` or `[` at offset {i}"));
                    }
                    let start = i;
                    while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                        if chars[i] == ']' || chars[i] == '"' {
                            return Err(format!("unexpected `{}` at offset {i}", chars[i]));
                        }
                        i += 1;
                    }
                    segments.push(Segment::Key(chars[start..i].iter().collect()));
                    expect_key = false;
                }
            }
        }
        Ok(FieldPath(segments))
    }

    pub fn starts_with(&self, prefix: &FieldPath) -> bool {
        self.0.starts_with(&prefix.0)
    }
}

/// `"key"` or `'key'` inside brackets: `Some(Ok(key))`; not quoted: `None`.
fn quoted_key(inner: &str) -> Option<Result<String, String>> {
    if inner.len() >= 2 && inner.starts_with('"') && inner.ends_with('"') {
        return Some(
            serde_json::from_str::<String>(inner)
                .map_err(|e| format!("bad quoted key {inner}: {e}")),
        );
    }
    if inner.len() >= 2 && inner.starts_with('\'') && inner.ends_with('\'') {
        return Some(Ok(inner[1..inner.len() - 1].to_string()));
    }
    None
}

/// Every place `path` designates under `base`, with its written path (prefixed by
/// `base_path`) and its value, `None` when absent. `[*]` over a missing or empty list
/// designates nothing.
pub fn resolve<'a>(
    base: &'a Value,
    base_path: &str,
    path: &[Segment],
) -> Vec<(String, Option<&'a Value>)> {
    let mut out = Vec::new();
    let mut written = base_path.to_string();
    resolve_into(Some(base), &mut written, path, &mut out);
    out
}

/// Like [`resolve`], starting at a map (a pod template). An empty path designates nothing.
pub fn resolve_in_map<'a>(
    base: &'a serde_json::Map<String, Value>,
    base_path: &str,
    path: &[Segment],
) -> Vec<(String, Option<&'a Value>)> {
    let mut out = Vec::new();
    if let Some((Segment::Key(key), rest)) = path.split_first() {
        let mut written = base_path.to_string();
        push_segment(&mut written, &Segment::Key(key.clone()));
        resolve_into(base.get(key), &mut written, rest, &mut out);
    }
    out
}

fn resolve_into<'a>(
    value: Option<&'a Value>,
    written: &mut String,
    path: &[Segment],
    out: &mut Vec<(String, Option<&'a Value>)>,
) {
    let Some((first, rest)) = path.split_first() else {
        out.push((written.clone(), value));
        return;
    };
    let len = written.len();
    let next = match first {
        Segment::AnyIndex => {
            let items = value.and_then(Value::as_array).into_iter().flatten();
            for (i, item) in items.enumerate() {
                push_segment(written, &Segment::Index(i));
                resolve_into(Some(item), written, rest, out);
                written.truncate(len);
            }
            return;
        }
        Segment::Key(key) => value.and_then(|v| v.get(key)),
        Segment::Index(i) => value.and_then(|v| v.get(i)),
    };
    push_segment(written, first);
    resolve_into(next, written, rest, out);
    written.truncate(len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parse_and_write_round_trip() {
        for text in [
            "containers[*].resources.limits.memory",
            r#"spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#,
            "spec.tasks[1].template",
            "activeDeadlineSeconds",
        ] {
            assert_eq!(FieldPath::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            FieldPath::parse("limits['nvidia.com/gpu']")
                .unwrap()
                .to_string(),
            r#"limits["nvidia.com/gpu"]"#
        );
    }

    #[test]
    fn bad_paths_are_explained() {
        for bad in [
            "", "a..b", "a.", ".a", "a[", "a[x]", "a]b", "a[0]b", r#"a["x]"#,
        ] {
            assert!(FieldPath::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn resolve_expands_wildcards_and_reports_absent_leaves() {
        let pod = json!({"containers": [
            {"resources": {"limits": {"memory": "1Gi"}}},
            {"name": "sidecar"}
        ]});
        let path = FieldPath::parse("containers[*].resources.limits.memory").unwrap();
        let found = resolve(&pod, "spec", &path.0);
        assert_eq!(
            found,
            vec![
                (
                    "spec.containers[0].resources.limits.memory".to_string(),
                    Some(&json!("1Gi"))
                ),
                (
                    "spec.containers[1].resources.limits.memory".to_string(),
                    None
                ),
            ]
        );
        let missing = FieldPath::parse("initContainers[*].image").unwrap();
        assert!(resolve(&pod, "spec", &missing.0).is_empty());
    }
}
