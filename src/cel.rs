//! Writing CEL (the expression language of Kubernetes admission policies) from Rust values:
//! literals, wildcard patterns as anchored regular expressions, and the small idioms the API
//! server's CEL environment needs (it has no `cel.bind`, so a value is bound with
//! `[value].map(name, body)[0]`; map and list literals must be homogeneous, so mixed values
//! are wrapped in `dyn`).

/// A CEL string literal (single-quoted, escaped).
pub fn lit(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A CEL list of string literals.
pub fn str_list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let items: Vec<String> = items.into_iter().map(|s| lit(s.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// A CEL map of string literals to string literals.
pub fn str_map<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> String {
    let items: Vec<String> = pairs
        .into_iter()
        .map(|(k, v)| format!("{}: {}", lit(k.as_ref()), lit(v.as_ref())))
        .collect();
    format!("{{{}}}", items.join(", "))
}

/// The anchored RE2 expression of a wildcard pattern (`*` any run, `?` one character).
pub fn wildcard_regex(pattern: &str) -> String {
    let mut out = String::from("^");
    for c in pattern.chars() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            c if "\\.+()[]{}|^$".contains(c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push('$');
    out
}

/// True when the string expression `value` matches one of the wildcard `patterns`.
pub fn any_wildcard(patterns: &[String], value: &str) -> String {
    if patterns.is_empty() {
        return "false".into();
    }
    let tests: Vec<String> = patterns
        .iter()
        .map(|p| {
            if p.contains(['*', '?']) {
                format!("{value}.matches({})", lit(&wildcard_regex(p)))
            } else {
                format!("{value} == {}", lit(p))
            }
        })
        .collect();
    format!("({})", tests.join(" || "))
}

/// Conjunction of `parts` (`true` when empty).
pub fn all(parts: &[String]) -> String {
    match parts {
        [] => "true".into(),
        [one] => one.clone(),
        _ => format!("({})", parts.join(" && ")),
    }
}

/// Disjunction of `parts` (`false` when empty).
pub fn any(parts: &[String]) -> String {
    match parts {
        [] => "false".into(),
        [one] => one.clone(),
        _ => format!("({})", parts.join(" || ")),
    }
}

/// A JSON Pointer segment as a CEL expression: `~` and `/` escaped (RFC 6901).
pub fn pointer_segment(expr: &str) -> String {
    format!("{expr}.replace('~', '~0').replace('/', '~1')")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(lit("a'b\\c"), r"'a\'b\\c'");
        assert_eq!(lit("x\ny"), r"'x\ny'");
        assert_eq!(str_list(["a", "b"]), "['a', 'b']");
        assert_eq!(str_map([("k", "v")]), "{'k': 'v'}");
    }

    #[test]
    fn wildcards_become_anchored_regexes() {
        assert_eq!(
            wildcard_regex("wandb/launch-*.x?"),
            r"^wandb/launch-.*\.x.$"
        );
        assert_eq!(
            any_wildcard(&["a".into(), "b*".into()], "u"),
            "(u == 'a' || u.matches('^b.*$'))"
        );
        assert_eq!(any_wildcard(&[], "u"), "false");
    }
}
