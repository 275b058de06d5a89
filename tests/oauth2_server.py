"""An OAuth2 authorization server for sluice's tests, built on Authlib (not a stub): the client
credentials grant (RFC 6749 section 4.4) at /token, and a webhook receiver at /hook that only
accepts requests whose bearer token Authlib's resource protector validates (scope "webhooks").

It listens on 127.0.0.1 with a free port and prints {"port": N} as its first line. The test reads
what happened at /admin/stats and revokes every token at /admin/revoke (the receiver then
answers 401 to them, as a server that rotated its signing key would).
"""

import argparse
import json
import secrets
import sys
import threading
import time

from authlib.integrations.flask_oauth2 import AuthorizationServer, ResourceProtector
from authlib.oauth2.rfc6749 import ClientMixin, TokenMixin, grants
from authlib.oauth2.rfc6750 import BearerTokenValidator
from flask import Flask, jsonify, request
from werkzeug.serving import make_server


class Client(ClientMixin):
    def __init__(self, client_id, client_secret, scope):
        self.client_id = client_id
        self.client_secret = client_secret
        self.scope = scope

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return None

    def get_allowed_scope(self, scope):
        allowed = set(self.scope.split())
        return " ".join(s for s in (scope or "").split() if s in allowed)

    def check_redirect_uri(self, redirect_uri):
        return False

    def check_client_secret(self, client_secret):
        return secrets.compare_digest(self.client_secret, client_secret)

    def check_endpoint_auth_method(self, method, endpoint):
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type):
        return False

    def check_grant_type(self, grant_type):
        return grant_type == "client_credentials"


class Token(TokenMixin):
    def __init__(self, token, client_id):
        self.access_token = token["access_token"]
        self.scope = token.get("scope", "")
        self.expires_in = token.get("expires_in", 0)
        self.issued_at = time.time()
        self.client_id = client_id
        self.revoked = False

    def check_client(self, client):
        return client.get_client_id() == self.client_id

    def get_scope(self):
        return self.scope

    def get_expires_in(self):
        return self.expires_in

    def is_expired(self):
        return time.time() >= self.issued_at + self.expires_in

    def is_revoked(self):
        return self.revoked


class CredentialsGrant(grants.ClientCredentialsGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]


def build(args):
    app = Flask(__name__)
    app.config["OAUTH2_TOKEN_EXPIRES_IN"] = {"client_credentials": args.expires_in}
    lock = threading.Lock()
    clients = {args.client_id: Client(args.client_id, args.client_secret, "webhooks")}
    tokens = {}
    stats = {"issued": 0, "token_requests": [], "received": [], "refused": 0}

    def save_token(token, req):
        with lock:
            tokens[token["access_token"]] = Token(token, req.client.get_client_id())
            stats["issued"] += 1

    server = AuthorizationServer(app, query_client=clients.get, save_token=save_token)
    server.register_grant(CredentialsGrant)

    class Validator(BearerTokenValidator):
        def authenticate_token(self, token_string):
            with lock:
                return tokens.get(token_string)

    require_oauth = ResourceProtector()
    require_oauth.register_token_validator(Validator())

    @app.post("/token")
    def token():
        form = {k: v for k, v in request.form.items() if k != "client_secret"}
        with lock:
            stats["token_requests"].append(form)
        return server.create_token_response()

    @app.post("/hook")
    @require_oauth("webhooks")
    def hook():
        with lock:
            stats["received"].append(
                {"id": request.headers.get("webhook-id"), "body": request.get_data(as_text=True)}
            )
        return "", 204

    @app.after_request
    def count_refusals(response):
        if request.path == "/hook" and response.status_code == 401:
            with lock:
                stats["refused"] += 1
        return response

    @app.get("/admin/stats")
    def admin_stats():
        with lock:
            return jsonify(stats)

    @app.post("/admin/revoke")
    def admin_revoke():
        with lock:
            for t in tokens.values():
                t.revoked = True
        return "", 204

    return app


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--client-id", default="sluice")
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--expires-in", type=int, default=3600)
    args = parser.parse_args()
    httpd = make_server("127.0.0.1", 0, build(args), threaded=True)
    print(json.dumps({"port": httpd.server_port}), flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
