import seedrandom from 'seedrandom';

/**
 * Which requests a stand-in's fault hits: every Nth matching request, or each one at a seeded
 * random rate, optionally only for some record keys, optionally at most a number of times. The
 * CaptchaAI stand-in's lost answers (local/standins/captchaai/faults.ts) and the target's dropped
 * POSTs (local/standins/target.ts) draw through this, so a test or the chaos run can say exactly
 * which request loses its answer, and a seeded run repeats.
 */
export interface FaultSchedule {
  /** Every Nth matching request (the Nth, 2Nth, …). */
  every?: number;
  /** Or: each matching request with this probability (0..1), drawn from `seed`. */
  rate?: number;
  /** Seed of the rate's random source. @default 1 */
  seed?: number | string;
  /** Only requests for these record keys. */
  keys?: string[];
  /** At most this many hits. @default unlimited */
  limit?: number;
}

export interface FaultDraw {
  /** Whether this request (for `key`, when known) is hit; counts it. */
  hit(key?: string): boolean;
  /** Matching requests seen and hits so far. */
  counts(): { seen: number; hits: number };
}

export function checkSchedule(name: string, s: unknown): FaultSchedule {
  if (typeof s !== 'object' || s === null || Array.isArray(s))
    throw new RangeError(`${name} must be an object`);
  const o = s as Record<string, unknown>;
  for (const field of Object.keys(o)) {
    if (!['every', 'rate', 'seed', 'keys', 'limit'].includes(field))
      throw new RangeError(`${name}: unknown field "${field}"`);
  }
  const positive = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 1;
  if (o.every !== undefined && !positive(o.every))
    throw new RangeError(`${name}.every must be an integer >= 1`);
  if (o.limit !== undefined && !(positive(o.limit) || o.limit === 0))
    throw new RangeError(`${name}.limit must be an integer >= 0`);
  if (o.rate !== undefined && !(typeof o.rate === 'number' && o.rate >= 0 && o.rate <= 1))
    throw new RangeError(`${name}.rate must be between 0 and 1`);
  if ((o.every === undefined) === (o.rate === undefined))
    throw new RangeError(`${name} needs exactly one of every or rate`);
  if (o.keys !== undefined && !(Array.isArray(o.keys) && o.keys.every((k) => typeof k === 'string')))
    throw new RangeError(`${name}.keys must be a list of record keys`);
  if (o.seed !== undefined && typeof o.seed !== 'number' && typeof o.seed !== 'string')
    throw new RangeError(`${name}.seed must be a number or a string`);
  return o as FaultSchedule;
}

export function faultDraw(schedule: FaultSchedule): FaultDraw {
  const random = seedrandom(String(schedule.seed ?? 1));
  const keys = schedule.keys ? new Set(schedule.keys) : undefined;
  let seen = 0;
  let hits = 0;
  return {
    hit(key) {
      if (keys && (key === undefined || !keys.has(key))) return false;
      seen += 1;
      if (schedule.limit !== undefined && hits >= schedule.limit) return false;
      const hit =
        schedule.every !== undefined ? seen % schedule.every === 0 : random() < (schedule.rate ?? 0);
      if (hit) hits += 1;
      return hit;
    },
    counts: () => ({ seen, hits }),
  };
}
