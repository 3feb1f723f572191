"""The runtime server, or a bare ONNX Runtime session, in a child process, for the benchmark scripts
(a fresh process per run)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

CHILD = """
import json, sys
from pathlib import Path
from edgebuild.runtime.serving.server import Server
server = Server(Path(sys.argv[1]), host="127.0.0.1", port=0, **json.loads(sys.argv[2]))
server.start()
print(json.dumps({"port": server.port, "grpc_port": server.grpc_port}), flush=True)
sys.stdin.read()
"""

#: a bare session.run in its own process, driven over stdin/stdout one JSON line a command:
#: {"sequential": N} -> the N runs' seconds; {"threads": T, "duration": S} -> runs done by T threads in S s
BARE_CHILD = """
import json, sys, threading, time
from pathlib import Path
import numpy as np
from edgebuild.runtime.base.recipe import Recipe
folder, session_options, shapes = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
onnx = folder / Recipe.load(folder).onnx
if session_options == "server":  # made as the server's backend makes it (backends.select)
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
    make = getattr(OnnxRuntimeRunner, "for_device", OnnxRuntimeRunner)  # a tree from before it: the plain one
    session = make(onnx).session
else:  # ONNX Runtime's defaults
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(onnx), options, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
inputs = {n: rng.random(s, dtype=np.float32) for n, s in shapes.items()}
for _ in range(30):
    session.run(None, inputs)
print(json.dumps({"ready": True}), flush=True)
clock = time.perf_counter
for line in sys.stdin:
    command = json.loads(line)
    if "sequential" in command:
        seconds = []
        for _ in range(command["sequential"]):
            started = clock()
            session.run(None, inputs)
            seconds.append(clock() - started)
        print(json.dumps(seconds), flush=True)
        continue
    counts, until = [0] * command["threads"], [0.0]
    barrier = threading.Barrier(command["threads"] + 1)
    def loop(i):
        barrier.wait()
        while clock() < until[0]:
            session.run(None, inputs)
            counts[i] += 1
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(command["threads"])]
    for thread in threads:
        thread.start()
    until[0] = clock() + command["duration"]
    barrier.wait()
    for thread in threads:
        thread.join()
    print(json.dumps(sum(counts)), flush=True)
"""


#: the least a server can do over HTTP: read each request whole (head, then the body into a buffer of its
#: Content-Length) and write back a canned answer read from a file (argv[1]); GETs get ``{"live": true}``.
#: With a model folder (argv[2], and the input shapes as JSON, argv[3]), it runs a bare ``session.run``
#: (the server's session options, a fixed input) before each answer: the least a server that runs the model costs
NULL_CHILD = """
import json, socket, sys, threading
answer = open(sys.argv[1], "rb").read()
run = lambda: None
if len(sys.argv) > 2:
    from pathlib import Path
    import numpy as np
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
    from edgebuild.runtime.base.recipe import Recipe
    folder = Path(sys.argv[2])
    session = OnnxRuntimeRunner.for_device(folder / Recipe.load(folder).onnx).session
    rng = np.random.default_rng(0)
    feed = {n: rng.random(s, dtype=np.float32) for n, s in json.loads(sys.argv[3]).items()}
    names = [o.name for o in session.get_outputs()]
    run = lambda: session.run(names, feed)
    for _ in range(30):
        run()
live = b'HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: 14\\r\\n\\r\\n{"live": true}'
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
def serve(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    inbox = b""
    while True:
        while b"\\r\\n\\r\\n" not in inbox:
            data = conn.recv(262144)
            if not data:
                return
            inbox += data
        head, _, inbox = inbox.partition(b"\\r\\n\\r\\n")
        length = next((int(line.split(b":")[1]) for line in head.lower().split(b"\\r\\n")
                       if line.startswith(b"content-length:")), 0)
        body = bytearray(length)
        got = min(len(inbox), length)
        body[:got], inbox = inbox[:got], inbox[got:]
        view = memoryview(body)
        while got < length:
            more = conn.recv_into(view[got:])
            if not more:
                return
            got += more
        if length:
            run()
        conn.sendall(answer if length else live)
while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
"""


def _wait_ready(port: int, child: subprocess.Popen) -> dict:
    while True:
        if child.poll() is not None:
            sys.exit(f"the server exited: {child.stderr.read()[-2000:]}")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/v2/health/ready")
        answer = conn.getresponse()
        body = json.loads(answer.read())
        if answer.status == 200:
            return body
        time.sleep(0.01)


@contextmanager
def running_server(folder: Path, **options):
    """Yield (port, the /v2/health/ready answer) of a ready server with these Server options (the
    answer also holds the server process's id under ``"pid"`` and its gRPC port under ``"grpc_port"``)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(folder), json.dumps(options)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started = json.loads(child.stdout.readline())
        port = started["port"]
        yield port, dict(_wait_ready(port, child), pid=child.pid, grpc_port=started.get("grpc_port"))
    finally:
        child.stdin.close()
        child.terminate()
        child.wait()


class BareSession:
    """A bare ``session.run`` in a child process: ``sequential(n)`` seconds per run, ``loop(threads, s)`` runs."""

    def __init__(self, child: subprocess.Popen) -> None:
        self._child = child

    def _ask(self, command: dict):
        self._child.stdin.write(json.dumps(command) + "\n")
        self._child.stdin.flush()
        line = self._child.stdout.readline()
        if not line:
            sys.exit("the bare session.run process exited")
        return json.loads(line)

    def sequential(self, runs: int) -> list[float]:
        return self._ask({"sequential": runs})

    def loop(self, threads: int, duration: float) -> int:
        return self._ask({"threads": threads, "duration": duration})


@contextmanager
def running_bare(folder: Path, shapes: dict[str, list[int]], session_options: str = "server"):
    """Yield a warmed ``BareSession`` on the folder's ONNX: ``session_options`` "server" (made as the
    server's backend makes it) or "default" (ONNX Runtime's defaults)."""
    child = subprocess.Popen([sys.executable, "-c", BARE_CHILD, str(folder), session_options, json.dumps(shapes)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if not child.stdout.readline():
            sys.exit("the bare session.run process did not start")
        yield BareSession(child)
    finally:
        child.stdin.close()
        child.terminate()
        child.wait()


@contextmanager
def running_null_server(answer: bytes, folder: Path | None = None, shapes: dict[str, list[int]] | None = None):
    """Yield the port of ``NULL_CHILD`` answering every POST with ``answer`` (a whole HTTP answer): what a
    client and loopback cost for a request and an answer of these sizes, with no server work in between.
    With ``folder`` (and the input ``shapes``), it runs the folder's ONNX on a fixed input before each answer,
    as a bare ``session.run``: what a server costs that does nothing but read, run and write."""
    extra = [str(folder), json.dumps(shapes)] if folder is not None else []
    with tempfile.NamedTemporaryFile(suffix=".http") as canned:
        canned.write(answer)
        canned.flush()
        child = subprocess.Popen([sys.executable, "-c", NULL_CHILD, canned.name, *extra], stdout=subprocess.PIPE,
                                 text=True)
        try:
            yield int(child.stdout.readline())
        finally:
            child.terminate()
            child.wait()
