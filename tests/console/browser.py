#!/usr/bin/env python3
"""The console in a real browser: headless Chromium driven by Selenium (WebDriver) against the
real `sluice` binary and real receivers (`sluice receive`, which verifies signatures, and a
small Python receiver that fails on demand).

Steps: create a portal link (JSON API), open it and enter the portal, add two endpoints in the
form (the secret shown once starts `sluice receive`), send messages through the JSON API, see
them delivered in the message log and open one, read the evidence and pause the endpoint (the
sentence changes), replay a dead letter, check that a second tenant's link cannot see the first
tenant's endpoints (their ids are 404 pages), sign in as the operator and read the fleet,
tenants and plan; read the portal with JavaScript disabled. Every page is checked for browser
console errors (CSP violations included) and for horizontal overflow at 375 px; screenshots of
the main pages at desktop and 375 px widths go to --screenshots.

Run by .ci/run after `cargo test`; by hand:
    target/ci-venv/bin/python tests/console/browser.py --screenshots docs/console
"""

import argparse
import base64
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.support.ui import WebDriverWait

ADMIN = "sk_admin_browser_test_0123456789"
DESKTOP, MOBILE = 1280, 375


def step(text):
    print(f"== {text}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(check, what, timeout=40.0, every=0.5):
    deadline = time.time() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


class Api:
    """The JSON API, as a producer or the platform uses it."""

    def __init__(self, base):
        self.base = base

    def call(self, method, path, token, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def ok(self, method, path, token, body=None):
        status, answer = self.call(method, path, token, body)
        assert 200 <= status < 300, f"{method} {path}: {status} {answer}"
        return answer


class FailingReceiver:
    """Answers 500 until told to recover, then 200; counts requests."""

    def __init__(self):
        self.failing = True
        self.requests = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                owner.requests += 1
                status = 500 if owner.failing else 200
                body = b'{"error":"<b>down</b> for maintenance"}' if owner.failing else b"ok"
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        # 127.0.0.2 (loopback too): a second destination host on the dashboard.
        self.server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.url = f"http://127.0.0.2:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Browser:
    """One headless Chromium with its console log checked after every page."""

    def __init__(self, args, base, javascript=True):
        self.base = base
        self.shots = args.screenshots
        self.profile = tempfile.mkdtemp(prefix="sluice-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = args.chromium
        for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={self.profile}",
                     f"--window-size={DESKTOP},900"]:
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        if not javascript:
            options.add_experimental_option(
                "prefs", {"profile.managed_default_content_settings.javascript": 2})
        self.driver = webdriver.Chrome(service=Service(args.chromedriver), options=options)
        self.driver.set_page_load_timeout(30)

    def quit(self):
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)

    def check_log(self, allowed=()):
        if allowed:
            # An expected error status is logged a moment after the page: let it arrive here.
            time.sleep(0.5)
        entries = self.driver.get_log("browser")
        errors = [e for e in entries if e["level"] == "SEVERE"
                  and not any(a in e["message"] for a in allowed)]
        assert not errors, f"browser console errors on {self.driver.current_url}: {errors}"

    def open(self, path, allowed=()):
        self.driver.get(path if path.startswith("http") else self.base + path)
        self.check_log(allowed)

    def text(self, css="body"):
        return self.driver.find_element(By.CSS_SELECTOR, css).text

    def click(self, xpath, allowed=()):
        """Click something that navigates, and wait for the next page."""
        old = self.driver.find_element(By.TAG_NAME, "html")
        self.driver.find_element(By.XPATH, xpath).click()
        WebDriverWait(self.driver, 15).until(lambda _: gone(old))
        WebDriverWait(self.driver, 15).until(
            lambda d: d.execute_script("return document.readyState") == "complete")
        self.check_log(allowed)

    def button(self, label):
        self.click(f"//button[normalize-space()='{label}'] | //a[normalize-space()='{label}']")

    def fill(self, name, value):
        field = self.driver.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)

    def reload_until(self, check, what, timeout=40.0):
        def again():
            self.driver.refresh()
            self.check_log()
            return check()
        return eventually(lambda: check() or again(), what, timeout)

    def fits(self, width):
        overflow = self.driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth")
        if overflow > 1:
            culprits = self.driver.execute_script(
                "return [...document.querySelectorAll('body *')]"
                ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)"
                ".slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + "
                "Math.round(e.getBoundingClientRect().right))")
            raise AssertionError(f"{self.driver.current_url} overflows by {overflow}px at "
                                 f"{width}px wide: {culprits}")

    def emulate(self, width, height=900):
        """Lay the page out at `width` CSS pixels (a phone's viewport below 500)."""
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 500})
        time.sleep(0.2)

    def narrow(self):
        """The current page at 375 px: nothing wider than the screen."""
        self.emulate(MOBILE)
        self.fits(MOBILE)
        self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    def shot(self, name):
        """Full-page screenshots at desktop and 375 px widths; at 375 px nothing overflows."""
        for label, width in (("desktop", DESKTOP), ("mobile", MOBILE)):
            self.emulate(width)
            self.fits(width)
            height = self.driver.execute_script(
                "return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)")
            self.emulate(width, min(max(int(height), 600), 6000))
            if self.shots:
                shot = self.driver.execute_cdp_cmd(
                    "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
                path = os.path.join(self.shots, f"{name}-{label}.png")
                with open(path, "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
                print(f"   screenshot {path}")
        self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        self.check_log()

    def clear_session(self):
        self.driver.get("about:blank")
        self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})


