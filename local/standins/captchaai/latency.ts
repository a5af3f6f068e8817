import { CAPTCHA_TYPES, type CaptchaType } from '../../../functions/captchaai/types.js';

/**
 * The CaptchaAI stand-in's solve-time distributions (before the time scale):
 * - uniform between `minMs` and `maxMs` (the default, and the form older callers pass);
 * - lognormal with a median and a sigma (the spread of ln t): most solve-time samples of real
 *   services look like it, a long right tail and nothing below zero;
 * - a mixture of two of them (a fast and a slow mode, e.g. two worker pools at the service).
 *
 * Every sample uses exactly one draw of the random source (inverse CDF), so a seed gives the same
 * sequence of draws whatever the distribution, and the uniform samples are the ones the stand-in
 * drew before distributions were added.
 */
export type LatencyDistribution =
  | { kind?: 'uniform'; minMs: number; maxMs: number }
  | { kind: 'lognormal'; medianMs: number; sigma: number }
  | { kind: 'mixture'; weight: number; first: LatencyDistribution; second: LatencyDistribution };

/** Modelled on CaptchaAI's published times: reCAPTCHA v2 under 60 s, Turnstile 5-15 s. */
export const DEFAULT_LATENCY: Record<CaptchaType, LatencyDistribution> = {
  recaptcha_v2: { minMs: 15_000, maxMs: 60_000 },
  recaptcha_v3: { minMs: 10_000, maxMs: 30_000 },
  recaptcha_enterprise: { minMs: 15_000, maxMs: 60_000 },
  turnstile: { minMs: 5_000, maxMs: 15_000 },
  image: { minMs: 2_000, maxMs: 10_000 },
};

/**
 * The standard normal quantile (Acklam's rational approximation, relative error < 1.2e-9).
 * Hand-written: the packages that carry one (simple-statistics' probit, @stdlib) are either
 * less accurate or far larger than these twenty lines.
 */
export function normalQuantile(p: number): number {
  if (!(p > 0 && p < 1)) return p <= 0 ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
  const a = [
    -39.69683028665376, 220.9460984245205, -275.9285104469687, 138.357751867269, -30.66479806614716,
    2.506628277459239,
  ];
  const b = [
    -54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572,
  ];
  const c = [
    -0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734, 4.374664141464968,
    2.938163982698783,
  ];
  const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
  const [a0, a1, a2, a3, a4, a5] = a as [number, number, number, number, number, number];
  const [b0, b1, b2, b3, b4] = b as [number, number, number, number, number];
  const [c0, c1, c2, c3, c4, c5] = c as [number, number, number, number, number, number];
  const [d0, d1, d2, d3] = d as [number, number, number, number];
  const low = 0.02425;
  if (p < low) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (
      (((((c0 * q + c1) * q + c2) * q + c3) * q + c4) * q + c5) /
      ((((d0 * q + d1) * q + d2) * q + d3) * q + 1)
    );
  }
  if (p > 1 - low) {
    const q = Math.sqrt(-2 * Math.log(1 - p));
    return (
      -(((((c0 * q + c1) * q + c2) * q + c3) * q + c4) * q + c5) /
      ((((d0 * q + d1) * q + d2) * q + d3) * q + 1)
    );
  }
  const q = p - 0.5;
  const r = q * q;
  return (
    ((((((a0 * r + a1) * r + a2) * r + a3) * r + a4) * r + a5) * q) /
    (((((b0 * r + b1) * r + b2) * r + b3) * r + b4) * r + 1)
  );
}

/** The standard normal CDF (Abramowitz–Stegun 7.1.26 through erf, absolute error < 1.5e-7). */
function normalCdf(z: number): number {
  const x = Math.abs(z) / Math.SQRT2;
  const t = 1 / (1 + 0.3275911 * x);
  const erf =
    1 -
    ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) *
      t *
      Math.exp(-x * x);
  return z >= 0 ? 0.5 * (1 + erf) : 0.5 * (1 - erf);
}

