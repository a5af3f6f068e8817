import type { PollScheduleMode } from '../functions/captchaai/poll-schedule.js';
import type { CaptchaType } from '../functions/captchaai/types.js';
import { ConfigError } from '../functions/common/errors.js';
import { DEFAULTS, workerMemoryMbFor } from '../functions/common/settings.js';
import { capCeiling, MAX_MAPPING_MAX_CONCURRENCY } from '../functions/pipeline/cap-policy.js';
import { MAX_LANES } from '../functions/pipeline/lanes.js';
import { type FormExpectation, parseFormExpectation } from '../functions/records/form-verdict.js';
import { parseAllowlist, parseDnsServers } from '../functions/target/allowlist.js';
import { worstCaseRecordMs } from '../functions/worker/worst-case.js';
import { readInteger, readList, readNumber, readPerType, readString } from './config-readers.js';
import {
  type LogLevel,
  readCostSettings,
  readMonitoring,
  type TableEncryptionChoice,
} from './operating-settings.js';

/**
 * threadgate's deploy-time settings. Each one can be given as CDK context
 * (`cdk deploy -c reserve=2`, or `"context"` in cdk.json) or as a stack prop; props win.
 * Context values arrive as strings from the command line and as JSON values from cdk.json,
 * so every reader accepts both. Every error names the setting it is about.
 */
