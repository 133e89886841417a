"""What a run gives back, typed: the report, the audit records and the blocked groups as the
daemon sends them (TypedDicts: plain dicts at run time), the Result, and the events."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Literal, Optional, TypedDict, Union

from ._errors import DaemonError

RunStatus = Literal["exited", "timeout", "oom", "interrupted", "proxy_failed"]
Decision = Literal["allowed", "blocked", "would_block", "failed"]
Stream = Literal["stdout", "stderr"]


class BlockedGroup(TypedDict):
    """Refused attempts (blocked or would_block) of one host, port and reason."""

    host: str
    port: Optional[int]  # None for DNS
    reason: str
    count: int


class OutputStats(TypedDict):
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool


class DecisionCounts(TypedDict):
    allowed: int
    blocked: int
    would_block: int
    failed: int


class AuditCounts(TypedDict):
    written: int
    dropped: int
    dropped_by_decision: DecisionCounts


class _RunReport(TypedDict):
    v: int
    run: str
    status: RunStatus
    exit_code: int
    duration_ms: int
    image: str
    policy: str
    output: OutputStats
    attempts: DecisionCounts
    blocked: List[BlockedGroup]
    blocked_more: int
    audit: AuditCounts
    audit_head: Optional[str]


class RunReport(_RunReport, total=False):
    """The run report, as `run --report` writes it (docs/src/guide/cli.md)."""

    audit_log_error: str


class AuditRecord(TypedDict, total=False):
    """One line of the run's audit chain, as the proxy wrote it
    (docs/src/reference/audit-record.md). Attempts carry `kind` connect, http, dns, tls or
    tcp; the `limit` and `end` lines share the chain with fields of their own."""

    v: int
    ts: str
    run: Optional[str]
    policy: Optional[str]
    kind: str
    client: Optional[str]
    sandbox_hostname: str
    host: str
    port: Optional[int]
    decision: Decision
    reason: str
    rule: Optional[str]
    addr: Optional[str]
    addrs: List[str]
    bytes_up: int
    bytes_down: int
    duration_ms: int
    method: str
    path: str
    status: Optional[int]
    credential: Optional[str]
    reflected: int
    limit: int
    on_audit_limit: str
    reserve: int
    records: int
    dropped: int
    dropped_by_decision: DecisionCounts
    seq: int
    prev: str


@dataclass
class Result:
    """A finished run: `stdout`/`stderr` are bytes, `records` the audit records, `blocked`
    the refused attempts grouped by host, port and reason, `report` the run report,
    `warnings` the daemon's warnings about the run, `teardown_errors` what the daemon could
    not remove after the run (`egress-sandbox gc` will)."""

    run_id: Optional[str]
    stdout: bytes
    stderr: bytes
    records: List[AuditRecord]
    report: RunReport
    summary: str
    warnings: List[str]
    teardown_errors: List[str] = field(default_factory=list)
    exit_code: int = field(init=False)
    status: RunStatus = field(init=False)
    blocked: List[BlockedGroup] = field(init=False)

    def __post_init__(self) -> None:
        self.exit_code = self.report["exit_code"]
        self.status = self.report["status"]
        self.blocked = self.report.get("blocked", [])

    def __repr__(self) -> str:
        return "Result(run_id=%r, status=%r, exit_code=%r, blocked=%d)" % (
            self.run_id, self.status, self.exit_code, len(self.blocked))


@dataclass(frozen=True)
class WarningEvent:
    """A warning of the daemon about the run (a policy's warning): before `started`."""

    event: ClassVar[str] = "warning"
    text: str


@dataclass(frozen=True)
class StartedEvent:
    """The run has its id (what `cancel` takes)."""

    event: ClassVar[str] = "started"
    run_id: str


@dataclass(frozen=True)
class OutputEvent:
    """A piece of the command's output, as it came."""

    event: ClassVar[str] = "output"
    stream: Stream
    data: bytes


@dataclass(frozen=True)
class AuditEvent:
    """An audit record, as the proxy wrote it."""

    event: ClassVar[str] = "audit"
    record: AuditRecord


@dataclass(frozen=True)
class ExitEvent:
    """The last event: the run's Result (with all its output and records)."""

    event: ClassVar[str] = "exit"
    result: Result


Event = Union[WarningEvent, StartedEvent, OutputEvent, AuditEvent, ExitEvent]


class Follower:
    """Follows one run's event stream, line by line, to its Result: each wire event in, the
    typed event out (a setup failure raised as DaemonError)."""

    def __init__(self) -> None:
        self.run_id: Optional[str] = None
        self.out: List[bytes] = []
        self.err: List[bytes] = []
        self.records: List[AuditRecord] = []
        self.warnings: List[str] = []

    def take(self, wire: Dict[str, Any]) -> Optional[Event]:
        """The typed event of one wire event; None for a kind this client does not know
        (a newer daemon's)."""
        kind = wire.get("event")
        if kind == "warning":
            self.warnings.append(wire["text"])
            return WarningEvent(wire["text"])
        if kind == "started":
            self.run_id = wire["run"]
            return StartedEvent(wire["run"])
        if kind == "output":
            data = base64.b64decode(wire["b64"])
            if wire["stream"] == "stderr":
                self.err.append(data)
                return OutputEvent("stderr", data)
            self.out.append(data)
            return OutputEvent("stdout", data)
        if kind == "audit":
            self.records.append(wire["record"])
            return AuditEvent(wire["record"])
        if kind == "exit":
            return ExitEvent(Result(self.run_id, b"".join(self.out), b"".join(self.err),
                                    self.records, wire["report"], wire.get("summary", ""),
                                    self.warnings, list(wire.get("teardown_errors", []))))
        if kind == "error":
            raise DaemonError(wire.get("error") or "the run could not be set up", self.run_id,
                              wire.get("field"))
        return None

    def ended(self) -> DaemonError:
        return DaemonError("the daemon's answer ended before the run's end", self.run_id)
