// The client against a real 3-node cluster: guards, waits, loss, sessions,
// multi-locks, records and gates. Every test is bounded; the cluster's
// processes are killed by PID when the file's tests end.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  HeldError,
  LockLostError,
  SessionNotFoundError,
  StaleTokenError,
  WaitTimeoutError,
  type Client,
} from "../src/index.js";
import { sleep } from "../src/transport.js";
import { Cluster } from "./cluster.js";

const TTL_MS = 3000;
let cluster: Cluster;
let client: Client;

before(async () => {
  cluster = await Cluster.start(3);
  client = cluster.client();
});

after(async () => {
  await cluster?.stop();
});

// Ensures the watchdog keeps a 3 s lock well past its ttl under one token,
// another owner is refused with a typed 409, and `await using` releases.
test("a guarded lock outlives its ttl and is released on leaving the block", { timeout: 30_000 }, async () => {
  let token: number;
  {
    await using lock = await client.lock("ts-guarded", { ttlMs: TTL_MS, owner: "alice" });
    token = lock.token;
    await sleep(TTL_MS + 1500);
    assert.equal(lock.isLost, false);
    assert.equal(lock.signal.aborted, false);
    const held = await client.acquire("ts-guarded", "bob", TTL_MS).catch((e: unknown) => e);
    assert.ok(held instanceof HeldError && held.status === 409, String(held));
    assert.equal((await client.get("ts-guarded"))?.token, token);
  }
  assert.equal(await client.get("ts-guarded"), null);
  const again = await client.lock("ts-guarded", { ttlMs: TTL_MS });
  assert.ok(again.token > token);
  await again.release();
});

// Ensures waiters are served in order, each under a higher token, and a
// wait that runs out is a WaitTimeoutError.
test("waiting acquires are granted in FIFO order", { timeout: 30_000 }, async () => {
  const holder = await client.acquire("ts-queue", "holder", TTL_MS);
  const first = client.acquire("ts-queue", "first", TTL_MS, { waitMs: 10_000 });
  await sleep(200);
  const second = client.acquire("ts-queue", "second", TTL_MS, { waitMs: 10_000 });
  await sleep(200);
  const timedOut = await client.acquire("ts-queue", "late", TTL_MS, { waitMs: 300 }).catch((e: unknown) => e);
  assert.ok(timedOut instanceof WaitTimeoutError, String(timedOut));
  await client.release("ts-queue", holder.token);
  const a = await first;
  assert.equal(a.owner, "first");
  assert.ok(a.token > holder.token);
  await client.release("ts-queue", a.token);
  const b = await second;
  assert.ok(b.owner === "second" && b.token > a.token);
  await client.release("ts-queue", b.token);
});

// Ensures, with every node stopped (SIGSTOP), that the guard is at risk,
// then lost (expired) no later than its safe deadline, its signal aborted.
test("lost by the safe deadline when every node hangs", { timeout: 30_000 }, async () => {
  const lock = await client.lock("ts-fragile", { ttlMs: TTL_MS, driftMarginMs: 300 });
  const first = lock.validUntil;
  while (lock.validUntil === first) await sleep(20);
  cluster.signalAll("SIGSTOP");
  try {
    let atRisk = false;
    while (!lock.signal.aborted) {
      atRisk ||= lock.atRisk;
      await sleep(20);
    }
    const lostAt = performance.now();
    assert.ok(atRisk, "never at risk before lost");
    assert.ok(lostAt <= lock.validUntil + 100, `lost ${lostAt - lock.validUntil} ms after the safe deadline`);
    assert.ok(lock.signal.reason instanceof LockLostError);
    assert.equal((await lock.lost).kind, "expired");
  } finally {
    cluster.signalAll("SIGCONT");
  }
  await cluster.waitForLeader();
  // The lease may have run out on the cluster meanwhile: a refusal is expected.
  await lock[Symbol.asyncDispose]();
});

// Ensures a session keeps its locks past its ttl, and its deletion by
// someone else is one loss (revoked) for all of them.
test("a session keeps its locks, and its end is one loss for all", { timeout: 30_000 }, async () => {
  const session = await client.session({ ttlMs: TTL_MS });
  const a = await session.lock("ts-s1");
  const both = await session.lockMany(["ts-s2", "ts-s3"]);
  assert.equal(both.grants.length, 2);
  await sleep(TTL_MS + 500);
  assert.equal(session.isLost, false);
  assert.equal((await client.get("ts-s1"))?.token, a.token);
  assert.deepEqual((await client.deleteSession(session.id)).sort(), ["ts-s1", "ts-s2", "ts-s3"]);
  const reason = await session.lost;
  assert.deepEqual([reason.kind, reason.code], ["revoked", "session_not_found"]);
  assert.ok(session.signal.aborted);
  const refused = await session.lock("ts-s4").catch((e: unknown) => e);
  assert.ok(refused instanceof SessionNotFoundError);
  await session[Symbol.asyncDispose]();
});

// Ensures a multi-lock takes all its locks under one token or none.
test("a multi-lock is all or none", { timeout: 30_000 }, async () => {
  const blocker = await client.acquire("ts-m2", "blocker", TTL_MS);
  const refused = await client.lockMany(["ts-m1", "ts-m2"], { ttlMs: TTL_MS }).catch((e: unknown) => e);
  assert.ok(refused instanceof HeldError, String(refused));
  assert.equal(await client.get("ts-m1"), null);
  await client.release("ts-m2", blocker.token);
  {
    await using set = await client.lockMany(["ts-m1", "ts-m2"], { ttlMs: TTL_MS });
    assert.ok(set.leases.grants.every((g) => g.token === set.token));
    assert.equal((await client.get("ts-m2"))?.token, set.token);
  }
  assert.equal(await client.get("ts-m1"), null);
});

// Ensures records and gates take the current token and refuse an older one.
test("records and gates are fenced by the token", { timeout: 30_000 }, async () => {
  const old = await client.lock("ts-fence", { ttlMs: TTL_MS });
  await client.putRecord("ts-record", "ts-fence", old.token, { amount: 7 });
  assert.deepEqual((await client.getRecord("ts-record"))?.value, { amount: 7 });
  assert.equal(await client.getRecord("ts-never-written"), null);
  await client.gate("ts-gate", "ts-fence", old.token);
  await old.release();
  const current = await client.lock("ts-fence", { ttlMs: TTL_MS });
  const stale = await client.putRecord("ts-record", "ts-fence", old.token, 0).catch((e: unknown) => e);
  assert.ok(stale instanceof StaleTokenError, String(stale));
  await client.gate("ts-gate", "ts-fence", current.token);
  const staleGate = await client.gate("ts-gate", "ts-fence", old.token).catch((e: unknown) => e);
  assert.ok(staleGate instanceof StaleTokenError, String(staleGate));
  assert.deepEqual(await client.check("ts-fence", current.token), { current: true, token: current.token });
  await current.release();
});
