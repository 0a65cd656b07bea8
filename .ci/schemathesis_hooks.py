"""Schemathesis hooks for .ci/schemathesis (loaded through SCHEMATHESIS_HOOKS).

Two changes to generated cases, and why:

1. No path parameter with a percent escape in it. Schemathesis
   percent-decodes a path parameter before it encodes it (so that "%2E"
   stays "%2E"): a generated key "a%0Eb" reaches the server as "a", U+000E,
   "b", which the server rightly refuses as a control character although
   the generated value was valid. Such values are skipped (a "%" alone is
   still sent, as %25).

2. An acquire with `wait_ms` on a lock another owner holds
waits, by design, until the lock passes to it or the wait runs out - up to
an hour, the documented bound. Fuzzing generates such waits (names like "0"
repeat), and a run must finish in minutes. So a *valid* wait longer than two
seconds is shortened to two seconds; the server still sees every other value
(0, absent, the bound itself is tried by the rest of the suite, and every
invalid one - over the bound, negative, not a number - unchanged, so its
refusal is still checked).
"""

import re

import schemathesis

PERCENT_ESCAPE = re.compile("%[0-9A-Fa-f]{2}")

MAX_WAIT_MS = 3_600_000
FUZZ_WAIT_MS = 2_000


@schemathesis.hook
def filter_path_parameters(context, path_parameters):
    values = (path_parameters or {}).values()
    return not any(isinstance(v, str) and PERCENT_ESCAPE.search(v) for v in values)


@schemathesis.hook
def map_case(context, case):
    if case.operation.path.endswith("/acquire") and isinstance(case.body, dict):
        wait = case.body.get("wait_ms")
        # An integer, also spelt as a float (7.0): JSON Schema's integers.
        integral = type(wait) is int or (type(wait) is float and wait.is_integer())
        if integral and FUZZ_WAIT_MS < wait <= MAX_WAIT_MS:
            case.body["wait_ms"] = FUZZ_WAIT_MS
    return case
