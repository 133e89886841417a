"""What the sync and the asyncio clients share: the request body, the events, the errors."""

from __future__ import annotations

import base64
import math
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional, Union

Data = Union[bytes, str]
# `env` as the API takes it: {"K": "V"} or [("K", "V"), ...] (order kept).
Env = Union[Mapping[str, str], Sequence[Sequence[str]]]
# A policy: YAML text, or {"file": NAME, "yaml": TEXT} (NAME shows in diagnostics).
Policy = Union[str, Mapping[str, str]]
# An upstream CA: PEM text, or {"file": NAME, "pem": TEXT}.
Certificate = Union[str, Mapping[str, str]]
# A duration: seconds (a number) or text as the API takes it ("500ms", "2m").
Duration = Union[int, float, str]
OnOutput = Callable[[str, bytes], Any]
OnStarted = Callable[[str], Any]
OnWarning = Callable[[str], Any]


def default_socket() -> str:
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


class SandboxError(Exception):
    """Every error of the client carries `error` (the message), `field` (the request field at
    fault, or None), `status` (the HTTP status, or None once the run had started) and
    `diagnostics` (policy diagnostics, `FILE:LINE:COL: error: ...`)."""

    def __init__(self, error: str, field: Optional[str] = None, status: Optional[int] = None,
                 diagnostics: Iterable[str] = ()) -> None:
        super().__init__("%s (field %s)" % (error, field) if field else error)
        self.error = error
        self.field = field
        self.status = status
        self.diagnostics = list(diagnostics)


class RequestRefused(SandboxError):
    """The daemon refused the request (400: `run` would have refused it; nothing was
    created; 503: busy or stopping)."""

    def __init__(self, status: int, error: str, field: Optional[str] = None,
                 diagnostics: Iterable[str] = ()) -> None:
        super().__init__(error, field or None, status, diagnostics)


class DaemonError(SandboxError):
    """The run could not be set up (Docker refused), or the stream broke off."""


class SandboxWarning(UserWarning):
    """A warning of the daemon about the run (a policy warning): issued with `warnings.warn`
    when no `on_warning` callback is given."""


class Result:
    """A finished run: `stdout`/`stderr` are bytes, `records` the audit records (dicts),
    `blocked` the refused attempts grouped by host, port and reason, `report` the run report,
    `warnings` the daemon's warnings about the run."""

    def __init__(self, run_id: Optional[str], stdout: bytes, stderr: bytes,
                 records: list[dict[str, Any]], report: dict[str, Any], summary: str,
                 warnings: list[str]) -> None:
        self.run_id = run_id
        self.stdout = stdout
        self.stderr = stderr
        self.records = records
        self.report = report
        self.summary = summary
        self.warnings = warnings
        self.exit_code: int = report["exit_code"]
        self.status: str = report["status"]
        self.blocked: list[dict[str, Any]] = report.get("blocked", [])

    def __repr__(self) -> str:
        return "Result(run_id=%r, status=%r, exit_code=%r, blocked=%d)" % (
            self.run_id, self.status, self.exit_code, len(self.blocked))


def _duration(value: Optional[Duration]) -> Optional[str]:
    """Seconds → whole milliseconds, rounded up (0.0001 s is 1ms, never "0ms", which the
    daemon would refuse as a value nobody wrote); a string goes as it is."""
    if value is None or isinstance(value, str):
        return value
    seconds = float(value)
    if not seconds > 0:
        raise ValueError("timeout must be a positive number of seconds, got %r" % (value,))
    return "%dms" % math.ceil(seconds * 1000)


def _b64(data: Data) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def _env(env: Env) -> Any:
    if isinstance(env, Mapping):
        return dict(env)
    return [list(pair) for pair in env]


def request_body(argv: Sequence[str], **options: Any) -> dict[str, Any]:
    """The API's request for `run`'s arguments; None means not given."""
    files = options.get("files")
    stdin = options.get("stdin")
    optional = {
        "allow": list(options["allow"]) if options.get("allow") else None,
        "policies": list(options["policies"]) if options.get("policies") else None,
        "timeout": _duration(options.get("timeout")),
        "memory": options.get("memory"),
        "cpus": options.get("cpus"),
        "pids": options.get("pids"),
        "tmp": options.get("tmp"),
        "output_limit": options.get("output_limit"),
        "env": _env(options["env"]) if options.get("env") else None,
        "workdir": options.get("workdir"),
        "image": options.get("image"),
        "files": {path: _b64(data) for path, data in files.items()} if files else None,
        "stdin": _b64(stdin) if stdin is not None else None,
        "resolve": dict(options["resolve"]) if options.get("resolve") else None,
        "mounts": list(options["mounts"]) if options.get("mounts") else None,
        "egress_network": options.get("egress_network"),
        "secrets": dict(options["secrets"]) if options.get("secrets") else None,
        "upstream_ca": list(options["upstream_ca"]) if options.get("upstream_ca") else None,
        "runtime": options.get("runtime"),
        "audit_limit": options.get("audit_limit"),
        "on_audit_limit": options.get("on_audit_limit"),
    }
    request: dict[str, Any] = {"argv": list(argv)}
    request.update({key: value for key, value in optional.items() if value is not None})
    return request


def refusal(status: int, body: bytes) -> RequestRefused:
    import json

    try:
        answer = json.loads(body)
    except ValueError:
        answer = {"error": body.decode(errors="replace").strip()}
    return RequestRefused(status, answer.get("error", ""), answer.get("field"),
                          answer.get("diagnostics", ()))


class Events:
    """Follows one run's event stream, line by line, to its Result."""

    def __init__(self, on_output: Optional[OnOutput], on_started: Optional[OnStarted],
                 on_warning: Optional[OnWarning]) -> None:
        self.on_output = on_output
        self.on_started = on_started
        self.on_warning = on_warning
        self.run_id: Optional[str] = None
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.records: list[dict[str, Any]] = []
        self.warnings: list[str] = []

    def take(self, event: dict[str, Any]) -> Optional[Result]:
        """Takes one event; the Result once the run has ended."""
        kind = event.get("event")
        if kind == "warning":
            self.warnings.append(event["text"])
            if self.on_warning:
                self.on_warning(event["text"])
            else:
                warnings.warn(event["text"], SandboxWarning, stacklevel=4)
        elif kind == "started":
            self.run_id = event["run"]
            if self.on_started:
                self.on_started(event["run"])
        elif kind == "output":
            data = base64.b64decode(event["b64"])
            (self.err if event["stream"] == "stderr" else self.out).append(data)
            if self.on_output:
                self.on_output(event["stream"], data)
        elif kind == "audit":
            self.records.append(event["record"])
        elif kind == "exit":
            return Result(self.run_id, b"".join(self.out), b"".join(self.err), self.records,
                          event["report"], event.get("summary", ""), self.warnings)
        elif kind == "error":
            raise DaemonError(event.get("error", "the run could not be set up"))
        return None

    @staticmethod
    def ended() -> DaemonError:
        return DaemonError("the daemon's stream ended before the run's end")
