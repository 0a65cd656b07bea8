/**
 * How a call reaches the cluster: the endpoints, the node believed to lead
 * (learned from the `x-leasehold-leader-addr` header of every answer),
 * failover to the next endpoint when a node is unreachable (at once when it
 * refused the connection), and retries of `503` answers until the retry
 * budget is spent: after the server's `Retry-After` (plus up to 20 %
 * jitter, so clients refused together do not come back together) when the
 * node is overloaded or knows no leader, at once when it names another
 * leader. The tries taken at once are at most one per other endpoint
 * between two pauses. Other answers (409, 404, 400, ...) are thrown at once
 * as the error class of their code. A node whose certificate the TLS
 * handshake refuses is not failed over from: `UnavailableError` is thrown at
 * once, naming the certificate error.
 *
 * The body of a call, and so its request id, is built once: every retry
 * sends the same request id, so a retry the cluster already applied returns
 * the original result (the same token), also from a new leader.
 *
 * Calls go over Node's own `fetch` (HTTP/1.1 with keep-alive); waiting
 * acquires over HTTP/2 (`h2.ts`), so a herd of waits shares one connection
 * per node. A node that breaks an HTTP/2 exchange other than by being
 * unreachable is asked again at once over HTTP/1.1; if that is answered,
 * the client waits over HTTP/1.1 from then on.
 */

import { performance } from "node:perf_hooks";

import { Http2Failure, Http2Waits, type Reply } from "./h2.js";
import {
  ApiError,
  DecodeError,
  InvalidArgumentError,
  LeaseholdError,
  UnavailableError,
  clientSide,
  errorFromAnswer,
} from "./errors.js";

export const LEADER_ADDR_HEADER = "x-leasehold-leader-addr";
/** How long one attempt may take (ms), on top of the wait it asks for. */
export const DEFAULT_ATTEMPT_TIMEOUT_MS = 6_000;
/** How long one call keeps retrying unreachable nodes and 503 answers (ms). */
export const DEFAULT_RETRY_BUDGET_MS = 10_000;
const INITIAL_BACKOFF_MS = 25;
const MAX_BACKOFF_MS = 500;
/** Retry-After values above this are treated as this (ms). */
const MAX_RETRY_AFTER_MS = 30_000;
const RETRY_AFTER_JITTER = 0.2;
/** The longest answer read, as the Rust and Python clients' bound. */
export const MAX_ANSWER_BYTES = 64 << 20;

/** The monotonic clock every deadline of the client is on (ms). */
export const now = (): number => performance.now();

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

const STARTED = `${process.pid.toString(16)}-${process.hrtime.bigint().toString(16)}`;
let requestCounter = 0;

/** A request id unique to this process run: pid, start time, counter, in hex. */
export function newRequestId(): string {
  requestCounter += 1;
  return `${STARTED}-${requestCounter.toString(16)}`;
}

export interface Endpoint {
  readonly base: string;
  /** `host:port`, as a node names the leader. */
  readonly addr: string;
}

export function parseEndpoints(endpoints: string | readonly string[]): Endpoint[] {
  const items = typeof endpoints === "string" ? endpoints.split(",") : [...endpoints];
  const parsed: Endpoint[] = [];
  for (const raw of items) {
    const text = raw.trim();
    if (text === "") continue;
    let url: URL;
    try {
      url = new URL(text.includes("://") ? text : `http://${text}`);
    } catch {
      throw clientSide(InvalidArgumentError, "invalid_argument", `invalid endpoint ${JSON.stringify(raw)}`);
    }
    if ((url.protocol !== "http:" && url.protocol !== "https:") || url.hostname === "") {
      throw clientSide(InvalidArgumentError, "invalid_argument", `invalid endpoint ${JSON.stringify(raw)}`);
    }
    const port = url.port || (url.protocol === "https:" ? "443" : "80");
    const addr = `${url.hostname}:${port}`;
    parsed.push({ base: `${url.protocol}//${addr}`, addr });
  }
  if (parsed.length === 0) {
    throw clientSide(InvalidArgumentError, "invalid_argument", "no endpoints given");
  }
  return parsed;
}

/** One API call: sent as is on every attempt. */
export interface Call {
  readonly method: "GET" | "POST" | "PUT" | "DELETE";
  /** The path, its segments already percent-encoded (see {@link pathOf}). */
  readonly path: string;
  readonly body?: Record<string, unknown>;
  /** How long the server may legitimately hold the request (ms). */
  readonly waitMs?: number;
}

/** `/seg/seg/..` with every segment percent-encoded (`/` too). */
export function pathOf(...segments: string[]): string {
  return "/" + segments.map(encodeURIComponent).join("/");
}

/** A successful answer and the send time of the call's first attempt. */
export interface Answer {
  readonly data: unknown;
  readonly sentAt: number;
}

export interface TransportOptions {
  /** Sent as `authorization: Bearer <token>` on every request. */
  readonly token?: string;
  readonly retryBudgetMs?: number;
  readonly attemptTimeoutMs?: number;
}

