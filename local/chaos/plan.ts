import type { AwsFaultRule } from '../emulator/fault-client.js';
import { type DeployedWorker, describeWorker } from '../stack/worker-shape.js';
import type { ChaosFigures } from './check.js';

/** The chaos run's settings, its fault draws and its report (pure; local/chaos/run.ts runs it). */

/** Probabilities of each fault kind. */
export interface ChaosRates {
  /** Per in.php: the task is created, the answer is a 502 HTML page. */
  lostHtml502: number;
  /** Per in.php: the task is created, the connection is closed without an answer. */
  lostDrop: number;
  /** Per in.php: the task is created, the answer comes after the client's timeout. */
  lostLate: number;
  /** Per form POST: the target takes it, then drops the connection before answering. */
  postDropped: number;
  /** Per record: its final `submitted` write fails 1–6 times at the emulator, or (one in five) every time. */
  finalWriteFails: number;
  /** Per DynamoDB UpdateItem: ProvisionedThroughputExceededException (the SDK retries these). */
  throttle: number;
  // The kinds below are optional so a caller's own rates (test/e2e/lease-expiry.test.ts) may leave them
  // out: left out, they are off.
  /** Per task: never answered, so its record ends POLL_TIMEOUT (the slot holds the cool-down). */
  neverFinish?: number;
  /** Per record: its `failed` write (POLL_TIMEOUT, SUBMIT_ANSWER_LOST, …) fails at the emulator on every try of one delivery. */
  timeoutWriteFails?: number;
  /**
   * Per GetItem of the state item (the pipeline state, with lanes the lane shape too: read before
   * every record at lanes 1, once per environment every 2 s × time scale with lanes):
   * ProvisionedThroughputExceededException.
   */
  stateThrottle?: number;
  /** 1: the API key is rotated once mid-run (the secret and CaptchaAI at once); the run resumes and redrives as an operator would. */
  keyRotation?: number;
  /** 1: crafted SolveTimes items are written at the start (too many points, a future date, a slot out of range). */
  poisonedItems?: number;
  /**
   * 1: the records go in two interleaved batches, and the second is cancelled (`threadgate cancel`)
   * once half of the records have ended.
   */
  cancelMidRun?: number;
  /** Per GetItem of a batch's cancel item (the workers' cancel reads): ProvisionedThroughputExceededException. */
  cancelReadFails?: number;
  /**
   * Share of the run's time the target's host name answers SERVFAIL at the DNS stand-in the
   * workers resolve through (outages of 0.5–2 s): host checks and page loads meet it.
   */
  dnsOutage?: number;
  /** Per SendMessage to the DLQ (a stop's or an invalid message's copy): InternalError. */
  dlqSendFails?: number;
}

export interface ChaosOptions {
  records: number;
  seed: number;
  timeScale: number;
  threads: number;
  reserve: number;
  rates: ChaosRates;
  /** Mean seconds between two runtime kills (exponential); 0 = none. */
  killMeanS: number;
  maxKills: number;
  /** The run's time bound after deploy, seconds. */
  maxSeconds: number;
  /** Deploy-time `lanes` (the most lanes one worker invocation runs); unset: the default, 1. */
  lanes?: number;
  /** Deploy-time `workerMemoryMb`; unset: its default, which follows `lanes`. */
  workerMemoryMb?: number;
  log: (line: string) => void;
  signal?: AbortSignal;
  /** Awaited once the stack is deployed, before any fault or record: a test's own moment to start. */
  startWhen?: Promise<void>;
}

export const CHAOS_RATE_NAMES = [
  'lostHtml502',
  'lostDrop',
  'lostLate',
  'postDropped',
  'finalWriteFails',
  'throttle',
  'neverFinish',
  'timeoutWriteFails',
  'stateThrottle',
  'keyRotation',
  'poisonedItems',
  'cancelMidRun',
  'cancelReadFails',
  'dnsOutage',
  'dlqSendFails',
] as const satisfies readonly (keyof ChaosRates)[];

