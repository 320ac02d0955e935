//! Loading a raw transcript in pieces (6.2, RR1–RR2) with a stable stat
//! before and after (5.8): the events are decoded as the file is read, so a
//! long log is never held whole beside its events (resume memory).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use dsh_core::jsonl::{LogError, Scanner, count_newlines, decode_header_line, header_len};
use dsh_core::session::SessionHeader;
use dsh_store::StoreError;

use crate::fsio::Stat;

/// The bytes read at a time.
const PIECE: usize = 256 * 1024;
/// How often a file that changes while it is read is read again.
const TRIES: usize = 16;

/// A raw log after the scan: header, the valid prefix, the offset after
/// its last committed line, and the bytes read.
pub(crate) struct RawScan {
    /// The header.
    pub header: SessionHeader,
    /// The valid contiguous prefix of events.
    pub events: Vec<dsh_core::session::SessionEvent>,
    /// The offset just after the last committed line.
    pub committed: u64,
    /// The file's length as read.
    pub len: u64,
}

/// A scan's result (the log's own verdict) and the stable stat it was read at.
pub(crate) type RawRead = (Result<RawScan, LogError>, Stat);

/// Reads and scans the raw transcript at `path`; `None` when it does not
/// exist. The inner result is the scan's (what `scan_log` of the whole file
/// would give); the outer one an I/O failure or a file that kept changing.
pub(crate) fn read_raw(path: &Path) -> Result<Option<RawRead>, StoreError> {
    let io_error = |e: io::Error| StoreError::io(format!("read {}", path.display()), e);
    for _ in 0..TRIES {
        let Some(before) = Stat::of(path)? else {
            return Ok(None);
        };
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(e)),
        };
        let (scan, read) = scan_file(&mut file).map_err(io_error)?;
        let Some(after) = Stat::of(path)? else {
            return Ok(None);
        };
        if before == after && after.size() == read {
            return Ok(Some((scan, after)));
        }
    }
    Err(io_error(io::Error::other(
        "the file kept changing while it was read",
    )))
}

/// What `scan_log` says of a file without a complete header line.
fn header_less() -> LogError {
    LogError::Corrupt {
        message: String::from("corrupt session log: empty or header-less session log"),
    }
}

