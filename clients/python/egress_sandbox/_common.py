"""What the sync and the asyncio clients share: the request body, the events, the errors."""

from __future__ import annotations

import base64
import math
import os
import socket as _socket
import struct
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
    return os.environ.get("EGRESS_SANDBOX_SERVER") or _default_path()


def _default_path() -> str:
    """Where the daemon listens by default: `/run/egress-sandbox/api.sock` for root, else
    `$XDG_RUNTIME_DIR/egress-sandbox.sock`, else `$TMPDIR/egress-sandbox-<uid>/api.sock`
    (TMPDIR defaulting to /tmp)."""
    uid = os.geteuid()
    if uid == 0:
        return "/run/egress-sandbox/api.sock"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return os.path.join(runtime_dir, "egress-sandbox.sock")
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", "egress-sandbox-%d" % uid,
                        "api.sock")


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


class UntrustedSocket(SandboxError):
    """The socket, the default socket's directory, or the process answering on the socket
    belongs to someone other than the caller or root: it may be another user's fake daemon,
    so nothing was sent. `socket` is the path; `owner` the uid at fault and `owner_name` its
    user name (None where unknown)."""

    def __init__(self, socket: str, owner: int, before: str, after: str) -> None:
        """The message is `before`, the owner, `after` and what to do."""
        self.socket = socket
        self.owner = owner
        self.owner_name = _user_name(owner)
        super().__init__(before + _user(owner, self.owner_name) + after
                         + ": it may be another user's fake daemon, so nothing was sent to it; "
                         "use a socket of a daemon run by you or by root")


def _user_name(uid: int) -> Optional[str]:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return None


def _user(uid: int, name: Optional[str]) -> str:
    return "uid %d (%s)" % (uid, name) if name else "uid %d" % uid


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def check_socket(path: str) -> None:
    """Before connecting: the default socket's directory must be owned by the caller or root
    and not writable by its group or others (who could put a socket of theirs there); the
    socket (a link's target) must be owned by the caller or root. Raises UntrustedSocket;
    OSError naming the path when there is nothing to check."""
    if os.path.abspath(path) == os.path.abspath(_default_path()):
        _check_default_directory(path)
    try:
        owner = os.stat(path).st_uid
    except OSError as error:
        # "[Errno 2] No such file or directory" alone does not say which socket.
        error.filename = path
        raise
    if not _trusted(owner):
        raise UntrustedSocket(path, owner, path + " is owned by ", ", not by you or root")


def _check_default_directory(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return  # no daemon has made it: connecting fails, naming the socket
    if not _trusted(info.st_uid):
        raise UntrustedSocket(path, info.st_uid, "the default socket's directory %s is owned "
                              "by " % directory, ", not by you or root")
    if info.st_mode & 0o022:
        raise UntrustedSocket(path, info.st_uid, "the default socket's directory %s (owner "
                              % directory, ") can be written by its group or others (mode %o)"
                              % (info.st_mode & 0o7777))


def check_peer(sock: _socket.socket, path: str) -> None:
    """After connecting, before writing: the process that accepted must run as the caller
    or root (SO_PEERCRED; where the platform lacks it, the owner check stands alone)."""
    option = getattr(_socket, "SO_PEERCRED", None)
    if option is None:
        return
    credentials = struct.Struct("iII")  # struct ucred: pid_t, uid_t, gid_t
    _pid, uid, _gid = credentials.unpack(sock.getsockopt(_socket.SOL_SOCKET, option,
                                                         credentials.size))
    if not _trusted(uid):
        raise UntrustedSocket(path, uid, "the process answering on %s runs as " % path,
                              ", not as you or root")


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
