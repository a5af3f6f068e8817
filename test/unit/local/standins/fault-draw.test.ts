import { describe, expect, it } from 'vitest';
import { eventLog } from '../../../../local/standins/event-log.js';
import { checkSchedule, faultDraw } from '../../../../local/standins/fault-draw.js';

describe('fault draw', () => {
  it('hits every Nth matching request', () => {
    const draw = faultDraw({ every: 3 });
    expect(Array.from({ length: 7 }, () => draw.hit())).toEqual([
      false,
      false,
      true,
      false,
      false,
      true,
      false,
    ]);
    expect(draw.counts()).toEqual({ seen: 7, hits: 2 });
  });

  it('draws a seeded rate repeatably, near the rate', () => {
    const run = (seed: number) => {
      const draw = faultDraw({ rate: 0.2, seed });
      return Array.from({ length: 1000 }, () => draw.hit());
    };
    expect(run(7)).toEqual(run(7));
    expect(run(7)).not.toEqual(run(8));
    const hits = run(7).filter(Boolean).length;
    expect(hits).toBeGreaterThan(150);
    expect(hits).toBeLessThan(250);
  });

  it('counts only the chosen keys, and stops at the limit', () => {
    const draw = faultDraw({ every: 1, keys: ['a'], limit: 2 });
    expect(['a', 'b', undefined, 'a', 'a'].map((k) => draw.hit(k))).toEqual([
      true,
      false,
      false,
      true,
      false,
    ]);
    expect(draw.counts()).toEqual({ seen: 3, hits: 2 });
  });

  it.each([
    [{}, /exactly one of every or rate/],
    [{ every: 2, rate: 0.1 }, /exactly one/],
    [{ every: 0 }, /every must be/],
    [{ rate: 2 }, /rate must be/],
    [{ every: 1, keys: 'a' }, /keys/],
    [{ every: 1, other: 1 }, /unknown field "other"/],
  ])('refuses %j', (schedule, message) => {
    expect(() => checkSchedule('f', schedule)).toThrow(message);
  });
});

describe('event log', () => {
  it('numbers entries and reads them after a sequence number, dropping the oldest past its capacity', () => {
    const log = eventLog<{ n: number }>(10);
    for (let n = 1; n <= 12; n++) log.push({ n });
    expect(log.since(10).entries.map((e) => e.n)).toEqual([11, 12]);
    expect(log.since(0).next).toBe(12);
    for (let n = 13; n <= 20; n++) log.push({ n });
    const all = log.since(0);
    expect(all.entries.length + all.dropped).toBe(20);
    expect(all.entries.at(-1)?.seq).toBe(20);
  });
});
