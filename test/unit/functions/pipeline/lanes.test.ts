import { describe, expect, it } from 'vitest';
import {
  checkLanes,
  DRAIN_CLOCK_MARGIN_MS,
  laneShape,
  lanesAllowed,
  nextShapeStep,
  type PublishedShape,
  parseShape,
  readLaneSettings,
} from '../../../../functions/pipeline/lanes.js';

const LIFETIME = 900_000;
const SETTLE = 4_000;

describe('laneShape', () => {
  it.each([
    // cap, lanes → r, L
    [12, 4, 3, 4],
    [1, 8, 1, 1],
    [2, 8, 2, 1],
    [3, 8, 3, 1],
    [4, 8, 2, 2],
    [6, 4, 2, 3],
    [20, 8, 4, 5],
    [20, 16, 2, 10],
    [100, 8, 14, 7],
    [100, 16, 7, 14],
    [1000, 8, 125, 8],
    [1000, 16, 62, 16],
    [18, 8, 3, 6],
    [17, 8, 2, 8],
    [50, 1, 50, 1],
  ])('cap %i with lanes %i is %i invocations of %i lanes', (cap, lanes, r, L) => {
    expect(laneShape(cap, lanes)).toEqual({ cap, r, L });
  });

  it('never passes the cap, keeps r >= 2 from cap 2 on, and leaves at most about 2 % (at least one thread) unused', () => {
    for (let cap = 1; cap <= 1000; cap++) {
      for (const lanes of [1, 2, 3, 4, 8, 16, 64]) {
        const { r, L } = laneShape(cap, lanes);
        expect(r * L).toBeLessThanOrEqual(cap);
        expect(L).toBeLessThanOrEqual(lanes);
        if (cap >= 2) expect(r).toBeGreaterThanOrEqual(2);
        else expect(r).toBe(cap);
        expect(cap - r * L).toBeLessThanOrEqual(Math.max(1, Math.floor(cap * 0.02)));
      }
    }
  });
});

describe('lanesAllowed', () => {
  const shape: PublishedShape = {
    cap: 6,
    r: 2,
    L: 3,
    since: 1_000,
    drain: { L: 2, fromR: 3, startedBefore: 5_000, until: 100_000 },
  };

  it('gives an invocation older than the fall the drain lanes until the drain ends', () => {
    expect(lanesAllowed(shape, 4_999, 50_000)).toBe(2);
    expect(lanesAllowed(shape, 4_999, 100_000)).toBe(3);
  });

  it('gives an invocation started after the fall the published L', () => {
    expect(lanesAllowed(shape, 5_000, 50_000)).toBe(3);
    expect(lanesAllowed({ cap: 12, r: 3, L: 4, since: 0 }, 0, 1)).toBe(4);
  });
});

describe('nextShapeStep', () => {
  const current: PublishedShape = { cap: 12, r: 3, L: 4, since: 0 };
  /** The step from `from` (knobs at its r) toward `cap` with lanes 8, at `now`. */
  const stepTo = (from: PublishedShape, cap: number, now: number) =>
    nextShapeStep({
      current: from,
      target: laneShape(cap, 8),
      rInForce: from.r,
      now,
      lifetimeMs: LIFETIME,
      settleMs: SETTLE,
    });

  it('lowers the knobs before publishing a fall, with a drain for invocations started before it', () => {
    // Prepare / Act: cap 12 (3 × 4) → 6 (2 × 3)
    const step = nextShapeStep({
      current,
      target: laneShape(6, 4),
      rInForce: 3,
      now: 10_000,
      lifetimeMs: LIFETIME,
      settleMs: SETTLE,
    });
    // Assess: the 3 old invocations keep 2 lanes each (6), new ones run 3
    expect(step).toEqual({
      kind: 'knobs-then-publish',
      publish: {
        cap: 6,
        r: 2,
        L: 3,
        since: 10_000,
        drain: { L: 2, fromR: 3, startedBefore: 10_000 + DRAIN_CLOCK_MARGIN_MS, until: 10_000 + LIFETIME },
      },
    });
  });

  it('drains to zero lanes when the new cap is below the old invocation count', () => {
    const step = stepTo({ cap: 100, r: 14, L: 7, since: 0 }, 10, 1);
    expect(step.kind).toBe('knobs-then-publish');
    expect(step.publish.drain?.L).toBe(0);
  });

  it('publishes a smaller L first when a grow needs one, and raises r only on a later run', () => {
    // cap 17 (2 × 8) → 18 (3 × 6)
    const first = stepTo({ cap: 17, r: 2, L: 8, since: 0 }, 18, 60_000);
    expect(first).toEqual({ kind: 'publish-only', publish: { cap: 18, r: 2, L: 6, since: 60_000 } });
    // Too soon: every environment may not have seen L 6 yet.
    const early = stepTo(first.publish, 18, 61_000);
    expect(early.kind).toBe('publish-only');
    expect(early.publish).toEqual(first.publish);
    const later = stepTo(first.publish, 18, 120_000);
    expect(later).toEqual({ kind: 'publish-then-knobs', publish: { cap: 18, r: 3, L: 6, since: 120_000 } });
  });

  it('keeps every invocation within the cap through a fall then a grow, at each step', () => {
    // Old invocations at most fromR, each at most drain L; new ones at most r of L.
    let published: PublishedShape = { cap: 100, r: 14, L: 7, since: 0 };
    let rInForce = 14;
    let now = 0;
    for (const cap of [50, 20, 60, 7, 1000, 999, 3, 40]) {
      for (let run = 0; run < 3; run++) {
        now += 60_000;
        const step = nextShapeStep({
          current: published,
          target: laneShape(cap, 8),
          rInForce,
          now,
          lifetimeMs: LIFETIME,
          settleMs: SETTLE,
        });
        const rAfter = step.kind === 'publish-only' ? rInForce : step.publish.r;
        const p = step.publish;
        // Worst case after the step: every invocation allowed runs the most lanes it may.
        const newest = rAfter * p.L;
        const oldest = p.drain && now < p.drain.until ? p.drain.fromR * Math.min(p.drain.L, p.L) : 0;
        expect(newest).toBeLessThanOrEqual(cap);
        expect(oldest).toBeLessThanOrEqual(cap);
        published = p;
        rInForce = rAfter;
      }
    }
  });
});

describe('parseShape and the settings', () => {
  it('reads a published shape and refuses what is not one', () => {
    expect(parseShape('{"cap":12,"r":3,"L":4,"since":5}')).toEqual({ cap: 12, r: 3, L: 4, since: 5 });
    expect(parseShape('{"cap":12,"r":3,"L":0}')).toBeUndefined();
    expect(parseShape('not json')).toBeUndefined();
    expect(parseShape(undefined)).toBeUndefined();
  });

  it('names the variable of a bad lanes setting', () => {
    expect(() => checkLanes(0, 'LANES')).toThrow(/LANES/);
    expect(() => readLaneSettings({ LANES: '4' })).toThrow(/INITIAL_CAP/);
    expect(() => readLaneSettings({ LANES: '4', INITIAL_CAP: '0' })).toThrow(/INITIAL_CAP/);
    expect(readLaneSettings({})).toEqual({ lanes: 1 });
    expect(readLaneSettings({ INITIAL_CAP: '12' })).toEqual({ lanes: 1 });
  });

  it('with lanes, the first shape is the one the stack deployed: that of INITIAL_CAP, long settled', () => {
    expect(readLaneSettings({ LANES: '4', INITIAL_CAP: '12' })).toEqual({
      lanes: 4,
      firstShape: { ...laneShape(12, 4), since: 0 },
    });
  });
});
