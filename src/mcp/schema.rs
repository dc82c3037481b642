//! MCP input schemas (JSON Schema, as servers write them) into the schema baton declares to the
//! model.
//!
//! **Translation** ([`translate`]): Gemini Live (`parametersJsonSchema`) and OpenAI Realtime
//! (`parameters`) both accept a plain subset of JSON Schema: `type` (one type, or one type and
//! `"null"`), `description`, `enum`, `properties`, `required`, `items`, `anyOf`, numeric and
//! length bounds, and `format` for dates. What a server writes beyond that is rewritten when it
//! means the same: local `$ref`s into `$defs`/`definitions` are inlined, `const` becomes a
//! one-value `enum`, `oneOf` becomes `anyOf`, an `allOf` of one schema is that schema, and
//! keywords that only annotate or only narrow the accepted values (`title`, `default`,
//! `examples`, `additionalProperties: false`, `exclusiveMinimum`, `multipleOf`, other formats …)
//! are left out of the declaration, because arguments are checked against the original schema
//! before they are sent. What cannot be said in the subset — `not`, `if`/`then`/`else`,
//! `patternProperties`, tuples, maps (`additionalProperties` with a schema), recursive or remote
//! `$ref`s, an `allOf` of several schemas, a top level that is not an object — is a
//! [`Untranslatable`] naming the keyword and where it is, and the tool is refused.
//! Arguments are checked against the original schema by [`super::args`].

use serde_json::{Map, Value, json};

/// Deepest schema nesting translated or validated (a guard against hostile schemas).
pub(super) const MAX_DEPTH: usize = 32;

/// Why a schema cannot be declared to the models.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("schema keyword `{keyword}` at {at}: {why}")]
pub struct Untranslatable {
    /// The JSON Schema keyword that cannot be translated.
    pub keyword: String,
    /// Where it is, as a JSON pointer into the input schema (`/` is the top).
    pub at: String,
    pub why: String,
}

fn refuse(keyword: &str, at: &str, why: &str) -> Untranslatable {
    Untranslatable {
        keyword: keyword.to_owned(),
        at: if at.is_empty() {
            "/".to_owned()
        } else {
            at.to_owned()
        },
        why: why.to_owned(),
    }
}

/// Keywords that annotate or narrow values only: dropped from the declaration (the arguments are
/// still checked against them before a call).
const DROPPED: &[&str] = &[
    "title",
    "default",
    "examples",
    "example",
    "$schema",
    "$id",
    "$comment",
    "$anchor",
    "deprecated",
    "readOnly",
    "writeOnly",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "contentMediaType",
    "contentEncoding",
    "$defs",
    "definitions",
];

/// Keywords with no equivalent in the declared subset.
const REFUSED: &[(&str, &str)] = &[
    ("not", "the models' schemas cannot exclude a shape"),
    ("if", "conditional schemas are not supported by the models"),
    (
        "then",
        "conditional schemas are not supported by the models",
    ),
    (
        "else",
        "conditional schemas are not supported by the models",
    ),
    (
        "patternProperties",
        "objects must list their properties by name",
    ),
    (
        "dependentSchemas",
        "properties cannot depend on each other in the models' schemas",
    ),
    (
        "dependentRequired",
        "properties cannot depend on each other in the models' schemas",
    ),
    (
        "dependencies",
        "properties cannot depend on each other in the models' schemas",
    ),
    (
        "prefixItems",
        "tuples (items by position) are not supported",
    ),
    ("contains", "arrays can only describe all their items"),
    ("unevaluatedProperties", "not supported by the models"),
    ("unevaluatedItems", "not supported by the models"),
    (
        "propertyNames",
        "objects must list their properties by name",
    ),
    ("$dynamicRef", "dynamic references are not supported"),
    ("$recursiveRef", "recursive references are not supported"),
];

/// Formats both models understand on strings; others are dropped (and still validated by the
/// server).
const FORMATS: &[&str] = &["date-time", "date", "time"];

