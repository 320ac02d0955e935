"""A minimal OpenAI-compatible upstream for the LiteLLM proxy.

LiteLLM's `mock_response` cannot stream a tool call (its streaming mock
sends text only, and `mock_tool_calls` applies to non-streamed answers), so
the `*-tool` model groups of config.yaml route to this server instead: a
real upstream whose stream LiteLLM re-streams on its OpenAI route and
translates into Anthropic SSE on its /v1/messages route.

It answers POST .../chat/completions with a streamed call of dsh's `read`
tool on `notes.txt`; once the request carries a tool result, with a text
answer quoting that result. Standard library only; 127.0.0.1 only.

Usage: python3 upstream.py PORT
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chunk(delta, finish=None):
    return {
        "id": "chatcmpl-upstream",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "upstream",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.reply(200, b'{"object":"list","data":[]}', "application/json")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        results = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        if results:
            content = results[-1].get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            said = " ".join(str(content).split())
            events = [
                chunk({"role": "assistant", "content": "The tool said: "}),
                chunk({"content": said}),
                chunk({}, "stop"),
            ]
        else:
            args = json.dumps({"file_path": "notes.txt"})
            events = [
                chunk({"role": "assistant", "content": None, "tool_calls": [
                    {"index": 0, "id": "call_up_1", "type": "function",
                     "function": {"name": "read", "arguments": ""}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:10]}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[10:]}}]}),
                chunk({}, "tool_calls"),
            ]
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        last = {"id": "chatcmpl-upstream", "object": "chat.completion.chunk", "created": 1,
                "model": "upstream", "choices": [], "usage": usage}
        data = "".join("data: " + json.dumps(e) + "\n\n" for e in events + [last])
        self.reply(200, (data + "data: [DONE]\n\n").encode(), "text/event-stream")

    def reply(self, status, payload, kind):
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