/** `Retry-After` in ms (delta-seconds or an HTTP date), or `null`. */
export function retryAfterMs(value: string | null): number | null {
  if (value === null) return null;
  const text = value.trim();
  let ms = /^\d+(\.\d+)?$/.test(text) ? Number(text) * 1000 : Date.parse(text) - Date.now();
  if (Number.isNaN(ms)) return null;
  ms = Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS);
  return ms;
}

/** `ms` plus up to `fraction` of it at random: never sooner. */
export function jittered(ms: number, fraction: number): number {
  return ms * (1 + Math.random() * fraction);
}

export class Transport {
  readonly endpoints: readonly Endpoint[];
  readonly retryBudgetMs: number;
  readonly #attemptTimeoutMs: number;
  readonly #token: string | undefined;
  #preferred = 0;
  readonly #h2 = new Http2Waits();
  /** Waits go over HTTP/2 until a node shows it does not speak it. */
  #http2 = true;

  constructor(endpoints: string | readonly string[], options: TransportOptions = {}) {
    this.endpoints = parseEndpoints(endpoints);
    const token = options.token?.trim();
    if (token !== undefined && token === "") {
      throw clientSide(InvalidArgumentError, "invalid_argument", "token is empty");
    }
    this.#token = token;
    this.retryBudgetMs = options.retryBudgetMs ?? DEFAULT_RETRY_BUDGET_MS;
    this.#attemptTimeoutMs = options.attemptTimeoutMs ?? DEFAULT_ATTEMPT_TIMEOUT_MS;
  }

  /**
   * Sends `call` until it is answered (not 503) or the budget (or
   * `deadline`, on {@link now}) is spent. Answers the JSON body and the send
   * time of the first attempt.
   */
  async send(call: Call, deadline?: number): Promise<Answer> {
    const firstSent = now();
    const waitMs = call.waitMs ?? 0;
    const giveUp = Math.min(firstSent + this.retryBudgetMs + waitMs, deadline ?? Infinity);
    const body = call.body === undefined ? undefined : JSON.stringify(call.body);
    let backoff = INITIAL_BACKOFF_MS;
    let probingHttp1 = false;
    // Tries left before the next pause that go to another node at once: one
    // refused the connection (the request never reached it: the node is
    // down, as its leader is after a crash) or named another leader in its
    // 503. At most one per other node between pauses, so nodes that name
    // each other, or all refusing, cannot make it spin.
    const sweep = this.endpoints.length - 1;
    let atOnce = sweep;
    for (;;) {
      const index = this.#preferred % this.endpoints.length;
      const endpoint = this.endpoints[index]!;
      let answered: Reply | LeaseholdError;
      const overHttp2 = waitMs > 0 && this.#http2 && !probingHttp1;
      try {
        // Whole ms, as AbortSignal.timeout takes them.
        const timeout = Math.max(1, Math.ceil(Math.min(this.#attemptTimeoutMs + waitMs, giveUp - now())));
        const headers = this.#headers(body !== undefined);
        answered = overHttp2
          ? await this.#h2.request(endpoint.base, call.method, call.path, headers, body, timeout, MAX_ANSWER_BYTES)
          : await fetchReply(endpoint.base + call.path, call.method, headers, body, timeout);
        if (probingHttp1) this.#http2 = false;
        probingHttp1 = false;
      } catch (e) {
        if (e instanceof DecodeError) throw e;
        // A refused certificate is thrown at once, over either protocol: the
        // nodes share one CA, so every node would refuse alike, and an
        // untrusted certificate may be an impostor's, which no retry should
        // paper over.
        const refused = untrustedCertificate(e);
        if (refused !== null) {
          throw clientSide(
            UnavailableError,
            "unavailable",
            `${endpoint.base}: the TLS handshake refused the node's certificate (${refused}): ${describe(e)}`,
          );
        }
        if (e instanceof Http2Failure && !e.unreachable) {
          // Maybe no HTTP/2 there: the same request over HTTP/1.1, at once.
          probingHttp1 = true;
          continue;
        }
        probingHttp1 = false;
        // Unreachable, refused, reset or timed out: try the next node.
        this.#moveOnFrom(index);
        if (connectFailed(e) && atOnce > 0) {
          atOnce -= 1;
          continue;
        }
        answered = clientSide(UnavailableError, "unavailable", `${endpoint.base}: ${describe(e)}`);
      }
      let failure: LeaseholdError;
      let delay: number | null = null;
      if (answered instanceof LeaseholdError) {
        failure = answered;
      } else {
        const { status, text } = answered;
        const leader = this.#namedLeader(answered.header(LEADER_ADDR_HEADER));
        if (status !== 503) {
          this.#preferred = leader ?? index;
          if (status >= 200 && status < 300) {
            return { data: parseJson(text, endpoint.base + call.path), sentAt: firstSent };
          }
          throw errorFromAnswer(status, text);
        }
        failure = errorFromAnswer(503, text);
        if (leader !== null && leader !== index) {
          // A node that is not (or no longer) the leader named another: go
          // there now; its Retry-After was about itself.
          this.#preferred = leader;
          if (atOnce > 0) {
            atOnce -= 1;
            continue;
          }
        } else {
          // No leader known, or a leader that cannot commit: the next node,
          // after the server's Retry-After.
          this.#moveOnFrom(index);
          delay = retryAfterMs(answered.header("retry-after"));
        }
      }
      const pause = delay !== null ? jittered(Math.max(delay, backoff), RETRY_AFTER_JITTER) : jittered(backoff, 0.5);
      if (now() + pause > giveUp) throw failure;
      await sleep(pause);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
      atOnce = sweep;
    }
  }

  #headers(json: boolean): Record<string, string> {
    const headers: Record<string, string> = { accept: "application/json", "accept-encoding": "identity" };
    if (json) headers["content-type"] = "application/json";
    if (this.#token !== undefined) headers["authorization"] = `Bearer ${this.#token}`;
    return headers;
  }

  #namedLeader(header: string | null): number | null {
    const addr = header?.trim();
    if (!addr) return null;
    const index = this.endpoints.findIndex((e) => e.addr === addr || e.base === addr);
    return index >= 0 ? index : null;
  }

  /** Prefers the endpoint after `index`, unless another call moved on already. */
  #moveOnFrom(index: number): void {
    if (this.#preferred % this.endpoints.length === index) {
      this.#preferred = (index + 1) % this.endpoints.length;
    }
  }
}

/**
 * Socket errors of a connection that was never made (refused, no route, no
 * such host, connect timed out): the request did not reach the node.
 */
const CONNECT_FAILED = ["ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT"];

/**
 * Whether `error`, thrown by a try, is a failure to connect: `fetch` throws
 * a `TypeError` whose cause carries the socket's code; an HTTP/2 try, an
 * {@link Http2Failure} with the code.
 */
function connectFailed(error: unknown): boolean {
  const code = error instanceof Http2Failure ? error.code : (error as { cause?: { code?: unknown } } | null)?.cause?.code;
  return typeof code === "string" && CONNECT_FAILED.includes(code);
}

/**
 * The codes of Node's TLS errors for a certificate the handshake refused:
 * it does not chain to a trusted CA, is out of its validity, or names
 * another host.
 */
const UNTRUSTED_CERTIFICATE = [
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_UNTRUSTED",
  "CERT_SIGNATURE_FAILURE",
  "CERT_NOT_YET_VALID",
  "CERT_HAS_EXPIRED",
  "ERR_TLS_CERT_ALTNAME_INVALID",
];

/**
 * The code of the refused certificate behind `error`, thrown by a try, or
 * `null`: `fetch` wraps the TLS error as the cause of a `TypeError`; an
 * HTTP/2 try carries its code in the {@link Http2Failure}.
 */
function untrustedCertificate(error: unknown): string | null {
  let seen: unknown = error;
  // A few levels of wrapping at most; bounded against a cycle of causes.
  for (let depth = 0; depth < 8 && typeof seen === "object" && seen !== null; depth += 1) {
    const code = (seen as { code?: unknown }).code;
    if (typeof code === "string" && UNTRUSTED_CERTIFICATE.includes(code)) return code;
    seen = (seen as { cause?: unknown }).cause;
  }
  return null;
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}

function parseJson(text: string, url: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new DecodeError(`answer of ${url} is not JSON: ${describe(e)}`);
  }
}

