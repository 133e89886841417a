"""Which socket, and whether it may be sent anything: the default path, the checks of who
owns the socket and who answers on it, and connecting (DaemonUnreachable when nothing
answers)."""

from __future__ import annotations

import asyncio
import os
import socket as _socket
import struct

from ._errors import DaemonUnreachable, UntrustedSocket


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


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def check_socket(path: str) -> None:
    """Before connecting: the default socket's directory must be owned by the caller or root
    and not writable by its group or others (who could put a socket of theirs there); the
    socket (a link's target) must be owned by the caller or root. Raises UntrustedSocket, or
    DaemonUnreachable when there is no socket to check."""
    if os.path.abspath(path) == os.path.abspath(_default_path()):
        _check_default_directory(path)
    try:
        owner = os.stat(path).st_uid
    except OSError as error:
        raise DaemonUnreachable(path, error) from error
    if not _trusted(owner):
        raise UntrustedSocket(path, owner, path + " is owned by ", ", not by you or root")


def _check_default_directory(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return  # no daemon has made it: checking the socket names it
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


def connect(path: str) -> _socket.socket:
    """A connection to the daemon at `path`, checked (see check_socket and check_peer)."""
    check_socket(path)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.connect(path)
        except OSError as error:
            raise DaemonUnreachable(path, error) from error
        check_peer(sock, path)
    except BaseException:
        sock.close()
        raise
    return sock


async def open_connection(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """As `connect`, for asyncio."""
    check_socket(path)
    try:
        reader, writer = await asyncio.open_unix_connection(path)
    except OSError as error:
        raise DaemonUnreachable(path, error) from error
    try:
        check_peer(writer.get_extra_info("socket"), path)
    except BaseException:
        writer.close()
        raise
    return reader, writer
