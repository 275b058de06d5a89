#!/usr/bin/env python3
"""The README's walk-through, through a Python client generated from sluice's own OpenAPI
document, against the real `sluice` binary and the real receiver the README uses
(`sluice receive`, which checks each signature).

Steps: a tenant (admin token), an endpoint (its secret starts the receiver), a message with an
Idempotency-Key (its repeat is the original, a different request under the key is refused),
the delivery state and its attempts, the evidence, a change of lane and ceiling, the message
log's filters, a resend of the delivered message (same webhook-id), a dead letter against a
receiver that is not there yet and its replay once it is, and the metrics. Every answer goes
through the generated models (the client raises on any status the document does not list), and
any mismatch stops the run with a message saying what differed.

Run by .ci/run after generating the client; by hand:
    target/ci-venv/bin/openapi-python-client generate --path openapi.json --meta none \
        --config tests/client/generator.yaml --output-path target/client/sluice_client
    target/ci-venv/bin/python tests/client/walkthrough.py --sluice target/debug/sluice \
        --client target/client
"""

import argparse
import datetime
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ADMIN = "sk_admin_walkthrough_0123456789"


class Mismatch(Exception):
    """What the walk-through found differs from what the README says."""


def step(text):
    print(f"== {text}", flush=True)


def expect(condition, what):
    if not condition:
        raise Mismatch(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(check, what, timeout=30.0, every=0.2):
    deadline = time.time() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.time() > deadline:
            raise Mismatch(f"timed out waiting for {what}")
        time.sleep(every)


def model(answer, cls, what):
    """`answer` must be the documented success model, not a problem or nothing."""
    expect(isinstance(answer, cls), f"{what}: expected {cls.__name__}, got {answer!r}")
    return answer


class Receiver:
    """`sluice receive` on a port, its output kept in a file."""

    def __init__(self, sluice, port, secret, log_dir):
        self.log = os.path.join(log_dir, f"receive-{port}.log")
        self.process = subprocess.Popen(
            [sluice, "receive", "--listen", f"127.0.0.1:{port}", "--secret", secret],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        eventually(lambda: "receiving webhooks" in self.text(), f"the receiver on {port}")

    def text(self):
        with open(self.log) as f:
            return f.read()

    def lines_for(self, message_id):
        return [line for line in self.text().splitlines() if line.startswith(message_id)]


def run(args, base, processes, log_dir):
    sys.path.insert(0, args.client)
    from sluice_client import AuthenticatedClient
    from sluice_client.api.deliveries import (
        get_delivery, list_delivery_attempts, list_endpoint_deliveries, list_message_attempts,
        resend_delivery)
    from sluice_client.api.dead_letters import list_dead_letters, replay_endpoint_dead_letters
    from sluice_client.api.endpoints import (
        create_endpoint, get_endpoint_status, list_endpoints, update_endpoint)
    from sluice_client.api.messages import create_message, get_message, list_messages
    from sluice_client.api.operations import get_metrics
    from sluice_client.api.tenants import create_tenant
    from sluice_client.models import (
        AttemptOut, CreateEndpoint, CreateMessage, CreateTenant, Created,
        DeliveryDetail, EndpointOut, EndpointStatus, MessageOut, PageAttemptOut,
        PageDeliveryOut, PageEndpointOut, PageMessageItem, Problem, Replayed, Resent,
        StateParam, TenantOut, UpdateEndpoint)

    admin = AuthenticatedClient(base_url=base, token=ADMIN, raise_on_unexpected_status=True)

    step("create a tenant (admin token)")
    tenant = model(create_tenant.sync(client=admin, body=CreateTenant(name="acme")),
                   TenantOut, "POST /v1/tenants")
    expect(tenant.id.startswith("ten_") and tenant.token, f"a tenant id and token: {tenant}")
    expect(isinstance(tenant.created_at, datetime.datetime), "created_at is a date-time")
    api = AuthenticatedClient(base_url=base, token=tenant.token, raise_on_unexpected_status=True)

    step("create an endpoint; its secret starts `sluice receive`")
    port = free_port()
    endpoint = model(create_endpoint.sync(client=api, body=CreateEndpoint(
        url=f"http://127.0.0.1:{port}/hook")), EndpointOut, "POST /v1/endpoints")
    expect(endpoint.secret and endpoint.secret.startswith("whsec_"),
           f"the secret is shown on create: {endpoint}")
    expect(endpoint.signature_scheme.value == "v1", "v1 by default")
    receiver = Receiver(args.sluice, port, endpoint.secret, log_dir)
    processes.append(receiver.process)

    step("send an event with an Idempotency-Key")
    body = CreateMessage(event_type="order.created",
                         payload={"order": 42})
    created = create_message.sync_detailed(client=api, body=body,
                                           idempotency_key="order-42-created")
    expect(created.status_code == 202, f"202 for a new message, got {created.status_code}")
    message_id = model(created.parsed, Created, "POST /v1/messages").id
    expect(message_id.startswith("msg_"), f"a message id: {message_id}")

    step("the delivery is delivered with one attempt; the receiver verified the signature")

    def delivered():
        m = model(get_message.sync(message_id, client=api), MessageOut, "GET /v1/messages/{id}")
        return m if [d.state.value for d in m.deliveries] == ["delivered"] else None

    message = eventually(delivered, "the message to be delivered")
    delivery = message.deliveries[0]
    expect(delivery.attempts == 1, f"one attempt: {delivery}")
    expect(delivery.id.startswith("dlv_") and delivery.endpoint_id == endpoint.id,
           f"a dlv_ id for this endpoint: {delivery}")
    expect(message.payload == {"order": 42}, f"the payload as sent: {message.payload}")
    lines = eventually(lambda: receiver.lines_for(message_id), "the receiver's line")
    expect(lines == [f'{message_id} signature verified: {{"order":42}}'],
           f"the receiver printed {lines}")

    step("the same key again is the original; another request under it is refused")
    again = create_message.sync_detailed(client=api, body=body, idempotency_key="order-42-created")
    expect(again.status_code == 200 and again.parsed.id == message_id and again.parsed.duplicate,
           f"a repeat returns the original: {again.status_code} {again.parsed}")
    other = CreateMessage(event_type="order.created",
                          payload={"order": 43})
    refused = create_message.sync_detailed(client=api, body=other,
                                           idempotency_key="order-42-created")
    expect(refused.status_code == 422 and isinstance(refused.parsed, Problem)
           and refused.parsed.field == "Idempotency-Key",
           f"a different request under the key is a 422 naming it: {refused.parsed}")

    step("attempts, per message and per delivery")
    attempts = model(list_message_attempts.sync(message_id, client=api), PageAttemptOut,
                     "GET /v1/messages/{id}/attempts").data
    expect(len(attempts) == 1 and attempts[0].status == 204 and attempts[0].delivery_id == delivery.id,
           f"one attempt answered 204: {attempts}")
    expect(attempts[0].id.startswith("att_") and attempts[0].duration_ms >= 0, f"{attempts[0]}")
    by_delivery = model(list_delivery_attempts.sync(delivery.id, client=api), PageAttemptOut,
                        "GET /v1/deliveries/{id}/attempts").data
    expect([a.id for a in by_delivery] == [a.id for a in attempts], "the same attempt")

    step("the endpoint list, its evidence, a change of lane and ceiling")
    listed = model(list_endpoints.sync(client=api), PageEndpointOut, "GET /v1/endpoints")
    expect([e.id for e in listed.data] == [endpoint.id], f"one endpoint listed: {listed}")
    status = model(get_endpoint_status.sync(endpoint.id, client=api), EndpointStatus,
                   "GET /v1/endpoints/{id}/status")
    expect(status.sentence and status.source == "dispatcher", f"the evidence: {status}")
    changed = model(update_endpoint.sync(endpoint.id, client=api, body=UpdateEndpoint(
        lane_size=4, latency_ceiling_ms=5000)), EndpointOut, "PATCH /v1/endpoints/{id}")
    expect((changed.lane_size, changed.latency_ceiling_ms) == (4, 5000), f"changed: {changed}")

    step("the message log, filtered")
    second = model(create_message.sync(client=api, body=CreateMessage(
        event_type="invoice.sent", payload={"invoice": 7})),
        Created, "POST /v1/messages").id
    log = model(list_messages.sync(client=api, event_type="order.*"), PageMessageItem,
                "GET /v1/messages?event_type=order.*")
    expect([m.id for m in log.data] == [message_id], f"order.* lists the order only: {log}")
    since = message.created_at + datetime.timedelta(milliseconds=1)
    log = model(list_messages.sync(client=api, since=since), PageMessageItem,
                "GET /v1/messages?since=")
    expect([m.id for m in log.data] == [second], f"since lists the later one only: {log}")

    step("resend the delivered message: a new attempt, the same webhook-id")
    resent = model(resend_delivery.sync(delivery.id, client=api), Resent,
                   "POST /v1/deliveries/{id}/resend")
    expect(resent.resent == 1, f"one resent: {resent}")
    eventually(lambda: len(receiver.lines_for(message_id)) == 2, "the resent webhook")
    detail = eventually(lambda: (lambda d: d if d.state.value == "delivered"
                                 and len(d.attempt_log) == 2 else None)(
        model(get_delivery.sync(delivery.id, client=api), DeliveryDetail,
              "GET /v1/deliveries/{id}")), "the resend to settle")
    expect(all(isinstance(a, AttemptOut) and a.status == 204 for a in detail.attempt_log),
           f"two attempts: {detail.attempt_log}")

    step("a dead letter: an endpoint whose receiver is not there yet")
    late_port = free_port()
    late = model(create_endpoint.sync(client=api, body=CreateEndpoint(
        url=f"http://127.0.0.1:{late_port}/hook", event_types=["payment.*"])),
        EndpointOut, "POST /v1/endpoints")
    dead_id = model(create_message.sync(client=api, body=CreateMessage(
        event_type="payment.failed", payload={"payment": 9})),
        Created, "POST /v1/messages").id

    def dead():
        page = model(list_endpoint_deliveries.sync(late.id, client=api, state=StateParam.DEAD),
                     PageDeliveryOut, "GET /v1/endpoints/{id}/deliveries?state=dead")
        return page.data or None

    dead_deliveries = eventually(dead, "the delivery to be dead-lettered")
    expect(dead_deliveries[0].message_id == dead_id
           and dead_deliveries[0].last_error.startswith("connection_refused"),
           f"dead after refused connections: {dead_deliveries[0]}")
    letters = model(list_dead_letters.sync(client=api), PageDeliveryOut, "GET /v1/dead-letters")
    expect([d.id for d in letters.data] == [dead_deliveries[0].id], f"one dead letter: {letters}")

    step("the receiver comes up; replay the endpoint's dead letters")
    late_receiver = Receiver(args.sluice, late_port, late.secret, log_dir)
    processes.append(late_receiver.process)
    replayed = model(replay_endpoint_dead_letters.sync(late.id, client=api), Replayed,
                     "POST /v1/endpoints/{id}/dead-letters/replay")
    expect(replayed.replayed == 1, f"one replayed: {replayed}")
    lines = eventually(lambda: late_receiver.lines_for(dead_id), "the replayed webhook")
    expect(lines == [f'{dead_id} signature verified: {{"payment":9}}'], f"printed {lines}")

    step("the metrics (admin token)")
    metrics = get_metrics.sync_detailed(client=admin)
    expect(metrics.status_code == 200 and b"webhook_deliveries_ok_total" in metrics.content,
           f"metrics carry the seed names: {metrics.status_code}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sluice", default="target/debug/sluice")
    parser.add_argument("--client", default="target/client",
                        help="the directory holding the generated sluice_client package")
    args = parser.parse_args()
    log_dir = tempfile.mkdtemp(prefix="sluice-walkthrough-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, SLUICE_ADMIN_TOKEN=ADMIN)
    serve_log = os.path.join(log_dir, "serve.log")
    sluice = subprocess.Popen(
        [args.sluice, "serve", "--listen", f"127.0.0.1:{port}",
         "--data-dir", os.path.join(log_dir, "data"), "--allow-network", "127.0.0.0/8",
         "--retry-schedule", "200ms", "--sqlite-synchronous", "normal"],
        env=env, stdout=open(serve_log, "w"), stderr=subprocess.STDOUT)
    processes = [sluice]
    try:
        eventually(lambda: _listening(port) and urllib.request.urlopen(f"{base}/healthz").status == 200,
                   "sluice to answer /healthz")
        run(args, base, processes, log_dir)
        print("walk-through passed through the generated client")
        return 0
    except Mismatch as err:
        print(f"WALK-THROUGH FAILED: {err}", file=sys.stderr)
    except Exception as err:  # the generated client refusing an answer is a failure too
        print(f"WALK-THROUGH FAILED: {type(err).__name__}: {err}", file=sys.stderr)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
    with open(serve_log) as f:
        print("-- sluice serve's log (last 40 lines)", file=sys.stderr)
        print("".join(f.readlines()[-40:]), file=sys.stderr)
    return 1


def _listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


if __name__ == "__main__":
    sys.exit(main())
