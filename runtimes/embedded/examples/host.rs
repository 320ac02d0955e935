//! The embedded shell on a host: `embedded-io` over a std `TcpStream` to
//! the mock DeepSeek server (or any endpoint given as `HOST:PORT`), one
//! two-step tool turn, the JSONL session log written to a file.
//!
//! ```text
//! cargo run -p dsh-embedded --example host -- [LOG_PATH] [HOST:PORT]
//! dsh log check LOG_PATH && dsh replay --check LOG_PATH
//! ```
//!
//! Without `HOST:PORT` it starts the mock server with a scripted two-step
//! tool turn. It prints the heap high-water mark of the turn.

#[path = "../tests/support/mod.rs"]
mod support;

use std::net::{SocketAddr, ToSocketAddrs};

use dsh_deepseek::mock::{MockServer, Script};
use dsh_embedded::{Shell, ShellConfig};
use support::{
    Counting, LOG_CAPACITY, TEMPERATURE, TWO_STEP_SCRIPT, TcpLink, clock, heap_high_water,
};

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let log_path = args
        .next()
        .unwrap_or_else(|| String::from("embedded-session.jsonl"));
    let (_server, addr, host): (Option<MockServer>, SocketAddr, String) = match args.next() {
        Some(host) => {
            let addr = host
                .to_socket_addrs()
                .map_err(|e| format!("{host}: {e}"))?
                .next()
                .ok_or_else(|| format!("{host}: no address"))?;
            (None, addr, host)
        }
        None => {
            let script = Script::from_json(TWO_STEP_SCRIPT).map_err(|e| e.to_string())?;
            let server = MockServer::start(script).map_err(|e| e.to_string())?;
            let addr = server.addr();
            (Some(server), addr, addr.to_string())
        }
    };
    let mut config = ShellConfig::new(host, "host-example");
    config.api_key = std::env::var("DEEPSEEK_API_KEY").ok();
    let sink = Vec::with_capacity(LOG_CAPACITY);
    let (result, heap) = heap_high_water(|| {
        let mut shell = Shell::new(
            config,
            &[TEMPERATURE],
            clock,
            move || TcpLink::connect(addr),
            sink,
        )
        .map_err(|e| e.to_string())?;
        shell
            .prompt("How warm is the board?")
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(shell.into_parts().1)
    });
    let log = result?;
    std::fs::write(&log_path, &log).map_err(|e| format!("{log_path}: {e}"))?;
    println!(
        "wrote {} lines to {log_path}",
        log.iter().filter(|b| **b == b'\n').count()
    );
    println!(
        "heap high-water mark of the turn: {} bytes (log sink excluded)",
        heap.peak
    );
    Ok(())
}
