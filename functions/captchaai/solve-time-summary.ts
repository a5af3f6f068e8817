/**
 * A small summary of the solve times one execution environment has seen for one CAPTCHA type,
 * and the distribution it implies.
 *
 * A poll schedule censors what it observes: an answer read at a poll was ready some time after
 * the poll before it (or after the submit, for the first poll), so each solve is known only as an
 * interval (lowMs, highMs]. The summary keeps the last `capacity` intervals (a ring of two numbers
 * each: a few KB, no table scan, no AWS call) and estimates the distribution of ready times on a
 * grid with Turnbull's self-consistency iteration (the nonparametric maximum-likelihood estimate
 * for interval-censored data; a few dozen EM passes over a few hundred intervals). Mass inside a
 * wide interval is spread where the other observations say it lies, or evenly when none do, so an
 * answer ready long before a late first poll still shows as mass before that poll: the schedule
 * built on it polls there, and the next observations narrow it down.
 *
 * Hand-written: no maintained npm package estimates interval-censored distributions; the
 * iteration is twenty lines.
 */

export interface SolveTimeInterval {
  /** The answer was not ready yet at this time since the submit (0: the submit). Unscaled ms. */
  lowMs: number;
  /** It was ready at this time (the poll that read it). Unscaled ms. */
  highMs: number;
}

export class SolveTimeSummary {
  readonly #capacity: number;
  readonly #low: Float64Array;
  readonly #high: Float64Array;
  #next = 0;
  #size = 0;
  #total = 0;

  constructor(capacity = 256) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be an integer >= 1`);
    this.#capacity = capacity;
    this.#low = new Float64Array(capacity);
    this.#high = new Float64Array(capacity);
  }

  /** Adds one observation; the oldest one goes once `capacity` are kept (the plan may change). */
  add(o: SolveTimeInterval): void {
    const low = Math.max(0, o.lowMs);
    const high = Math.max(low, o.highMs);
    this.#low[this.#next] = low;
    this.#high[this.#next] = high;
    this.#next = (this.#next + 1) % this.#capacity;
    this.#size = Math.min(this.#capacity, this.#size + 1);
    this.#total += 1;
  }

  /** Observations kept now. */
  get size(): number {
    return this.#size;
  }

  /** Observations ever added. */
  get total(): number {
    return this.#total;
  }

  /** The last `max` observations kept, oldest first (what an environment shares with others). */
  recent(max = this.#size): SolveTimeInterval[] {
    const n = Math.min(this.#size, Math.max(0, Math.floor(max)));
    const out: SolveTimeInterval[] = [];
    for (let k = n; k >= 1; k--) {
      const i = (this.#next - k + this.#capacity) % this.#capacity;
      out.push({ lowMs: this.#low[i] ?? 0, highMs: this.#high[i] ?? 0 });
    }
    return out;
  }

  intervals(): SolveTimeInterval[] {
    const out: SolveTimeInterval[] = [];
    for (let i = 0; i < this.#size; i++) out.push({ lowMs: this.#low[i] ?? 0, highMs: this.#high[i] ?? 0 });
    return out;
  }

  /**
   * The estimated probability that an answer is ready in each grid bin ((b·stepMs, (b+1)·stepMs],
   * b = 0..bins−1), summing to 1 (all zero with no observations). Observations past the grid
   * count in its last bin.
   */
  distribution(stepMs: number, bins: number, iterations = 40): Float64Array {
    const p = new Float64Array(bins);
    const n = this.#size;
    if (n === 0) return p;
    const first = new Int32Array(n);
    const last = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      const lo = this.#low[i] ?? 0;
      const hi = this.#high[i] ?? 0;
      // Bins whose interval overlaps (lo, hi]; a zero-width interval falls in the bin holding hi.
      const a = Math.min(bins - 1, Math.max(0, Math.floor(lo / stepMs)));
      const b = Math.min(bins - 1, Math.max(a, Math.ceil(hi / stepMs) - 1));
      first[i] = a;
      last[i] = b;
      for (let k = a; k <= b; k++) p[k] = (p[k] ?? 0) + 1 / (n * (b - a + 1));
    }
    const next = new Float64Array(bins);
    for (let it = 0; it < iterations; it++) {
      next.fill(0);
      for (let i = 0; i < n; i++) {
        const a = first[i] ?? 0;
        const b = last[i] ?? 0;
        let sum = 0;
        for (let k = a; k <= b; k++) sum += p[k] ?? 0;
        if (sum <= 0) {
          for (let k = a; k <= b; k++) next[k] = (next[k] ?? 0) + 1 / (n * (b - a + 1));
          continue;
        }
        for (let k = a; k <= b; k++) next[k] = (next[k] ?? 0) + (p[k] ?? 0) / (sum * n);
      }
      p.set(next);
    }
    return p;
  }
}

/**
 * A kernel-smoothed copy of a binned distribution: each bin's mass spread by a normal kernel
 * whose width grows with time (`baseMs` + `relative` × t), as solve times scatter in proportion to
 * their length. With a few dozen observations the raw estimate sits in the bins where polls
 * happened to fall; a schedule fitted to it would put the next polls exactly there and leave gaps
 * beside them.
 */
export function smoothDistribution(
  p: Float64Array,
  stepMs: number,
  o: { baseMs: number; relative: number },
): Float64Array {
  const bins = p.length;
  const out = new Float64Array(bins);
  for (let b = 0; b < bins; b++) {
    const mass = p[b] ?? 0;
    if (mass <= 0) continue;
    const center = (b + 0.5) * stepMs;
    const sigma = Math.max(stepMs / 2, o.baseMs + o.relative * center);
    const from = Math.max(0, Math.floor((center - 3 * sigma) / stepMs));
    const to = Math.min(bins - 1, Math.ceil((center + 3 * sigma) / stepMs));
    let norm = 0;
    for (let k = from; k <= to; k++) {
      const z = ((k + 0.5) * stepMs - center) / sigma;
      norm += Math.exp(-0.5 * z * z);
    }
    for (let k = from; k <= to; k++) {
      const z = ((k + 0.5) * stepMs - center) / sigma;
      out[k] = (out[k] ?? 0) + (mass * Math.exp(-0.5 * z * z)) / norm;
    }
  }
  return out;
}