/** The solve time for one draw `u` in [0, 1) of the random source. */
export function sampleLatencyMs(d: LatencyDistribution, u: number): number {
  if (d.kind === 'lognormal') {
    const p = Math.min(1 - 1e-12, Math.max(1e-12, u));
    return d.medianMs * Math.exp(d.sigma * normalQuantile(p));
  }
  if (d.kind === 'mixture') {
    // One draw picks the mode and, rescaled within the mode's share, the time in it.
    return u < d.weight
      ? sampleLatencyMs(d.first, u / d.weight)
      : sampleLatencyMs(d.second, (u - d.weight) / (1 - d.weight));
  }
  return d.minMs + u * Math.max(0, d.maxMs - d.minMs);
}

export function meanLatencyMs(d: LatencyDistribution): number {
  if (d.kind === 'lognormal') return d.medianMs * Math.exp((d.sigma * d.sigma) / 2);
  if (d.kind === 'mixture')
    return d.weight * meanLatencyMs(d.first) + (1 - d.weight) * meanLatencyMs(d.second);
  return (d.minMs + d.maxMs) / 2;
}

/** P(solve time ≤ ms). */
export function latencyCdf(d: LatencyDistribution, ms: number): number {
  if (d.kind === 'lognormal') return ms <= 0 ? 0 : normalCdf(Math.log(ms / d.medianMs) / d.sigma);
  if (d.kind === 'mixture')
    return d.weight * latencyCdf(d.first, ms) + (1 - d.weight) * latencyCdf(d.second, ms);
  if (d.maxMs <= d.minMs) return ms >= d.minMs ? 1 : 0;
  return Math.min(1, Math.max(0, (ms - d.minMs) / (d.maxMs - d.minMs)));
}

/** A spec as the CLI writes it (seconds): `uniform:15,60`, `lognormal:25,0.4`, `mixture:0.7,lognormal:8,0.3+uniform:30,60`. */
export function formatLatency(d: LatencyDistribution): string {
  const s = (ms: number) => String(ms / 1000);
  if (d.kind === 'lognormal') return `lognormal:${s(d.medianMs)},${d.sigma}`;
  if (d.kind === 'mixture') return `mixture:${d.weight},${formatLatency(d.first)}+${formatLatency(d.second)}`;
  return `uniform:${s(d.minMs)},${s(d.maxMs)}`;
}

function numbers(spec: string, body: string, count: number): number[] {
  const parts = body.split(',').map((v) => Number(v.trim()));
  if (parts.length !== count || parts.some((v) => !Number.isFinite(v))) {
    throw new RangeError(`latency "${spec}": expected ${count} numbers separated by commas`);
  }
  return parts;
}

/** Parses one distribution spec (seconds; see formatLatency). A bad spec is a RangeError naming it. */
export function parseLatency(spec: string): LatencyDistribution {
  const colon = spec.indexOf(':');
  const kind = colon < 0 ? '' : spec.slice(0, colon).trim();
  const body = colon < 0 ? '' : spec.slice(colon + 1);
  if (kind === 'uniform') {
    const [min, max] = numbers(spec, body, 2) as [number, number];
    if (!(min >= 0 && max >= min)) throw new RangeError(`latency "${spec}": need 0 <= min <= max`);
    return { minMs: min * 1000, maxMs: max * 1000 };
  }
  if (kind === 'lognormal') {
    const [median, sigma] = numbers(spec, body, 2) as [number, number];
    if (!(median > 0 && sigma > 0 && sigma <= 3)) {
      throw new RangeError(`latency "${spec}": need median > 0 and 0 < sigma <= 3`);
    }
    return { kind: 'lognormal', medianMs: median * 1000, sigma };
  }
  if (kind === 'mixture') {
    const comma = body.indexOf(',');
    const weight = Number(body.slice(0, comma));
    const modes = body.slice(comma + 1).split('+');
    if (comma < 0 || !(weight > 0 && weight < 1) || modes.length !== 2) {
      throw new RangeError(
        `latency "${spec}": expected mixture:WEIGHT,<distribution>+<distribution> with 0 < WEIGHT < 1`,
      );
    }
    const [first, second] = modes.map((m) => parseLatency(m.trim())) as [
      LatencyDistribution,
      LatencyDistribution,
    ];
    if (first.kind === 'mixture' || second.kind === 'mixture') {
      throw new RangeError(`latency "${spec}": a mixture's modes are uniform or lognormal`);
    }
    return { kind: 'mixture', weight, first, second };
  }
  throw new RangeError(
    `latency "${spec}": expected uniform:MIN,MAX, lognormal:MEDIAN,SIGMA or mixture:W,<a>+<b> (seconds)`,
  );
}

