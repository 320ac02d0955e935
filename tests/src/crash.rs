//! Shared by the crash-injection test and its helper binary: the store
//! kinds and the deterministic event stream.

use std::path::Path;

use dsh_core::jsonl::{Decoded, Decoder, Record};
use dsh_core::session::SessionEvent;
use dsh_store::{CoordinatorConfig, SessionStore, StoreError};

/// Opens the store `kind` (`jsonl`, `jsonl-raw`, `redb`, `postgres`) at
/// `path` (a root directory, the database file for redb, the schema name
/// for postgres, whose server is `$DSH_TEST_POSTGRES_URL`).
pub fn open_store(kind: &str, path: &Path) -> Result<Box<dyn SessionStore>, StoreError> {
    let coordinator = CoordinatorConfig::default();
    match kind {
        "jsonl" | "jsonl-raw" => {
            let mut config = dsh_jsonl::JsonlConfig::new(path);
            config.coordinator = coordinator;
            if kind == "jsonl-raw" {
                config.compression = dsh_jsonl::Compression::None;
            }
            Ok(Box::new(dsh_jsonl::open(config)?))
        }
        "redb" => Ok(Box::new(dsh_redb::open(path, coordinator)?)),
        "postgres" => {
            let env = dsh_postgres::raw::TEST_URL_ENV;
            let url = std::env::var(env).map_err(|_| StoreError::Invalid {
                message: format!("the postgres kind needs {env}"),
            })?;
            let mut config = dsh_postgres::PgConfig::new(dsh_postgres::StoreUrl::parse(&url)?);
            config.schema = Some(path.display().to_string());
            config.coordinator = coordinator;
            Ok(Box::new(dsh_postgres::open(config)?))
        }
        other => Err(StoreError::Invalid {
            message: format!("unknown store kind {other}"),
        }),
    }
}

fn ev(line: &str) -> SessionEvent {
    match Decoder::new().decode_line(line.as_bytes()) {
        Ok(Record::One(Decoded::Event(e))) => e,
        other => panic!("generator produced an invalid event {line}: {other:?}"),
    }
}

/// The text of the user message at `seq`.
pub fn user_text(seq: u64) -> String {
    format!("u{seq}")
}

/// An endless, deterministic stream of complete turns: `turn/start`, a user
/// message, a step with a packable run of text deltas, an assistant message
/// requesting one tool, `tool/call`, `tool/result`, `step/end`, `turn/end`.
pub struct TurnGen {
    seq: u64,
    turn: u64,
    pos: usize,
    call_seq: u64,
}

const DELTAS: usize = 6;

impl TurnGen {
    /// Continues a log of `next_seq` events whose next turn is `next_turn`.
    pub fn new(next_seq: u64, next_turn: u64) -> Self {
        TurnGen {
            seq: next_seq,
            turn: next_turn,
            pos: 0,
            call_seq: 0,
        }
    }

    /// The next event.
    pub fn next_event(&mut self) -> SessionEvent {
        let (s, t) = (self.seq, self.turn);
        let time = 1_000 + s as i64;
        let call = format!("c{t}");
        let line = match self.pos {
            0 => format!(
                "{{\"type\":\"turn/start\",\"seq\":{s},\"time\":{time},\"data\":{{\"turn\":{t}}}}}"
            ),
            1 => format!(
                "{{\"type\":\"user/message\",\"seq\":{s},\"time\":{time},\"data\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}],\"source\":{{\"kind\":\"user\"}},\"role\":\"user\",\"id\":\"m{s}\"}},\"surfaceOp\":\"append\"}}",
                user_text(s)
            ),
            2 => format!(
                "{{\"type\":\"step/start\",\"seq\":{s},\"time\":{time},\"data\":{{\"turn\":{t},\"step\":1}}}}"
            ),
            p if p < 3 + DELTAS => format!(
                "{{\"type\":\"assistant/chunk\",\"seq\":{s},\"time\":{time},\"data\":{{\"turn\":{t},\"step\":1,\"chunk\":{{\"type\":\"text-delta\",\"index\":0,\"text\":\"d{s} \"}}}}}}"
            ),
            p if p == 3 + DELTAS => format!(
                "{{\"type\":\"assistant/message\",\"seq\":{s},\"time\":{time},\"data\":{{\"turn\":{t},\"step\":1,\"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"tool-call\",\"id\":\"{call}\",\"name\":\"bash\",\"arguments\":\"{{}}\"}}],\"source\":{{\"kind\":\"model\",\"provider\":\"p\",\"model\":\"m\"}},\"id\":\"a{s}\"}}}},\"surfaceOp\":\"append\"}}"
            ),
            p if p == 4 + DELTAS => {
                self.call_seq = s;
                format!(
                    "{{\"type\":\"tool/call\",\"seq\":{s},\"time\":{time},\"data\":{{\"turn\":{t},\"step\":1,\"callId\":\"{call}\",\"name\":\"bash\",\"arguments\":\"{{}}\"}}}}"
                )
            }
            p if p == 5 + DELTAS => format!(
                "{{\"type\":\"tool/result\",\"seq\":{s},\"time\":{time},\"data\":{{\"turn\":{t},\"step\":1,\"message\":{{\"id\":\"r{s}\",\"role\":\"user\",\"source\":{{\"kind\":\"tool\",\"callId\":\"{call}\"}},\"content\":[{{\"type\":\"tool-result\",\"toolCallId\":\"{call}\",\"content\":[{{\"type\":\"text\",\"text\":\"ok\"}}]}}]}}}},\"sourceEventSeqs\":[{}],\"surfaceOp\":\"append\"}}",
                self.call_seq
            ),
            p if p == 6 + DELTAS => format!(
                "{{\"type\":\"step/end\",\"seq\":{s},\"time\":{time},\"data\":{{\"turn\":{t},\"step\":1}}}}"
            ),
            _ => format!(
                "{{\"type\":\"turn/end\",\"seq\":{s},\"time\":{time},\"data\":{{\"turn\":{t},\"reason\":{{\"kind\":\"completed\"}}}}}}"
            ),
        };
        self.seq += 1;
        self.pos += 1;
        if self.pos > 7 + DELTAS {
            self.pos = 0;
            self.turn += 1;
        }
        ev(&line)
    }
}
