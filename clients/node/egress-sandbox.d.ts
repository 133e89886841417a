// Types of the egress-sandbox client (egress-sandbox.mjs).

/** `EGRESS_SANDBOX_SERVER`, else the daemon's default path for this user. */
export function defaultSocket(): string;

/** Every error of the client: the message, the request field at fault, the HTTP status. */
export class SandboxError extends Error {
  constructor(
    error: string,
    options?: { field?: string | null; status?: number | null; diagnostics?: string[] },
  );
  readonly error: string;
  /** The request field at fault, or null. */
  readonly field: string | null;
  /** The HTTP status, or null once the run had started. */
  readonly status: number | null;
  /** Policy diagnostics, `FILE:LINE:COL: error: ...`. */
  readonly diagnostics: string[];
}

/** The daemon refused the request (400: nothing was created; 503: busy or stopping). */
export class RequestRefused extends SandboxError {
  constructor(status: number, body: { error?: string; field?: string; diagnostics?: string[] });
  readonly status: number;
}

/** The run could not be set up (Docker refused), or the stream broke off. */
export class DaemonError extends SandboxError {}

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

export type Data = string | Uint8Array;

/** A refused attempt, grouped by host, port and reason. */
export interface BlockedGroup {
  host: string;
  port: number | null;
  reason: string;
  count: number;
}

export interface RunOptions {
  allow?: string[] | null;
  /** YAML text, or `{ file, yaml }` (the name shows in diagnostics). */
  policies?: Array<string | { file: string; yaml: string }> | null;
  /** Seconds, or a duration as the API takes it ("500ms", "2m"). */
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
  onOutput?: (stream: "stdout" | "stderr", data: Buffer) => void;
  onStarted?: (runId: string) => void;
  /** The daemon's warnings about the run; default: `process.emitWarning`. */
  onWarning?: (text: string) => void;
  /** Aborting cancels the run. */
  signal?: AbortSignal;
}

export interface RunResult {
  run_id: string | null;
  exit_code: number;
  status: "exited" | "timeout" | "oom" | "interrupted" | "proxy_failed";
  stdout: Buffer;
  stderr: Buffer;
  blocked: BlockedGroup[];
  /** The run's audit records. */
  records: Array<Record<string, unknown>>;
  /** The run report, as `run --report` writes it. */
  report: Record<string, unknown> & { exit_code: number; status: string };
  summary: string;
  warnings: string[];
}

export class Client {
  constructor(socket?: string);
  readonly socket: string;
  health(): Promise<{ ok: boolean; version: string; pool: { ready: number; size: number } }>;
  /** Cancels a run in progress (it ends `interrupted`, exit 130, or 143 with terminate). */
  cancel(runId: string, options?: { terminate?: boolean }): Promise<void>;
  run(argv: string[], options?: RunOptions): Promise<RunResult>;
}
