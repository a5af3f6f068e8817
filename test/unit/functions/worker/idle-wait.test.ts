import { describe, expect, it } from 'vitest';
import {
  abortableSleep,
  collectingWhileIdle,
  decideIdleCollection,
  GARBAGE_BYTES,
  idleCollector,
  MIN_IDLE_WAIT_MS,
} from '../../../../functions/worker/idle-wait.js';

describe('idle collection', () => {
  it('collects only when the wait is long enough and enough garbage has built up', () => {
    const enough = { waitMs: MIN_IDLE_WAIT_MS, inUse: 10 * GARBAGE_BYTES, afterLast: 9 * GARBAGE_BYTES };
    expect(decideIdleCollection(enough)).toBe(true);
    expect(decideIdleCollection({ ...enough, waitMs: MIN_IDLE_WAIT_MS - 1 })).toBe(false);
    expect(decideIdleCollection({ ...enough, inUse: enough.afterLast + GARBAGE_BYTES - 1 })).toBe(false);
  });

  it('measures again after a collection, so the next one waits for new garbage', () => {
    // Prepare: memory grows by half the threshold per wait; a collection frees it all.
    let inUse = 20 * GARBAGE_BYTES;
    let collections = 0;
    const collect = idleCollector(
      () => {
        collections += 1;
        inUse = 20 * GARBAGE_BYTES;
      },
      () => inUse,
    );

    // Act
    collect(MIN_IDLE_WAIT_MS); // the first wait: everything above 0 counts as grown
    const afterFirst = collections;
    for (let i = 0; i < 4; i++) {
      inUse += GARBAGE_BYTES / 2;
      collect(MIN_IDLE_WAIT_MS);
    }

    // Assess: one at the start, then one per two waits.
    expect(afterFirst).toBe(1);
    expect(collections).toBe(3);
  });

  it('without a gc function (no --expose-gc) never collects and still sleeps', async () => {
    const collect = idleCollector(undefined, () => Number.MAX_SAFE_INTEGER);
    const waits: number[] = [];
    const sleep = collectingWhileIdle(async (ms) => {
      waits.push(ms);
    }, collect);
    await sleep(MIN_IDLE_WAIT_MS * 10);
    expect(waits).toEqual([MIN_IDLE_WAIT_MS * 10]);
  });

  it('the worker sleep ends when its signal aborts (a ten-minute wait would time the test out)', async () => {
    const controller = new AbortController();
    const waiting = abortableSleep(600_000, controller.signal);
    controller.abort();
    await expect(waiting).resolves.toBeUndefined();
  });
});
