import { randomInt } from 'node:crypto';
import {
  type AttributeValue,
  type DynamoDBClient,
  PutItemCommand,
  QueryCommand,
} from '@aws-sdk/client-dynamodb';
import type { SolveTimeInterval } from '../captchaai/solve-time-summary.js';
import { DEFAULT_TIMINGS } from '../captchaai/timings.js';
import { CAPTCHA_TYPES, type CaptchaType } from '../captchaai/types.js';

/**
 * Execution environments share the solve times they have seen, so a learned poll schedule
 * (../captchaai/poll-schedule.ts) rests on the whole plan's recent answers instead of the few
 * dozen one environment reads in a run (with 20 slots and 400 records, about 20 each: the
 * schedule would stay near its cold start for most of the run).
 *
 * The solve-times table holds one partition (`pk` = "solve-times") of at most
 * `slots` × CAPTCHA types small items, `sk` = "<type>#<slot>". Each environment picks a slot at
 * random when it starts and, at most once per `everyMs` (`settledEveryMs` once it has made
 * `youngExchanges` exchanges; both widened when many peers share: PEERS_PER_PERIOD), reads the partition (one Query) and writes its last `share`
 * answers of a type there (one PutItem of under 1 KB, one write unit) when enough of them are
 * new: `firstShare` answers for the type's first item, `shareEvery` new ones since its last. A
 * PutItem for each type at every exchange cost up to 3.4 write units per solve, more than half
 * the record's own row; shared every 16 answers the exchange costs 1/16 of a write unit per
 * solve, plus one per type in each environment's life (its first share). No write merely
 * refreshes an item: an environment that answers a type slowly lets its item age out, and the
 * others' items speak for the type. Two environments on one slot overwrite each other's item;
 * their next writes share again, so the partition stays bounded whatever the number of
 * environments, and no read is a scan. Items older than `maxAgeMs` are ignored (a plan that
 * changed, environments long gone) and expire through the table's TTL. The exchange runs beside
 * a record's work, never in its way: the worker starts it with the batch and awaits it at the
 * end, and a failed exchange only means this environment learns from its own answers until the
 * next one.
 */

export const SOLVE_TIMES_PARTITION = 'solve-times';

/**
 * The least time between two exchanges of one environment, in real ms, at any time scale. An
 * exchange is a Query of the whole partition (up to 32 × 4 items of about 1 KB) and the PutItems
 * due, whose cost is real time, not CaptchaAI time: scaled down with the local stack's 0.01, one
 * came beside every record, and moto spent about 160 ms of its one Python thread on each Query,
 * most of what it served in the e2e suite and the load run. At time scale 1 the period is 15 s
 * for an environment's first 8 exchanges (its first two minutes, when the others' answers help
 * most), then 60 s: a full partition is about 128 KB, 16 read units a Query, which every 15 s came
 * to more read units per solve at 20 one-lane threads than the record's own writes cost.
 */
export const MIN_EXCHANGE_EVERY_MS = 5_000;

/** The worker's period between two exchanges at a time scale: `everyMs` scaled, never below MIN_EXCHANGE_EVERY_MS. */
export function exchangeEveryMs(timeScale: number): number {
  return Math.max(MIN_EXCHANGE_EVERY_MS, SOLVE_TIME_EXCHANGE_DEFAULTS.everyMs * timeScale);
}

/** The exchange's defaults (unscaled ms; the worker scales `everyMs` with exchangeEveryMs). */
export const SOLVE_TIME_EXCHANGE_DEFAULTS = {
  everyMs: 15_000,
  settledEveryMs: 60_000,
  youngExchanges: 8,
  maxAgeMs: 600_000,
  slots: 32,
  share: 64,
  keep: 256,
  firstShare: 4,
  shareEvery: 16,
  maxSolveMs: DEFAULT_TIMINGS.deadlineMs,
} as const;

/**
 * An item is read as written by an environment of this stack, and refused whole otherwise: its
 * `sk` names a CAPTCHA type and a slot below `slots`, its `updated_at` is neither older than
 * `maxAgeMs` nor later than now plus CLOCK_SKEW_MS, and it holds at most `share` intervals, each
 * within 0..`maxSolveMs`. A crafted or corrupted item can then weigh no more than one honest
 * environment's answers, and never for longer than the age limit.
 */
export const CLOCK_SKEW_MS = 5_000;
/**
 * Environments one period serves: with more peers fresh in the partition, an environment's period
 * widens in proportion (never beyond half of `maxAgeMs`, so its items never age out between two
 * of its writes), and the fleet's Query rate stays about PEERS_PER_PERIOD ÷ the period whatever
 * its size. Each Query reads every peer's items, so a fleet of n environments each querying every
 * period read n² items per period: 50 one-lane environments of a local load run (cap 50) made 10
 * Queries a second in their first minute, and the emulator, at about 160 ms a Query, answered
 * nothing else in time (AWS calls timing out, records ending in the DLQ). On AWS the read units
 * grow the same way. More peers also mean more answers in each read, so less often loses little.
 */
export const PEERS_PER_PERIOD = 8;

