#!/usr/bin/env python3
"""A minimal relay-protocol application, written from docs/relay-protocol.md
alone, with the Python 3.11 standard library only.

It shows that the spec is enough to implement the application side in
another language, and gives `switchboard shim` a second, independent peer
to be tested against.

Usage:

    python3 relay_app.py SOCKET_PATH

It listens on SOCKET_PATH (replacing a stale socket, refusing a live one),
prints "listening on SOCKET_PATH" on stdout once it accepts connections, and
serves these tools:

- echo {text}            answers the text;
- slow {ms}              sleeps ms milliseconds (at most 10000), then answers;
- toggle_extra {}        adds or removes the `shout` tool and sends
                         `notify tools_changed` to every client;
- shout {text}           (only while toggled on) answers the text in capitals.

SIGUSR1 sends `notify tools_changed` to every client without changing
anything. SIGTERM or SIGINT stop it and remove the socket.

Then, for example:

    switchboard shim --socket SOCKET_PATH
"""

import asyncio
import json
import os
import signal
import socket
import struct
import sys

PROTOCOL = 1
MAX_LINE = 1024 * 1024  # bytes, not counting the "\n"
APP = "Python Relay Demo"
APP_ID = "dev.example.python"


def log(*parts):
    print("relay_app:", *parts, file=sys.stderr, flush=True)


# --- tools ----------------------------------------------------------------

BASE_TOOLS = [
    {
        "name": "echo",
        "description": "Say the text back.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "slow",
        "description": "Wait a while, then answer.",
        "inputSchema": {
            "type": "object",
            "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 10000}},
            "required": ["ms"],
            "additionalProperties": False,
        },
        # Relay-only: how long a client should wait for this tool.
        "timeout_ms": 20000,
    },
    {
        "name": "toggle_extra",
        "description": "Add or remove the shout tool.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]

SHOUT = {
    "name": "shout",
    "description": "Say the text back, loudly.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": 200}},
        "required": ["text"],
    },
}

TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: type(v) is int or (type(v) is float and v.is_integer()),
    "number": lambda v: type(v) in (int, float),
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def validate(schema, value, path=""):
    """The subset of JSON Schema these tools use. Returns a list of
    "<problem> (at <JSON pointer>)" texts."""
    where = path or "/"
    errors = []
    expected = schema.get("type")
    if expected is not None and not TYPES[expected](value):
        return [f"{json.dumps(value)} is not of type {json.dumps(expected)} (at {where})"]
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{json.dumps(name)} is a required property (at {where})")
        for name, item in value.items():
            pointer = path + "/" + name.replace("~", "~0").replace("/", "~1")
            if name in properties:
                errors.extend(validate(properties[name], item, pointer))
            elif schema.get("additionalProperties") is False:
                errors.append(f"additional property {json.dumps(name)} is not allowed (at {where})")
    if isinstance(value, str) and "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{json.dumps(value)} is longer than {schema['maxLength']} characters (at {where})")
    if type(value) in (int, float) and type(value) is not bool:
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{value} is less than the minimum of {schema['minimum']} (at {where})")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{value} is greater than the maximum of {schema['maximum']} (at {where})")
    return errors


def text_result(text, is_error=False):
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


# --- the application ------------------------------------------------------


class App:
    def __init__(self):
        self.extra = False
        self.connections = set()

    def tools(self):
        return BASE_TOOLS + ([SHOUT] if self.extra else [])

    def tool(self, name):
        return next((t for t in self.tools() if t["name"] == name), None)

    def tools_changed(self):
        log("tools changed; telling", len(self.connections), "client(s)")
        for connection in list(self.connections):
            connection.send({"type": "notify", "event": "tools_changed"})

    async def run_tool(self, name, arguments, peer_pid):
        log(f"call {name} from pid {peer_pid}")
        if name == "echo":
            return text_result(arguments["text"])
        if name == "slow":
            await asyncio.sleep(arguments["ms"] / 1000)
            return text_result(f"slept {arguments['ms']} ms")
        if name == "toggle_extra":
            self.extra = not self.extra
            self.tools_changed()
            return text_result("shout is " + ("on" if self.extra else "off"))
        if name == "shout":
            return text_result(arguments["text"].upper())
        return text_result(f"{name} is not implemented", True)


