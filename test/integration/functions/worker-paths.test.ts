import { DynamoDBClient, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { PutSecretValueCommand } from '@aws-sdk/client-secrets-manager';
import { DeleteMessageCommand, type Message, SQSClient } from '@aws-sdk/client-sqs';
import type { SQSBatchResponse } from 'aws-lambda';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { awsClientOptions } from '../../../functions/common/aws-clients.js';
import { OutcomesStore, WRITE_TRIES } from '../../../functions/records/store.js';
import { processBatch } from '../../../functions/worker/batch-loop.js';
import { readWorkerConfig } from '../../../functions/worker/config.js';
import type { ProcessOptions, WorkerDeps } from '../../../functions/worker/types.js';
import { createWorkerDeps } from '../../../functions/worker.js';
import { addAwsFaults, awsFaults, clearAwsFaults } from '../../../local/emulator/fault-client.js';
import { MOTO_REGION, type MotoServer } from '../../../local/emulator/moto.js';
import type { CaptchaStandin } from '../../../local/standins/captchaai/standin.js';
import { startTargetStandin, type TargetStandin } from '../../../local/standins/target.js';
import {
  type AwsClients,
  clientsFor,
  createPkSkTable,
  createWorkerResources,
  onStateItem,
  receive,
  receiveAll,
  sendJobs,
  sqsEvent,
  startMoto,
  THROTTLED,
  type WorkerResources,
} from '../../fixtures/aws.js';
import { catalogResolver } from '../../fixtures/job-catalog.js';
import { captureOutput, type LogCapture } from '../../fixtures/log-capture.js';
import { startFastCaptchaStandin, TEST_API_KEY, TEST_TIME_SCALE } from '../../fixtures/solve.js';

/**
 * The seven paths of issue 29 that broke a promise of docs/design.md, each with its fault
 * injected on the wire (moto's fault rules, the CaptchaAI stand-in, the table) and its effect
 * counted where it lands (in.php and res.php at the stand-in, rows in moto, the queue).
 */

let moto: MotoServer;
let clients: AwsClients;
let captcha: CaptchaStandin;
let target: TargetStandin;
let logs: LogCapture;

beforeAll(async () => {
  logs = captureOutput();
  moto = await startMoto();
  clients = clientsFor(moto);
  captcha = await startFastCaptchaStandin(10);
  target = await startTargetStandin({ captchaUrl: captcha.url });
});
afterAll(async () => {
  logs?.stop();
  await target?.close();
  await captcha?.close();
  await moto?.stop();
});
afterEach(async () => {
  await clearAwsFaults(moto.endpoint);
  captcha.setFaults({ neverFinish: 0, unsolvable: 0 });
  captcha.setApiKey(TEST_API_KEY);
});

interface Setup {
  res: WorkerResources;
  /** A fresh set of dependencies = one more execution environment. */
  instance(overrides?: Partial<WorkerDeps>): WorkerDeps;
  store: OutcomesStore;
}

async function setup(env: Record<string, string> = {}): Promise<Setup> {
  const res = await createWorkerResources(moto, clients, {
    apiKey: TEST_API_KEY,
    captchaUrl: captcha.url,
    allowedHosts: '127.0.0.1',
  });
  const config = readWorkerConfig({
    ...res.env,
    TIME_SCALE: String(TEST_TIME_SCALE),
    LEASE_SECONDS: '60',
    COOLDOWN_MS: '0',
    TARGET_TIMEOUT_MS: '5000',
    ...env,
  });
  return {
    res,
    instance: (overrides = {}) =>
      createWorkerDeps(config, clients, { resolver: catalogResolver, ...overrides }),
    store: new OutcomesStore({ client: clients.ddb, tableName: res.tableName }),
  };
}

let nextKey = 0;
const newKey = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${++nextKey}`;
const pageurlOf = (key: string) => `${target.url}/form/${key}`;
const job = (key: string) =>
  JSON.stringify({
    record_key: key,
    sitekey: target.sitekey,
    pageurl: pageurlOf(key),
    submit_url: pageurlOf(key),
  });

/** in.php requests for the record at the stand-in, when each arrived (epoch ms). */
const inPhpTimes = (key: string) => captcha.submitTimes(pageurlOf(key));
/** Tasks the stand-in created for the record. */
const tasksOf = (key: string) =>
  captcha
    .events()
    .entries.flatMap((e) =>
      e.kind === 'in.php' && e.record === key && e.taskId !== undefined ? [e.taskId] : [],
    );
/** res.php `get` calls per task of the record at the stand-in. */
function resPhpPerTask(key: string): number[] {
  const counts = new Map<string, number>();
  for (const e of captcha.events().entries) {
    if (e.kind === 'res.php' && e.record === key) {
      counts.set(e.taskId, (counts.get(e.taskId) ?? 0) + 1);
    }
  }
  return [...counts.values()];
}

/** One invocation with these messages as its event (the Lambda poller's delete left to the caller). */
function invoke(s: Setup, deps: WorkerDeps, messages: Message[], options: ProcessOptions = {}) {
  return processBatch(sqsEvent(messages, s.res.queueArn), deps, options);
}

async function waitFor(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const chainOpen = (): ProcessOptions => ({ chainUntil: performance.now() + 60_000 });

describe('the seven paths, on the wire', () => {
  it('1. holds the cool-down after a POLL_TIMEOUT whose final write fails: the slot’s next in.php comes after the abandoned task’s deadline + cool-down', async () => {
    // Prepare: the first record's task never finishes (deadline 120 s × 0.05 = 6 s); every
    // `failed` write of its row fails at moto; the chain's next record waits in the queue.
    const cooldownMs = 4_000;
    const deadlineMs = 120_000 * TEST_TIME_SCALE;
    const s = await setup({ COOLDOWN_MS: String(cooldownMs) });
    const [a, b] = [newKey('cool-a'), newKey('cool-b')];
    await sendJobs(clients.sqs, s.res.queueUrl, [job(a)]);
    const event = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    await sendJobs(clients.sqs, s.res.queueUrl, [job(b)]);
    await addAwsFaults(moto.endpoint, [
      { operation: 'UpdateItem', key: { record_key: a }, contains: ['{"S":"failed"}'], times: 0 },
    ]);
    captcha.setFaults({ neverFinish: 1 });
    // Act
    const run = invoke(s, s.instance(), event, chainOpen());
    await waitFor(() => inPhpTimes(a).length === 1, 'the first in.php');
    captcha.setFaults({ neverFinish: 0 });
    await run;
    // Assess: the write was refused at moto, and the next record's in.php waited the cool-down.
    expect((await s.store.get(a))?.status).toBe('in_progress');
    const [aAt] = inPhpTimes(a);
    const [bAt] = inPhpTimes(b);
    expect(bAt).toBeDefined();
    expect(bAt! - aAt!).toBeGreaterThanOrEqual(deadlineMs + cooldownMs);
  }, 40_000);

  it('2. ends the chain when the pipeline state cannot be read past the last good read’s window: no further message is taken', async () => {
    // Prepare: every read of the state item fails at moto after the first (the event's record reads it), and
    // the environment's clock moves a minute per reading, so the last good read is always older than
    // the window in which it may answer for a failed one (functions/pipeline/state-view.ts).
    const s = await setup();
    const [a, b] = [newKey('state-a'), newKey('state-b')];
    await sendJobs(clients.sqs, s.res.queueUrl, [job(a)]);
    const event = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    await sendJobs(clients.sqs, s.res.queueUrl, [job(b)]);
    let minutes = 0;
    const deps = s.instance({ monotonic: () => ++minutes * 60_000 });
    await addAwsFaults(moto.endpoint, [
      { ...onStateItem('GetItem'), error: THROTTLED, status: 400, nth: 2, times: 0 },
    ]);
    // Act
    const out = await invoke(s, deps, event, chainOpen());
    // Assess: the event's record was worked; the queue's was never received nor submitted.
    expect(out.batchItemFailures).toEqual([]);
    expect((await s.store.get(a))?.status).toBe('submitted');
    expect(inPhpTimes(b)).toEqual([]);
    await clearAwsFaults(moto.endpoint);
    const left = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    expect(left.map((m) => m.Attributes?.ApproximateReceiveCount)).toEqual(['1']);
  }, 30_000);

  it('2. a state read throttled within the last good read’s window does not end the chain: the next message is taken and worked', async () => {
    // Prepare: the same faults, with a clock that stands still, so the last good read stays young.
    const s = await setup();
    const [a, b] = [newKey('state-young-a'), newKey('state-young-b')];
    await sendJobs(clients.sqs, s.res.queueUrl, [job(a)]);
    const event = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    await sendJobs(clients.sqs, s.res.queueUrl, [job(b)]);
    const deps = s.instance({ monotonic: () => 0 });
    await addAwsFaults(moto.endpoint, [
      { ...onStateItem('GetItem'), error: THROTTLED, status: 400, nth: 2, times: 0 },
    ]);
    // Act
    const out = await invoke(s, deps, event, chainOpen());
    // Assess: both records were submitted, one task each; the queue is empty.
    expect(out.batchItemFailures).toEqual([]);
    expect((await s.store.get(a))?.status).toBe('submitted');
    expect((await s.store.get(b))?.status).toBe('submitted');
    expect([inPhpTimes(a).length, inPhpTimes(b).length]).toEqual([1, 1]);
    await clearAwsFaults(moto.endpoint);
    expect(await receive(clients.sqs, s.res.queueUrl, 10)).toEqual([]);
  }, 30_000);

  it('3. a failed pause ends the chain; later records of the environment send no in.php with the refused key; the last receive ends stopped in the DLQ, not in_progress', async () => {
    // Prepare: the key is refused at the stand-in; every state write fails at moto, so no pause lands.
    const s = await setup({ TRANSIENT_RECEIVE_LIMIT: '2', RETRY_DELAY_SECONDS: '0' });
    const [a, b, c] = [newKey('pause-a'), newKey('pause-b'), newKey('pause-c')];
    await sendJobs(clients.sqs, s.res.queueUrl, [job(a)]);
    const event = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    await sendJobs(clients.sqs, s.res.queueUrl, [job(b), job(c)]);
    await addAwsFaults(moto.endpoint, [{ ...onStateItem('UpdateItem'), times: 0 }]);
    captcha.setKeyRevoked(true);
    const deps = s.instance({ sleep: async () => undefined });
    try {
      // Act: the invocation with the chain open, then the environment's next invocations, as the
      // mapping would deliver them (a message not reported failed is deleted), until none is left.
      const first = await invoke(s, deps, event, chainOpen());
      const seen = await receiveAll(clients.sqs, s.res.queueUrl, 3, 0);
      let invocations = 0;
      for (
        let batch = seen;
        batch.length > 0 && invocations < 12;
        batch = await receive(clients.sqs, s.res.queueUrl, 10)
      ) {
        for (const m of batch) {
          invocations++;
          const out = await invoke(s, deps, [m]);
          if (out.batchItemFailures.length === 0) {
            await clients.sqs.send(
              new DeleteMessageCommand({ QueueUrl: s.res.queueUrl, ReceiptHandle: m.ReceiptHandle }),
            );
          }
        }
      }
      // Assess: the chain took nothing after the failed pause (the others' first receive was the test's).
      expect(first.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([event[0]!.MessageId]);
      expect(
        Object.fromEntries(
          seen.map((m) => [JSON.parse(m.Body!).record_key, m.Attributes?.ApproximateReceiveCount]),
        ),
      ).toEqual({ [a]: '2', [b]: '1', [c]: '1' });
      // One in.php in all: later records met the remembered refusal, not CaptchaAI.
      expect(inPhpTimes(a)).toHaveLength(1);
      expect([...inPhpTimes(b), ...inPhpTimes(c)]).toEqual([]);
      // Every record ended on its last receive: row `stopped`, DLQ copy with its reason; none left in_progress.
      for (const key of [a, b, c]) {
        expect(await s.store.get(key)).toMatchObject({
          status: 'stopped',
          reason: 'ERROR_KEY_DOES_NOT_EXIST',
        });
      }
      const dlq = await receiveAll(clients.sqs, s.res.dlqUrl, 3);
      expect(dlq.map((m) => m.MessageAttributes?.error_code?.StringValue)).toEqual(
        Array(3).fill('ERROR_KEY_DOES_NOT_EXIST'),
      );
      expect(await receive(clients.sqs, s.res.queueUrl, 10, 0)).toEqual([]);
    } finally {
      captcha.setKeyRevoked(false);
    }
  }, 40_000);

  it('3. a failed pause after the task was created keeps the claim and its task marker: a redelivery submits no fresh task', async () => {
    // Prepare: the task is created, then res.php refuses the key; the pause fails at moto.
    const s = await setup();
    const key = newKey('pause-task');
    await sendJobs(clients.sqs, s.res.queueUrl, [job(key)]);
    const event = await receiveAll(clients.sqs, s.res.queueUrl, 1, 0);
    await addAwsFaults(moto.endpoint, [{ ...onStateItem('UpdateItem'), times: 0 }]);
    captcha.inject('res.php', [{ body: 'ERROR_KEY_DOES_NOT_EXIST' }]);
    // Act: the first environment meets the stop at res.php; a second takes the redelivery.
    const first = await invoke(s, s.instance({ sleep: async () => undefined }), event);
    const row = await s.store.get(key);
    const redelivered = await receiveAll(clients.sqs, s.res.queueUrl, 1, 0);
    await invoke(s, s.instance(), redelivered);
    // Assess
    expect(first.batchItemFailures).toHaveLength(1);
    expect(row).toMatchObject({ status: 'in_progress', task_id: tasksOf(key)[0] });
    expect(tasksOf(key)).toHaveLength(1);
  }, 30_000);

  it('4. one budget per record across a key rotation: UNSOLVABLE, a stop on the resubmission, the new key: no third task', async () => {
    // Prepare: the old key's first task answers UNSOLVABLE and its resubmission is refused
    // stop-class (canned answers at the stand-in); the key is rotated in the secret and at the
    // stand-in meanwhile; every task of the new key is unsolvable too.
    const s = await setup();
    const key = newKey('rotate');
    await sendJobs(clients.sqs, s.res.queueUrl, [job(key)]);
    const event = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    captcha.inject('in.php', [{ body: 'OK|900001' }, { body: 'ERROR_KEY_DOES_NOT_EXIST' }]);
    captcha.inject('res.php', [{ body: 'ERROR_CAPTCHA_UNSOLVABLE' }]);
    captcha.setFaults({ unsolvable: 1 });
    const rotated = 'tg-rotated-key-00000000000000000';
    // Act
    const run = invoke(s, s.instance(), event);
    await waitFor(() => inPhpTimes(key).length === 1, 'the first in.php');
    await clients.secrets.send(
      new PutSecretValueCommand({
        SecretId: s.res.secretName,
        SecretString: JSON.stringify({ apiKey: rotated }),
      }),
    );
    captcha.setApiKey(rotated);
    await run;
    // Assess: the canned first task and ONE task with the new key (the resubmission's place).
    expect(inPhpTimes(key).length).toBeGreaterThanOrEqual(3);
    expect(tasksOf(key)).toHaveLength(1);
    expect(await s.store.get(key)).toMatchObject({ status: 'failed', reason: 'ERROR_CAPTCHA_UNSOLVABLE' });
  }, 30_000);

  it('5. a poisoned SolveTimes item does not drive res.php past the budget: tasks answering at 20 s stay within 12 calls', async () => {
    // Prepare: the solve-times table with one crafted item (200 answers at 0–0.4 s, 56 spread to
    // 60 s, written just now); every task answers at 20 s (× 0.05).
    const table = await createPkSkTable(clients.ddb, `solve-times-${Date.now().toString(36)}`);
    const poison = [
      ...Array.from({ length: 200 }, (_, i) => `${i * 2}-${i * 2}`),
      ...Array.from({ length: 56 }, (_, i) => `${1_000 * (i + 4)}-${1_000 * (i + 5)}`),
    ].join(',');
    await clients.ddb.send(
      new PutItemCommand({
        TableName: table,
        Item: {
          pk: { S: 'solve-times' },
          sk: { S: 'recaptcha_v2#3' },
          environment: { S: 'crafted' },
          intervals: { S: poison },
          updated_at: { N: String(Date.now()) },
        },
      }),
    );
    const s = await setup({ SOLVE_TIMES_TABLE: table });
    const keys = [newKey('poison'), newKey('poison'), newKey('poison')];
    await sendJobs(clients.sqs, s.res.queueUrl, keys.map(job));
    const before = captcha.latency();
    captcha.setLatency({ recaptcha_v2: { minMs: 20_000, maxMs: 20_000 } });
    try {
      // Act: one environment works the three records one after another.
      const deps = s.instance();
      for (let i = 0; i < keys.length; i++) {
        await invoke(s, deps, await receiveAll(clients.sqs, s.res.queueUrl, 1));
      }
    } finally {
      captcha.setLatency(before);
    }
    // Assess
    const perTask = keys.flatMap(resPhpPerTask);
    expect(perTask).toHaveLength(3);
    expect(Math.max(...perTask)).toBeLessThanOrEqual(12);
  }, 40_000);

  it('6. an abort during the chain’s ReceiveMessage puts no id outside the event into batchItemFailures, and the message is visible again', async () => {
    // Prepare: the invocation ends (its signal aborts) while the chain's ReceiveMessage is on the wire.
    const s = await setup();
    const [a, b] = [newKey('abort-a'), newKey('abort-b')];
    await sendJobs(clients.sqs, s.res.queueUrl, [job(a)]);
    const event = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    await sendJobs(clients.sqs, s.res.queueUrl, [job(b)]);
    const ending = new AbortController();
    const sqs = new SQSClient({
      endpoint: moto.endpoint,
      region: MOTO_REGION,
      credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    });
    sqs.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'ReceiveMessageCommand') ending.abort(new Error('invocation ending'));
        return next(args);
      },
      { step: 'initialize', name: 'endDuringReceive' },
    );
    // Act
    const out: SQSBatchResponse = await invoke(s, s.instance({ sqs }), event, {
      ...chainOpen(),
      signal: ending.signal,
    });
    // Assess
    const eventIds = new Set(event.map((m) => m.MessageId));
    expect(out.batchItemFailures.every((f) => eventIds.has(f.itemIdentifier))).toBe(true);
    expect(inPhpTimes(b)).toEqual([]);
    const back = await receive(clients.sqs, s.res.queueUrl, 10);
    expect(back.map((m) => JSON.parse(m.Body!).record_key)).toContain(b);
  }, 30_000);
});

describe('a claim whose answer is lost, on the wire', () => {
  it('is tried again and finds its own landed claim: the record is worked in the same invocation, one task, one POST', async () => {
    // Prepare: the record's claim lands at moto and its answer is a 500; the worker's DynamoDB
    // client makes one attempt per call, as the functions' clients do.
    const s = await setup();
    const a = newKey('claim-lost');
    await sendJobs(clients.sqs, s.res.queueUrl, [job(a)]);
    const event = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    await addAwsFaults(moto.endpoint, [
      {
        operation: 'UpdateItem',
        key: { record_key: a },
        contains: ['attribute_not_exists(record_key)'],
        apply: true,
      },
    ]);
    const ddb = new DynamoDBClient({
      endpoint: moto.endpoint,
      region: MOTO_REGION,
      credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
      ...awsClientOptions(),
    });
    // Act
    const out = await invoke(
      s,
      s.instance({ store: new OutcomesStore({ client: ddb, tableName: s.res.tableName }) }),
      event,
    );
    // Assess: nothing retried (no crash, no wait for its own lease); one task and one POST landed.
    expect(out.batchItemFailures).toEqual([]);
    const [rule] = await awsFaults(moto.endpoint);
    expect(rule).toMatchObject({ seen: 2, failed: 1 });
    expect((await s.store.get(a))?.status).toBe('submitted');
    expect(tasksOf(a)).toHaveLength(1);
    expect(target.stats().accepted[new URL(pageurlOf(a)).pathname]).toBe(1);
  }, 30_000);
});

/**
 * Issue 43 items 6 and 10: a record whose own handling fails (the claim, the stop path's row or
 * DLQ copy) does not spend its receives meeting its own lease, and its last allowed receive ends it
 * with its reason, so SQS never moves a message silently. The worker's clients make one attempt
 * per call, as the functions' do, so each fault rule fails exactly one try.
 */
describe('a record whose own handling fails, on the wire', () => {
  const ownClients = () => {
    const options = {
      endpoint: moto.endpoint,
      region: MOTO_REGION,
      credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
      ...awsClientOptions(),
    };
    return { ddb: new DynamoDBClient(options), sqs: new SQSClient(options) };
  };
  /** An environment with one-attempt clients and no waits between tries. */
  const environment = (s: Setup) => {
    const own = ownClients();
    const store = new OutcomesStore({
      client: own.ddb,
      tableName: s.res.tableName,
      sleep: async () => undefined,
    });
    return s.instance({ store, sqs: own.sqs, sleep: async () => undefined });
  };
  /** One invocation; a message not reported failed is deleted, as the mapping does. */
  const deliver = async (s: Setup, messages: Message[]) => {
    const out = await invoke(s, environment(s), messages);
    const failed = new Set(out.batchItemFailures.map((f) => f.itemIdentifier));
    for (const m of messages.filter((m) => !failed.has(m.MessageId!))) {
      await clients.sqs.send(
        new DeleteMessageCommand({ QueueUrl: s.res.queueUrl, ReceiptHandle: m.ReceiptHandle }),
      );
    }
    return out;
  };
  /** The DLQ's messages by their reason attributes. */
  const dlqCopies = async (s: Setup, count: number) =>
    (await receiveAll(clients.sqs, s.res.dlqUrl, count, 0)).map((m) => ({
      error_code: m.MessageAttributes?.error_code?.StringValue,
      record_key: m.MessageAttributes?.record_key?.StringValue,
    }));
  const posts = (key: string) => target.stats().accepted[new URL(pageurlOf(key)).pathname] ?? 0;
  /** One record sent and received (visibility 0: a retried message is visible again at once). */
  const received = async (s: Setup, prefix: string) => {
    const key = newKey(prefix);
    await sendJobs(clients.sqs, s.res.queueUrl, [job(key)]);
    return { key, event: await receiveAll(clients.sqs, s.res.queueUrl, 1, 0) };
  };
  /** The record worked on its second receive, after its first ended on a crash, and its one in.php and POST. */
  const expectWorkedOnSecondReceive = async (
    s: Setup,
    key: string,
    out: { crashed: SQSBatchResponse; redelivered: Message[]; worked: SQSBatchResponse },
  ) => {
    expect(out.crashed.batchItemFailures).toHaveLength(1);
    expect(out.redelivered[0]?.Attributes?.ApproximateReceiveCount).toBe('2');
    expect(out.worked.batchItemFailures).toEqual([]);
    expect(await s.store.get(key)).toMatchObject({ status: 'submitted' });
    expect(inPhpTimes(key)).toHaveLength(1);
    expect(posts(key)).toBe(1);
  };
  const claimOf = (key: string) => ({
    operation: 'UpdateItem',
    key: { record_key: key },
    contains: ['attribute_not_exists(record_key)'],
  });

  afterEach(() => captcha.setKeyRevoked(false));

  it('a claim that failed on every try after landing is released: the redelivery claims at once and works the record on its second receive, one in.php, one POST', async () => {
    // Prepare: every try of the claim lands at moto and its answer is lost (a 500).
    const s = await setup({ RETRY_DELAY_SECONDS: '0' });
    const { key, event } = await received(s, 'claim-crash');
    await addAwsFaults(moto.endpoint, [{ ...claimOf(key), times: WRITE_TRIES, apply: true }]);
    // Act: the first environment's invocation fails on the claim; a second takes the redelivery.
    const crashed = await deliver(s, event);
    const afterCrash = await s.store.get(key);
    const redelivered = await receiveAll(clients.sqs, s.res.queueUrl, 1, 0);
    const worked = await deliver(s, redelivered);
    // Assess: the landed claim was given up, not kept for its whole lease.
    expect((await awsFaults(moto.endpoint))[0]).toMatchObject({ failed: WRITE_TRIES });
    expect(afterCrash).toMatchObject({ status: 'in_progress', lease_expires_at: 0 });
    await expectWorkedOnSecondReceive(s, key, { crashed, redelivered, worked });
  }, 30_000);

  it('a claim that landed with its answer lost and could not be released is taken over by the next receive of the same message: worked on its second receive, one in.php, one POST', async () => {
    // Prepare: every try of the claim lands with its answer lost, and the row read after it fails too.
    const s = await setup({ RETRY_DELAY_SECONDS: '0' });
    const { key, event } = await received(s, 'claim-unknown');
    await addAwsFaults(moto.endpoint, [
      { ...claimOf(key), times: WRITE_TRIES, apply: true },
      { operation: 'GetItem', key: { record_key: key }, times: 1 },
    ]);
    // Act
    const crashed = await deliver(s, event);
    const afterCrash = await s.store.get(key);
    // The retry comes back a second after its notBefore (now: no claim of its own was known).
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const redelivered = await receiveAll(clients.sqs, s.res.queueUrl, 1, 0);
    const worked = await deliver(s, redelivered);
    // Assess: the lease was left live (nothing could release it), and the redelivery did not meet it as another's.
    expect(afterCrash).toMatchObject({ status: 'in_progress' });
    expect(afterCrash?.lease_expires_at).toBeGreaterThan(Date.now());
    await expectWorkedOnSecondReceive(s, key, { crashed, redelivered, worked });
  }, 30_000);

  it('a claim that fails on the last allowed receive ends the record with its reason: a DLQ copy carrying INTERNAL_ERROR, the queue empty', async () => {
    // Prepare: the first receive is the last allowed one; every claim try fails without landing.
    const s = await setup({ TRANSIENT_RECEIVE_LIMIT: '1' });
    const { key, event } = await received(s, 'claim-last');
    await addAwsFaults(moto.endpoint, [{ ...claimOf(key), times: 0 }]);
    // Act
    const out = await deliver(s, event);
    // Assess
    expect(out.batchItemFailures).toEqual([]);
    expect(await dlqCopies(s, 1)).toEqual([{ error_code: 'INTERNAL_ERROR', record_key: key }]);
    expect(await receive(clients.sqs, s.res.queueUrl, 10, 0)).toEqual([]);
    expect(inPhpTimes(key)).toEqual([]);
  }, 30_000);

  it('a `failed` write that fails on every try on the last allowed receive: a DLQ copy carries the failure’s own reason, the queue empty', async () => {
    // Prepare: every task answers UNSOLVABLE (the resubmission too); every `failed` write fails.
    const s = await setup({ TRANSIENT_RECEIVE_LIMIT: '1' });
    const { key, event } = await received(s, 'fail-last');
    captcha.setFaults({ unsolvable: 1 });
    await addAwsFaults(moto.endpoint, [
      {
        operation: 'UpdateItem',
        key: { record_key: key },
        contains: ['#status = :status', '"S":"failed"'],
        times: 0,
      },
    ]);
    // Act
    const out = await deliver(s, event);
    // Assess
    expect(out.batchItemFailures).toEqual([]);
    expect(await dlqCopies(s, 1)).toEqual([{ error_code: 'ERROR_CAPTCHA_UNSOLVABLE', record_key: key }]);
    expect(await receive(clients.sqs, s.res.queueUrl, 10, 0)).toEqual([]);
    expect((await s.store.get(key))?.status).toBe('in_progress');
  }, 30_000);

  it.each([
    [
      'the first DLQ copy fails: its second try lands; the row is stopped',
      (s: Setup) => ({ operation: 'SendMessage', contains: [s.res.dlqUrl.split('/').pop()!], times: 1 }),
      'stopped',
    ],
    [
      'the stopped row cannot be written: the DLQ copy carries the reason; the row stays in_progress',
      (_s: Setup, key: string) => ({
        operation: 'UpdateItem',
        key: { record_key: key },
        contains: ['#status = :status', '"S":"stopped"'],
        times: 0,
      }),
      'in_progress',
    ],
  ])(
    'the stop path on the last allowed receive, when %s; the message leaves the queue',
    async (_name, fault, rowStatus) => {
      // Prepare: the key is refused at in.php; every pause fails at moto, so the stop is recorded
      // on this, the last allowed receive; plus the fault named.
      const s = await setup({ TRANSIENT_RECEIVE_LIMIT: '1' });
      const { key, event } = await received(s, 'stop-last');
      await addAwsFaults(moto.endpoint, [{ ...onStateItem('UpdateItem'), times: 0 }, fault(s, key)]);
      captcha.setKeyRevoked(true);
      // Act
      const out = await deliver(s, event);
      // Assess: nothing left for SQS to move without a reason.
      expect((await awsFaults(moto.endpoint))[1]?.failed).toBeGreaterThan(0);
      expect(out.batchItemFailures).toEqual([]);
      expect((await s.store.get(key))?.status).toBe(rowStatus);
      expect(await dlqCopies(s, 1)).toEqual([{ error_code: 'ERROR_KEY_DOES_NOT_EXIST', record_key: key }]);
      expect(await receive(clients.sqs, s.res.queueUrl, 10, 0)).toEqual([]);
      expect(inPhpTimes(key)).toHaveLength(1);
    },
    30_000,
  );
});
