import { describe, expect, it } from 'vitest';
import {
  answerSeenAtMs,
  bucketCounts,
  busyShare,
  efficiency,
  expectedPollWaitMs,
  mean,
  mixMeanMs,
  percentile,
  round,
  steadyWindow,
  summarize,
  timeWeightedMean,
  wholeRunLoss,
} from '../../../bench/stats.js';

describe('percentile', () => {
  it.each([
    [0, 1],
    [50, 3],
    [100, 5],
    [25, 2],
    [90, 4.6],
  ])('interpolates between the closest ranks: p%d of 1..5 is %d', (p, expected) => {
    // Prepare
    const values = [5, 3, 1, 4, 2];

    // Act
    const v = percentile(values, p);

    // Assess
    expect(v).toBeCloseTo(expected, 10);
  });

  it('is NaN for no values and rejects a percentile outside 0..100', () => {
    // Act / Assess
    expect(percentile([], 50)).toBeNaN();
    expect(() => percentile([1], 101)).toThrow(RangeError);
    expect(() => percentile([1], -1)).toThrow(RangeError);
  });

  it('does not reorder the caller’s array', () => {
    // Prepare
    const values = [3, 1, 2];

    // Act
    percentile(values, 50);

    // Assess
    expect(values).toEqual([3, 1, 2]);
  });
});

describe('summarize', () => {
  it('reports count, mean, p50/p95/p99, min and max', () => {
    // Prepare
    const values = Array.from({ length: 101 }, (_, i) => i);

    // Act
    const s = summarize(values);

    // Assess
    expect(s).toEqual({ count: 101, mean: 50, p50: 50, p95: 95, p99: 99, min: 0, max: 100 });
  });

  it('gives NaN figures and a zero count for no values', () => {
    // Act
    const s = summarize([]);

    // Assess
    expect(s.count).toBe(0);
    expect(s.mean).toBeNaN();
    expect(s.p99).toBeNaN();
    expect(mean([])).toBeNaN();
  });
});

describe('timeWeightedMean', () => {
  it('weights each sample by how long it held within the window', () => {
    // Prepare: 0 for 1 s, 10 for 3 s, 4 from t=4 on.
    const samples = [
      { t: 0, v: 0 },
      { t: 1, v: 10 },
      { t: 4, v: 4 },
    ];

    // Act
    const whole = timeWeightedMean(samples, 0, 6);
    const inner = timeWeightedMean(samples, 2, 5);

    // Assess
    expect(whole).toBeCloseTo((0 * 1 + 10 * 3 + 4 * 2) / 6, 10);
    expect(inner).toBeCloseTo((10 * 2 + 4 * 1) / 3, 10);
  });

  it('counts the time before the first sample at the first sample’s value', () => {
    // Prepare
    const samples = [{ t: 2, v: 6 }];

    // Act / Assess
    expect(timeWeightedMean(samples, 0, 4)).toBe(6);
  });

  it('is NaN for an empty window or no samples', () => {
    // Act / Assess
    expect(timeWeightedMean([], 0, 1)).toBeNaN();
    expect(timeWeightedMean([{ t: 0, v: 1 }], 3, 3)).toBeNaN();
  });
});

describe('steadyWindow', () => {
  it('spans the 10th to the 90th percentile of completion times and counts the completions inside', () => {
    // Prepare: completions at 0..100 s, shuffled.
    const times = Array.from({ length: 101 }, (_, i) => (i * 37) % 101);

    // Act
    const w = steadyWindow(times);

    // Assess
    expect(w).toEqual({ from: 10, to: 90, completed: 80 });
  });

  it('is undefined with fewer than two completions or all at the same time', () => {
    // Act / Assess
    expect(steadyWindow([5])).toBeUndefined();
    expect(steadyWindow([5, 5, 5])).toBeUndefined();
  });

  it('rejects bounds that are not 0 <= lo < hi <= 1', () => {
    // Act / Assess
    expect(() => steadyWindow([1, 2], 0.9, 0.1)).toThrow(RangeError);
  });
});

describe('efficiency', () => {
  it('is throughput divided by cap ÷ mean solve time', () => {
    // Prepare: 20 slots, 30 s per solve → at most 40 solves a minute.
    // Act
    const perfect = efficiency(40, 60, 20, 30);
    const partial = efficiency(36, 60, 20, 30);

    // Assess
    expect(perfect).toBeCloseTo(1, 10);
    expect(partial).toBeCloseTo(0.9, 10);
  });

  it('is NaN without elapsed time, cap or solve time', () => {
    // Act / Assess
    expect(efficiency(10, 0, 20, 30)).toBeNaN();
    expect(efficiency(10, 60, 0, 30)).toBeNaN();
    expect(efficiency(10, 60, 20, 0)).toBeNaN();
  });
});

