"""Client of `egress-sandbox serve` (the local API on a Unix socket). Standard library only.

    from egress_sandbox import Client

    result = Client().run(["python3", "main.py"],
                          files={"main.py": "print(6*7)"},
                          allow=["pypi.org"], timeout=20)
    print(result.exit_code, result.stdout, result.blocked)

`run` streams the run's events (output, audit records, warnings) while the command runs;
closing the connection (an exception in `on_output`, a KeyboardInterrupt, a cancelled
asyncio task) cancels the run on the daemon. `AsyncClient` is the same for asyncio.

Before a byte is sent, the socket must be owned by the caller or root (and the default
socket's directory too, not writable by others), and so must the process that accepts
(SO_PEERCRED); else `UntrustedSocket`: another user's fake daemon never gets the secrets.
"""

from ._aio import AsyncClient
from ._common import (DaemonError, RequestRefused, Result, SandboxError, SandboxWarning,
                      UntrustedSocket, default_socket)
from ._sync import Client

__all__ = ["AsyncClient", "Client", "DaemonError", "RequestRefused", "Result", "SandboxError",
           "SandboxWarning", "UntrustedSocket", "default_socket"]
