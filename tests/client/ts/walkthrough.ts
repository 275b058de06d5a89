/**
 * The README's walk-through, through a TypeScript client generated from sluice's own OpenAPI
 * document (openapi-typescript's types, openapi-fetch's typed fetch), against the real `sluice`
 * binary and the real receiver the README uses (`sluice receive`, which checks each signature).
 *
 * The same steps as tests/client/walkthrough.py: a tenant (admin token), an endpoint (its secret
 * starts the receiver), a message with an Idempotency-Key (its repeat is the original, a different
 * request under the key is refused), the delivery state and its attempts, the evidence, a change
 * of lane and ceiling, the message log's filters, a resend of the delivered message (same
 * webhook-id), a dead letter against a receiver that is not there yet and its replay once it is,
 * and the metrics. Every request and answer is typed by the generated `paths` (tsc --strict
 * checks this file against them), and any status the document does not list for the operation
 * fails the run, as the Python client's raise_on_unexpected_status does.
 *
 * Run by .ci/run after generating the types; by hand, from the repository's root:
 *     npm ci --prefix tests/client/ts
 *     tests/client/ts/node_modules/.bin/openapi-typescript openapi.json \
 *         -o tests/client/ts/generated/sluice.d.ts
 *     tests/client/ts/node_modules/.bin/tsc -p tests/client/ts
 *     node tests/client/ts/dist/walkthrough.js --sluice target/debug/sluice --openapi openapi.json
 */

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { paths } from "./generated/sluice.js";

const ADMIN = "sk_admin_walkthrough_0123456789";

/** What the walk-through found differs from what the README says. */
class Mismatch extends Error {}

function step(text: string): void {
  console.log(`== ${text}`);
}

function expect(condition: unknown, what: string): asserts condition {
  if (!condition) throw new Mismatch(what);
}

const show = (value: unknown): string => JSON.stringify(value);

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => { socket.destroy(); resolve(true); });
    socket.once("error", () => resolve(false));
  });
}

type Falsy = undefined | null | false | 0 | "";

