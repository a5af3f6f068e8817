import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DeleteMessageCommand, type Message } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { awsClientOptions } from '../../../functions/common/aws-clients.js';
import { BATCH_CANCELLED, BatchCancels, cancelKeyOf } from '../../../functions/records/cancellations.js';
import { OutcomesStore } from '../../../functions/records/store.js';
import { processBatch } from '../../../functions/worker/batch-loop.js';
import { readWorkerConfig } from '../../../functions/worker/config.js';
import type { WorkerDeps } from '../../../functions/worker/types.js';
import { createWorkerDeps } from '../../../functions/worker.js';
import { addAwsFaults, awsRequests, clearAwsFaults } from '../../../local/emulator/fault-client.js';
import { MOTO_REGION, type MotoServer } from '../../../local/emulator/moto.js';
import { type CaptchaStandin, startCaptchaStandin } from '../../../local/standins/captchaai/standin.js';
import { startTargetStandin, type TargetStandin } from '../../../local/standins/target.js';
import {
  type AwsClients,
  clientsFor,
  createWorkerResources,
  receive,
  receiveAll,
  sendJobs,
  sqsEvent,
  startMoto,
  type WorkerResources,
} from '../../fixtures/aws.js';
import { catalogResolver } from '../../fixtures/job-catalog.js';
import { captureOutput, type LogCapture } from '../../fixtures/log-capture.js';
import { TEST_API_KEY, TEST_TIME_SCALE } from '../../fixtures/solve.js';

/**
 * A batch cancel (`threadgate cancel`, functions/records/cancellations.ts) against moto and the
 * stand-ins, counted on the wire: in.php at the CaptchaAI stand-in, page loads and POSTs at the
 * target stand-in. Solves take ~1.5 s real, longer than the worker's cancel bound at this time
 * scale (1 s), so a cancel made while a task is at CaptchaAI is seen before the POST.
 */
let moto: MotoServer;
let clients: AwsClients;
let captcha: CaptchaStandin;
let target: TargetStandin;
let logs: LogCapture;
let res: WorkerResources;
let store: OutcomesStore;
let cancels: BatchCancels;

const SOLVE_MS = 1_500 / TEST_TIME_SCALE;

beforeAll(async () => {
  logs = captureOutput();
  moto = await startMoto();
  clients = clientsFor(moto);
  captcha = await startCaptchaStandin({
    threads: 5,
    apiKey: TEST_API_KEY,
    timeScale: TEST_TIME_SCALE,
    latency: { recaptcha_v2: { minMs: SOLVE_MS, maxMs: SOLVE_MS } },
  });
  target = await startTargetStandin({ captchaUrl: captcha.url, postDelayMs: 1_500 });
  res = await createWorkerResources(moto, clients, {
    apiKey: TEST_API_KEY,
    captchaUrl: captcha.url,
    allowedHosts: '127.0.0.1',
  });
  store = new OutcomesStore({ client: clients.ddb, tableName: res.tableName });
  cancels = new BatchCancels({ client: clients.ddb, tableName: res.tableName });
}, 120_000);
afterAll(async () => {
  logs?.stop();
  await target?.close();
  await captcha?.close();
  await moto?.stop();
});

afterEach(async () => {
  await clearAwsFaults(moto.endpoint);
  captcha.setFaults({ unsolvable: 0 });
});

/** Past this environment's cancel bound at the test time scale (1 s). */
const pastTheBound = () => new Promise((resolve) => setTimeout(resolve, 1_100));

/** Every GetItem of the batch's cancel item fails at moto (a throttled table), from now on. */
async function failCancelReads(batch: string): Promise<void> {
  await addAwsFaults(moto.endpoint, [
    {
      operation: 'GetItem',
      key: { record_key: cancelKeyOf(batch) },
      error: 'ProvisionedThroughputExceededException',
      times: 0,
    },
  ]);
}

