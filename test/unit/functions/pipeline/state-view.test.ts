import { describe, expect, it } from 'vitest';
import { type PipelineSnapshot, PipelineView } from '../../../../functions/pipeline/state-view.js';

const good: PipelineSnapshot = { state: { paused: false }, shape: { cap: 12, r: 3, L: 4, since: 1 } };

/**
 * A view over a read that answers or throws as the test says, on a clock the test moves; with
 * `retry`, its waits move the clock and are counted. `failing` is how many reads from now fail
 * (Infinity: every one).
 */
function viewWith(o: { ttlMs: number; staleMs?: number; retry?: { forMs: number; waitMs: number } }) {
  let clock = 0;
  let failing = 0;
  let reads = 0;
  const waits: number[] = [];
  const view = new PipelineView({
    ttlMs: o.ttlMs,
    ...(o.staleMs === undefined ? {} : { staleMs: o.staleMs }),
    ...(o.retry
      ? {
          retry: {
            ...o.retry,
            sleep: async (ms: number) => {
              waits.push(ms);
              clock += ms;
            },
          },
        }
      : {}),
    clock: () => clock,
    read: async () => {
      reads++;
      if (failing > 0) {
        failing--;
        throw new Error('ThrottlingException');
      }
      return good;
    },
  });
  return {
    view,
    advance: (ms: number) => {
      clock += ms;
    },
    fail: (v: boolean | number) => {
      failing = v === true ? Number.POSITIVE_INFINITY : v === false ? 0 : v;
    },
    reads: () => reads,
    waits: () => waits,
  };
}

describe('PipelineView', () => {
  it('shares one read for ttlMs, then reads again', async () => {
    const v = viewWith({ ttlMs: 100 });
    await v.view.read();
    await v.view.read();
    expect(v.reads()).toBe(1);
    v.advance(100);
    await v.view.read();
    expect(v.reads()).toBe(2);
  });

  it('answers a failed read with the last good snapshot while it is younger than staleMs, then fails', async () => {
    // Prepare
    const v = viewWith({ ttlMs: 100, staleMs: 1_000 });
    await v.view.read();
    v.fail(true);
    // Act + Assess: still within staleMs of the good read
    v.advance(500);
    await expect(v.view.read()).resolves.toEqual(good);
    // Too old: the failure is the answer
    v.advance(600);
    await expect(v.view.read()).rejects.toThrow('ThrottlingException');
  });

  it('fails a read with no good snapshot, and without staleMs keeps no fallback', async () => {
    const cold = viewWith({ ttlMs: 100, staleMs: 1_000 });
    cold.fail(true);
    await expect(cold.view.read()).rejects.toThrow('ThrottlingException');
    const strict = viewWith({ ttlMs: 100 });
    await strict.view.read();
    strict.fail(true);
    strict.advance(100);
    await expect(strict.view.read()).rejects.toThrow('ThrottlingException');
  });

  it('tries a read with no snapshot to answer again, every waitMs, and answers the first that succeeds', async () => {
    // Prepare: a cold view (nothing read yet) whose first three reads are throttled
    const v = viewWith({ ttlMs: 100, staleMs: 1_000, retry: { forMs: 1_000, waitMs: 50 } });
    v.fail(3);
    // Act + Assess: one read from the caller's side, four tries on the wire, three waits between
    await expect(v.view.read()).resolves.toEqual(good);
    expect(v.reads()).toBe(4);
    expect(v.waits()).toEqual([50, 50, 50]);
  });

  it('gives up after forMs, or after forMs / waitMs + 1 tries on a clock that stands still', async () => {
    // Prepare: every read fails; the waits move the clock
    const timed = viewWith({ ttlMs: 100, retry: { forMs: 200, waitMs: 50 } });
    timed.fail(true);
    // Act + Assess: tries at 0, 50, 100, 150, 200 ms; none starts past 200 ms
    await expect(timed.view.read()).rejects.toThrow('ThrottlingException');
    expect(timed.reads()).toBe(5);
    // Prepare: a clock the waits do not move (a test's, or a stuck one)
    let stillReads = 0;
    const still = new PipelineView({
      ttlMs: 100,
      clock: () => 0,
      retry: { forMs: 200, waitMs: 50, sleep: async () => undefined },
      read: async () => {
        stillReads++;
        throw new Error('ThrottlingException');
      },
    });
    // Act + Assess: the tries are bounded all the same
    await expect(still.read()).rejects.toThrow('ThrottlingException');
    expect(stillReads).toBe(5);
  });

  it('answers a young snapshot at once when a read fails, without trying again: the next ask reads', async () => {
    // Prepare
    const v = viewWith({ ttlMs: 100, staleMs: 1_000, retry: { forMs: 1_000, waitMs: 50 } });
    await v.view.read();
    v.advance(100);
    v.fail(1);
    // Act + Assess: the stale answer, no wait; the next ask reads again and gets a fresh one
    await expect(v.view.read()).resolves.toEqual(good);
    expect(v.waits()).toEqual([]);
    await v.view.read();
    expect(v.reads()).toBe(3);
  });

  it('shares one read, its tries included, among the callers that ask meanwhile', async () => {
    const v = viewWith({ ttlMs: 100, retry: { forMs: 1_000, waitMs: 50 } });
    v.fail(2);
    const answers = await Promise.all([v.view.read(), v.view.read(), v.view.read()]);
    expect(answers).toEqual([good, good, good]);
    expect(v.reads()).toBe(3);
  });
});
