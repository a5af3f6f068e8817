import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAwsFaults, awsFaults, clearAwsFaults } from '../../local/emulator/fault-client.js';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { generatedRecords } from '../../local/stack/records.js';
import { feedQueue } from '../../local/stack/run.js';
import {
  allFinished,
  CAP,
  dlqCount,
  isFinal,
  logText,
  outcomesOf,
  sharedE2eStack,
  TOKEN_PATTERN,
  uniquePrefix,
  waitFor,
} from './harness.js';

/**
 * Requests whose answer is lost, injected on the wire and counted where they land: in.php
 * answers lost after the CaptchaAI stand-in created the task, and final writes the emulator
 * fails after the form was posted.
 */
let stack: LocalStack;

beforeAll(async () => {
  stack = await sharedE2eStack('lost-answers');
}, 600_000);
afterAll(async () => {
  await stack?.stop();
});

function recordsOf(n: number, name: string) {
  const bodies = generatedRecords(stack.site.url, stack.site.sitekey, n, uniquePrefix(name));
  return { bodies, keys: bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key) };
}

describe('lost answers (local stack)', () => {
  it('every 5th in.php answered by a 502 after its task was created: the stand-in never holds more tasks than the cap, and every record ends', async () => {
    // Prepare
    const { bodies, keys } = recordsOf(100, 'lost-502');
    stack.captcha.resetStats();
    const { next } = stack.captcha.events();
    stack.captcha.setLostAnswers({ html502: { every: 5 } });
    // Act
    await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 2 * CAP });
    await waitFor('every record', () => allFinished(stack, bodies), { timeoutMs: 300_000, intervalMs: 1000 });
    stack.captcha.setLostAnswers({ html502: null });
    // Assess: the answers were lost on the wire, with their tasks holding threads.
    const stats = stack.captcha.stats();
    expect(stats.lostAnswers.html502).toBeGreaterThanOrEqual(20);
    // The stand-in's own count of tasks holding threads, at its peak and after every change.
    expect(stats.maxInFlight).toBeLessThanOrEqual(CAP);
    const log = stack.captcha.events(next).entries;
    expect(Math.max(...log.map((e) => e.inFlight))).toBeLessThanOrEqual(CAP);
    expect(stats.zeroBalance).toBe(0);
    // No record submitted while an earlier task of its own held a thread.
    for (const key of keys) {
      const mine = log.filter((e) => e.record === key);
      let live = 0;
      for (const e of mine) {
        if (e.kind === 'in.php' && e.taskId !== undefined) {
          expect(live, `${key} submitted beside its own task`).toBe(0);
          live += 1;
        }
        if (e.kind === 'task-end') live -= 1;
      }
    }
    // Every record ended: one final row each (DLQ empty).
    const rows = await outcomesOf(stack, keys);
    expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
    expect(await dlqCount(stack)).toBe(0);
  }, 400_000);

  it('final write: failing twice then succeeding gives one POST and a submitted row; failing always gives one POST and, after the lease, failed OUTCOME_UNKNOWN with no second solve', async () => {
    // Prepare
    const { bodies, keys } = recordsOf(2, 'final-write');
    const [twice, always] = keys as [string, string];
    const endpoint = stack.awsEnv.AWS_ENDPOINT_URL ?? '';
    const finalWrite = '":status":{"S":"submitted"}';
    await addAwsFaults(endpoint, [
      {
        operation: 'UpdateItem',
        key: { record_key: twice },
        contains: [finalWrite],
        times: 2,
        error: 'ProvisionedThroughputExceededException',
      },
      { operation: 'UpdateItem', key: { record_key: always }, contains: [finalWrite], times: 0 },
    ]);
    const { next } = stack.site.events();
    stack.captcha.resetStats();
    // Act
    await feedQueue(stack, stack.outputs.QueueUrl, bodies);
    await waitFor('both records', () => allFinished(stack, bodies), { timeoutMs: 240_000, intervalMs: 1000 });
    const rules = await awsFaults(endpoint);
    await clearAwsFaults(endpoint);
    // Assess: the emulator failed the writes it was told to.
    expect(rules.map((r) => r.failed)).toEqual([2, expect.any(Number)]);
    expect(rules[1]?.failed).toBeGreaterThanOrEqual(2);
    const rows = await outcomesOf(stack, keys);
    expect(rows.get(twice)).toMatchObject({ status: 'submitted' });
    expect(rows.get(always)).toMatchObject({ status: 'failed', reason: 'OUTCOME_UNKNOWN' });
    // One POST each at the target, one in.php each at the stand-in.
    const posts = stack.site.events(next).entries.filter((e) => e.kind === 'post-received');
    expect(posts.map((e) => e.record).sort()).toEqual([...keys].sort());
    const inPhp = stack.captcha
      .events()
      .entries.filter((e) => e.kind === 'in.php' && keys.includes(e.record));
    expect(inPhp.map((e) => e.record).sort()).toEqual([...keys].sort());
    // No key or token reached a log.
    const logs = logText(stack.logDir);
    expect(logs).not.toContain(stack.apiKey);
    expect(logs).not.toMatch(TOKEN_PATTERN);
  }, 300_000);
});
