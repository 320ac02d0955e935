"""A scripted streamable-HTTP MCP server for dsh-mcp's tests (stdlib only).

Prints its port on stdout, then serves 127.0.0.1. Sessions are numbered;
the tool `expire` ends the current session (its next request gets 404);
`sse` answers over an event stream; `bad` answers with a body that is not
JSON-RPC. Every request's MCP headers are appended to the file in argv[1].
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = sys.argv[1]
state = {"sessions": 0, "live": set()}


def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=None, headers=None, ctype="application/json"):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if body is not None:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(405)

    def do_DELETE(self):
        log("DELETE session=%s" % self.headers.get("Mcp-Session-Id"))
        self.reply(200)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        msg = json.loads(self.rfile.read(n))
        sid = self.headers.get("Mcp-Session-Id")
        log("%s session=%s version=%s auth=%s" % (
            msg.get("method"), sid, self.headers.get("MCP-Protocol-Version"),
            "yes" if self.headers.get("Authorization") else "no"))
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            state["sessions"] += 1
            new = "s%d" % state["sessions"]
            state["live"].add(new)
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake-http", "version": "1"}}}, {"Mcp-Session-Id": new})
        if sid not in state["live"]:
            return self.reply(404, {"error": "unknown session"})
        if mid is None:
            return self.reply(202)
        if method == "tools/list":
            tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ("echo", "sse", "expire", "bad")]
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
        if method == "tools/call":
            name = msg["params"]["name"]
            result = {"content": [{"type": "text", "text": "%s in %s" % (name, sid)}]}
            if name == "expire":
                state["live"].discard(sid)
            if name == "sse":
                body = "id: 1\nretry: 100\ndata: \n\nid: 2\ndata: %s\n\n" % json.dumps(
                    {"jsonrpc": "2.0", "id": mid, "result": result})
                return self.reply(200, body.encode(), ctype="text/event-stream")
            if name == "bad":
                return self.reply(200, b"{not json")
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": result})
        return self.reply(200, {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