export interface ThreadgateConfig {
  /** CloudFormation stack name; also prefixes the function names. @default 'Threadgate' */
  readonly stackName: string;
  /** Plan threads kept free for anything else using the same CaptchaAI key. @default 1 */
  readonly reserve: number;
  /** Cap deployed before the cap adjuster's first run (reserved concurrency and mapping maximum). @default 4 */
  readonly initialCap: number;
  /** The adjuster never sets the cap below this (>= 1; a cap of 0 is a pause, not a cap). @default 1 */
  readonly minCap: number;
  /**
   * The adjuster never sets the cap above this (at most 1000 × lanes: the knobs hold r ≤ 1000, the
   * mapping's MaximumConcurrency limit, and each invocation runs up to `lanes` lanes). A plan above
   * it leaves threads idle, logged and counted (metric CapClampedByMax). @default 1000 × lanes
   */
  readonly maxCap: number;
  /** Target hosts the worker may contact: exact host or `*.suffix`, an optional `:port` is ignored. @default [] (none) */
  readonly allowedHosts: readonly string[];
  /** DNS servers (`ip` or `ip:port`) that resolve target hosts instead of Lambda's resolver, reachable from the internet (ThreadgateProps.dnsServers). @default [] (the system resolver) */
  readonly dnsServers: readonly string[];
  /** CaptchaAI base URL. @default 'https://ocr.captchaai.com' */
  readonly captchaaiUrl: string;
  /** Name of the Secrets Manager secret holding the API key (created outside the stack). @default 'threadgate/captchaai-api-key' */
  readonly secretName: string;
  /** Multiplies every CaptchaAI wait, deadline and HTTP timeout of the client; below 1 the worker's waits between tries of an AWS call too, floored at 50 ms (tests and the local stack use e.g. 0.01). @default 1 */
  readonly timeScale: number;
  /** Timeout of each HTTP call to the target form, in ms (real time, not scaled). @default 15000 */
  readonly targetTimeoutMs: number;
  /** How long a record that hit the CaptchaAI deadline keeps its slot, in ms (real time, not scaled). @default 60000 */
  readonly cooldownMs: number;
  /**
   * Wait between two res.php polls of one task, in ms (multiplied by timeScale), per CAPTCHA type;
   * one number sets every type (`-c pollIntervalMs=3000`, or `'{"turnstile":1500}'`). A shorter
   * wait frees a thread sooner after its answer is ready at the cost of more res.php calls (see
   * the benchmark's "poll granularity"). @default 3000 for reCAPTCHA, 2000 for Turnstile and image
   */
  readonly pollIntervalMs: Record<CaptchaType, number>;
  /** Wait between the submit and the first res.php poll, in ms, per CAPTCHA type (like pollIntervalMs). @default 15000 for reCAPTCHA, 5000 for Turnstile and image */
  readonly firstPollMs: Record<CaptchaType, number>;
  /** Most res.php polls for one task on the static schedule; the last one is kept for the deadline (2..19). @default 17 */
  readonly pollBudget: number;
  /**
   * `learned`: each worker environment places its polls from the solve times it has seen, per
   * CAPTCHA type, within `pollMeanBudget`; `static`: the schedule of firstPollMs, pollIntervalMs
   * and pollBudget, pinned (functions/captchaai/poll-schedule.ts). @default learned
   */
  readonly pollSchedule: PollScheduleMode;
  /** Mean res.php calls per solve the learned schedule may spend (1..19). @default 12 */
  readonly pollMeanBudget: number;
  /**
   * Worker memory in MB (128..10240). Lambda sizes V8's heap and the CPU share from it, and bills
   * GB-s by it; the default rests on the worker's peak RSS and CPU measured as Lambda runs it with
   * one, 8, 16, 32 and 64 lanes (docs/benchmark-notes.md "Worker memory"). @default 168 with one lane; more with lanes (functions/common/settings.ts workerMemoryMbFor)
   */
  readonly workerMemoryMb: number;
  /**
   * How long after its start a worker invocation keeps taking the next message from the queue
   * itself, one record at a time, the next task submitted as soon as the previous answer is in
   * hand (its POST and final write run beside it), in seconds (0..900; 0: one record per
   * invocation). The default timeout adds it to the worst case of one record, within Lambda's
   * 900 s; what the timeout leaves above the worst case bounds it. @default 120 × timeScale
   */
  readonly chainSeconds: number;
  /**
   * The most lanes one worker invocation may run (1..64): one-task loops side by side in one
   * invocation (capacity × parallelism). With k > 1 the cap is carried by r invocations of L lanes,
   * r × L ≤ cap (functions/pipeline/lanes.ts): reserved concurrency and the mapping's maximum hold
   * r, so the Lambda duration bill and the concurrency quota fall by about L. The trade: an OOM, a
   * crash or a timeout of one invocation touches up to 2L records. Lanes need the chain
   * (`chainSeconds` > 0): lanes beyond the first take their messages with it. @default 1
   */
  readonly lanes: number;
  /** Worker function timeout in seconds. @default the worst case of one record (see {@link worstCaseAttemptMs}) plus chainSeconds, at least 10, at most 900 */
  readonly workerTimeoutSeconds: number;
  /** Receives before SQS moves a message to the DLQ (>= 5). @default 5 */
  readonly maxReceiveCount: number;
  /** Receives after which the worker stops retrying a transient failure and records it (< maxReceiveCount). @default 3 */
  readonly transientReceiveLimit: number;
  /** How long an in-progress claim on a record stays valid, in seconds (> workerTimeoutSeconds). @default workerTimeoutSeconds + 10% (at least +5) */
  readonly leaseSeconds: number;
  /**
   * Visibility timeout of the jobs queue, in seconds (>= workerTimeoutSeconds): how long a message
   * an invocation took stays hidden, and so how soon the message of an invocation that died comes
   * back. @default 6 × workerTimeoutSeconds (AWS's guidance for an SQS event source)
   */
  readonly visibilityTimeoutSeconds: number;
  /** Alarm threshold for the age of the oldest queued job, in seconds. @default 3600 */
  readonly oldestMessageAlarmSeconds: number;
  /** Log retention of both functions, in days (one of CloudWatch Logs' allowed values). @default 30 */
  readonly logRetentionDays: number;
  /**
   * Log level of every function (Powertools' POWERTOOLS_LOG_LEVEL): DEBUG, INFO, WARN or ERROR.
   * Below INFO the worker's per-record line is gone (the bench reads it). @default 'INFO'
   */
  readonly logLevel: LogLevel;
  /**
   * Days an outcome row is kept after its last write (a DynamoDB TTL on `expires_at`); 0 keeps
   * rows for ever. A record_key sent again after its row expired is solved again. @default 0
   */
  readonly outcomeRetentionDays: number;
  /**
   * The tables' encryption at rest: `aws-managed` (the `aws/dynamodb` KMS key, visible in KMS and
   * CloudTrail, KMS requests billed) or `aws-owned` (a key DynamoDB owns, no KMS charge). @default 'aws-managed'
   */
  readonly tableEncryption: TableEncryptionChoice;
  /**
   * Seconds the outcome stream's mapping gathers records before it invokes the publisher (0–300):
   * fewer publisher invocations and SendMessageBatch calls, outcomes later by up to this. @default 0
   */
  readonly outcomeStreamBatchingSeconds: number;
  /** SNS topic ARN that alarms notify; none when unset. @default undefined */
  readonly alarmTopicArn: string | undefined;
  /**
   * Publish every final outcome to an outcomes queue (the table's stream → a small Lambda →
   * SQS). `-c outcomeStream=false` leaves out the queue, the Lambda and the table's stream. @default true
   */
  readonly outcomeStream: boolean;
  /**
   * The stack's default `expect` block: how the worker tells from the form's answer that it
   * accepted a record, for jobs without an `expect` of their own (a job's block replaces it
   * whole; `"expect": {}` on a job opts out). A JSON object on the command line
   * (`-c expect='{"body_excludes":["verification failed"]}'`). @default undefined (2xx/3xx = submitted)
   */
  readonly expect: FormExpectation | undefined;
}

