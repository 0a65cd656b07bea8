"""Schemathesis hooks for .ci/schemathesis (loaded through SCHEMATHESIS_HOOKS).

One check replaces schemathesis' `not_a_server_error` (excluded in
.ci/schemathesis): every 5xx is a failure except a 503 `unavailable` or
`overloaded` with `Retry-After` and the JSON error body - the documented
answer of a node that cannot confirm a quorum right now (a heartbeat late on
a loaded 2-core CI machine) or sheds load. Clients retry it; any other 5xx,
and a 503 without that shape, still fails the run.

Four changes to generated cases, and why:

1. No path parameter with a percent escape in it. Schemathesis
   percent-decodes a path parameter before it encodes it (so that "%2E"
   stays "%2E"): a generated key "a%0Eb" reaches the server as "a", U+000E,
   "b", which the server rightly refuses as a control character although
   the generated value was valid. Such values are skipped (a "%" alone is
   still sent, as %25).

2. An acquire or campaign with `wait_ms` on a lock another owner holds
waits, by design, until the lock passes to it or the wait runs out - up to
an hour, the documented bound. Fuzzing generates such waits (names like "0"
repeat), and a run must finish in minutes. So a *valid* wait longer than two
seconds is shortened to two seconds; the server still sees every other value
(0, absent, the bound itself is tried by the rest of the suite, and every
invalid one - over the bound, negative, not a number - unchanged, so its
refusal is still checked).

3. No body whose integer fields hold a number with a fraction. Schemathesis'
   fuzzing can generate one and count it as schema-valid (seen:
   `"token": 2201872973230843.2` for `"type": "integer"`), then fail the run
   on the server's right answer, 400. JSON Schema's integers spelt as floats
   (7.0) are still sent; such bodies are dropped rather than the check
   weakened for every operation that takes a token.

4. A semaphore acquire asking more `permits` than its `limit` asks for
   `limit` permits instead: JSON Schema cannot compare two fields, so such a
   body looks schema-valid, and the server's right answer, 400, failed the
   run (a filter would not reach the coverage phase, which made it). (Rules between fields that
   JSON Schema can state, such as "not both `ttl_ms` and `session`", are in
   the document itself: src/api/openapi.rs, `document_json`.)

And one change to how cases are chosen: `hypothesis.target()` does nothing in
this process, so Hypothesis never runs its optimiser. Schemathesis (4.8.0 and
later) targets every fuzzed case's success rate, and the optimiser then
replays cases expecting the same draws from the same choices, which
schemathesis' generation (fed by earlier responses) does not give: a run
failed at random with `IndexError: Index 49 out of range [-49, 49)` from
optimiser.py. No Hypothesis release avoids it; the reasoning and the versions
are in .ci/requirements-schemathesis.in. Fuzzing without it is plain random
generation, as before 4.8.0.
"""

import json
import re

import hypothesis
import hypothesis.control
import schemathesis


def _no_target(observation, *, label=""):
    """hypothesis.target, recording nothing (see the docstring above)."""
    return observation


# Schemathesis calls it as `hypothesis.target(...)` when a case has run
# (schemathesis/generation/metrics.py), looked up then, so replacing the
# attribute when the hooks load reaches every call; hypothesis.control, where
# it is defined, gets the same, for a caller that imports it from there.
hypothesis.target = hypothesis.control.target = _no_target

PERCENT_ESCAPE = re.compile("%[0-9A-Fa-f]{2}")

MAX_WAIT_MS = 3_600_000
FUZZ_WAIT_MS = 2_000


@schemathesis.hook
def filter_path_parameters(context, path_parameters):
    values = (path_parameters or {}).values()
    return not any(isinstance(v, str) and PERCENT_ESCAPE.search(v) for v in values)


@schemathesis.hook
def map_case(context, case):
    # Every waiting request: acquires (locks, multi, semaphores) and campaigns.
    if isinstance(case.body, dict):
        wait = case.body.get("wait_ms")
        # An integer, also spelt as a float (7.0): JSON Schema's integers.
        integral = type(wait) is int or (type(wait) is float and wait.is_integer())
        if integral and FUZZ_WAIT_MS < wait <= MAX_WAIT_MS:
            case.body["wait_ms"] = FUZZ_WAIT_MS
        permits, limit = case.body.get("permits"), case.body.get("limit")
        # Integers, also spelt as floats (7.0), as for wait_ms.
        counts = all(type(n) is int or (type(n) is float and n.is_integer()) for n in (permits, limit))
        if counts and 1 <= limit < permits:
            case.body["permits"] = limit
    return case


INTEGER_FIELDS = ("token", "ttl_ms", "wait_ms", "lock_delay_ms", "session", "seq")


@schemathesis.hook
def filter_body(context, body):
    if not isinstance(body, dict):
        return True
    return not any(type(body.get(f)) is float and not body[f].is_integer() for f in INTEGER_FIELDS)


TRANSIENT_CODES = {"unavailable", "overloaded"}


@schemathesis.check
def no_server_error_but_documented_unavailability(ctx, response, case):
    if response.status_code < 500:
        return None
    if response.status_code == 503 and response.headers.get("retry-after"):
        try:
            code = json.loads(response.content)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
        if code in TRANSIENT_CODES:
            return None
    raise AssertionError(f"server error {response.status_code}: {response.content[:300]!r}")
