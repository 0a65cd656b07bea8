// Unit tests of the retry loop's failover (no cluster): `fetch` is replaced
// by fake nodes keyed by endpoint; a refused endpoint goes through the real
// `fetch` to a port nothing listens on, so the error is the one Node throws.

import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";

import { UnavailableError } from "../src/errors.js";
import { Transport } from "../src/transport.js";

const GRANT = { name: "n", owner: "o", token: 57, ttl_ms: 10_000, expires_in_ms: 10_000, deadline_tick: 172, reacquired: false };
const ACQUIRE = { method: "POST", path: "/v1/locks/n/acquire", body: { owner: "o", ttl_ms: 10_000 } } as const;

type FakeNode = "grant" | { notLeaderNaming: string };

/** A local `host:port` nothing listens on: connecting to it is refused. */
async function refusingAddr(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `127.0.0.1:${address.port}`;
}

/**
 * Runs `body` with `fetch` answering as `nodes` (keyed by `host:port`); other
 * endpoints go to the real `fetch`, without the attempt's timeout (a zero
 * budget leaves it 1 ms). Answers the endpoints tried, in order.
 */
async function withFakeNodes(nodes: Record<string, FakeNode>, body: () => Promise<void>): Promise<string[]> {
  const tried: string[] = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(input instanceof Request ? input.url : input);
    tried.push(url.host);
    const node = nodes[url.host];
    if (node === undefined) {
      const { signal: _timeout, ...rest } = init ?? {};
      return realFetch(input, rest);
    }
    if (node === "grant") {
      return new Response(JSON.stringify(GRANT), { status: 200, headers: { "content-type": "application/json" } });
    }
    const refusal = { error: { code: "not_leader", message: "not the leader" } };
    return new Response(JSON.stringify(refusal), {
      status: 503,
      headers: { "content-type": "application/json", "x-leasehold-leader-addr": node.notLeaderNaming, "retry-after": "1" },
    });
  };
  try {
    await body();
  } finally {
    globalThis.fetch = realFetch;
  }
  return tried;
}

// Ensures a node that refuses the connection (down, as a crashed leader)
// sends the call to the next one at once: a zero budget affords no pause.
test("a refused node is left for the next at once", async () => {
  const refusing = await refusingAddr();
  const transport = new Transport([refusing, "127.0.0.1:7702"], { retryBudgetMs: 0 });
  const tried = await withFakeNodes({ "127.0.0.1:7702": "grant" }, async () => {
    const answer = await transport.send(ACQUIRE);
    assert.deepEqual(answer.data, GRANT);
  });
  assert.deepEqual(tried, [refusing, "127.0.0.1:7702"]);
});

// Ensures a 503 naming another of the client's nodes as leader is followed
// at once.
test("a 503 naming another leader is followed at once", async () => {
  const transport = new Transport(["127.0.0.1:7701", "127.0.0.1:7702"], { retryBudgetMs: 0 });
  const nodes: Record<string, FakeNode> = {
    "127.0.0.1:7701": { notLeaderNaming: "127.0.0.1:7702" },
    "127.0.0.1:7702": "grant",
  };
  const tried = await withFakeNodes(nodes, async () => {
    const answer = await transport.send(ACQUIRE);
    assert.deepEqual(answer.data, GRANT);
  });
  assert.deepEqual(tried, ["127.0.0.1:7701", "127.0.0.1:7702"]);
});

// Ensures nodes naming each other are each tried once before a pause (which
// a zero budget cannot afford): they cannot make the client spin.
test("nodes naming each other are each tried once before a pause", async () => {
  const transport = new Transport(["127.0.0.1:7701", "127.0.0.1:7702"], { retryBudgetMs: 0 });
  const nodes: Record<string, FakeNode> = {
    "127.0.0.1:7701": { notLeaderNaming: "127.0.0.1:7702" },
    "127.0.0.1:7702": { notLeaderNaming: "127.0.0.1:7701" },
  };
  const tried = await withFakeNodes(nodes, async () => {
    await assert.rejects(transport.send(ACQUIRE), (e: unknown) => e instanceof UnavailableError && e.code === "not_leader");
  });
  assert.deepEqual(tried, ["127.0.0.1:7701", "127.0.0.1:7702"]);
});