/** One HTTP/1.1 exchange through `fetch`. */
async function fetchReply(
  url: string,
  method: string,
  headers: Record<string, string>,
  body: string | undefined,
  timeoutMs: number,
): Promise<Reply> {
  const response = await fetch(url, {
    method,
    headers,
    ...(body === undefined ? {} : { body }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await readBounded(response);
  return { status: response.status, header: (name) => response.headers.get(name), text };
}

/**
 * The body of `response`, read no further than {@link MAX_ANSWER_BYTES}: a
 * longer one, or one that says it is, or an encoded one (none is asked
 * for), is refused before it is read whole.
 */
async function readBounded(response: Response): Promise<string> {
  const encoding = (response.headers.get("content-encoding") ?? "identity").trim().toLowerCase();
  if (encoding !== "" && encoding !== "identity") {
    await response.body?.cancel();
    throw new DecodeError(`answer of ${response.url} is ${encoding}-encoded, which was not asked for`);
  }
  const length = Number(response.headers.get("content-length") ?? "0");
  if (length > MAX_ANSWER_BYTES) {
    await response.body?.cancel();
    throw new DecodeError(`answer of ${response.url} is longer than ${MAX_ANSWER_BYTES} bytes`);
  }
  if (response.body === null) return "";
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of response.body) {
    total += chunk.byteLength;
    if (total > MAX_ANSWER_BYTES) {
      await response.body.cancel().catch(() => undefined);
      throw new DecodeError(`answer of ${response.url} is longer than ${MAX_ANSWER_BYTES} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** Whether `error` is the cluster's answer with one of `codes`. */
export function hasCode(error: unknown, codes: readonly string[]): error is ApiError {
  return error instanceof ApiError && error.status !== null && codes.includes(error.code);
}
