//! A minimal decoder of the JSONL log format for the conformance tests:
//! packed chunk rows (persistence.md 5.4, CK14–CK16) expanded to their runs of
//! `assistant/chunk` events.
//!
//! This is deliberately small and independent of the session codec that the
//! core will grow later, so the conformance tests can cross-check it.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::value::RawValue;
use serde_json::{Map, Number, Value, json};

/// 2^53 − 1, the largest safe integer.
const MAX_SAFE: i64 = 9_007_199_254_740_991;

/// The three storage-row tags (CK14).
pub const ROW_TAGS: [&str; 3] = ["text-chunks", "reasoning-chunks", "tool-call-chunks"];

/// One session event of a log, after packed rows are expanded.
#[derive(Clone, Debug)]
pub struct LogEvent {
    /// 1-based line number of the line it came from.
    pub line: usize,
    /// Whether it came from a packed row rather than a verbatim line.
    pub packed: bool,
    /// The event value.
    pub value: Value,
    /// For a verbatim `assistant/chunk` line: the exact source text of its
    /// `data.chunk` value.
    pub chunk_source: Option<String>,
}

impl LogEvent {
    /// The event `type`.
    pub fn event_type(&self) -> Option<&str> {
        self.value.get("type").and_then(Value::as_str)
    }

    /// The event `seq`.
    pub fn seq(&self) -> Option<u64> {
        self.value.get("seq").and_then(Value::as_u64)
    }

    /// `data.<key>`.
    pub fn data(&self, key: &str) -> Option<&Value> {
        self.value.get("data").and_then(|d| d.get(key))
    }
}

/// A decoded log: the header line and every event.
#[derive(Clone, Debug)]
pub struct Log {
    /// The header (line 1), parsed.
    pub header: Value,
    /// The events, packed rows expanded, in file order.
    pub events: Vec<LogEvent>,
}

/// Reads and decodes a log file; any unparsable line or malformed row is an
/// error naming the line.
pub fn read_log(path: &Path) -> Result<Log, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    decode_log(&text)
}

/// Decodes the text of a log (see [`read_log`]).
pub fn decode_log(text: &str) -> Result<Log, String> {
    let mut lines = text.split('\n').enumerate();
    let header = match lines.next() {
        Some((_, line)) if !line.is_empty() => {
            serde_json::from_str(line).map_err(|e| format!("line 1: header is not JSON: {e}"))?
        }
        _ => return Err("empty log".into()),
    };
    let mut events = Vec::new();
    for (i, line) in lines {
        if line.is_empty() {
            continue;
        }
        let line_no = i + 1;
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("line {line_no}: not JSON: {e}"))?;
        match decode_row(&value).map_err(|e| format!("line {line_no}: {e}"))? {
            Some(expanded) => events.extend(expanded.into_iter().map(|value| LogEvent {
                line: line_no,
                packed: true,
                value,
                chunk_source: None,
            })),
            None => {
                let chunk_source = if value.get("type") == Some(&json!("assistant/chunk")) {
                    chunk_source(line)
                } else {
                    None
                };
                events.push(LogEvent {
                    line: line_no,
                    packed: false,
                    value,
                    chunk_source,
                });
            }
        }
    }
    Ok(Log { header, events })
}

/// The exact text of `data.chunk` in a verbatim event line.
fn chunk_source(line: &str) -> Option<String> {
    let event: BTreeMap<String, &RawValue> = serde_json::from_str(line).ok()?;
    let data: BTreeMap<String, &RawValue> = serde_json::from_str(event.get("data")?.get()).ok()?;
    Some(data.get("chunk")?.get().to_owned())
}

fn safe_int(v: &Value) -> Option<i64> {
    v.as_i64().filter(|n| n.abs() <= MAX_SAFE)
}

fn has_keys(obj: &Map<String, Value>, keys: &[&str]) -> bool {
    obj.len() == keys.len() && keys.iter().all(|k| obj.contains_key(*k))
}