/** Query pages read per exchange (the partition holds at most slots × types items: one page). */
export const MAX_QUERY_PAGES = 2;

export interface SolveTimeExchangeOptions {
  client: DynamoDBClient;
  tableName: string;
  /** This environment's id (its own items are skipped when reading). */
  environment: string;
  /** The learned schedule whose answers are shared and which hears the others'. */
  schedule: {
    types(): CaptchaType[];
    /** Answers of a type this environment observed since it started. */
    answers(type: CaptchaType): number;
    recentObservations(type: CaptchaType, max: number): SolveTimeInterval[];
    setPeerObservations(type: CaptchaType, intervals: readonly SolveTimeInterval[]): void;
  };
  /** Shortest wall-clock time between two of the first `youngExchanges` exchanges. @default 15,000 */
  everyMs?: number;
  /** Shortest wall-clock time between two exchanges after those. @default 4 × everyMs */
  settledEveryMs?: number;
  /** Exchanges made every `everyMs` before the period becomes `settledEveryMs`. @default 8 */
  youngExchanges?: number;
  /**
   * The first exchange comes at a random moment within this many ms of the start, so
   * environments started together (a cold fleet, a load run) do not all query at once.
   * @default 0 (the first call exchanges)
   */
  firstWithinMs?: number;
  /** Shared items older than this are ignored. @default 600,000 */
  maxAgeMs?: number;
  /** Items per type (environments share them by slot). @default 32 */
  slots?: number;
  /** Own answers shared per type. @default 64 */
  share?: number;
  /** Others' answers kept per type, an even part of each item. @default 256 */
  keep?: number;
  /** Answers of a type before its first item is written. @default 4 */
  firstShare?: number;
  /** New answers of a type that make its item worth writing again. @default 16 */
  shareEvery?: number;
  /** The longest solve time an item may hold (unscaled ms). @default 120,000 (the task deadline) */
  maxSolveMs?: number;
  now?: () => number;
}

export interface ExchangeResult {
  /** Items written (one per type with enough new answers). */
  written: number;
  /** Answers read from other environments, all types. */
  read: number;
}

/** Intervals as one compact string: "low-high,low-high" in whole unscaled ms. */
export function encodeIntervals(intervals: readonly SolveTimeInterval[]): string {
  return intervals.map((o) => `${Math.round(o.lowMs)}-${Math.round(o.highMs)}`).join(',');
}

/** The inverse of encodeIntervals; malformed pairs are skipped (an item is never trusted). */
export function decodeIntervals(text: string): SolveTimeInterval[] {
  const out: SolveTimeInterval[] = [];
  for (const pair of text.split(',')) {
    const m = /^(\d{1,9})-(\d{1,9})$/.exec(pair);
    if (!m) continue;
    const lowMs = Number(m[1]);
    const highMs = Number(m[2]);
    if (highMs >= lowMs) out.push({ lowMs, highMs });
  }
  return out;
}

/**
 * At most about `keep` of the answers several environments shared, an even part of each one's
 * latest, so no one environment outweighs the rest.
 */
export function evenShare(items: readonly SolveTimeInterval[][], keep: number): SolveTimeInterval[] {
  const each = Math.ceil(keep / Math.max(1, items.length));
  return items.flatMap((intervals) => intervals.slice(-each));
}

/** The answers of one shared item, or undefined when the item is refused (see CLOCK_SKEW_MS). */
export function readSharedItem(
  item: Record<string, AttributeValue>,
  now: number,
  o: Pick<Required<SolveTimeExchangeOptions>, 'maxAgeMs' | 'slots' | 'share' | 'maxSolveMs'>,
): { type: CaptchaType; environment: string; intervals: SolveTimeInterval[] } | undefined {
  const sk = /^([a-z0-9_]+)#(\d{1,4})$/.exec(item.sk?.S ?? '');
  const type = sk?.[1] as CaptchaType | undefined;
  if (!sk || !type || !CAPTCHA_TYPES.includes(type) || Number(sk[2]) >= o.slots) return undefined;
  const updatedAt = Number(item.updated_at?.N);
  if (!(updatedAt <= now + CLOCK_SKEW_MS && now - updatedAt <= o.maxAgeMs)) return undefined;
  const intervals = decodeIntervals(item.intervals?.S ?? '');
  if (intervals.length > o.share || intervals.some((i) => i.highMs > o.maxSolveMs)) return undefined;
  return { type, environment: item.environment?.S ?? '', intervals };
}

export class SolveTimeExchange {
  readonly #o: Required<Omit<SolveTimeExchangeOptions, 'now'>> & { now: () => number };
  readonly #slot: number;
  #lastAt: number;
  /** Other environments with fresh items at the last exchange. */
  #peers = 0;
  /** Exchanges that failed in a row. */
  #failures = 0;
  /** Exchanges started so far. */
  #exchanges = 0;
  #running: Promise<ExchangeResult | undefined> | undefined;
  /** The types the last exchange gave peers to. */
  #peerTypes = new Set<CaptchaType>();
  /** Per type, the answers counted when its item was last written. */
  readonly #shared = new Map<CaptchaType, number>();

