import { DeleteMessageCommand, type Message } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BATCH_CANCELLED, BatchCancels } from '../../../functions/records/cancellations.js';
import { OutcomesStore } from '../../../functions/records/store.js';
import { processBatch } from '../../../functions/worker/batch-loop.js';
import { readWorkerConfig } from '../../../functions/worker/config.js';
import type { WorkerDeps } from '../../../functions/worker/types.js';
import { createWorkerDeps } from '../../../functions/worker.js';
import type { MotoServer } from '../../../local/emulator/moto.js';
import { type CaptchaStandin, startCaptchaStandin } from '../../../local/standins/captchaai/standin.js';
import { startTargetStandin, type TargetStandin } from '../../../local/standins/target.js';
import {
  type AwsClients,
  clientsFor,
  createWorkerResources,
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

function instance(): WorkerDeps {
  const config = readWorkerConfig({
    ...res.env,
    TIME_SCALE: String(TEST_TIME_SCALE),
    LEASE_SECONDS: '60',
    COOLDOWN_MS: '0',
    TARGET_TIMEOUT_MS: '10000',
  });
  return createWorkerDeps(config, clients, { resolver: catalogResolver });
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
