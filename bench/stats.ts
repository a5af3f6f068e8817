import {
  type LatencyDistribution,
  meanLatencyMs,
  sampleLatencyMs,
} from '../local/standins/captchaai/latency.js';

/**
 * The benchmark's arithmetic, kept pure so it can be unit tested: percentiles, time-weighted
 * means of sampled series, the steady-state window, efficiency and the expected cost of
 * polling for an answer at a fixed granularity.
 */

export interface Summary {
  count: number;
  mean: number;
  p50: number;
  p95: number;
  p99: number;
  min: number;
  max: number;
}

/**
 * The p-th percentile (0..100) by linear interpolation between the closest ranks (the
 * "type 7" rule of R and NumPy's default). NaN for no values.
 */
export function percentile(values: readonly number[], p: number): number {
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile must be within 0..100, got ${p}`);
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  const low = sorted[lo] as number;
  const high = sorted[hi] as number;
  return low + (high - low) * (rank - lo);
}

export function mean(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

export function summarize(values: readonly number[]): Summary {
  return {
    count: values.length,
    mean: mean(values),
    p50: percentile(values, 50),
    p95: percentile(values, 95),
    p99: percentile(values, 99),
    min: values.length ? Math.min(...values) : Number.NaN,
    max: values.length ? Math.max(...values) : Number.NaN,
  };
}

/** A sampled value that holds from `t` until the next sample (a step function). */
export interface Sample {
  t: number;
  v: number;
}

/**
 * Mean of a step function over [from, to]: each sample's value holds until the next sample's
 * time. Samples must be sorted by time; the window before the first sample counts as the
 * first sample's value. NaN for an empty window or no samples.
 */
export function timeWeightedMean(samples: readonly Sample[], from: number, to: number): number {
  if (samples.length === 0 || !(to > from)) return Number.NaN;
  let area = 0;
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i] as Sample;
    const start = i === 0 ? Math.min(s.t, from) : s.t;
    const end = i + 1 < samples.length ? (samples[i + 1] as Sample).t : Number.POSITIVE_INFINITY;
    const lo = Math.max(start, from);
    const hi = Math.min(end, to);
    if (hi > lo) area += s.v * (hi - lo);
  }
  return area / (to - from);
}

export interface Window {
  from: number;
  to: number;
  /** Completions inside (from, to]. */
  completed: number;
}

/**
 * The steady-state window: from the completion of the `lo` fraction of the records to that of
 * the `hi` fraction (default the 10th and 90th percentiles of completion times), which leaves
 * out the ramp-up (cold starts, the first solves) and the drain (fewer records than slots).
 */
export function steadyWindow(completionTimes: readonly number[], lo = 0.1, hi = 0.9): Window | undefined {
  if (!(lo >= 0 && hi <= 1 && lo < hi)) throw new RangeError(`need 0 <= lo < hi <= 1, got ${lo}, ${hi}`);
  const sorted = [...completionTimes].sort((a, b) => a - b);
  if (sorted.length < 2) return undefined;
  const first = Math.floor(lo * (sorted.length - 1));
  const last = Math.ceil(hi * (sorted.length - 1));
  const from = sorted[first] as number;
  const to = sorted[last] as number;
  if (!(to > from)) return undefined;
  return { from, to, completed: last - first };
}

/**
 * Throughput as a fraction of the limit the plan allows: `cap` threads each finishing one
 * solve per mean solve time can do at most cap ÷ meanSolve solves per unit of time.
 * Use one unit throughout (e.g. seconds for both `seconds` and `meanSolve`).
 */
export function efficiency(
  completed: number,
  seconds: number,
  cap: number,
  meanSolveSeconds: number,
): number {
  if (!(seconds > 0 && cap > 0 && meanSolveSeconds > 0)) return Number.NaN;
  return completed / seconds / (cap / meanSolveSeconds);
}

/** Mean solve time of a mix of CAPTCHA types, each with its latency distribution. */
export function mixMeanMs(
  mix: Readonly<Record<string, number>>,
  latency: Readonly<Record<string, LatencyDistribution>>,
): number {
  let total = 0;
  let weighted = 0;
  for (const [type, count] of Object.entries(mix)) {
    const d = latency[type];
    if (!d) throw new RangeError(`no latency distribution for CAPTCHA type "${type}"`);
    total += count;
    weighted += count * meanLatencyMs(d);
  }
  return total === 0 ? Number.NaN : weighted / total;
}

/**
 * When the client learns of an answer ready after `readyMs`: it polls first at `firstPollMs`
 * after the submit, then every `intervalMs`, so it sees the answer at the first poll at or
 * after `readyMs`.
 */
export function answerSeenAtMs(readyMs: number, firstPollMs: number, intervalMs: number): number {
  if (readyMs <= firstPollMs) return firstPollMs;
  if (!(intervalMs > 0)) return readyMs;
  return firstPollMs + Math.ceil((readyMs - firstPollMs) / intervalMs) * intervalMs;
}

/**
 * The mean time between an answer being ready and the client seeing it, for a latency drawn from
 * `d` (numerically, over `steps` quantiles). This is time a slot is held while the CaptchaAI
 * thread is already free again: the cost of polling at a fixed granularity.
 */
export function expectedPollWaitMs(
  d: LatencyDistribution,
  firstPollMs: number,
  intervalMs: number,
  steps = 10_000,
): number {
  let sum = 0;
  for (let i = 0; i < steps; i++) {
    const ready = sampleLatencyMs(d, (i + 0.5) / steps);
    sum += answerSeenAtMs(ready, firstPollMs, intervalMs) - ready;
  }
  return sum / steps;
}

/** Counts of events per time bucket and kind, for the outcomes-per-second chart. */
export function bucketCounts(
  events: readonly { t: number; kind: string }[],
  from: number,
  to: number,
  bucket: number,
): { t: number; counts: Record<string, number> }[] {
  if (!(bucket > 0)) throw new RangeError(`bucket must be > 0, got ${bucket}`);
  const n = Math.max(1, Math.ceil((to - from) / bucket));
  const out = Array.from({ length: n }, (_, i) => ({
    t: from + i * bucket,
    counts: {} as Record<string, number>,
  }));
  for (const e of events) {
    if (e.t < from || e.t > to) continue;
    const i = Math.min(n - 1, Math.floor((e.t - from) / bucket));
    const counts = (out[i] as { counts: Record<string, number> }).counts;
    counts[e.kind] = (counts[e.kind] ?? 0) + 1;
  }
  return out;
}

/** Rounds for reports: `digits` decimals, NaN and infinities become null (JSON has neither). */
export function round(v: number, digits = 3): number | null {
  if (!Number.isFinite(v)) return null;
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}

/** Busy thread-ms between two sample times ÷ (threads × the time between), from cumulative samples. */
export function busyShare(
  busy: readonly { t: number; ms: number }[],
  from: number,
  to: number,
  threads: number,
): number {
  if (!(to > from) || threads <= 0 || busy.length === 0) return Number.NaN;
  const at = (t: number) => {
    let last = busy[0] as { t: number; ms: number };
    for (const b of busy) {
      if (b.t > t) {
        // Linear between the two samples around t.
        const span = b.t - last.t;
        return span > 0 ? last.ms + ((b.ms - last.ms) * (t - last.t)) / span : b.ms;
      }
      last = b;
    }
    return last.ms;
  };
  return (at(to) - at(from)) / (threads * (to - from) * 1000);
}

/**
 * The whole run's loss (1 − busy share from the first submit to the last answer) split by phase,
 * each as idle plan-thread-time ÷ (threads × whole-run time), so the three add up to the loss:
 * ramp-up (first submit → cap tasks in flight together), between, and drain (from the last
 * task's start, after which no slot gets new work, to the last answer). Times in seconds.
 */
export function wholeRunLoss(
  busy: readonly { t: number; ms: number }[],
  threads: number,
  at: { firstSubmit: number; rampEnd: number; drainFrom: number; lastAnswer: number },
): { rampUp: number; between: number; drain: number; rampUpS: number; drainS: number } {
  const whole = at.lastAnswer - at.firstSubmit;
  const idle = (from: number, to: number) =>
    to > from ? ((1 - busyShare(busy, from, to, threads)) * (to - from)) / whole : 0;
  return {
    rampUp: idle(at.firstSubmit, at.rampEnd),
    between: idle(at.rampEnd, at.drainFrom),
    drain: idle(at.drainFrom, at.lastAnswer),
    rampUpS: at.rampEnd - at.firstSubmit,
    drainS: at.lastAnswer - at.drainFrom,
  };
}
