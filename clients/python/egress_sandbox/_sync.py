"""The blocking client: `Client`."""

from __future__ import annotations

import http.client
import json
import socket as _socket
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ._common import (Certificate, Data, Duration, Env, Events, OnOutput, OnStarted, OnWarning,
                      Policy, RequestRefused, Result, UntrustedSocket, check_peer, check_socket,
                      default_socket, refusal, request_body)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        super().__init__("egress-sandbox", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        check_socket(self._path)
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
            check_peer(sock, self._path)
        except OSError as error:
            sock.close()
            # "[Errno 2] No such file or directory" alone does not say which socket.
            error.filename = self._path
            raise
        except UntrustedSocket:
            sock.close()
            raise
        self.sock = sock


class Client:
    """The daemon at `socket` (default: `EGRESS_SANDBOX_SERVER` or the default path)."""

    def __init__(self, socket: Optional[str] = None) -> None:
        self.socket = socket or default_socket()

    def _request(self, method: str, path: str, body: Optional[str] = None):
        connection = _UnixConnection(self.socket)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        return connection, connection.getresponse()

    def health(self) -> dict[str, Any]:
        connection, response = self._request("GET", "/v1/health")
        try:
            return json.loads(response.read())
        finally:
            connection.close()

    def cancel(self, run_id: str, terminate: bool = False) -> None:
        """Cancels a run in progress (it ends `interrupted`, exit 130, or 143 with terminate)."""
        path = "/v1/runs/%s%s" % (run_id, "?signal=TERM" if terminate else "")
        connection, response = self._request("DELETE", path)
        try:
            body = response.read()
            if response.status != 200:
                raise refusal(response.status, body)
        finally:
            connection.close()

    def run(self, argv: Sequence[str], allow: Optional[Sequence[str]] = None,
            timeout: Optional[Duration] = None, files: Optional[Mapping[str, Data]] = None,
            env: Optional[Env] = None, on_output: Optional[OnOutput] = None,
            stdin: Optional[Data] = None, policies: Optional[Sequence[Policy]] = None,
            memory: Optional[str] = None, cpus: Optional[float] = None,
            pids: Optional[int] = None, tmp: Optional[str] = None,
            output_limit: Optional[str] = None, workdir: Optional[str] = None,
            image: Optional[str] = None, resolve: Optional[Mapping[str, str]] = None,
            egress_network: Optional[str] = None, on_started: Optional[OnStarted] = None,
            secrets: Optional[Mapping[str, str]] = None,
            upstream_ca: Optional[Sequence[Certificate]] = None, runtime: Optional[str] = None,
            audit_limit: Optional[int] = None, on_audit_limit: Optional[str] = None,
            mounts: Optional[Sequence[str]] = None,
            on_warning: Optional[OnWarning] = None) -> Result:
        """Runs `argv` in a sandbox and returns its Result.

        timeout: seconds (number) or a duration string ("500ms", "2m"); files: {path:
        bytes|str} written under /task (then the working directory); stdin: bytes|str;
        env: {K: V} or [(K, V), ...]; policies: [YAML text or {"file", "yaml"}];
        on_output(stream, data): called with "stdout"/"stderr" and bytes as output comes;
        on_started(run_id): called once the run has its id (for `cancel`); on_warning(text):
        the daemon's warnings about the run (default: `warnings.warn` with SandboxWarning);
        secrets: {NAME: value} for the policy's credentials (the proxy holds them, the
        sandbox gets placeholders); upstream_ca: [PEM text or {"file", "pem"}] the proxy
        trusts for upstream TLS; runtime: the sandbox's OCI runtime (e.g. "runsc");
        audit_limit: records written per run; on_audit_limit: "reserve" (allowed attempts
        keep their records past the limit) or "refuse" (new egress is refused); mounts: ["SRC:DST[:rw]"] on the daemon's host.

        Raises RequestRefused (nothing was created) or DaemonError; both carry `error`,
        `field`, `status` and `diagnostics`."""
        request = request_body(
            argv, allow=allow, timeout=timeout, files=files, env=env, stdin=stdin,
            policies=policies, memory=memory, cpus=cpus, pids=pids, tmp=tmp,
            output_limit=output_limit, workdir=workdir, image=image, resolve=resolve,
            egress_network=egress_network, secrets=secrets, upstream_ca=upstream_ca,
            runtime=runtime, audit_limit=audit_limit, on_audit_limit=on_audit_limit,
            mounts=mounts)
        connection, response = self._request("POST", "/v1/runs", json.dumps(request))
        try:
            if response.status != 200:
                raise refusal(response.status, response.read())
            events = Events(on_output, on_started, on_warning)
            while True:
                line = response.readline()
                if not line:
                    raise Events.ended()
                result = events.take(json.loads(line))
                if result is not None:
                    return result
        finally:
            connection.close()


__all__ = ["Client", "RequestRefused"]