describe('mixMeanMs', () => {
  it('weights each type’s uniform mean by its count', () => {
    // Prepare
    const latency = { a: { minMs: 10, maxMs: 30 }, b: { minMs: 0, maxMs: 100 } };

    // Act
    const m = mixMeanMs({ a: 3, b: 1 }, latency);

    // Assess
    expect(m).toBe((3 * 20 + 1 * 50) / 4);
  });

  it('refuses a type without a distribution', () => {
    // Act / Assess
    expect(() => mixMeanMs({ c: 1 }, {})).toThrow(/"c"/);
  });
});

describe('answerSeenAtMs / expectedPollWaitMs', () => {
  it.each([
    [3_000, 15_000],
    [15_000, 15_000],
    [15_001, 20_000],
    [22_000, 25_000],
    [25_000, 25_000],
  ])(
    'an answer ready after %d ms is seen at the poll at %d ms (first at 15 s, then every 5 s)',
    (ready, seen) => {
      // Act / Assess
      expect(answerSeenAtMs(ready, 15_000, 5_000)).toBe(seen);
    },
  );

  it('expects half an interval of waiting when answers arrive uniformly after the first poll', () => {
    // Act
    const wait = expectedPollWaitMs({ minMs: 15_000, maxMs: 60_000 }, 15_000, 5_000);

    // Assess
    expect(wait).toBeCloseTo(2_500, 0);
  });

  it('adds the wait for the first poll when answers can be ready before it', () => {
    // Prepare: ready uniformly in 10..30 s; a quarter before the first poll at 15 s (mean wait 2.5 s),
    // the rest wait half an interval (2.5 s) on average.
    // Act
    const wait = expectedPollWaitMs({ minMs: 10_000, maxMs: 30_000 }, 15_000, 5_000);

    // Assess
    expect(wait).toBeCloseTo(2_500, 0);
  });

  it('handles a fixed latency', () => {
    // Act / Assess
    expect(expectedPollWaitMs({ minMs: 7_000, maxMs: 7_000 }, 5_000, 5_000)).toBe(3_000);
  });
});

describe('bucketCounts', () => {
  it('counts events per bucket and kind, ignoring those outside the range', () => {
    // Prepare
    const events = [
      { t: 0.2, kind: 'submitted' },
      { t: 0.9, kind: 'submitted' },
      { t: 1.5, kind: 'failed' },
      { t: 2.5, kind: 'submitted' },
      { t: 9, kind: 'submitted' },
    ];

    // Act
    const buckets = bucketCounts(events, 0, 3, 1);

    // Assess
    expect(buckets).toEqual([
      { t: 0, counts: { submitted: 2 } },
      { t: 1, counts: { failed: 1 } },
      { t: 2, counts: { submitted: 1 } },
    ]);
  });

  it('rejects a bucket size of zero', () => {
    // Act / Assess
    expect(() => bucketCounts([], 0, 1, 0)).toThrow(RangeError);
  });
});

describe('round', () => {
  it('rounds to the given decimals and turns NaN and infinities into null for JSON', () => {
    // Act / Assess
    expect(round(0.123456)).toBe(0.123);
    expect(round(2.5, 0)).toBe(3);
    expect(round(Number.NaN)).toBeNull();
    expect(round(Number.POSITIVE_INFINITY)).toBeNull();
  });
});

describe('busyShare', () => {
  it('divides the busy thread-time between two instants by threads × the time between', () => {
    // Cumulative busy thread-ms: 2 of 4 threads busy for the first 10 s, all 4 for the next 10 s.
    const busy = [
      { t: 0, ms: 0 },
      { t: 10, ms: 20_000 },
      { t: 20, ms: 60_000 },
    ];
    expect(busyShare(busy, 0, 20, 4)).toBeCloseTo(0.75);
    expect(busyShare(busy, 10, 20, 4)).toBeCloseTo(1);
    // Between samples it interpolates.
    expect(busyShare(busy, 5, 15, 4)).toBeCloseTo(0.75);
    expect(busyShare(busy, 5, 5, 4)).toBeNaN();
  });
});

describe('wholeRunLoss', () => {
  it('splits the idle plan-thread-time of a run into ramp-up, between and drain, adding up to 1 − the whole-run share', () => {
    // Cumulative busy thread-ms of 4 threads: 1 busy for 10 s (ramp-up), 4 for 20 s, 2 for 10 s (drain).
    const busy = [
      { t: 0, ms: 0 },
      { t: 10, ms: 10_000 },
      { t: 30, ms: 90_000 },
      { t: 40, ms: 110_000 },
    ];
    const loss = wholeRunLoss(busy, 4, { firstSubmit: 0, rampEnd: 10, drainFrom: 30, lastAnswer: 40 });
    expect(loss.rampUp).toBeCloseTo(30 / 160);
    expect(loss.between).toBeCloseTo(0);
    expect(loss.drain).toBeCloseTo(20 / 160);
    expect(loss.rampUp + loss.between + loss.drain).toBeCloseTo(1 - busyShare(busy, 0, 40, 4));
    expect([loss.rampUpS, loss.drainS]).toEqual([10, 10]);
  });
});
