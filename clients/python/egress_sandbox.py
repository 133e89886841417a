"""Client of `egress-sandbox serve` (the local API on a Unix socket). Standard library only.

    from egress_sandbox import Client

    result = Client().run(["python3", "main.py"],
                          files={"main.py": "print(6*7)"},
                          allow=["pypi.org"], timeout=20)
    print(result.exit_code, result.stdout, result.blocked)

`run` streams the run's events (output, audit records) while the command runs; closing the
connection (an exception in `on_output`, a KeyboardInterrupt) cancels the run on the daemon.
"""

import base64
import http.client
import json
import math
import os
import socket as _socket

__all__ = ["Client", "Result", "RequestRefused", "DaemonError"]


def default_socket():
    """`EGRESS_SANDBOX_SERVER`, else the daemon's default path for this user."""
    configured = os.environ.get("EGRESS_SANDBOX_SERVER")
    if configured:
        return configured
    if os.geteuid() == 0:
        return "/run/egress-sandbox/api.sock"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return os.path.join(runtime_dir, "egress-sandbox.sock")
    return "/tmp/egress-sandbox-%d.sock" % os.geteuid()


class RequestRefused(Exception):
    """The daemon answered 400: `run` would have refused this request (nothing was created)."""

    def __init__(self, status, error, field=None, diagnostics=()):
        super().__init__("%s (field %s)" % (error, field) if field else error)
        self.status = status
        self.error = error
        self.field = field
        self.diagnostics = list(diagnostics)


class DaemonError(Exception):
    """The run could not be set up (Docker refused), or the stream broke off."""


class Result:
    """A finished run: `stdout`/`stderr` are bytes, `records` the audit records (dicts),
    `blocked` the refused attempts grouped by host, port and reason, `report` the run report."""

    def __init__(self, run_id, stdout, stderr, records, report, summary):
        self.run_id = run_id
        self.stdout = stdout
        self.stderr = stderr
        self.records = records
        self.report = report
        self.summary = summary
        self.exit_code = report["exit_code"]
        self.status = report["status"]
        self.blocked = report.get("blocked", [])

    def __repr__(self):
        return "Result(run_id=%r, status=%r, exit_code=%r, blocked=%d)" % (
            self.run_id, self.status, self.exit_code, len(self.blocked))


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=None):
        super().__init__("egress-sandbox", timeout=timeout)
        self._path = path

    def connect(self):
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError as error:
            sock.close()
            # "[Errno 2] No such file or directory" alone does not say which socket.
            error.filename = self._path
            raise
        self.sock = sock


def _duration(value):
    """Seconds → whole milliseconds, rounded up (0.0001 s is 1ms, never "0ms", which the
    daemon would refuse as a value nobody wrote); a string goes as it is."""
    if value is None or isinstance(value, str):
        return value
    seconds = float(value)
    if not seconds > 0:
        raise ValueError("timeout must be a positive number of seconds, got %r" % (value,))
    return "%dms" % math.ceil(seconds * 1000)


def _b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


class Client:
    """The daemon at `socket` (default: `EGRESS_SANDBOX_SERVER` or the default path)."""

    def __init__(self, socket=None):
        self.socket = socket or default_socket()

    def _request(self, method, path, body=None):
        connection = _UnixConnection(self.socket)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        return connection, connection.getresponse()

    def health(self):
        connection, response = self._request("GET", "/v1/health")
        try:
            return json.loads(response.read())
        finally:
            connection.close()

    def cancel(self, run_id, terminate=False):
        """Cancels a run in progress (it ends `interrupted`, exit 130, or 143 with terminate)."""
        path = "/v1/runs/%s%s" % (run_id, "?signal=TERM" if terminate else "")
        connection, response = self._request("DELETE", path)
        try:
            body = json.loads(response.read() or b"{}")
            if response.status != 200:
                raise RequestRefused(response.status, body.get("error", ""), body.get("field"))
        finally:
            connection.close()

    def run(self, argv, allow=None, timeout=None, files=None, env=None, on_output=None,
            stdin=None, policies=None, memory=None, cpus=None, pids=None, tmp=None,
            output_limit=None, workdir=None, image=None, resolve=None, egress_network=None,
            on_started=None, secrets=None, upstream_ca=None, runtime=None, audit_limit=None):
        """Runs `argv` in a sandbox and returns its Result.

        timeout: seconds (number) or a duration string ("500ms", "2m"); files: {path:
        bytes|str} written under /task (then the working directory); stdin: bytes|str;
        on_output(stream, data): called with "stdout"/"stderr" and bytes as output comes;
        on_started(run_id): called once the run has its id (for `cancel`); secrets: {NAME:
        value} for the policy's credentials (the proxy holds them, the sandbox gets
        placeholders); upstream_ca: [PEM text] the proxy trusts for upstream TLS; runtime:
        the sandbox's OCI runtime (e.g. "runsc"); audit_limit: records written per run."""
        request = {"argv": list(argv)}
        optional = {
            "allow": list(allow) if allow else None,
            "policies": list(policies) if policies else None,
            "timeout": _duration(timeout),
            "memory": memory,
            "cpus": cpus,
            "pids": pids,
            "tmp": tmp,
            "output_limit": output_limit,
            "env": dict(env) if env else None,
            "workdir": workdir,
            "image": image,
            "files": {path: _b64(data) for path, data in files.items()} if files else None,
            "stdin": _b64(stdin) if stdin is not None else None,
            "resolve": dict(resolve) if resolve else None,
            "egress_network": egress_network,
            "secrets": dict(secrets) if secrets else None,
            "upstream_ca": list(upstream_ca) if upstream_ca else None,
            "runtime": runtime,
            "audit_limit": audit_limit,
        }
        request.update({key: value for key, value in optional.items() if value is not None})
        connection, response = self._request("POST", "/v1/runs", json.dumps(request))
        try:
            if response.status != 200:
                body = response.read()
                try:
                    refusal = json.loads(body)
                except ValueError:
                    refusal = {"error": body.decode(errors="replace")}
                raise RequestRefused(response.status, refusal.get("error", ""),
                                     refusal.get("field"), refusal.get("diagnostics", ()))
            return self._follow(response, on_output, on_started)
        finally:
            connection.close()

    @staticmethod
    def _follow(response, on_output, on_started):
        run_id = None
        out, err, records = [], [], []
        while True:
            line = response.readline()
            if not line:
                raise DaemonError("the daemon's stream ended before the run's end")
            event = json.loads(line)
            kind = event.get("event")
            if kind == "started":
                run_id = event["run"]
                if on_started:
                    on_started(run_id)
            elif kind == "output":
                data = base64.b64decode(event["b64"])
                (err if event["stream"] == "stderr" else out).append(data)
                if on_output:
                    on_output(event["stream"], data)
            elif kind == "audit":
                records.append(event["record"])
            elif kind == "exit":
                return Result(run_id, b"".join(out), b"".join(err), records,
                              event["report"], event.get("summary", ""))
            elif kind == "error":
                raise DaemonError(event.get("error", "the run could not be set up"))
