"""The runtime server in a child process on loopback, for the benchmark scripts (fresh process per run)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

CHILD = """
import json, sys
from pathlib import Path
from edgebuild.runtime.server import Server
server = Server(Path(sys.argv[1]), host="127.0.0.1", port=0, **json.loads(sys.argv[2]))
server.start()
print(json.dumps({"port": server.port}), flush=True)
sys.stdin.read()
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
    answer also holds the server process's id under ``"pid"``)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(folder), json.dumps(options)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = json.loads(child.stdout.readline())["port"]
        yield port, dict(_wait_ready(port, child), pid=child.pid)
    finally:
        child.stdin.close()
        child.terminate()
        child.wait()
