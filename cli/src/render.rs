//! Rendering of session events to a terminal: streamed text as it arrives,
//! reasoning dimmed (or hidden), one line per tool call with an argument
//! summary, tool results cut to a few lines (the full text stays in the
//! log), the turn's end reason when it did not complete, and token usage
//! with cache hits after every turn.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use dsh_core::session::{ChunkView, EventData, SessionEvent, TurnEndReason};
use dsh_core::{ContentBlock, TokenUsage};

use crate::sanitize::terminal;

const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const CYAN: &str = "\x1b[36m";
const RED: &str = "\x1b[31m";
const RESET: &str = "\x1b[0m";

/// How the renderer writes.
#[derive(Clone, Copy, Debug)]
pub struct RenderOptions {
    /// Leave reasoning out entirely.
    pub hide_reasoning: bool,
    /// Emit ANSI styles (dim reasoning, colored tool lines).
    pub color: bool,
    /// Lines of a tool result shown before the cut.
    pub result_lines: usize,
    /// Characters per shown line (argument summaries, result lines).
    pub width: usize,
    /// The output is a terminal: text streams as it arrives, and the text
    /// of an attempt that is retried is erased. Otherwise an attempt's text
    /// is held until the attempt succeeds, so the output matches the log.
    pub live: bool,
    /// Retry notices and turn errors go to stderr (`dsh run`), not into
    /// the answer.
    pub stderr_notices: bool,
    /// The longest retry wait (`--max-retry-wait`), in milliseconds, to
    /// explain a turn ended by a longer `Retry-After`.
    pub max_retry_wait_ms: f64,
    /// Terminal columns, to count wrapped rows when erasing.
    pub columns: usize,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            hide_reasoning: false,
            color: false,
            result_lines: 6,
            width: 100,
            live: false,
            stderr_notices: false,
            max_retry_wait_ms: 10_000.0,
            columns: 80,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// At the start of a line, nothing streaming.
    LineStart,
    /// Mid-line in streamed text.
    Text,
    /// Mid-line in streamed reasoning.
    Reasoning,
}

/// What a finished turn looked like, for exit codes and the usage line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnOutcome {
    /// The turn number.
    pub turn: u64,
    /// The `turn/end` reason kind (`completed`, `aborted`, `error`, …).
    pub reason: String,
    /// The error message of an `error` end.
    pub error: Option<String>,
    /// Usage summed over the turn's model calls.
    pub usage: TokenUsage,
}

/// Renders session events one by one into a writer.
#[derive(Debug)]
pub struct Renderer {
    options: RenderOptions,
    mode: Mode,
    usage: TokenUsage,
    /// Whether any model call of the turn reported usage.
    saw_usage: bool,
    /// A status line ("waiting for the model") is on screen.
    status_shown: bool,
    spinner: usize,
    /// Not live: the current attempt's rendered text, not yet shown.
    held: Vec<u8>,
    /// The mode when the current attempt began.
    mode_at_attempt: Mode,
    /// Live: terminal rows completed and the column reached by the current
    /// attempt's text.
    rows: usize,
    col: usize,
    /// Inside an ANSI escape sequence while counting.
    in_escape: bool,
    /// A scheduled retry: when it starts.
    retry_at: Option<Instant>,
    /// The token estimate for a server that reports no usage.
    estimate: Estimate,
}

/// What the renderer tracks to estimate tokens when the server reports no
/// usage: the bytes of each message on the surface (by seq, replaced runs
/// dropped) and of the latest request header, and the turn's estimate so
/// far (the measure of `dsh_compaction::estimated_usage`).
#[derive(Debug, Default)]
struct Estimate {
    surface: std::collections::BTreeMap<u64, usize>,
    header: usize,
    input: u64,
    output: u64,
}

impl Estimate {
    /// Follows the surface through `event`.
    fn observe(&mut self, event: &SessionEvent) {
        if let EventData::RequestHeader(h) = event.data() {
            self.header = dsh_compaction::header_bytes(&h.header);
        }
        if let Some(dsh_core::session::SurfaceOp::Replace { start, end }) = event.surface_op() {
            // `range` panics on an inverted range; a log may hold anything.
            self.surface.retain(|s, _| *s < start || *s > end);
        }
        if let Some(m) = event.derived_message() {
            self.surface
                .insert(event.seq(), dsh_compaction::message_bytes(m));
        }
    }