/// Fills `buf` from `file` as far as it goes; the count read (0: the end).
fn fill(file: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// The scan of `file` read in pieces, and the bytes read. A first pass
/// counts the lines so that the events are allocated once, at their size.
fn scan_file<F: Read + Seek>(file: &mut F) -> io::Result<(Result<RawScan, LogError>, u64)> {
    let mut piece = vec![0u8; PIECE];
    let mut lines = 0usize;
    loop {
        let n = fill(file, &mut piece)?;
        if n == 0 {
            break;
        }
        lines += count_newlines(piece.get(..n).unwrap_or(&[]));
    }
    file.seek(SeekFrom::Start(0))?;
    scan_pieces(file, piece, lines)
}

/// The scan proper: `buf` holds the bytes not yet scanned (a partial line
/// at most, or the header line until it is complete).
fn scan_pieces(
    file: &mut impl Read,
    mut piece: Vec<u8>,
    lines: usize,
) -> io::Result<(Result<RawScan, LogError>, u64)> {
    let mut buf: Vec<u8> = Vec::new();
    let mut read: u64 = 0;
    let mut state: Option<(SessionHeader, Scanner)> = None;
    let mut failed: Option<LogError> = None;
    loop {
        let n = fill(file, &mut piece)?;
        read += n as u64;
        if failed.is_some() {
            // Only the length is still needed (the stable-stat check).
            if n == 0 {
                break;
            }
            continue;
        }
        buf.extend_from_slice(piece.get(..n).unwrap_or(&[]));
        if state.is_none() {
            match header_len(&buf) {
                Some(hlen) => match decode_header_line(buf.get(..hlen).unwrap_or(&[])) {
                    Ok(header) => {
                        let mut scanner = Scanner::new(hlen);
                        scanner.reserve(lines.saturating_sub(1));
                        buf.drain(..hlen);
                        state = Some((header, scanner));
                    }
                    Err(e) => failed = Some(e),
                },
                None if n == 0 => {
                    failed = Some(header_less());
                }
                None => continue,
            }
        }
        let Some((header, scanner)) = state.as_mut() else {
            continue;
        };
        // Complete lines now; at the end the rest too (a final fragment
        // without `\n` is counted and left uncommitted, SC5).
        let upto = if n == 0 {
            buf.len()
        } else {
            match buf.iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None => continue,
            }
        };
        if let Err(e) = scanner.feed(buf.get(..upto).unwrap_or(&[])) {
            failed = Some(crate::backend::scan_error(header.id.as_str(), e));
        }
        buf.drain(..upto);
        if n == 0 {
            break;
        }
    }
    if let Some(e) = failed {
        return Ok((Err(e), read));
    }
    let Some((header, scanner)) = state else {
        // Unreachable: the end of the file either decodes a header or fails.
        return Ok((Err(header_less()), read));
    };
    let committed = scanner.committed() as u64;
    let mut events = scanner.into_events();
    events.shrink_to_fit();
    Ok((
        Ok(RawScan {
            header,
            events,
            committed,
            len: read,
        }),
        read,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::jsonl::scan_log;
    use std::io::Cursor;

    /// Reads `bytes` with pieces of every size in `sizes` and compares
    /// with the one-piece scan.
    fn same_as_whole(bytes: &[u8]) {
        let whole = scan_log(bytes);
        for size in [1usize, 2, 3, 7, 64, 4096, PIECE] {
            let piece = vec![0u8; size];
            let lines = count_newlines(bytes);
            let (scan, read) = scan_pieces(&mut Cursor::new(bytes), piece, lines).unwrap();
            assert_eq!(read, bytes.len() as u64);
            match (&whole, scan) {
                (Ok(w), Ok(s)) => {
                    assert_eq!(s.header, w.header, "piece {size}");
                    assert_eq!(s.events, w.events, "piece {size}");
                    assert_eq!(s.committed, w.committed as u64, "piece {size}");
                    assert_eq!(s.committed < s.len, w.torn, "piece {size}");
                }
                (Err(w), Err(s)) => assert_eq!(s.to_string(), w.to_string(), "piece {size}"),
                (w, s) => panic!(
                    "piece {size}: whole {:?} vs pieces {:?}",
                    w.as_ref().map(|_| ()),
                    s.map(|_| ())
                ),
            }
        }
    }

    const HEADER: &str =
        r#"{"type":"session","version":0,"id":"s1","createdAt":1,"cwd":"/w","delegationDepth":0}"#;

    fn log(lines: &[&str]) -> Vec<u8> {
        let mut out = format!("{HEADER}\n").into_bytes();
        for l in lines {
            out.extend_from_slice(l.as_bytes());
        }
        out
    }

    #[test]
    fn pieces_scan_like_the_whole_file() {
        let start = r#"{"type":"turn/start","seq":0,"time":2,"data":{"turn":1}}"#;
        let user = r#"{"type":"user/message","seq":1,"time":3,"data":{"content":[{"type":"text","text":"héllo 🙂"}],"source":{"kind":"user"},"role":"user","id":"m1"}}"#;
        let end = r#"{"type":"turn/end","seq":2,"time":4,"data":{"turn":1,"reason":{"kind":"completed"}}}"#;
        // Complete, torn (a final fragment), a gap, an unparsable line.
        let complete = log(&[start, "\n", user, "\n", end, "\n"]);
        assert_eq!(scan_log(&complete).unwrap().events.len(), 3);
        same_as_whole(&complete);
        assert_eq!(
            scan_log(&log(&[start, "\n", user, "\n", &end[..20]]))
                .unwrap()
                .events
                .len(),
            2
        );
        same_as_whole(&log(&[start, "\n", user, "\n", &end[..20]]));
        same_as_whole(&log(&[user, "\n"]));
        same_as_whole(&log(&[start, "\n", "{not json\n", end, "\n"]));
        // Header only, header without `\n`, empty, not JSON.
        same_as_whole(&log(&[]));
        same_as_whole(HEADER.as_bytes());
        same_as_whole(b"");
        same_as_whole(b"garbage\n");
    }

    #[test]
    fn a_missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_raw(&dir.path().join("nope")).unwrap().is_none());
    }
}
