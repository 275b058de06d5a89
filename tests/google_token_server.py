"""Google's token endpoint for a service account, as sluice's Pub/Sub tests need it: it makes an
RSA key and the service account's JSON key naming this server's /token as its `token_uri`, and
grants a token (RFC 7523 `jwt-bearer`) only for an assertion that `joserfc` verifies with the
account's public key (RS256; issuer the account, audience the token_uri, the Pub/Sub scope, not
expired).

It listens on 127.0.0.1 with a free port and prints {"port": N, "key": "<the JSON key>"} as its
first line. /admin/stats says how many tokens it issued and how many assertions it refused.
"""

import json
import secrets
import threading
import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from flask import Flask, jsonify, request
from joserfc import jwt
from joserfc.jwk import RSAKey
from werkzeug.serving import make_server

EMAIL = "sluice@sluice-test.iam.gserviceaccount.com"
SCOPE = "https://www.googleapis.com/auth/pubsub"


def main():
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = RSAKey.import_key(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    app = Flask(__name__)
    stats = {"issued": 0, "refused": 0}
    lock = threading.Lock()
    server = make_server("127.0.0.1", 0, app, threaded=True)
    token_uri = f"http://127.0.0.1:{server.port}/token"

    @app.post("/token")
    def token():
        ok = request.form.get("grant_type") == "urn:ietf:params:oauth:grant-type:jwt-bearer"
        try:
            claims = jwt.decode(request.form.get("assertion", ""), public, algorithms=["RS256"]).claims
            now = time.time()
            ok = ok and (
                claims.get("iss") == EMAIL
                and claims.get("aud") == token_uri
                and claims.get("scope") == SCOPE
                and claims.get("iat", now + 1) <= now + 5
                and claims.get("exp", 0) > now
            )
        except Exception:
            ok = False
        with lock:
            stats["issued" if ok else "refused"] += 1
        if not ok:
            return jsonify({"error": "invalid_grant"}), 400
        return jsonify(
            {"access_token": secrets.token_urlsafe(24), "expires_in": 3600, "token_type": "Bearer"}
        )

    @app.get("/admin/stats")
    def admin_stats():
        with lock:
            return jsonify(stats)

    key = {
        "type": "service_account",
        "project_id": "sluice-test",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": EMAIL,
        "client_id": "1",
        "token_uri": token_uri,
    }
    print(json.dumps({"port": server.port, "key": json.dumps(key, indent=2)}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
