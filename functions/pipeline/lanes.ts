import { type Env, optionalNumber } from '../common/env.js';
import { ConfigError } from '../common/errors.js';

/**
 * Lanes: several one-task loops in one worker invocation (capacity × parallelism). With `lanes`
 * k > 1 the cap is carried by r invocations of L lanes each, r × L ≤ cap; the knobs (reserved
 * concurrency, the mapping's maximum) hold r, and the adjuster publishes {cap, r, L} in the state
 * item beside the pipeline state (./state-item.ts), which the worker reads with it in one GetItem.
 * An environment variable could not change under running environments; the item can.
 *
 * The arithmetic is here, once: the stack's first shape, the adjuster's moves, `threadgate
 * status` and the worker's lane count all use these functions.
 */

/** The most lanes one invocation may run (the deploy setting's range). */
export const MAX_LANES = 64;

/** How one cap is carried: r invocations (the knobs) of L lanes each. */
export interface LaneShape {
  /** Solves allowed at once (plan threads − reserve, clamped). */
  cap: number;
  /** Reserved concurrency and the mapping's maximum. */
  r: number;
  /** Lanes per invocation. */
  L: number;
}

/**
 * The shape of `cap` with at most `lanes` lanes per invocation. L first: the largest
 * L ≤ min(lanes, ⌊cap/2⌋) that leaves at most about 2 % of the cap unused (at least one thread
 * may be), then r = ⌊cap / L⌋. L ≤ ⌊cap/2⌋ keeps r ≥ 2 (the mapping's maximum cannot go below 2);
 * a cap of 1 (or lanes 1) is today's shape, r = cap, L = 1. Choosing r first (r = ⌈cap/k⌉) would
 * leave up to 12 % of a 1,000-thread plan idle.
 */
export function laneShape(cap: number, lanes: number): LaneShape {
  if (cap <= 1 || lanes <= 1) return { cap, r: cap, L: 1 };
  const allowedUnused = Math.max(1, Math.floor(cap * 0.02));
  for (let L = Math.min(lanes, Math.floor(cap / 2)); L > 1; L--) {
    const r = Math.floor(cap / L);
    if (cap - r * L <= allowedUnused) return { cap, r, L };
  }
  return { cap, r: cap, L: 1 };
}

/**
 * Solves allowed in flight when `invocations` may run (the knobs in force) with `shape`'s L lanes
 * each, never more than its cap: the one definition `threadgate status` and the adjuster report.
 */
export function solvesInForce(invocations: number, shape: LaneShape): number {
  return Math.min(invocations * shape.L, shape.cap);
}

/**
 * What the adjuster publishes (JSON in the state item's `shape`). `drain` is set for a while after
 * the invocation count came down (r fell): invocations that started before `startedBefore` may
 * still run, up to `fromR` of them, so they run at most `drain.L` lanes (r_old × L_drain ≤ cap)
 * until `until`, after which none of them can be running (the function timeout).
 */
export interface PublishedShape extends LaneShape {
  /** When this shape was published (epoch ms). */
  since: number;
  drain?: { L: number; fromR: number; startedBefore: number; until: number };
}

/**
 * Lanes an invocation that started at `startedAt` (epoch ms) may keep at `now`: L, or the drain's
 * L for an invocation older than the knobs' last fall.
 */
export function lanesAllowed(shape: PublishedShape, startedAt: number, now: number): number {
  const d = shape.drain;
  if (d && now < d.until && startedAt < d.startedBefore) return Math.min(d.L, shape.L);
  return shape.L;
}

/**
 * How long before the knobs' change an invocation counts as old: clocks of Lambda environments
 * and the adjuster differ by milliseconds; this keeps a borderline invocation on the safe side.
 */
export const DRAIN_CLOCK_MARGIN_MS = 2_000;

/**
 * How old the last published shape must be before the knobs rise: twice the longest time a worker
 * environment reuses its read of it (functions/pipeline/state-view.ts STATE_CACHE_MS, 2 s at
 * time scale 1), so no environment still runs a larger L than the one published.
 */
export const SHAPE_SETTLE_MS = 4_000;

/** One step of the adjuster toward `target`: what to publish, and the knobs (r) to write. */
export type ShapeStep =
  /** Write the knobs to `target.r` first (they fall), then publish `publish`. */
  | { kind: 'knobs-then-publish'; publish: PublishedShape }
  /** Publish first, then write the knobs (they rise, or stay). */
  | { kind: 'publish-then-knobs'; publish: PublishedShape }
  /**
   * A grow that needs fewer lanes: publish the smaller L with the knobs unchanged; the next run
   * raises r, once every environment has seen the smaller L.
   */
  | { kind: 'publish-only'; publish: PublishedShape };

/**
 * The adjuster's next step from the shape now published (`current`, undefined before the first)
 * to the shape of a new cap. `rInForce`: the knobs as they stand; `now` and `lifetimeMs` (the
 * worker's function timeout plus the margin) time the drain; `settleMs`: how long every
 * environment may keep an older shape in its cache (the knobs rise only once the last publish is
 * that old, so no environment still runs a larger L than the one published).
 */
