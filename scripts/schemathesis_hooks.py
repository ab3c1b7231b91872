"""Schemathesis hooks for scripts/schemathesis.

An Idempotency-Key reused with a different body is refused with 422 by contract, and a
fuzzer that draws the same short key twice for two different bodies would report that as
"a schema-valid request rejected". Every well-formed key is made unique per request
(still well-formed), so that rule is never tripped by accident; malformed keys are left
as drawn, so their refusal is still checked.
"""
import base64
import hashlib
import re
import uuid

import schemathesis
from schemathesis.transport.serialization import serialize_binary

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


# A file is named by the SHA-256 of its bytes, which a schema cannot say: a PUT drawn
# with a well-formed name is sent under the name of the body drawn, so that a valid
# request is a valid upload (a malformed name is left as drawn). Likewise a tus upload's
# metadata names a hash that is hex, and an empty upload the hash of nothing.
SHA256 = re.compile(r"^[0-9a-f]{64}$")
TUS_METADATA = re.compile(r"^sha256 [A-Za-z0-9+/]{86}==(,[a-z_]+( [A-Za-z0-9+/=]*)?)*$")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@schemathesis.hook
def before_call(context, case, **kwargs):
    path, method = case.operation.path, case.operation.method.upper()
    if path == "/v1/blobs/{sha256}" and method == "PUT" and SHA256.match(str(case.path_parameters.get("sha256", ""))):
        case.path_parameters["sha256"] = hashlib.sha256(serialize_binary(case.body)).hexdigest()
    if path == "/v1/uploads" and method == "POST" and case.headers:
        metadata = case.headers.get("Upload-Metadata")
        if isinstance(metadata, str) and TUS_METADATA.match(metadata):
            empty = str(case.headers.get("Upload-Length")) == "0"
            sha = EMPTY_SHA256 if empty else uuid.uuid4().hex * 2
            case.headers["Upload-Metadata"] = "sha256 " + base64.b64encode(sha.encode()).decode()


# A tus PATCH carries its bytes as application/offset+octet-stream: sent as they are.
@schemathesis.serializer("application/offset+octet-stream")
def offset_octet_stream(context, value):
    return serialize_binary(value if value is not None else b"")