/** Raw inputs: context strings, cdk.json values or typed props. */
export type ThreadgateSettings = { readonly [K in keyof ThreadgateConfig]?: unknown };

export const SETTING_NAMES: readonly (keyof ThreadgateConfig)[] = [
  'stackName',
  'reserve',
  'initialCap',
  'minCap',
  'maxCap',
  'allowedHosts',
  'dnsServers',
  'captchaaiUrl',
  'secretName',
  'timeScale',
  'targetTimeoutMs',
  'cooldownMs',
  'pollIntervalMs',
  'firstPollMs',
  'pollBudget',
  'pollSchedule',
  'pollMeanBudget',
  'chainSeconds',
  'lanes',
  'workerTimeoutSeconds',
  'workerMemoryMb',
  'maxReceiveCount',
  'transientReceiveLimit',
  'leaseSeconds',
  'visibilityTimeoutSeconds',
  'oldestMessageAlarmSeconds',
  'logRetentionDays',
  'alarmTopicArn',
  'outcomeStream',
  'logLevel',
  'outcomeRetentionDays',
  'tableEncryption',
  'outcomeStreamBatchingSeconds',
  'expect',
];

export type { LogLevel, TableEncryptionChoice } from './operating-settings.js';

/** Every default lives in functions/common/settings.ts, shared with the functions, the CLI and the local stack. */
export { DEFAULTS };

/** Lambda's limit on a function timeout. */
export const LAMBDA_MAX_TIMEOUT_SECONDS = 900;
/** SQS's limit on a visibility timeout (12 hours). */
export const SQS_MAX_VISIBILITY_SECONDS = 43_200;
/** AWS: the queue's visibility timeout should be at least six times the function timeout. */
export const VISIBILITY_TIMEOUT_FACTOR = 6;
/** Smallest default worker timeout: cold start, secret read and DynamoDB calls do not scale with timeScale. */
export const MIN_WORKER_TIMEOUT_SECONDS = 10;

/**
 * The longest one record can keep the worker busy, in ms, at these settings: every call the
 * worker can make for one record (functions/worker/worst-case.ts, where each part is named).
 * CaptchaAI waits scale with `timeScale`; HTTP timeouts are floored in real time as the worker
 * floors them; the waits between AWS tries scale too, floored (functions/common/aws-clients.ts);
 * the AWS calls' timeouts, target timeouts, the cool-down and setup are real time.
 */
export function worstCaseAttemptMs(t: Pick<Timings, 'timeScale' | 'targetTimeoutMs' | 'cooldownMs'>): number {
  return worstCaseRecordMs({
    timeScale: t.timeScale,
    targetTimeoutMs: t.targetTimeoutMs,
    cooldownMs: t.cooldownMs,
  });
}