export function nextShapeStep(o: {
  current: PublishedShape | undefined;
  target: LaneShape;
  rInForce: number | undefined;
  now: number;
  lifetimeMs: number;
  settleMs: number;
}): ShapeStep {
  const { target, now, current } = o;
  const rNow = o.rInForce ?? current?.r;
  const liveDrain = current?.drain && now < current.drain.until ? current.drain : undefined;
  const keepDrain = (L: number, cap: number) =>
    liveDrain ? { drain: { ...liveDrain, L: Math.min(L, Math.floor(cap / liveDrain.fromR)) } } : {};
  if (current && rNow !== undefined && target.r > rNow) {
    const settled = now - current.since >= o.settleMs;
    if (target.L < current.L || !settled) {
      // Raising r while some environments may still run a larger L could pass the cap: publish the
      // smaller L under today's r first; a later run raises r.
      const L = Math.min(target.L, current.L);
      return {
        kind: 'publish-only',
        publish: {
          cap: target.cap,
          r: rNow,
          L,
          since: L === current.L ? current.since : now,
          ...keepDrain(L, target.cap),
        },
      };
    }
  }
  if (rNow !== undefined && target.r < Math.max(rNow, current?.r ?? 0)) {
    // The knobs fall: invocations started before may still run, up to the highest r of their
    // lifetime, so they keep only as many lanes as that many invocations may hold.
    const fromR = Math.max(rNow, current?.r ?? 0, liveDrain?.fromR ?? 0);
    return {
      kind: 'knobs-then-publish',
      publish: {
        ...target,
        since: now,
        drain: {
          L: Math.min(target.L, Math.floor(target.cap / fromR)),
          fromR,
          startedBefore: now + DRAIN_CLOCK_MARGIN_MS,
          until: now + o.lifetimeMs,
        },
      },
    };
  }
  return {
    kind: 'publish-then-knobs',
    publish: { ...target, since: now, ...keepDrain(target.L, target.cap) },
  };
}

/** Whether two published shapes say the same (the adjuster writes only on a change). */
export function sameShape(a: PublishedShape | undefined, b: PublishedShape): boolean {
  if (!a) return false;
  const drainKey = (s: PublishedShape) =>
    s.drain ? `${s.drain.L}/${s.drain.fromR}/${s.drain.startedBefore}/${s.drain.until}` : '';
  return a.cap === b.cap && a.r === b.r && a.L === b.L && drainKey(a) === drainKey(b);
}

/** Reads a published shape; undefined when the value is missing or not a shape. */
export function parseShape(value: string | undefined): PublishedShape | undefined {
  if (!value) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    return undefined;
  }
  const s = parsed as Partial<PublishedShape>;
  const positive = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n) && n >= 0;
  if (!positive(s.cap) || !positive(s.r) || !positive(s.L) || s.L < 1) return undefined;
  const drain = s.drain;
  const drainOk =
    drain === undefined ||
    (positive(drain.L) &&
      positive(drain.fromR) &&
      typeof drain.startedBefore === 'number' &&
      typeof drain.until === 'number');
  if (!drainOk) return undefined;
  return {
    cap: s.cap,
    r: s.r,
    L: s.L,
    since: typeof s.since === 'number' ? s.since : 0,
    ...(drain ? { drain } : {}),
  };
}

/** Validates a `lanes` setting (deploy time and the functions' environment). */
export function checkLanes(value: number, name: string): number {
  if (!Number.isInteger(value) || value < 1 || value > MAX_LANES) {
    throw new ConfigError(name, `must be an integer from 1 to ${MAX_LANES}, got ${value}`);
  }
  return value;
}

/** The lane settings of a function's environment (the worker's and the adjuster's). */
export interface LaneSettings {
  /** The most lanes one worker invocation may run (LANES; 1: one task per invocation). */
  lanes: number;
  /**
   * With lanes above 1: the shape the stack deployed, that of INITIAL_CAP (since 0, long settled),
   * whose r the template gives the knobs. It stands until the adjuster publishes a shape: a new
   * stack writes no item at deploy (./state-item.ts).
   */
  firstShape?: PublishedShape;
}

/** Reads LANES alone (1 when unset); errors name the variable. */
export function readLaneCount(env: Env): number {
  return checkLanes(optionalNumber(env, 'LANES', 1, { min: 1, integer: true }), 'LANES');
}

/** The cap deployed (INITIAL_CAP), or undefined when unset. */
export function readFirstCap(env: Env): number | undefined {
  return env.INITIAL_CAP?.trim()
    ? optionalNumber(env, 'INITIAL_CAP', 1, { min: 1, integer: true })
    : undefined;
}

/** Reads LANES and, with lanes, INITIAL_CAP for the first shape; errors name the variable. */
export function readLaneSettings(env: Env): LaneSettings {
  const lanes = readLaneCount(env);
  if (lanes <= 1) return { lanes };
  const firstCap = readFirstCap(env);
  if (firstCap === undefined) {
    throw new ConfigError('INITIAL_CAP', `is required when LANES is above 1 (got ${lanes})`);
  }
  return { lanes, firstShape: { ...laneShape(firstCap, lanes), since: 0 } };
}
