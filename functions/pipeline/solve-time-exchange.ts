import { randomInt } from 'node:crypto';
import {
  type AttributeValue,
  type DynamoDBClient,
  PutItemCommand,
  QueryCommand,
} from '@aws-sdk/client-dynamodb';
import type { SolveTimeInterval } from '../captchaai/solve-time-summary.js';
import { CAPTCHA_TYPES, type CaptchaType } from '../captchaai/types.js';

/**
 * Execution environments share the solve times they have seen, so a learned poll schedule
 * (../captchaai/poll-schedule.ts) rests on the whole plan's recent answers instead of the few
 * dozen one environment reads in a run (with 20 slots and 400 records, about 20 each: the
 * schedule would stay near its cold start for most of the run).
 *
 * The solve-times table holds one partition (`pk` = "solve-times") of at most
 * `slots` × CAPTCHA types small items, `sk` = "<type>#<slot>". Each environment picks a slot at
 * random when it starts and, at most once per `everyMs`, writes its last `share` answers of each
 * type there (one PutItem per type it has answers of) and reads the partition (one Query of a
 * few KB). Two environments on one slot overwrite each other's item; the next exchange writes
 * it again, so the partition stays bounded whatever the number of environments, and no read
 * is a scan. Items older than `maxAgeMs` are ignored (a plan that changed, environments long
 * gone) and expire through the table's TTL. The exchange runs beside a record's work, never in
 * its way: the worker starts it with the batch and awaits it at the end, and a failed exchange
 * only means this environment learns from its own answers until the next one.
 */

export const SOLVE_TIMES_PARTITION = 'solve-times';

/** The exchange's defaults (unscaled ms; the worker multiplies `everyMs` by its time scale). */
export const SOLVE_TIME_EXCHANGE_DEFAULTS = {
  everyMs: 15_000,
  maxAgeMs: 600_000,
  slots: 32,
  share: 64,
  keep: 256,
} as const;

export interface SolveTimeExchangeOptions {
  client: DynamoDBClient;
  tableName: string;
  /** This environment's id (its own items are skipped when reading). */
  environment: string;
  /** The learned schedule whose answers are shared and which hears the others'. */
  schedule: {
    types(): CaptchaType[];
    recentObservations(type: CaptchaType, max: number): SolveTimeInterval[];
    setPeerObservations(type: CaptchaType, intervals: readonly SolveTimeInterval[]): void;
  };
  /** Shortest wall-clock time between two exchanges. @default 15,000 */
  everyMs?: number;
  /** Shared items older than this are ignored. @default 600,000 */
  maxAgeMs?: number;
  /** Items per type (environments share them by slot). @default 32 */
  slots?: number;
  /** Own answers shared per type. @default 64 */
  share?: number;
  /** Others' answers kept per type, an even part of each item. @default 256 */
  keep?: number;
  now?: () => number;
}

export interface ExchangeResult {
  /** Items written (one per type this environment has answers of). */
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

export class SolveTimeExchange {
  readonly #o: Required<Omit<SolveTimeExchangeOptions, 'now'>> & { now: () => number };
  readonly #slot: number;
  #lastAt = Number.NEGATIVE_INFINITY;
  #running: Promise<ExchangeResult | undefined> | undefined;

  constructor(o: SolveTimeExchangeOptions) {
    this.#o = { ...SOLVE_TIME_EXCHANGE_DEFAULTS, now: Date.now, ...o };
    this.#slot = randomInt(this.#o.slots);
  }

  /**
   * Exchanges when `everyMs` have passed since the last one (and none is running); resolves to
   * undefined when it was not due. Rejects when a call fails; the caller logs and goes on.
   */
  maybeExchange(): Promise<ExchangeResult | undefined> {
    const now = this.#o.now();
    if (this.#running || now - this.#lastAt < this.#o.everyMs) return Promise.resolve(undefined);
    this.#lastAt = now;
    this.#running = this.#exchange(now).finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  async #exchange(now: number): Promise<ExchangeResult> {
    const { client, tableName, environment, schedule, share } = this.#o;
    let written = 0;
    for (const type of schedule.types()) {
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
      written += 1;
    }
    const peers = new Map<CaptchaType, SolveTimeInterval[][]>();
    let read = 0;
    let startKey: Record<string, AttributeValue> | undefined;
    // At most slots × types items of about 1 KB: one page, two at most.
    do {
      const page = await client.send(
        new QueryCommand({
          TableName: tableName,
          KeyConditionExpression: 'pk = :pk',
          ExpressionAttributeValues: { ':pk': { S: SOLVE_TIMES_PARTITION } },
          ExclusiveStartKey: startKey,
        }),
      );
      for (const item of page.Items ?? []) {
        const type = (item.sk?.S ?? '').split('#')[0] as CaptchaType;
        if (!CAPTCHA_TYPES.includes(type)) continue;
        if (item.environment?.S === environment) continue;
        const updatedAt = Number(item.updated_at?.N);
        if (!(now - updatedAt <= this.#o.maxAgeMs)) continue;
        const intervals = decodeIntervals(item.intervals?.S ?? '');
        read += intervals.length;
        if (intervals.length > 0) peers.set(type, [...(peers.get(type) ?? []), intervals]);
      }
      startKey = page.LastEvaluatedKey;
    } while (startKey);
    for (const [type, items] of peers) schedule.setPeerObservations(type, evenShare(items, this.#o.keep));
    return { written, read };
  }
}
