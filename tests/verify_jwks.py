"""Verify a sluice-signed webhook's `v1a` signature with a key from the endpoint's published
JSON Web Key Set, read by `joserfc`, a JOSE implementation independent of sluice's.

Reads JSON {"jwks": {...}, "headers": {...}, "body": "..."} on stdin. The set must parse as
RFC 7517 / RFC 8037 keys, each key's `kid` must be its RFC 7638 thumbprint, and one of its keys
must verify one `v1a,<base64>` signature of `webhook-signature` over
"{webhook-id}.{webhook-timestamp}.{body}". Exits 0 when it verifies, 1 (printing why) when not.
"""

import base64
import json
import sys

from cryptography.exceptions import InvalidSignature
from joserfc.jwk import KeySet


def verify(request: dict) -> None:
    keys = KeySet.import_key_set(request["jwks"]).keys
    if not keys:
        raise ValueError("the key set is empty")
    for key in keys:
        if key.kid != key.thumbprint():
            raise ValueError(f"kid {key.kid} is not the key's thumbprint {key.thumbprint()}")
    headers = {k.lower(): v for k, v in request["headers"].items()}
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.{request['body']}".encode()
    signatures = [
        base64.b64decode(s.split(",", 1)[1])
        for s in headers["webhook-signature"].split()
        if s.startswith("v1a,")
    ]
    for key in keys:
        for signature in signatures:
            try:
                key.public_key.verify(signature, content)
                return
            except InvalidSignature:
                pass
    raise ValueError("no key of the set verifies any v1a signature")


if __name__ == "__main__":
    try:
        verify(json.load(sys.stdin))
    except Exception as e:  # noqa: BLE001 - report any failure as "does not verify"
        print(f"does not verify: {e}", file=sys.stderr)
        sys.exit(1)