/** The messages once they are visible again after their retry delay. */
async function retried(messages: Message[]): Promise<Message[]> {
  const wanted = new Set(messages.map((m) => m.MessageId));
  const found: Message[] = [];
  const end = Date.now() + 15_000;
  while (found.length < wanted.size) {
    if (Date.now() > end) throw new Error(`${wanted.size - found.length} message(s) did not come back`);
    found.push(...(await receive(clients.sqs, res.queueUrl, 10)).filter((m) => wanted.has(m.MessageId)));
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return found;
}

/** GetItem calls of the batch's cancel item that moto failed. */
async function failedCancelReads(batch: string): Promise<number> {
  const { entries } = await awsRequests(moto.endpoint);
  return entries.filter(
    (e) => e.op.endsWith('.GetItem') && e.key?.record_key === cancelKeyOf(batch) && e.fault !== undefined,
  ).length;
}

function instance(): WorkerDeps {
  const config = readWorkerConfig({
    ...res.env,
    TIME_SCALE: String(TEST_TIME_SCALE),
    LEASE_SECONDS: '60',
    COOLDOWN_MS: '0',
    TARGET_TIMEOUT_MS: '10000',
  });
  // The table client as the worker's own (one attempt per call): a failed cancel read fails at once.
  const ddb = new DynamoDBClient({
    endpoint: moto.endpoint,
    region: MOTO_REGION,
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    ...awsClientOptions(),
  });
  return createWorkerDeps(config, { ...clients, ddb }, { resolver: catalogResolver });
}

let nextKey = 0;
const newKey = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${++nextKey}`;
const formOf = (key: string) => `${target.url}/form/${key}`;
const job = (key: string, batch?: string) =>
  JSON.stringify({
    record_key: key,
    sitekey: target.sitekey,
    pageurl: formOf(key),
    submit_url: formOf(key),
    ...(batch ? { batch_id: batch } : {}),
  });

/** One invocation with these messages; deletes what the response does not return, as Lambda does. */
async function deliver(deps: WorkerDeps, messages: Message[]) {
  const out = await processBatch(sqsEvent(messages, res.queueArn), deps);
  const failed = new Set(out.batchItemFailures.map((f) => f.itemIdentifier));
  for (const m of messages) {
    if (!failed.has(m.MessageId!)) {
      await clients.sqs.send(
        new DeleteMessageCommand({ QueueUrl: res.queueUrl, ReceiptHandle: m.ReceiptHandle }),
      );
    }
  }
  return out;
}

async function sendAndReceive(bodies: string[]): Promise<Message[]> {
  await sendJobs(clients.sqs, res.queueUrl, bodies);
  const messages = await receiveAll(clients.sqs, res.queueUrl, bodies.length);
  expect(messages).toHaveLength(bodies.length);
  return messages;
}

const inPhpFor = (key: string) =>
  captcha.events().entries.filter((e) => e.kind === 'in.php' && e.record === key).length;
const targetEventsFor = (key: string, kind: 'page' | 'post-received') =>
  target.events().entries.filter((e) => e.kind === kind && e.record === key).length;

async function until(what: string, check: () => boolean, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('batch cancel (worker against moto and the stand-ins)', () => {
  it('ends records of a cancelled batch `cancelled` with the reason, without an in.php, a page load or a POST; other batches and unbatched records are worked', async () => {
    // Prepare
    const cancelled = newKey('cancelled-batch');
    const other = newKey('other-batch');
    await cancels.cancel(cancelled, { reason: 'wrong form URL' });
    const a = [newKey('a'), newKey('a')];
    const b = newKey('b');
    const plain = newKey('plain');
    const messages = await sendAndReceive([
      job(a[0]!, cancelled),
      job(b, other),
      job(a[1]!, cancelled),
      job(plain),
    ]);
    const deps = instance();
    // Act
    for (const m of messages) await deliver(deps, [m]);
    // Assess
    for (const key of a) {
      expect(await store.get(key)).toMatchObject({
        status: 'cancelled',
        reason: `${BATCH_CANCELLED}: wrong form URL`,
        batch_id: cancelled,
        attempts: 0,
      });
      expect(inPhpFor(key)).toBe(0);
      expect(targetEventsFor(key, 'page')).toBe(0);
      expect(targetEventsFor(key, 'post-received')).toBe(0);
    }
    expect(await store.get(b)).toMatchObject({ status: 'submitted', attempts: 1 });
    expect(await store.get(plain)).toMatchObject({ status: 'submitted', attempts: 1 });
  }, 60_000);

  it('does not post a record whose batch is cancelled while its task is at CaptchaAI: the task is answered, the slot kept until then, the solve counted as wasted', async () => {
    // Prepare
    const batch = newKey('mid-solve');
    const key = newKey('mid');
    const [message] = await sendAndReceive([job(key, batch)]);
    const deps = instance();
    // Act: cancel once CaptchaAI has the task
    const working = deliver(deps, [message!]);
    await until('the in.php of the record', () => inPhpFor(key) === 1);
    await cancels.cancel(batch);
    const out = await working;
    // Assess
    expect(out.batchItemFailures).toEqual([]);
    expect(await store.get(key)).toMatchObject({ status: 'cancelled', reason: BATCH_CANCELLED, attempts: 1 });
    expect(inPhpFor(key)).toBe(1);
    // The invocation returned only after CaptchaAI ended the task: its slot was held that long.
    expect(captcha.events().entries.filter((e) => e.kind === 'task-end' && e.record === key)).toHaveLength(1);
    expect(targetEventsFor(key, 'post-received')).toBe(0);
    expect(logs.text()).toMatch(/"WastedSolves"/);
  }, 60_000);

  it('ends a record already posted when the cancel comes as it would have (submitted), and a later message of the batch `cancelled`', async () => {
    // Prepare
    const batch = newKey('posted');
    const key = newKey('posted');
    const later = newKey('later');
    const [message] = await sendAndReceive([job(key, batch)]);
    const deps = instance();
    // Act: cancel once the POST has reached the form (it answers 1.5 s later)
    const working = deliver(deps, [message!]);
    await until('the POST of the record', () => targetEventsFor(key, 'post-received') === 1, 20_000);
    await cancels.cancel(batch);
    await working;
    const [next] = await sendAndReceive([job(later, batch)]);
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // past this environment's bound
    await deliver(deps, [next!]);
    // Assess
    expect(await store.get(key)).toMatchObject({ status: 'submitted', reason: 'OK' });
    expect(await store.get(later)).toMatchObject({ status: 'cancelled', attempts: 0 });
    expect(inPhpFor(later)).toBe(0);
  }, 60_000);

  it('keeps the first cancel: a second one changes nothing and says it was already cancelled', async () => {
    const batch = newKey('twice');
    const first = await cancels.cancel(batch, { reason: 'first' });
    const second = await cancels.cancel(batch, { reason: 'second', by: 'someone' });
    expect(first.already).toBe(false);
    expect(second).toEqual({ cancel: first.cancel, already: true });
    expect(await cancels.get(batch)).toEqual(first.cancel);
    expect(await cancels.get(newKey('never'))).toBeUndefined();
  });
});

describe('a cancel that holds when its read fails or comes late in a solve (issue 43)', () => {
  it('a cancel read failing after the cancel sends no record of the batch to in.php: each is released and retried, then ends cancelled', async () => {
    // Prepare: the environment has read "not cancelled" (as for an earlier record of the batch);
    // then the cancel lands and every read of it fails at moto; the next records come past the bound.
    const batch = newKey('unread');
    const later = [newKey('u1'), newKey('u2')];
    const deps = instance();
    expect(await deps.cancels?.cancelOf(batch)).toBeUndefined();
    await cancels.cancel(batch);
    await failCancelReads(batch);
    const messages = await sendAndReceive(later.map((key) => job(key, batch)));
    await pastTheBound();
    // Act
    const out = await deliver(deps, messages);
    // Assess: the reads failed at moto; no in.php, page load or POST; each message retried with
    // its claim released (not `failed`, not `submitted`).
    expect(await failedCancelReads(batch)).toBeGreaterThan(0);
    expect(out.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(
      messages.map((m) => m.MessageId).sort(),
    );
    for (const key of later) {
      expect(inPhpFor(key)).toBe(0);
      expect(targetEventsFor(key, 'post-received')).toBe(0);
      expect(await store.get(key)).toMatchObject({ status: 'in_progress', lease_expires_at: 0, attempts: 0 });
    }
    // Act 2: the table answers again; the retried messages meet the cancel.
    await clearAwsFaults(moto.endpoint);
    await deliver(deps, await retried(messages));
    // Assess 2
    for (const key of later) {
      expect(await store.get(key)).toMatchObject({
        status: 'cancelled',
        reason: BATCH_CANCELLED,
        attempts: 0,
      });
      expect(inPhpFor(key)).toBe(0);
    }
  }, 60_000);

  it('a cancel read failing at the check before the POST: the token in hand is not posted, the claim is released', async () => {
    // Prepare
    const batch = newKey('unread-post');
    const key = newKey('up');
    const [message] = await sendAndReceive([job(key, batch)]);
    const deps = instance();
    // Act: cancel while CaptchaAI has the task (solves take 1.5 s, past the 1 s bound); every
    // read of the cancel fails from then on.
    const working = deliver(deps, [message!]);
    await until('the in.php of the record', () => inPhpFor(key) === 1);
    await cancels.cancel(batch);
    await failCancelReads(batch);
    const out = await working;
    // Assess: one task, answered; no POST; the message retried, the claim released with its in.php counted.
    expect(await failedCancelReads(batch)).toBeGreaterThan(0);
    expect(out.batchItemFailures).toEqual([{ itemIdentifier: message!.MessageId }]);
    expect(inPhpFor(key)).toBe(1);
    expect(targetEventsFor(key, 'post-received')).toBe(0);
    expect(await store.get(key)).toMatchObject({ status: 'in_progress', lease_expires_at: 0, attempts: 1 });
    // Act 2: the table answers again; the retried message meets the cancel.
    await clearAwsFaults(moto.endpoint);
    await deliver(deps, await retried([message!]));
    // Assess 2: no second task, no POST; cancelled with the one in.php counted.
    expect(await store.get(key)).toMatchObject({ status: 'cancelled', reason: BATCH_CANCELLED, attempts: 1 });
    expect(inPhpFor(key)).toBe(1);
    expect(targetEventsFor(key, 'post-received')).toBe(0);
  }, 60_000);

  it('an UNSOLVABLE task of a batch cancelled while it was at CaptchaAI is not resubmitted', async () => {
    // Prepare: the stand-in ends the record's task UNSOLVABLE after its 1.5 s latency.
    const batch = newKey('unsolvable');
    const key = newKey('uns');
    const [message] = await sendAndReceive([job(key, batch)]);
    const deps = instance();
    captcha.setFaults({ unsolvable: 1 });
    // Act: cancel once CaptchaAI has the task.
    const working = deliver(deps, [message!]);
    await until('the in.php of the record', () => inPhpFor(key) === 1);
    captcha.setFaults({ unsolvable: 0 });
    await cancels.cancel(batch);
    const out = await working;
    // Assess: the one task ended UNSOLVABLE; no second in.php, no POST; the record ends cancelled.
    expect(out.batchItemFailures).toEqual([]);
    expect(captcha.events().entries.filter((e) => e.kind === 'task-end' && e.record === key)).toHaveLength(1);
    expect(inPhpFor(key)).toBe(1);
    expect(targetEventsFor(key, 'post-received')).toBe(0);
    expect(await store.get(key)).toMatchObject({ status: 'cancelled', reason: BATCH_CANCELLED, attempts: 1 });
  }, 60_000);

  it("the cancel follows the row's batch, not the message's: a record resent under another batch is held by its first batch's cancel only", async () => {
    // Prepare: two records whose rows an earlier claim left under batch A (lease expired), each
    // sent again under batch B. A cancelled for one pair, B for the other.
    const [a1, b1, a2, b2] = [newKey('rowA'), newKey('msgB'), newKey('rowA'), newKey('msgB')];
    const [heldKey, freeKey] = [newKey('held'), newKey('free')];
    const earlier = new OutcomesStore({
      client: clients.ddb,
      tableName: res.tableName,
      now: () => Date.now() - 61_000,
    });
    for (const [key, batch] of [
      [heldKey, a1],
      [freeKey, a2],
    ] as const) {
      await earlier.claim(key, {
        owner: 'earlier',
        leaseMs: 60_000,
        captchaType: 'recaptcha_v2',
        batchId: batch,
      });
    }
    await cancels.cancel(a1);
    await cancels.cancel(b2);
    const messages = await sendAndReceive([job(heldKey, b1), job(freeKey, b2)]);
    // Act
    await deliver(instance(), messages);
    // Assess: the record of the cancelled row batch ends cancelled without an in.php; the one
    // whose message's batch (not its row's) is cancelled is worked and posted once.
    expect(await store.get(heldKey)).toMatchObject({ status: 'cancelled', batch_id: a1, attempts: 0 });
    expect(inPhpFor(heldKey)).toBe(0);
    expect(await store.get(freeKey)).toMatchObject({ status: 'submitted', batch_id: a2, attempts: 1 });
    expect(targetEventsFor(freeKey, 'post-received')).toBe(1);
  }, 60_000);
});
