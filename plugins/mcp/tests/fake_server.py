"""A scripted MCP server over stdio for dsh-mcp's fault tests (stdlib only).

Usage: fake_server.py MODE. Every mode answers initialize and tools/list;
the tools behave by MODE: normal, crash, hang, malformed, huge, many,
listchanged. It logs what it receives to stderr.
"""
import json
import os
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "normal"
VERSION = os.environ.get("FAKE_VERSION", "2025-06-18")
state = {"listed": 0, "changed": False}


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def tools():
    if MODE == "many":
        return [{"name": "t%d" % i, "inputSchema": {"type": "object"}} for i in range(10000)]
    base = [
        {"name": "echo", "description": "Echoes text", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
        {"name": "env", "description": "Shows the environment", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
        {"name": "roots", "description": "Asks for the roots", "inputSchema": {"type": "object"}},
        {"name": "rich", "description": "Returns every block type", "inputSchema": {"type": "object"}},
        {"name": "fail", "description": "Returns isError", "inputSchema": {"type": "object"}},
    ]
    if state["changed"]:
        base = [t for t in base if t["name"] != "fail"]
    return base


pending_roots = {}

for raw in sys.stdin:
    raw = raw.strip()
    if not raw:
        continue
    msg = json.loads(raw)
    sys.stderr.write("got " + msg.get("method", "response") + "\n")
    sys.stderr.flush()
    if "method" not in msg:
        # A response to our roots/list request.
        call_id = pending_roots.pop(msg.get("id"), None)
        if call_id is not None:
            send({"jsonrpc": "2.0", "id": call_id, "result": {"content": [{"type": "text", "text": json.dumps(msg.get("result"))}]}})
        continue
    method = msg["method"]
    mid = msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": VERSION, "capabilities": {"tools": {"listChanged": True}, "resources": {}, "prompts": {}}, "serverInfo": {"name": "fake", "version": "1"}}})
    elif method == "tools/list":
        state["listed"] += 1
        all_tools = tools()
        if MODE == "many":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": all_tools}})
            continue
        cursor = (msg.get("params") or {}).get("cursor")
        # Two pages, to exercise pagination.
        if cursor is None:
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": all_tools[:2], "nextCursor": "p2"}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": all_tools[2:]}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        args = msg["params"].get("arguments", {})
        if MODE == "crash":
            sys.stderr.write("fake server: crashing on purpose\n")
            sys.stderr.flush()
            os._exit(3)
        if MODE == "hang":
            continue
        if MODE == "progress":
            import time
            token = (msg["params"].get("_meta") or {}).get("progressToken")
            for i in range(6):
                time.sleep(0.25)
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": i, "total": 6}})
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "slow but alive"}]}})
            continue
        if MODE == "malformed":
            sys.stdout.write('{"jsonrpc": "2.0", "id": \n')
            sys.stdout.flush()
            continue
        if MODE == "huge":
            chunk = "x" * (1024 * 1024)
            sys.stdout.write('{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"' % mid)
            for _ in range(100):
                sys.stdout.write(chunk)
            sys.stdout.write('"}]}}\n')
            sys.stdout.flush()
            continue
        if name == "echo":
            text = args.get("text", "")
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "echo: " + text}]}})
            if MODE == "listchanged":
                state["changed"] = True
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        elif name == "env":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "\n".join(sorted(os.environ.keys()))}]}})
        elif name == "roots":
            pending_roots[9001] = mid
            send({"jsonrpc": "2.0", "id": 9001, "method": "roots/list"})
        elif name == "rich":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [
                {"type": "text", "text": "one"},
                {"type": "resource_link", "name": "readme", "uri": "file:///r.md"},
                {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            ]}})
        elif name == "fail":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "it failed"}], "isError": True}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "unknown tool " + name}})
    elif method == "prompts/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"prompts": [
            {"name": "greet", "description": "Greets someone", "arguments": [{"name": "who", "required": True}]}
        ]}})
    elif method == "prompts/get":
        who = (msg["params"].get("arguments") or {}).get("who", "nobody")
        send({"jsonrpc": "2.0", "id": mid, "result": {"messages": [
            {"role": "user", "content": {"type": "text", "text": "Say hello to %s." % who}}
        ]}})
    elif method == "resources/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resources": [
            {"name": "readme", "uri": "mem:///readme", "mimeType": "text/plain", "description": "The readme"}
        ]}})
    elif method == "resources/read":
        uri = msg["params"]["uri"]
        if uri == "mem:///readme":
            send({"jsonrpc": "2.0", "id": mid, "result": {"contents": [{"uri": uri, "text": "read me first"}]}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32002, "message": "Resource not found"}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + method}})
