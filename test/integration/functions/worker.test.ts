import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient, ScanCommand } from '@aws-sdk/client-dynamodb';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { DeleteMessageCommand, type Message } from '@aws-sdk/client-sqs';
import type { SQSBatchResponse } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pauseBackoffMs } from '../../../functions/pipeline/control.js';
import { OutcomesStore } from '../../../functions/records/store.js';
import { processBatch } from '../../../functions/worker/batch-loop.js';
import { readWorkerConfig } from '../../../functions/worker/config.js';
import type { ProcessOptions, WorkerDeps } from '../../../functions/worker/types.js';
import { createWorkerDeps } from '../../../functions/worker.js';
import { MOTO_REGION, type MotoServer } from '../../../local/emulator/moto.js';
import { queueDepth } from '../../../local/stack/observation.js';
import { type CaptchaStandin, startCaptchaStandin } from '../../../local/standins/captchaai/standin.js';
import { DnsStandin } from '../../../local/standins/dns.js';
import {
  FORM_PAGE_SENTINEL,
  startTargetStandin,
  type TargetStandin,
} from '../../../local/standins/target.js';
import {
  type AwsClients,
  clientsFor,
  createWorkerResources,
  mappingState,
  receive,
  receiveAll,
  recordedState,
  sendJobs,
  sqsEvent,
  startMoto,
  type WorkerResources,
} from '../../fixtures/aws.js';
import { catalogResolver, malformedJobs } from '../../fixtures/job-catalog.js';
import { captureOutput, type LogCapture } from '../../fixtures/log-capture.js';
import { startLossyGateway } from '../../fixtures/lossy-gateway.js';
import { startFastCaptchaStandin, TEST_API_KEY, TEST_TIME_SCALE } from '../../fixtures/solve.js';

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

interface Setup {
  res: WorkerResources;
  config: ReturnType<typeof readWorkerConfig>;
  /** A fresh set of dependencies = one more Lambda instance. */
  instance(overrides?: Partial<WorkerDeps>): WorkerDeps;
  store: OutcomesStore;
}

async function setup(env: Record<string, string> = {}): Promise<Setup> {
  const res = await createWorkerResources(moto, clients, {
    apiKey: TEST_API_KEY,
    captchaUrl: captcha.url,
    allowedHosts: '127.0.0.1,*.corp.test',
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
    config,
    instance: (overrides = {}) =>
      createWorkerDeps(config, clients, { resolver: catalogResolver, ...overrides }),
    store: new OutcomesStore({ client: clients.ddb, tableName: res.tableName }),
  };
}

/** The configuration of an AWS client of a test's own for moto (one a test can add a middleware to). */
function motoConfig() {
  return {
    endpoint: moto.endpoint,
    region: MOTO_REGION,
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
  };
}

let nextKey = 0;
function newKey(prefix = 'rec'): string {
  return `${prefix}-${Date.now().toString(36)}-${++nextKey}`;
}

function pageurlOf(key: string): string {
  return `${target.url}/form/${key}`;
}

/** A flat-form job (the seed article's shape) aimed at the target stand-in. */
function flatJob(key: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    record_key: key,
    sitekey: target.sitekey,
    pageurl: pageurlOf(key),
    submit_url: pageurlOf(key),
    ...extra,
  });
}

/**
 * Invokes the worker with the messages as one SQS batch and then does what the Lambda
 * poller does with the answer: deletes every message not reported as a batch item failure.
 */
async function deliver(
  s: Setup,
  deps: WorkerDeps,
  messages: Message[],
  options: ProcessOptions = {},
): Promise<SQSBatchResponse> {
  const out = await processBatch(sqsEvent(messages, s.res.queueArn), deps, options);
  const failed = new Set(out.batchItemFailures.map((f) => f.itemIdentifier));
  for (const m of messages) {
    if (!failed.has(m.MessageId!)) {
      await clients.sqs.send(
        new DeleteMessageCommand({ QueueUrl: s.res.queueUrl, ReceiptHandle: m.ReceiptHandle }),
      );
    }
  }
  return out;
}

/** An invocation cut off after the record's submit (as by a crash): its claim and lease stay. */
async function cutOffAfterSubmit(s: Setup, key: string): Promise<void> {
  await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
  const [message] = await receiveAll(clients.sqs, s.res.queueUrl, 1);
  const controller = new AbortController();
  const running = deliver(s, s.instance(), [message!], { signal: controller.signal });
  await waitFor(() => submitsFor(key) === 1, 'the in.php submit');
  controller.abort(new Error('test: invocation killed'));
  await running;
}

async function rows(s: Setup): Promise<Array<Record<string, unknown>>> {
  const out = await clients.ddb.send(new ScanCommand({ TableName: s.res.tableName, ConsistentRead: true }));
  return (out.Items ?? []).map((item) =>
    Object.fromEntries(
      Object.entries(item).map(([k, v]) => [k, v.S ?? (v.N === undefined ? v : Number(v.N))]),
    ),
  );
}

