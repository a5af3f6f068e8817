import { describe, expect, it } from 'vitest';
import {
  BATCH_CANCELLED,
  type BatchCancel,
  CancelUnknownError,
} from '../../../../functions/records/cancellations.js';
import { decideCancelled } from '../../../../functions/records/decisions.js';
import {
  CancelWatch,
  cancelRefreshMs,
  MIN_CANCEL_REFRESH_MS,
} from '../../../../functions/worker/cancel-watch.js';

const CANCEL: BatchCancel = { batchId: 'b', cancelledAt: '2026-12-03T12:00:00.000Z', reason: 'wrong URL' };

function watch(answers: Array<BatchCancel | undefined | Error>, refreshMs = 1_000) {
  let now = 0;
  let reads = 0;
  const failures: unknown[] = [];
  const w = new CancelWatch({
    read: async () => {
      const answer = answers[Math.min(reads, answers.length - 1)];
      reads += 1;
      if (answer instanceof Error) throw answer;
      return answer;
    },
    refreshMs,
    now: () => now,
    onReadFailed: (_batch, err) => failures.push(err),
  });
  return { w, advance: (ms: number) => (now += ms), reads: () => reads, failures };
}

describe('CancelWatch', () => {
  it('reads a batch once per refresh period while it is not cancelled', async () => {
    const t = watch([undefined, CANCEL]);
    expect(await t.w.cancelOf('b')).toBeUndefined();
    t.advance(999);
    expect(await t.w.cancelOf('b')).toBeUndefined();
    expect(t.reads()).toBe(1);
    t.advance(1);
    expect(await t.w.cancelOf('b')).toEqual(CANCEL);
    expect(t.reads()).toBe(2);
  });

  it('keeps a cancel for good once seen (a cancel is final), without reading again', async () => {
    const t = watch([CANCEL, undefined]);
    expect(await t.w.cancelOf('b')).toEqual(CANCEL);
    t.advance(60_000);
    expect(await t.w.cancelOf('b')).toEqual(CANCEL);
    expect(t.reads()).toBe(1);
  });

  it('shares one read between concurrent asks for a batch, and reads each batch on its own', async () => {
    const t = watch([undefined]);
    await Promise.all([t.w.cancelOf('b'), t.w.cancelOf('b'), t.w.cancelOf('b')]);
    await t.w.cancelOf('c');
    expect(t.reads()).toBe(2);
  });

  it('does not answer an ask with a read that started more than the bound before it', async () => {
    let now = 0;
    let release: (v: BatchCancel | undefined) => void = () => undefined;
    let reads = 0;
    const w = new CancelWatch({
      read: () => {
        reads += 1;
        return reads === 1 ? new Promise((resolve) => (release = resolve)) : Promise.resolve(CANCEL);
      },
      refreshMs: 1_000,
      now: () => now,
    });
    const slow = w.cancelOf('b');
    now = 1_500;
    expect(await w.cancelOf('b')).toEqual(CANCEL);
    release(undefined);
    expect(await slow).toEqual(CANCEL);
    expect(await w.cancelOf('b')).toEqual(CANCEL);
  });

  it('answers "unknown" (CancelUnknownError), never "not cancelled", when no read has succeeded within the bound; reads again at the next ask', async () => {
    const failing = watch([undefined, new Error('throttled'), CANCEL]);
    expect(await failing.w.cancelOf('b')).toBeUndefined();
    failing.advance(1_000);
    const unknown = await failing.w.cancelOf('b').catch((err: unknown) => err);
    expect(unknown).toBeInstanceOf(CancelUnknownError);
    expect(unknown).toMatchObject({ batchId: 'b', code: 'CANCEL_UNKNOWN' });
    expect(failing.failures).toHaveLength(1);
    expect(await failing.w.cancelOf('b')).toEqual(CANCEL);
  });

  it('answers "unknown" when the very first read fails, and for every ask sharing that read', async () => {
    const t = watch([new Error('throttled'), undefined]);
    const asks = await Promise.allSettled([t.w.cancelOf('b'), t.w.cancelOf('b')]);
    expect(asks.map((a) => a.status)).toEqual(['rejected', 'rejected']);
    expect(t.reads()).toBe(1);
    expect(await t.w.cancelOf('b')).toBeUndefined();
  });

  it('keeps a cancel already seen when a later read would fail (it is final)', async () => {
    const t = watch([CANCEL, new Error('throttled')]);
    expect(await t.w.cancelOf('b')).toEqual(CANCEL);
    t.advance(60_000);
    expect(await t.w.cancelOf('b')).toEqual(CANCEL);
  });

  it('scales the bound with the time scale, never below the floor', () => {
    expect(cancelRefreshMs(1)).toBe(10_000);
    expect(cancelRefreshMs(0.5)).toBe(5_000);
    expect(cancelRefreshMs(0.01)).toBe(MIN_CANCEL_REFRESH_MS);
  });
});

describe('decideCancelled', () => {
  it('ends the record `cancelled` with the cancel reason, wasted only when a token was in hand', () => {
    expect(decideCancelled(CANCEL, true)).toEqual({
      action: 'cancel',
      reason: `${BATCH_CANCELLED}: wrong URL`,
      wasted: true,
    });
    expect(decideCancelled({}, false)).toEqual({ action: 'cancel', reason: BATCH_CANCELLED, wasted: false });
  });
});
