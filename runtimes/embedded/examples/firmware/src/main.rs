//! A firmware-style `thumbv7em-none-eabihf` binary that links the whole
//! embedded shell (agent core, DeepSeek codec, HTTP/1.1 codec, JSONL log
//! writer) to measure its code size: `runtimes/embedded/measure.sh`.
//!
//! The model link replays a canned HTTP response from flash (read
//! volatilely, so the parsers cannot be folded away); the log sink discards
//! its bytes; the heap is a bump allocator over a static array; panics
//! loop. A real firmware swaps in its UART or TCP socket, a flash log
//! region and a freeing allocator.

#![no_std]
#![no_main]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::convert::Infallible;
use core::panic::PanicInfo;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use dsh_embedded::{Shell, ShellConfig, Tool, ToolError, ToolOutput};

const HEAP_SIZE: usize = 96 * 1024;

struct Heap(UnsafeCell<[u8; HEAP_SIZE]>);

// SAFETY: the bump allocator hands out disjoint ranges (atomic cursor).
unsafe impl Sync for Heap {}

static HEAP: Heap = Heap(UnsafeCell::new([0; HEAP_SIZE]));

struct Bump {
    next: AtomicUsize,
}

// SAFETY: every returned range is inside HEAP, aligned, and handed out once.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = HEAP.0.get() as usize;
        let mut current = self.next.load(Ordering::Relaxed);
        loop {
            let start = (base + current + layout.align() - 1) & !(layout.align() - 1);
            let end = start - base + layout.size();
            if end > HEAP_SIZE {
                return core::ptr::null_mut();
            }
            match self
                .next
                .compare_exchange(current, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return start as *mut u8,
                Err(seen) => current = seen,
            }
        }
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOCATOR: Bump = Bump {
    next: AtomicUsize::new(0),
};

#[panic_handler]
fn panic(_: &PanicInfo) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// A canned streamed response (chunked SSE).
static RESPONSE: [u8; 176] = *b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n55\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n\r\n0\r\n\r\n";

/// The model link: the canned response, read volatilely.
struct Link {
    at: usize,
}

impl embedded_io::ErrorType for Link {
    type Error = Infallible;
}

impl embedded_io::Read for Link {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        let mut n = 0;
        while n < buf.len() && self.at < RESPONSE.len() {
            // SAFETY: `self.at` is in bounds of RESPONSE.
            buf[n] = unsafe { core::ptr::read_volatile(RESPONSE.as_ptr().add(self.at)) };
            n += 1;
            self.at += 1;
        }
        Ok(n)
    }
}

impl embedded_io::Write for Link {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// The log sink: discards.
struct Discard;

impl embedded_io::ErrorType for Discard {
    type Error = Infallible;
}

impl embedded_io::Write for Discard {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// Milliseconds since boot (a timer interrupt would advance it).
static TICKS: AtomicU32 = AtomicU32::new(0);

/// Epoch ms: a boot time (from an RTC or the network) plus the ticks.
fn clock() -> i64 {
    1_785_000_000_000 + i64::from(TICKS.fetch_add(1, Ordering::Relaxed))
}

fn led(args: &str, out: &mut ToolOutput) -> Result<(), ToolError> {
    if args.contains("true") {
        out.push_str("on");
        Ok(())
    } else {
        out.push_str("off");
        Ok(())
    }
}

#[unsafe(link_section = ".vector_table.reset")]
#[unsafe(no_mangle)]
static RESET_VECTOR: extern "C" fn() -> ! = reset;

#[unsafe(no_mangle)]
extern "C" fn reset() -> ! {
    let tools = [Tool {
        name: "led",
        description: "Switch the LED",
        parameters: r#"{"type":"object","properties":{"on":{"type":"boolean"}},"required":["on"]}"#,
        run: led,
    }];
    let config = ShellConfig::new("api.deepseek.com", "fw-1");
    let opener = || Ok::<Link, Infallible>(Link { at: 0 });
    if let Ok(mut shell) = Shell::new(config, &tools, clock, opener, Discard) {
        let _ = shell.prompt("hello");
    }
    loop {
        core::hint::spin_loop();
    }
}
