#!/usr/bin/env python3
"""Runs dsh and its peers against one scripted mock and prints ratios peer/dsh.

Standard library only. Called by run.sh (which installs the peers); see README.md.

Each run is one process tree started fresh (its own HOME and data folders under a
temporary directory). Wall time is measured around the process; CPU (user + sys) and
peak RSS come from the rusage of GNU time (/usr/bin/time) wrapped around it: wait4 of the
wrapper for CPU (its descendants included), time's %M for the RSS (the largest single
process of the tree, not a sum; measured from a small forking process, since a child
forked from Python counts Python's pages in its peak). Runs are
interleaved (peer, dsh, peer, dsh, ...) and each figure is the median of --n runs.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
API_KEY = "sk-peers-bench"
WORKLOADS = ["oneshot", "tool20", "big", "resume"]
PROMPTS = {
    "oneshot": "Say done.",
    "tool20": "Run `echo step-N` with the shell tool for N = 1..20, one call per step, then say done.",
    "big": "Write a long answer.",
    "resume": "One more turn: say done.",
}
RUN_TIMEOUT = 600


def start_mock(workload):
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "mock.py"), "--workload", workload],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        raise SystemExit("mock.py did not start: %r" % url)
    return proc, url


class Session:
    """The long session resumed by the `resume` workload (dsh's JSONL format)."""

    def __init__(self, work, events):
        out = os.path.join(work, "gen")
        subprocess.run([sys.executable, os.path.join(REPO, "testdata/bench/gen_workloads.py"),
                        "--out", out, "--chunks", "200", "--events", str(events)],
                       check=True, stdout=subprocess.DEVNULL)
        self.path = os.path.join(out, "session.jsonl")
        with open(self.path, encoding="utf-8") as f:
            header = json.loads(f.readline())
            self.turns = sum(1 for line in f if '"type":"turn/end"' in line)
        self.id = header["id"]
        self.cwd = header.get("cwd")
        self.bytes = os.path.getsize(self.path)

    def place(self, store_dir):
        """Copies the log where dsh's JSONL store looks for it (persistence.md TP-6)."""
        target = os.path.join(store_dir, "sessions", project_key(self.cwd), self.id)
        os.makedirs(target, exist_ok=True)
        shutil.copyfile(self.path, os.path.join(target, "session.jsonl"))


def project_key(cwd):
    """The project folder of a cwd (persistence.md TP-6), for plain ASCII paths."""
    if not cwd:
        return "_no-cwd"
    slug, run = [], False
    for ch in cwd:
        if ch in "/\\:":
            if not run:
                slug.append("-")
            run = True
            continue
        run = False
        if ch.isascii() and (ch.isalnum() or ch in "._-"):
            slug.append(ch)
        else:
            slug.append("~%04X" % ord(ch))
    text = "".join(slug).lstrip("-") or "root"
    return "--%s--" % text[:251]


class Peer:
    name = "?"
    error = None  # why the peer cannot run at all

    def command(self, workload, url, home):
        """(argv, env, stdin text) for one run, or None when the workload is n/a."""
        raise NotImplementedError


def base_env(home):
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM", "TZ")}
    env.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_DATA_HOME=os.path.join(home, ".local/share"),
               XDG_CACHE_HOME=os.path.join(home, ".cache"), NO_COLOR="1")
    return env


class Dsh(Peer):
    name = "dsh"

    def __init__(self, binary, session):
        self.binary = binary
        self.session = session
        if not os.access(binary, os.X_OK):
            self.error = "no binary at %s" % binary

    def command(self, workload, url, home):
        env = base_env(home)
        env.update(DEEPSEEK_API_KEY=API_KEY, DEEPSEEK_BASE_URL=url)
        store = os.path.join(home, "store")
        if workload == "resume":
            self.session.place(store)
            # `dsh chat` with piped input: the prompt, then EOF ends the chat.
            return ([self.binary, "chat", "--store-dir", store, "--resume", self.session.id],
                    env, PROMPTS[workload] + "\n")
        return ([self.binary, "run", "--yes", "--store-dir", store, PROMPTS[workload]], env, "")


class Reference(Peer):
    name = "reference"

    def __init__(self, prefix, node):
        self.node = node
        self.bin = os.path.join(prefix, "node_modules/@deepseek-ai/dsh/lib/bin.js")
        if not os.path.exists(self.bin):
            self.error = "not installed (%s missing)" % self.bin

    def command(self, workload, url, home):
        if workload == "resume":
            return None  # the headless profile runs one fresh session only
        env = base_env(home)
        env.update(DSH_HOME=os.path.join(home, "dsh"), DSH_TELEMETRY_DISABLED="1",
                   DEEPSEEK_API_KEY=API_KEY, DEEPSEEK_BASE_URL=url)
        if os.path.dirname(self.node):
            env["PATH"] = os.path.dirname(self.node) + os.pathsep + env.get("PATH", "")
        return ([self.node, self.bin, "--profile", "headless", PROMPTS[workload]], env, "")


