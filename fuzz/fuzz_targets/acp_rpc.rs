//! `dsh acp`'s input: newline-delimited JSON-RPC 2.0 on stdin (the
//! transport's reader, `adapters/acp/src/rpc.rs`, and the typed reading of each
//! message, `adapters/acp/src/wire.rs`), on arbitrary bytes. No panic; every
//! line is a request, a notification, a routed response or an error with
//! the JSON-RPC code for it; requests and notifications survive a
//! re-encoding unchanged; the reader ends exactly once with `Closed`; both
//! requests this side sent are answered exactly once (by the client or by
//! the close); and every line written back (by the writer thread, drained
//! with `Peer::finish`) is one JSON-RPC 2.0 object.
#![no_main]

use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1::ClientRequest;
use dsh_acp::rpc::{Incoming, Peer, read_loop};
use dsh_acp::wire::{decode_notification, decode_request, prompt_text, supported};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// The peer's output, kept for the checks.
struct Out(Arc<Mutex<Vec<u8>>>);

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("output lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn code(e: &agent_client_protocol_schema::v1::Error) -> i32 {
    i32::from(e.code.clone())
}

/// The one message a re-encoded request or notification reads as.
fn reread(message: &Value) -> Incoming {
    let peer = Peer::new(Box::new(io::sink()));
    let line = serde_json::to_vec(message).expect("encodes");
    let mut got = Vec::new();
    read_loop(&peer, &line[..], |m| {
        got.push(m);
        true
    });
    assert_eq!(got.len(), 2, "one message and the close: {got:?}");
    got.swap_remove(0)
}

fuzz_target!(|data: &[u8]| {
    let written = Arc::new(Mutex::new(Vec::new()));
    let peer = Peer::new(Box::new(Out(written.clone())));
    // Two requests of our own wait for the client (ids 0 and 1).
    let answered = Arc::new(AtomicUsize::new(0));
    for method in ["session/request_permission", "fs/read_text_file"] {
        let answered = answered.clone();
        peer.request(method, &json!({}), move |_| {
            answered.fetch_add(1, Ordering::SeqCst);
        });
    }
    let mut closed = 0;
    let mut after_close = false;
    read_loop(&peer, data, |m| {
        after_close |= closed > 0;
        match m {
            Incoming::Request { id, method, params } => {
                assert!(matches!(
                    params,
                    Value::Object(_) | Value::Array(_) | Value::Null
                ));
                let again = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
                match reread(&again) {
                    Incoming::Request {
                        id: id2,
                        method: m2,
                        params: p2,
                    } => assert!(id2 == id && m2 == method && p2 == params),
                    other => panic!("{again} re-reads as {other:?}"),
                }
                match decode_request(&method, &params) {
                    Ok(ClientRequest::PromptRequest(r)) => {
                        match prompt_text(&r.prompt) {
                            Ok(text) => assert!(!text.trim().is_empty()),
                            Err(e) => assert_eq!(code(&e), -32602),
                        }
                        peer.respond(&id, Ok(json!({"stopReason": "end_turn"})));
                    }
                    Ok(_) => peer.respond(&id, Ok(json!({}))),
                    Err(e) => {
                        assert!(matches!(code(&e), -32601 | -32602), "{e:?}");
                        // A method the agent implements is known to the schema.
                        if code(&e) == -32601 {
                            assert!(!supported(&method), "{method}");
                        }
                        peer.respond::<()>(&id, Err(e));
                    }
                }
            }
            Incoming::Notification { method, params } => {
                let again = json!({"jsonrpc": "2.0", "method": method, "params": params});
                match reread(&again) {
                    Incoming::Notification {
                        method: m2,
                        params: p2,
                    } => assert!(m2 == method && p2 == params),
                    other => panic!("{again} re-reads as {other:?}"),
                }
                let _ = decode_notification(&method, &params);
            }
            Incoming::Invalid { id, error } => {
                assert!(matches!(code(&error), -32700 | -32600), "{error:?}");
                peer.respond::<()>(&id, Err(error));
            }
            Incoming::Closed => closed += 1,
        }
        true
    });
    assert_eq!(closed, 1, "the reader ends once");
    assert!(!after_close, "nothing follows the close");
    assert!(peer.input_closed());
    assert_eq!(answered.load(Ordering::SeqCst), 2, "each own request answered once");
    assert_eq!(peer.finish(), 0, "everything queued is written");
    let out = written.lock().expect("output lock");
    for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line).expect("every output line is JSON");
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
    }
    assert!(out.is_empty() || out.ends_with(b"\n"));
});
