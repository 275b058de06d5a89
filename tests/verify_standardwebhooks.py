"""Verify a sluice-signed webhook with the reference `standardwebhooks` package.

Reads JSON {"secret": "whsec_...", "headers": {...}, "body": "..."} on stdin.
Exits 0 when the signature verifies, 1 (printing the error) when it does not.
Requires `pip install standardwebhooks` (1.1.0 tested).
"""

import json
import sys

from standardwebhooks.webhooks import Webhook


def main() -> int:
    try:
        request = json.load(sys.stdin)
        body = request["body"].encode("utf-8")
        Webhook(request["secret"]).verify(body, request["headers"])
    except Exception as err:  # any failure is a verification failure for the caller
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