/// Decodes one parsed line. `Ok(None)`: not a packed row, the line is a
/// single event (CK14). `Ok(Some(events))`: the row's run of
/// `assistant/chunk` events (CK16). `Err`: a malformed row (CK15).
pub fn decode_row(value: &Value) -> Result<Option<Vec<Value>>, String> {
    let Some(obj) = value.as_object() else {
        return Ok(None);
    };
    let Some(tag) = obj
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| ROW_TAGS.contains(t))
    else {
        return Ok(None);
    };
    let bad = |why: &str| format!("malformed {tag} storage row: {why}");
    if !has_keys(obj, &["type", "seq0", "time0", "data"]) {
        return Err(bad("keys must be exactly type, seq0, time0, data"));
    }
    let seq0 = safe_int(&obj["seq0"])
        .filter(|n| *n >= 0)
        .ok_or_else(|| bad("seq0 must be a non-negative safe integer"))?;
    let time0 = safe_int(&obj["time0"]).ok_or_else(|| bad("time0 must be a safe integer"))?;
    let data = obj["data"]
        .as_object()
        .ok_or_else(|| bad("data must be an object"))?;
    let tool = tag == "tool-call-chunks";
    let payload_key = if tool { "args" } else { "texts" };
    let keys_ok = if tool {
        has_keys(data, &["turn", "step", "index", "id", "dt", "args"])
            || has_keys(data, &["turn", "step", "index", "id", "name", "dt", "args"])
    } else {
        has_keys(data, &["turn", "step", "index", "dt", "texts"])
    };
    if !keys_ok {
        return Err(bad("unexpected data keys"));
    }
    for key in ["turn", "step", "index"] {
        if !data[key].is_number() {
            return Err(bad(&format!("{key} must be a number")));
        }
    }
    let (id, name) = if tool {
        let id = data["id"]
            .as_str()
            .ok_or_else(|| bad("id must be a string"))?;
        let name = match data.get("name") {
            None => None,
            Some(n) => Some(n.as_str().ok_or_else(|| bad("name must be a string"))?),
        };
        (Some(id), name)
    } else {
        (None, None)
    };
    let payload: Vec<&str> = data[payload_key]
        .as_array()
        .filter(|a| !a.is_empty())
        .and_then(|a| a.iter().map(Value::as_str).collect())
        .ok_or_else(|| {
            bad(&format!(
                "{payload_key} must be a non-empty list of strings"
            ))
        })?;
    let dt: Vec<i64> = data["dt"]
        .as_array()
        .and_then(|a| a.iter().map(safe_int).collect())
        .ok_or_else(|| bad("dt must be a list of safe integers"))?;
    if dt.len() != payload.len() - 1 {
        return Err(bad(&format!(
            "dt has {} entries for {} members",
            dt.len(),
            payload.len()
        )));
    }
    let last_seq = seq0 + payload.len() as i64 - 1;
    if last_seq > MAX_SAFE {
        return Err(bad("seq0 + members - 1 is not a safe integer"));
    }
    let delta_type = match tag {
        "text-chunks" => "text-delta",
        "reasoning-chunks" => "reasoning-delta",
        _ => "tool-call-delta",
    };
    let mut time = time0;
    let mut events = Vec::with_capacity(payload.len());
    for (k, fragment) in payload.iter().enumerate() {
        if k > 0 {
            time += dt[k - 1];
            if time.abs() > MAX_SAFE {
                return Err(bad("a running time is not a safe integer"));
            }
        }
        let mut chunk = Map::new();
        chunk.insert("type".into(), json!(delta_type));
        chunk.insert("index".into(), data["index"].clone());
        match id {
            Some(id) => {
                chunk.insert("id".into(), json!(id));
                if let Some(name) = name {
                    chunk.insert("name".into(), json!(name));
                }
                chunk.insert("argumentsDelta".into(), json!(fragment));
            }
            None => {
                chunk.insert("text".into(), json!(fragment));
            }
        }
        events.push(json!({
            "type": "assistant/chunk",
            "seq": Number::from(seq0 + k as i64),
            "time": Number::from(time),
            "data": {"turn": data["turn"], "step": data["step"], "chunk": chunk},
        }));
    }
    Ok(Some(events))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(line: &str) -> Result<Option<Vec<Value>>, String> {
        decode_row(&serde_json::from_str(line).unwrap())
    }

    #[test]
    fn tp1_text_run_expands_with_running_times() {
        let events = row(r#"{"type":"text-chunks","seq0":7,"time0":1000,"data":{"turn":2,"step":1,"index":0,"dt":[3,0,7,-1],"texts":["Hel","lo",","," wor","ld"]}}"#)
            .unwrap()
            .unwrap();
        let expected: Vec<Value> = [
            (7, 1000, "Hel"),
            (8, 1003, "lo"),
            (9, 1003, ","),
            (10, 1010, " wor"),
            (11, 1009, "ld"),
        ]
        .iter()
        .map(|(seq, time, text)| {
            json!({"type":"assistant/chunk","seq":seq,"time":time,
                   "data":{"turn":2,"step":1,"chunk":{"type":"text-delta","index":0,"text":text}}})
        })
        .collect();
        assert_eq!(events, expected);
        // CK16 key order.
        assert_eq!(
            serde_json::to_string(&events[1]).unwrap(),
            r#"{"type":"assistant/chunk","seq":8,"time":1003,"data":{"turn":2,"step":1,"chunk":{"type":"text-delta","index":0,"text":"lo"}}}"#
        );
    }

    #[test]
    fn tp2_tool_call_run_keeps_id_and_name() {
        let events = row(r#"{"type":"tool-call-chunks","seq0":28,"time0":5,"data":{"turn":1,"step":1,"index":1,"dt":[0,1],"id":"c","name":"bash","args":["","{","}"]}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(
            serde_json::to_string(&events[2]).unwrap(),
            r#"{"type":"assistant/chunk","seq":30,"time":6,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":1,"id":"c","name":"bash","argumentsDelta":"}"}}}"#
        );
        let nameless = row(r#"{"type":"tool-call-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":1,"dt":[0],"id":"c","args":["{","}"]}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            nameless[0]["data"]["chunk"],
            json!({"type":"tool-call-delta","index":1,"id":"c","argumentsDelta":"{"})
        );
    }

    #[test]
    fn reasoning_rows_become_reasoning_deltas() {
        let events = row(r#"{"type":"reasoning-chunks","seq0":10,"time0":1783352045425,"data":{"turn":1,"step":1,"index":0,"dt":[1,0],"texts":["The"," user"," wants"]}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            events[2],
            json!({"type":"assistant/chunk","seq":12,"time":1_783_352_045_426_i64,
                   "data":{"turn":1,"step":1,"chunk":{"type":"reasoning-delta","index":0,"text":" wants"}}})
        );
    }

    #[test]
    fn tp4_and_ck15_malformed_rows_are_rejected() {
        let err = row(r#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a","b"]}}"#)
            .unwrap_err();
        assert!(
            err.starts_with("malformed text-chunks storage row: "),
            "{err}"
        );
        for bad in [
            r#"{"type":"text-chunks","seq0":-1,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":1,"extra":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[1]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":"1","step":1,"index":0,"dt":[],"texts":["a"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[0.5],"texts":["a","b"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":9007199254740991,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}"#,
            r#"{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"args":["a"]}}"#,
            r#"{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"id":"c","name":7,"dt":[],"args":["a"]}}"#,
            r#"{"type":"reasoning-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"args":["a"]}}"#,
        ] {
            assert!(row(bad).is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn ck14_other_lines_are_single_events() {
        assert_eq!(row(r#"[1,2]"#).unwrap(), None);
        assert_eq!(row(r#"{"type":"turn/end","seq":3}"#).unwrap(), None);
        assert_eq!(row(r#"{"type":"text-chunk"}"#).unwrap(), None);
    }

    #[test]
    fn verbatim_chunk_lines_keep_their_source_text() {
        let log = decode_log(concat!(
            r#"{"type":"session","version":0,"id":"s","createdAt":1,"delegationDepth":0}"#,
            "\n",
            r#"{"type":"assistant/chunk","seq":0,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta", "index":0,"text":"\u00e9"}}}"#,
            "\n",
            r#"{"type":"text-chunks","seq0":1,"time0":2,"data":{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b","c"]}}"#,
            "\n"
        ))
        .unwrap();
        assert_eq!(log.events.len(), 4);
        assert_eq!(
            log.events[0].chunk_source.as_deref(),
            Some(r#"{"type":"text-delta", "index":0,"text":"\u00e9"}"#)
        );
        assert!(log.events[1..].iter().all(|e| e.packed && e.line == 3));
        assert_eq!(
            log.events.iter().map(|e| e.seq()).collect::<Vec<_>>(),
            vec![Some(0), Some(1), Some(2), Some(3)]
        );
    }
}
