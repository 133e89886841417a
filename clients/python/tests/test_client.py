"""The installed package against a fake daemon: a real HTTP server on a Unix socket in this
process (no Docker), answering each request as the test scripts it. Both clients send the
API's request, return the result, give the events as an iterator, ask a busy daemon again
after its Retry-After within the call's timeout, raise each error class with the same
fields, refuse what is wrong before sending anything, and warn at the caller's line once per
policy. Run with `python -m unittest discover -s tests` from an environment where the
package is installed (`pip install ./clients/python`)."""

import asyncio
import dataclasses
import http.server
import inspect
import json
import os
import socket as _socket
import socketserver
import tempfile
import threading
import unittest
import warnings

import egress_sandbox
from egress_sandbox import (AsyncClient, AuditEvent, Client, DaemonBusy, DaemonError,
                            DaemonUnreachable, ExitEvent, InvalidRequest, OutputEvent,
                            RequestRefused, Result, SandboxError, SandboxWarning, StartedEvent,
                            WarningEvent)

# Waits that end with an event in a working client; past them the test fails, not hangs.
HANG_BOUND = 30

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
    """`answers` is what the next POSTs get, in order (then a run of EVENTS): a tuple
    (status, headers, body) or a list of events to stream. `seen` holds every request as
    (method, path, body); `closed` is set when a client closes a stream the daemon holds
    open (a list of events ending in "hold")."""

    daemon_threads = True

    def __init__(self, path):
        super().__init__(path, Handler)
        self.answers = []
        self.seen = []
        self.closed = threading.Event()
        self.lock = threading.Lock()

    def next_answer(self):
        with self.lock:
            return self.answers.pop(0) if self.answers else EVENTS

    def posts(self):
        return [json.loads(body) for method, _, body in self.seen if method == "POST"]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def take(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        self.server.seen.append((self.command, self.path, body))
        return body

    def do_GET(self):
        self.take()
        self.answer(200, {"ok": True})

    def do_DELETE(self):
        self.take()
        self.answer(404, {"error": "no run r-9 in progress", "field": "id"})

    def do_POST(self):
        self.take()
        answer = self.server.next_answer()
        if isinstance(answer, tuple):
            status, headers, body = answer
            return self.answer(status, body, headers)
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for event in answer:
                if event == "hold":
                    # Until the client closes the connection: read gives b"" then.
                    self.wfile.flush()
                    self.rfile.read(1)
                    self.server.closed.set()
                    return
                if event == "cut":
                    self.wfile.flush()
                    self.connection.shutdown(_socket.SHUT_RDWR)
                    return
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.server.closed.set()  # the client stops reading at `exit` and closes


def busy(retry_after="1"):
    headers = [("retry-after", retry_after)] if retry_after is not None else []
    return (503, headers, {"error": "the daemon has its limit of 1 runs live (serve "
                                    "--max-runs); try again when one has ended", "field": ""})


class FakeDaemonTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.socket = os.path.join(self.dir.name, "api.sock")
        self.daemon = FakeDaemon(self.socket)
        threading.Thread(target=self.daemon.serve_forever, daemon=True).start()

    def tearDown(self):
        self.daemon.shutdown()
        self.daemon.server_close()
        self.dir.cleanup()

    def runs(self):
        """The same call through each client: (name, function taking run's arguments)."""
        sync = Client(self.socket)
        asynchronous = AsyncClient(self.socket)
        return [("sync", sync.run),
                ("asyncio", lambda *a, **k: asyncio.run(asynchronous.run(*a, **k)))]

    def raises(self, kind, call):
        """`call()` raises `kind`: the error."""
        with self.assertRaises(kind) as raised:
            call()
        return raised.exception


class RunTests(FakeDaemonTest):
    def test_a_run_returns_its_result_and_sends_the_request(self):
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
                self.assertEqual(result.status, "exited")
                self.assertEqual(result.run_id, "r-1")
                self.assertEqual(result.blocked[0]["host"], "x.example")
                self.assertEqual(result.records, [{"host": "x.example", "decision": "blocked"}])
                self.assertEqual(result.warnings, ["policy p.yaml: a warning"])
                self.assertEqual(seen, ["policy p.yaml: a warning"])
                sent = self.daemon.posts()[-1]
                self.assertEqual(sent["argv"], ["python3", "-c", "x"])
                self.assertEqual(sent["env"], [["A", "1"], ["B", "2"]])
                self.assertEqual(sent["files"], {"a.txt": "aGk="})
                self.assertEqual(sent["stdin"], "aW4=")
                self.assertEqual(sent["timeout"], "2500ms")
                self.assertEqual(sent["policies"], [{"file": "p.yaml", "yaml": "version: 1\n"}])

    def test_the_result_report_and_records_are_typed(self):
        self.assertTrue(dataclasses.is_dataclass(Result))
        for typed in (egress_sandbox.RunReport, egress_sandbox.AuditRecord,
                      egress_sandbox.BlockedGroup):
            self.assertTrue(typed.__annotations__, typed)
        self.assertIn("blocked_more", egress_sandbox.RunReport.__annotations__)
        self.assertIn("decision", egress_sandbox.AuditRecord.__annotations__)
        self.assertEqual(set(egress_sandbox.BlockedGroup.__annotations__),
                         {"host", "port", "reason", "count"})
        package = os.path.dirname(egress_sandbox.__file__)
        self.assertTrue(os.path.exists(os.path.join(package, "py.typed")))

    def test_the_events_come_as_an_iterator(self):
        client = Client(self.socket)
        with client.events(["true"]) as events:
            kinds = [type(event) for event in events]
        self.assertEqual(kinds, [WarningEvent, StartedEvent, OutputEvent, OutputEvent,
                                 AuditEvent, ExitEvent])

        async def collect():
            async with AsyncClient(self.socket).events(["true"]) as events:
                return [event async for event in events]

        events = asyncio.run(collect())
        self.assertEqual([event.event for event in events],
                         ["warning", "started", "output", "output", "audit", "exit"])
        self.assertEqual(events[1].run_id, "r-1")
        self.assertEqual((events[2].stream, events[2].data), ("stdout", b"hi\n"))
        self.assertEqual(events[4].record["host"], "x.example")
        self.assertEqual(events[-1].result.exit_code, 3)
        self.assertEqual(events[-1].result.stdout, b"hi\n")

    def test_leaving_the_events_early_closes_the_connection(self):
        started = [{"event": "started", "run": "r-2"}, "hold"]
        self.daemon.answers = [started]
        with Client(self.socket).events(["sleep", "60"]) as events:
            self.assertIsInstance(next(events), StartedEvent)
        self.assertTrue(self.daemon.closed.wait(HANG_BOUND))

        self.daemon.closed.clear()
        self.daemon.answers = [started]

        async def leave_early():
            async with AsyncClient(self.socket).events(["sleep", "60"]) as events:
                async for event in events:
                    self.assertIsInstance(event, StartedEvent)
                    break

        asyncio.run(leave_early())
        self.assertTrue(self.daemon.closed.wait(HANG_BOUND))

    def test_cancelling_the_task_closes_the_connection(self):
        self.daemon.answers = [[{"event": "started", "run": "r-3"}, "hold"]]

        async def cancel_once_started():
            started = asyncio.Event()
            task = asyncio.ensure_future(AsyncClient(self.socket).run(
                ["sleep", "60"], on_started=lambda run_id: started.set()))
            await asyncio.wait_for(started.wait(), HANG_BOUND)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task

        asyncio.run(cancel_once_started())
        self.assertTrue(self.daemon.closed.wait(HANG_BOUND))

    def test_a_run_id_is_never_read_as_another_path(self):
        for cancel in (Client(self.socket).cancel,
                       lambda run_id: asyncio.run(AsyncClient(self.socket).cancel(run_id))):
            self.raises(RequestRefused, lambda: cancel("../../health"))
            self.assertEqual(self.daemon.seen[-1][:2], ("DELETE", "/v1/runs/..%2F..%2Fhealth"))


class RetryTests(FakeDaemonTest):
    def test_a_busy_daemon_is_asked_again_after_retry_after(self):
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.seen.clear()
                self.daemon.answers = [busy("0"), busy("0")]
                result = run(["true"], timeout=2.5)
                self.assertEqual(result.exit_code, 3)
                posts = self.daemon.posts()
                self.assertEqual(len(posts), 3)
                # The retries ask for what is left of the caller's timeout.
                self.assertEqual(posts[0]["timeout"], "2500ms")
                for post in posts[1:]:
                    self.assertLessEqual(int(post["timeout"][:-2]), 2400, post)

    def test_a_call_without_a_timeout_is_asked_again_as_it_was(self):
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.seen.clear()
                self.daemon.answers = [busy("0")]
                run(["true"])
                posts = self.daemon.posts()
                self.assertEqual(len(posts), 2)
                self.assertEqual(posts[0], posts[1])
                self.assertNotIn("timeout", posts[1])

    def test_retry_after_as_a_date(self):
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.seen.clear()
                self.daemon.answers = [busy("Wed, 21 Oct 2015 07:28:00 GMT")]
                self.assertEqual(run(["true"], timeout=10).exit_code, 3)
                self.assertEqual(len(self.daemon.posts()), 2)

    def test_the_retries_stay_within_the_calls_timeout(self):
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.seen.clear()
                self.daemon.answers = [busy("1")] * 10
                # Asked at 0 s and after 1 s; a third ask, after 2 s, would be past 1.5 s.
                error = self.raises(DaemonBusy, lambda: run(["true"], timeout=1.5))
                self.assertEqual(len(self.daemon.posts()), 2)
                self.assertEqual((error.status, error.retry_after, error.attempts), (503, 1, 2))
                self.assertIsNone(error.field)
                self.assertIn("--max-runs", error.error)
                self.assertIsInstance(error, RequestRefused)
                self.assertIsInstance(error, SandboxError)

    def test_a_wait_longer_than_the_timeout_is_not_waited(self):
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.seen.clear()
                self.daemon.answers = [busy("3600")]
                error = self.raises(DaemonBusy, lambda: run(["true"], timeout="2s"))
                self.assertEqual((error.retry_after, error.attempts), (3600, 1))
                self.assertEqual(len(self.daemon.posts()), 1)

    def test_a_503_without_retry_after_is_not_asked_again(self):
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.seen.clear()
                self.daemon.answers = [(503, [], {"error": "the daemon is stopping",
                                                  "field": ""})]
                error = self.raises(DaemonBusy, lambda: run(["true"], timeout=10))
                self.assertEqual((error.status, error.retry_after), (503, None))
                self.assertEqual(error.error, "the daemon is stopping")
                self.assertEqual(len(self.daemon.posts()), 1)


class ErrorTests(FakeDaemonTest):
    def test_a_400_is_an_invalid_request_naming_the_field(self):
        refused = (400, [], {"error": "the policy was refused; nothing was run",
                             "field": "policies",
                             "diagnostics": ["p.yaml:1:1: error: unknown key"]})
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.answers = [refused]
                error = self.raises(InvalidRequest, lambda: run(["true"], timeout=10))
                self.assertEqual((error.status, error.field), (400, "policies"))
                self.assertEqual(error.error, "the policy was refused; nothing was run")
                self.assertEqual(error.diagnostics, ["p.yaml:1:1: error: unknown key"])
                self.assertEqual(str(error),
                                 "the policy was refused; nothing was run (field policies)")
                for kind in (RequestRefused, SandboxError, ValueError):
                    self.assertIsInstance(error, kind)
                # A 400 is final: asked once.
                self.assertEqual(len([p for p in self.daemon.posts()]), 1)
                self.daemon.seen.clear()

    def test_a_setup_failure_is_a_daemon_error(self):
        failed = [{"event": "started", "run": "r-5"},
                  {"event": "error", "error": "image x not found locally", "exit_code": 125}]
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.answers = [failed]
                error = self.raises(DaemonError, lambda: run(["true"]))
                self.assertEqual(error.error, "image x not found locally")
                self.assertEqual(error.run_id, "r-5")
                self.assertIsNone(error.field)
                self.assertIsNone(error.status)

    def test_a_setup_failure_names_the_field_the_engine_refused(self):
        failed = [{"event": "started", "run": "r-7"},
                  {"event": "error", "error": "the engine has no runtime \"runsc\"",
                   "field": "runtime", "exit_code": 125}]
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.answers = [failed]
                error = self.raises(DaemonError, lambda: run(["true"]))
                self.assertEqual((error.field, error.run_id), ("runtime", "r-7"))
                self.assertEqual(str(error),
                                 "the engine has no runtime \"runsc\" (field runtime)")

    def test_an_answer_that_breaks_off_is_a_daemon_error(self):
        for name, run in self.runs():
            with self.subTest(name):
                self.daemon.answers = [[{"event": "started", "run": "r-6"}, "cut"]]
                error = self.raises(DaemonError, lambda: run(["true"]))
                self.assertIn("ended before the run's end", error.error)
                self.assertEqual(error.run_id, "r-6")

    def test_an_unknown_run_is_a_404_refusal(self):
        for cancel in (Client(self.socket).cancel,
                       lambda run_id: asyncio.run(AsyncClient(self.socket).cancel(run_id))):
            error = self.raises(RequestRefused, lambda: cancel("r-9"))
            self.assertEqual((error.status, error.field), (404, "id"))
            self.assertNotIsInstance(error, (InvalidRequest, DaemonBusy))

    def test_no_daemon_is_daemon_unreachable_naming_the_socket(self):
        missing = os.path.join(self.dir.name, "missing.sock")
        # A socket file nobody listens on (a daemon that died): connecting is refused.
        stale = os.path.join(self.dir.name, "stale.sock")
        listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        listener.bind(stale)
        listener.close()
        for path in (missing, stale):
            calls = [("sync run", lambda: Client(path).run(["true"])),
                     ("sync health", lambda: Client(path).health()),
                     ("asyncio run", lambda: asyncio.run(AsyncClient(path).run(["true"]))),
                     ("asyncio cancel", lambda: asyncio.run(AsyncClient(path).cancel("r-1")))]
            for name, call in calls:
                with self.subTest(name, path=path):
                    error = self.raises(DaemonUnreachable, call)
                    self.assertEqual(error.socket, path)
                    self.assertIn(path, str(error))
                    self.assertIn("egress-sandbox serve", str(error))
                    self.assertIsInstance(error, SandboxError)
                    self.assertIsInstance(error, ConnectionError)  # an OSError, as it was
                    self.assertIsNone(error.status)


class FootGunTests(FakeDaemonTest):
    def refused_before_sending(self, field, **call):
        """Each client refuses `call` with InvalidRequest naming `field`, having sent
        nothing."""
        argv = call.pop("argv", ["true"])
        sync, asynchronous = Client(self.socket), AsyncClient(self.socket)
        calls = [("run", lambda: sync.run(argv, **call)),
                 ("asyncio run", lambda: asyncio.run(asynchronous.run(argv, **call)))]
        if not any(name.startswith("on_") for name in call):
            calls += [("events", lambda: sync.events(argv, **call)),
                      ("asyncio events", lambda: asynchronous.events(argv, **call))]
        for name, attempt in calls:
            with self.subTest(name, field=field):
                error = self.raises(InvalidRequest, attempt)
                self.assertEqual((error.field, error.status), (field, 400))
                self.assertIsInstance(error, ValueError)
        self.assertEqual(self.daemon.seen, [])
        return error

    def test_a_string_as_the_command_is_refused(self):
        error = self.refused_before_sending("argv", argv="ls -la")
        self.assertIn('["sh", "-c", LINE]', error.error)
        self.refused_before_sending("argv", argv=b"ls")
        self.refused_before_sending("argv", argv=["ls", 3])

    def test_a_string_where_a_list_goes_is_refused(self):
        self.refused_before_sending("allow", allow="pypi.org")
        self.refused_before_sending("mounts", mounts="/src:/dst")
        self.refused_before_sending("policies", policies="version: 1\n")
        self.refused_before_sending("env", env="A=1")
        self.refused_before_sending("env", env=[("A", "1", "2")])
        self.refused_before_sending("files", files=["main.py"])

    def test_values_the_client_can_judge_are_refused(self):
        self.refused_before_sending("timeout", timeout=0)
        self.refused_before_sending("timeout", timeout=-1)
        self.refused_before_sending("timeout", timeout=float("nan"))
        self.refused_before_sending("cpus", cpus=0)
        self.refused_before_sending("stdin", stdin=3)
        self.refused_before_sending("on_output", on_output="print")

    def test_an_unknown_option_is_a_type_error(self):
        with self.assertRaises(TypeError):
            Client(self.socket).run(["true"], egressNetwork="x")
        self.assertEqual(self.daemon.seen, [])


class WarningTests(FakeDaemonTest):
    def policy(self, name):
        """A policy of its own for one test: "once per policy" is per process."""
        return {"file": "%s.yaml" % name, "yaml": "# %s %s\n" % (name, id(self))}

    def test_a_warning_is_at_the_callers_line_once_per_policy(self):
        for name, run in self.runs():
            with self.subTest(name):
                first, second = self.policy(name + "-a"), self.policy(name + "-b")
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    line = inspect.currentframe().f_lineno + 1
                    run(["true"], policies=[first])
                    run(["true"], policies=[first])
                    result = run(["true"], policies=[second])
                told = [w for w in caught if issubclass(w.category, SandboxWarning)]
                self.assertEqual(len(told), 2, [str(w.message) for w in told])
                self.assertEqual(str(told[0].message), "policy p.yaml: a warning")
                if name == "sync":
                    # The line that called run, not a line of the package.
                    self.assertEqual((told[0].filename, told[0].lineno), (__file__, line))
                self.assertEqual(result.warnings, ["policy p.yaml: a warning"])

    def test_the_asyncio_clients_warning_is_at_the_line_that_called_run(self):
        async def main():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                line = inspect.currentframe().f_lineno + 1
                task = asyncio.ensure_future(AsyncClient(self.socket).run(
                    ["true"], policies=[self.policy("asyncio-task")]))
                await task
            return caught, line

        caught, line = asyncio.run(main())
        told = [w for w in caught if issubclass(w.category, SandboxWarning)]
        self.assertEqual([(w.filename, w.lineno) for w in told], [(__file__, line)])

    def test_the_callback_gets_every_warning(self):
        seen = []
        for _, run in self.runs():
            for _ in range(2):
                run(["true"], policies=[self.policy("callback")], on_warning=seen.append)
        self.assertEqual(len(seen), 4)

    def test_a_warning_the_filters_make_an_error_is_raised_each_time(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SandboxWarning)
            for _ in range(2):
                with self.assertRaises(SandboxWarning):
                    Client(self.socket).run(["true"], policies=[self.policy("error")])


if __name__ == "__main__":
    unittest.main()
