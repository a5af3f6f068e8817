import { afterAll, beforeAll, describe, it } from 'vitest';
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

/**
 * The final-write test spends most of its time waiting out a lease (its always-failing record
 * can end only once its claim has expired) and needs nothing of the stack meanwhile but its own
 * two records: the two tests run concurrently. The 502 test starts its run once the final-write
 * records have had their in.php and their POST (no 502 can fall on them, and they hold no
 * thread by then), and each test counts only its own records at the stand-ins.
 */
let finalWritePosted: () => void = () => undefined;
const finalWriteRecordsPosted = new Promise<void>((resolve) => {
  finalWritePosted = resolve;
});

function recordsOf(n: number, name: string) {
  const bodies = generatedRecords(stack.site.url, stack.site.sitekey, n, uniquePrefix(name));
  return { bodies, keys: bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key) };
}

describe('lost answers (local stack)', () => {
  it.concurrent('every 5th in.php answered by a 502 after its task was created: the stand-in never holds more tasks than the cap, and every record ends', async ({
    expect,
  }) => {
    // Prepare
    const { bodies, keys } = recordsOf(100, 'lost-502');
    await finalWriteRecordsPosted;
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

  it.concurrent('final write: failing twice then succeeding gives one POST and a submitted row; failing always gives one POST and, after the lease, failed OUTCOME_UNKNOWN with no second solve', async ({
    expect,
  }) => {
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
    const postsOfMine = () =>
      stack.site.events(next).entries.filter((e) => e.kind === 'post-received' && keys.includes(e.record));
    // Act
    try {
      await feedQueue(stack, stack.outputs.QueueUrl, bodies);
      await waitFor('a POST of each record', () => new Set(postsOfMine().map((e) => e.record)).size === 2);
    } finally {
      finalWritePosted();
    }
    await waitFor('both records', () => allFinished(stack, bodies), { timeoutMs: 240_000, intervalMs: 1000 });
    const rules = await awsFaults(endpoint);
    await clearAwsFaults(endpoint);
    // Assess: the emulator failed the writes it was told to.
    expect(rules.map((r) => r.failed)).toEqual([2, expect.any(Number)]);
    expect(rules[1]?.failed).toBeGreaterThanOrEqual(2);
    const rows = await outcomesOf(stack, keys);
    expect(rows.get(twice)).toMatchObject({ status: 'submitted' });
    expect(rows.get(always)).toMatchObject({ status: 'failed', reason: 'OUTCOME_UNKNOWN' });
    // One POST each at the target, one in.php each at the stand-in (the 502 test's records beside them are its own).
    expect(
      postsOfMine()
        .map((e) => e.record)
        .sort(),
    ).toEqual([...keys].sort());
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
