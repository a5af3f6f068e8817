import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  feedQueue,
  generatedRecords,
  type LocalStack,
  queueDepth,
  readDlq,
} from '../../local/local-stack.js';
import {
  CAP,
  dlqCount,
  finalCount,
  isFinal,
  outcomesOf,
  redriveByHand,
  startE2eStack,
  uniquePrefix,
  waitFor,
} from './harness.js';

const NO_FAULTS = { html502: 0, unsolvable: 0, neverFinish: 0 };

// Invariants 3 and 4 end to end: nothing is lost under CaptchaAI faults, and a stop-class
// error stops new submissions everywhere until an operator resumes; then resume + redrive
// finish every record.
describe('e2e: faults and stop-class errors', () => {
  let stack: LocalStack;

  beforeAll(async () => {
    stack = await startE2eStack('stop');
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it('ends every record with exactly one final outcome or one DLQ entry under 502s, UNSOLVABLE and tasks that never finish', async () => {
    // Prepare
    const prefix = uniquePrefix('faults');
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 100, prefix);
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    stack.captcha.setFaults({ html502: 0.1, unsolvable: 0.05, neverFinish: 0.02 });
    // Act
    await feedQueue(stack, stack.outputs.QueueUrl, bodies);
    // A record whose transient retries run out comes back after the queue's visibility timeout
    // (6 × the worker timeout), hence the long wait allowed here; most runs need far less.
    await waitFor(
      'an outcome or a DLQ entry for every record',
      async () => (await finalCount(stack, keys)) + (await dlqCount(stack)) >= 100,
      { timeoutMs: 420_000, intervalMs: 500 },
    );
    stack.captcha.setFaults(NO_FAULTS);
    // Assess
    const rows = await outcomesOf(stack, keys);
    const finals = keys.filter((k) => isFinal(rows.get(k)));
    const dlq = await readDlq(stack, 1);
    const dlqKeys = dlq.map((d) => d.recordKey);
    expect(finals.length + dlq.length).toBe(100);
    expect(finals.filter((k) => dlqKeys.includes(k))).toEqual([]);
    expect(new Set(dlqKeys).size).toBe(dlq.length);
    const failed = [...rows.values()].filter((r) => r.status === 'failed');
    expect(failed.every((r) => typeof r.reason === 'string' && r.reason !== '')).toBe(true);
    expect(stack.captcha.stats().maxInFlight).toBeLessThanOrEqual(stack.threads);
  }, 480_000);

  it('stops submitting when the key is revoked, keeps the rest queued, and finishes everything after resume and redrive', async () => {
    // Prepare
    // Records the previous test left in the DLQ go back to work first, so this test starts clean.
    await redriveByHand(stack);
    await waitFor(
      'the earlier redriven messages to finish',
      async () =>
        (await dlqCount(stack)) === 0 && (await queueDepth(stack, stack.outputs.QueueUrl)).visible === 0,
    );
    const prefix = uniquePrefix('stop');
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 60, prefix);
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    stack.captcha.resetStats();
    await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 60 });
    await waitFor('a dozen outcomes', async () => (await finalCount(stack, keys)) >= 12);

    // Act 1: the key is revoked mid-run.
    const submitsBefore = stack.captcha.stats().submits;
    stack.captcha.setKeyRevoked(true);
    await waitFor('the pipeline to pause', async () => (await stack.control.readState()).paused);
    await waitFor('invocations to drain', () => {
      const worker = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName];
      return (worker?.inFlight ?? 0) === 0 && stack.captcha.stats().inFlight === 0;
    });
    const submitsAtStop = stack.captcha.stats().submits;
    // An observation window: a paused pipeline must stay quiet.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const submitsLater = stack.captcha.stats().submits;
    const state = await stack.control.readState();
    const mapping = await stack.control.readMapping();
    const rowsAtStop = await outcomesOf(stack, keys);
    const dlqAtStop = await readDlq(stack, 1);
    const queued = await queueDepth(stack, stack.outputs.QueueUrl);
    const finalAtStop = keys.filter((k) => isFinal(rowsAtStop.get(k))).length;

    // Act 2: the operator fixes the key, resumes and redrives.
    stack.captcha.setKeyRevoked(false);
    await stack.control.resume('operator');
    await waitFor(
      'the DLQ to be visible again',
      async () => (await queueDepth(stack, stack.outputs.DlqUrl)).visible === dlqAtStop.length,
    );
    const redriven = await redriveByHand(stack);
    await waitFor('every record', async () => (await finalCount(stack, keys)) === 60, { timeoutMs: 240_000 });

    // Assess: the stop
    expect(state).toMatchObject({ paused: true, by: 'worker' });
    expect(mapping.enabled).toBe(false);
    expect(submitsAtStop - submitsBefore).toBeLessThanOrEqual(CAP);
    expect(submitsLater).toBe(submitsAtStop);
    expect(dlqAtStop.length).toBeGreaterThan(0);
    for (const entry of dlqAtStop) {
      expect(entry.errorCode).toMatch(/^(ERROR_WRONG_USER_KEY|ERROR_KEY_DOES_NOT_EXIST)$/);
      expect(rowsAtStop.get(entry.recordKey ?? '')?.status).toBe('stopped');
    }
    expect(queued.visible + queued.inFlight).toBe(60 - finalAtStop - dlqAtStop.length);
    // Assess: nothing lost after resume + redrive
    expect(redriven).toBe(dlqAtStop.length);
    const rows = await outcomesOf(stack, keys);
    expect(keys.map((k) => rows.get(k)?.status)).toEqual(keys.map(() => 'submitted'));
    expect(await dlqCount(stack)).toBe(0);
    expect((await stack.control.readState()).paused).toBe(false);
  }, 360_000);
});