class Codex(Peer):
    name = "codex"

    def __init__(self, prefix):
        self.bin = os.path.join(prefix, "node_modules/.bin/codex")
        if not os.path.exists(self.bin):
            self.error = "not installed (%s missing)" % self.bin

    def command(self, workload, url, home):
        if workload == "resume":
            return None  # resume needs a Codex rollout of the same history: not generated
        codex_home = os.path.join(home, "codex")
        os.makedirs(codex_home, exist_ok=True)
        with open(os.path.join(codex_home, "config.toml"), "w", encoding="utf-8") as f:
            f.write('model = "mock-model"\nmodel_provider = "mock"\n'
                    '[model_providers.mock]\nname = "mock"\nbase_url = "%s/v1"\n'
                    'wire_api = "responses"\nenv_key = "MOCK_API_KEY"\n'
                    'request_max_retries = 0\nstream_max_retries = 0\n' % url)
        env = base_env(home)
        env.update(CODEX_HOME=codex_home, MOCK_API_KEY=API_KEY)
        return ([self.bin, "exec", "--skip-git-repo-check",
                 "--dangerously-bypass-approvals-and-sandbox", PROMPTS[workload]], env, "")


class Mini(Peer):
    name = "mini-swe-agent"

    def __init__(self, venv):
        self.bin = os.path.join(venv, "bin/mini")
        if not os.path.exists(self.bin):
            self.error = "not installed (%s missing)" % self.bin

    def command(self, workload, url, home):
        if workload == "resume":
            return None  # no resume
        env = base_env(home)
        env.update(OPENAI_API_KEY=API_KEY, OPENAI_API_BASE=url + "/v1", OPENAI_BASE_URL=url + "/v1",
                   MSWEA_CONFIGURED="true", MSWEA_COST_TRACKING="ignore_errors",
                   LITELLM_LOCAL_MODEL_COST_MAP="True")
        return ([self.bin, "-y", "--exit-immediately", "-m", "openai/mock-model",
                 "-t", PROMPTS[workload], "-o", os.path.join(home, "traj.json")], env, "")


TIME = "/usr/bin/time"


def run_once(argv, env, stdin_text, cwd, log):
    """Runs `argv` under GNU time, which forks it from a small process: a child
    forked from this Python process would count Python's resident pages in its
    peak RSS (Linux carries the peak of the pre-exec image into ru_maxrss)."""
    timing = log + ".time"
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen([TIME, "-f", "%M", "-o", timing] + argv, env=env, cwd=cwd,
                                stdin=subprocess.PIPE if stdin_text else subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT)
        if stdin_text:
            try:
                proc.stdin.write(stdin_text.encode())
                proc.stdin.close()
            except OSError:
                pass
        # CPU from wait4 (microseconds; GNU time prints hundredths): the
        # wrapper's rusage covers the agent's tree, plus time's own ~1 ms.
        deadline = start + RUN_TIMEOUT
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    rss_kib = 0
    try:
        with open(timing, encoding="utf-8") as f:
            # The last line: GNU time puts "Command exited with non-zero status" first.
            rss_kib = int(f.read().strip().splitlines()[-1].split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
            "rss_mib": rss_kib / 1024.0, "code": proc.returncode}


