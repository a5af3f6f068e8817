import type { LatencyDistribution } from './types.js';

/**
 * How long a task takes to solve, drawn from its CAPTCHA type's distribution (before the time
 * scale). Today every distribution is uniform between `minMs` and `maxMs`; other shapes belong
 * here, as new variants of LatencyDistribution (types.ts) drawn by this function.
 */
export function drawSolveMs(d: LatencyDistribution, random: () => number): number {
  return d.minMs + random() * Math.max(0, d.maxMs - d.minMs);
}