export const CHAOS_DEFAULTS = {
  records: 200,
  seed: 1,
  timeScale: 0.01,
  threads: 8,
  reserve: 2,
  rates: {
    lostHtml502: 0.03,
    lostDrop: 0.03,
    lostLate: 0.03,
    postDropped: 0.03,
    finalWriteFails: 0.04,
    throttle: 0.02,
    neverFinish: 0.02,
    timeoutWriteFails: 0.5,
    stateThrottle: 0.03,
    keyRotation: 1,
    poisonedItems: 1,
    cancelMidRun: 1,
    cancelReadFails: 0.2,
    dnsOutage: 0.05,
    dlqSendFails: 0.3,
  } satisfies ChaosRates,
  killMeanS: 40,
  maxKills: 5,
  maxSeconds: 900,
} as const;

/** What was drawn and injected, counted where it landed (stand-ins, emulator). */
export interface FaultCounts {
  lostHtml502: number;
  lostDrop: number;
  lostLate: number;
  postDropped: number;
  /** Final writes the emulator failed, over `finalWriteRules` records chosen. */
  finalWriteFailed: number;
  finalWriteRules: number;
  throttled: number;
  kills: number;
  /** `failed` writes the emulator failed, over the records chosen (only those that fail are hit). */
  timeoutWriteFailed: number;
  /** State-item reads the emulator throttled. */
  stateThrottled: number;
  keyRotations: number;
  /** Pauses the run resumed (a stop on the old key while polling) and DLQ messages it redrove. */
  resumes: number;
  redriven: number;
  poisonedItems: number;
  /** The batch cancelled mid-run (1 when it was). */
  cancels: number;
  /** Cancel-item GetItems the emulator failed, of all it saw. */
  cancelReadsFailed: number;
  cancelReads: number;
  /** DNS queries for the target's name answered SERVFAIL, and the outages. */
  dnsServfails: number;
  dnsOutages: number;
  /** DLQ SendMessage calls the emulator failed, of all it saw. */
  dlqSendsFailed: number;
  dlqSends: number;
  /** DLQ messages without a reason attribute the run's operator found (and left; SQS moved them). */
  dlqWithoutReason: number;
}

/** `name=rate,…` → rates over the defaults; an unknown name or a rate outside 0..1 is an error naming it. */
export function parseRates(raw: string, base: ChaosRates = CHAOS_DEFAULTS.rates): ChaosRates {
  const rates: ChaosRates = { ...base };
  for (const part of raw.split(',').filter((p) => p.trim() !== '')) {
    const [name, value] = part.split('=').map((s) => s.trim());
    if (!(CHAOS_RATE_NAMES as readonly string[]).includes(name ?? ''))
      throw new RangeError(`unknown fault "${name}" (one of ${CHAOS_RATE_NAMES.join(', ')})`);
    const n = Number(value);
    if (value === undefined || value === '' || !(n >= 0 && n <= 1))
      throw new RangeError(`rate of ${name} must be within [0, 1], got ${value}`);
    rates[name as keyof ChaosRates] = n;
  }
  return rates;
}

/**
 * The emulator rules for the failed-write-after-a-timeout fault: each record is chosen with
 * `rate`; a chosen record's `failed` write fails 12–15 times in a row, more than one delivery's
 * tries (4 store tries of up to 3 SDK attempts), so the write throws and the record is retried.
 */
export function timeoutWriteFaults(keys: string[], rate: number, random: () => number): AwsFaultRule[] {
  const rules: AwsFaultRule[] = [];
  for (const key of keys) {
    if (!(rate > 0 && random() < rate)) continue;
    rules.push({
      operation: 'UpdateItem',
      service: 'dynamodb',
      key: { record_key: key },
      contains: ['":status":{"S":"failed"}'],
      times: 12 + Math.floor(random() * 4),
      error: 'InternalServerError',
    });
  }
  return rules;
}

