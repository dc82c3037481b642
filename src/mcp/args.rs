//! A model's arguments checked against an MCP tool's own input schema before the call is sent:
//! `type`, `enum`, `const`, `required`, `properties`, `additionalProperties`, `items`,
//! `prefixItems`, bounds, lengths, `pattern`, `anyOf`/`oneOf`/`allOf`/`not` and local `$ref`s.
//! Keywords it does not know are not checked here (the server checks its own input again). The
//! first problem is reported with its JSON path, in words the model can act on.

use serde_json::{Map, Value};

use super::schema::{MAX_DEPTH, resolve_local};

/// Arguments that do not satisfy a tool's schema: the path and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("argument {at}: {why}")]
pub struct Invalid {
    /// JSON path of the offending value (`$` is the arguments object).
    pub at: String,
    pub why: String,
}

/// Checks `args` against `schema` (the server's input schema).
pub fn validate(schema: &Value, args: &Value) -> Result<(), Invalid> {
    let root = schema.as_object();
    check(root, schema, args, "$", 0)
}

fn invalid(at: &str, why: String) -> Invalid {
    Invalid {
        at: at.to_owned(),
        why,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(v: &Value, ty: &str) -> bool {
    let actual = type_name(v);
    actual == ty || (ty == "number" && actual == "integer")
}

fn check(
    root: Option<&Map<String, Value>>,
    schema: &Value,
    v: &Value,
    at: &str,
    depth: usize,
) -> Result<(), Invalid> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let s = match schema {
        Value::Bool(false) => return Err(invalid(at, "no value is allowed here".into())),
        Value::Object(s) => s,
        _ => return Ok(()),
    };
    if let Some(r) = s.get("$ref").and_then(Value::as_str)
        && let Some(target) = root.and_then(|root| resolve_local(root, r))
    {
        check(root, target, v, at, depth + 1)?;
    }
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(ty) => has_type(v, ty),
            Value::Array(list) => list
                .iter()
                .filter_map(Value::as_str)
                .any(|ty| has_type(v, ty)),
            _ => true,
        };
        if !ok {
            let want = match t {
                Value::String(ty) => ty.clone(),
                other => other.to_string(),
            };
            return Err(invalid(
                at,
                format!("must be of type {want}, got {}", type_name(v)),
            ));
        }
    }
    if let Some(Value::Array(options)) = s.get("enum")
        && !options.iter().any(|o| o == v)
    {
        let list: Vec<String> = options.iter().map(Value::to_string).collect();
        return Err(invalid(at, format!("must be one of {}", list.join(", "))));
    }
    if let Some(c) = s.get("const")
        && c != v
    {
        return Err(invalid(at, format!("must be {c}")));
    }
    match v {
        Value::Object(obj) => check_object(root, s, obj, at, depth)?,
        Value::Array(items) => check_array(root, s, items, at, depth)?,
        Value::String(text) => check_string(s, text, at)?,
        Value::Number(n) => check_number(s, n.as_f64().unwrap_or(0.0), at)?,
        _ => {}
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        for sub in all {
            check(root, sub, v, at, depth + 1)?;
        }
    }
    if let Some(Value::Array(any)) = s.get("anyOf") {
        let mut first = None;
        if !any
            .iter()
            .any(|sub| match check(root, sub, v, at, depth + 1) {
                Ok(()) => true,
                Err(e) => {
                    first.get_or_insert(e);
                    false
                }
            })
        {
            return Err(first.unwrap_or_else(|| invalid(at, "matches none of anyOf".into())));
        }
    }
    if let Some(Value::Array(one)) = s.get("oneOf") {
        let n = one
            .iter()
            .filter(|sub| check(root, sub, v, at, depth + 1).is_ok())
            .count();
        if n != 1 {
            return Err(invalid(
                at,
                format!("must match exactly one of oneOf (matches {n})"),
            ));
        }
    }
    if let Some(not) = s.get("not")
        && check(root, not, v, at, depth + 1).is_ok()
    {
        return Err(invalid(
            at,
            "matches a shape the schema excludes (not)".into(),
        ));
    }
    Ok(())
}

fn check_object(
    root: Option<&Map<String, Value>>,
    s: &Map<String, Value>,
    obj: &Map<String, Value>,
    at: &str,
    depth: usize,
) -> Result<(), Invalid> {
    if let Some(Value::Array(req)) = s.get("required") {
        for name in req.iter().filter_map(Value::as_str) {
            if !obj.contains_key(name) {
                return Err(invalid(at, format!("'{name}' is required")));
            }
        }
    }
    let props = s.get("properties").and_then(Value::as_object);
    for (k, val) in obj {
        let here = format!("{at}.{k}");
        match props.and_then(|p| p.get(k)) {
            Some(sub) => check(root, sub, val, &here, depth + 1)?,
            None => match s.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    let known: Vec<&str> = props
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    return Err(invalid(
                        at,
                        format!(
                            "unknown argument '{k}' (known: {})",
                            if known.is_empty() {
                                "none".to_owned()
                            } else {
                                known.join(", ")
                            }
                        ),
                    ));
                }
                Some(sub @ Value::Object(_)) => check(root, sub, val, &here, depth + 1)?,
                _ => {}
            },
        }
    }
    Ok(())
}