def main():
    ap = argparse.ArgumentParser(description="dsh vs peers: wall, CPU, peak RSS")
    ap.add_argument("--dsh", required=True, help="dsh release binary")
    ap.add_argument("--npm-prefix", required=True, help="npm prefix holding @openai/codex")
    ap.add_argument("--ref-prefix", required=True, help="npm prefix holding @deepseek-ai/dsh")
    ap.add_argument("--ref-node", default="node", help="the node (>= 22) that runs the reference")
    ap.add_argument("--venv", required=True)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--peers", default="codex,reference,mini-swe-agent")
    ap.add_argument("--resume-events", type=int, default=100000,
                    help="events of the generated session (100000: ~18 MB, 261 turns)")
    ap.add_argument("--json", help="also write the raw runs here")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    args = ap.parse_args()
    if not os.access(TIME, os.X_OK):
        raise SystemExit("%s (GNU time) is needed: apt-get install time" % TIME)

    work = tempfile.mkdtemp(prefix="dsh-peers-run-")
    workloads = [w for w in args.workloads.split(",") if w]
    session = Session(work, args.resume_events) if "resume" in workloads else None
    dsh = Dsh(os.path.abspath(args.dsh), session)
    known = {"codex": Codex(args.npm_prefix), "reference": Reference(args.ref_prefix, args.ref_node),
             "mini-swe-agent": Mini(args.venv)}
    peers = [known[p] for p in args.peers.split(",") if p in known]
    load_start = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    runs = {}  # (peer, workload) -> list of results
    for workload in workloads:
        mock, url = start_mock(workload)
        try:
            for i in range(args.n):
                for peer in peers:
                    record(runs, peer, workload, url, work, i)
                    record(runs, dsh, workload, url, work, i)
                if not peers:
                    record(runs, dsh, workload, url, work, i)
        finally:
            mock.stdin.close()
            mock.wait()
    load_end = os.getloadavg()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"started": started, "runs": {"%s/%s" % k: v for k, v in runs.items()}}, f, indent=1)
    print_table(runs, dsh, peers, workloads, args, started, load_start, load_end, session)
    if args.keep:
        print("work folder (logs): %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)


def record(runs, who, workload, url, work, i):
    key = (who.name, workload)
    bucket = runs.setdefault(key, [])
    if who.error:
        bucket.append({"error": who.error})
        return
    home = os.path.join(work, "%s-%s-%d-%d" % (who.name, workload, i, len(bucket)))
    os.makedirs(home, exist_ok=True)
    cmd = who.command(workload, url, home)
    if cmd is None:
        bucket.append({"error": "n/a"})
        return
    argv, env, stdin_text = cmd
    cwd = os.path.join(home, "ws")
    os.makedirs(cwd, exist_ok=True)
    log = os.path.join(home, "output.log")
    try:
        result = run_once(argv, env, stdin_text, cwd, log)
    except OSError as e:
        bucket.append({"error": "cannot start: %s" % e})
        return
    if result["code"] != 0:
        with open(log, "rb") as f:
            lines = f.read()[-4000:].decode("utf-8", "replace").strip().splitlines()
        errors = [line.strip() for line in lines if "Error:" in line] or \
            [line.strip() for line in lines if "rror" in line]
        why = (errors[0] if errors else lines[-1] if lines else "")[:160]
        result["error"] = "exit %d: %s" % (result["code"], why)
    bucket.append(result)
    sys.stderr.write("%-15s %-8s #%d %s\n" % (who.name, workload, i + 1,
                     result.get("error") or "%.2fs cpu %.2fs rss %.0f MiB" % (
                         result["wall"], result["cpu"], result["rss_mib"])))


def medians(results):
    ok = [r for r in results if "error" not in r]
    if not ok:
        errors = [r["error"] for r in results]
        return None, errors[-1] if errors else "no run"
    if len(ok) < len(results):
        bad = next(r["error"] for r in results if "error" in r)
        return None, "%d/%d runs failed: %s" % (len(results) - len(ok), len(results), bad)
    return {k: statistics.median(r[k] for r in ok) for k in ("wall", "cpu", "rss_mib")}, None


def print_table(runs, dsh, peers, workloads, args, started, load_start, load_end, session):
    print("## dsh and its peers, one scripted mock (benches/peers)")
    print()
    print("%s, %s, %d cores, load average %.2f/%.2f/%.2f at start, %.2f/%.2f/%.2f at end; "
          "medians of %d interleaved runs." % (
              started, platform.platform(terse=True), os.cpu_count() or 0,
              *load_start, *load_end, args.n))
    if session:
        print("resume: a generated %d-turn session of %.1f MB (%d events)." % (
            session.turns, session.bytes / 1e6, args.resume_events))
    print()
    print("| workload | dsh wall | dsh CPU | dsh peak RSS | peer | wall ratio | CPU ratio | RSS ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for workload in workloads:
        base, base_err = medians(runs.get((dsh.name, workload), []))
        dsh_cols = ("%.3f s" % base["wall"], "%.3f s" % base["cpu"], "%.1f MiB" % base["rss_mib"]) \
            if base else ("failed: %s" % base_err, "", "")
        for peer in peers or [None]:
            if peer is None:
                print("| %s | %s | %s | %s | | | | |" % ((workload,) + dsh_cols))
                continue
            m, err = medians(runs.get((peer.name, workload), []))
            if m and base:
                cols = ("%.1fx" % (m["wall"] / base["wall"]), "%.1fx" % (m["cpu"] / max(base["cpu"], 1e-3)),
                        "%.1fx" % (m["rss_mib"] / base["rss_mib"]))
            elif m:
                cols = ("%.2f s" % m["wall"], "%.2f s" % m["cpu"], "%.0f MiB" % m["rss_mib"])
            else:
                cols = (err.replace("|", "/"), "", "")
            print("| %s | %s | %s | %s | %s | %s | %s | %s |" % ((workload,) + dsh_cols + (peer.name,) + cols))


if __name__ == "__main__":
    main()