class Connection:
    def __init__(self, app, reader, writer):
        self.app = app
        self.reader = reader
        self.writer = writer
        self.calls = set()
        self.closing = False

    def send(self, message):
        if self.closing:
            return
        self.writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def error(self, message):
        self.send({"type": "error", "message": message})

    def respond(self, request_id, result=None, code=None, message=None):
        if code is None:
            self.send({"type": "response", "id": request_id, "result": result})
        else:
            self.send({"type": "response", "id": request_id, "error": {"code": code, "message": message}})

    async def refuse(self, message):
        log("refusing a connection:", message)
        self.error(message)
        await self.close()

    async def close(self):
        self.closing = True
        try:
            await self.writer.drain()
            self.writer.close()
            await self.writer.wait_closed()
        except OSError:
            pass

    async def read_line(self):
        """The next non-empty line without its "\\n" (and "\\r"), None at the
        end, or "too long" (the caller then closes)."""
        while True:
            try:
                line = await self.reader.readuntil(b"\n")
                line = line[:-1]
            except asyncio.IncompleteReadError as end:
                line = end.partial
                if not line:
                    return None
            except asyncio.LimitOverrunError:
                return "too long"
            except (ConnectionError, OSError):
                return None
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > MAX_LINE:
                return "too long"
            if line.strip():
                return line

    async def run(self):
        sock = self.writer.get_extra_info("socket")
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        peer_pid, peer_uid, _peer_gid = struct.unpack("3i", creds)
        if peer_uid != os.geteuid():
            return await self.refuse(f"connections from uid {peer_uid} are refused")

        # The first line must be the hello.
        line = await self.read_line()
        if line is None:
            return await self.close()
        if line == "too long":
            return await self.refuse(f"line exceeds {MAX_LINE} bytes")
        try:
            hello = json.loads(line)
        except ValueError:
            hello = None
        if not isinstance(hello, dict) or hello.get("type") != "hello":
            return await self.refuse("the first line must be a hello")
        if hello.get("protocol") != PROTOCOL:
            return await self.refuse(f"protocol version {hello.get('protocol')} is not supported")
        if hello.get("pid") != peer_pid:
            return await self.refuse(
                f"the hello says pid {hello.get('pid')} but the connection belongs to pid {peer_pid}"
            )
        self.send({"type": "welcome", "protocol": PROTOCOL, "app": APP, "app_id": APP_ID})
        self.app.connections.add(self)
        log(f"client pid {peer_pid} ({hello.get('client', '')}) connected")
        try:
            await self.serve(peer_pid)
        finally:
            self.app.connections.discard(self)
            if self.calls:
                await asyncio.wait(self.calls)
            await self.close()

    async def serve(self, peer_pid):
        while True:
            await self.writer.drain()
            line = await self.read_line()
            if line is None:
                return
            if line == "too long":
                self.error(f"line exceeds {MAX_LINE} bytes")
                return
            try:
                message = json.loads(line)
            except ValueError as e:
                self.error(f"the line is not JSON: {e}")
                continue
            if not isinstance(message, dict):
                self.error("the line is not a JSON object")
                continue
            kind = message.get("type")
            if kind == "request":
                self.request(message, peer_pid)
            elif kind == "error":
                log("the client reported:", message.get("message"))
            elif kind in ("hello", "welcome", "response", "notify"):
                self.error(f"unexpected {kind} message")
            else:
                self.error(f"unknown message type {json.dumps(kind)}")

    def request(self, message, peer_pid):
        request_id = message.get("id")
        if not (type(request_id) is str or (type(request_id) is int and -(2**63) <= request_id < 2**63)):
            self.error("a request needs an id: a 64-bit integer or a string")
            return
        method = message.get("method")
        params = message.get("params", {})
        if not isinstance(method, str) or not isinstance(params, dict):
            self.respond(request_id, code="invalid_request", message="a request needs a method and object params")
            return
        if method == "tools/list":
            self.respond(request_id, {"tools": self.app.tools()})
            return
        if method != "tools/call":
            self.respond(request_id, code="unknown_method", message=f"unknown method {method}")
            return
        name = params.get("name")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            self.respond(request_id, code="invalid_request", message="params need a string name and object arguments")
            return
        tool = self.app.tool(name)
        if tool is None:
            self.respond(request_id, code="unknown_tool", message=f"no tool named {name}")
            return
        problems = validate(tool["inputSchema"], arguments)
        if problems:
            text = f"invalid arguments for {name}: " + "; ".join(problems)
            self.respond(request_id, text_result(text, True))
            return
        task = asyncio.create_task(self.call(request_id, name, arguments, peer_pid))
        self.calls.add(task)
        task.add_done_callback(self.calls.discard)

    async def call(self, request_id, name, arguments, peer_pid):
        try:
            result = await self.app.run_tool(name, arguments, peer_pid)
        except Exception as e:  # the tool failed: the agent can read that
            result = text_result(f"{name} failed: {e}", True)
        self.respond(request_id, result)
        try:
            await self.writer.drain()
        except OSError:
            pass


def claim(path):
    """Replaces a stale socket at path; exits if a live one is there."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    if not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)
        return
    except FileNotFoundError:
        return
    finally:
        probe.close()
    sys.exit(f"relay_app: another instance is serving on {path}")


async def main(path):
    app = App()
    claim(path)

    async def accepted(reader, writer):
        await Connection(app, reader, writer).run()

    # A line may be MAX_LINE bytes before its "\n"; readuntil reports longer.
    server = await asyncio.start_unix_server(accepted, path, limit=MAX_LINE + 1)
    os.chmod(path, 0o600)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, app.tools_changed)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(f"listening on {path}", flush=True)
    async with server:
        await stop.wait()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1]))