    /// Adds a model call without usage whose answer is `event`: the input
    /// is the surface before it plus the header, the output the answer.
    fn unreported(&mut self, event: &SessionEvent) {
        let before: usize = self.surface.values().sum::<usize>() + self.header;
        self.input += dsh_compaction::estimate_tokens(before);
        if let Some(m) = event.derived_message() {
            self.output += dsh_compaction::estimate_tokens(dsh_compaction::message_bytes(m));
        }
    }
}

/// The token-estimate surface of a log, built where the log is (the
/// agent's thread) so that the log itself is not copied; see
/// [`Renderer::adopt_surface`].
pub struct LogSurface(Estimate);

impl LogSurface {
    /// The surface `events` leave.
    pub fn of(events: &[SessionEvent]) -> LogSurface {
        let mut estimate = Estimate::default();
        for e in events {
            estimate.observe(e);
        }
        LogSurface(estimate)
    }
}

impl Renderer {
    /// A renderer with `options`.
    pub fn new(options: RenderOptions) -> Self {
        Renderer {
            options,
            mode: Mode::LineStart,
            usage: TokenUsage::default(),
            saw_usage: false,
            status_shown: false,
            spinner: 0,
            held: Vec::new(),
            mode_at_attempt: Mode::LineStart,
            rows: 0,
            col: 0,
            in_escape: false,
            retry_at: None,
            estimate: Estimate::default(),
        }
    }

    /// Takes `surface`, the session's past (a resumed session), as the
    /// surface so far without rendering it, so the token estimate knows it.
    pub fn adopt_surface(&mut self, surface: LogSurface) {
        self.estimate = surface.0;
    }

    /// A new model attempt begins: what follows is its text.
    fn begin_attempt(&mut self) {
        self.mode_at_attempt = self.mode;
        self.rows = 0;
        self.col = 0;
        self.in_escape = false;
    }

    /// Writes an attempt's rendered text: live to `out` (counting rows),
    /// otherwise into the held buffer.
    fn emit(&mut self, out: &mut dyn Write, bytes: &[u8]) -> io::Result<()> {
        if !self.options.live {
            self.held.extend_from_slice(bytes);
            return Ok(());
        }
        let columns = self.options.columns.max(1);
        for ch in String::from_utf8_lossy(bytes).chars() {
            if self.in_escape {
                self.in_escape = !ch.is_ascii_alphabetic();
                continue;
            }
            match ch {
                '\x1b' => self.in_escape = true,
                '\n' => {
                    self.rows += 1;
                    self.col = 0;
                }
                '\r' => self.col = 0,
                _ => {
                    if self.col >= columns {
                        self.rows += 1;
                        self.col = 0;
                    }
                    self.col += 1;
                }
            }
        }
        out.write_all(bytes)
    }

    /// Shows the held text of a successful attempt.
    fn release(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if !self.held.is_empty() {
            out.write_all(&self.held)?;
            self.held.clear();
        }
        Ok(())
    }

    /// The attempt failed and will be retried: its text disappears, from
    /// the screen (live) or before it was shown (held), so the output ends
    /// up as the log's answer.
    fn discard_attempt(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.clear_status(out)?;
        if self.options.live {
            if self.rows > 0 || self.col > 0 {
                // tty: our own style codes.
                write!(out, "{}\r", self.style(RESET))?;
                if self.rows > 0 {
                    // tty: our own cursor movement.
                    write!(out, "\x1b[{}A", self.rows)?;
                }
                write!(out, "\x1b[J")?;
            }
        } else {
            self.held.clear();
        }
        self.mode = if self.options.live {
            Mode::LineStart
        } else {
            self.mode_at_attempt
        };
        self.begin_attempt();
        Ok(())
    }

