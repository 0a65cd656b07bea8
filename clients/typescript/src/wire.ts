/** Decoding the cluster's JSON into the client's types, checked. */

import { DecodeError } from "./errors.js";
import type { Lease, LeaseholdRecord, Leases, LeaseView, SessionView } from "./types.js";

export type Json = Record<string, unknown>;

export function object(data: unknown, what: string): Json {
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new DecodeError(`expected a JSON object for ${what}, got ${JSON.stringify(data)}`);
  }
  return data as Json;
}

export function int(data: Json, key: string): number {
  const value = data[key];
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new DecodeError(`expected a non-negative integer ${key} in ${JSON.stringify(data)}`);
  }
  return value;
}

export function str(data: Json, key: string): string {
  const value = data[key];
  if (typeof value !== "string") {
    throw new DecodeError(`expected a string ${key} in ${JSON.stringify(data)}`);
  }
  return value;
}

export function lease(data: unknown, sentAt: number): Lease {
  const d = object(data, "a grant");
  return {
    name: str(d, "name"),
    owner: str(d, "owner"),
    token: int(d, "token"),
    ttlMs: int(d, "ttl_ms"),
    expiresInMs: int(d, "expires_in_ms"),
    reacquired: d["reacquired"] === true,
    sentAt,
  };
}

export function leases(data: unknown, sentAt: number): Leases {
  const d = object(data, "a multi-grant");
  const token = int(d, "token");
  const grants = d["grants"];
  if (!Array.isArray(grants) || grants.length === 0) {
    throw new DecodeError(`expected a non-empty list grants in ${JSON.stringify(d)}`);
  }
  const decoded = grants.map((g) => lease(g, sentAt));
  const other = decoded.find((g) => g.token !== token);
  if (other !== undefined) {
    throw new DecodeError(`grant of ${other.name} has token ${other.token}, not ${token}`);
  }
  return { token, grants: decoded, reacquired: d["reacquired"] === true, sentAt };
}

export function leaseView(data: unknown): LeaseView {
  const d = object(data, "a lock");
  const session = d["session"];
  return {
    name: str(d, "name"),
    owner: str(d, "owner"),
    token: int(d, "token"),
    ttlMs: int(d, "ttl_ms"),
    expiresInMs: int(d, "expires_in_ms"),
    session: typeof session === "number" ? session : null,
  };
}

export function sessionView(data: unknown, sentAt: number): SessionView {
  const d = object(data, "a session");
  return {
    session: int(d, "session"),
    owner: str(d, "owner"),
    ttlMs: int(d, "ttl_ms"),
    expiresInMs: int(d, "expires_in_ms"),
    sentAt,
  };
}

export function record(data: unknown): LeaseholdRecord {
  const d = object(data, "a record");
  return { key: str(d, "key"), value: d["value"], lock: str(d, "lock"), token: int(d, "token"), index: int(d, "index") };
}
