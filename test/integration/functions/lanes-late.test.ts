import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { OutcomesStore } from '../../../functions/records/store.js';
import { processBatch } from '../../../functions/worker/batch-loop.js';
import { takeWindow, worstCaseSettingsOf } from '../../../functions/worker/chain-window.js';
import { readWorkerConfig } from '../../../functions/worker/config.js';
import type { ProcessOptions, WorkerDeps } from '../../../functions/worker/types.js';
import { DEADLINE_MARGIN_MS, shortestRecordMs } from '../../../functions/worker/worst-case.js';
import { createWorkerDeps } from '../../../functions/worker.js';
import type { MotoServer } from '../../../local/emulator/moto.js';
import type { CaptchaStandin } from '../../../local/standins/captchaai/standin.js';
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
import { startFastCaptchaStandin, TEST_API_KEY, TEST_TIME_SCALE } from '../../fixtures/solve.js';

/**
 * Lanes keep taking records late in an invocation, while the shortest work of a record (one task,
 * no submit retry) still fits before the timeout (functions/worker/chain-window.ts). Counted on
 * the wire: in.php at the CaptchaAI stand-in, POSTs at the target, rows in moto, the queue.
 */

let moto: MotoServer;
let clients: AwsClients;
let captcha: CaptchaStandin;
let target: TargetStandin;
let logs: LogCapture;
let res: WorkerResources;
let store: OutcomesStore;

const LANES_ENV = { LANES: '2', INITIAL_CAP: '4', CHAIN_SECONDS: '1' };

beforeAll(async () => {
  logs = captureOutput();
  moto = await startMoto();
  clients = clientsFor(moto);
  captcha = await startFastCaptchaStandin(4);
  target = await startTargetStandin({ captchaUrl: captcha.url });
  res = await createWorkerResources(moto, clients, {
    apiKey: TEST_API_KEY,
    captchaUrl: captcha.url,
    allowedHosts: '127.0.0.1',
  });
  store = new OutcomesStore({ client: clients.ddb, tableName: res.tableName });
});
afterAll(async () => {
  logs?.stop();
  await target?.close();
  await captcha?.close();
  await moto?.stop();
});
afterEach(() => {
  captcha.setFaults({ neverFinish: 0, unsolvable: 0 });
});

function environment(): WorkerDeps {
  const config = readWorkerConfig({
    ...res.env,
    ...LANES_ENV,
    TIME_SCALE: String(TEST_TIME_SCALE),
    LEASE_SECONDS: '60',
    COOLDOWN_MS: '0',
    TARGET_TIMEOUT_MS: '5000',
  });
  return createWorkerDeps(config, clients, { resolver: catalogResolver });
}

/** Two lanes, both allowed, and the messages they take from the queue themselves. */
const twoLanes = (): Pick<ProcessOptions, 'lanes'> => ({ lanes: { count: 2, allowed: async () => 2 } });

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
const inPhp = (key: string) => captcha.submitTimes(pageurlOf(key)).length;
const posts = (key: string) => target.stats().accepted[new URL(pageurlOf(key)).pathname] ?? 0;