    fn style(&self, style: &'static str) -> &'static str {
        if self.options.color { style } else { "" }
    }

    /// Ends the current line of streamed output, if one is open (and the
    /// reasoning style with it).
    pub fn end_line(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if self.mode == Mode::Reasoning {
            // tty: our own style codes.
            write!(out, "{}", self.style(RESET))?;
        }
        if self.mode != Mode::LineStart {
            writeln!(out)?;
        }
        self.mode = Mode::LineStart;
        Ok(())
    }

    /// Shows (or advances) the waiting status line; call it periodically
    /// while no token has arrived yet. Only for terminals.
    pub fn tick(&mut self, out: &mut dyn Write) -> io::Result<()> {
        const FRAMES: [&str; 4] = ["|", "/", "-", "\\"];
        if self.mode != Mode::LineStart {
            return Ok(());
        }
        let frame = FRAMES[self.spinner % FRAMES.len()];
        self.spinner = self.spinner.wrapping_add(1);
        let what = match self.retry_at {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                format!("retrying in {} s…", left.as_secs_f64().ceil() as u64)
            }
            None => "waiting for the model…".to_string(),
        };
        // tty: a spinner frame and our own status text.
        write!(
            out,
            "\r\x1b[K{}{frame} {what}{}",
            self.style(DIM),
            self.style(RESET)
        )?;
        self.status_shown = true;
        out.flush()
    }

    /// Erases the status line, if shown.
    pub fn clear_status(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if self.status_shown {
            write!(out, "\r\x1b[K")?;
            self.status_shown = false;
        }
        Ok(())
    }

    /// A line of the front end's own (notices, errors), on its own line.
    pub fn notice(&mut self, out: &mut dyn Write, text: &str) -> io::Result<()> {
        self.clear_status(out)?;
        self.release(out)?;
        self.end_line(out)?;
        // A notice ends the live attempt's region: it is never erased.
        self.begin_attempt();
        let text = terminal(text);
        // tty: `text` went through terminal() above.
        writeln!(out, "{}{text}{}", self.style(DIM), self.style(RESET))?;
        out.flush()
    }