fn check_array(
    root: Option<&Map<String, Value>>,
    s: &Map<String, Value>,
    items: &[Value],
    at: &str,
    depth: usize,
) -> Result<(), Invalid> {
    let n = items.len() as u64;
    if let Some(min) = s.get("minItems").and_then(Value::as_u64)
        && n < min
    {
        return Err(invalid(at, format!("needs at least {min} items, has {n}")));
    }
    if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
        && n > max
    {
        return Err(invalid(at, format!("takes at most {max} items, has {n}")));
    }
    let prefix = s
        .get("prefixItems")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (i, item) in items.iter().enumerate() {
        let here = format!("{at}[{i}]");
        match prefix.get(i) {
            Some(sub) => check(root, sub, item, &here, depth + 1)?,
            None => {
                if let Some(sub) = s.get("items") {
                    check(root, sub, item, &here, depth + 1)?;
                }
            }
        }
    }
    Ok(())
}

fn check_string(s: &Map<String, Value>, text: &str, at: &str) -> Result<(), Invalid> {
    let n = text.chars().count() as u64;
    if let Some(min) = s.get("minLength").and_then(Value::as_u64)
        && n < min
    {
        return Err(invalid(at, format!("must be at least {min} characters")));
    }
    if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
        && n > max
    {
        return Err(invalid(at, format!("must be at most {max} characters")));
    }
    if let Some(p) = s.get("pattern").and_then(Value::as_str)
        && let Ok(re) = regex::Regex::new(p)
        && !re.is_match(text)
    {
        return Err(invalid(at, format!("must match the pattern {p:?}")));
    }
    Ok(())
}

fn check_number(s: &Map<String, Value>, x: f64, at: &str) -> Result<(), Invalid> {
    let num = |k: &str| s.get(k).and_then(Value::as_f64);
    if let Some(m) = num("minimum")
        && x < m
    {
        return Err(invalid(at, format!("must be at least {m}")));
    }
    if let Some(m) = num("maximum")
        && x > m
    {
        return Err(invalid(at, format!("must be at most {m}")));
    }
    if let Some(m) = num("exclusiveMinimum")
        && x <= m
    {
        return Err(invalid(at, format!("must be more than {m}")));
    }
    if let Some(m) = num("exclusiveMaximum")
        && x >= m
    {
        return Err(invalid(at, format!("must be less than {m}")));
    }
    if let Some(m) = num("multipleOf")
        && m > 0.0
        && ((x / m).round() * m - x).abs() > 1e-9 * m.max(1.0)
    {
        return Err(invalid(at, format!("must be a multiple of {m}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::schema::tests::pydantic;
    use serde_json::json;

    #[test]
    fn arguments_are_checked_against_the_original_schema() {
        let s = pydantic();
        let ok = json!({"customer_id": 251, "line": {"sku": "A1", "qty": 2}, "note": null, "kind": "refund"});
        assert_eq!(validate(&s, &ok), Ok(()));
        let bad = [
            (
                json!({"line": {"sku": "A1"}}),
                "$",
                "'customer_id' is required",
            ),
            (
                json!({"customer_id": "251", "line": {"sku": "A1"}}),
                "$.customer_id",
                "must be of type integer, got string",
            ),
            (
                json!({"customer_id": 1, "line": {"sku": "A1", "qty": 0}}),
                "$.line.qty",
                "must be at least 1",
            ),
            (
                json!({"customer_id": 1, "line": {"sku": "A1"}, "tier": "bronze"}),
                "$.tier",
                "must be one of \"gold\", \"silver\"",
            ),
            (
                json!({"customer_id": 1, "line": {"sku": "A1"}, "extra": true}),
                "$",
                "unknown argument 'extra' (known: customer_id, kind, line, note, tier)",
            ),
            (
                json!({"customer_id": 1, "line": {"sku": "A1"}, "note": 5}),
                "$.note",
                "must be of type string, got integer",
            ),
        ];
        for (args, at, why) in bad {
            let e = validate(&s, &args).unwrap_err();
            assert_eq!((e.at.as_str(), e.why.as_str()), (at, why), "{args}");
        }
    }

    #[test]
    fn integers_written_as_floats_are_integers() {
        let s = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        assert_eq!(validate(&s, &json!({"n": 3.0})), Ok(()));
        assert!(validate(&s, &json!({"n": 3.5})).is_err());
    }

    #[test]
    fn deep_arguments_stop_at_the_depth_guard() {
        let mut s = json!({"type": "object"});
        for _ in 0..100 {
            s = json!({"type": "object", "properties": {"a": s}});
        }
        let mut v = json!(1);
        for _ in 0..100 {
            v = json!({ "a": v });
        }
        assert_eq!(validate(&s, &v), Ok(()));
    }
}
