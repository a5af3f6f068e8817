import { describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../../../functions/common/settings.js';
import {
  capCeiling,
  computeCap,
  describeClamp,
  MAX_MAPPING_MAX_CONCURRENCY,
  maxCapClamp,
} from '../../../../functions/pipeline/cap-policy.js';
import { laneShape } from '../../../../functions/pipeline/lanes.js';

describe('capCeiling', () => {
  it.each([
    [1, 1000],
    [8, 8000],
    [16, 16_000],
    [64, 64_000],
  ])('lets lanes %i carry a cap of %i', (lanes, ceiling) => {
    expect(capCeiling(lanes)).toBe(ceiling);
  });

  it.each([2, 3, 16, 64])(
    'keeps r within the mapping limit for every cap up to the ceiling of lanes %i',
    (lanes) => {
      // Act
      let highestR = 0;
      for (let cap = 1; cap <= capCeiling(lanes); cap++)
        highestR = Math.max(highestR, laneShape(cap, lanes).r);
      // Assess
      expect(highestR).toBe(MAX_MAPPING_MAX_CONCURRENCY);
    },
  );

  it('runs a 1,000-thread plan within 2 % of plan − reserve with the default maxCap and lanes 16', () => {
    // Prepare: the deploy defaults, maxCap left at its default
    const settings = { reserve: DEFAULTS.reserve, minCap: DEFAULTS.minCap, maxCap: capCeiling(16) };
    // Act
    const cap = computeCap(1000, settings);
    const shape = laneShape(cap, 16);
    // Assess
    expect(cap).toBe(1000 - DEFAULTS.reserve);
    expect(shape.r).toBeLessThanOrEqual(MAX_MAPPING_MAX_CONCURRENCY);
    expect(shape.r * shape.L).toBeGreaterThanOrEqual(0.98 * (1000 - DEFAULTS.reserve));
  });
});

describe('maxCapClamp', () => {
  const settings = { reserve: 2, minCap: 1, maxCap: 100 };

  it('finds no clamp when plan − reserve is at or below maxCap', () => {
    expect(maxCapClamp(102, settings)).toBeUndefined();
    expect(maxCapClamp(50, settings)).toBeUndefined();
  });

  it('counts the threads left idle when plan − reserve is above maxCap', () => {
    expect(maxCapClamp(1000, settings)).toEqual({
      planThreads: 1000,
      reserve: 2,
      maxCap: 100,
      idleThreads: 898,
    });
    expect(maxCapClamp(103, settings)?.idleThreads).toBe(1);
  });

  it('says the plan, the reserve, maxCap, the idle threads and what to change', () => {
    // Act
    const text = describeClamp({ planThreads: 1000, reserve: 2, maxCap: 100, idleThreads: 898 });
    // Assess
    expect(text).toBe(
      'plan 1000 threads − reserve 2 = 998 is above maxCap 100: 898 threads idle; ' +
        'to use them raise maxCap to 998 or unset it (default and ceiling: 1000 × lanes)',
    );
  });
});
