"""Schemathesis hooks for .ci/schemathesis (loaded through SCHEMATHESIS_HOOKS).

One hook, and why: an acquire with `wait_ms` on a lock another owner holds
waits, by design, until the lock passes to it or the wait runs out - up to
an hour, the documented bound. Fuzzing generates such waits (names like "0"
repeat), and a run must finish in minutes. So a *valid* wait longer than two
seconds is shortened to two seconds; the server still sees every other value
(0, absent, the bound itself is tried by the rest of the suite, and every
invalid one - over the bound, negative, not a number - unchanged, so its
refusal is still checked).
"""

import schemathesis

MAX_WAIT_MS = 3_600_000
FUZZ_WAIT_MS = 2_000


@schemathesis.hook
def map_case(context, case):
    if case.operation.path.endswith("/acquire") and isinstance(case.body, dict):
        wait = case.body.get("wait_ms")
        # An integer, also spelt as a float (7.0): JSON Schema's integers.
        integral = type(wait) is int or (type(wait) is float and wait.is_integer())
        if integral and FUZZ_WAIT_MS < wait <= MAX_WAIT_MS:
            case.body["wait_ms"] = FUZZ_WAIT_MS
    return case