    /// Renders one event; returns the turn outcome on `turn/end`.
    pub fn event(
        &mut self,
        out: &mut dyn Write,
        event: &SessionEvent,
    ) -> io::Result<Option<TurnOutcome>> {
        let mut ended = None;
        if let EventData::AssistantMessage(m) = event.data()
            && m.usage.is_none()
        {
            self.estimate.unreported(event);
        }
        self.estimate.observe(event);
        match event.data() {
            EventData::TurnStart(_) => {
                self.usage = TokenUsage::default();
                self.saw_usage = false;
                self.estimate.input = 0;
                self.estimate.output = 0;
            }
            EventData::StepStart(_) | EventData::LlmRetryStarted(_) => {
                self.retry_at = None;
                self.begin_attempt();
            }
            EventData::LlmRetry(retry) => {
                self.discard_attempt(out)?;
                let delay = retry.delay_ms.max(0.0) / 1000.0;
                let of = match retry.max_retries {
                    Some(m) => format!("{} of {m}", retry.retry),
                    None => format!("{}", retry.retry),
                };
                let text = format!(
                    "retrying in {delay:.1} s ({of}): {} ({})",
                    terminal(&retry.failure.message),
                    terminal(&retry.failure.code)
                );
                self.retry_at = Some(Instant::now() + Duration::from_secs_f64(delay.min(1e6)));
                if self.options.stderr_notices {
                    // tty: `text` is built from terminal() parts.
                    eprintln!("dsh: {text}");
                } else {
                    self.notice(out, &text)?;
                }
            }
            EventData::AssistantChunk(chunk) => {
                let mut buf: Vec<u8> = Vec::new();
                match chunk.view() {
                    ChunkView::TextDelta { text, .. } if !text.is_empty() => {
                        self.clear_status(out)?;
                        self.retry_at = None;
                        if self.mode == Mode::Reasoning {
                            self.end_line(&mut buf)?;
                        }
                        write!(buf, "{}", terminal(text))?;
                        self.mode = if text.ends_with('\n') {
                            Mode::LineStart
                        } else {
                            Mode::Text
                        };
                    }
                    ChunkView::ReasoningDelta { text, .. }
                        if !text.is_empty() && !self.options.hide_reasoning =>
                    {
                        self.clear_status(out)?;
                        self.retry_at = None;
                        if self.mode == Mode::Text {
                            self.end_line(&mut buf)?;
                        }
                        // Re-open the style on every delta: other output (a
                        // notice, the status line) may have reset it.
                        write!(buf, "{}{}", self.style(DIM), terminal(text))?;
                        self.mode = Mode::Reasoning;
                    }
                    _ => {}
                }
                if !buf.is_empty() {
                    self.emit(out, &buf)?;
                }
            }
            EventData::AssistantMessage(m) => {
                // The attempt succeeded: its text stays.
                self.release(out)?;
                self.begin_attempt();
                if let Some(u) = &m.usage {
                    self.saw_usage = true;
                    add_usage(&mut self.usage, u);
                }
                if m.interrupted {
                    self.end_line(out)?;
                    // tty: our own marker.
                    writeln!(out, "{}[interrupted]{}", self.style(DIM), self.style(RESET))?;
                }
            }
            EventData::ToolCall(call) => {
                self.clear_status(out)?;
                self.release(out)?;
                self.end_line(out)?;
                let summary = summarize_arguments(&call.arguments, self.options.width);
                writeln!(
                    out,
                    "{}{}▸ {}{}{} {summary}",
                    self.style(CYAN),
                    self.style(BOLD),
                    terminal(&call.name),
                    self.style(RESET),
                    self.style(DIM),
                )?;
                // tty: our own style codes.
                write!(out, "{}", self.style(RESET))?;
            }
            EventData::ToolResult(result) => {
                self.end_line(out)?;
                let mut text = String::new();
                let mut is_error = false;
                for block in &result.message.content {
                    if let ContentBlock::ToolResult {
                        content,
                        is_error: e,
                        ..
                    } = block
                    {
                        is_error |= e.unwrap_or(false);
                        for inner in content {
                            if let Some(t) = inner.as_text() {
                                if !text.is_empty() {
                                    text.push('\n');
                                }
                                text.push_str(t);
                            }
                        }
                    }
                }
                let shown = truncate_lines(&text, self.options.result_lines, self.options.width);
                let color = if is_error { RED } else { DIM };
                for line in shown.lines() {
                    let line = terminal(line);
                    // tty: `line` went through terminal() above.
                    writeln!(out, "  {}{line}{}", self.style(color), self.style(RESET))?;
                }
            }
            EventData::TurnEnd(end) => {
                self.clear_status(out)?;
                self.retry_at = None;
                // A failed last attempt's partial text is shown before the
                // error that ended it.
                self.release(out)?;
                self.end_line(out)?;
                let reason = end.reason.kind().to_string();
                let error = match &end.reason {
                    TurnEndReason::Error { error } => Some(error.message.clone()),
                    _ => None,
                };
                match &end.reason {
                    TurnEndReason::Completed => {}
                    // A limit or a plugin stopped the turn: say why.
                    TurnEndReason::Aborted {
                        cause: dsh_core::session::AbortCause::Hook { reason },
                        // tty: our own marker; the reason is sanitised.
                    } => writeln!(
                        out,
                        "{}[turn stopped: {}]{}",
                        self.style(DIM),
                        terminal(reason),
                        self.style(RESET)
                    )?,
                    // tty: our own marker.
                    TurnEndReason::Aborted { .. } => writeln!(
                        out,
                        "{}[turn cancelled]{}",
                        self.style(DIM),
                        self.style(RESET)
                    )?,
                    TurnEndReason::Error { error } => {
                        let mut line = format!(
                            "error: {} ({})",
                            terminal(&error.message),
                            terminal(&error.code)
                        );
                        if let Some(wait) = error
                            .provider_retry_after_ms
                            .filter(|w| *w > self.options.max_retry_wait_ms)
                        {
                            line.push_str(&format!(
                                "\nnot retried: the server asked to wait {:.0} s (Retry-After), longer than --max-retry-wait {:.0} s",
                                wait / 1000.0,
                                self.options.max_retry_wait_ms / 1000.0
                            ));
                        }
                        if self.options.stderr_notices {
                            // tty: `line` is built from terminal() parts and numbers.
                            eprintln!("{line}");
                        } else {
                            // tty: as above.
                            writeln!(out, "{}{line}{}", self.style(RED), self.style(RESET))?;
                        }
                    }
                    other => writeln!(
                        out,
                        "{}[turn ended: {}]{}",
                        self.style(DIM),
                        terminal(other.kind()),
                        self.style(RESET)
                    )?,
                }
                let usage = if self.saw_usage {
                    usage_line(&self.usage)
                } else if self.estimate.input + self.estimate.output > 0 {
                    format!(
                        "tokens: no usage reported; ~est. input {}, output {} (bytes/4)",
                        self.estimate.input, self.estimate.output
                    )
                } else {
                    "tokens: no usage reported".to_string()
                };
                // tty: token counts of our own.
                writeln!(out, "{}{usage}{}", self.style(DIM), self.style(RESET))?;
                ended = Some(TurnOutcome {
                    turn: end.turn,
                    reason,
                    error,
                    usage: self.usage,
                });
            }
            _ => {}
        }
        out.flush()?;
        Ok(ended)
    }
}