/** Reads and validates every setting; throws ConfigError naming the first bad one. */
export function resolveConfig(input: ThreadgateSettings = {}): ThreadgateConfig {
  const stackName = readStackName(input);
  const endpoints = readEndpoints(input);
  const timings = readTimings(input);
  const { workerTimeoutSeconds, chainSeconds } = readWorkerTimeout(input, timings);
  const lanes = readLanes(input, chainSeconds);
  const caps = readCaps(input, lanes.lanes);
  const redelivery = readRedelivery(input, workerTimeoutSeconds);
  const visibilityTimeoutSeconds = readVisibilityTimeout(input, workerTimeoutSeconds);
  const monitoring = readMonitoring(input);
  const costs = readCostSettings(input);
  return {
    stackName,
    reserve: caps.reserve,
    initialCap: caps.initialCap,
    minCap: caps.minCap,
    maxCap: caps.maxCap,
    ...endpoints,
    ...timings,
    workerTimeoutSeconds,
    chainSeconds,
    ...lanes,
    ...redelivery,
    visibilityTimeoutSeconds,
    ...monitoring,
    ...costs,
    expect: parseFormExpectation(input.expect, 'expect'),
  };
}

/** Lanes, and the worker memory that goes with them unless set (functions/common/settings.ts). */
function readLanes(
  input: ThreadgateSettings,
  chainSeconds: number,
): Pick<ThreadgateConfig, 'lanes' | 'workerMemoryMb'> {
  const lanes = readInteger(input, 'lanes', 1, { min: 1, max: MAX_LANES });
  if (lanes > 1 && chainSeconds <= 0) {
    throw new ConfigError(
      'lanes',
      `lanes above 1 take their messages with the chain: set chainSeconds above 0 (lanes ${lanes})`,
    );
  }
  const workerMemoryMb = readInteger(input, 'workerMemoryMb', workerMemoryMbFor(lanes), {
    min: 128,
    max: 10_240,
  });
  return { lanes, workerMemoryMb };
}

function readStackName(input: ThreadgateSettings): string {
  const stackName = readString(input, 'stackName', DEFAULTS.stackName);
  // Function names are `${stackName}-cap-adjuster` (<= 64 chars) and the stack name must be a valid CFN name.
  if (!/^[A-Za-z][A-Za-z0-9-]{0,49}$/.test(stackName)) {
    throw new ConfigError(
      'stackName',
      `must start with a letter and contain only letters, digits and hyphens (at most 50 characters), got "${stackName}"`,
    );
  }
  return stackName;
}

/** The reserve and the cap's bounds and starting value; maxCap's default and ceiling follow the lanes. */
function readCaps(
  input: ThreadgateSettings,
  lanes: number,
): Pick<ThreadgateConfig, 'reserve' | 'minCap' | 'maxCap' | 'initialCap'> {
  const reserve = readInteger(input, 'reserve', DEFAULTS.reserve, { min: 0, max: 10_000 });
  const minCap = readInteger(input, 'minCap', DEFAULTS.minCap, { min: 1, max: 1000 });
  const ceiling = capCeiling(lanes);
  const maxCap = readInteger(input, 'maxCap', ceiling, { min: 1 });
  if (maxCap > ceiling) {
    throw new ConfigError(
      'maxCap',
      `must be <= ${ceiling} (${MAX_MAPPING_MAX_CONCURRENCY} invocations, the mapping's limit, × lanes ${lanes}), got ${maxCap}`,
    );
  }
  if (minCap > maxCap) throw new ConfigError('minCap', `must be <= maxCap (${maxCap}), got ${minCap}`);
  const initialCap = readInteger(
    input,
    'initialCap',
    Math.min(Math.max(DEFAULTS.initialCap, minCap), maxCap),
    { min: 1, max: ceiling },
  );
  if (initialCap < minCap || initialCap > maxCap) {
    throw new ConfigError(
      'initialCap',
      `must be between minCap (${minCap}) and maxCap (${maxCap}), got ${initialCap}`,
    );
  }
  return { reserve, minCap, maxCap, initialCap };
}