async function waitFor(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const submitsFor = (key: string) => captcha.stats().submitsByPageurl[pageurlOf(key)] ?? 0;

describe('worker against moto and the stand-ins', () => {
  it('submits a flat-form job: one solve, one accepted post, one submitted row', async () => {
    // Prepare
    const s = await setup();
    const key = newKey();
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key, { form: { record: key, name: 'Ada' } })]);
    const messages = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    // Act
    const out = await deliver(s, s.instance(), messages);
    // Assess
    expect(out.batchItemFailures).toEqual([]);
    expect(submitsFor(key)).toBe(1);
    expect(target.stats().accepted[key]).toBe(1);
    const row = await s.store.get(key);
    expect(row).toMatchObject({
      status: 'submitted',
      reason: 'OK',
      target_status: 200,
      attempts: 1,
      captcha_type: 'recaptcha_v2',
    });
    expect(row?.solve_ms).toBeGreaterThan(0);
  });

  it('stores the batch_id of the first message on the row; a re-send under another batch is a duplicate of it', async () => {
    // Prepare
    const s = await setup();
    const key = newKey('batch');
    const bad = newKey('batch-bad');
    await sendJobs(clients.sqs, s.res.queueUrl, [
      flatJob(key, { batch_id: 'nightly-1', form: { record: key } }),
      flatJob(bad, { batch_id: 'nightly-1', pageurl: 'not a url' }),
    ]);
    await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 2));
    await sendJobs(clients.sqs, s.res.queueUrl, [
      flatJob(key, { batch_id: 'nightly-2', form: { record: key } }),
    ]);
    // Act
    const again = await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 1));
    // Assess
    expect(again.batchItemFailures).toEqual([]);
    expect(submitsFor(key)).toBe(1);
    expect(await s.store.get(key)).toMatchObject({ status: 'submitted', batch_id: 'nightly-1' });
    expect(await s.store.get(bad)).toMatchObject({ status: 'rejected', batch_id: 'nightly-1' });
  });

  it('submits a Turnstile job in cf-turnstile-response', async () => {
    const s = await setup();
    const key = newKey('ts');
    await sendJobs(clients.sqs, s.res.queueUrl, [
      flatJob(key, {
        sitekey: undefined,
        captcha: { type: 'turnstile', sitekey: target.sitekey },
        form: { record: key },
      }),
    ]);
    const out = await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 1));
    expect(out.batchItemFailures).toEqual([]);
    expect(target.stats().accepted[key]).toBe(1);
    expect(await s.store.get(key)).toMatchObject({ status: 'submitted', captcha_type: 'turnstile' });
  });

  it('solves a record once when the same message arrives 5 times one after another', async () => {
    // Prepare
    const s = await setup();
    const key = newKey('seq');
    await sendJobs(clients.sqs, s.res.queueUrl, Array(5).fill(flatJob(key, { form: { record: key } })));
    const messages = await receiveAll(clients.sqs, s.res.queueUrl, 5);
    expect(messages).toHaveLength(5);
    // Act
    const results: SQSBatchResponse[] = [];
    for (const m of messages) results.push(await deliver(s, s.instance(), [m]));
    // Assess
    expect(results.flatMap((r) => r.batchItemFailures)).toEqual([]);
    expect(submitsFor(key)).toBe(1);
    expect(target.stats().accepted[key]).toBe(1);
    expect((await rows(s)).map((r) => [r.record_key, r.status])).toEqual([[key, 'submitted']]);
    expect(await receive(clients.sqs, s.res.queueUrl, 10, 0)).toEqual([]);
  });

  it('solves a record once when 5 copies of its message are worked on concurrently by 5 instances', async () => {
    // Prepare
    const s = await setup();
    const key = newKey('conc');
    await sendJobs(clients.sqs, s.res.queueUrl, Array(5).fill(flatJob(key, { form: { record: key } })));
    const messages = await receiveAll(clients.sqs, s.res.queueUrl, 5);
    expect(messages).toHaveLength(5);
    // Act: five instances at once; the copies that meet the live lease come back as batch item failures.
    const first = await Promise.all(messages.map((m) => deliver(s, s.instance(), [m])));
    const retried = new Set(first.flatMap((r) => r.batchItemFailures.map((f) => f.itemIdentifier)));
    // ...and are redelivered once the first instance has finished.
    const second = await Promise.all(
      messages.filter((m) => retried.has(m.MessageId!)).map((m) => deliver(s, s.instance(), [m])),
    );
    // Assess
    expect(retried.size).toBeLessThanOrEqual(4);
    expect(second.flatMap((r) => r.batchItemFailures)).toEqual([]);
    expect(submitsFor(key)).toBe(1);
    expect(target.stats().accepted[key]).toBe(1);
    expect((await rows(s)).map((r) => [r.record_key, r.status])).toEqual([[key, 'submitted']]);
    expect(await receive(clients.sqs, s.res.queueUrl, 10, 0)).toEqual([]);
  });

  it('does not solve again while an aborted invocation’s lease is live, and finishes after it expires', async () => {
    // Prepare: a clock the test can move past the 60 s lease.
    const s = await setup();
    let offset = 0;
    const now = () => Date.now() + offset;
    const key = newKey('abort');
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key, { form: { record: key } })]);
    const [message] = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    // Act 1: the invocation is cut off right after its in.php submit, as if Lambda had killed it.
    const controller = new AbortController();
    const running = deliver(s, s.instance({ now }), [message!], { signal: controller.signal });
    await waitFor(() => submitsFor(key) === 1, 'the in.php submit');
    // Killed once the task is recorded on the row (its phase marker), so both submits are counted.
    for (const until = Date.now() + 10_000; !(await s.store.get(key))?.task_id; ) {
      if (Date.now() > until) throw new Error('timed out waiting for the task marker');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    controller.abort(new Error('test: invocation killed'));
    const aborted = await running;
    // Assess 1: nothing final was written, the lease stays.
    expect(aborted.batchItemFailures).toEqual([{ itemIdentifier: message!.MessageId }]);
    expect(await s.store.get(key)).toMatchObject({ status: 'in_progress' });
    // Act 2: a redelivery while the lease is live.
    const early = await deliver(s, s.instance({ now }), [message!]);
    // Assess 2: retried later, no second solve.
    expect(early.batchItemFailures).toEqual([{ itemIdentifier: message!.MessageId }]);
    expect(submitsFor(key)).toBe(1);
    // Act 3: the lease has expired; the next redelivery finishes the record.
    offset += 61_000;
    const late = await deliver(s, s.instance({ now }), [message!]);
    // Assess 3
    expect(late.batchItemFailures).toEqual([]);
    expect(submitsFor(key)).toBe(2);
    expect(target.stats().accepted[key]).toBe(1);
    expect(await s.store.get(key)).toMatchObject({ status: 'submitted', attempts: 2 });
    // Both in.php calls count: the killed claim's through its task marker (it counted 1 before #21).
  });

  it('keeps a message that meets a live lease invisible until the lease expires, instead of spending its receives on refusals', async () => {
    // Prepare: an invocation holds the record's 60 s lease (cut off after its submit, as by a crash).
    const s = await setup({ RETRY_DELAY_SECONDS: '1' });
    const key = newKey('leased');
    await cutOffAfterSubmit(s, key);
    const lease = Number((await s.store.get(key))?.lease_expires_at);
    // Act: a second message of the record (a duplicate) arrives while that lease is live. (The
    // cut-off invocation's own message waits for its lease too: it is not received here.)
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
    let again: Message | undefined;
    for (const until = Date.now() + 10_000; !again && Date.now() < until; ) {
      [again] = await receive(clients.sqs, s.res.queueUrl, 1);
      if (!again) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const refused = await deliver(s, s.instance(), [again!]);
    // Assess: refused without a solve, and not back after another retry delay: it waits for
    // the lease (about 60 s more) rather than coming back every second until the DLQ takes it.
    expect(refused.batchItemFailures).toEqual([{ itemIdentifier: again!.MessageId }]);
    expect(submitsFor(key)).toBe(1);
    expect(lease - Date.now()).toBeGreaterThan(50_000);
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect(await receive(clients.sqs, s.res.queueUrl)).toEqual([]);
  });

  it('deletes a copy of a record another message holds on the copy’s receive limit: the holder keeps its claim and its message, nothing solved twice', async () => {
    // Prepare: an invocation holds the record's 60 s lease (cut off after its submit, as by a crash).
    const s = await setup({ RETRY_DELAY_SECONDS: '1' });
    const key = newKey('held-copy');
    await cutOffAfterSubmit(s, key);
    const held = await s.store.get(key);
    // A copy of the record sent again, on its third receive (the transient receive limit): the
    // first two given up at once, as crashed invocations' receives are.
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
    let copy: Message | undefined;
    for (let receives = 0, until = Date.now() + 10_000; receives < 3 && Date.now() < until; ) {
      const [m] = await receive(clients.sqs, s.res.queueUrl, 1, receives < 2 ? 0 : 30);
      if (m) {
        receives += 1;
        copy = m;
      }
    }
    expect(copy?.Attributes?.ApproximateReceiveCount).toBe('3');
    // Act
    const out = await deliver(s, s.instance(), [copy!]);
    // Assess: the copy is done with (deleted, not back with no reason later), the holder's claim
    // and its own message untouched, one in.php in all.
    expect(out.batchItemFailures).toEqual([]);
    const after = await s.store.get(key);
    expect(after).toMatchObject({ status: 'in_progress', lease_owner: held?.lease_owner });
    expect(submitsFor(key)).toBe(1);
    expect(await queueDepth(clients, s.res.queueUrl)).toEqual({ visible: 0, inFlight: 1 });
  });

  it('with a revoked key, a batch of 10 makes 1 in.php call, 1 DLQ message, disables the mapping and leaves the other 9 in the queue', async () => {
    // Prepare: the poller took a batch of 10 in one receive (ApproximateReceiveCount = 1 each).
    const s = await setup();
    const keys = Array.from({ length: 10 }, () => newKey('revoked'));
    await sendJobs(
      clients.sqs,
      s.res.queueUrl,
      keys.map((k) => flatJob(k, { form: { record: k } })),
    );
    const batch = await receiveAll(clients.sqs, s.res.queueUrl, 10);
    expect(batch).toHaveLength(10);
    expect(batch.map((m) => m.Attributes?.ApproximateReceiveCount)).toEqual(Array(10).fill('1'));
    const submitsBefore = captcha.stats().submits;
    const pageLoadsBefore = target.stats().pageLoads;
    captcha.setKeyRevoked(true);
    let out: SQSBatchResponse;
    try {
      // Act
      out = await deliver(s, s.instance(), batch);
    } finally {
      captcha.setKeyRevoked(false);
    }
    // Assess: one in.php call and no page load (the submit comes first and failed); the rest
    // of the batch was not worked on.
    const firstKey = JSON.parse(batch[0]!.Body!).record_key as string;
    expect(captcha.stats().submits - submitsBefore).toBe(1);
    expect(target.stats().pageLoads - pageLoadsBefore).toBe(0);
    expect(out.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(
      batch.slice(1).map((m) => m.MessageId),
    );
    // The record that hit it: row stopped, copy in the DLQ with its attributes.
    expect((await rows(s)).map((r) => [r.record_key, r.status, r.reason])).toEqual([
      [firstKey, 'stopped', 'ERROR_KEY_DOES_NOT_EXIST'],
    ]);
    const dlq = await receiveAll(clients.sqs, s.res.dlqUrl, 1);
    expect(dlq).toHaveLength(1);
    expect(dlq[0]!.Body).toBe(batch[0]!.Body);
    expect(dlq[0]!.MessageAttributes?.error_code?.StringValue).toBe('ERROR_KEY_DOES_NOT_EXIST');
    expect(dlq[0]!.MessageAttributes?.record_key?.StringValue).toBe(firstKey);
    expect(dlq[0]!.MessageAttributes?.reason?.StringValue).toMatch(/revoked|does not exist/);
    expect(await receive(clients.sqs, s.res.dlqUrl, 10, 0)).toEqual([]);
    // Paused everywhere: mapping disabled, reason recorded for the CLI and the adjuster.
    expect(await mappingState(clients.lambda, s.res.mappingUuid)).toBe('Disabled');
    const state = await recordedState(clients.ddb, s.res.ledgerTable);
    expect(state).toMatchObject({ paused: true, code: 'ERROR_KEY_DOES_NOT_EXIST', by: 'worker' });
    expect(state.reason?.match(/CaptchaAI answered/g)).toHaveLength(1);
    // The other 9 are back in the queue at once (visibility reset to 0 by the worker). Their
    // receive count holds the ONE receive that delivered this batch; the worker added none.
    // Observing them needs a receive too, so each now reads 2 = that delivery + this look.
    const left = await receiveAll(clients.sqs, s.res.queueUrl, 10);
    expect(left.map((m) => m.MessageId).sort()).toEqual(
      batch
        .slice(1)
        .map((m) => m.MessageId)
        .sort(),
    );
    expect(left.map((m) => m.Attributes?.ApproximateReceiveCount)).toEqual(Array(9).fill('2'));
  });

  it.each([
    ['one record per invocation', undefined],
    ['the chain open', 60_000],
  ] as const)(
    'with a revoked key and batch size 1 (%s), the other 9 messages are never received: their receive counts stay 0',
    async (_, chainMs) => {
      // Prepare: a poller that, like the SQS event source mapping, only polls while the mapping is enabled.
      const s = await setup();
      const keys = Array.from({ length: 10 }, () => newKey('revoked1'));
      await sendJobs(
        clients.sqs,
        s.res.queueUrl,
        keys.map((k) => flatJob(k)),
      );
      const submitsBefore = captcha.stats().submits;
      captcha.setKeyRevoked(true);
      let invocations = 0;
      try {
        // Act
        while ((await mappingState(clients.lambda, s.res.mappingUuid)) === 'Enabled' && invocations < 10) {
          const one = await receive(clients.sqs, s.res.queueUrl, 1);
          if (one.length === 0) break;
          invocations++;
          await deliver(s, s.instance(), one, chainMs ? { chainUntil: performance.now() + chainMs } : {});
        }
      } finally {
        captcha.setKeyRevoked(false);
      }
      // Assess
      expect(invocations).toBe(1);
      expect(captcha.stats().submits - submitsBefore).toBe(1);
      expect(await mappingState(clients.lambda, s.res.mappingUuid)).toBe('Disabled');
      expect(await receiveAll(clients.sqs, s.res.dlqUrl, 1)).toHaveLength(1);
      // This look is their first receive ever: count 1 means nobody had received them before.
      const left = await receiveAll(clients.sqs, s.res.queueUrl, 9);
      expect(left).toHaveLength(9);
      expect(left.map((m) => m.Attributes?.ApproximateReceiveCount)).toEqual(Array(9).fill('1'));
    },
  );

  it('chains: after its batch of 1 an invocation takes the queue’s other messages itself, one task at a time on a 1-thread plan, each next in.php before the previous POST is answered', async () => {
    // Prepare: a plan of ONE thread (a second task in flight would get ERROR_ZERO_BALANCE) and a
    // form whose POST answers after 400 ms, so a next task submitted beside a POST shows on the wire.
    const plan = await startCaptchaStandin({
      threads: 1,
      apiKey: TEST_API_KEY,
      timeScale: TEST_TIME_SCALE,
      latency: { recaptcha_v2: { minMs: 100, maxMs: 200 } },
    });
    const slowForm = await startTargetStandin({ captchaUrl: plan.url, postDelayMs: 400 });
    try {
      const s = await setup({ CAPTCHAAI_URL: plan.url });
      const keys = Array.from({ length: 4 }, () => newKey('chain'));
      const urlOf = (key: string) => `${slowForm.url}/form/${key}`;
      const job = (key: string) =>
        JSON.stringify({
          record_key: key,
          sitekey: slowForm.sitekey,
          pageurl: urlOf(key),
          submit_url: urlOf(key),
        });
      await sendJobs(clients.sqs, s.res.queueUrl, keys.map(job));
      const first = await receiveAll(clients.sqs, s.res.queueUrl, 1);

      // Act
      const out = await deliver(s, s.instance(), first, { chainUntil: performance.now() + 60_000 });

      // Assess: every record solved once and posted once, one task at a time, the queue empty.
      expect(out.batchItemFailures).toEqual([]);
      const stats = plan.stats();
      expect(stats.submits).toBe(4);
      expect(stats.maxInFlight).toBe(1);
      expect(stats.zeroBalance).toBe(0);
      expect(slowForm.stats().acceptedTotal).toBe(4);
      expect(Object.values(slowForm.stats().accepted)).toEqual([1, 1, 1, 1]);
      for (const key of keys) {
        expect(await s.store.get(key)).toMatchObject({ status: 'submitted', attempts: 1 });
      }
      expect(await receive(clients.sqs, s.res.queueUrl, 10)).toEqual([]);
      // In the order they were worked, each later record's in.php reached the plan before the
      // previous record's POST was answered: its task ran beside that POST.
      const submittedAt = (key: string) => plan.submitTimes(urlOf(key))[0] ?? Number.NaN;
      const order = [...keys].sort((a, b) => submittedAt(a) - submittedAt(b));
      const answeredAt = new Map(
        slowForm
          .events()
          .entries.filter((e) => e.kind === 'post')
          .map((e) => [e.record, e.t]),
      );
      for (let i = 1; i < order.length; i++) {
        expect(submittedAt(order[i] as string)).toBeLessThan(answeredAt.get(order[i - 1] as string) ?? 0);
      }
    } finally {
      await slowForm.close();
      await plan.close();
    }
  });

  it('chains: a message the invocation took itself that meets a live lease stays in the queue (hidden until the lease ends), not deleted', async () => {
    // Prepare: B is claimed by another invocation whose lease is live.
    const s = await setup();
    const [a, b] = [newKey('chain-a'), newKey('chain-b')];
    await s.store.claim(b, { owner: 'someone-else', leaseMs: 60_000, captchaType: 'recaptcha_v2' });
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(a)]);
    const first = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(b)]);
    const submitsBefore = submitsFor(b);

    // Act
    await deliver(s, s.instance(), first, { chainUntil: performance.now() + 60_000 });

    // Assess: A done and deleted; B not solved, its row untouched, its message kept out of sight.
    expect(await s.store.get(a)).toMatchObject({ status: 'submitted' });
    expect(submitsFor(b) - submitsBefore).toBe(0);
    expect(await s.store.get(b)).toMatchObject({ status: 'in_progress', lease_owner: 'someone-else' });
    expect(await queueDepth(clients, s.res.queueUrl)).toEqual({ visible: 0, inFlight: 1 });
  });

  it('chains only while the chain is open: without chainUntil, or once it has passed, the other messages stay in the queue', async () => {
    const s = await setup();
    const keys = [newKey('nochain'), newKey('nochain')];
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(keys[0] as string)]);
    const first = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(keys[1] as string)]);

    await deliver(s, s.instance(), first, { chainUntil: performance.now() - 1 });

    expect(await s.store.get(keys[0] as string)).toMatchObject({ status: 'submitted' });
    expect(await s.store.get(keys[1] as string)).toBeUndefined();
    const left = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    expect(left.map((m) => m.Attributes?.ApproximateReceiveCount)).toEqual(['1']);
  });

  it('warms up ahead of its first record (state, key, table), never fails doing so, and the first record reads no secret again', async () => {
    // Prepare: clients that name every call they make
    const s = await setup();
    const counted = clientsFor(moto);
    const calls: string[] = [];
    counted.secrets.middlewareStack.add(
      (next, context) => async (args) => {
        calls.push(String(context.commandName));
        return next(args);
      },
      { step: 'initialize' },
    );
    counted.ddb.middlewareStack.add(
      (next, context) => async (args) => {
        // GetItem on the ledger table: the state item; on the outcomes table: a row.
        const table = (args.input as { TableName?: string }).TableName;
        calls.push(`${context.commandName}${table === s.res.ledgerTable ? ' (state)' : ''}`);
        return next(args);
      },
      { step: 'initialize' },
    );
    const deps = createWorkerDeps(s.config, counted, { resolver: catalogResolver });
    const key = newKey('warm');
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
    // Act
    await deps.warmUp?.();
    const warmUpCalls = calls.splice(0).sort();
    const out = await deliver(s, deps, await receiveAll(clients.sqs, s.res.queueUrl, 1));
    const missingSecret = createWorkerDeps({ ...s.config, captchaAiSecretName: 'no-such-secret' }, counted);
    // Assess
    expect(warmUpCalls).toEqual(['GetItemCommand', 'GetItemCommand (state)', 'GetSecretValueCommand']);
    expect(out.batchItemFailures).toEqual([]);
    expect((await s.store.get(key))?.status).toBe('submitted');
    expect(calls).toContain('GetItemCommand (state)');
    expect(calls).not.toContain('GetSecretValueCommand');
    await expect(missingSecret.warmUp?.()).resolves.toBeUndefined();
  });

  it('leaves a batch untouched when the pipeline state already says paused, and its messages come back after the retry delay, not the queue’s visibility timeout', async () => {
    const s = await setup({ RETRY_DELAY_SECONDS: '1' });
    const key = newKey('paused');
    await s.instance().pipeline.pause('operator test', 'operator');
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
    const messages = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    const out = await deliver(s, s.instance(), messages);
    expect(out.batchItemFailures).toEqual([{ itemIdentifier: messages[0]!.MessageId }]);
    expect(submitsFor(key)).toBe(0);
    expect(await s.store.get(key)).toBeUndefined();
    // Ready for the resume: visible again after 1 s (the queue's own timeout here is 60 s).
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const [again] = await receive(clients.sqs, s.res.queueUrl, 1, 60);
    expect(again?.MessageId).toBe(messages[0]!.MessageId);
    expect(again?.Attributes?.ApproximateReceiveCount).toBe('2');
  });

  it('ends every case of the bad-input catalog with its documented reason, without a solve or a batch crash', async () => {
    // Prepare
    const s = await setup();
    const cases = malformedJobs(target.url, target.sitekey, newKey('bad'));
    expect(cases.length).toBeGreaterThanOrEqual(30);
    const submitsBefore = captcha.stats().submits;
    // Act: in batches of 10, as the poller would hand them over.
    for (let i = 0; i < cases.length; i += 10) {
      const chunk = cases.slice(i, i + 10);
      await sendJobs(
        clients.sqs,
        s.res.queueUrl,
        chunk.map((c) => c.body),
      );
      const batch = await receiveAll(clients.sqs, s.res.queueUrl, chunk.length);
      const out = await deliver(s, s.instance(), batch);
      expect(out.batchItemFailures).toEqual([]);
    }
    // Assess
    const byKey = new Map((await rows(s)).map((r) => [r.record_key as string, r]));
    const dlq = await receiveAll(
      clients.sqs,
      s.res.dlqUrl,
      cases.filter((c) => c.expect.kind === 'dlq').length,
    );
    const dlqByBody = new Map(dlq.map((m) => [m.Body, m.MessageAttributes]));
    const outcomes = cases.map((c) => {
      if (c.expect.kind === 'rejected') {
        const row = byKey.get(c.expect.recordKey);
        return [c.name, row?.status, row?.reason];
      }
      const attrs = dlqByBody.get(c.body);
      return [c.name, attrs?.error_code?.StringValue, attrs?.reason?.StringValue];
    });
    const expected = cases.map((c) =>
      c.expect.kind === 'rejected'
        ? [c.name, 'rejected', c.expect.reason]
        : [c.name, 'INVALID_JOB', c.expect.reason],
    );
    expect(outcomes).toEqual(expected);
    expect(byKey.size).toBe(cases.filter((c) => c.expect.kind === 'rejected').length);
    expect(captcha.stats().submits - submitsBefore).toBe(0);
    expect(await receive(clients.sqs, s.res.queueUrl, 10, 0)).toEqual([]);
  });

  it("applies the stack's default expect (FORM_EXPECT) to jobs without one: a refused 200 ends FORM_REJECTED, posted once and never retried; expect {} on a job opts out", async () => {
    // Prepare: a form that answers a refused token with its page, an error text and 200.
    const s = await setup({ FORM_EXPECT: JSON.stringify({ body_excludes: ['verification failed'] }) });
    const [refused, optOut, accepted] = [newKey('dflt-no'), newKey('dflt-out'), newKey('dflt-ok')];
    const form = (key: string) => `${target.url}/form-200/page/${key}`;
    const job = (key: string, extra: Record<string, unknown>) =>
      flatJob(key, { pageurl: form(key), submit_url: form(key), form: { record: key }, ...extra });
    const other = { sitekey: `${target.sitekey}-other` };
    await sendJobs(clients.sqs, s.res.queueUrl, [
      job(refused, other),
      job(optOut, { ...other, expect: {} }),
      job(accepted, {}),
    ]);
    const before = target.stats().posts;
    // Act
    const out = await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 3));
    // Assess: final rows, no retry; one POST each.
    expect(out.batchItemFailures).toEqual([]);
    expect(await s.store.get(refused)).toMatchObject({
      status: 'failed',
      reason: 'FORM_REJECTED',
      expect_rule: 'body_excludes[0]',
      target_status: 200,
    });
    expect(await s.store.get(optOut)).toMatchObject({
      status: 'submitted',
      reason: 'OK',
      target_status: 200,
    });
    expect((await s.store.get(optOut))?.expect_rule).toBeUndefined();
    expect(await s.store.get(accepted)).toMatchObject({ status: 'submitted', reason: 'OK' });
    expect(target.stats().posts - before).toBe(3);
    expect(target.stats().rejections.SITEKEY_MISMATCH).toBeGreaterThanOrEqual(2);
    // The outcome log line names the rule; no text of the form's page reaches a log line.
    expect(logs.text()).toContain('"expectRule":"body_excludes[0]"');
    expect(logs.text()).not.toContain(FORM_PAGE_SENTINEL);
  });

  it('ends FORM_UNCONFIRMED, posted once, when the answer is cut at the 1 MiB read with only body_excludes: a failure marker after it cannot be ruled out', async () => {
    // Prepare: the form refuses the token and answers 1.1 MiB of filler, then its error text.
    const s = await setup();
    const key = newKey('cut');
    const form = `${target.url}/form-200/page/${key}`;
    await sendJobs(clients.sqs, s.res.queueUrl, [
      flatJob(key, {
        sitekey: `${target.sitekey}-other`,
        pageurl: form,
        submit_url: `${form}?pad=${Math.round(1.1 * 1024 * 1024)}`,
        form: { record: key },
        expect: { body_excludes: ['verification failed'] },
      }),
    ]);
    // Act
    const out = await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 1));
    // Assess: the form refused it (counted at the stand-in), once; the row says the read was cut.
    expect(out.batchItemFailures).toEqual([]);
    expect(target.events().entries.filter((e) => e.kind === 'post' && e.record === key)).toMatchObject([
      { status: 200, reason: 'SITEKEY_MISMATCH' },
    ]);
    expect(await s.store.get(key)).toMatchObject({
      status: 'failed',
      reason: 'FORM_UNCONFIRMED',
      expect_rule: 'body_excludes (only the first 1048576 bytes of the answer were read)',
      target_status: 200,
      attempts: 1,
    });
  });

  it('fails a record with the target status when the form POST answers 500', async () => {
    const s = await setup();
    const key = newKey('post500');
    const url = `${target.url}/fail-post/500/form/${key}`;
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key, { pageurl: url, submit_url: url })]);
    const out = await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 1));
    expect(out.batchItemFailures).toEqual([]);
    expect(await s.store.get(key)).toMatchObject({
      status: 'failed',
      reason: 'TARGET_HTTP_500',
      target_status: 500,
      attempts: 1,
    });
  });

  it('fails a record with TARGET_TIMEOUT when the page is too slow, after its task was answered', async () => {
    const s = await setup({ TARGET_TIMEOUT_MS: '300' });
    const key = newKey('slow');
    const url = `${target.url}/slow-page/3000/form/${key}`;
    const solvedBefore = captcha.stats().solved;
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key, { pageurl: url, submit_url: url })]);
    await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 1));
    expect(await s.store.get(key)).toMatchObject({ status: 'failed', reason: 'TARGET_TIMEOUT', attempts: 1 });
    // The task was submitted first (the page loads while CaptchaAI works) and was waited for.
    expect(captcha.stats().submitsByPageurl[url]).toBe(1);
    expect(captcha.stats().solved).toBeGreaterThan(solvedBefore);
  });

  it('keeps the slot until the task is answered when the page load fails after the submit: in flight never exceeds the cap', async () => {
    // Prepare: a plan of exactly CAP threads, solves that outlast a failing page load many
    // times over, and CAP slots that each work records one after another. A slot that let go
    // as soon as its page failed would submit its next task while the last one still held a
    // thread: more than CAP in flight, and ERROR_ZERO_BALANCE from the stand-in.
    const CAP = 3;
    const RECORDS = 12;
    const plan = await startCaptchaStandin({
      threads: CAP,
      apiKey: TEST_API_KEY,
      timeScale: TEST_TIME_SCALE,
      latency: { recaptcha_v2: { minMs: 3_000, maxMs: 6_000 } },
    });
    try {
      const s = await setup({
        CAPTCHAAI_URL: plan.url,
        CAPTCHAAI_FIRST_POLL_MS: '1000',
        CAPTCHAAI_POLL_INTERVAL_MS: '1000',
      });
      const keys = Array.from({ length: RECORDS }, () => newKey('pagefail'));
      const urlOf = (key: string) => `${target.url}/fail-page/500/form/${key}`;
      await sendJobs(
        clients.sqs,
        s.res.queueUrl,
        keys.map((key) => flatJob(key, { pageurl: urlOf(key), submit_url: urlOf(key) })),
      );
      const messages = await receiveAll(clients.sqs, s.res.queueUrl, RECORDS);
      expect(messages).toHaveLength(RECORDS);

      // Act
      await Promise.all(
        Array.from({ length: CAP }, async () => {
          const deps = s.instance();
          for (let m = messages.shift(); m; m = messages.shift()) await deliver(s, deps, [m]);
        }),
      );

      // Assess
      const stats = plan.stats();
      expect(stats.submits).toBe(RECORDS);
      expect(stats.zeroBalance).toBe(0);
      expect(stats.maxInFlight).toBeLessThanOrEqual(CAP);
      expect(stats.solved).toBe(RECORDS);
      for (const key of keys) {
        expect(await s.store.get(key)).toMatchObject({
          status: 'failed',
          reason: 'PAGE_HTTP_500',
          attempts: 1,
        });
      }
    } finally {
      await plan.close();
    }
  });

  it('fails with TOKEN_EXPIRED instead of posting a token older than its lifetime', async () => {
    const s = await setup();
    const key = newKey('expired');
    const postsBefore = target.stats().posts;
    const stale = s.instance({
      solver: async () => ({
        solve: async () => ({
          token: 'stale-token',
          taskId: '1',
          submits: 1,
          polls: 1,
          solveMs: 130_000,
          solvedAt: Date.now() - 130_000,
        }),
      }),
    });
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
    await deliver(s, stale, await receiveAll(clients.sqs, s.res.queueUrl, 1));
    expect(await s.store.get(key)).toMatchObject({ status: 'failed', reason: 'TOKEN_EXPIRED', attempts: 1 });
    expect(target.stats().posts).toBe(postsBefore);
  });

  it('fails an unsolvable task after its one resubmission', async () => {
    const s = await setup();
    const key = newKey('unsolvable');
    captcha.inject('res.php', [{ body: 'ERROR_CAPTCHA_UNSOLVABLE' }, { body: 'ERROR_CAPTCHA_UNSOLVABLE' }]);
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
    await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 1));
    expect(await s.store.get(key)).toMatchObject({
      status: 'failed',
      reason: 'ERROR_CAPTCHA_UNSOLVABLE',
      attempts: 2,
    });
    expect(submitsFor(key)).toBe(2);
  });

  it('retries a transient failure while the receive count is below the limit, then fails it TRANSIENT_EXHAUSTED', async () => {
    // Prepare: in.php answers a server error to the first try and both retries, twice over.
    const s = await setup({ TRANSIENT_RECEIVE_LIMIT: '2', RETRY_DELAY_SECONDS: '1' });
    const key = newKey('transient');
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
    const serverError = { body: 'ERROR_SERVER_ERROR' };
    // Act 1: first receive → batch item failure, claim released.
    captcha.inject('in.php', Array(3).fill(serverError));
    const [first] = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    const out1 = await deliver(s, s.instance(), [first!]);
    expect(out1.batchItemFailures).toEqual([{ itemIdentifier: first!.MessageId }]);
    expect(await s.store.get(key)).toMatchObject({ status: 'in_progress', lease_expires_at: 0, attempts: 3 });
    // The worker gave the message a 1 s visibility (RETRY_DELAY_SECONDS) instead of the queue's
    // whole visibility timeout (60 s here), so SQS hands it out again after a short wait.
    // Act 2: the second receive reaches the limit → failed.
    captcha.inject('in.php', Array(3).fill(serverError));
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const [second] = await receiveAll(clients.sqs, s.res.queueUrl, 1, 60);
    expect(second?.Attributes?.ApproximateReceiveCount).toBe('2');
    const out2 = await deliver(s, s.instance(), [second!]);
    // Assess
    expect(out2.batchItemFailures).toEqual([]);
    expect(await s.store.get(key)).toMatchObject({
      status: 'failed',
      reason: 'TRANSIENT_EXHAUSTED',
      attempts: 6,
    });
  });

  it.each(['html502', 'reset'] as const)(
    'an in.php answer lost after the task was created (%s) is never submitted again within the invocation: the slot waits out the deadline and the cool-down, then the record is retried and ends submitted',
    async (how) => {
      // Prepare: a gateway in front of the stand-in loses in.php's answer once the task exists.
      const gateway = await startLossyGateway(captcha.url);
      try {
        const s = await setup({
          CAPTCHAAI_URL: gateway.url,
          CAPTCHAAI_DEADLINE_MS: '40000',
          COOLDOWN_MS: '300',
          RETRY_DELAY_SECONDS: '1',
        });
        const key = newKey(`lost-${how}`);
        const slept: number[] = [];
        const sleepy = s.instance({
          sleep: async (ms) => {
            slept.push(ms);
            await new Promise((resolve) => setTimeout(resolve, ms));
          },
        });
        await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key, { form: { record: key } })]);
        gateway.loseNextSubmits(1, how);
        const [first] = await receiveAll(clients.sqs, s.res.queueUrl, 1);

        // Act 1
        const out1 = await deliver(s, sleepy, [first!]);

        // Assess 1: one task at the stand-in, none in flight when the claim was given up.
        expect(gateway.lost()).toBe(1);
        expect(out1.batchItemFailures).toEqual([{ itemIdentifier: first!.MessageId }]);
        expect(submitsFor(key)).toBe(1);
        expect(slept).toEqual([300]);
        expect(await s.store.get(key)).toMatchObject({
          status: 'in_progress',
          lease_expires_at: 0,
          attempts: 1,
        });

        // Act 2: the retry after the 1 s retry delay.
        await new Promise((resolve) => setTimeout(resolve, 1500));
        const [second] = await receiveAll(clients.sqs, s.res.queueUrl, 1, 30);
        const out2 = await deliver(s, s.instance(), [second!]);

        // Assess 2
        expect(out2.batchItemFailures).toEqual([]);
        expect(submitsFor(key)).toBe(2);
        expect(target.stats().accepted[key]).toBe(1);
        expect(await s.store.get(key)).toMatchObject({ status: 'submitted', attempts: 2 });
      } finally {
        await gateway.close();
      }
    },
  );

  /** A store whose final writes (finish) throw `failures` times (Infinity: always) before reaching moto. */
  function storeFailingFinishes(s: Setup, failures: number): { store: OutcomesStore; tries: () => number } {
    const ddb = new DynamoDBClient(motoConfig());
    let tries = 0;
    ddb.middlewareStack.add(
      (next, context) => async (args) => {
        const expression = String((args.input as { UpdateExpression?: string }).UpdateExpression);
        if (context.commandName !== 'UpdateItemCommand' || !expression.includes('REMOVE lease_expires_at')) {
          return next(args);
        }
        tries += 1;
        if (tries <= failures)
          throw Object.assign(new Error('test: throttled'), { name: 'ThrottlingException' });
        return next(args);
      },
      { step: 'initialize' },
    );
    const store = new OutcomesStore({
      client: ddb,
      tableName: s.res.tableName,
      sleep: async () => undefined,
    });
    return { store, tries: () => tries };
  }

  /** An earlier claim of `key` whose 60 s lease expired a second ago, as a killed invocation leaves it. */
  /**
   * A redelivery of a record whose earlier claim expired (row in_progress), aimed at the target
   * stand-in under the name `host` instead of 127.0.0.1: the received message.
   */
  async function redeliveryAt(s: Setup, key: string, host: string): Promise<Message> {
    const url = `${target.url.replace('127.0.0.1', host)}/form/${key}`;
    await expiredClaim(s, key);
    await sendJobs(clients.sqs, s.res.queueUrl, [
      JSON.stringify({
        record_key: key,
        sitekey: target.sitekey,
        pageurl: url,
        submit_url: url,
        form: { record: key },
      }),
    ]);
    const [message] = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    return message!;
  }

  async function expiredClaim(s: Setup, key: string): Promise<OutcomesStore> {
    const earlier = new OutcomesStore({
      client: clients.ddb,
      tableName: s.res.tableName,
      now: () => Date.now() - 61_000,
    });
    expect(
      await earlier.claim(key, { owner: 'earlier', leaseMs: 60_000, captchaType: 'recaptcha_v2' }),
    ).toMatchObject({
      claimed: true,
    });
    return earlier;
  }

  it('resumes the task an earlier, killed claim recorded (its deadline not passed) instead of submitting another', async () => {
    // Prepare: the earlier claim submitted a task to the stand-in and recorded it, then died.
    const s = await setup();
    const key = newKey('resume');
    const earlier = await expiredClaim(s, key);
    const submitted = await fetch(`${captcha.url}/in.php`, {
      method: 'POST',
      body: new URLSearchParams({
        key: TEST_API_KEY,
        method: 'userrecaptcha',
        googlekey: target.sitekey,
        pageurl: pageurlOf(key),
        json: '1',
      }),
    });
    const taskId = String(((await submitted.json()) as { request: string }).request);
    expect(
      await earlier.markSubmitted(key, 'earlier', { taskId, submittedAt: Date.now(), attempts: 1 }),
    ).toEqual({ written: true });
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key, { form: { record: key } })]);
    // Act
    const out = await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 1));
    // Assess: one in.php in all (the earlier one), its token posted once.
    expect(out.batchItemFailures).toEqual([]);
    expect(submitsFor(key)).toBe(1);
    expect(target.stats().accepted[key]).toBe(1);
    expect(await s.store.get(key)).toMatchObject({ status: 'submitted', attempts: 1, task_id: taskId });
  });

  it('ends a record whose earlier claim wrote the posting marker failed OUTCOME_UNKNOWN, without a solve or a second POST', async () => {
    // Prepare
    const s = await setup();
    const key = newKey('posting');
    const earlier = await expiredClaim(s, key);
    expect(await earlier.markPosting(key, 'earlier')).toEqual({ written: true });
    const postsBefore = target.stats().posts;
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key, { form: { record: key } })]);
    // Act
    const out = await deliver(s, s.instance(), await receiveAll(clients.sqs, s.res.queueUrl, 1));
    // Assess
    expect(out.batchItemFailures).toEqual([]);
    expect(submitsFor(key)).toBe(0);
    expect(target.stats().posts).toBe(postsBefore);
    expect(await s.store.get(key)).toMatchObject({ status: 'failed', reason: 'OUTCOME_UNKNOWN' });
  });

  it('ends a record whose POST lost its answer (connection dropped after the body) failed OUTCOME_UNKNOWN, posted once with its Idempotency-Key, and a redelivery does not post again', async () => {
    // Prepare: a form that takes the POST and drops the connection without answering.
    const posts: Array<string | string[] | undefined> = [];
    const form = createServer((req, res) => {
      if (req.method !== 'POST')
        return void res.writeHead(200, { 'content-type': 'text/html' }).end('<form>');
      req.resume();
      req.on('end', () => {
        posts.push(req.headers['idempotency-key']);
        req.socket.destroy();
      });
    });
    await new Promise<void>((resolve) => form.listen(0, '127.0.0.1', resolve));
    const formUrl = `http://127.0.0.1:${(form.address() as AddressInfo).port}/submit`;
    try {
      const s = await setup();
      const key = newKey('lost-post');
      const body = flatJob(key, { submit_url: formUrl });
      await sendJobs(clients.sqs, s.res.queueUrl, [body, body]);
      const [first, second] = await receiveAll(clients.sqs, s.res.queueUrl, 2);
      // Act
      await deliver(s, s.instance(), [first!]);
      const again = await deliver(s, s.instance(), [second!]);
      // Assess
      expect(posts).toEqual([`"${key}"`]);
      expect(again.batchItemFailures).toEqual([]);
      expect(submitsFor(key)).toBe(1);
      expect(await s.store.get(key)).toMatchObject({
        status: 'failed',
        reason: 'OUTCOME_UNKNOWN',
        attempts: 1,
      });
    } finally {
      form.closeAllConnections();
      await new Promise<void>((resolve) => form.close(() => resolve()));
    }
  });

  it('tries the final write again when it throws: failing twice, then landing, gives one POST and a submitted row', async () => {
    const s = await setup();
    const key = newKey('finish-twice');
    const { store, tries } = storeFailingFinishes(s, 2);
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key, { form: { record: key } })]);
    const out = await deliver(s, s.instance({ store }), await receiveAll(clients.sqs, s.res.queueUrl, 1));
    expect(out.batchItemFailures).toEqual([]);
    expect(tries()).toBe(3);
    expect(target.stats().accepted[key]).toBe(1);
    expect(await s.store.get(key)).toMatchObject({ status: 'submitted', attempts: 1 });
  });

  it('a final write that never lands keeps the lease; after it the record ends failed OUTCOME_UNKNOWN with one POST and no second solve', async () => {
    // Prepare
    const s = await setup();
    const key = newKey('finish-never');
    const { store } = storeFailingFinishes(s, Number.POSITIVE_INFINITY);
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key, { form: { record: key } })]);
    const [message] = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    // Act 1
    const out1 = await deliver(s, s.instance({ store }), [message!]);
    // Assess 1: posted once; the row is in_progress with its posting marker and a live lease.
    expect(out1.batchItemFailures).toEqual([{ itemIdentifier: message!.MessageId }]);
    expect(target.stats().accepted[key]).toBe(1);
    const row = await s.store.get(key);
    expect(row).toMatchObject({ status: 'in_progress' });
    expect(row?.posting_at).toEqual(expect.any(Number));
    // Act 2: a redelivery once the lease has expired, with a store that works.
    const out2 = await deliver(s, s.instance({ now: () => Date.now() + 61_000 }), [message!]);
    // Assess 2
    expect(out2.batchItemFailures).toEqual([]);
    expect(submitsFor(key)).toBe(1);
    expect(target.stats().accepted[key]).toBe(1);
    expect(await s.store.get(key)).toMatchObject({
      status: 'failed',
      reason: 'OUTCOME_UNKNOWN',
      attempts: 1,
    });
  });

  it('a resolver hiccup (EAI_AGAIN) on a redelivery whose row is in_progress leaves the message to be retried, and the record then ends submitted', async () => {
    // Prepare: a name that resolves to the target stand-in, except while the resolver is failing.
    const s = await setup({ ALLOWED_HOSTS: '127.0.0.1,*.corp.test,dns.flaky.test' });
    let resolverDown = true;
    const resolver = async (host: string) => {
      if (host !== 'dns.flaky.test') return catalogResolver(host);
      if (resolverDown)
        throw Object.assign(new Error(`getaddrinfo EAI_AGAIN ${host}`), { code: 'EAI_AGAIN' });
      return ['127.0.0.1'];
    };
    const key = newKey('dns');
    const message = await redeliveryAt(s, key, 'dns.flaky.test');
    // Act 1: the host check meets EAI_AGAIN.
    const out1 = await deliver(s, s.instance({ resolver }), [message]);
    // Assess 1: not dropped, not rejected; the row is untouched.
    expect(out1.batchItemFailures).toEqual([{ itemIdentifier: message.MessageId }]);
    expect(await s.store.get(key)).toMatchObject({ status: 'in_progress', lease_owner: 'earlier' });
    // Act 2: the resolver is back.
    resolverDown = false;
    const out2 = await deliver(s, s.instance({ resolver }), [message]);
    // Assess 2
    expect(out2.batchItemFailures).toEqual([]);
    expect(target.stats().accepted[key]).toBe(1);
    expect(await s.store.get(key)).toMatchObject({ status: 'submitted' });
  });

  it.each(['servfail', 'drop'] as const)(
    'on the wire: a DNS server that answers %s on a redelivery whose row is in_progress leaves the message to be retried, and the record then ends submitted',
    async (fault) => {
      // Prepare: the worker resolves through a DNS stand-in on loopback (DNS_SERVERS), which
      // knows the target's name and fails it on the wire until the fault is cleared.
      const dns = await DnsStandin.start({ 'form.dns.test': ['127.0.0.1'] });
      try {
        const s = await setup({
          ALLOWED_HOSTS: '127.0.0.1,form.dns.test',
          DNS_SERVERS: dns.server,
        });
        const key = newKey(`dns-${fault}`);
        const message = await redeliveryAt(s, key, 'form.dns.test');
        dns.setFault('form.dns.test', fault);
        // Act 1: the host check's queries fail at the DNS server (the system resolver is not used).
        const out1 = await deliver(s, createWorkerDeps(s.config, clients), [message]);
        // Assess 1: the queries reached the stand-in; the message is kept, the row untouched,
        // nothing was solved or posted.
        expect(dns.queries('form.dns.test').length).toBeGreaterThan(0);
        expect(
          dns
            .queries('form.dns.test')
            .every((q) => q.answered === (fault === 'drop' ? 'dropped' : 'servfail')),
        ).toBe(true);
        expect(out1.batchItemFailures).toEqual([{ itemIdentifier: message.MessageId }]);
        expect(await s.store.get(key)).toMatchObject({ status: 'in_progress', lease_owner: 'earlier' });
        expect(target.stats().accepted[key]).toBeUndefined();
        // Act 2: the DNS server answers again.
        dns.setFault('form.dns.test', undefined);
        const out2 = await deliver(s, createWorkerDeps(s.config, clients), [message]);
        // Assess 2: one POST, a final row.
        expect(out2.batchItemFailures).toEqual([]);
        expect(dns.queries('form.dns.test').some((q) => q.answered === 'address')).toBe(true);
        expect(target.stats().accepted[key]).toBe(1);
        expect(await s.store.get(key)).toMatchObject({ status: 'submitted' });
      } finally {
        await dns.stop();
      }
    },
  );

  it('on the wire: a DNS server answering SERVFAIL during the page load (a redirect hop) is no verdict: the claim is released and the message retried, nothing posted', async () => {
    // Prepare: the page (on 127.0.0.1, so the host check needs no DNS) redirects to a name the
    // DNS stand-in fails, so the resolver fails while the page loads, after the claim and in.php.
    const dns = await DnsStandin.start({ 'page.dns.test': ['127.0.0.1'] });
    try {
      const s = await setup({ ALLOWED_HOSTS: '127.0.0.1,page.dns.test', DNS_SERVERS: dns.server });
      const key = newKey('dns-page');
      const hop = `${target.url.replace('127.0.0.1', 'page.dns.test')}/form/${key}`;
      const pageurl = `${target.url}/redirect-to/${encodeURIComponent(hop)}`;
      await sendJobs(clients.sqs, s.res.queueUrl, [
        flatJob(key, { pageurl, submit_url: pageurlOf(key), form: { record: key } }),
      ]);
      const [message] = await receiveAll(clients.sqs, s.res.queueUrl, 1);
      dns.setFault('page.dns.test', 'servfail');
      // Act
      const out = await deliver(s, createWorkerDeps(s.config, clients), [message!]);
      // Assess: the queries failed at the DNS server; one in.php; no POST; the message is kept and
      // the claim released (the task was answered), with its in.php counted; not `failed`.
      const queries = dns.queries('page.dns.test');
      expect(queries.length).toBeGreaterThan(0);
      expect(queries.every((q) => q.answered === 'servfail')).toBe(true);
      expect(captcha.stats().submitsByPageurl[pageurl]).toBe(1);
      expect(target.events().entries.filter((e) => e.record === key && e.kind !== 'page')).toEqual([]);
      expect(out.batchItemFailures).toEqual([{ itemIdentifier: message!.MessageId }]);
      expect(await s.store.get(key)).toMatchObject({
        status: 'in_progress',
        lease_expires_at: 0,
        attempts: 1,
      });
    } finally {
      await dns.stop();
    }
  });

  it('on the wire: a DNS server answering SERVFAIL when the form is posted: nothing was sent, so the posting marker is taken back and the record retried, not failed', async () => {
    // Prepare: the form's host resolves at the host check; the page (on 127.0.0.1, slow) needs no
    // DNS; the DNS stand-in fails the form's name once the task is at CaptchaAI, before the POST.
    const dns = await DnsStandin.start({ 'post.dns.test': ['127.0.0.1'] });
    try {
      const s = await setup({ ALLOWED_HOSTS: '127.0.0.1,post.dns.test', DNS_SERVERS: dns.server });
      const key = newKey('dns-post');
      const pageurl = `${target.url}/slow-page/1000/form/${key}`;
      const submitUrl = `${target.url.replace('127.0.0.1', 'post.dns.test')}/form/${key}`;
      await sendJobs(clients.sqs, s.res.queueUrl, [
        flatJob(key, { pageurl, submit_url: submitUrl, form: { record: key } }),
      ]);
      const [message] = await receiveAll(clients.sqs, s.res.queueUrl, 1);
      // Act
      const working = deliver(s, createWorkerDeps(s.config, clients), [message!]);
      await waitFor(() => captcha.stats().submitsByPageurl[pageurl] === 1, 'the in.php of the record');
      dns.setFault('post.dns.test', 'servfail');
      const out = await working;
      // Assess: the POST's lookup failed at the DNS server; no POST reached the form; the message
      // is kept, the claim released without its posting marker; not `failed`.
      expect(dns.queries('post.dns.test').some((q) => q.answered === 'servfail')).toBe(true);
      expect(target.events().entries.filter((e) => e.record === key && e.kind.startsWith('post'))).toEqual(
        [],
      );
      expect(out.batchItemFailures).toEqual([{ itemIdentifier: message!.MessageId }]);
      const row = await s.store.get(key);
      expect(row).toMatchObject({ status: 'in_progress', lease_expires_at: 0, attempts: 1 });
      expect(row?.posting_at).toBeUndefined();
    } finally {
      await dns.stop();
    }
  });

  it('on the wire: a name the DNS server does not know (NXDOMAIN) on a first delivery is rejected: it does not resolve', async () => {
    const dns = await DnsStandin.start({});
    try {
      const s = await setup({ ALLOWED_HOSTS: '127.0.0.1,gone.dns.test', DNS_SERVERS: dns.server });
      const key = newKey('dns-nx');
      const url = `http://gone.dns.test:1/form/${key}`;
      await sendJobs(clients.sqs, s.res.queueUrl, [
        JSON.stringify({ record_key: key, sitekey: target.sitekey, pageurl: url, submit_url: url }),
      ]);
      const [message] = await receiveAll(clients.sqs, s.res.queueUrl, 1);
      const out = await deliver(s, createWorkerDeps(s.config, clients), [message!]);
      expect(out.batchItemFailures).toEqual([]);
      expect(dns.queries('gone.dns.test').map((q) => q.answered)).toContain('nxdomain');
      expect(await s.store.get(key)).toMatchObject({
        status: 'rejected',
        reason: expect.stringContaining('does not resolve'),
      });
    } finally {
      await dns.stop();
    }
  });

  it('an invalid redelivery (host no longer resolves) meeting a non-final row is retried, never dropped', async () => {
    const s = await setup();
    const key = newKey('reject-conflict');
    await expiredClaim(s, key);
    const url = `http://gone.corp.test/form/${key}`;
    await sendJobs(clients.sqs, s.res.queueUrl, [
      JSON.stringify({ record_key: key, sitekey: target.sitekey, pageurl: url, submit_url: url }),
    ]);
    const [message] = await receiveAll(clients.sqs, s.res.queueUrl, 1);
    const out = await deliver(s, s.instance(), [message!]);
    expect(out.batchItemFailures).toEqual([{ itemIdentifier: message!.MessageId }]);
    expect(await s.store.get(key)).toMatchObject({ status: 'in_progress' });
  });

  it.each([
    { failures: 2, paused: true },
    { failures: Number.POSITIVE_INFINITY, paused: false },
  ])(
    'a pause whose mapping update fails $failures times is tried again: paused $paused, and a pause that never lands leaves the record to be retried, not stopped or in the DLQ',
    async ({ failures, paused }) => {
      // Prepare: the worker's Lambda client fails UpdateEventSourceMapping `failures` times.
      const s = await setup();
      const lambda = new LambdaClient(motoConfig());
      let updates = 0;
      lambda.middlewareStack.add(
        (next, context) => async (args) => {
          if (context.commandName === 'UpdateEventSourceMappingCommand' && ++updates <= failures) {
            throw Object.assign(new Error('test: service unavailable'), { name: 'ServiceException' });
          }
          return next(args);
        },
        { step: 'initialize' },
      );
      const slept: number[] = [];
      const deps = createWorkerDeps(
        s.config,
        { ...clients, lambda },
        {
          resolver: catalogResolver,
          sleep: async (ms) => void slept.push(ms),
        },
      );
      const key = newKey('pause');
      await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
      captcha.setKeyRevoked(true);
      let out: SQSBatchResponse;
      try {
        // Act
        out = await deliver(s, deps, await receiveAll(clients.sqs, s.res.queueUrl, 1));
      } finally {
        captcha.setKeyRevoked(false);
      }
      // Assess
      // The pause's back-off (1 s, then 2 s at time scale 1) at the test's time scale.
      expect(slept).toEqual([pauseBackoffMs(1, TEST_TIME_SCALE), pauseBackoffMs(2, TEST_TIME_SCALE)]);
      expect(await mappingState(clients.lambda, s.res.mappingUuid)).toBe(paused ? 'Disabled' : 'Enabled');
      expect((await s.store.get(key))?.status).toBe(paused ? 'stopped' : 'in_progress');
      expect(out.batchItemFailures).toHaveLength(paused ? 0 : 1);
      expect(await receive(clients.sqs, s.res.dlqUrl, 10, 0)).toHaveLength(paused ? 1 : 0);
    },
  );

  it('fails a poll timeout with POLL_TIMEOUT and holds the slot for the cool-down', async () => {
    // Prepare: the task never finishes; the client deadline is 120 s × 0.05 = 6 s.
    const s = await setup({ COOLDOWN_MS: '45000' });
    const key = newKey('timeout');
    const slept: number[] = [];
    captcha.setFaults({ neverFinish: 1 });
    await sendJobs(clients.sqs, s.res.queueUrl, [flatJob(key)]);
    try {
      // Act
      await deliver(
        s,
        s.instance({ sleep: async (ms) => void slept.push(ms) }),
        await receiveAll(clients.sqs, s.res.queueUrl, 1),
      );
    } finally {
      captcha.setFaults({ neverFinish: 0 });
    }
    // Assess
    expect(await s.store.get(key)).toMatchObject({ status: 'failed', reason: 'POLL_TIMEOUT', attempts: 1 });
    expect(slept).toEqual([45_000]);
    expect(submitsFor(key)).toBe(1);
  });

  it('writes structured JSON logs and EMF metrics, and no line holds the API key or any token the stand-in issued', () => {
    const text = logs.text();
    const tokens = target.receivedTokens().filter((t) => t !== 'stale-token');
    expect(tokens.length).toBeGreaterThanOrEqual(5);
    expect(text).not.toContain(TEST_API_KEY);
    for (const token of [...tokens, 'stale-token']) expect(text).not.toContain(token);
    const lines = logs.lines();
    expect(
      lines.some(
        (l) => l.message === 'outcome' && l.status === 'submitted' && typeof l.recordKey === 'string',
      ),
    ).toBe(true);
    const emf = lines.filter((l) => '_aws' in l);
    const metricNames = new Set(
      emf.flatMap((l) =>
        (
          (l._aws as { CloudWatchMetrics: Array<{ Metrics: Array<{ Name: string }> }> }).CloudWatchMetrics ??
          []
        ).flatMap((m) => m.Metrics.map((x) => x.Name)),
      ),
    );
    expect([...metricNames].sort()).toEqual([
      'ClaimConflicts',
      'Outcomes',
      'PauseFailures',
      // The learned poll schedule of each instance, once it has read a few answers of a type.
      'PollScheduleExpectedCalls',
      'PollScheduleExpectedWait',
      'PollScheduleFirstPoll',
      'ResPhpCalls',
      'SolveTime',
      'Solves',
      'StopEvents',
    ]);
    expect(emf.some((l) => l.Outcomes !== undefined && l.status === 'rejected')).toBe(true);
    const learned = lines.filter((l) => l.message === 'poll schedule learned');
    expect(learned.length).toBeGreaterThan(0);
    expect(learned[0]).toMatchObject({ captchaType: 'recaptcha_v2', pollsMs: expect.any(Array) });
  });
});
