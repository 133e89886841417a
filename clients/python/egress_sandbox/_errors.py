"""The client's errors: one hierarchy under SandboxError."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Optional


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
    """The request was refused and nothing was created: the daemon's answer was not 200
    (`status` says which; a 404 from `cancel` is an unknown run). The subclasses are the
    refusals a caller handles apart: InvalidRequest and DaemonBusy."""

    def __init__(self, status: int, error: str, field: Optional[str] = None,
                 diagnostics: Iterable[str] = ()) -> None:
        super().__init__(error, field or None, status, diagnostics)


class InvalidRequest(RequestRefused, ValueError):
    """400: the request is one `run` would refuse, and `field` names the request field at
    fault (`argv`, `timeout`, `policies` with `diagnostics` …). Raised by the daemon, or by
    the client itself before anything is sent for what it can tell alone (a string as the
    command, a timeout of zero, an option of the wrong kind); either way `status` is 400.
    A ValueError too."""

    def __init__(self, error: str, field: Optional[str] = None,
                 diagnostics: Iterable[str] = (), status: int = 400) -> None:
        super().__init__(status, error, field, diagnostics)


class DaemonBusy(RequestRefused):
    """503: the daemon had its limit of live runs, or was stopping, for as long as the
    call's timeout let the client wait and ask again, or it gave no `Retry-After` (then
    `retry_after` is None). `retry_after` is the daemon's last `Retry-After`, in seconds;
    `attempts` how many times the call asked."""

    def __init__(self, error: str, retry_after: Optional[float] = None,
                 field: Optional[str] = None, status: int = 503) -> None:
        super().__init__(status, error, field)
        self.retry_after = retry_after
        self.attempts = 1


class DaemonUnreachable(SandboxError, ConnectionError):
    """No daemon answers at `socket`: the file is missing, nothing listens on it, or the
    caller may not connect to it (`errno` and `strerror` say which). A ConnectionError
    (an OSError) too, with `filename` the socket."""

    def __init__(self, socket: str, cause: OSError) -> None:
        reason = cause.strerror or str(cause)
        SandboxError.__init__(
            self, "cannot reach the egress-sandbox daemon at %s: %s; start it with "
            "`egress-sandbox serve`, or name its socket (EGRESS_SANDBOX_SERVER or the client's "
            "socket argument)" % (socket, reason))
        self.socket = socket
        self.errno = cause.errno
        self.strerror = reason
        self.filename = socket

    # OSError's own would print "[Errno 2] …" without the socket's name and what to do.
    __str__ = Exception.__str__


class DaemonError(SandboxError):
    """The run could not be set up (Docker refused: the daemon's `error` event), or the
    daemon's answer broke off. `run_id` is the run's id once it had one, else None; `field`
    the request field whose value the engine refused (`image`, `runtime`, …), else None."""

    def __init__(self, error: str, run_id: Optional[str] = None,
                 field: Optional[str] = None) -> None:
        super().__init__(error, field or None)
        self.run_id = run_id


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


def refusal(status: int, body: bytes, retry_after: Optional[float] = None) -> RequestRefused:
    """The error for a daemon's answer other than 200: its JSON body `{"error", "field"
    [, "diagnostics"]}` (or its text, when it is not JSON)."""
    try:
        answer = json.loads(body)
        if not isinstance(answer, dict):
            raise ValueError
    except ValueError:
        answer = {"error": body.decode(errors="replace").strip()}
    error = str(answer.get("error") or "the daemon answered %d" % status)
    field = answer.get("field") or None
    if status == 400:
        return InvalidRequest(error, field, answer.get("diagnostics", ()))
    if status == 503:
        return DaemonBusy(error, retry_after, field)
    return RequestRefused(status, error, field, answer.get("diagnostics", ()))