describe('lanes late in an invocation, on the wire', () => {
  it('a record whose resubmission no longer fits goes back to the queue before that in.php: one task here, released, visible at once; the next delivery solves it', async () => {
    // Prepare: the record's first task answers UNSOLVABLE (canned at the stand-in); from then on
    // the invocation is too near its end for another task (the first ask passes, every later fails).
    const deps = environment();
    const key = newKey('late-unsolvable');
    await sendJobs(clients.sqs, res.queueUrl, [job(key)]);
    captcha.inject('in.php', [{ body: 'OK|900101' }]);
    captcha.inject('res.php', [{ body: 'ERROR_CAPTCHA_UNSOLVABLE' }]);
    let asks = 0;
    // Act: the lanes take the message themselves (the event is empty).
    const first = await processBatch(sqsEvent([], res.queueArn), deps, {
      ...twoLanes(),
      chainUntil: performance.now() + 30_000,
      submitFits: () => asks++ === 0,
    });
    // Assess: no resubmission was sent, and no id outside the event was reported.
    expect(first.batchItemFailures).toEqual([]);
    expect(inPhp(key)).toBe(1);
    expect(posts(key)).toBe(0);
    const released = await store.get(key);
    expect(released).toMatchObject({ status: 'in_progress', lease_expires_at: 0 });
    expect(released?.task_id).toBeUndefined();
    // Visible again at once (not after the queue's visibility timeout), and solved by a lane with time.
    const again = await receiveAll(clients.sqs, res.queueUrl, 1);
    expect(again).toHaveLength(1);
    const second = await processBatch(sqsEvent(again, res.queueArn), environment(), {});
    expect(second.batchItemFailures).toEqual([]);
    expect(await store.get(key)).toMatchObject({ status: 'submitted' });
    expect(inPhp(key)).toBe(2);
    expect(posts(key)).toBe(1);
  }, 30_000);

  it('a record released before its resubmission keeps it due: the next delivery sends that one task and, answered UNSOLVABLE again, no third', async () => {
    // Prepare: both tasks the record could make answer UNSOLVABLE; the first invocation is too near
    // its end for the resubmission.
    const deps = environment();
    const key = newKey('late-unsolvable-twice');
    await sendJobs(clients.sqs, res.queueUrl, [job(key)]);
    captcha.inject('in.php', [{ body: 'OK|900201' }, { body: 'OK|900202' }]);
    captcha.inject('res.php', [{ body: 'ERROR_CAPTCHA_UNSOLVABLE' }, { body: 'ERROR_CAPTCHA_UNSOLVABLE' }]);
    let asks = 0;
    await processBatch(sqsEvent([], res.queueArn), deps, {
      ...twoLanes(),
      chainUntil: performance.now() + 30_000,
      submitFits: () => asks++ === 0,
    });
    expect(inPhp(key)).toBe(1);
    expect((await store.get(key))?.resubmission_due_at).toBeGreaterThan(0);
    // Act: a lane with time takes it again
    const again = await receiveAll(clients.sqs, res.queueUrl, 1);
    expect(again).toHaveLength(1);
    await processBatch(sqsEvent(again, res.queueArn), environment(), {});
    // Assess: two tasks in all (the first and its one resubmission), never a third
    expect(await store.get(key)).toMatchObject({ status: 'failed', reason: 'ERROR_CAPTCHA_UNSOLVABLE' });
    expect(inPhp(key)).toBe(2);
    expect(posts(key)).toBe(0);
  }, 30_000);

  it('lanes take records when less than a whole worst case but the shortest work is left, and such a record with a task that never answers ends in time, not cut off', async () => {
    // Prepare: the remaining time leaves 1.5 s beyond the shortest work, far below one whole
    // record's worst case (the chain alone would take nothing). Every task never answers: each
    // record polls to its deadline (1.2 s at this time scale) and ends POLL_TIMEOUT.
    const deps = environment();
    const keys = [newKey('late-a'), newKey('late-b')];
    await sendJobs(clients.sqs, res.queueUrl, keys.map(job));
    captcha.setFaults({ neverFinish: 1 });
    const remaining = shortestRecordMs(worstCaseSettingsOf(deps.config)) + DEADLINE_MARGIN_MS + 1_500;
    const controller = new AbortController();
    const abortAt = setTimeout(
      () => controller.abort(new Error('invocation deadline')),
      remaining - DEADLINE_MARGIN_MS,
    );
    // Act
    let response: Awaited<ReturnType<typeof processBatch>>;
    try {
      response = await processBatch(sqsEvent([], res.queueArn), deps, {
        ...twoLanes(),
        signal: controller.signal,
        ...takeWindow(deps.config, remaining),
      });
    } finally {
      clearTimeout(abortAt);
    }
    // Assess: both were taken and ended with their own outcome before the deadline.
    expect(controller.signal.aborted).toBe(false);
    expect(response.batchItemFailures).toEqual([]);
    for (const key of keys) {
      expect(inPhp(key)).toBe(1);
      expect(await store.get(key)).toMatchObject({ status: 'failed', reason: 'POLL_TIMEOUT' });
    }
  }, 30_000);
});
