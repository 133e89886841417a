// Another local user's fake daemon, for real: a process running as uid 65534 (through
// `setpriv`) listens where the client will connect and records every byte it receives.
// Given a secret, the client must reject with UntrustedSocket naming the owner, and the fake
// daemon must have received nothing. Needs root (to start processes as other users) and
// `setpriv`; skipped otherwise.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import test from "node:test";
import { fileURLToPath } from "node:url";

import { Client, InvalidRequest, UntrustedSocket } from "../egress-sandbox.mjs";

const SECRET = "sk-node-untrusted-socket-value";
const ATTACKER = 65534;
const VICTIM = 65533;
const MODULE = fileURLToPath(new URL("../egress-sandbox.mjs", import.meta.url));

const hasSetpriv = (() => {
  try {
    execFileSync("setpriv", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();
const skip = process.geteuid?.() !== 0 || !hasSetpriv
  ? "needs root and setpriv to start the fake daemon as another user"
  : false;

// Listens on argv[1] (mode 0777: anyone may connect), making its directory first with mode
// argv[2] when given; answers each connection's first bytes with a 400 (so a client that
// sends does not wait forever); once stdin closes and every connection has ended, prints
// `received N bytes: JSON`.
const FAKE_DAEMON = `
const fs = require("fs"), net = require("net"), path = require("path");
const [socket, directoryMode] = process.argv.slice(1);
if (directoryMode) {
  fs.mkdirSync(path.dirname(socket));
  fs.chmodSync(path.dirname(socket), parseInt(directoryMode, 8));
}
const received = [];
const body = '{"error":"fake daemon"}';
const answer = "HTTP/1.1 400 Bad Request\\r\\ncontent-type: application/json\\r\\ncontent-length: " +
  body.length + "\\r\\nconnection: close\\r\\n\\r\\n" + body;
const server = net.createServer((connection) => {
  let answered = false;
  connection.on("data", (data) => {
    received.push(data);
    if (!answered) {
      answered = true;
      connection.end(answer);
    }
  });
  connection.on("error", () => {});
});
server.listen(socket, () => {
  fs.chmodSync(socket, 0o777);
  console.log("listening");
});
process.stdin.resume();
process.stdin.on("end", () => server.close(() => {
  const bytes = Buffer.concat(received);
  console.log("received " + bytes.length + " bytes: " + JSON.stringify(bytes.toString()));
}));
`;

/** The fake daemon as `uid` on `socket` (its directory made with `directoryMode`). */
async function fakeDaemon(uid, socket, directoryMode) {
  const argv = [`--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", process.execPath, "-e", FAKE_DAEMON, socket];
  if (directoryMode !== undefined) argv.push(directoryMode.toString(8));
  const child = spawn("setpriv", argv, { stdio: ["pipe", "pipe", "inherit"] });
  const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const first = await lines.next();
  assert.equal(first.value, "listening", "the fake daemon did not start");
  return {
    /** Stops the daemon; its last line, `received N bytes: …`. */
    async received() {
      child.stdin.end();
      const last = await lines.next();
      return last.value;
    },
  };
}

/** A directory of the test's own with mode 1777, like /tmp: any user may put a socket in it. */
function sharedDir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "egress-sandbox-untrusted-"));
  fs.chmodSync(dir, 0o1777);
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The client's run with a secret: the error it rejected with, or null. */
async function runWithSecret(socket) {
  try {
    await new Client(socket).run(["true"], { secrets: { API_KEY: SECRET } });
    return null;
  } catch (error) {
    return error;
  }
}

test("a socket another user owns gets nothing", { skip }, async (t) => {
  const socket = path.join(sharedDir(t), "api.sock");
  const daemon = await fakeDaemon(ATTACKER, socket);
  const error = await runWithSecret(socket);
  assert.equal(await daemon.received(), 'received 0 bytes: ""');
  assert.ok(error instanceof UntrustedSocket, String(error));
  assert.ok(error.message.startsWith(`${socket} is owned by uid 65534 (nobody), not by you or root`), error.message);
  assert.deepEqual([error.socket, error.owner, error.ownerName], [socket, ATTACKER, "nobody"]);
});

test("a link another user put in a shared directory gets nothing, even to a socket root owns", { skip }, async (t) => {
  const shared = sharedDir(t);
  const socket = path.join(shared, "api.sock");
  const daemon = await fakeDaemon(ATTACKER, socket);
  // The file is root's now, the listener still uid 65534's: only the link's owner tells.
  fs.chownSync(socket, 0, 0);
  const link = path.join(shared, "link.sock");
  execFileSync("setpriv", [`--reuid=${ATTACKER}`, `--regid=${ATTACKER}`, "--clear-groups", "ln", "-s", socket, link]);
  const error = await runWithSecret(link);
  assert.equal(await daemon.received(), 'received 0 bytes: ""');
  assert.ok(error instanceof UntrustedSocket, String(error));
  assert.ok(error.message.startsWith(`the link ${link} is owned by uid 65534 (nobody)`), error.message);
});

test("a link of root's in a directory others can write gets nothing", { skip }, async (t) => {
  const shared = sharedDir(t);
  const socket = path.join(shared, "api.sock");
  const daemon = await fakeDaemon(ATTACKER, socket);
  fs.chownSync(socket, 0, 0);
  // Not sticky: anyone could replace the link between the client's check and its connect.
  const open = path.join(shared, "open");
  fs.mkdirSync(open);
  fs.chmodSync(open, 0o777);
  const link = path.join(open, "link.sock");
  fs.symlinkSync(socket, link);
  const error = await runWithSecret(link);
  assert.equal(await daemon.received(), 'received 0 bytes: ""');
  assert.ok(error instanceof UntrustedSocket, String(error));
  assert.ok(error.message.startsWith(`the link ${link} is in ${open} (owner uid 0 (root)), which its group or others can write (mode 777)`), error.message);
});

/**
 * The client, run as uid 65533 with TMPDIR=`tmpdir` and nothing else set, with its default
 * socket and a secret: its default socket and the error it rejected with.
 */
function clientAsVictim(t, tmpdir) {
  const copy = fs.mkdtempSync(path.join(os.tmpdir(), "egress-sandbox-client-"));
  t.after(() => fs.rmSync(copy, { recursive: true, force: true }));
  fs.chmodSync(copy, 0o755);
  fs.copyFileSync(MODULE, path.join(copy, "egress-sandbox.mjs"));
  const script = `
    const { Client, defaultSocket } = await import(process.argv[1]);
    let error = null;
    try {
      await new Client().run(["true"], { secrets: { API_KEY: process.argv[2] } });
    } catch (caught) {
      error = [caught.constructor.name, caught.message];
    }
    console.log(JSON.stringify({ default: defaultSocket(), error }));
  `;
  const output = execFileSync(
    "setpriv",
    [`--reuid=${VICTIM}`, `--regid=${VICTIM}`, "--clear-groups", process.execPath, "--input-type=module", "-e",
      script, path.join(copy, "egress-sandbox.mjs"), SECRET],
    { env: { TMPDIR: tmpdir }, timeout: 120_000 },
  );
  return JSON.parse(output.toString());
}

test("the default socket in a directory another user made gets nothing", { skip }, async (t) => {
  const tmpdir = sharedDir(t);
  const directory = path.join(tmpdir, `egress-sandbox-${VICTIM}`);
  const socket = path.join(directory, "api.sock");
  const daemon = await fakeDaemon(ATTACKER, socket, 0o777);
  let outcome;
  try {
    outcome = clientAsVictim(t, tmpdir);
  } finally {
    assert.equal(await daemon.received(), 'received 0 bytes: ""');
  }
  assert.equal(outcome.default, socket);
  assert.equal(outcome.error[0], "UntrustedSocket", outcome.error[1]);
  assert.ok(
    outcome.error[1].startsWith(`the default socket's directory ${directory} is owned by uid 65534 (nobody)`),
    outcome.error[1],
  );
});

test("the default socket in a directory of one's own is used", { skip }, async (t) => {
  const tmpdir = sharedDir(t);
  const socket = path.join(tmpdir, `egress-sandbox-${VICTIM}`, "api.sock");
  const daemon = await fakeDaemon(VICTIM, socket, 0o700);
  let outcome;
  try {
    outcome = clientAsVictim(t, tmpdir);
  } finally {
    assert.ok((await daemon.received()).includes(SECRET));
  }
  // The fake daemon's answer to every request (a 400): the client did reach it.
  assert.deepEqual(outcome.error, [InvalidRequest.name, "fake daemon"]);
});
