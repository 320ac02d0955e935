//! The scan rule over a key-value store's records (persistence.md 7.1, KV6,
//! KV10), shared by the redb and PostgreSQL stores: one event text per
//! record, in seq order.

use dsh_core::jsonl::{LogError, ScanError, Scanner, decode_header_line};
use dsh_core::session::{SeedError, SessionEvent, SessionHeader};

use crate::StoreError;

/// Feeds the records of one session, in key order, through the JSONL scan
/// rule: the valid contiguous prefix, and where a torn tail starts.
pub struct RecordScan {
    id: String,
    scanner: Scanner,
    records: u64,
    line: Vec<u8>,
}

impl RecordScan {
    /// A scan of session `id`'s records.
    pub fn new(id: &str) -> Self {
        RecordScan {
            id: id.to_owned(),
            scanner: Scanner::new(0),
            records: 0,
            line: Vec::with_capacity(512),
        }
    }

    /// The next record: `key_seq` is the seq of its key, `text` its event
    /// JSON. A record whose event has another seq, or a scan failure, is
    /// corruption.
    pub fn push(&mut self, key_seq: u64, text: &str) -> Result<(), StoreError> {
        let id = self.id.as_str();
        self.line.clear();
        self.line.extend_from_slice(text.as_bytes());
        self.line.push(b'\n');
        let before = self.scanner.events().len();
        self.scanner.feed(&self.line).map_err(|e| {
            let log = match e {
                ScanError::Corrupt { message } => LogError::Corrupt { message },
                ScanError::Invalid { index, error } => LogError::InvalidEvent {
                    session_id: id.to_owned(),
                    error: SeedError::new(index, error),
                },
                other => LogError::Corrupt {
                    message: other.to_string(),
                },
            };
            StoreError::from_log(id, log, None)
        })?;
        if let Some(first) = self.scanner.events().get(before)
            && first.seq() != key_seq
        {
            return Err(StoreError::corruption(
                id,
                format!(
                    "corrupt session log: record ({id}, {key_seq}) holds seq {}",
                    first.seq()
                ),
                None,
            ));
        }
        self.records += 1;
        Ok(())
    }

    /// The valid prefix, and the first seq to delete when records follow
    /// it (a torn tail).
    pub fn finish(self) -> (Vec<SessionEvent>, Option<u64>) {
        let records = self.records;
        let events = self.scanner.into_events();
        let torn = (records > events.len() as u64).then_some(events.len() as u64);
        (events, torn)
    }
}

/// Decodes the stored header line of session `id` and checks that it is
/// that session's.
pub fn decode_stored_header(id: &str, text: &str) -> Result<SessionHeader, StoreError> {
    let header =
        decode_header_line(text.as_bytes()).map_err(|e| StoreError::from_log(id, e, None))?;
    if header.id.as_str() != id {
        return Err(StoreError::corruption(
            id,
            format!(
                "the sessions entry of \"{id}\" holds the header of \"{}\"",
                header.id
            ),
            None,
        ));
    }
    Ok(header)
}
