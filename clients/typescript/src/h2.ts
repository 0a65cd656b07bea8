/**
 * Waiting acquires over HTTP/2 (`node:http2`; h2c with prior knowledge on
 * http, ALPN on https): a herd of waits in one process shares one
 * connection per node instead of holding one each, as the Rust and Python
 * clients do. Everything else stays on HTTP/1.1 (`fetch`), which costs both
 * sides less per request.
 *
 * A connection counts towards keeping Node's event loop alive only while a
 * request is open on it, so an idle client never holds a process up.
 */

import { connect, constants, type ClientHttp2Session, type IncomingHttpHeaders } from "node:http2";

import { DecodeError } from "./errors.js";

/** What the retry loop needs of an answer, whichever protocol carried it. */
export interface Reply {
  readonly status: number;
  header(name: string): string | null;
  readonly text: string;
}

/** Why an HTTP/2 exchange failed before an answer: the node may not speak it. */
export class Http2Failure extends Error {
  override name = "Http2Failure";
  constructor(
    message: string,
    /** Connecting failed (refused, unreachable) or the attempt timed out: HTTP/1.1 would not fare better. */
    readonly unreachable: boolean,
    /** The socket's error code (`ECONNREFUSED`, ...), `""` when none. */
    readonly code: string = "",
  ) {
    super(message);
  }
}

/** Socket errors of a node that cannot be reached at all. */
const UNREACHABLE = ["ECONNREFUSED", "ECONNRESET", "EHOSTUNREACH", "ENETUNREACH", "ETIMEDOUT", "EPIPE"];

export class Http2Waits {
  readonly #sessions = new Map<string, ClientHttp2Session>();
  readonly #open = new Map<ClientHttp2Session, number>();

  /** One exchange on the connection to `base`, bounded by `timeoutMs` and `maxBytes`. */
  request(
    base: string,
    method: string,
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    timeoutMs: number,
    maxBytes: number,
  ): Promise<Reply> {
    const session = this.#session(base);
    this.#opened(session, 1);
    return new Promise<Reply>((resolve, reject) => {
      let settled = false;
      const finish = (outcome: Reply | Error): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.#opened(session, -1);
        if (outcome instanceof Error) reject(outcome);
        else resolve(outcome);
      };
      const stream = session.request({ ":method": method, ":path": path, ...headers }, { endStream: body === undefined });
      const timer = setTimeout(() => {
        stream.close(constants.NGHTTP2_CANCEL);
        finish(new Http2Failure(`no answer within ${timeoutMs} ms`, true));
      }, timeoutMs);
      let answer: IncomingHttpHeaders = {};
      const chunks: Buffer[] = [];
      let total = 0;
      stream.on("response", (h) => {
        answer = h;
      });
      stream.on("data", (chunk: Buffer) => {
        total += chunk.byteLength;
        if (total > maxBytes) {
          stream.close(constants.NGHTTP2_CANCEL);
          finish(new DecodeError(`answer of ${base}${path} is longer than ${maxBytes} bytes`));
          return;
        }
        chunks.push(chunk);
      });
      stream.on("end", () => {
        const status = Number(answer[":status"] ?? 0);
        if (status === 0) {
          finish(new Http2Failure("the stream ended without an answer", false));
          return;
        }
        const header = (name: string): string | null => {
          const value = answer[name];
          return value === undefined ? null : Array.isArray(value) ? value.join(", ") : String(value);
        };
        const encoding = (header("content-encoding") ?? "identity").trim().toLowerCase();
        if (encoding !== "" && encoding !== "identity") {
          finish(new DecodeError(`answer of ${base}${path} is ${encoding}-encoded, which was not asked for`));
          return;
        }
        finish({ status, header, text: Buffer.concat(chunks).toString("utf8") });
      });
      stream.on("error", (e: NodeJS.ErrnoException) => {
        // A failed connect cancels the stream, with the socket's error as its cause.
        const cause = (e as { cause?: NodeJS.ErrnoException }).cause;
        const code = cause?.code ?? e.code ?? "";
        finish(new Http2Failure(cause?.message ?? e.message, UNREACHABLE.includes(code), code));
      });
      if (body !== undefined) stream.end(body);
    });
  }

  #session(base: string): ClientHttp2Session {
    const cached = this.#sessions.get(base);
    if (cached !== undefined && !cached.closed && !cached.destroyed) return cached;
    const session = connect(base);
    const forget = (): void => {
      if (this.#sessions.get(base) === session) this.#sessions.delete(base);
      this.#open.delete(session);
    };
    // A connection error also fails the streams on it, which report it.
    session.on("error", forget);
    session.on("close", forget);
    session.on("goaway", forget);
    session.unref();
    this.#sessions.set(base, session);
    return session;
  }

  /** Counts open requests on `session`: referenced while any is open. */
  #opened(session: ClientHttp2Session, delta: number): void {
    const open = (this.#open.get(session) ?? 0) + delta;
    this.#open.set(session, open);
    if (open > 0) session.ref();
    else session.unref();
  }
}