/**
 * The emulator rules for the final-write fault: each record is chosen with `rate`; a chosen
 * record's `submitted` write fails 1–6 times in a row (the SDK's own three attempts absorb up to
 * two), or, for one in five, every time (the record must then end OUTCOME_UNKNOWN after its lease).
 */
export function finalWriteFaults(keys: string[], rate: number, random: () => number): AwsFaultRule[] {
  const rules: AwsFaultRule[] = [];
  for (const key of keys) {
    if (!(rate > 0 && random() < rate)) continue;
    const always = random() < 0.2;
    rules.push({
      operation: 'UpdateItem',
      service: 'dynamodb',
      key: { record_key: key },
      contains: ['":status":{"S":"submitted"}'],
      times: always ? 0 : 1 + Math.floor(random() * 6),
      error: random() < 0.5 ? 'ProvisionedThroughputExceededException' : 'InternalServerError',
    });
  }
  return rules;
}

function entries(r: Record<string, number>): string {
  const list = Object.entries(r).sort(([a], [b]) => a.localeCompare(b, 'en', { numeric: true }));
  return list.length ? list.map(([k, v]) => `${k}: ${v}`).join(', ') : 'none';
}

export function formatChaos(r: {
  seed: number;
  worker?: DeployedWorker;
  figures: ChaosFigures;
  faults: FaultCounts;
  violations: string[];
  elapsedS: number;
  logDir: string;
}): string {
  const f = r.figures;
  const d = r.faults;
  return [
    `seed           ${r.seed}`,
    ...(r.worker ? [`worker         ${describeWorker(r.worker)}`] : []),
    `records        ${f.records}`,
    `faults         in.php answers lost: 502 ${d.lostHtml502}, dropped ${d.lostDrop}, late ${d.lostLate}; POST answers dropped ${d.postDropped}; final writes failed ${d.finalWriteFailed} (${d.finalWriteRules} records); throttled ${d.throttled}; runtime kills ${d.kills}`,
    `               failed writes after a timeout ${d.timeoutWriteFailed}; state reads throttled ${d.stateThrottled}; key rotations ${d.keyRotations} (pauses resumed ${d.resumes}, DLQ redriven ${d.redriven}); poisoned SolveTimes items ${d.poisonedItems}`,
    `               batch cancels ${d.cancels}; cancel reads failed ${d.cancelReadsFailed} of ${d.cancelReads}; DNS SERVFAIL answers ${d.dnsServfails} (${d.dnsOutages} outages); DLQ sends failed ${d.dlqSendsFailed} of ${d.dlqSends}; DLQ messages without a reason ${d.dlqWithoutReason}`,
    `res.php        per task: mean ${f.resPhpPerTask.mean.toFixed(1)}, max ${f.resPhpPerTask.max} (${f.resPhpPerTask.tasks} tasks)`,
    `threads held   at most ${f.maxThreadsHeld} (cap ${f.cap}), counted by the CaptchaAI stand-in`,
    `in.php         ${f.inPhpTotal}; records by in.php count: ${entries(f.inPhpPerRecord)}`,
    `form POSTs     records by POST count: ${entries(f.postsPerRecord)}`,
    `outcomes       ${entries(f.outcomes)}; failed by reason: ${entries(f.failedReasons)}`,
    ...(f.cancel
      ? [
          `cancelled      batch of ${f.cancel.records}: ${entries(f.cancel.outcomes)}; after the cancel: in.php ${f.cancel.inPhpAfter}, POSTs ${f.cancel.postsAfter}`,
        ]
      : []),
    `dlq / queue    ${f.dlq} / ${f.queueLeft}`,
    `elapsed        ${r.elapsedS.toFixed(1)} s`,
    `logs           ${r.logDir}`,
    r.violations.length
      ? `VIOLATIONS\n${r.violations.map((v) => `  - ${v}`).join('\n')}`
      : 'no invariant broken',
    '',
  ].join('\n');
}