def gone(element):
    """Whether `element` left the document (the click's navigation replaced the page).

    While the old document is being torn down Chromium may answer "stale element" or, for a
    moment, "node does not belong to the document": both mean it is gone.
    """
    try:
        element.is_enabled()
        return False
    except WebDriverException:
        return True


def enter_portal(browser, api, token):
    link = api.ok("POST", "/v1/portal-links", token, {})
    browser.open(link["url"])
    assert "Open the portal" in browser.text(), browser.text()
    browser.click("//button[@id='enter']")
    portal = browser.base + "/console/portal/"
    url = eventually(lambda: browser.driver.current_url == portal and portal,
                     "the portal after the exchange", timeout=10, every=0.1)
    assert "token" not in url
    return link


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sluice", default=os.environ.get("SLUICE_BIN", "target/debug/sluice"))
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    parser.add_argument("--chromedriver",
                        default=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    parser.add_argument("--screenshots", default="target/console-screenshots",
                        help="directory for the PNGs ('' for none)")
    args = parser.parse_args()
    if args.screenshots:
        os.makedirs(args.screenshots, exist_ok=True)

    data = tempfile.mkdtemp(prefix="sluice-browser-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, SLUICE_ADMIN_TOKEN=ADMIN)
    serve_log = open(os.path.join(data, "serve.log"), "w")
    sluice = subprocess.Popen(
        [args.sluice, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data,
         "--allow-network", "127.0.0.0/8", "--retry-schedule", "300ms,300ms",
         "--sqlite-synchronous", "normal"],
        env=env, stdout=serve_log, stderr=subprocess.STDOUT)
    processes = [sluice]
    browsers = []
    try:
        eventually(lambda: _up(base), "sluice to answer /healthz", timeout=30, every=0.2)
        api = Api(base)
        run(args, api, base, processes, browsers)
        print("browser test passed")
    except BaseException:
        serve_log.flush()
        with open(os.path.join(data, "serve.log")) as f:
            print("---- sluice log (tail)\n" + "".join(f.readlines()[-40:]), file=sys.stderr)
        raise
    finally:
        for b in browsers:
            b.quit()
        for p in processes:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(data, ignore_errors=True)


def _up(base):
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def run(args, api, base, processes, browsers):
    tenant_a = api.ok("POST", "/v1/tenants", ADMIN, {"name": "Acme Shipping"})
    tenant_b = api.ok("POST", "/v1/tenants", ADMIN, {"name": "Globex"})
    token_a, token_b = tenant_a["token"], tenant_b["token"]

    b = Browser(args, base)
    browsers.append(b)

    step("portal link (POST /v1/portal-links) opened and exchanged for a session")
    link = enter_portal(b, api, token_a)
    assert "No endpoints yet" in b.text()
    b.open(link["url"], allowed=["status of 410"])
    assert "no longer works" in b.text(), "a used link must not work again"

    step("add an endpoint in the form; its secret, shown once, starts `sluice receive`")
    verified_port = free_port()
    verified_url = f"http://127.0.0.1:{verified_port}/hook"
    b.open("/console/portal/")
    b.button("Add an endpoint")
    b.fill("url", verified_url)
    b.fill("description", "orders, signatures checked by sluice receive")
    b.fill("event_types", "order.created, order.paid")
    b.fill("lane_size", "4")
    b.click("//button[@type='submit' and normalize-space()='Add the endpoint']")
    secret = b.text("#secret")
    assert secret.startswith("whsec_"), secret
    copy = b.driver.find_element(By.CSS_SELECTOR, "button[data-copy]")
    assert copy.is_displayed(), "console.js runs under the CSP (it reveals the copy button)"
    b.button("Open the endpoint")
    endpoint_a = b.driver.current_url.rsplit("/", 1)[1]
    assert endpoint_a.startswith("ep_"), endpoint_a
    receive_log = tempfile.NamedTemporaryFile("w+", prefix="sluice-receive-", delete=False)
    processes.append(subprocess.Popen(
        [args.sluice, "receive", "--listen", f"127.0.0.1:{verified_port}", "--secret", secret],
        stdout=receive_log, stderr=subprocess.STDOUT))

    step("a second endpoint whose receiver fails (for dead letters)")
    failing = FailingReceiver()
    b.open("/console/portal/endpoints/new")
    b.fill("url", failing.url)
    b.fill("description", "billing: down for maintenance")
    b.click("//button[@type='submit' and normalize-space()='Add the endpoint']")
    b.button("Open the endpoint")
    endpoint_fail = b.driver.current_url.rsplit("/", 1)[1]

    step("the form shows the API's own validation next to the field")
    b.open("/console/portal/endpoints/new")
    b.narrow()
    b.fill("url", "http://10.0.0.1/hook")
    b.click("//button[@type='submit' and normalize-space()='Add the endpoint']",
            allowed=["status of 422"])
    error = b.text(".field-error")
    assert error, "the egress guard's refusal is shown next to the URL"
    assert b.driver.find_element(By.NAME, "url").get_attribute("value") == "http://10.0.0.1/hook"

    step("send messages through the JSON API; see them delivered in the log")
    eventually(lambda: _listening(verified_port), "sluice receive to listen", timeout=20)
    sent = []
    for n in range(1, 6):
        kind = "order.created" if n % 2 else "order.paid"
        sent.append(api.ok("POST", "/v1/messages", token_a,
                           {"event_type": kind, "payload": {"order": 1000 + n, "total": n * 12.5}})["id"])
    b.open("/console/portal/messages")
    b.reload_until(lambda: b.text().count("delivered") >= 5, "five delivered messages in the log")
    eventually(lambda: _count(receive_log.name, "signature verified") >= 5,
               "sluice receive to verify five signatures")
    assert _count(receive_log.name, "SIGNATURE INVALID") == 0
    b.shot("portal-messages")
    b.open(f"/console/portal/messages?endpoint={endpoint_a}&state=delivered")
    assert all(m in b.text() for m in sent), "the filtered log lists every delivered message"

    step("a message: its payload, deliveries and attempts")
    b.open(f"/console/portal/messages/{sent[0]}")
    body = b.text()
    assert "order.created" in body and '"order": 1001' in body, body
    b.reload_until(lambda: "dead" in b.text(), "the failing endpoint's delivery to die")
    assert "<b>down</b>" in b.text(), "a hostile response body is shown as text"
    b.shot("portal-message")

    step("the evidence panel; pausing the endpoint changes the sentence")
    b.open(f"/console/portal/endpoints/{endpoint_a}")
    sentence = b.text("#sentence")
    assert "you can receive" in sentence and not sentence.startswith("disabled"), sentence
    b.shot("portal-evidence")
    b.button("Pause")
    paused = b.text("#sentence")
    assert paused.startswith("disabled (") and paused != sentence, paused
    assert "disabled" in b.text("#events")
    b.button("Enable")
    assert not b.text("#sentence").startswith("disabled")

    step("replay a dead letter")
    b.open("/console/portal/dead-letters")
    b.narrow()
    b.reload_until(lambda: len(b.driver.find_elements(By.XPATH, "//button[normalize-space()='Replay']")) >= 3,
                   "three dead letters")
    failing.failing = False
    b.click("(//button[normalize-space()='Replay'])[1]")
    b.open(f"/console/portal/dead-letters?endpoint={endpoint_fail}")
    b.button("Replay all of this endpoint")
    b.open(f"/console/portal/messages?endpoint={endpoint_fail}&state=delivered")
    b.reload_until(lambda: b.text().count("delivered") >= 4, "the replayed deliveries to arrive")
    b.open("/console/portal/dead-letters")
    assert "Nothing matches" in b.text()
    b.open("/console/portal/")
    assert verified_url in b.text() and failing.url in b.text()
    b.shot("portal-endpoints")

    step("a second tenant's link cannot see the first tenant's endpoints")
    b.clear_session()
    enter_portal(b, api, token_b)
    assert verified_url not in b.text() and "No endpoints yet" in b.text()
    for path in [f"/console/portal/endpoints/{endpoint_a}",
                 f"/console/portal/endpoints/{endpoint_a}/edit",
                 f"/console/portal/messages/{sent[0]}",
                 f"/console/portal/messages?endpoint={endpoint_a}"]:
        b.open(path, allowed=["status of 404"])
        assert "not found" in b.text().lower() and verified_url not in b.text(), path
    b.open("/console/portal/messages")
    assert sent[0] not in b.text()

    step("the operator signs in with the admin token and reads the fleet, tenants and plan")
    b.clear_session()
    b.open("/console/admin/")
    assert b.driver.current_url.endswith("/console/login")
    b.fill("token", ADMIN)
    b.click("//button[@id='sign-in']")
    eventually(lambda: b.driver.current_url.endswith("/console/admin/"), "the dashboard",
               timeout=10, every=0.1)
    b.reload_until(lambda: "threshold" in b.text() and "127.0.0.1" in b.text()
                   and "127.0.0.2" in b.text(),
                   "the occupancy share per host")
    assert "Replicas wanted" in b.text() and "In flight" in b.text()
    b.shot("dashboard")
    b.open("/console/admin/tenants")
    assert "Acme Shipping" in b.text() and "Globex" in b.text() and "closed" in b.text()
    b.narrow()
    b.open("/console/admin/plan")
    assert "Recommended concurrency" in b.text()
    b.narrow()
    b.open("/console/admin/")
    b.button("Sign out")
    assert "Signed out" in b.text()

    step("with JavaScript disabled the portal still reads")
    nojs = Browser(args, base, javascript=False)
    browsers.append(nojs)
    enter_portal(nojs, api, token_a)
    assert verified_url in nojs.text()
    nojs.open(f"/console/portal/endpoints/{endpoint_a}")
    assert "you can receive" in nojs.text("#sentence")
    nojs.open("/console/portal/messages")
    assert nojs.text().count("delivered") >= 5
    nojs.open(f"/console/portal/messages/{sent[0]}")
    assert '"order": 1001' in nojs.text()
    copy = nojs.driver.find_elements(By.CSS_SELECTOR, "button[data-copy]")
    assert not any(c.is_displayed() for c in copy), "no script ran"


def _listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _count(path, needle):
    with open(path) as f:
        return f.read().count(needle)


if __name__ == "__main__":
    main()