/** Calls `check` until it returns something truthy (as the Python walk-through's `eventually`). */
async function eventually<T>(check: () => Promise<T | Falsy> | T | Falsy, what: string,
                             timeoutMs = 30_000, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const result = await check();
    if (result) return result;
    if (Date.now() > deadline) throw new Mismatch(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** The documented success answer of a call, not a problem or nothing. */
function ok<D>(result: { data?: D; error?: unknown; response: Response }, what: string): D {
  expect(result.error === undefined && result.data !== undefined,
         `${what}: expected the documented success, got ${result.response.status} ${show(result.error)}`);
  return result.data;
}

type Responses = Record<string, Record<string, { responses?: Record<string, unknown> }>>;

/**
 * A middleware that fails any answer whose status the document does not list for the operation
 * (`4XX` covers 400–499): the generated types only describe what the document lists.
 */
function documentedStatusesOnly(document: { paths: Responses }): Middleware {
  return {
    onResponse({ request, response, schemaPath }) {
      const operation = document.paths[schemaPath]?.[request.method.toLowerCase()];
      const listed = Object.keys(operation?.responses ?? {});
      const status = String(response.status);
      if (!listed.includes(status) && !listed.includes(`${status[0]}XX`)) {
        throw new Error(`${request.method} ${schemaPath} answered ${status}, which the document `
                        + `does not list (${listed.join(", ")})`);
      }
      return undefined;
    },
  };
}

/** `sluice receive` on a port, its output kept in a file. */
class Receiver {
  readonly log: string;
  readonly process: ChildProcess;

  private constructor(log: string, process: ChildProcess) {
    this.log = log;
    this.process = process;
  }

  static async start(sluice: string, port: number, secret: string, logDir: string,
                     processes: ChildProcess[]): Promise<Receiver> {
    const log = join(logDir, `receive-${port}.log`);
    const out = openSync(log, "w");
    const process = spawn(sluice, ["receive", "--listen", `127.0.0.1:${port}`, "--secret", secret],
                          { stdio: ["ignore", out, out] });
    processes.push(process);
    const receiver = new Receiver(log, process);
    await eventually(() => receiver.text().includes("receiving webhooks"), `the receiver on ${port}`);
    return receiver;
  }

  text(): string {
    return readFileSync(this.log, "utf8");
  }

  linesFor(messageId: string): string[] {
    return this.text().split("\n").filter((line) => line.startsWith(messageId));
  }
}

type Api = Client<paths>;

async function run(sluice: string, base: string, openapi: string, processes: ChildProcess[],
                   logDir: string): Promise<void> {
  const document = JSON.parse(readFileSync(openapi, "utf8")) as { paths: Responses };
  const client = (token: string): Api => {
    const api = createClient<paths>({ baseUrl: base, headers: { Authorization: `Bearer ${token}` } });
    api.use(documentedStatusesOnly(document));
    return api;
  };
  const admin = client(ADMIN);

  step("create a tenant (admin token)");
  const tenant = ok(await admin.POST("/v1/tenants", { body: { name: "acme" } }), "POST /v1/tenants");
  expect(tenant.id.startsWith("ten_") && tenant.token, `a tenant id and token: ${show(tenant)}`);
  expect(!Number.isNaN(Date.parse(tenant.created_at)), `created_at is a date-time: ${tenant.created_at}`);
  const api = client(tenant.token);

  step("create an endpoint; its secret starts `sluice receive`");
  const port = await freePort();
  const endpoint = ok(await api.POST("/v1/endpoints", { body: { url: `http://127.0.0.1:${port}/hook` } }),
                      "POST /v1/endpoints");
  const secret = endpoint.secret;
  expect(secret && secret.startsWith("whsec_"), `the secret is shown on create: ${show(endpoint)}`);
  expect(endpoint.signature_scheme === "v1", "v1 by default");
  const receiver = await Receiver.start(sluice, port, secret, logDir, processes);

  step("send an event with an Idempotency-Key");
  const body = { event_type: "order.created", payload: { order: 42 } };
  const key = { header: { "Idempotency-Key": "order-42-created" } };
  const created = await api.POST("/v1/messages", { body, params: key });
  expect(created.response.status === 202, `202 for a new message, got ${created.response.status}`);
  const messageId = ok(created, "POST /v1/messages").id;
  expect(messageId.startsWith("msg_"), `a message id: ${messageId}`);

  step("the delivery is delivered with one attempt; the receiver verified the signature");
  const message = await eventually(async () => {
    const m = ok(await api.GET("/v1/messages/{id}", { params: { path: { id: messageId } } }),
                 "GET /v1/messages/{id}");
    return show(m.deliveries.map((d) => d.state)) === show(["delivered"]) ? m : undefined;
  }, "the message to be delivered");
  const delivery = message.deliveries[0];
  expect(delivery !== undefined && delivery.attempts === 1, `one attempt: ${show(delivery)}`);
  expect(delivery.id.startsWith("dlv_") && delivery.endpoint_id === endpoint.id,
         `a dlv_ id for this endpoint: ${show(delivery)}`);
  expect(show(message.payload) === show({ order: 42 }), `the payload as sent: ${show(message.payload)}`);
  const nonEmpty = (lines: string[]) => (lines.length ? lines : undefined);
  let lines = await eventually(() => nonEmpty(receiver.linesFor(messageId)), "the receiver's line");
  expect(show(lines) === show([`${messageId} signature verified: {"order":42}`]),
         `the receiver printed ${show(lines)}`);

  step("the same key again is the original; another request under it is refused");
  const again = await api.POST("/v1/messages", { body, params: key });
  expect(again.response.status === 200 && again.data?.id === messageId && again.data.duplicate,
         `a repeat returns the original: ${again.response.status} ${show(again.data)}`);
  const refused = await api.POST("/v1/messages", {
    body: { event_type: "order.created", payload: { order: 43 } }, params: key });
  expect(refused.response.status === 422 && refused.error?.field === "Idempotency-Key",
         `a different request under the key is a 422 naming it: ${show(refused.error)}`);

  step("attempts, per message and per delivery");
  const attempts = ok(await api.GET("/v1/messages/{id}/attempts", { params: { path: { id: messageId } } }),
                      "GET /v1/messages/{id}/attempts").data;
  const first = attempts[0];
  expect(attempts.length === 1 && first?.status === 204 && first.delivery_id === delivery.id,
         `one attempt answered 204: ${show(attempts)}`);
  expect(first.id.startsWith("att_") && first.duration_ms >= 0, show(first));
  const byDelivery = ok(await api.GET("/v1/deliveries/{id}/attempts", { params: { path: { id: delivery.id } } }),
                        "GET /v1/deliveries/{id}/attempts").data;
  expect(show(byDelivery.map((a) => a.id)) === show(attempts.map((a) => a.id)), "the same attempt");

  step("the endpoint list, its evidence, a change of lane and ceiling");
  const listed = ok(await api.GET("/v1/endpoints"), "GET /v1/endpoints");
  expect(show(listed.data.map((e) => e.id)) === show([endpoint.id]), `one endpoint listed: ${show(listed)}`);
  const status = ok(await api.GET("/v1/endpoints/{id}/status", { params: { path: { id: endpoint.id } } }),
                    "GET /v1/endpoints/{id}/status");
  expect(status.sentence && status.source === "dispatcher", `the evidence: ${show(status)}`);
  const changed = ok(await api.PATCH("/v1/endpoints/{id}", {
    params: { path: { id: endpoint.id } }, body: { lane_size: 4, latency_ceiling_ms: 5000 } }),
    "PATCH /v1/endpoints/{id}");
  expect(changed.lane_size === 4 && changed.latency_ceiling_ms === 5000, `changed: ${show(changed)}`);

  step("the message log, filtered");
  const second = ok(await api.POST("/v1/messages", {
    body: { event_type: "invoice.sent", payload: { invoice: 7 } } }), "POST /v1/messages").id;
  let log = ok(await api.GET("/v1/messages", { params: { query: { event_type: "order.*" } } }),
               "GET /v1/messages?event_type=order.*");
  expect(show(log.data.map((m) => m.id)) === show([messageId]), `order.* lists the order only: ${show(log)}`);
  const since = new Date(Date.parse(message.created_at) + 1).toISOString();
  log = ok(await api.GET("/v1/messages", { params: { query: { since } } }), "GET /v1/messages?since=");
  expect(show(log.data.map((m) => m.id)) === show([second]), `since lists the later one only: ${show(log)}`);

  step("resend the delivered message: a new attempt, the same webhook-id");
  const resent = ok(await api.POST("/v1/deliveries/{id}/resend", { params: { path: { id: delivery.id } } }),
                    "POST /v1/deliveries/{id}/resend");
  expect(resent.resent === 1, `one resent: ${show(resent)}`);
  await eventually(() => receiver.linesFor(messageId).length === 2, "the resent webhook");
  const detail = await eventually(async () => {
    const d = ok(await api.GET("/v1/deliveries/{id}", { params: { path: { id: delivery.id } } }),
                 "GET /v1/deliveries/{id}");
    return d.state === "delivered" && d.attempt_log.length === 2 ? d : undefined;
  }, "the resend to settle");
  expect(detail.attempt_log.every((a) => a.status === 204), `two attempts: ${show(detail.attempt_log)}`);

  step("a dead letter: an endpoint whose receiver is not there yet");
  const latePort = await freePort();
  const late = ok(await api.POST("/v1/endpoints", {
    body: { url: `http://127.0.0.1:${latePort}/hook`, event_types: ["payment.*"] } }), "POST /v1/endpoints");
  const deadId = ok(await api.POST("/v1/messages", {
    body: { event_type: "payment.failed", payload: { payment: 9 } } }), "POST /v1/messages").id;
  const deadDeliveries = await eventually(async () => {
    const page = ok(await api.GET("/v1/endpoints/{id}/deliveries", {
      params: { path: { id: late.id }, query: { state: "dead" } } }),
      "GET /v1/endpoints/{id}/deliveries?state=dead");
    return page.data.length ? page.data : undefined;
  }, "the delivery to be dead-lettered");
  const deadDelivery = deadDeliveries[0];
  expect(deadDelivery?.message_id === deadId && deadDelivery.last_error?.startsWith("connection_refused"),
         `dead after refused connections: ${show(deadDelivery)}`);
  const letters = ok(await api.GET("/v1/dead-letters"), "GET /v1/dead-letters");
  expect(show(letters.data.map((d) => d.id)) === show([deadDelivery.id]), `one dead letter: ${show(letters)}`);

  step("the receiver comes up; replay the endpoint's dead letters");
  expect(late.secret, `the secret is shown on create: ${show(late)}`);
  const lateReceiver = await Receiver.start(sluice, latePort, late.secret, logDir, processes);
  const replayed = ok(await api.POST("/v1/endpoints/{id}/dead-letters/replay", {
    params: { path: { id: late.id } } }), "POST /v1/endpoints/{id}/dead-letters/replay");
  expect(replayed.replayed === 1, `one replayed: ${show(replayed)}`);
  lines = await eventually(() => nonEmpty(lateReceiver.linesFor(deadId)), "the replayed webhook");
  expect(show(lines) === show([`${deadId} signature verified: {"payment":9}`]), `printed ${show(lines)}`);

  step("the metrics (admin token)");
  const metrics = await admin.GET("/metrics", { parseAs: "text" });
  expect(metrics.response.status === 200 && metrics.data?.includes("webhook_deliveries_ok_total"),
         `metrics carry the seed names: ${metrics.response.status}`);
}

function stop(processes: ChildProcess[]): Promise<void> {
  return Promise.all(processes.map((process) => new Promise<void>((resolve) => {
    if (process.exitCode !== null || process.signalCode !== null) return resolve();
    const kill = setTimeout(() => process.kill("SIGKILL"), 15_000);
    process.once("exit", () => { clearTimeout(kill); resolve(); });
    process.kill("SIGTERM");
  }))).then(() => undefined);
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      sluice: { type: "string", default: "target/debug/sluice" },
      openapi: { type: "string", default: "openapi.json" },
    },
  });
  const sluice = values.sluice;
  const logDir = mkdtempSync(join(tmpdir(), "sluice-walkthrough-ts-"));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const serveLog = join(logDir, "serve.log");
  const out = openSync(serveLog, "w");
  const serve = spawn(sluice, [
    "serve", "--listen", `127.0.0.1:${port}`, "--data-dir", join(logDir, "data"),
    "--allow-network", "127.0.0.0/8", "--retry-schedule", "200ms", "--sqlite-synchronous", "normal",
  ], { env: { ...process.env, SLUICE_ADMIN_TOKEN: ADMIN }, stdio: ["ignore", out, out] });
  const processes: ChildProcess[] = [serve];
  try {
    await eventually(async () => (await listening(port)) && (await fetch(`${base}/healthz`)).status === 200,
                     "sluice to answer /healthz");
    await run(sluice, base, values.openapi, processes, logDir);
    console.log("walk-through passed through the generated TypeScript client");
    return 0;
  } catch (err) {
    const what = err instanceof Mismatch ? err.message
      : err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    console.error(`WALK-THROUGH FAILED: ${what}`);
  } finally {
    await stop(processes);
  }
  console.error("-- sluice serve's log (last 40 lines)");
  console.error(readFileSync(serveLog, "utf8").split("\n").slice(-41).join("\n"));
  return 1;
}

process.exitCode = await main();
