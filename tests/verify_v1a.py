"""Verify a sluice-signed webhook's Standard Webhooks `v1a` (Ed25519) signature with the
`cryptography` package, an implementation independent of sluice's.

Reads JSON {"public_key": "whpk_...", "headers": {...}, "body": "..."} on stdin. The signed
content is "{webhook-id}.{webhook-timestamp}.{body}"; `webhook-signature` holds space-separated
signatures, and at least one `v1a,<base64>` among them must verify under the public key. The
timestamp must be within five minutes of now, as receivers are told to check.
Exits 0 when it verifies, 1 (printing why) when it does not.
"""

import base64
import json
import sys
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

TOLERANCE_S = 5 * 60


def verify(request: dict) -> None:
    headers = {k.lower(): v for k, v in request["headers"].items()}
    msg_id = headers["webhook-id"]
    timestamp = headers["webhook-timestamp"]
    if abs(time.time() - int(timestamp)) > TOLERANCE_S:
        raise ValueError(f"timestamp {timestamp} is outside the tolerance")
    public_key = request["public_key"]
    if not public_key.startswith("whpk_"):
        raise ValueError("the public key must be whpk_<base64>")
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key[len("whpk_"):]))
    content = f"{msg_id}.{timestamp}.".encode() + request["body"].encode("utf-8")
    candidates = [s for s in headers["webhook-signature"].split(" ") if s.startswith("v1a,")]
    if not candidates:
        raise ValueError("no v1a signature in the header")
    for candidate in candidates:
        try:
            key.verify(base64.b64decode(candidate[len("v1a,"):]), content)
            return
        except InvalidSignature:
            continue
    raise ValueError("no v1a signature verifies under this public key")


def main() -> int:
    try:
        verify(json.load(sys.stdin))
    except Exception as err:  # any failure is a verification failure for the caller
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
