import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { feedQueue, generatedRecords, type LocalStack } from '../../local/local-stack.js';
import {
  CAP,
  deployedCap,
  dlqCount,
  E2E,
  finalCount,
  outcomesOf,
  startE2eStack,
  uniquePrefix,
  waitFor,
} from './harness.js';

// Invariant 1 end to end: in flight at CaptchaAI never exceeds the cap (plan threads − reserve),
// and follows the plan when it shrinks or grows. One deployment for the file.
describe('e2e: the cap holds and follows the plan', () => {
  let stack: LocalStack;

  beforeAll(async () => {
    stack = await startE2eStack('cap');
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it('never lets more than threads − reserve solves in flight, with no ZERO_BALANCE, over 200 records', async () => {
    // Prepare
    const prefix = uniquePrefix('cap');
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 200, prefix);
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    stack.captcha.resetStats();
    // Act
    await feedQueue(stack, stack.outputs.QueueUrl, bodies);
    await waitFor('200 outcomes', async () => (await finalCount(stack, keys)) === 200, {
      timeoutMs: 240_000,
    });
    // Assess
    const stats = stack.captcha.stats();
    const rows = await outcomesOf(stack, keys);
    expect(stats.maxInFlight).toBeLessThanOrEqual(CAP);
    expect(stats.zeroBalance).toBe(0);
    expect([...rows.values()].filter((r) => r.status === 'submitted')).toHaveLength(200);
    expect(stats.submits).toBe(200);
    expect(await dlqCount(stack)).toBe(0);
  }, 300_000);

  it('drops in flight to the new cap after the plan shrinks, and raises the cap when it grows', async () => {
    // Prepare: a steady backlog at the deployed cap.
    const prefix = uniquePrefix('plan');
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 150, prefix);
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 30 });
    await waitFor('20 outcomes at the first cap', async () => (await finalCount(stack, keys)) >= 20);

    // Act 1: the plan shrinks from 8 to 4 threads → cap 2.
    stack.captcha.setThreads(4);
    await waitFor(
      'the adjuster to lower the cap',
      async () => (await deployedCap(stack)) === 4 - E2E.reserve,
    );
    await waitFor(
      'in flight to drain to the new cap',
      () => stack.captcha.stats().inFlight <= 4 - E2E.reserve,
    );
    stack.captcha.resetStats();
    const before = await finalCount(stack, keys);
    await waitFor('20 outcomes at the lower cap', async () => (await finalCount(stack, keys)) >= before + 20);
    const whileShrunk = stack.captcha.stats();

    // Act 2: the plan grows to 12 threads → cap 10.
    stack.captcha.setThreads(12);
    await waitFor(
      'the adjuster to raise the cap',
      async () => (await deployedCap(stack)) === 12 - E2E.reserve,
    );
    stack.captcha.resetStats();
    await waitFor(
      'in flight to rise above the old cap',
      () => stack.captcha.stats().inFlight > 4 - E2E.reserve,
    );
    await waitFor('every record', async () => (await finalCount(stack, keys)) === 150, {
      timeoutMs: 240_000,
    });
    await feeding;
    const whileGrown = stack.captcha.stats();

    // Assess
    expect(whileShrunk.maxInFlight).toBeLessThanOrEqual(4 - E2E.reserve);
    expect(whileShrunk.zeroBalance).toBe(0);
    expect(whileGrown.maxInFlight).toBeGreaterThan(4 - E2E.reserve);
    expect(whileGrown.maxInFlight).toBeLessThanOrEqual(12 - E2E.reserve);
    expect(whileGrown.zeroBalance).toBe(0);
  }, 400_000);
});
