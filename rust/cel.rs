//! CEL expressions of callbacks (`job.register_callback(filter=..., on_complete=...,
//! on_fail=..., transform=...)`), which `resolve_callback` evaluates against the payload.
//!
//! The crate and version are the Awa SDK's (`cel` 0.13.0), so an expression parses, fails and
//! evaluates here as it does there. The payload is bound to `payload` as the SDK binds it,
//! through serde: a JSON integer of 0 or more becomes a CEL `uint`, a negative one an `int`
//! (so `payload.n == 3` is false for `{"n": 3}` in both, and `payload.n == 3u` true).
//!
//! JSON in, JSON out: Python hands the payload over as the JSON text it stores, and gets the
//! result back as JSON text. What an outcome makes of a result (a bool, or any value for a
//! transform) is decided in Python.

// `::cel` is the crate; this module is `crate::cel`.
use ::cel::{Context, Program};

/// The variables `expression` references, sorted; the error text of a parse error otherwise.
pub fn variables(expression: &str) -> Result<Vec<String>, String> {
    let program = Program::compile(expression).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = program
        .references()
        .variables()
        .into_iter()
        .map(str::to_owned)
        .collect();
    names.sort();
    Ok(names)
}

/// `expression` evaluated with `payload` (JSON text) bound to `payload`, as JSON text; the
/// error text when it does not parse, fails to evaluate, or yields a value JSON cannot hold.
pub fn evaluate(expression: &str, payload: &str) -> Result<String, String> {
    let program = Program::compile(expression).map_err(|e| e.to_string())?;
    let payload: serde_json::Value =
        serde_json::from_str(payload).map_err(|e| format!("payload is not JSON: {e}"))?;
    let mut context = Context::default();
    context
        .add_variable("payload", payload)
        .map_err(|e| e.to_string())?;
    let value = program.execute(&context).map_err(|e| e.to_string())?;
    let json = value.json().map_err(|e| e.to_string())?;
    Ok(json.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_listed_sorted() {
        assert_eq!(
            variables("b.x == a && payload.y").unwrap(),
            ["a", "b", "payload"]
        );
        assert_eq!(variables("true").unwrap(), Vec::<String>::new());
        assert!(variables("(((").unwrap_err().contains("Syntax error"));
    }

    #[test]
    fn evaluates_against_the_payload() {
        assert_eq!(
            evaluate("payload.s == 'ok'", r#"{"s": "ok"}"#).unwrap(),
            "true"
        );
        assert_eq!(
            evaluate("{'v': payload.n}", r#"{"n": -2}"#).unwrap(),
            r#"{"v":-2}"#
        );
        assert_eq!(evaluate("payload == null", "null").unwrap(), "true");
    }

    #[test]
    fn json_integers_bind_as_the_sdk_binds_them() {
        assert_eq!(evaluate("payload.n == 3", r#"{"n": 3}"#).unwrap(), "false");
        assert_eq!(evaluate("payload.n == 3u", r#"{"n": 3}"#).unwrap(), "true");
        assert_eq!(evaluate("payload.n == -3", r#"{"n": -3}"#).unwrap(), "true");
    }

    #[test]
    fn errors_are_text() {
        assert!(evaluate("payload.missing", r#"{"s": 1}"#).is_err());
        assert!(evaluate("payload.s", "{")
            .unwrap_err()
            .starts_with("payload is not JSON"));
    }
}
