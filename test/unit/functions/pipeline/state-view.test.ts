import { describe, expect, it } from 'vitest';
import { type PipelineSnapshot, PipelineView } from '../../../../functions/pipeline/state-view.js';

const good: PipelineSnapshot = { state: { paused: false }, shape: { cap: 12, r: 3, L: 4, since: 1 } };

/** A view over a read that answers or throws as the test says, on a clock the test moves. */
function viewWith(o: { ttlMs: number; staleMs?: number }) {
  let clock = 0;
  let failing = false;
  let reads = 0;
  const view = new PipelineView({
    ...o,
    clock: () => clock,
    read: async () => {
      reads++;
      if (failing) throw new Error('ThrottlingException');
      return good;
    },
  });
  return {
    view,
    advance: (ms: number) => {
      clock += ms;
    },
    fail: (v: boolean) => {
      failing = v;
    },
    reads: () => reads,
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
});
