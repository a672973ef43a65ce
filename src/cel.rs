//! Writing CEL (the expression language of Kubernetes admission policies) from Rust values:
//! literals, wildcard patterns as anchored regular expressions, and the small idioms the API
//! server's CEL environment needs (it has no `cel.bind`, so a value is bound with
//! `[value].map(name, body)[0]`; map and list literals must be homogeneous, so mixed values
//! are wrapped in `dyn`).

use std::borrow::Cow;

/// The words CEL reserves (cel-spec `RESERVED`, as the API server's CEL environment lists
/// them): none may name a variable; `namespace` is the one a Kubernetes policy reaches for.
pub const RESERVED_WORDS: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// True when `name` can name a policy variable: a CEL identifier (`[_a-zA-Z][_a-zA-Z0-9]*`)
/// that is not a reserved word (the API server refuses any other).
pub const fn is_identifier(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes[0].is_ascii_digit() {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if !(bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            return false;
        }
        i += 1;
    }
    let mut r = 0;
    while r < RESERVED_WORDS.len() {
        if same(bytes, RESERVED_WORDS[r].as_bytes()) {
            return false;
        }
        r += 1;
    }
    true
}

/// The name of a policy variable: only a CEL identifier that is not a reserved word can be
/// made one ([`ident!`] checks a fixed name when the program is compiled;
/// [`Identifier::numbered`] appends digits, which keeps it one), so a compiled policy never
/// carries a name the API server refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identifier(Cow<'static, str>);

impl Identifier {
    /// A fixed name; use it through [`ident!`], which evaluates the check when
    /// the program is compiled.
    pub const fn new(name: &'static str) -> Identifier {
        assert!(
            is_identifier(name),
            "not a CEL identifier, or a reserved word"
        );
        Identifier(Cow::Borrowed(name))
    }

    /// A name checked at run time (the tests' way to ask whether a word can name a variable;
    /// the compiler names its variables with [`ident!`](crate::ident) and [`Identifier::numbered`]).
    #[cfg(test)]
    pub fn parse(name: &str) -> Result<Identifier, String> {
        if is_identifier(name) {
            Ok(Identifier(Cow::Owned(name.to_string())))
        } else {
            Err(format!(
                "{name:?} cannot name a CEL variable (not an identifier, or a reserved word)"
            ))
        }
    }

    /// This name followed by the number `n` (an identifier that ends in a digit is never a
    /// reserved word).
    pub fn numbered(&self, n: usize) -> Identifier {
        Identifier(Cow::Owned(format!("{}{n}", self.0)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// How an expression reads the variable: `variables.<name>`.
    pub fn reference(&self) -> String {
        format!("variables.{}", self.0)
    }
}

impl std::fmt::Display for Identifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A fixed [`Identifier`], checked when the program is compiled: `ident!("specs")`.
macro_rules! ident {
    ($name:literal) => {{
        const ID: $crate::cel::Identifier = $crate::cel::Identifier::new($name);
        ID
    }};
}
pub(crate) use ident;

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
    fn a_variable_name_is_never_a_reserved_word() {
        for word in RESERVED_WORDS {
            assert!(!is_identifier(word), "{word}");
            assert!(Identifier::parse(word).is_err(), "{word}");
        }
        assert!(
            Identifier::parse("namespace")
                .unwrap_err()
                .contains("reserved")
        );
        for bad in ["", "1a", "a-b", "a.b", "é"] {
            assert!(Identifier::parse(bad).is_err(), "{bad:?}");
        }
        for good in [
            "specs",
            "allowedNamespaces",
            "_x",
            "c12",
            "namespaces",
            "in_",
        ] {
            assert_eq!(Identifier::parse(good).unwrap().as_str(), good);
        }
        assert_eq!(ident!("p").numbered(3).as_str(), "p3");
        assert_eq!(ident!("child").reference(), "variables.child");
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