/**
 * Parses the CLI's `--latency` values, each `TYPE=SPEC` (or `all=SPEC`), later ones winning.
 * Returns only the types named.
 */
export function parseLatencyOptions(
  values: readonly string[],
): Partial<Record<CaptchaType, LatencyDistribution>> {
  const out: Partial<Record<CaptchaType, LatencyDistribution>> = {};
  for (const value of values) {
    const eq = value.indexOf('=');
    if (eq < 0)
      throw new RangeError(`--latency "${value}": expected TYPE=SPEC, e.g. recaptcha_v2=lognormal:25,0.4`);
    const type = value.slice(0, eq).trim();
    let d: LatencyDistribution;
    try {
      d = parseLatency(value.slice(eq + 1).trim());
    } catch (err) {
      throw new RangeError(`--latency "${value}": ${err instanceof Error ? err.message : String(err)}`);
    }
    if (type === 'all') for (const t of CAPTCHA_TYPES) out[t] = d;
    else if ((CAPTCHA_TYPES as readonly string[]).includes(type)) out[type as CaptchaType] = d;
    else
      throw new RangeError(
        `--latency "${value}": unknown CAPTCHA type "${type}" (${CAPTCHA_TYPES.join(', ')} or all)`,
      );
  }
  return out;
}

/** Checks a distribution given over the control endpoint or from code. */
export function checkLatency(name: string, d: unknown): LatencyDistribution {
  const bad = (why: string) => new RangeError(`${name}: ${why}`);
  if (typeof d !== 'object' || d === null) throw bad('must be an object');
  const o = d as Record<string, unknown>;
  const num = (k: string) =>
    typeof o[k] === 'number' && Number.isFinite(o[k]) ? (o[k] as number) : Number.NaN;
  if (o.kind === 'lognormal') {
    if (!(num('medianMs') > 0 && num('sigma') > 0)) throw bad('lognormal needs medianMs > 0 and sigma > 0');
    return { kind: 'lognormal', medianMs: num('medianMs'), sigma: num('sigma') };
  }
  if (o.kind === 'mixture') {
    if (!(num('weight') > 0 && num('weight') < 1)) throw bad('mixture needs 0 < weight < 1');
    return {
      kind: 'mixture',
      weight: num('weight'),
      first: checkLatency(`${name}.first`, o.first),
      second: checkLatency(`${name}.second`, o.second),
    };
  }
  if (o.kind !== undefined && o.kind !== 'uniform') throw bad(`unknown kind "${String(o.kind)}"`);
  if (!(num('minMs') >= 0 && num('maxMs') >= num('minMs'))) throw bad('uniform needs 0 <= minMs <= maxMs');
  return { minMs: num('minMs'), maxMs: num('maxMs') };
}

/** How long a task takes to solve, drawn from its CAPTCHA type's distribution (one draw of `random`). */
export function drawSolveMs(d: LatencyDistribution, random: () => number): number {
  return sampleLatencyMs(d, random());
}