/** Where the worker may go: the target allowlist, CaptchaAI's URL and the key's secret. */
function readEndpoints(
  input: ThreadgateSettings,
): Pick<ThreadgateConfig, 'allowedHosts' | 'dnsServers' | 'captchaaiUrl' | 'secretName'> {
  const allowedHosts = readList(input, 'allowedHosts');
  // The worker's own parser: synth accepts exactly the entries the worker will start with.
  parseAllowlist(allowedHosts, 'allowedHosts');
  const dnsServers = readList(input, 'dnsServers');
  parseDnsServers(dnsServers, 'dnsServers');

  const captchaaiUrl = readString(input, 'captchaaiUrl', DEFAULTS.captchaaiUrl).replace(/\/+$/, '');
  let parsedUrl: URL;
  try {
    parsedUrl = new URL(captchaaiUrl);
  } catch {
    throw new ConfigError('captchaaiUrl', `must be an absolute http(s) URL, got "${captchaaiUrl}"`);
  }
  if (parsedUrl.protocol !== 'https:' && parsedUrl.protocol !== 'http:') {
    throw new ConfigError('captchaaiUrl', `must be an http(s) URL, got "${captchaaiUrl}"`);
  }

  const secretName = readString(input, 'secretName', DEFAULTS.secretName);
  if (!/^[A-Za-z0-9/_+=.@-]{1,512}$/.test(secretName)) {
    throw new ConfigError(
      'secretName',
      `must be 1-512 characters of letters, digits and /_+=.@- (a secret name, not an ARN), got "${secretName}"`,
    );
  }
  return { allowedHosts, dnsServers, captchaaiUrl, secretName };
}

type Timings = Pick<
  ThreadgateConfig,
  | 'timeScale'
  | 'targetTimeoutMs'
  | 'cooldownMs'
  | 'pollIntervalMs'
  | 'firstPollMs'
  | 'pollBudget'
  | 'pollSchedule'
  | 'pollMeanBudget'
>;

/** The time scale, the target's timeout, the cool-down and the polling schedule. */
function readTimings(input: ThreadgateSettings): Timings {
  const timeScale = readNumber(input, 'timeScale', DEFAULTS.timeScale, { min: 0.0001, max: 10 });
  const targetTimeoutMs = readInteger(input, 'targetTimeoutMs', DEFAULTS.targetTimeoutMs, {
    min: 100,
    max: 120_000,
  });
  const cooldownMs = readInteger(input, 'cooldownMs', DEFAULTS.cooldownMs, { min: 0, max: 600_000 });
  const pollIntervalMs = readPerType(input, 'pollIntervalMs', DEFAULTS.pollIntervalMs, {
    min: 500,
    max: 60_000,
  });
  const firstPollMs = readPerType(input, 'firstPollMs', DEFAULTS.firstPollMs, { min: 0, max: 120_000 });
  // Above 19 a key risks the block 2captcha-compatible services apply at about 20 polls per task.
  const pollBudget = readInteger(input, 'pollBudget', DEFAULTS.pollBudget, { min: 2, max: 19 });
  const pollSchedule = readString(input, 'pollSchedule', DEFAULTS.pollSchedule);
  if (pollSchedule !== 'learned' && pollSchedule !== 'static') {
    throw new ConfigError('pollSchedule', `must be "learned" or "static", got "${pollSchedule}"`);
  }
  const pollMeanBudget = readNumber(input, 'pollMeanBudget', DEFAULTS.pollMeanBudget, { min: 1, max: 19 });
  return {
    timeScale,
    targetTimeoutMs,
    cooldownMs,
    pollIntervalMs,
    firstPollMs,
    pollBudget,
    pollSchedule,
    pollMeanBudget,
  };
}

/**
 * The worker's timeout: it covers the worst-case attempt, within Lambda's and SQS's limits, plus
 * the chain's window when it fits; the chain gets what the timeout leaves above the worst case.
 */
