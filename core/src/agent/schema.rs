//! The JSON Schema subset tools use for parameters and outputs (loop.md TL-3,
//! TL-6): a checker for schemas and a validator for values.
//!
//! Both walks use an explicit stack, so hostile nesting cannot overflow the
//! call stack. Violations come out in the reference's walk order and with its
//! exact texts.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use crate::json::write_js_number;

/// Keywords that constrain values.
const CONSTRAINTS: [&str; 8] = [
    "type",
    "oneOf",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
];
/// Keywords that only annotate.
const ANNOTATIONS: [&str; 4] = ["description", "title", "default", "examples"];
/// The `type` values of the subset.
const TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];
/// Keywords that need a `type` (or `oneOf`, where they are rejected).
const ONE_OF_SIBLINGS: [&str; 6] = [
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
];

/// Writes `value` the way JavaScript's `JSON.stringify` does (compact, JS
/// number formatting), for the `must be one of <JSON>` texts.
pub(crate) fn js_stringify(value: &Value) -> String {
    let mut out = String::new();
    write_js_json(&mut out, value);
    out
}

fn write_js_json(out: &mut String, value: &Value) {
    match value {
        Value::Number(n) => {
            if n.is_f64() {
                write_js_number(out, n.as_f64().unwrap_or(0.0));
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_js_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_js_json(out, v);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Whether `v` is `-0.0`, which lossless JSON excludes (session.md J2).
fn is_negative_zero(n: &serde_json::Number) -> bool {
    n.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()) && n.is_f64()
}

/// Whether a value holds no `-0` anywhere (the lossless JSON domain).
pub(crate) fn is_lossless(value: &Value) -> bool {
    let mut stack = alloc::vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) if is_negative_zero(n) => return false,
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    true
}

/// A finite JSON number that is not negative zero.
fn is_json_number(v: &Value) -> bool {
    matches!(v, Value::Number(n) if !is_negative_zero(n))
}

/// `Number.isInteger` for a JSON number.
fn is_integer(v: &Value) -> bool {
    let Value::Number(n) = v else { return false };
    if n.is_i64() || n.is_u64() {
        return true;
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    // Every float of magnitude 2^53 or more is integral; below that the
    // round trip through i64 is exact for integers only.
    f.is_finite() && (f.abs() >= 9_007_199_254_740_992.0 || (f as i64) as f64 == f)
}

fn scalar_matches(ty: &str, v: &Value) -> bool {
    match ty {
        "string" => v.is_string(),
        "number" => is_json_number(v),
        "integer" => is_json_number(v) && is_integer(v),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

/// JavaScript's SameValueZero on scalars (`includes`, `===` for const).
fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => false,
        _ => a == b,
    }
}

enum SchemaTask<'a> {
    Enter(&'a Value, String),
    OneOfTail(&'a Map<String, Value>, String),
    ObjectTail(&'a Map<String, Value>, String),
}

/// Checks that `schema` uses only the supported subset (TL-3). Returns every
/// violation in walk order; empty means supported. The root path is `schema`.
///
/// A non-empty result is what the reference reports as
/// `unsupported JSON schema: <violations joined by "; ">` with code
/// `UNSUPPORTED_SCHEMA`.
pub fn check_schema(schema: &Value) -> Vec<String> {
    check_schema_at(schema, "schema")
}

/// [`check_schema`] with a custom root path.
pub(crate) fn check_schema_at(schema: &Value, root: &str) -> Vec<String> {
    let mut violations = Vec::new();
    let mut tasks = alloc::vec![SchemaTask::Enter(schema, String::from(root))];
    while let Some(task) = tasks.pop() {
        let (node, path) = match task {
            SchemaTask::OneOfTail(node, path) => {
                for key in ONE_OF_SIBLINGS {
                    if node.contains_key(key) {
                        violations.push(format!("{path}.{key} is not supported beside oneOf"));
                    }
                }
                continue;
            }
            SchemaTask::ObjectTail(node, path) => {
                object_tail(node, &path, &mut violations);
                continue;
            }
            SchemaTask::Enter(node, path) => (node, path),
        };
        let Value::Object(node) = node else {
            violations.push(format!("{path} must be a schema object"));
            continue;
        };
        for (key, value) in node {
            if CONSTRAINTS.contains(&key.as_str()) {
                continue;
            }
            if ANNOTATIONS.contains(&key.as_str()) {
                if !is_lossless(value) {
                    violations.push(format!(
                        "{path}.{key} annotation must be lossless JSON data"
                    ));
                }
                continue;
            }
            violations.push(format!(
                "{path}.{key} is not a supported keyword (subset: type/oneOf/properties/required/additionalProperties/items/enum/const + annotations)"
            ));
        }
        if node.get("description").is_some_and(|d| !d.is_string()) {
            violations.push(format!("{path}.description must be a string"));
        }
        if node.get("title").is_some_and(|d| !d.is_string()) {
            violations.push(format!("{path}.title must be a string"));
        }
        let has_type = node.contains_key("type");
        let has_one_of = node.contains_key("oneOf");
        if has_type && has_one_of {
            violations.push(format!("{path} cannot declare both type and oneOf"));
            continue;
        }
        if !has_type && !has_one_of {
            for key in ONE_OF_SIBLINGS {
                if node.contains_key(key) {
                    violations.push(format!("{path}.{key} requires type or oneOf"));
                }
            }
            continue;
        }
        if let Some(one_of) = node.get("oneOf") {
            tasks.push(SchemaTask::OneOfTail(node, path.clone()));
            match one_of {
                Value::Array(branches) if branches.len() >= 2 => {
                    for (i, branch) in branches.iter().enumerate().rev() {
                        tasks.push(SchemaTask::Enter(branch, format!("{path}.oneOf[{i}]")));
                    }
                }
                _ => violations.push(format!(
                    "{path}.oneOf must be an array of at least two schemas"
                )),
            }
            continue;
        }
        let ty = match node.get("type") {
            Some(Value::String(t)) if TYPES.contains(&t.as_str()) => t.as_str(),
            Some(Value::Array(_)) => {
                violations.push(format!(
                    "{path}.type must be a single type string (type arrays are not supported)"
                ));
                continue;
            }
            _ => {
                violations.push(format!("{path}.type must be one of {}", TYPES.join("/")));
                continue;
            }
        };
        let allowed: [(&str, &[&str]); 6] = [
            ("properties", &["object"]),
            ("required", &["object"]),
            ("additionalProperties", &["object"]),
            ("items", &["array"]),
            ("enum", &["string", "number", "integer", "boolean", "null"]),
            ("const", &["string", "number", "integer", "boolean", "null"]),
        ];
        for (key, types) in allowed {
            if node.contains_key(key) && !types.contains(&ty) {
                violations.push(format!("{path}.{key} is not supported on type \"{ty}\""));
            }
        }
        match ty {
            "object" => {
                tasks.push(SchemaTask::ObjectTail(node, path.clone()));
                if let Some(properties) = node.get("properties") {
                    match properties {
                        Value::Object(props) => {
                            let entries: Vec<_> = props.iter().collect();
                            for (key, child) in entries.into_iter().rev() {
                                tasks.push(SchemaTask::Enter(
                                    child,
                                    format!("{path}.properties.{key}"),
                                ));
                            }
                        }
                        _ => violations
                            .push(format!("{path}.properties must be an object of schemas")),
                    }
                }
            }
            "array" => {
                if let Some(items) = node.get("items") {
                    tasks.push(SchemaTask::Enter(items, format!("{path}.items")));
                }
            }
            _ => {
                let allowed = node.get("enum");
                let enum_valid = match allowed {
                    Some(Value::Array(entries)) => {
                        !entries.is_empty() && entries.iter().all(|e| scalar_matches(ty, e))
                    }
                    _ => false,
                };
                if allowed.is_some() && !enum_valid {
                    violations.push(format!(
                        "{path}.enum must be a non-empty array of {ty} values"
                    ));
                }
                if let Some(declared) = node.get("const") {
                    if !scalar_matches(ty, declared) {
                        violations.push(format!("{path}.const must be a {ty} value"));
                    } else if let (true, Some(Value::Array(entries))) = (enum_valid, allowed)
                        && !entries.iter().any(|e| same_scalar(e, declared))
                    {
                        violations.push(format!(
                            "{path}.const must be one of {path}.enum when both are declared"
                        ));
                    }
                }
            }
        }
    }
    violations
}

fn object_tail(node: &Map<String, Value>, path: &str, violations: &mut Vec<String>) {
    if let Some(required) = node.get("required") {
        match required {
            Value::Array(names) if names.iter().all(Value::is_string) => {
                let declared = node.get("properties").and_then(Value::as_object);
                for name in names.iter().filter_map(Value::as_str) {
                    if !declared.is_some_and(|d| d.contains_key(name)) {
                        violations.push(format!(
                            "{path}.required names \"{name}\" which is not in properties"
                        ));
                    }
                }
            }
            _ => violations.push(format!("{path}.required must be an array of strings")),
        }
    }
    if node
        .get("additionalProperties")
        .is_some_and(|a| !a.is_boolean())
    {
        violations.push(format!("{path}.additionalProperties must be a boolean"));
    }
}

/// The diagnostic name of a path: the empty root is `arguments`.
fn shown(path: &str) -> &str {
    if path.is_empty() { "arguments" } else { path }
}

fn property_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        String::from(key)
    } else {
        format!("{path}.{key}")
    }
}

enum FrameKind {
    OneOf,
    Container,
}

struct Frame<'a> {
    kind: FrameKind,
    children: Vec<(&'a Value, &'a Value, String)>,
    next: usize,
    violations: Vec<String>,
    tail: Vec<String>,
    matches: usize,
    path: String,
}

/// Validates `value` against a schema that [`check_schema`] accepted (TL-6).
///
/// Returns every violation in schema-walk order; empty means valid. `root`
/// labels the root in property paths: the empty string gives the tool
/// argument form (`arguments` for the root, `text` for a property), any other
/// string prefixes paths (`value.text`). The validator is total: a schema
/// outside the subset never panics, it only constrains less.
pub fn validate_value(schema: &Value, value: &Value, root: &str) -> Vec<String> {
    let mut frames: Vec<Frame<'_>> = Vec::new();
    let mut pending: Option<(&Value, &Value, String)> = Some((schema, value, String::from(root)));
    loop {
        // Enter a node: either it finishes at once, or it becomes a frame.
        let finished: Vec<String> = if let Some((node, value, path)) = pending.take() {
            match enter(node, value, path) {
                Entered::Done(result) => result,
                Entered::Frame(frame) => {
                    frames.push(frame);
                    continue;
                }
            }
        } else {
            let Some(frame) = frames.last_mut() else {
                return Vec::new();
            };
            if frame.next < frame.children.len() {
                let (node, value, path) = frame.children[frame.next].clone();
                frame.next += 1;
                pending = Some((node, value, path));
                continue;
            }
            let Some(frame) = frames.pop() else {
                return Vec::new();
            };
            match frame.kind {
                FrameKind::OneOf if frame.matches == 1 => Vec::new(),
                FrameKind::OneOf => alloc::vec![format!(
                    "\"{}\" must match exactly one oneOf branch (matched {})",
                    shown(&frame.path),
                    frame.matches
                )],
                FrameKind::Container => {
                    let mut v = frame.violations;
                    v.extend(frame.tail);
                    v
                }
            }
        };
        match frames.last_mut() {
            None => return finished,
            Some(parent) => match parent.kind {
                FrameKind::OneOf => {
                    if finished.is_empty() {
                        parent.matches += 1;
                    }
                }
                FrameKind::Container => parent.violations.extend(finished),
            },
        }
    }
}

enum Entered<'a> {
    Done(Vec<String>),
    Frame(Frame<'a>),
}

fn frame<'a>(kind: FrameKind, path: String) -> Frame<'a> {
    Frame {
        kind,
        children: Vec::new(),
        next: 0,
        violations: Vec::new(),
        tail: Vec::new(),
        matches: 0,
        path,
    }
}

fn enter<'a>(node: &'a Value, value: &'a Value, path: String) -> Entered<'a> {
    let Value::Object(node) = node else {
        return Entered::Done(Vec::new());
    };
    if let Some(Value::Array(branches)) = node.get("oneOf") {
        let mut f = frame(FrameKind::OneOf, path.clone());
        f.children = branches.iter().map(|b| (b, value, path.clone())).collect();
        return Entered::Frame(f);
    }
    let Some(ty) = node.get("type").and_then(Value::as_str) else {
        return Entered::Done(if is_lossless(value) {
            Vec::new()
        } else {
            alloc::vec![format!(
                "\"{}\" must be a lossless JSON value",
                shown(&path)
            )]
        });
    };
    let one = |text: &str| Entered::Done(alloc::vec![format!("\"{}\" {text}", shown(&path))]);
    match ty {
        "object" => {
            let Value::Object(object) = value else {
                return one("must be an object");
            };
            let mut f = frame(FrameKind::Container, path.clone());
            if let Some(Value::Array(required)) = node.get("required") {
                for key in required.iter().filter_map(Value::as_str) {
                    if !object.contains_key(key) {
                        f.violations.push(format!(
                            "missing required property \"{}\"",
                            property_path(&path, key)
                        ));
                    }
                }
            }
            let properties = node.get("properties").and_then(Value::as_object);
            if let Some(properties) = properties {
                for (key, child) in properties {
                    if let Some(v) = object.get(key) {
                        f.children.push((child, v, property_path(&path, key)));
                    }
                }
            }
            if node.get("additionalProperties") == Some(&Value::Bool(false)) {
                for key in object.keys() {
                    if !properties.is_some_and(|p| p.contains_key(key)) {
                        f.tail.push(format!(
                            "\"{}\" is not a declared property (additionalProperties: false)",
                            property_path(&path, key)
                        ));
                    }
                }
            }
            Entered::Frame(f)
        }
        "array" => {
            let Value::Array(items) = value else {
                return one("must be an array");
            };
            let mut f = frame(FrameKind::Container, path.clone());
            if let Some(item_schema) = node.get("items") {
                f.children = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (item_schema, item, format!("{path}[{i}]")))
                    .collect();
            }
            Entered::Frame(f)
        }
        "string" if !value.is_string() => one("must be a string"),
        "number" if !value.is_number() => one("must be a number"),
        "number" if !is_json_number(value) => one("must be a finite JSON number"),
        "integer" if !(is_json_number(value) && is_integer(value)) => one("must be an integer"),
        "boolean" if !value.is_boolean() => one("must be a boolean"),
        "null" if !value.is_null() => one("must be null"),
        "string" | "number" | "integer" | "boolean" | "null" => {
            if let Some(allowed) = node.get("enum") {
                let ok = match allowed {
                    Value::Array(entries) => entries.iter().any(|e| same_scalar(e, value)),
                    _ => true,
                };
                if !ok {
                    return one(&format!("must be one of {}", js_stringify(allowed)));
                }
            }
            if let Some(c) = node.get("const")
                && !same_scalar(c, value)
            {
                return one(&format!("must be {}", js_stringify(c)));
            }
            Entered::Done(Vec::new())
        }
        _ => Entered::Done(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tl6_texts_and_order() {
        let schema = json!({"type":"object","properties":{
            "text":{"type":"string"},
            "n":{"type":"integer"},
            "mode":{"type":"string","enum":["a","b"]},
            "list":{"type":"array","items":{"type":"boolean"}},
            "other":{"type":"null"}
        },"required":["text","other"],"additionalProperties":false});
        assert!(check_schema(&schema).is_empty());
        let v = validate_value(
            &schema,
            &json!({"n":1.5,"mode":"c","list":[true,1],"x":null}),
            "",
        );
        assert_eq!(
            v,
            [
                "missing required property \"text\"",
                "missing required property \"other\"",
                "\"n\" must be an integer",
                "\"mode\" must be one of [\"a\",\"b\"]",
                "\"list[1]\" must be a boolean",
                "\"x\" is not a declared property (additionalProperties: false)",
            ]
        );
    }

    #[test]
    fn root_is_called_arguments() {
        let schema = json!({"type":"object","properties":{"text":{"type":"string"}}});
        assert_eq!(
            validate_value(&schema, &json!("{\"text\": "), ""),
            ["\"arguments\" must be an object"]
        );
        assert_eq!(
            validate_value(&schema, &json!([1]), ""),
            ["\"arguments\" must be an object"]
        );
    }

    #[test]
    fn one_of_counts_matches() {
        let schema = json!({"oneOf":[{"type":"number"},{"type":"integer"}]});
        assert!(check_schema(&schema).is_empty());
        assert_eq!(
            validate_value(&schema, &json!(2), "value"),
            ["\"value\" must match exactly one oneOf branch (matched 2)"]
        );
        assert!(validate_value(&schema, &json!(2.5), "value").is_empty());
    }

    #[test]
    fn unsupported_keywords_are_named() {
        let v = check_schema(&json!({"type":"string","minLength":1,"items":{}}));
        assert_eq!(
            v,
            [
                "schema.minLength is not a supported keyword (subset: type/oneOf/properties/required/additionalProperties/items/enum/const + annotations)",
                "schema.items is not supported on type \"string\""
            ]
        );
        assert_eq!(
            check_schema(&json!({"type":["string","null"]})),
            ["schema.type must be a single type string (type arrays are not supported)"]
        );
        assert_eq!(
            check_schema(&json!({"type":"object","required":["a"]})),
            ["schema.required names \"a\" which is not in properties"]
        );
    }

    #[test]
    fn const_uses_js_json() {
        let schema = json!({"type":"number","const":1.0});
        assert_eq!(
            validate_value(&schema, &json!(2), "value"),
            ["\"value\" must be 1"]
        );
        assert!(validate_value(&schema, &json!(1), "value").is_empty());
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        // Built by hand: `json!` would serialize (recursively) what it nests.
        let mut schema = json!({"type":"array"});
        let mut value = json!(1);
        for _ in 0..3_000 {
            let mut node = Map::new();
            node.insert("type".into(), Value::String("array".into()));
            node.insert("items".into(), schema);
            schema = Value::Object(node);
            value = Value::Array(alloc::vec![value]);
        }
        assert!(check_schema(&schema).is_empty());
        assert_eq!(validate_value(&schema, &value, "").len(), 1);
        // serde_json drops deep values recursively; leak them instead of
        // overflowing the test thread's stack.
        core::mem::forget(schema);
        core::mem::forget(value);
    }
}