/// The schema to declare for an MCP tool whose input schema is `input`.
pub fn translate(input: &Value) -> Result<Value, Untranslatable> {
    let root = input
        .as_object()
        .ok_or_else(|| refuse("type", "", "the input schema must be a JSON object"))?;
    let mut t = Translator {
        root,
        stack: Vec::new(),
    };
    let out = t.node(input, "", 0)?;
    match out.get("type").and_then(Value::as_str) {
        Some("object") => Ok(out),
        None if out.get("properties").is_some() || out.as_object().is_some_and(Map::is_empty) => {
            let mut o = out;
            o["type"] = json!("object");
            if o.get("properties").is_none() {
                o["properties"] = json!({});
            }
            Ok(o)
        }
        _ => Err(refuse(
            "type",
            "",
            "a tool's arguments must be an object (type \"object\" at the top)",
        )),
    }
}

struct Translator<'a> {
    root: &'a Map<String, Value>,
    /// `$ref`s being inlined, to refuse recursion.
    stack: Vec<String>,
}

impl Translator<'_> {
    fn node(&mut self, v: &Value, at: &str, depth: usize) -> Result<Value, Untranslatable> {
        if depth > MAX_DEPTH {
            return Err(refuse(
                "properties",
                at,
                "the schema nests deeper than 32 levels",
            ));
        }
        let o = match v {
            Value::Bool(true) => return Ok(json!({})),
            Value::Bool(false) => {
                return Err(refuse("false", at, "a schema that accepts nothing"));
            }
            Value::Object(o) => o,
            _ => return Err(refuse("type", at, "a schema must be an object")),
        };
        if let Some(r) = o.get("$ref") {
            return self.reference(r, o, at, depth);
        }
        let mut out = Map::new();
        for (k, val) in o {
            let here = format!("{at}/{k}");
            if let Some((_, why)) = REFUSED.iter().find(|(name, _)| name == k) {
                return Err(refuse(k, at, why));
            }
            if DROPPED.contains(&k.as_str()) {
                continue;
            }
            match k.as_str() {
                "type" => {
                    let (ty, nullable) = single_type(val, at)?;
                    out.insert("type".into(), ty_value(&ty, nullable));
                }
                "description" => {
                    if let Some(s) = val.as_str() {
                        out.insert(k.clone(), json!(s));
                    }
                }
                "enum" => {
                    let items = val
                        .as_array()
                        .ok_or_else(|| refuse("enum", at, "enum must be a list"))?;
                    out.insert(k.clone(), Value::Array(items.clone()));
                }
                "const" => {
                    out.insert("enum".into(), json!([val]));
                }
                "format" => {
                    if let Some(f) = val.as_str().filter(|f| FORMATS.contains(f)) {
                        out.insert(k.clone(), json!(f));
                    }
                }
                "minimum" | "maximum" | "minItems" | "maxItems" | "minLength" | "maxLength"
                | "pattern" => {
                    out.insert(k.clone(), val.clone());
                }
                "required" => {
                    let names = val
                        .as_array()
                        .filter(|a| a.iter().all(Value::is_string))
                        .ok_or_else(|| refuse("required", at, "required must list names"))?;
                    if !names.is_empty() {
                        out.insert(k.clone(), Value::Array(names.clone()));
                    }
                }
                "properties" => {
                    let props = val.as_object().ok_or_else(|| {
                        refuse("properties", at, "properties must map names to schemas")
                    })?;
                    let mut m = Map::new();
                    for (name, p) in props {
                        m.insert(
                            name.clone(),
                            self.node(p, &format!("{here}/{}", escape(name)), depth + 1)?,
                        );
                    }
                    out.insert(k.clone(), Value::Object(m));
                }
                "additionalProperties" => match val {
                    Value::Bool(_) => {}
                    Value::Object(m) if m.is_empty() => {}
                    _ => {
                        return Err(refuse(
                            k,
                            at,
                            "objects with free-form keys (maps) cannot be declared; list the properties",
                        ));
                    }
                },
                "items" => match val {
                    Value::Array(_) => {
                        return Err(refuse(
                            "items",
                            at,
                            "tuples (items by position) are not supported",
                        ));
                    }
                    _ => {
                        out.insert(k.clone(), self.node(val, &here, depth + 1)?);
                    }
                },
                "anyOf" | "oneOf" => {
                    let list = val
                        .as_array()
                        .filter(|l| !l.is_empty())
                        .ok_or_else(|| refuse(k, at, "must be a non-empty list of schemas"))?;
                    let mut branches = Vec::new();
                    let mut nullable = false;
                    for (i, b) in list.iter().enumerate() {
                        if is_null_schema(b) {
                            nullable = true;
                            continue;
                        }
                        branches.push(self.node(b, &format!("{here}/{i}"), depth + 1)?);
                    }
                    merge_any_of(&mut out, branches, nullable);
                }
                "allOf" => {
                    let list = val
                        .as_array()
                        .ok_or_else(|| refuse(k, at, "must be a list of schemas"))?;
                    match list.as_slice() {
                        [] => {}
                        [one] => {
                            let inner = self.node(one, &format!("{here}/0"), depth + 1)?;
                            if let Value::Object(m) = inner {
                                for (ik, iv) in m {
                                    out.entry(ik).or_insert(iv);
                                }
                            }
                        }
                        _ => {
                            return Err(refuse(
                                k,
                                at,
                                "an intersection of several schemas cannot be declared",
                            ));
                        }
                    }
                }
                "nullable" => {
                    if val.as_bool() == Some(true) {
                        make_nullable(&mut out);
                    }
                }
                other if other.starts_with("x-") => {}
                other => {
                    return Err(refuse(
                        other,
                        at,
                        "not a keyword Gemini Live or OpenAI Realtime accept",
                    ));
                }
            }
        }
        if o.get("nullable").and_then(Value::as_bool) == Some(true) {
            make_nullable(&mut out);
        }
        Ok(Value::Object(out))
    }

    fn reference(
        &mut self,
        r: &Value,
        o: &Map<String, Value>,
        at: &str,
        depth: usize,
    ) -> Result<Value, Untranslatable> {
        let r = r
            .as_str()
            .ok_or_else(|| refuse("$ref", at, "must be a string"))?;
        let target = resolve_local(self.root, r).ok_or_else(|| {
            refuse(
                "$ref",
                at,
                &format!("{r:?} is not a reference into this schema's $defs"),
            )
        })?;
        if self.stack.iter().any(|s| s == r) {
            return Err(refuse(
                "$ref",
                at,
                &format!("{r:?} refers to itself (a recursive type)"),
            ));
        }
        self.stack.push(r.to_owned());
        let inner = self.node(target, at, depth + 1);
        self.stack.pop();
        let mut inner = inner?;
        // Sibling keywords of a `$ref` (a description, most often) apply too.
        let mut rest = o.clone();
        rest.remove("$ref");
        if !rest.is_empty()
            && let Value::Object(extra) = self.node(&Value::Object(rest), at, depth + 1)?
            && let Value::Object(m) = &mut inner
        {
            for (k, v) in extra {
                m.insert(k, v);
            }
        }
        Ok(inner)
    }
}

