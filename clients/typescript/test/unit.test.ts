// Unit tests: what the client decides without a cluster (error classes,
// Retry-After, endpoints, the watchdog's timing and its at-risk and loss
// decisions, driven by renewals that fail, hang or succeed on cue).

import assert from "node:assert/strict";
import { test } from "node:test";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { resolve } from "node:path";

import { ApiError, ERROR_CODES, HeldError, OverloadedError, StaleTokenError, UnavailableError, errorFromAnswer } from "../src/errors.js";
import { now, parseEndpoints, retryAfterMs, sleep } from "../src/transport.js";
import { LockLostError, Timing, Watchdog, type Renewal } from "../src/watchdog.js";

const OPENAPI = resolve(fileURLToPath(import.meta.url), "../../../../../docs/openapi.json");

// Ensures every error code of the OpenAPI document has its class, and the
// class keeps the code, the status and the details.
test("every OpenAPI error code maps to its class", () => {
  const document = JSON.parse(readFileSync(OPENAPI, "utf8")) as {
    components: { schemas: { ErrorCode: { enum: string[] } } };
  };
  assert.deepEqual([...ERROR_CODES].sort(), [...document.components.schemas.ErrorCode.enum].sort());
  const held = errorFromAnswer(409, JSON.stringify({ error: { code: "held", message: "x", holder: "bob" } }));
  assert.ok(held instanceof HeldError);
  assert.equal(held.status, 409);
  assert.equal(held.details["holder"], "bob");
  assert.ok(errorFromAnswer(409, '{"error":{"code":"stale_token","message":"m"}}') instanceof StaleTokenError);
  const overloaded = errorFromAnswer(503, '{"error":{"code":"overloaded","message":"m"}}');
  assert.ok(overloaded instanceof OverloadedError && overloaded instanceof UnavailableError);
  const unknown = errorFromAnswer(418, "not json");
  assert.ok(unknown instanceof ApiError && !(unknown instanceof HeldError));
  assert.equal(unknown.code, "http_418");
});

test("retry-after is seconds or a date, bounded", () => {
  assert.equal(retryAfterMs("1"), 1000);
  assert.equal(retryAfterMs(" 0.5 "), 500);
  assert.equal(retryAfterMs("99999"), 30_000);
  assert.equal(retryAfterMs(null), null);
  assert.equal(retryAfterMs("soon"), null);
  const date = retryAfterMs(new Date(Date.now() + 5000).toUTCString());
  assert.ok(date !== null && date > 3000 && date <= 5000, String(date));
});

test("endpoints take host:port or URLs, and refuse garbage", () => {
  assert.deepEqual(parseEndpoints("127.0.0.1:7001, http://h:7002"), [
    { base: "http://127.0.0.1:7001", addr: "127.0.0.1:7001" },
    { base: "http://h:7002", addr: "h:7002" },
  ]);
  assert.throws(() => parseEndpoints(""), /no endpoints/);
  assert.throws(() => parseEndpoints("ftp://x:1"), /invalid endpoint/);
});

test("the safe deadline is anchor + ttl - margin, renewals every ttl/3", () => {
  const timing = Timing.of(3000, 300);
  assert.equal(timing.deadline(1000), 3700);
  assert.equal(timing.intervalMs, 1000);
  assert.equal(timing.overdue(1000), 2500);
  assert.equal(Timing.of(3000).driftMarginMs, 300);
  assert.throws(() => Timing.of(3000, 1501), /drift margin/);
  assert.throws(() => Timing.of(0), /ttl/);
});

/** A renewal whose attempts go as `plan` says, in turn (the last one repeats). */
function renewal(plan: ("fail" | "hang" | "ok")[]): Renewal & { calls: number } {
  const r = {
    subject: "test",
    endedBy: ["stale_token"],
    calls: 0,
    async renew(): Promise<number> {
      const step = plan[Math.min(r.calls, plan.length - 1)];
      r.calls += 1;
      if (step === "ok") return now();
      if (step === "hang") return new Promise<number>(() => undefined);
      throw new UnavailableError("refused", "unavailable", null);
    },
  };
  return r;
}

/** Polls `watchdog` every 5 ms until it fires lost (bounded): the changes of atRisk seen. */
async function riskChanges(watchdog: Watchdog, boundMs: number): Promise<boolean[]> {
  const seen = [watchdog.atRisk];
  const giveUp = now() + boundMs;
  while (now() < giveUp && watchdog.lostReason === null) {
    if (watchdog.atRisk !== seen.at(-1)) seen.push(watchdog.atRisk);
    await sleep(5);
  }
  return seen;
}

// Ensures a failing renewal puts the holder at risk from its first failed
// attempt, a success ends it, and lost fires (expired) by the safe deadline,
// aborting the signal; never at risk once lost.
test("at risk while renewals fail, then lost by the safe deadline", { timeout: 10_000 }, async () => {
  const timing = Timing.of(600, 60);
  const anchor = now();
  const watchdog = new Watchdog(renewal(["fail", "ok", "fail"]), timing, anchor);
  const seen = await riskChanges(watchdog, 5000);
  assert.deepEqual(seen.slice(0, 4), [false, true, false, true], String(seen));
  const reason = await watchdog.lost;
  const lostAt = now();
  assert.equal(reason.kind, "expired");
  assert.ok(lostAt >= watchdog.validUntil, "lost before the safe deadline");
  assert.ok(lostAt <= watchdog.validUntil + 100, `lost ${lostAt - watchdog.validUntil} ms after the safe deadline`);
  assert.ok(watchdog.signal.aborted && watchdog.signal.reason instanceof LockLostError);
  assert.equal(watchdog.atRisk, false);
});

// Ensures a renewal that hangs (no attempt fails) puts the holder at risk
// half an interval after it was due, and is cut off at the safe deadline.
test("a hung renewal is at risk once overdue and lost at the deadline", { timeout: 10_000 }, async () => {
  const timing = Timing.of(600, 60);
  const anchor = now();
  const watchdog = new Watchdog(renewal(["hang"]), timing, anchor);
  while (!watchdog.atRisk) await sleep(5);
  const atRiskAt = now();
  assert.ok(atRiskAt >= timing.overdue(anchor) && atRiskAt < timing.deadline(anchor));
  assert.equal((await watchdog.lost).kind, "expired");
  assert.ok(now() - timing.deadline(anchor) <= 100);
});

// Ensures the cluster's word that the lease ended fires lost at once (revoked).
test("a refused renewal is revoked at once", { timeout: 10_000 }, async () => {
  const refusing: Renewal = {
    subject: "refused",
    endedBy: ["stale_token"],
    renew: () => Promise.reject(new StaleTokenError("409 stale_token", "stale_token", 409)),
  };
  const anchor = now();
  const watchdog = new Watchdog(refusing, Timing.of(600, 60), anchor);
  const reason = await watchdog.lost;
  assert.deepEqual([reason.kind, reason.code], ["revoked", "stale_token"]);
  assert.ok(now() < Timing.of(600, 60).deadline(anchor));
});

// Ensures stop ends the watchdog: no renewal after, lost resolves "ended".
test("a stopped watchdog renews no more", { timeout: 10_000 }, async () => {
  const r = renewal(["ok"]);
  const watchdog = new Watchdog(r, Timing.of(300, 30), now());
  await sleep(250);
  await watchdog.stop();
  const calls = r.calls;
  assert.ok(calls >= 1);
  await sleep(250);
  assert.equal(r.calls, calls);
  assert.equal((await watchdog.lost).kind, "ended");
});
