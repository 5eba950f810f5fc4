#!/usr/bin/env python3
"""Small stdlib-only helpers for scripts/interop.sh (ports, HTTP probe, result parsing).

Each subcommand prints a short result on stdout and signals success by its exit code.
"""

import glob
import json
import os
import socket
import sys
import time
import urllib.request


def free_port():
    # Racy by nature (the port is released before the server binds it), but fine on a CI box.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


def wait_port(port, seconds, pid):
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            print("server process exited")
            return 1
        try:
            with socket.create_connection(("127.0.0.1", int(port)), timeout=0.5):
                return 0
        except OSError:
            time.sleep(0.1)
    print(f"port {port} did not accept connections within {seconds}s")
    return 1


def _rpc_result(body, content_type):
    """The first JSON-RPC message of a Streamable HTTP response (plain JSON or SSE)."""
    if "text/event-stream" in content_type:
        for line in body.splitlines():
            if line.startswith("data:") and line[5:].strip():
                return json.loads(line[5:])
        raise ValueError("SSE response without a data event")
    return json.loads(body)


def probe(url):
    """Initialize once and print what the server offers, as words: the capability names of
    its initialize result, plus "session" if it issued an Mcp-Session-Id (i.e. is stateful)."""
    req = urllib.request.Request(
        url,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
        data=json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "switchboard-interop-probe", "version": "0"},
            },
        }).encode(),
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        session = resp.headers.get("mcp-session-id")
        # Read line by line: an SSE stream may stay open after the response event.
        lines = []
        for raw in resp:
            line = raw.decode().rstrip("\r\n")
            lines.append(line)
            if line.startswith("data:") and line[5:].strip():
                break
        msg = _rpc_result("\n".join(lines), resp.headers.get("content-type", ""))
    if session:  # don't leave the probe's session behind
        try:
            urllib.request.urlopen(urllib.request.Request(
                url, method="DELETE", headers={"mcp-session-id": session}), timeout=5).close()
        except OSError:
            pass
    words = sorted(msg["result"].get("capabilities", {}))
    print(" ".join(words + (["session"] if session else [])))
    return 0


def checks(out_dir):
    """Summarise the suite's checks.json; succeed only if nothing failed and something passed."""
    files = glob.glob(os.path.join(out_dir, "**", "checks.json"), recursive=True)
    if len(files) != 1:
        print(f"expected one checks.json under {out_dir}, found {len(files)}")
        return 1
    with open(files[0]) as f:
        results = json.load(f)
    count = {s: sum(1 for c in results if c.get("status") == s)
             for s in ("SUCCESS", "FAILURE", "WARNING")}
    summary = f"{count['SUCCESS']} check{'' if count['SUCCESS'] == 1 else 's'} passed"
    if count["WARNING"]:
        names = ", ".join(c["id"] for c in results if c.get("status") == "WARNING")
        summary += f", {count['WARNING']} warning(s): {names}"
    if count["FAILURE"]:
        names = ", ".join(c["id"] for c in results if c.get("status") == "FAILURE")
        print(f"{count['FAILURE']} check(s) failed: {names}")
        return 1
    if not count["SUCCESS"]:
        # e.g. server-sse-multiple-streams against a stateless server reports only a warning
        print("no check passed (" + summary + ")")
        return 1
    print(summary)
    return 0


def list_scenarios():
    """Scenario names from `conformance list --server` on stdin ("  - name [versions]")."""
    for line in sys.stdin:
        line = line.strip()
        if line.startswith("- "):
            print(line[2:].split()[0])
    return 0


def _load_json(path):
    with open(path) as f:
        return json.load(f)


def pinned_versions(package_json, tree):
    """Every dependency pinned in package_json is installed under tree/node_modules at exactly
    its pinned version. Judged by what is installed, not by the bytes of a lockfile that npm
    may rewrite (it adds optional platform packages as the registry gains them)."""
    pins = _load_json(package_json).get("dependencies", {})
    if not pins:
        print(f"{package_json} pins no dependencies")
        return 1
    problems = []
    for name, pinned in sorted(pins.items()):
        manifest = os.path.join(tree, "node_modules", name, "package.json")
        try:
            installed = _load_json(manifest).get("version")
        except FileNotFoundError:
            problems.append(f"{name} is not installed (pinned {pinned})")
            continue
        if installed != pinned:
            problems.append(f"{name} is {installed}, pinned {pinned}")
    if problems:
        print("; ".join(problems))
        return 1
    print(", ".join(f"{name} {v}" for name, v in sorted(pins.items())))
    return 0


def inspector_tools(path, *wanted):
    """The listed tools include every wanted one; with a leading --exact,
    they are exactly the wanted ones, in that order."""
    exact = bool(wanted) and wanted[0] == "--exact"
    if exact:
        wanted = wanted[1:]
    names = [t.get("name") for t in _load_json(path).get("tools", [])]
    if exact and names != list(wanted):
        print("expected exactly " + ", ".join(wanted) + "; got: " + ", ".join(names))
        return 1
    missing = [w for w in wanted if w not in names]
    if missing:
        print("missing tool(s): " + ", ".join(missing) + "; got: " + ", ".join(sorted(names)))
        return 1
    if exact:
        print(f"exactly the {len(names)} tools " + ", ".join(names))
    else:
        print(f"{len(names)} tools, including " + ", ".join(wanted))
    return 0


def inspector_call(path, expected):
    result = _load_json(path)
    texts = [c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"]
    if result.get("isError"):
        print("tool returned isError=true: " + " | ".join(texts))
        return 1
    if not any(expected in t for t in texts):
        print(f"no text content contains {expected!r}; got: " + " | ".join(texts))
        return 1
    print(f"returned {expected!r}")
    return 0


def inspector_error(path, expected, argument):
    """A tool error the client showed whole: its text, and the argument it names for programs."""
    result = _load_json(path)
    texts = [c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"]
    if not result.get("isError"):
        print("expected a tool error, got: " + " | ".join(texts))
        return 1
    if not any(expected in t for t in texts):
        print(f"no text content contains {expected!r}; got: " + " | ".join(texts))
        return 1
    named = result.get("_meta", {}).get("dev.switchboard/error", {}).get("invalid_argument")
    if named != argument:
        print(f"_meta names invalid_argument {named!r}, not {argument!r}")
        return 1
    print(f"showed the tool error {expected!r}, naming {argument!r}")
    return 0


COMMANDS = {
    "free-port": free_port,
    "wait-port": wait_port,
    "probe": probe,
    "checks": checks,
    "list-scenarios": list_scenarios,
    "pinned-versions": pinned_versions,
    "inspector-tools": inspector_tools,
    "inspector-call": inspector_call,
    "inspector-error": inspector_error,
}

if __name__ == "__main__":
    try:
        sys.exit(COMMANDS[sys.argv[1]](*sys.argv[2:]) or 0)
    except Exception as e:  # report parse/HTTP errors as a one-line failure, not a traceback
        print(f"{type(e).__name__}: {e}")
        sys.exit(1)
