import type { CaptchaType } from '../../../functions/captchaai/types.js';
import type { Logged } from '../event-log.js';
import type { HostileKind } from '../hostile-reply.js';
import type { CaptchaEvent, LostAnswerFaults, LostAnswerKind } from './wire.js';

/** The CaptchaAI stand-in's contract: its options, faults, control requests, stats and handle (local/standins/captchaai/standin.ts and its parts). */

import type { LatencyDistribution } from './latency.js';

export type { LatencyDistribution } from './latency.js';
export { DEFAULT_LATENCY } from './latency.js';

/** Probabilities (0..1) of each fault, drawn per request (per task for unsolvable / neverFinish). */
export interface FaultRates {
  /** The task ends as ERROR_CAPTCHA_UNSOLVABLE after its latency. */
  unsolvable: number;
  /** in.php / res.php get answer a 502 HTML page. */
  html502: number;
  /** in.php / res.php get answer `ERROR_SERVER_ERROR` as plain text, even with json=1. */
  plainTextError: number;
  /** The answer is delayed by `slowMs`. */
  slow: number;
  /** The connection is closed without an answer. */
  drop: number;
  /** The task never finishes; it releases its thread after `abandonAfterMs`. */
  neverFinish: number;
  /** in.php / res.php get answer `IP_BANNED` as plain text. */
  ipBanned: number;
  /** in.php / res.php get answer HTTP 429 with an HTML page (a proxy's rate limit). */
  http429: number;
  /** in.php / res.php get answer `ERROR_TOO_MUCH_REQUESTS` (JSON with json=1, else plain text). */
  tooManyRequests: number;
}

export interface StandinOptions {
  /** 0 = ephemeral. @default 0 */
  port?: number;
  /** @default 127.0.0.1 */
  host?: string;
  /** Plan threads. */
  threads: number;
  /** The one valid API key (replaceable while running: `setApiKey`, `POST /control {"apiKey"}`). */
  apiKey: string;
  /** Multiplies every latency, delay and token lifetime (a lifetime no lower than `tokenLifetimeFloorMs`). @default 1 */
  timeScale?: number;
  /**
   * Real milliseconds a scaled token lifetime never drops below (functions/captchaai/timings.ts
   * scaledTokenLifetimeMs; the worker checks the same). 0 scales lifetimes all the way down.
   * @default MIN_SCALED_TOKEN_LIFETIME_MS (30 s)
   */
  tokenLifetimeFloorMs?: number;
  /** Per-type solve latency. @default DEFAULT_LATENCY */
  latency?: Partial<Record<CaptchaType, LatencyDistribution>>;
  /** @default all 0 */
  faults?: Partial<FaultRates>;
  /** in.php answers lost after the task was created (wire.ts). @default none */
  lostAnswers?: LostAnswerFaults;
  /** A never-finishing task releases its thread after this (scaled). @default ABANDON_AFTER_MS */
  abandonAfterMs?: number;
  /** Delay of a `slow` answer (scaled). @default 20000 */
  slowMs?: number;
  /** How in.php's JSON carries the task id: CaptchaAI sends both forms. @default 'mixed' (alternates) */
  taskIdAs?: 'string' | 'number' | 'mixed';
  /** Random source for latencies and faults. @default Math.random */
  random?: () => number;
}

/** A canned answer that replaces the next in.php or res.php `get` answer (tests script rare replies with it). */
export interface InjectedReply {
  /** @default 200 */
  status?: number;
  /** @default '' */
  body?: string;
  /** @default text/plain */
  contentType?: string;
  /** Close the connection instead of answering. */
  drop?: boolean;
  /** Answer after this long (scaled). */
  delayMs?: number;
  /** Answer like a broken peer instead: a 50 MiB body, an endless body, or headers and then nothing. */
  hostile?: HostileKind;
}

export type InjectableEndpoint = 'in.php' | 'res.php';

export interface StandinStats {
  threads: number;
  /** Tasks holding a thread now. */
  inFlight: number;
  /** The most tasks that ever held threads at once (since start or reset). */
  maxInFlight: number;
  /** in.php requests received, whatever their answer. */
  submits: number;
  submitsByPageurl: Record<string, number>;
  /** in.php requests per recognized CAPTCHA type. */
  submitsByType: Record<string, number>;
  /** res.php `get` requests received. */
  polls: number;
  /** Error answers sent, per code (`HTML_502`, `DROPPED` for faults without a code). */
  errors: Record<string, number>;
  zeroBalance: number;
  solved: number;
  /** Thread-milliseconds held by tasks since start or reset (the plan's busy thread-time). */
  busyThreadMs: number;
  keyRevoked: boolean;
  planActive: boolean;
  /**
   * in.php and res.php requests per key, keyed by `keyFingerprint(key)` so that neither the
   * stats nor a log of them ever holds a key (tests compute the fingerprint of the key they ask about).
   */
  requestsByKey: Record<string, number>;
  /** in.php answers lost after their task was created, by kind (the tasks hold threads like any other). */
  lostAnswers: Record<LostAnswerKind, number>;
}

export interface ControlRequest {
  threads?: number;
  /** Makes this 32-character key the valid one; every other key answers ERROR_KEY_DOES_NOT_EXIST. */
  apiKey?: string;
  keyRevoked?: boolean;
  planActive?: boolean;
  faults?: Partial<FaultRates>;
  lostAnswers?: LostAnswerFaults;
  /** Solve-time distributions per type (latency.ts), e.g. `{"recaptcha_v2":{"kind":"lognormal","medianMs":12000,"sigma":0.4}}`. */
  latency?: Partial<Record<CaptchaType, LatencyDistribution>>;
  inject?: Partial<Record<InjectableEndpoint, InjectedReply[]>>;
}

export interface CaptchaStandin {
  url: string;
  port: number;
  setThreads(n: number): void;
  setKeyRevoked(v: boolean): void;
  /** Makes `key` the one valid key (a rotation at CaptchaAI: the old key stops working at once). */
  setApiKey(key: string): void;
  setPlanActive(v: boolean): void;
  setFaults(f: Partial<FaultRates>): void;
  /** Sets (null: clears) the kinds of lost in.php answers named. */
  setLostAnswers(f: LostAnswerFaults): void;
  /** The wire log after `since` (0: all kept). */
  events(since?: number): { next: number; dropped: number; entries: Logged<CaptchaEvent>[] };
  /** Replaces the solve-time distributions of the types named (tasks submitted from now on). */
  setLatency(l: Partial<Record<CaptchaType, LatencyDistribution>>): void;
  /** The solve-time distribution of every type now. */
  latency(): Record<CaptchaType, LatencyDistribution>;
  /** Queues canned answers for the next requests to `endpoint` (res.php: `action=get` only). */
  inject(endpoint: InjectableEndpoint, replies: InjectedReply[]): void;
  stats(): StandinStats;
  /** When each in.php request for this pageurl arrived (epoch ms, since start or reset). */
  submitTimes(pageurl: string): number[];
  resetStats(): void;
  close(): Promise<void>;
}
