//! `dsh mock-server`: the scripted mock DeepSeek server on 127.0.0.1
//! (script format: the `dsh_deepseek::mock` docs).

use std::io::{self, Read};
use std::path::PathBuf;

use clap::Args;
use dsh_deepseek::mock::{MockServer, Script};

use crate::Outcome;
use crate::input::read_input;
use crate::sanitize::eprintln_safe;

/// `dsh mock-server --script FILE [--port N]`
#[derive(Args)]
pub struct MockServerArgs {
    /// The script: `{"responses":[{"turn":{…}} | {"fault":{…}}, …]}`.
    #[arg(long)]
    script: PathBuf,
    /// Port on 127.0.0.1 (default: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

/// Serves until standard input reaches EOF (or the process is interrupted).
/// Prints `http://127.0.0.1:PORT` on the first line of stdout.
pub fn run(args: MockServerArgs) -> Outcome {
    let script = match read_input(Some(&args.script)).and_then(|b| {
        serde_json::from_slice::<Script>(&b)
            .map_err(|e| format!("{}: not a mock script: {e}", args.script.display()))
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    let server = match MockServer::start_on(script, args.port) {
        Ok(s) => s,
        Err(e) => {
            eprintln_safe!("cannot listen on 127.0.0.1:{}: {e}", args.port);
            return Outcome::BadInput;
        }
    };
    // tty: our own loopback URL.
    println!("{}", server.url());
    let mut sink = Vec::new();
    let _ = io::stdin().lock().read_to_end(&mut sink);
    drop(server);
    Outcome::Ok
}
