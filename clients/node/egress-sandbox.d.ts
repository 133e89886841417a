// Types of the egress-sandbox client (egress-sandbox.mjs).

/** `EGRESS_SANDBOX_SERVER`, else the daemon's default path for this user. */
export function defaultSocket(): string;

/** A refusal's body as the daemon sends it. */
export interface RefusalBody {
  error?: string;
  field?: string;
  diagnostics?: string[];
}

/** Every error of the client: the message, the request field at fault, the HTTP status. */
export class SandboxError extends Error {
  constructor(
    error: string,
    options?: { field?: string | null; status?: number | null; diagnostics?: string[]; cause?: unknown },
  );
  readonly error: string;
  /** The request field at fault, or null. */
  readonly field: string | null;
  /** The HTTP status, or null once the run had started. */
  readonly status: number | null;
  /** Policy diagnostics, `FILE:LINE:COL: error: ...`. */
  readonly diagnostics: string[];
}

/** The request was refused and nothing was created (a 404 from `cancel`: an unknown run). */
export class RequestRefused extends SandboxError {
  constructor(status: number, body?: RefusalBody);
  readonly status: number;
}

/**
 * 400: a request `run` would refuse, `field` naming the field at fault; also the client's
 * own checks before anything is sent (a string as the command, an unknown option, a value of
 * the wrong kind), with status 400 too.
 */
export class InvalidRequest extends RequestRefused {
  readonly status: 400;
  readonly field: string | null;
}

/** 503: still busy or stopping at the call's deadline, or no `Retry-After` (`retryAfter` null). */
export class DaemonBusy extends RequestRefused {
  constructor(status: number, body?: RefusalBody, retryAfter?: number | null);
  readonly status: 503;
  /** The daemon's last `Retry-After`, in seconds; null when it gave none. */
  readonly retryAfter: number | null;
  /** How many times the call asked. */
  readonly attempts: number;
}

/** No daemon answers at the socket: missing (ENOENT), nobody listening (ECONNREFUSED), not allowed (EACCES). */
export class DaemonUnreachable extends SandboxError {
  constructor(socket: string, cause: Error & { code?: string });
  readonly socket: string;
  readonly code: string | null;
  readonly status: null;
}

/**
 * The run could not be set up (Docker refused), or the daemon's answer broke off. `field`
 * names the request field whose value the engine refused (`image`, `runtime`, …), else null.
 */
export class DaemonError extends SandboxError {
  constructor(error: string, options?: { runId?: string | null; field?: string | null; cause?: unknown });
  /** The run's id once it had one, else null. */
  readonly runId: string | null;
}

/**
 * Nothing was sent: the socket (a link's target), the default socket's directory, or a
 * link on the way and its directory belong to someone other than the caller or root.
 */
export class UntrustedSocket extends SandboxError {
  /** The path the client was to connect to. */
  readonly socket: string;
  /** The uid at fault. */
  readonly owner: number;
  /** Its user name, or null where unknown. */
  readonly ownerName: string | null;
}

/** The call's `signal` aborted it (not a SandboxError: the caller's own doing). */
export class AbortError extends Error {
  constructor(reason?: unknown, runId?: string | null);
  readonly name: "AbortError";
  readonly code: "ABORT_ERR";
  /** The signal's reason. */
  readonly cause: unknown;
  /** The run's id if it had started (the daemon interrupts it), else null. */
  readonly runId: string | null;
}

/** A daemon's warning about a run, as `process.emitWarning` gets it without `onWarning`. */
export class SandboxWarning extends Error {
  readonly name: "SandboxWarning";
  /** Where the caller asked for the run: `FILE:LINE:COL`, or null. */
  readonly location: string | null;
  readonly detail?: string;
}

export type Data = string | Uint8Array;

export type RunStatus = "exited" | "timeout" | "oom" | "interrupted" | "proxy_failed";
export type Decision = "allowed" | "blocked" | "would_block" | "failed";

/** Refused attempts (blocked or would_block) of one host, port and reason. */
export interface BlockedGroup {
  host: string;
  /** null for DNS. */
  port: number | null;
  reason: string;
  count: number;
}

export interface DecisionCounts {
  allowed: number;
  blocked: number;
  would_block: number;
  failed: number;
}

/** The run report, as `run --report` writes it (its own snake_case names: the file's). */
export interface RunReport {
  v: number;
  run: string;
  status: RunStatus;
  exit_code: number;
  duration_ms: number;
  image: string;
  policy: string;
  output: { stdout_bytes: number; stderr_bytes: number; truncated: boolean };
  attempts: DecisionCounts;
  blocked: BlockedGroup[];
  blocked_more: number;
  audit: { written: number; dropped: number; dropped_by_decision: DecisionCounts };
  audit_head: string | null;
  audit_log_error?: string;
}

