//! Secrets in URLs are never logged or shown.
//!
//! An endpoint may carry credentials: `https://user:token@collector:4318` (userinfo) or
//! `…/v1/traces?api_key=…` (a query value). Every URL launchgate logs, prints or puts in an
//! error goes through [`url`] (one URL) or [`in_text`] (any text that may contain URLs, such as
//! an error from a client library or the API server): the userinfo becomes `***` and the value
//! of every query parameter whose name looks like a secret becomes `***` (in a text of unknown
//! origin, every query value). The URL used to connect is never changed.
//!
//! The API server quotes the parts of a URL it refuses without the rest of the URL
//! (`webhooks[0].clientConfig.url: Invalid value: "user:pw": user information is not permitted
//! in the URL`, the same for the query and the fragment): [`in_text`] masks those values too.

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
        Some(i) => format!("{}{}", &url[..i + 3], after_scheme(&url[i + 3..], false)),
        None => after_scheme(url, false),
    }
}

/// What the API server says after quoting a URL part it refuses (`field.Invalid` of the
/// webhook URL validation): the quoted value is the userinfo, the query or the fragment.
const REFUSED_URL_PARTS: [&str; 3] = [
    ": user information is not permitted",
    ": query parameters are not permitted",
    ": fragments are not permitted",
];

/// `text` with every `scheme://…` URL in it redacted as [`url`] does, but with every query
/// value masked (a URL ends at whitespace, a quote, `<`, `>`, a backquote or a backslash), and every URL
/// part the API server quotes in a refusal masked whole.
pub fn in_text(text: &str) -> Cow<'_, str> {
    let quoted = refused_parts(text);
    let Some(urls) = urls_in(quoted.as_deref().unwrap_or(text)) else {
        return match quoted {
            Some(owned) => Cow::Owned(owned),
            None => Cow::Borrowed(text),
        };
    };
    Cow::Owned(urls)
}

/// `text` with its URLs redacted (every query value masked); `None` when it has none.
fn urls_in(text: &str) -> Option<String> {
    if !text.contains("://") {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | '\\'))
            .unwrap_or(tail.len());
        out.push_str(&after_scheme(&tail[..end], true));
        rest = &tail[end..];
    }
    out.push_str(rest);
    Some(out)
}

/// `text` with the value of every `Invalid value: "…": <a refused URL part>` masked (the quotes
/// plain or backslash-escaped, as in a JSON or Debug rendering of the message); `None` when
/// there is none.
fn refused_parts(text: &str) -> Option<String> {
    const INVALID: &str = "Invalid value: ";
    if !text.contains(INVALID) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(i) = rest.find(INVALID) {
        let (head, tail) = rest.split_at(i + INVALID.len());
        out.push_str(head);
        rest = tail;
        let quote = if tail.starts_with("\\\"") {
            "\\\""
        } else if tail.starts_with('"') {
            "\""
        } else {
            continue;
        };
        let value = &tail[quote.len()..];
        let Some(end) = closing_quote(value, quote) else {
            continue;
        };
        let after = &value[end + quote.len()..];
        if REFUSED_URL_PARTS.iter().any(|p| after.starts_with(p)) {
            out.push_str(quote);
            out.push_str(MASK);
            out.push_str(quote);
            rest = after;
            changed = true;
        }
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// Where `quote` (`"` or `\"`) closes the quoted `value` (its escapes skipped).
fn closing_quote(value: &str, quote: &str) -> Option<usize> {
    if quote == "\"" {
        let bytes = value.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'"' => return Some(i),
                _ => i += 1,
            }
        }
        None
    } else {
        // Escaped once more: an inner quote is `\\\"`, the closing one `\"` not after `\\`.
        let mut from = 0;
        while let Some(j) = value[from..].find(quote) {
            let at = from + j;
            if !value[..at].ends_with("\\\\") || value[..at].ends_with("\\\\\\\\") {
                return Some(at);
            }
            from = at + quote.len();
        }
        None
    }
}

/// Redacts a URL without its `scheme://`: `[userinfo@]host[:port][/path][?query][#fragment]`;
/// with `every_value`, every query value is masked, else those with a secret-looking name.
fn after_scheme(url: &str, every_value: bool) -> String {
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
                Some((name, value)) if !value.is_empty() && (every_value || secret_name(name)) => {
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

    #[test]
    fn the_api_servers_refusal_of_a_webhook_url_is_redacted() {
        // What the API server answers (422) to a webhook URL with userinfo, query and fragment.
        let refusal = r#"applying ValidatingWebhookConfiguration lg: ApiError: ValidatingWebhookConfiguration.admissionregistration.k8s.io "lg" is invalid: [webhooks[0].clientConfig.url: Invalid value: "user:pw": user information is not permitted in the URL, webhooks[0].clientConfig.url: Invalid value: "token=s3cret&x=1": query parameters are not permitted in the URL, webhooks[0].clientConfig.url: Invalid value: "frag\"s": fragments are not permitted in the URL, webhooks[0].name: Invalid value: "kept": a lowercase RFC 1123 subdomain]: Invalid (ErrorResponse { status: "Failure", message: "... Invalid value: \"user:pw\": user information is not permitted in the URL, url: \"https://user:pw@host/validate?token=s3cret&x=1\"", code: 422 })"#;
        let shown = in_text(refusal);
        for secret in ["user:pw", "pw@", "s3cret", "x=1", r#"frag\"s"#] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains(r#"Invalid value: "***": user information is not permitted"#));
        assert!(shown.contains(r#"Invalid value: "***": query parameters are not permitted"#));
        assert!(shown.contains(r#"Invalid value: "***": fragments are not permitted"#));
        assert!(shown.contains(r#"Invalid value: \"***\": user information"#));
        assert!(shown.contains("https://***@host/validate?token=***&x=***"));
        // Other invalid values are not URL parts: kept.
        assert!(shown.contains(r#"Invalid value: "kept": a lowercase"#));
        assert!(shown.contains("webhooks[0].clientConfig.url"));
    }

    #[test]
    fn every_query_value_in_a_text_is_masked_and_odd_text_is_kept() {
        assert_eq!(
            in_text("calling https://h/v?tenant=a&flag failed"),
            "calling https://h/v?tenant=***&flag failed"
        );
        for odd in [
            r#"Invalid value: "unterminated: user information is not permitted"#,
            "Invalid value: ",
            r#"Invalid value: "\"#,
            r#"Invalid value: \""#,
            "Invalid value: 3: must be positive",
        ] {
            assert_eq!(in_text(odd), odd);
        }
    }
}
