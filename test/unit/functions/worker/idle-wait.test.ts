import { describe, expect, it } from 'vitest';
import {
  abortableSleep,
  collectingWhileIdle,
  decideIdleCollection,
  GARBAGE_BYTES,
  idleCollector,
  MIN_IDLE_WAIT_MS,
  URGENT_GARBAGE_BYTES,
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

  it('with lanes, collects only when every lane is waiting, and not when one of the waits is about to end', async () => {
    // Prepare: two lanes; garbage above the threshold, below the urgent one; a clock we move.
    let clock = 0;
    let collections = 0;
    let inUse = 2 * GARBAGE_BYTES;
    const collect = idleCollector(
      () => {
        collections += 1;
        inUse = GARBAGE_BYTES;
      },
      () => inUse,
      () => clock,
    );
    const laneA = collect.laneStarted();
    const laneB = collect.laneStarted();

    // Act and assess: lane A waits while lane B is mid-read: no collection.
    const waitA = collect.waitStarted(1_000);
    expect(collections).toBe(0);
    // Lane B waits too, but lane A's wait ends in 50 ms: still none.
    clock = 950;
    const waitB = collect.waitStarted(5_000);
    expect(collections).toBe(0);
    waitA();
    waitB();
    // Both wait long enough: one collection.
    inUse = 3 * GARBAGE_BYTES;
    const waitA2 = collect.waitStarted(1_000);
    const waitB2 = collect.waitStarted(1_000);
    expect(collections).toBe(1);
    waitA2();
    waitB2();
    // Past the urgent threshold a single lane's wait collects, memory first.
    inUse = GARBAGE_BYTES + URGENT_GARBAGE_BYTES;
    collect.waitStarted(1_000)();
    expect(collections).toBe(2);
    // One lane left: any wait may collect, as before lanes.
    laneB();
    inUse = 3 * GARBAGE_BYTES;
    collect.waitStarted(1_000)();
    expect(collections).toBe(3);
    laneA();
  });

  it('a collecting sleep ends its wait when the sleep ends, aborted or not', async () => {
    let inUse = 2 * GARBAGE_BYTES;
    let collections = 0;
    const collect = idleCollector(
      () => {
        collections += 1;
        inUse = GARBAGE_BYTES;
      },
      () => inUse,
    );
    collect.laneStarted();
    collect.laneStarted();
    const sleep = collectingWhileIdle(abortableSleep, collect);
    const controller = new AbortController();
    const first = sleep(600_000, controller.signal);
    controller.abort();
    await first;
    // The aborted wait no longer counts: one lane waiting of two, no collection.
    inUse = 3 * GARBAGE_BYTES;
    collect.waitStarted(1_000)();
    expect(collections).toBe(0);
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
