//! Secrets in URLs are never logged or shown.
//!
//! An endpoint may carry credentials: `https://user:token@collector:4318` (userinfo) or
//! `…/v1/traces?api_key=…` (a query value). Every URL launchgate logs, prints or puts in an
//! error goes through [`url`] (one URL) or [`in_text`] (any text that may contain URLs, such as
//! an error from a client library or the API server): the userinfo becomes `***` and the value
//! of every query parameter whose name looks like a secret becomes `***`. The URL used to
//! connect is never changed.

use std::borrow::Cow;

/// What a redacted part is replaced with.
const MASK: &str = "***";

/// Query parameter names (compared lowercased, as substrings) whose values are secrets.
const SECRET_NAMES: [&str; 12] = [
    "token",
    "key",
    "secret",
    "pass",
    "pwd",
    "auth",
    "sig",
    "credential",
    "session",
    "jwt",
    "bearer",
    "code",
];

/// `url` (with or without a scheme) with its userinfo and secret-looking query values masked.
pub fn url(url: &str) -> String {
    match url.find("://") {
        Some(i) => format!("{}{}", &url[..i + 3], after_scheme(&url[i + 3..])),
        None => after_scheme(url),
    }
}

/// `text` with every `scheme://…` URL in it redacted as [`url`] does (a URL ends at whitespace,
/// a quote, `<`, `>` or a backquote).
pub fn in_text(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .unwrap_or(tail.len());
        out.push_str(&after_scheme(&tail[..end]));
        rest = &tail[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Redacts a URL without its `scheme://`: `[userinfo@]host[:port][/path][?query][#fragment]`.
fn after_scheme(url: &str) -> String {
    let (before_query, query) = match url.find(['?', '#']) {
        Some(i) => url.split_at(i),
        None => (url, ""),
    };
    // Userinfo ends at the last `@` before the query: a password may hold `/` or `@` unescaped.
    let mut out = match before_query.rfind('@') {
        Some(at) => format!("{MASK}{}", &before_query[at..]),
        None => before_query.to_string(),
    };
    let (query, fragment) = match query.find('#') {
        Some(i) => query.split_at(i),
        None => (query, ""),
    };
    if let Some(pairs) = query.strip_prefix('?') {
        out.push('?');
        for (i, pair) in pairs.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((name, value)) if !value.is_empty() && secret_name(name) => {
                    out.push_str(name);
                    out.push('=');
                    out.push_str(MASK);
                }
                _ => out.push_str(pair),
            }
        }
    }
    out.push_str(fragment);
    out
}

fn secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_NAMES.iter().any(|s| name.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_and_secret_query_values_are_masked() {
        for (given, shown) in [
            (
                "https://user:s3cret@collector:4318/v1/traces",
                "https://***@collector:4318/v1/traces",
            ),
            ("http://token@c:4318", "http://***@c:4318"),
            (
                "https://c.example/v1/traces?token=abc&tenant=t1&X-API-Key=k#frag",
                "https://c.example/v1/traces?token=***&tenant=t1&X-API-Key=***#frag",
            ),
            // A password with an unescaped `/` or `@` is masked whole.
            ("https://u:pa/ss@w@c:4318/x", "https://***@c:4318/x"),
            // Nothing secret: unchanged.
            (
                "http://localhost:4318/v1/traces?tenant=a",
                "http://localhost:4318/v1/traces?tenant=a",
            ),
            // No scheme (a value that is no URL, echoed in an error).
            ("user:s3cret@collector:4318", "***@collector:4318"),
        ] {
            assert_eq!(url(given), shown, "{given}");
        }
    }

    #[test]
    fn every_url_in_a_text_is_redacted() {
        let text = r#"OTEL_EXPORTER_OTLP_ENDPOINT: "ftp://u:s3cret@c/x?sig=1" is not an http:// or https:// URL; see https://a:b@docs.example/otel"#;
        assert_eq!(
            in_text(text),
            r#"OTEL_EXPORTER_OTLP_ENDPOINT: "ftp://***@c/x?sig=***" is not an http:// or https:// URL; see https://***@docs.example/otel"#
        );
        assert!(matches!(in_text("no url here"), Cow::Borrowed(_)));
    }
}