/// `#/$defs/Name` or `#/definitions/Name` (any local JSON pointer) within `root`.
pub(super) fn resolve_local<'a>(root: &'a Map<String, Value>, r: &str) -> Option<&'a Value> {
    let pointer = r.strip_prefix('#')?;
    if pointer.is_empty() {
        return None; // the root itself: recursion
    }
    let mut cur: Option<&Value> = None;
    for part in pointer.strip_prefix('/')?.split('/') {
        let key = part.replace("~1", "/").replace("~0", "~");
        cur = match cur {
            None => root.get(&key),
            Some(Value::Object(m)) => m.get(&key),
            Some(Value::Array(a)) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
            Some(_) => None,
        };
        cur?;
    }
    cur
}

fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn is_null_schema(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("null")
}

/// One type name and whether `null` is allowed too.
fn single_type(v: &Value, at: &str) -> Result<(String, bool), Untranslatable> {
    const TYPES: &[&str] = &[
        "string", "number", "integer", "boolean", "array", "object", "null",
    ];
    let check = |s: &str| {
        if TYPES.contains(&s) {
            Ok(s.to_owned())
        } else {
            Err(refuse(
                "type",
                at,
                &format!("{s:?} is not a JSON Schema type"),
            ))
        }
    };
    match v {
        Value::String(s) => Ok((check(s)?, false)),
        Value::Array(list) => {
            let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
            if names.len() != list.len() {
                return Err(refuse("type", at, "type must name types"));
            }
            let nullable = names.contains(&"null");
            let rest: Vec<&str> = names.into_iter().filter(|n| *n != "null").collect();
            match rest.as_slice() {
                [one] => Ok((check(one)?, nullable)),
                [] if nullable => Ok(("null".into(), false)),
                _ => Err(refuse(
                    "type",
                    at,
                    "a value of several types cannot be declared; use anyOf",
                )),
            }
        }
        _ => Err(refuse("type", at, "type must be a name or a list of names")),
    }
}

