// Unit tests of TLS in the retry loop (no cluster): nodes that serve https
// with a self-signed certificate, made with `openssl` at test time, which
// the client does not trust.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createSecureServer, type Http2SecureServer } from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Client } from "../src/client.js";
import { DecodeError, UnavailableError } from "../src/errors.js";

/** A key and a self-signed certificate for 127.0.0.1, in PEM. */
function selfSigned(): { key: Buffer; cert: Buffer } {
  const dir = mkdtempSync(join(tmpdir(), "leasehold-tls-"));
  try {
    const key = join(dir, "key.pem");
    const cert = join(dir, "cert.pem");
    execFileSync(
      "openssl",
      [
        ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"],
        ...["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
      ],
      { stdio: "ignore" },
    );
    return { key: readFileSync(key), cert: readFileSync(cert) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A node on 127.0.0.1 serving HTTP/1.1 and HTTP/2 over TLS; `onRequest` counts what reaches it. */
async function tlsNode(credentials: { key: Buffer; cert: Buffer }, onRequest: () => void): Promise<[Http2SecureServer, string]> {
  const server = createSecureServer({ ...credentials, allowHTTP1: true }, (_request, response) => {
    onRequest();
    response.writeHead(500, { "content-type": "application/json" });
    response.end('{"error":{"code":"internal","message":"not a leasehold node"}}');
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  return [server, `https://127.0.0.1:${address.port}`];
}

// Ensures a certificate the client does not trust is thrown at once as
// unavailable, naming the certificate, on a plain call (fetch) and a waiting
// acquire (HTTP/2), without moving on to the other node or retrying: the
// nodes share one CA, and an untrusted certificate may be an impostor's. With
// an hour's retry budget, a retry would run into the test's timeout.
test("an untrusted certificate is thrown at once, not retried", { timeout: 60_000 }, async (t) => {
  const credentials = selfSigned();
  let reached = 0;
  const nodes = [await tlsNode(credentials, () => (reached += 1)), await tlsNode(credentials, () => (reached += 1))];
  // Calls that retry would go on for an hour after the timeout, holding the
  // file's process up: then every try throws a DecodeError, never retried.
  const realFetch = globalThis.fetch;
  t.signal.addEventListener("abort", () => {
    globalThis.fetch = () => Promise.reject(new DecodeError("the test timed out"));
  });
  try {
    const client = new Client(
      nodes.map(([, base]) => base),
      { retryBudgetMs: 3_600_000 },
    );
    const untrusted = (e: unknown): boolean => {
      assert.ok(e instanceof UnavailableError, `not unavailable: ${String(e)}`);
      assert.equal(e.code, "unavailable");
      assert.equal(e.status, null);
      assert.match(e.message, /certificate/i);
      return true;
    };
    await assert.rejects(client.get("n"), untrusted);
    await assert.rejects(client.acquire("n", "o", 10_000, { waitMs: 1_000 }), untrusted);
    assert.equal(reached, 0, "a request reached a node whose certificate was refused");
  } finally {
    globalThis.fetch = realFetch;
    for (const [server] of nodes) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