/**
 * One line of the run's audit chain, as the proxy wrote it (the audit log's own names).
 * Attempts carry `kind` connect, http, dns, tls or tcp; `limit` and `end` lines share the
 * chain with fields of their own.
 */
export interface AuditRecord {
  v: number;
  ts: string;
  run: string | null;
  policy: string | null;
  kind: string;
  client?: string | null;
  sandbox_hostname?: string;
  host?: string;
  port?: number | null;
  decision?: Decision;
  reason?: string;
  rule?: string | null;
  addr?: string | null;
  addrs?: string[];
  bytes_up?: number;
  bytes_down?: number;
  duration_ms?: number;
  method?: string;
  path?: string;
  status?: number | null;
  credential?: string | null;
  reflected?: number;
  limit?: number;
  on_audit_limit?: "reserve" | "refuse";
  reserve?: number;
  records?: number;
  dropped?: number;
  dropped_by_decision?: DecisionCounts;
  seq: number;
  prev: string;
}

/** The options of `run` and `events` that go into the request. */
export interface RequestOptions {
  /** Hosts (`host[:port]`): an array, never one string. */
  allow?: string[] | null;
  /** YAML text, or `{ file, yaml }` (the name shows in diagnostics). */
  policies?: Array<string | { file: string; yaml: string }> | null;
  /**
   * Seconds, or a duration as the API takes it ("500ms", "2m"): the whole call's. A busy
   * daemon is asked again after its Retry-After while that stays within it (30 s when not
   * given), and the run then gets what is left.
   */
  timeout?: number | string | null;
  memory?: string | null;
  cpus?: number | null;
  pids?: number | null;
  tmp?: string | null;
  outputLimit?: string | null;
  /** An object, or [K, V] pairs (order kept). */
  env?: Record<string, string> | Array<[string, string]> | null;
  workdir?: string | null;
  image?: string | null;
  /** Written under /task (then the working directory). */
  files?: Record<string, Data> | null;
  stdin?: Data | null;
  resolve?: Record<string, string> | null;
  /** `SRC:DST[:rw]`, paths on the daemon's host. */
  mounts?: string[] | null;
  egressNetwork?: string | null;
  /** Secret values for the policy's credentials: the proxy holds them. */
  secrets?: Record<string, string> | null;
  /** PEM text, or `{ file, pem }`. */
  upstreamCa?: Array<string | { file: string; pem: string }> | null;
  runtime?: string | null;
  auditLimit?: number | null;
  /** Past the audit limit: "reserve" (allowed attempts keep their records) or "refuse". */
  onAuditLimit?: "reserve" | "refuse" | null;
  /** Aborting cancels the run; the call rejects with AbortError. */
  signal?: AbortSignal | null;
}

/** `run`'s options: the request's and the callbacks. Any other name is an InvalidRequest. */
export interface RunOptions extends RequestOptions {
  onOutput?: ((stream: "stdout" | "stderr", data: Buffer) => void) | null;
  onStarted?: ((runId: string) => void) | null;
  /** The daemon's warnings about the run; default: a SandboxWarning, once per policy. */
  onWarning?: ((text: string) => void) | null;
}

/** A finished run; camelCase like the options (`report` and `records` keep their files' names). */
export interface RunResult {
  runId: string | null;
  exitCode: number;
  status: RunStatus;
  stdout: Buffer;
  stderr: Buffer;
  blocked: BlockedGroup[];
  /** The run's audit records. */
  records: AuditRecord[];
  /** The run report, as `run --report` writes it. */
  report: RunReport;
  summary: string;
  warnings: string[];
  /** What the daemon could not remove after the run (`egress-sandbox gc` will). */
  teardownErrors: string[];
  /** @deprecated `runId` (read with a DeprecationWarning, not enumerable). */
  readonly run_id: string | null;
  /** @deprecated `exitCode` (read with a DeprecationWarning, not enumerable). */
  readonly exit_code: number;
}

export type RunEvent =
  | { event: "warning"; text: string }
  | { event: "started"; runId: string }
  | { event: "output"; stream: "stdout" | "stderr"; data: Buffer }
  | { event: "audit"; record: AuditRecord }
  | { event: "exit"; result: RunResult };

export class Client {
  constructor(socket?: string);
  readonly socket: string;
  health(): Promise<{ ok: boolean; version: string; pool: { ready: number; size: number } }>;
  /** Cancels a run in progress (it ends `interrupted`, exit 130, or 143 with terminate). */
  cancel(runId: string, options?: { terminate?: boolean }): Promise<void>;
  /** Runs `argv` (the program, then its arguments: never one string). */
  run(argv: string[], options?: RunOptions): Promise<RunResult>;
  /**
   * The same run's events as they come, the last `exit` with the result; leaving the loop
   * early cancels the run. Throws InvalidRequest at once for what is wrong.
   */
  events(argv: string[], options?: RequestOptions): AsyncGenerator<RunEvent, void, undefined>;
}