fn ty_value(ty: &str, nullable: bool) -> Value {
    if nullable && ty != "null" {
        json!([ty, "null"])
    } else {
        json!(ty)
    }
}

fn make_nullable(out: &mut Map<String, Value>) {
    if let Some(Value::String(t)) = out.get("type").cloned()
        && t != "null"
    {
        out.insert("type".into(), json!([t, "null"]));
    }
}

/// `anyOf` branches into `out`: one branch is merged in place (with `null` as a nullable type),
/// several stay an `anyOf` (with a `null` branch when nullable).
fn merge_any_of(out: &mut Map<String, Value>, mut branches: Vec<Value>, nullable: bool) {
    if branches.len() == 1 {
        if let Some(Value::Object(m)) = branches.pop() {
            for (k, v) in m {
                out.entry(k).or_insert(v);
            }
        }
        if nullable {
            make_nullable(out);
        }
        return;
    }
    if nullable {
        branches.push(json!({"type": "null"}));
    }
    out.insert("anyOf".into(), Value::Array(branches));
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// What the official Python SDK writes for `def f(customer_id: int, note: str | None = None,
    /// line: Line)` with a pydantic model `Line`.
    pub(in crate::mcp) fn pydantic() -> Value {
        json!({
            "$defs": {
                "Line": {
                    "properties": {
                        "sku": {"title": "Sku", "type": "string"},
                        "qty": {"default": 1, "title": "Qty", "type": "integer", "minimum": 1}
                    },
                    "required": ["sku"],
                    "title": "Line",
                    "type": "object"
                }
            },
            "properties": {
                "customer_id": {"title": "Customer Id", "type": "integer"},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Note"},
                "line": {"$ref": "#/$defs/Line", "description": "One order line"},
                "tier": {"enum": ["gold", "silver"], "type": "string"},
                "kind": {"const": "refund"}
            },
            "required": ["customer_id", "line"],
            "title": "fArguments",
            "type": "object",
            "additionalProperties": false
        })
    }

    #[test]
    fn pydantic_schemas_translate_to_the_common_subset() {
        let t = translate(&pydantic()).unwrap();
        assert_eq!(
            t,
            json!({
                "type": "object",
                "required": ["customer_id", "line"],
                "properties": {
                    "customer_id": {"type": "integer"},
                    "note": {"type": ["string", "null"]},
                    "line": {
                        "type": "object",
                        "description": "One order line",
                        "required": ["sku"],
                        "properties": {
                            "sku": {"type": "string"},
                            "qty": {"type": "integer", "minimum": 1}
                        }
                    },
                    "tier": {"type": "string", "enum": ["gold", "silver"]},
                    "kind": {"enum": ["refund"]}
                }
            })
        );
    }

    #[test]
    fn an_empty_schema_is_an_object_without_arguments() {
        assert_eq!(
            translate(&json!({})).unwrap(),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            translate(&json!({"type": "object"})).unwrap(),
            json!({"type": "object"})
        );
    }

    #[test]
    fn untranslatable_keywords_are_named_with_their_place() {
        let cases = [
            (
                json!({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}),
                "not",
                "/properties/a",
            ),
            (
                json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}}}),
                "additionalProperties",
                "/properties/m",
            ),
            (
                json!({"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
                       "type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}}),
                "$ref",
                "/properties/n/properties/next",
            ),
            (
                json!({"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}),
                "$ref",
                "/properties/x",
            ),
            (json!({"type": "string"}), "type", "/"),
            (
                json!({"type": "object", "properties": {"v": {"type": ["string", "integer"]}}}),
                "type",
                "/properties/v",
            ),
            (
                json!({"type": "object", "if": {"required": ["a"]}}),
                "if",
                "/",
            ),
            (
                json!({"type": "object", "properties": {"t": {"type": "array", "items": [{"type": "string"}]}}}),
                "items",
                "/properties/t",
            ),
        ];
        for (schema, keyword, at) in cases {
            let e = translate(&schema).unwrap_err();
            assert_eq!(
                (e.keyword.as_str(), e.at.as_str()),
                (keyword, at),
                "{schema}"
            );
        }
    }

    #[test]
    fn hostile_depth_is_refused_not_overflowed() {
        let mut s = json!({"type": "object"});
        for _ in 0..100 {
            s = json!({"type": "object", "properties": {"a": s}});
        }
        assert!(translate(&s).is_err());
    }
}
