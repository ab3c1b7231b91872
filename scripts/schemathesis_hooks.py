"""Schemathesis hooks for scripts/schemathesis.

An Idempotency-Key reused with a different body is refused with 422 by contract, and a
fuzzer that draws the same short key twice for two different bodies would report that as
"a schema-valid request rejected". Every well-formed key is made unique per request
(still well-formed), so that rule is never tripped by accident; malformed keys are left
as drawn, so their refusal is still checked.
"""
import re
import uuid

import schemathesis

WELL_FORMED = re.compile(r"^[!-~]{1,200}$")


@schemathesis.hook
def map_headers(context, headers):
    if not headers:
        return headers
    for name in list(headers):
        value = headers[name]
        if name.lower() == "idempotency-key" and isinstance(value, str) and WELL_FORMED.match(value):
            headers[name] = f"{value}.{uuid.uuid4().hex}"
    return headers