fn add_usage(total: &mut TokenUsage, u: &TokenUsage) {
    total.input_tokens += u.input_tokens;
    total.output_tokens += u.output_tokens;
    for (t, v) in [
        (&mut total.cache_read_tokens, u.cache_read_tokens),
        (&mut total.cache_write_tokens, u.cache_write_tokens),
        (&mut total.reasoning_tokens, u.reasoning_tokens),
    ] {
        if let Some(v) = v {
            *t = Some(t.unwrap_or(0) + v);
        }
    }
}

/// `tokens: input N (cache hit H), output M (reasoning R)`: input is the
/// billed input (uncached plus cache reads and writes, TU-2).
pub fn usage_line(u: &TokenUsage) -> String {
    let mut line = format!("tokens: input {}", u.billed_input());
    line.push_str(&format!(
        " (cache hit {})",
        u.cache_read_tokens.unwrap_or(0)
    ));
    line.push_str(&format!(", output {}", u.output_tokens));
    if let Some(r) = u.reasoning_tokens {
        line.push_str(&format!(" (reasoning {r})"));
    }
    line
}

/// A one-line summary of a tool call's raw argument text: the top-level
/// fields of a JSON object as `key=value` (strings quoted, newlines shown as
/// `⏎`), cut to `width` characters; text that is not an object is shown
/// as is, cut the same way.
pub fn summarize_arguments(arguments: &str, width: usize) -> String {
    let summary = match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(serde_json::Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}=\"{s}\""),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => arguments.to_string(),
    };
    cut(&terminal(&summary.replace('\n', "⏎")), width)
}

/// Characters shown of one argument value in an approval prompt.
pub const APPROVAL_VALUE_CHARS: usize = 2000;

/// The approval question for a call: the tool name and every argument in
/// full (up to [`APPROVAL_VALUE_CHARS`] each, a cut said so), one per line,
/// as JSON text passed through [`terminal`], so no control character in the
/// arguments can rewrite what the user reads.
pub fn approval_prompt(tool: &str, arguments: &str) -> String {
    let mut out = format!("allow {}?\n", terminal(tool));
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(serde_json::Value::Object(map)) => {
            for (k, v) in &map {
                out.push_str(&format!(
                    "  {}: {}\n",
                    terminal(k),
                    crate::sanitize::approval_value(v, APPROVAL_VALUE_CHARS)
                ));
            }
        }
        _ => out.push_str(&format!(
            "  arguments: {}\n",
            crate::sanitize::approval_value(
                &serde_json::Value::String(arguments.to_string()),
                APPROVAL_VALUE_CHARS
            )
        )),
    }
    out.push_str("[y]es / [n]o / [a]lways: ");
    out
}

