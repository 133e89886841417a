"""Another local user's fake daemon, for real: a process running as uid 65534 (through
`setpriv`) listens where the client will connect and records every byte it receives. Given
a secret, both clients must raise UntrustedSocket naming the owner, and the fake daemon must
have received nothing. Needs root (to start processes as other users) and `setpriv`."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import egress_sandbox
from egress_sandbox import AsyncClient, Client, UntrustedSocket

SECRET = "sk-python-untrusted-socket-value"
ATTACKER = 65534
VICTIM = 65533
# An interpreter other users may run (not one under root's home, as pyenv's or a venv's).
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

# Listens on argv[1] (mode 0777: anyone may connect), making its directory first with mode
# argv[2] when given; answers each connection's first bytes with a 400 (so a client that
# sends does not wait forever); once stdin closes, reads what is still queued and prints
# `received N bytes: ...`.
FAKE_DAEMON = r'''
import os, selectors, socket, sys
if len(sys.argv) > 2:
    os.mkdir(os.path.dirname(sys.argv[1]))
    os.chmod(os.path.dirname(sys.argv[1]), int(sys.argv[2], 8))
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
listener.listen(16)
listener.setblocking(False)
selector = selectors.DefaultSelector()
selector.register(listener, selectors.EVENT_READ)
selector.register(0, selectors.EVENT_READ)
received = bytearray()
answered = set()
answer = b'{"error":"fake daemon"}'
answer = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
          b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(answer), answer))
def take(connection):
    data = connection.recv(65536)
    if data:
        if connection not in answered:
            answered.add(connection)
            connection.sendall(answer)
        received.extend(data)
    return data
print("listening", flush=True)
stopping = False
while not stopping:
    for key, _ in selector.select():
        if key.fileobj is listener:
            connection, _ = listener.accept()
            selector.register(connection, selectors.EVENT_READ)
        elif key.fileobj == 0:
            stopping = not os.read(0, 1)
        elif not take(key.fileobj):
            selector.unregister(key.fileobj)
            key.fileobj.close()
pending = [key.fileobj for key in selector.get_map().values()
           if key.fileobj not in (0, listener)]
while True:
    try:
        pending.append(listener.accept()[0])
    except BlockingIOError:
        break
for connection in pending:
    connection.setblocking(True)
    connection.settimeout(10)
    while take(connection):
        pass
print("received %d bytes: %r" % (len(received), bytes(received)), flush=True)
'''

# Both clients with their default socket and a secret, as whoever runs this; prints the
# default socket and each client's outcome as JSON.
CLIENT = r'''
import asyncio, json, sys
from egress_sandbox import AsyncClient, Client, default_socket
secrets = {"API_KEY": sys.argv[1]}
outcomes = {"default": default_socket()}
runs = {"sync": lambda: Client().run(["true"], secrets=secrets),
        "asyncio": lambda: asyncio.run(AsyncClient().run(["true"], secrets=secrets))}
for name, run in runs.items():
    try:
        run()
        outcomes[name] = ["ok", ""]
    except Exception as error:
        outcomes[name] = [type(error).__name__, str(error)]
print(json.dumps(outcomes))
'''


def as_user(uid):
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"]


class FakeDaemon:
    """The fake daemon as `uid` on `socket` (its directory made with `directory_mode`)."""

    def __init__(self, uid, socket, directory_mode=None):
        argv = as_user(uid) + ["python3", "-c", FAKE_DAEMON, socket]
        if directory_mode is not None:
            argv.append("%o" % directory_mode)
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env={"PATH": SYSTEM_PATH}, text=True)
        line = self.process.stdout.readline()
        if line != "listening\n":
            self.process.kill()
            raise AssertionError("the fake daemon did not start: %r" % line)

    def received(self):
        """Stops the daemon; its last line, `received N bytes: ...`."""
        self.process.stdin.close()
        rest = self.process.stdout.read()
        self.process.wait(timeout=60)
        self.process.stdout.close()
        return rest.strip()


def shared_dir(test):
    """A directory of the test's own with mode 1777, like /tmp: any user may put a socket
    in it."""
    path = tempfile.mkdtemp()
    os.chmod(path, 0o1777)
    test.addCleanup(shutil.rmtree, path)
    return path


@unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("setpriv"),
                     "needs root and setpriv to start the fake daemon as another user")
class UntrustedSocketTests(unittest.TestCase):
    @staticmethod
    def run_both(socket):
        """Each client's run with a secret against `socket`: (name, error raised or None)."""
        outcomes = []
        for name, run in [
                ("sync", lambda: Client(socket).run(["true"], secrets={"API_KEY": SECRET})),
                ("asyncio", lambda: asyncio.run(
                    AsyncClient(socket).run(["true"], secrets={"API_KEY": SECRET})))]:
            try:
                run()
                outcomes.append((name, None))
            except Exception as error:  # judged once the fake daemon said what it received
                outcomes.append((name, error))
        return outcomes

    def test_a_socket_another_user_owns_gets_nothing(self):
        socket = os.path.join(shared_dir(self), "api.sock")
        daemon = FakeDaemon(ATTACKER, socket)
        try:
            outcomes = self.run_both(socket)
        finally:
            received = daemon.received()
        self.assertEqual(received, "received 0 bytes: b''")
        for name, error in outcomes:
            with self.subTest(name):
                self.assertIsInstance(error, UntrustedSocket)
                self.assertIn("%s is owned by uid 65534 (nobody)" % socket, str(error))
                self.assertEqual((error.socket, error.owner, error.owner_name),
                                 (socket, ATTACKER, "nobody"))
                self.assertNotIn(SECRET, str(error))

    def test_another_user_answering_on_a_socket_root_owns_gets_nothing(self):
        # What a socket swapped in after the owner's check amounts to: the file is root's,
        # the process that accepts is uid 65534's.
        socket = os.path.join(shared_dir(self), "api.sock")
        daemon = FakeDaemon(ATTACKER, socket)
        try:
            os.chown(socket, 0, 0)
            outcomes = self.run_both(socket)
        finally:
            received = daemon.received()
        self.assertEqual(received, "received 0 bytes: b''")
        for name, error in outcomes:
            with self.subTest(name):
                self.assertIsInstance(error, UntrustedSocket)
                self.assertIn("the process answering on %s runs as uid 65534 (nobody)" % socket,
                              str(error))

    def client_as_victim(self, tmpdir):
        """Both clients run as uid 65533 with TMPDIR=`tmpdir` and no other setting: their
        outcomes, from the installed package copied where that user can read it."""
        copy = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, copy)
        os.chmod(copy, 0o755)
        shutil.copytree(os.path.dirname(egress_sandbox.__file__),
                        os.path.join(copy, "egress_sandbox"))
        done = subprocess.run(as_user(VICTIM) + ["python3", "-c", CLIENT, SECRET],
                              env={"PATH": SYSTEM_PATH, "PYTHONPATH": copy, "TMPDIR": tmpdir},
                              capture_output=True, text=True, timeout=120, check=False)
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout)

    def test_the_default_socket_in_a_directory_another_user_made_gets_nothing(self):
        tmpdir = shared_dir(self)
        directory = os.path.join(tmpdir, "egress-sandbox-%d" % VICTIM)
        socket = os.path.join(directory, "api.sock")
        daemon = FakeDaemon(ATTACKER, socket, directory_mode=0o777)
        try:
            outcomes = self.client_as_victim(tmpdir)
        finally:
            received = daemon.received()
        self.assertEqual(received, "received 0 bytes: b''")
        self.assertEqual(outcomes["default"], socket)
        for name in ("sync", "asyncio"):
            with self.subTest(name):
                kind, message = outcomes[name]
                self.assertEqual(kind, "UntrustedSocket", message)
                self.assertIn("the default socket's directory %s is owned by uid 65534 (nobody)"
                              % directory, message)

    def test_the_default_socket_in_a_directory_of_ones_own_is_used(self):
        tmpdir = shared_dir(self)
        socket = os.path.join(tmpdir, "egress-sandbox-%d" % VICTIM, "api.sock")
        daemon = FakeDaemon(VICTIM, socket, directory_mode=0o700)
        try:
            outcomes = self.client_as_victim(tmpdir)
        finally:
            received = daemon.received()
        self.assertIn(SECRET, received)
        for name in ("sync", "asyncio"):
            with self.subTest(name):
                # The fake daemon's answer to every request (a 400): the client did reach it.
                self.assertEqual(outcomes[name], ["InvalidRequest", "fake daemon"])


if __name__ == "__main__":
    unittest.main()
