"""Client of `egress-sandbox serve` (the local API on a Unix socket). Standard library only.

    from egress_sandbox import Client

    result = Client().run(["python3", "main.py"],
                          files={"main.py": "print(6*7)"},
                          allow=["pypi.org"], timeout=20)
    print(result.exit_code, result.stdout, result.blocked)

`run` streams the run's events (output, audit records, warnings) to its callbacks while the
command runs; `events` gives the same as an iterator. Closing the connection (an exception
in `on_output`, a KeyboardInterrupt, a cancelled asyncio task, leaving an `events` loop
inside its `with` block) cancels the run on the daemon. `AsyncClient` is the same for
asyncio.

A daemon busy with its limit of runs (503) is asked again after its `Retry-After`, within
the call's timeout. The errors are one hierarchy under SandboxError:

    SandboxError
        RequestRefused        the request was refused; nothing was created
            InvalidRequest    400, naming the field (also the client's own checks)
            DaemonBusy        503, still busy at the call's deadline, or stopping
        DaemonUnreachable     no daemon answers at the socket (a ConnectionError too)
        UntrustedSocket       the socket is another user's: nothing was sent
        DaemonError           the run could not be set up, or the answer broke off

Before a byte is sent, the socket must be owned by the caller or root (and the default
socket's directory too, not writable by others), and so must the process that accepts
(SO_PEERCRED); else `UntrustedSocket`: another user's fake daemon never gets the secrets.
"""

from ._aio import AsyncClient, AsyncRunEvents
from ._errors import (DaemonBusy, DaemonError, DaemonUnreachable, InvalidRequest,
                      RequestRefused, SandboxError, UntrustedSocket)
from ._socket import default_socket
from ._sync import Client, RunEvents
from ._types import (AuditCounts, AuditEvent, AuditRecord, BlockedGroup, DecisionCounts, Event,
                     ExitEvent, OutputEvent, OutputStats, Result, RunReport, RunStatus,
                     StartedEvent, WarningEvent)
from ._warnings import SandboxWarning

__all__ = [
    "AsyncClient", "AsyncRunEvents", "AuditCounts", "AuditEvent", "AuditRecord",
    "BlockedGroup", "Client", "DaemonBusy", "DaemonError", "DaemonUnreachable",
    "DecisionCounts", "Event", "ExitEvent", "InvalidRequest", "OutputEvent", "OutputStats",
    "RequestRefused", "Result", "RunEvents", "RunReport", "RunStatus", "SandboxError",
    "SandboxWarning", "StartedEvent", "UntrustedSocket", "WarningEvent", "default_socket",
]