/// Cuts `s` to at most `width` characters, marking a cut with `…`.
pub fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The first `max_lines` lines of `text`, each cut to `width`, plus a
/// `… (N more lines)` line when lines were dropped. Empty text shows
/// `(empty)`.
pub fn truncate_lines(text: &str, max_lines: usize, width: usize) -> String {
    if text.is_empty() {
        return "(empty)".to_string();
    }
    let total = text.lines().count();
    let mut out: Vec<String> = text
        .lines()
        .take(max_lines)
        .map(|l| cut(l, width))
        .collect();
    if total > max_lines {
        out.push(format!(
            "… ({} more lines; full text in the session log)",
            total - max_lines
        ));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::session::{AssistantChunk, AssistantMessage, ToolCall, TurnEnd, TurnStart};
    use dsh_core::{CallId, Message, StreamChunk};

    fn render(events: &[SessionEvent], options: RenderOptions) -> (String, Option<TurnOutcome>) {
        let mut r = Renderer::new(options);
        let mut out = Vec::new();
        let mut last = None;
        for e in events {
            if let Some(o) = r.event(&mut out, e).unwrap() {
                last = Some(o);
            }
        }
        (String::from_utf8(out).unwrap(), last)
    }

    fn chunk(seq: u64, c: StreamChunk) -> SessionEvent {
        SessionEvent::new(seq, 0, AssistantChunk::new(1, 1, c))
    }

    fn script() -> Vec<SessionEvent> {
        let mut msg = AssistantMessage::new(1, 1, Message::user("a", vec![]));
        msg.usage = Some({
            let mut usage = TokenUsage::new(10, 5);
            usage.cache_read_tokens = Some(90);
            usage.cache_write_tokens = None;
            usage.reasoning_tokens = Some(2);
            usage
        });
        vec![
            SessionEvent::new(0, 0, TurnStart::new(1)),
            chunk(
                1,
                StreamChunk::ReasoningDelta {
                    index: 0,
                    text: "hmm".into(),
                },
            ),
            chunk(
                2,
                StreamChunk::TextDelta {
                    index: 1,
                    text: "Hel".into(),
                },
            ),
            chunk(
                3,
                StreamChunk::TextDelta {
                    index: 1,
                    text: "lo".into(),
                },
            ),
            SessionEvent::new(4, 0, msg),
            SessionEvent::new(5, 0, TurnEnd::new(1, TurnEndReason::Completed)),
        ]
    }

    #[test]
    fn streams_text_and_dims_reasoning() {
        let options = RenderOptions {
            color: true,
            ..RenderOptions::default()
        };
        let (out, outcome) = render(&script(), options);
        assert!(out.starts_with("\x1b[2mhmm\x1b[0m\nHello\n"), "{out:?}");
        assert!(out.contains("tokens: input 100 (cache hit 90), output 5 (reasoning 2)"));
        let outcome = outcome.unwrap();
        assert_eq!(outcome.reason, "completed");
        assert_eq!(outcome.usage.cache_read_tokens, Some(90));
    }

    /// Without reported usage the token line shows the estimate,
    /// marked `~est.`: the input is the surface before the answer (the
    /// prompt, and a past message seen through `observe`), the output the
    /// answer, each a quarter of their JSON bytes.
    #[test]
    fn the_token_line_estimates_when_no_usage_is_reported() {
        let past = Message::user("p", vec![ContentBlock::text("x".repeat(400))]);
        let prompt = Message::user("u", vec![ContentBlock::text("y".repeat(800))]);
        let answer = Message::user("a", vec![ContentBlock::text("z".repeat(200))]);
        let est = |m: &Message| dsh_compaction::estimate_tokens(dsh_compaction::message_bytes(m));
        let input = dsh_compaction::estimate_tokens(
            dsh_compaction::message_bytes(&past) + dsh_compaction::message_bytes(&prompt),
        );
        assert!(input > est(&prompt));
        let mut r = Renderer::new(RenderOptions::default());
        // The surface so far taken whole, as a resumed chat does (built
        // where the log is, not copied).
        r.adopt_surface(LogSurface::of(&[SessionEvent::new(0, 0, past)]));
        let events = [
            SessionEvent::new(1, 0, TurnStart::new(1)),
            SessionEvent::new(2, 0, prompt),
            SessionEvent::new(3, 0, AssistantMessage::new(1, 1, answer.clone())),
            SessionEvent::new(4, 0, TurnEnd::new(1, TurnEndReason::Completed)),
        ];
        let mut out = Vec::new();
        for e in &events {
            r.event(&mut out, e).unwrap();
        }
        let out = String::from_utf8(out).unwrap();
        let line = format!(
            "tokens: no usage reported; ~est. input {input}, output {} (bytes/4)",
            est(&answer)
        );
        assert!(out.contains(&line), "{out}");
        // Reported usage is shown as reported, never as an estimate.
        let (out, _) = render(&script(), RenderOptions::default());
        assert!(!out.contains("~est."), "{out}");
    }

    #[test]
    fn hides_reasoning_on_request() {
        let options = RenderOptions {
            hide_reasoning: true,
            ..RenderOptions::default()
        };
        let (out, _) = render(&script(), options);
        assert!(!out.contains("hmm"));
        assert!(out.starts_with("Hello\n"), "{out:?}");
    }

    #[test]
    fn tool_call_line_summarizes_arguments() {
        let call = ToolCall::new(
            1,
            1,
            CallId("c1".into()),
            "write",
            r#"{"file_path":"a.txt","content":"x\ny"}"#,
        );
        let (out, _) = render(&[SessionEvent::new(0, 0, call)], RenderOptions::default());
        assert_eq!(out, "▸ write file_path=\"a.txt\" content=\"x⏎y\"\n");
    }

    fn retry_event(seq: u64) -> SessionEvent {
        SessionEvent::new(
            seq,
            0,
            dsh_core::session::LlmRetry {
                retry_id: None,
                turn: 1,
                step: 1,
                provider: "p".into(),
                mode: "normal".into(),
                policy_key: "k".into(),
                retry: 1,
                max_retries: Some(5),
                delay_ms: 500.0,
                failure: dsh_core::LlmFailure::new("TRANSPORT", "dropped"),
            },
        )
    }

    fn text_chunk(seq: u64, text: &str) -> SessionEvent {
        chunk(
            seq,
            StreamChunk::TextDelta {
                index: 0,
                text: text.into(),
            },
        )
    }

    #[test]
    fn item8_live_retry_erases_the_attempt_counting_wrapped_rows() {
        let options = RenderOptions {
            live: true,
            columns: 10,
            ..RenderOptions::default()
        };
        let mut r = Renderer::new(options);
        let mut out = Vec::new();
        // 25 characters wrap twice at 10 columns, then a newline, then 5.
        r.event(&mut out, &text_chunk(1, &"x".repeat(25))).unwrap();
        r.event(&mut out, &text_chunk(2, "\nabcde")).unwrap();
        out.clear();
        r.event(&mut out, &retry_event(3)).unwrap();
        let shown = String::from_utf8(out).unwrap();
        assert!(shown.starts_with("\r\x1b[3A\x1b[J"), "{shown:?}");
        assert!(
            shown.contains("retrying in 0.5 s (1 of 5): dropped (TRANSPORT)"),
            "{shown:?}"
        );
    }

    #[test]
    fn item8_held_text_of_a_retried_attempt_is_never_printed() {
        let mut r = Renderer::new(RenderOptions::default());
        let mut out = Vec::new();
        r.event(&mut out, &text_chunk(1, "One two")).unwrap();
        assert!(out.is_empty(), "held until the attempt succeeds");
        r.event(&mut out, &retry_event(2)).unwrap();
        r.event(&mut out, &text_chunk(3, "One two three")).unwrap();
        let msg = AssistantMessage::new(1, 1, Message::user("a", vec![]));
        r.event(&mut out, &SessionEvent::new(4, 0, msg)).unwrap();
        let shown = String::from_utf8(out).unwrap();
        assert_eq!(
            shown,
            "retrying in 0.5 s (1 of 5): dropped (TRANSPORT)\nOne two three"
        );
    }

    #[test]
    fn approval_prompt_cannot_be_spoofed() {
        // A CR and an erase-line try to paint a harmless command over the
        // real one.
        let args = r#"{"command":"rm -rf ~/work\r\u001b[2Kls -la","description":"list"}"#;
        let p = approval_prompt("bash", args);
        assert_eq!(
            p,
            "allow bash?\n  command: \"rm -rf ~/work\\r\\u001b[2Kls -la\"\n  description: \"list\"\n[y]es / [n]o / [a]lways: "
        );
        assert!(!p.contains('\r') && !p.contains('\x1b'));
        // Not an object: shown whole, quoted.
        let p = approval_prompt("x\x1b]0;t\x07", "not json\u{202e}");
        assert!(
            p.starts_with("allow x^[]0;t^G?\n  arguments: \"not json<U+202E>\""),
            "{p}"
        );
    }

    #[test]
    fn model_text_escapes_reach_the_screen_as_visible_text() {
        let events = vec![
            SessionEvent::new(0, 0, TurnStart::new(1)),
            chunk(
                1,
                StreamChunk::TextDelta {
                    index: 0,
                    text: "hi\x1b[2J\x1b]52;c;eA==\x07".into(),
                },
            ),
            chunk(
                2,
                StreamChunk::ReasoningDelta {
                    index: 1,
                    text: "\u{202e}think".into(),
                },
            ),
            SessionEvent::new(
                3,
                0,
                AssistantMessage::new(1, 1, Message::user("a", vec![])),
            ),
        ];
        let (out, _) = render(
            &events,
            RenderOptions {
                color: false,
                ..RenderOptions::default()
            },
        );
        assert!(
            !out.contains('\x1b') && !out.contains('\x07') && !out.contains('\u{202e}'),
            "{out:?}"
        );
        assert!(out.contains("hi^[[2J^[]52;c;eA==^G"), "{out:?}");
        assert!(out.contains("<U+202E>think"), "{out:?}");
    }

    #[test]
    fn long_results_are_cut() {
        let text = (1..=10)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let shown = truncate_lines(&text, 3, 80);
        assert_eq!(
            shown,
            "line 1\nline 2\nline 3\n… (7 more lines; full text in the session log)"
        );
        assert_eq!(cut("abcdef", 4), "abc…");
    }
}

/// A short recap of a resumed session: the last `max` user prompts and
/// assistant answers (text only, one line each, cut to `width`).
pub fn recap(events: &[SessionEvent], max: usize, width: usize) -> Vec<String> {
    // From the end: only the last `max` messages are rendered.
    let mut lines: Vec<String> = events
        .iter()
        .rev()
        .filter_map(|e| {
            let (prefix, message) = match e.data() {
                EventData::UserMessage(m) if matches!(m.source, dsh_core::MessageSource::User) => {
                    ("> ", m)
                }
                EventData::AssistantMessage(a) => ("", &a.message),
                _ => return None,
            };
            let text: Vec<&str> = message
                .content
                .iter()
                .filter(|b| matches!(b, ContentBlock::Text { .. }))
                .filter_map(ContentBlock::as_text)
                .collect();
            let text = text.join(" ");
            (!text.trim().is_empty())
                .then(|| cut(&format!("{prefix}{}", text.replace('\n', " ")), width))
        })
        .take(max)
        .collect();
    lines.reverse();
    lines
}

#[cfg(test)]
mod recap_tests {
    use super::*;
    use dsh_core::session::AssistantMessage;
    use dsh_core::{Message, MessageSource, Role};

    #[test]
    fn recap_keeps_the_last_prompts_and_answers() {
        let user = |seq, t: &str| {
            SessionEvent::new(
                seq,
                0,
                Message::user(format!("u{seq}"), vec![ContentBlock::text(t)]),
            )
        };
        let mut answer = Message::user(
            "a",
            vec![
                ContentBlock::reasoning("hidden"),
                ContentBlock::text("four\nlines"),
            ],
        );
        answer.role = Role::Assistant;
        answer.source = MessageSource::model("p", "m");
        let events = vec![
            user(0, "first"),
            user(1, "two plus two"),
            SessionEvent::new(2, 0, AssistantMessage::new(1, 1, answer)),
        ];
        assert_eq!(recap(&events, 2, 80), vec!["> two plus two", "four lines"]);
        assert_eq!(
            recap(&events, 5, 8),
            vec!["> first", "> two p…", "four li…"]
        );
    }
}
