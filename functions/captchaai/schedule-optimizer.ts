/**
 * Where to place the res.php polls of one task, given the distribution of the time its answer
 * becomes ready: the schedule that minimizes the expected wait between an answer being ready and
 * the poll that reads it (time a slot holds while its CaptchaAI thread is already free), with at
 * most `maxPolls` calls per task (the last one at the deadline) and at most `meanBudget` calls per
 * solve on average.
 *
 * Dynamic programming on a grid of poll times: choosing the next poll after the one at time s
 * costs the wait of every answer ready in between, plus λ × P(ready > s) (that poll is made only
 * when the answer was not there at s). λ, the price of one call in milliseconds of wait, is found
 * by bisection as the smallest that keeps the expected calls within the mean budget; a flat price
 * per call, found the same way, then keeps the ceiling (a Lagrangian relaxation of both limits:
 * one O(grid²) pass per price, a few milliseconds). Hand-written: a textbook DP over a few hundred
 * grid points, no library fits it.
 */

export interface ScheduleProblem {
  /** Probability of the answer being ready in each grid bin (b·stepMs, (b+1)·stepMs]; sums to ≤ 1. */
  readonly mass: Float64Array;
  readonly stepMs: number;
  /** Most calls per task, the deadline's included. */
  readonly maxPolls: number;
  /** Most calls per solve on average (the answering call included). */
  readonly meanBudget: number;
  /** Shortest time between two polls of one task (and before the first). */
  readonly minGapMs: number;
}

export interface OptimizedSchedule {
  /** Poll times since the submit, unscaled ms, ascending; the last is the deadline (bins × stepMs). */
  pollsMs: number[];
  /** Expected res.php calls per solve under the distribution. */
  expectedCalls: number;
  /** Expected wait from ready to read, ms. */
  expectedWaitMs: number;
  /** The price of a call the bisection settled on (ms of wait). */
  lambdaMs: number;
}

interface Prefix {
  n: number;
  /** survival[i]: P(ready > i·step). */
  survival: Float64Array;
  mass: Float64Array;
  weighted: Float64Array;
}

function prefixes(p: ScheduleProblem): Prefix {
  const n = p.mass.length;
  const mass = new Float64Array(n + 1);
  const weighted = new Float64Array(n + 1);
  for (let b = 0; b < n; b++) {
    const m = p.mass[b] ?? 0;
    mass[b + 1] = (mass[b] ?? 0) + m;
    weighted[b + 1] = (weighted[b] ?? 0) + m * (b + 0.5) * p.stepMs;
  }
  const total = mass[n] ?? 0;
  const survival = new Float64Array(n + 1);
  // Nothing is known past the deadline: what is not ready by then counts as ready just before it.
  for (let i = 0; i <= n; i++) survival[i] = i === 0 ? 1 : Math.max(0, total - (mass[i] ?? 0));
  return { n, survival, mass, weighted };
}

/** Expected wait of the answers ready in (i·step, j·step], read at j·step. */
function waitCost(x: Prefix, step: number, i: number, j: number): number {
  return j * step * ((x.mass[j] ?? 0) - (x.mass[i] ?? 0)) - ((x.weighted[j] ?? 0) - (x.weighted[i] ?? 0));
}

/**
 * The best schedule when a call costs `lambda` × P(it is made) + `flat` ms of wait: grid indices
 * of the polls, and the schedule's expected calls and wait. One pass from the deadline back.
 */
function solveAt(
  p: ScheduleProblem,
  x: Prefix,
  lambda: number,
  flat: number,
): { polls: number[]; calls: number; wait: number } {
  const { n } = x;
  const step = p.stepMs;
  const gap = Math.max(1, Math.ceil(p.minGapMs / step - 1e-9));
  // Past the last bin with mass, a poll before the deadline's reads nothing: the DP stops there.
  let horizon = 0;
  for (let b = 0; b < n; b++) if ((p.mass[b] ?? 0) > 0) horizon = b + 1;
  const lastJ = Math.min(n - gap, horizon + gap);
  // best[i]: the least cost of everything after a poll at grid index i; next[i]: the poll after it.
  const best = new Float64Array(n + 1);
  const next = new Int32Array(n + 1).fill(n);
  for (let i = n - 1; i >= 0; i--) {
    const base = lambda * (x.survival[i] ?? 0) + flat;
    let b = base + waitCost(x, step, i, n);
    let at = n;
    for (let j = i + gap; j <= lastJ; j++) {
      const c = base + waitCost(x, step, i, j) + (best[j] ?? 0);
      if (c < b) {
        b = c;
        at = j;
      }
    }
    best[i] = b;
    next[i] = at;
  }
  const polls: number[] = [];
  let calls = 0;
  let wait = 0;
  for (let i = 0; ; ) {
    const j = next[i] ?? n;
    calls += x.survival[i] ?? 0;
    wait += waitCost(x, step, i, j);
    polls.push(j);
    if (j >= n) break;
    i = j;
  }
  return { polls, calls, wait };
}

/** The smallest price in [0, hi] whose schedule `fits`, by bisection (`fits(hi)` must hold). */
function cheapest<T>(hi: number, at: (price: number) => T, fits: (r: T) => boolean): { price: number; r: T } {
  const zero = at(0);
  if (fits(zero)) return { price: 0, r: zero };
  let lo = 0;
  let r = at(hi);
  for (let it = 0; it < 20 && hi - lo > 1; it++) {
    const mid = (lo + hi) / 2;
    const m = at(mid);
    if (fits(m)) {
      hi = mid;
      r = m;
    } else {
      lo = mid;
    }
  }
  return { price: hi, r };
}

export function optimizeSchedule(p: ScheduleProblem): OptimizedSchedule {
  if (!(p.stepMs > 0) || p.mass.length < 1)
    throw new RangeError('the schedule needs a grid of at least one bin');
  if (!(p.meanBudget >= 1)) throw new RangeError(`meanBudget must be >= 1, got ${p.meanBudget}`);
  const x = prefixes(p);
  const done = (r: { polls: number[]; calls: number; wait: number }, lambda: number): OptimizedSchedule => ({
    pollsMs: r.polls.map((j) => j * p.stepMs),
    expectedCalls: r.calls,
    expectedWaitMs: r.wait,
    lambdaMs: lambda,
  });
  // A call never needs to cost more than the whole deadline of wait.
  const top = x.n * p.stepMs;
  // λ (the price of a call, weighted by how often it is made) keeps the mean budget; then a flat
  // price per call, if needed, brings the schedule within the per-task ceiling.
  const mean = cheapest(
    top,
    (l) => solveAt(p, x, l, 0),
    (r) => r.calls <= p.meanBudget + 1e-9,
  );
  const ceiling = cheapest(
    top,
    (f) => solveAt(p, x, mean.price, f),
    (r) => r.polls.length <= Math.max(1, p.maxPolls),
  );
  return done(ceiling.r, mean.price);
}
