"""Scrape a real sluice's /metrics while it delivers, fails and sheds, and check that every
metric the alert rules and the dashboard query exists in that scrape.

    python .ci/scrape_under_load.py --sluice target/debug/sluice --out scrape.prom \
        --rules deploy/prometheus/alerts.yml --dashboard deploy/grafana/sluice.json

Starts `sluice serve` (embedded store, a temporary data directory) and loopback receivers
that answer 200, 500, slowly and 429; posts a bounded number of messages over a few seconds;
scrapes the operator listener in the Prometheus text format once delivered, failed and shed
counters have all moved; writes the scrape to --out (for `promtool check metrics`); stops
sluice with SIGTERM. Exits non-zero, naming what is missing, if a queried metric is absent.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ADMIN = "ci-scrape-admin-token-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        if self.path == "/fail":
            self.send_response(500)
        elif self.path == "/throttle":
            self.send_response(429)
            self.send_header("retry-after", "1")
        elif self.path == "/slow":
            time.sleep(0.4)
            self.send_response(200)
        else:
            self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def call(method, url, token, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
        return json.loads(text) if text else None


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def sample_names(text):
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def total(text, name):
    value = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            value += float(line.rsplit(" ", 1)[1])
    return value


# PromQL words that are not metric names.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "le", "inf", "nan",
}


def metric_names(expr):
    """The metric names an expression reads: identifiers that are not functions (followed by
    '('), not keywords, and not inside label matchers or by/without/on/ignoring lists."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # drop string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # drop label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # drop range selectors
    expr = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr
    )
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        word = m.group(0)
        after = expr[m.end():].lstrip()
        if word.lower() in KEYWORDS or after.startswith("("):
            continue
        if re.fullmatch(r"\d+[smhdwy]", word) or word.isdigit():
            continue
        # Numbers like 1e3 or durations are not names; names have an underscore here.
        if "_" in word:
            names.add(word)
    return names


def rule_exprs(path):
    import yaml  # PyYAML, installed with kubernetes-validate

    with open(path) as f:
        doc = yaml.safe_load(f)
    for group in doc["groups"]:
        for rule in group["rules"]:
            yield rule.get("alert") or rule.get("record"), rule["expr"]


def dashboard_exprs(path):
    with open(path) as f:
        doc = json.load(f)
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rules", action="append", default=[])
    ap.add_argument("--dashboard", action="append", default=[])
    args = ap.parse_args()

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    rx = f"http://127.0.0.1:{receiver.server_address[1]}"

    api_port, op_port = free_port(), free_port()
    data = tempfile.mkdtemp()
    log = open(os.path.join(data, "serve.log"), "w")
    proc = subprocess.Popen(
        [
            args.sluice, "serve", "--listen", f"127.0.0.1:{api_port}",
            "--operator-listen", f"127.0.0.1:{op_port}", "--data-dir", data,
            "--allow-network", "127.0.0.0/8", "--lane-size", "1", "--lane-deadline", "100ms",
            "--retry-schedule", "1s,1s,1s", "--metrics-top-endpoints", "3",
            "--drain-grace", "2s",
        ],
        env={**os.environ, "SLUICE_ADMIN_TOKEN": ADMIN, "SLUICE_LOG": "warn"},
        stdout=log,
        stderr=log,
    )
    api, op = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{op_port}"
    try:
        for _ in range(100):
            try:
                scrape(f"{op}/healthz")
                break
            except OSError:
                time.sleep(0.1)
        token = call("POST", f"{api}/v1/tenants", ADMIN, {"name": "ci-scrape"})["token"]
        for path in ["/ok", "/ok", "/fail", "/slow", "/throttle"]:
            call("POST", f"{api}/v1/endpoints", token, {"url": rx + path})
        # Bounded load: at most 600 messages over at most 30 s, stopped once every counter
        # the checks need has moved.
        text, sent, started = "", 0, time.time()
        while sent < 600 and time.time() - started < 30:
            for _ in range(20):
                call("POST", f"{api}/v1/messages", token, {"event_type": "ci.load", "payload": {"n": sent}})
                sent += 1
            time.sleep(0.2)
            text = scrape(f"{op}/metrics")
            moved = all(
                total(text, name) > 0
                for name in [
                    "webhook_deliveries_ok_total",
                    "sluice_attempts_failed_total",
                    "webhook_deliveries_shed_total",
                    "delivery_duration_seconds_count",
                ]
            )
            if moved and time.time() - started > 3:
                break
        with open(args.out, "w") as f:
            f.write(text)
        print(f"scraped {len(text.splitlines())} lines after {sent} messages -> {args.out}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        receiver.shutdown()

    present = sample_names(text)
    missing = []
    queried = [(f"rule {n}", e) for p in args.rules for n, e in rule_exprs(p)]
    queried += [(f"panel {t!r}", e) for p in args.dashboard for t, e in dashboard_exprs(p)]
    for where, expr in queried:
        for name in sorted(metric_names(expr)):
            if name not in present:
                missing.append(f"{where}: {name}")
    print(f"checked {len(queried)} queries against {len(present)} sample names")
    if missing:
        print("metrics queried but not exported:\n  " + "\n  ".join(missing))
        sys.exit(1)


if __name__ == "__main__":
    main()
