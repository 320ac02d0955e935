#!/usr/bin/env python3
"""One scripted model for every agent of the peers comparison (standard library only).

Serves on 127.0.0.1 (port 0 = any free port; the URL is printed on the first line of
stdout) until stdin closes:

  POST .../chat/completions   OpenAI-compatible chat completions, streamed (SSE) or not
  POST .../responses          the OpenAI Responses API, streamed (`response.*` events)
  GET  .../models             an empty model list

Every answer follows the workload named by --workload and is decided from the request
alone (no server state), so runs of different agents can interleave:

  oneshot  the answer "done"
  tool20   a shell call `echo step-N` while the request holds fewer than 20 tool results,
           then "done"
  big      a 1 MiB answer in 1 KiB deltas
  resume   the answer "done" (the agent resumed a long session first)

The shell call takes the form the agent offers: a `bash` or `shell_command` tool
({"command": "..."}), `exec_command` ({"cmd": "..."}), `shell` ({"command": [argv]}), or,
for an agent that offers no tool, a fenced bash block in the text (mini-swe-agent's
format). A request whose system prompt asks for a title gets a short title.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STEPS = 20
BIG_BYTES = 1 << 20
DELTA_BYTES = 1024
MAX_BODY = 256 << 20  # the resume request carries a long history
DONE_TEXT = "done"
# mini-swe-agent ends its run on this first output line of a command.
MINI_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def text_of(content):
    """The text of a message content (string or list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                out.append(str(part.get("text") or ""))
        return "".join(out)
    return ""


def tool_schemas(body):
    """Tool name -> its parameters schema, as the request offers them."""
    tools = {}
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = fn.get("name")
        if isinstance(name, str):
            params = fn.get("parameters")
            tools[name] = params if isinstance(params, dict) else {}
    return tools


def pick_shell(names):
    for name in ("bash", "shell_command", "exec_command", "shell"):
        if name in names:
            return name
    return None


def shell_args(tool, command, schema):
    if tool == "exec_command":
        args = {"cmd": command}
    elif tool == "shell":
        args = {"command": ["bash", "-lc", command]}
    else:
        args = {"command": command}
    # Other required string fields (dsh's `description`) get a short text.
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    for field in schema.get("required") or []:
        if field not in args and isinstance(props.get(field), dict) and props[field].get("type") == "string":
            args[field] = "benchmark step"
    return args


def is_title_request(system_text):
    return system_text.lstrip().startswith("Write a title")


class Plan:
    """What to answer: text, or one shell call."""

    def __init__(self, text=None, call=None):
        self.text = text
        self.call = call  # (tool name, arguments dict, call id)


def plan_for(workload, steps_done, tools, system_text, submit):
    """The answer; `submit`: the agent ends its run with the MINI_SUBMIT command."""
    if is_title_request(system_text):
        return Plan(text="Benchmark session")
    tool = pick_shell(tools)
    schema = tools.get(tool) or {}
    if workload == "tool20" and steps_done < STEPS:
        command = "echo step-%d" % (steps_done + 1)
        if tool is None:
            return Plan(text="Running step %d.\n\n```bash\n%s\n```" % (steps_done + 1, command))
        return Plan(call=(tool, shell_args(tool, command, schema), "call_%d" % (steps_done + 1)))
    text = DONE_TEXT
    if workload == "big":
        line = ("x" * 1023) + "\n"
        text = line * (BIG_BYTES // len(line))
    if not submit:
        return Plan(text=text)
    # An agent that only stops on the submit command gets it with the answer.
    command = "echo %s" % MINI_SUBMIT
    if tool is None:
        return Plan(text="%s\n\n```bash\n%s\n```" % (text, command))
    return Plan(text=text, call=(tool, shell_args(tool, command, schema), "call_submit"))


def wants_submit(texts):
    return any(MINI_SUBMIT in t for t in texts)


def chat_plan(workload, body):
    messages = body.get("messages") or []
    system = "".join(text_of(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "system")
    tools = tool_schemas(body)
    if pick_shell(tools) is None:
        # A text-format agent: each observation after the task is a step done.
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        steps = max(0, len(users) - 1)
    else:
        steps = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
    texts = [text_of(m.get("content")) for m in messages[:2] if isinstance(m, dict)]
    return plan_for(workload, steps, tools, system, wants_submit(texts))


def responses_plan(workload, body):
    items = body.get("input") or []
    if isinstance(items, str):
        items = []
    steps = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call_output")
    system = text_of(body.get("instructions") or "")
    return plan_for(workload, steps, tool_schemas(body), system, wants_submit([system]))


def chunks(text):
    for i in range(0, len(text), DELTA_BYTES):
        yield text[i:i + DELTA_BYTES]


USAGE = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    workload = "oneshot"

    def log_message(self, *args):
        pass

    def send_json(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            return self.send_json(200, {"object": "list", "data": [], "models": []})
        self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > MAX_BODY:
            return self.send_json(413, {"error": {"message": "body too large"}})
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self.send_json(400, {"error": {"message": "not JSON"}})
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/chat/completions"):
            plan = chat_plan(self.workload, body)
            if body.get("stream"):
                return self.chat_stream(body, plan)
            return self.chat_whole(body, plan)
        if path.endswith("/responses"):
            return self.responses_stream(body, responses_plan(self.workload, body))
        self.send_json(404, {"error": {"message": "not found: %s" % path}})

    # -- chat completions --------------------------------------------------

    def start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def sse(self, data, event=None):
        head = ("event: %s\n" % event) if event else ""
        self.wfile.write((head + "data: " + data + "\n\n").encode())

    def chat_stream(self, body, plan):
        model = body.get("model") or "mock"
        base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model}

        def chunk(delta, finish=None):
            return json.dumps(dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}]))

        self.start_sse()
        self.sse(chunk({"role": "assistant", "content": ""}))
        for part in chunks(plan.text or ""):
            self.sse(chunk({"content": part}))
        finish = "stop"
        if plan.call:
            name, args, call_id = plan.call
            self.sse(chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                            "function": {"name": name, "arguments": json.dumps(args)}}]}))
            finish = "tool_calls"
        self.sse(chunk({}, finish))
        self.sse(json.dumps(dict(base, choices=[], usage=USAGE)))
        self.sse("[DONE]")
        self.wfile.flush()

    def chat_whole(self, body, plan):
        message = {"role": "assistant", "content": plan.text}
        finish = "stop"
        if plan.call:
            name, args, call_id = plan.call
            message["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]
            finish = "tool_calls"
        self.send_json(200, {"id": "chatcmpl-mock", "object": "chat.completion", "created": 0,
                             "model": body.get("model") or "mock",
                             "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                             "usage": USAGE})

    # -- Responses API -----------------------------------------------------

    def responses_stream(self, body, plan):
        model = body.get("model") or "mock"
        response = {"id": "resp_mock", "object": "response", "created_at": 0, "model": model,
                    "status": "in_progress", "output": []}
        seq = [0]

        def event(kind, **fields):
            fields["type"] = kind
            fields["sequence_number"] = seq[0]
            seq[0] += 1
            self.sse(json.dumps(fields), event=kind)

        self.start_sse()
        event("response.created", response=response)
        event("response.in_progress", response=response)
        output = []
        if plan.text is not None:
            index = len(output)
            item = {"type": "message", "id": "msg_mock", "role": "assistant", "status": "in_progress", "content": []}
            event("response.output_item.added", output_index=index, item=item)
            part = {"type": "output_text", "text": "", "annotations": []}
            event("response.content_part.added", output_index=index, item_id="msg_mock", content_index=0, part=part)
            for delta in chunks(plan.text):
                event("response.output_text.delta", output_index=index, item_id="msg_mock", content_index=0,
                      delta=delta)
            done_part = dict(part, text=plan.text)
            event("response.output_text.done", output_index=index, item_id="msg_mock", content_index=0,
                  text=plan.text)
            event("response.content_part.done", output_index=index, item_id="msg_mock", content_index=0,
                  part=done_part)
            item = dict(item, status="completed", content=[done_part])
            event("response.output_item.done", output_index=index, item=item)
            output.append(item)
        if plan.call:
            index = len(output)
            name, args, call_id = plan.call
            item = {"type": "function_call", "id": "fc_mock", "call_id": call_id, "name": name,
                    "arguments": json.dumps(args), "status": "completed"}
            event("response.output_item.added", output_index=index, item=dict(item, arguments="", status="in_progress"))
            event("response.function_call_arguments.delta", output_index=index, item_id="fc_mock",
                  delta=item["arguments"])
            event("response.function_call_arguments.done", output_index=index, item_id="fc_mock",
                  arguments=item["arguments"])
            event("response.output_item.done", output_index=index, item=item)
            output.append(item)
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12}
        event("response.completed", response=dict(response, status="completed", output=output, usage=usage))
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hangs up early (an agent ending its run) is no error here.
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=["oneshot", "tool20", "big", "resume"], default="oneshot")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    Handler.workload = args.workload
    server = Server(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("http://127.0.0.1:%d" % server.server_address[1], flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
    server.shutdown()


if __name__ == "__main__":
    main()