  constructor(o: SolveTimeExchangeOptions) {
    this.#o = {
      ...SOLVE_TIME_EXCHANGE_DEFAULTS,
      now: Date.now,
      ...o,
      firstWithinMs: o.firstWithinMs ?? 0,
      settledEveryMs:
        o.settledEveryMs ??
        ((o.everyMs ?? SOLVE_TIME_EXCHANGE_DEFAULTS.everyMs) * SOLVE_TIME_EXCHANGE_DEFAULTS.settledEveryMs) /
          SOLVE_TIME_EXCHANGE_DEFAULTS.everyMs,
    };
    this.#slot = randomInt(this.#o.slots);
    const jitter = Math.floor(this.#o.firstWithinMs);
    // The first exchange is due once `everyMs` has passed since #lastAt: a random moment within firstWithinMs.
    this.#lastAt =
      jitter > 0 ? this.#o.now() - this.#o.everyMs + randomInt(jitter + 1) : Number.NEGATIVE_INFINITY;
  }

  /** The period before the next exchange: young or settled, widened by the peers (PEERS_PER_PERIOD). */
  periodMs(): number {
    const base = this.#exchanges < this.#o.youngExchanges ? this.#o.everyMs : this.#o.settledEveryMs;
    // Each exchange that failed in a row doubles the period: a table that does not answer (an
    // emulator or a partition that has fallen behind) is not asked again at the same pace, which
    // only adds to what keeps it behind. The first success restores it.
    const factor = Math.max(1, this.#peers / PEERS_PER_PERIOD) * 2 ** Math.min(this.#failures, 10);
    return Math.max(base, Math.min(base * factor, this.#o.maxAgeMs / 2));
  }

  /** Whether the type's item is due: enough answers since its last (or for its first). */
  #due(type: CaptchaType): boolean {
    const last = this.#shared.get(type);
    const fresh = this.#o.schedule.answers(type) - (last ?? 0);
    return fresh >= (last === undefined ? this.#o.firstShare : this.#o.shareEvery);
  }

  /**
   * Exchanges when `everyMs` have passed since the last one (and none is running); resolves to
   * undefined when it was not due. Rejects when a call fails; the caller logs and goes on.
   */
  maybeExchange(): Promise<ExchangeResult | undefined> {
    const now = this.#o.now();
    if (this.#running || now - this.#lastAt < this.periodMs()) return Promise.resolve(undefined);
    this.#lastAt = now;
    this.#exchanges += 1;
    this.#running = this.#exchange(now)
      .then(
        (result) => {
          this.#failures = 0;
          return result;
        },
        (err: unknown) => {
          this.#failures += 1;
          throw err;
        },
      )
      .finally(() => {
        this.#running = undefined;
      });
    return this.#running;
  }

  async #exchange(now: number): Promise<ExchangeResult> {
    const { client, tableName, environment, schedule, share } = this.#o;
    let written = 0;
    for (const type of schedule.types()) {
      if (!this.#due(type)) continue;
      const answers = schedule.answers(type);
      const own = schedule.recentObservations(type, share);
      if (own.length === 0) continue;
      await client.send(
        new PutItemCommand({
          TableName: tableName,
          Item: {
            pk: { S: SOLVE_TIMES_PARTITION },
            sk: { S: `${type}#${this.#slot}` },
            environment: { S: environment },
            intervals: { S: encodeIntervals(own) },
            updated_at: { N: String(now) },
            expires_at: { N: String(Math.ceil((now + this.#o.maxAgeMs) / 1000) + 3600) },
          },
        }),
      );
      this.#shared.set(type, answers);
      written += 1;
    }
    const peers = new Map<CaptchaType, SolveTimeInterval[][]>();
    const environments = new Set<string>();
    let read = 0;
    let startKey: Record<string, AttributeValue> | undefined;
    // At most slots × types items of about 1 KB: one page; items and pages beyond are not read.
    let left = this.#o.slots * CAPTCHA_TYPES.length;
    for (let pages = 0; pages < MAX_QUERY_PAGES && left > 0; pages++) {
      const page = await client.send(
        new QueryCommand({
          TableName: tableName,
          KeyConditionExpression: 'pk = :pk',
          ExpressionAttributeValues: { ':pk': { S: SOLVE_TIMES_PARTITION } },
          ExclusiveStartKey: startKey,
          Limit: left,
        }),
      );
      for (const raw of page.Items ?? []) {
        left -= 1;
        const item = readSharedItem(raw, now, this.#o);
        if (!item || item.environment === environment || item.intervals.length === 0) continue;
        read += item.intervals.length;
        environments.add(item.environment);
        peers.set(item.type, [...(peers.get(item.type) ?? []), item.intervals]);
      }
      startKey = page.LastEvaluatedKey;
      if (!startKey) break;
    }
    for (const [type, items] of peers) schedule.setPeerObservations(type, evenShare(items, this.#o.keep));
    // A type no fresh item speaks for any more loses the peers it had: they age out too.
    for (const type of this.#peerTypes) if (!peers.has(type)) schedule.setPeerObservations(type, []);
    this.#peerTypes = new Set(peers.keys());
    this.#peers = environments.size;
    return { written, read };
  }
}
