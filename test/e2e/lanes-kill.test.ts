import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { generatedRecords } from '../../local/stack/records.js';
import { feedQueue } from '../../local/stack/run.js';
import { allFinished, dlqCount, isFinal, outcomesOf, uniquePrefix, waitFor } from './harness.js';
import { CAP, keysOf, LanesStack, SHAPE } from './lanes-stack.js';
import { e2eTarget } from './target.js';

/**
 * The whole fleet of lanes SIGKILLed mid-run (./lanes-stack.ts): every record still ends once,
 * counted where it lands (POSTs at the target stand-in, in flight at the CaptchaAI stand-in, rows
 * in the table, messages in the DLQ).
 */
let lanes: LanesStack;
let stack: LocalStack;

describe.skipIf(e2eTarget() !== 'moto')(`lanes: the fleet of ${SHAPE.r} × ${SHAPE.L} killed`, () => {
  beforeAll(async () => {
    lanes = await LanesStack.start('lanes-kill');
    stack = lanes.stack;
  }, 600_000);
  afterAll(async () => {
    await lanes?.stop();
  });

  it('after the whole fleet is killed mid-run: one final outcome per record, at most one POST each, nothing in the DLQ', async () => {
    // Prepare
    await waitFor(
      'the adjuster to publish the cap',
      async () => (await lanes.publishedShape())?.cap === CAP,
      {
        timeoutMs: 120_000,
      },
    );
    stack.captcha.resetStats();
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 80, uniquePrefix('kill'));
    const keys = keysOf(bodies);
    const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 40 });
    await waitFor(
      'lanes busy and posts under way',
      () => stack.captcha.stats().inFlight > SHAPE.r && lanes.wireCounts(keys).posts.size >= 10,
      { intervalMs: 10, timeoutMs: 300_000 },
    );
    // Act: SIGKILL the runtime (every environment and lane at once), then a new one
    await lanes.killRuntime();
    // The feed waits for room in the queue: only a runtime makes it.
    await lanes.startRuntime();
    await feeding;
    await waitFor('every record', async () => allFinished(stack, bodies), {
      timeoutMs: 600_000,
      intervalMs: 1_000,
    });
    // Assess
    const rows = await outcomesOf(stack, keys);
    expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
    const { posts } = lanes.wireCounts(keys);
    expect(keys.filter((k) => (posts.get(k) ?? 0) > 1)).toEqual([]);
    expect(await dlqCount(stack)).toBe(0);
    expect(stack.captcha.stats().maxInFlight).toBeLessThanOrEqual(CAP);
  }, 900_000);
});