function readWorkerTimeout(
  input: ThreadgateSettings,
  t: Timings,
): Pick<ThreadgateConfig, 'workerTimeoutSeconds' | 'chainSeconds'> {
  const { timeScale } = t;
  const neededSeconds = Math.ceil(worstCaseAttemptMs(t) / 1000);
  if (neededSeconds > LAMBDA_MAX_TIMEOUT_SECONDS) {
    throw new ConfigError(
      'timeScale',
      `the worst-case attempt (${neededSeconds} s) exceeds Lambda's ${LAMBDA_MAX_TIMEOUT_SECONDS} s limit; lower timeScale, targetTimeoutMs or cooldownMs`,
    );
  }
  const wantedChain = readNumber(input, 'chainSeconds', DEFAULTS.chainSeconds * timeScale, {
    min: 0,
    max: LAMBDA_MAX_TIMEOUT_SECONDS,
  });
  const workerTimeoutSeconds = readInteger(
    input,
    'workerTimeoutSeconds',
    Math.min(
      LAMBDA_MAX_TIMEOUT_SECONDS,
      Math.max(MIN_WORKER_TIMEOUT_SECONDS, neededSeconds + Math.ceil(wantedChain)),
    ),
    { min: 1, max: LAMBDA_MAX_TIMEOUT_SECONDS },
  );
  if (workerTimeoutSeconds < neededSeconds) {
    throw new ConfigError(
      'workerTimeoutSeconds',
      `must cover the worst-case attempt of ${neededSeconds} s at timeScale ${timeScale}, got ${workerTimeoutSeconds}`,
    );
  }
  const chainSeconds = Math.min(wantedChain, workerTimeoutSeconds - neededSeconds);
  return { workerTimeoutSeconds, chainSeconds: Math.round(chainSeconds * 1000) / 1000 };
}

/** The jobs queue's visibility timeout: at least the worker timeout, AWS's 6 × by default. */
function readVisibilityTimeout(input: ThreadgateSettings, workerTimeoutSeconds: number): number {
  const visibilityTimeoutSeconds = readInteger(
    input,
    'visibilityTimeoutSeconds',
    Math.min(SQS_MAX_VISIBILITY_SECONDS, workerTimeoutSeconds * VISIBILITY_TIMEOUT_FACTOR),
    { min: 1, max: SQS_MAX_VISIBILITY_SECONDS },
  );
  if (visibilityTimeoutSeconds < workerTimeoutSeconds) {
    throw new ConfigError(
      'visibilityTimeoutSeconds',
      `must be at least workerTimeoutSeconds (${workerTimeoutSeconds}) so no message comes back while its invocation runs, got ${visibilityTimeoutSeconds}`,
    );
  }
  return visibilityTimeoutSeconds;
}

/** How often a message is received before redrive, and how long a claim lasts. */
function readRedelivery(
  input: ThreadgateSettings,
  workerTimeoutSeconds: number,
): Pick<ThreadgateConfig, 'maxReceiveCount' | 'transientReceiveLimit' | 'leaseSeconds'> {
  const maxReceiveCount = readInteger(input, 'maxReceiveCount', DEFAULTS.maxReceiveCount, {
    min: 5,
    max: 1000,
  });
  const transientReceiveLimit = readInteger(input, 'transientReceiveLimit', DEFAULTS.transientReceiveLimit, {
    min: 1,
    max: 1000,
  });
  if (transientReceiveLimit >= maxReceiveCount) {
    throw new ConfigError(
      'transientReceiveLimit',
      `must be below maxReceiveCount (${maxReceiveCount}) so the worker records the failure before SQS redrives the message, got ${transientReceiveLimit}`,
    );
  }
  const leaseSeconds = readInteger(
    input,
    'leaseSeconds',
    workerTimeoutSeconds + Math.max(5, Math.ceil(workerTimeoutSeconds / 10)),
    { min: 1, max: SQS_MAX_VISIBILITY_SECONDS },
  );
  if (leaseSeconds <= workerTimeoutSeconds) {
    throw new ConfigError(
      'leaseSeconds',
      `must exceed workerTimeoutSeconds (${workerTimeoutSeconds}) so no claim expires while its invocation runs, got ${leaseSeconds}`,
    );
  }
  return { maxReceiveCount, transientReceiveLimit, leaseSeconds };
}

/** Collects every known setting from a context getter (e.g. `(k) => app.node.tryGetContext(k)`). */
export function settingsFromContext(get: (key: string) => unknown): ThreadgateSettings {
  const out: Record<string, unknown> = {};
  for (const name of SETTING_NAMES) {
    const value = get(name);
    if (value !== undefined) out[name] = value;
  }
  return out;
}
