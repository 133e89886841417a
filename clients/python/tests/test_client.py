"""The installed package against a fake daemon on a Unix socket (no Docker): both clients
send the API's request, surface warnings, return the result, and raise errors with the same
fields. Run with `python -m unittest discover -s tests` from an environment where the
package is installed (`pip install ./clients/python`)."""

import asyncio
import http.server
import json
import os
import socketserver
import tempfile
import threading
import unittest
import warnings

import egress_sandbox
from egress_sandbox import AsyncClient, Client, DaemonError, RequestRefused, SandboxWarning

EVENTS = [
    {"event": "warning", "text": "policy p.yaml: a warning"},
    {"event": "started", "run": "r-1"},
    {"event": "output", "stream": "stdout", "b64": "aGkK"},
    {"event": "output", "stream": "stderr", "b64": "b29wcwo="},
    {"event": "audit", "record": {"host": "x.example", "decision": "blocked"}},
    {"event": "exit", "report": {"exit_code": 3, "status": "exited",
                                 "blocked": [{"host": "x.example", "port": 443,
                                              "reason": "not_allowed", "count": 1}]},
     "summary": "egress-sandbox: exit 3 after 0.1s; 1 blocked: x.example:443 (not_allowed)"},
]


class FakeDaemon(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    requests_seen: list


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer(200, {"ok": True})

    def do_DELETE(self):
        self.answer(404, {"error": "no run r-9 in progress", "field": "id"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests_seen.append(body)
        if body["argv"] == ["refuse"]:
            return self.answer(400, {"error": "invalid timeout \"x\"", "field": "timeout"})
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        events = EVENTS if body["argv"] != ["setup-fails"] else [
            {"event": "error", "error": "image x not found locally", "exit_code": 125}]
        try:
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.write(b"0\r\n\r\n")
        except BrokenPipeError:
            pass  # the client stops reading at `exit` (or `error`) and closes


class ClientTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.socket = os.path.join(self.dir.name, "api.sock")
        self.server = FakeDaemon(self.socket, Handler)
        self.server.requests_seen = []
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()
        self.dir.cleanup()

    def runs(self):
        """The same call through each client: (name, function taking run's arguments)."""
        sync = Client(self.socket)
        asynchronous = AsyncClient(self.socket)
        return [("sync", sync.run),
                ("asyncio", lambda *a, **k: asyncio.run(asynchronous.run(*a, **k)))]

    def test_a_run_returns_its_result_and_surfaces_warnings(self):
        for name, run in self.runs():
            with self.subTest(name):
                seen = []
                result = run(["python3", "-c", "x"], files={"a.txt": "hi"}, stdin=b"in",
                             env=[("A", "1"), ("B", "2")], timeout=2.5,
                             policies=[{"file": "p.yaml", "yaml": "version: 1\n"}],
                             on_warning=seen.append)
                self.assertEqual(result.stdout, b"hi\n")
                self.assertEqual(result.stderr, b"oops\n")
                self.assertEqual(result.exit_code, 3)
                self.assertEqual(result.run_id, "r-1")
                self.assertEqual(result.blocked[0]["host"], "x.example")
                self.assertEqual(result.warnings, ["policy p.yaml: a warning"])
                self.assertEqual(seen, ["policy p.yaml: a warning"])
                sent = self.server.requests_seen[-1]
                self.assertEqual(sent["env"], [["A", "1"], ["B", "2"]])
                self.assertEqual(sent["files"], {"a.txt": "aGk="})
                self.assertEqual(sent["stdin"], "aW4=")
                self.assertEqual(sent["timeout"], "2500ms")
                self.assertEqual(sent["policies"], [{"file": "p.yaml", "yaml": "version: 1\n"}])
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    run(["true"])
                self.assertTrue(any(issubclass(w.category, SandboxWarning) for w in caught))

    def test_errors_carry_error_field_and_status(self):
        for name, run in self.runs():
            with self.subTest(name):
                with self.assertRaises(RequestRefused) as refused:
                    run(["refuse"])
                self.assertEqual(refused.exception.status, 400)
                self.assertEqual(refused.exception.field, "timeout")
                self.assertEqual(refused.exception.error, 'invalid timeout "x"')
                with self.assertRaises(DaemonError) as failed:
                    run(["setup-fails"])
                self.assertEqual(failed.exception.error, "image x not found locally")
                self.assertIsNone(failed.exception.field)
                with self.assertRaises(ValueError):
                    run(["true"], timeout=0)
        with self.assertRaises(RequestRefused) as missing:
            Client(self.socket).cancel("r-9")
        self.assertEqual((missing.exception.status, missing.exception.field), (404, "id"))
        with self.assertRaises(RequestRefused) as missing:
            asyncio.run(AsyncClient(self.socket).cancel("r-9"))
        self.assertEqual((missing.exception.status, missing.exception.field), (404, "id"))

    def test_the_package_is_typed(self):
        package = os.path.dirname(egress_sandbox.__file__)
        self.assertTrue(os.path.exists(os.path.join(package, "py.typed")))


if __name__ == "__main__":
    unittest.main()
