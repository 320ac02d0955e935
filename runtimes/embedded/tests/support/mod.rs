//! Host-side helpers shared by the tests and `examples/host.rs`: an
//! `embedded-io` adapter over `std::net::TcpStream`, a deterministic clock,
//! a counting global allocator (heap high-water mark of one thread) and the
//! two-step tool turn.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicI64, Ordering};

/// An `std::io::Error` kind as an `embedded_io::Error`.
#[derive(Debug)]
pub struct IoError(pub std::io::ErrorKind);

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::error::Error for IoError {}

impl embedded_io::Error for IoError {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::Other
    }
}

/// A `TcpStream` as an `embedded_io` link.
pub struct TcpLink(pub TcpStream);

impl TcpLink {
    /// Connects to `addr`.
    pub fn connect(addr: SocketAddr) -> Result<TcpLink, IoError> {
        TcpStream::connect(addr)
            .map(TcpLink)
            .map_err(|e| IoError(e.kind()))
    }
}

impl embedded_io::ErrorType for TcpLink {
    type Error = IoError;
}

impl embedded_io::Read for TcpLink {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, IoError> {
        self.0.read(buf).map_err(|e| IoError(e.kind()))
    }
}

impl embedded_io::Write for TcpLink {
    fn write(&mut self, buf: &[u8]) -> Result<usize, IoError> {
        self.0.write(buf).map_err(|e| IoError(e.kind()))
    }
    fn flush(&mut self) -> Result<(), IoError> {
        self.0.flush().map_err(|e| IoError(e.kind()))
    }
}

static CLOCK: AtomicI64 = AtomicI64::new(1_785_000_000_000);

/// A deterministic clock: every call is one millisecond later.
pub fn clock() -> i64 {
    CLOCK.fetch_add(1, Ordering::SeqCst)
}

/// The system allocator, counting the live bytes allocated and freed on
/// threads that switched counting on (so a mock server's threads in the
/// same process are not counted).
pub struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn count(delta: i64) {
    let _ = ON.try_with(|on| {
        if on.get() {
            let _ = LIVE.try_with(|live| {
                let now = live.get() + delta;
                live.set(now);
                let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
            });
        }
    });
}

// SAFETY: every call is forwarded to `System` unchanged; the counters are
// const-initialised thread-local cells that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as i64));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// Heap figures of one measured run, in bytes above the level at its start.
#[derive(Clone, Copy, Debug)]
pub struct HeapFigures {
    /// The high-water mark.
    pub peak: i64,
    /// Still allocated when the run returned (what its value keeps).
    pub retained: i64,
}

/// Runs `f` counting this thread's heap; returns its value and the figures.
pub fn heap_high_water<T>(f: impl FnOnce() -> T) -> (T, HeapFigures) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    ON.with(|on| on.set(true));
    let value = f();
    ON.with(|on| on.set(false));
    let figures = HeapFigures {
        peak: PEAK.with(Cell::get),
        retained: LIVE.with(Cell::get),
    };
    (value, figures)
}

/// Bytes live now on this thread, relative to the start of the measured run.
pub fn live_now() -> i64 {
    LIVE.with(Cell::get)
}

/// Capacity reserved for an in-memory log sink before a measured run, so
/// the figures count the shell and not the test's stand-in for a flash
/// region or UART.
pub const LOG_CAPACITY: usize = 64 * 1024;

/// The two-step tool turn of the host test and example: the model calls
/// `temperature`, then answers with text.
pub const TWO_STEP_SCRIPT: &str = r#"{"responses":[
  {"turn":{"toolCalls":[{"id":"call_1","name":"temperature","arguments":["{\"unit\":","\"C\"}"]}],
           "usage":{"prompt_tokens":50,"completion_tokens":10,"total_tokens":60}}},
  {"turn":{"text":["It is ","21.5 C."],
           "usage":{"prompt_tokens":70,"completion_tokens":5,"total_tokens":75}}}
]}"#;

/// The tool of [`TWO_STEP_SCRIPT`].
pub fn temperature(
    args: &str,
    out: &mut dsh_embedded::ToolOutput,
) -> Result<(), dsh_embedded::ToolError> {
    if args.contains("\"C\"") {
        out.push_str("21.5 C");
        Ok(())
    } else {
        out.push_str("unsupported unit");
        Err(dsh_embedded::ToolError)
    }
}

/// [`temperature`] as a registered tool.
pub const TEMPERATURE: dsh_embedded::Tool = dsh_embedded::Tool {
    name: "temperature",
    description: "Read the board temperature",
    parameters: r#"{"type":"object","properties":{"unit":{"type":"string","enum":["C","F"]}},"required":["unit"]}"#,
    run: temperature,
};
