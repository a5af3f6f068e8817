import { type PollScheduleSettings, readPollScheduleFromEnv } from '../captchaai/poll-schedule.js';
import {
  DEFAULT_TIMINGS,
  readTimingsFromEnv,
  resolveTimings,
  type SolveTimingsOverrides,
} from '../captchaai/timings.js';
import { type Env, optionalList, optionalNumber, optionalString, requireString } from '../common/env.js';
import { ConfigError } from '../common/errors.js';
import { DEFAULTS } from '../common/settings.js';
import { type LaneSettings, readFirstCap, readLaneSettings } from '../pipeline/lanes.js';
import { type FormExpectation, parseFormExpectation } from '../records/form-verdict.js';
import { type Allowlist, parseAllowlist, parseDnsServers } from '../target/allowlist.js';

/**
 * The worker's configuration, read once per instance from the environment the stack sets
 * (docs/design.md "Worker environment") and validated; errors name the variable.
 */
export interface WorkerConfig extends LaneSettings {
  tableName: string;
  queueUrl: string;
  queueArn: string;
  dlqUrl: string;
  captchaAiUrl: string;
  captchaAiSecretName: string;
  /** Multiplies CaptchaAI waits and token lifetimes (tests and the local stack use < 1). */
  timeScale: number;
  /** CaptchaAI waits overridden through CAPTCHAAI_POLL_INTERVAL_MS and friends (CaptchaAI's defaults otherwise). */
  captchaTimings: SolveTimingsOverrides;
  /** Learned or static poll schedule, its mean res.php budget and per-task ceiling (CAPTCHAAI_POLL_SCHEDULE and friends). */
  pollSchedule: PollScheduleSettings;
  allowlist: Allowlist;
  /** Lease of a claim. Must exceed the function timeout, so a killed invocation's record is not re-solved while it could still be running. */
  leaseMs: number;
  /** The jobs queue's visibility timeout, s (the mapping received the event with it); undefined when unset. */
  queueVisibilitySeconds?: number;
  /** Transient failures are retried while ApproximateReceiveCount is below this; keep it below the queue's maxReceiveCount. */
  transientReceiveLimit: number;
  /** Timeout of each HTTP exchange with the target site. */
  targetTimeoutMs: number;
  /** How long a record that hit the client deadline keeps its slot (not time-scaled). */
  cooldownMs: number;
  /** Visibility given to a message returned for a retry (transient error, record leased elsewhere), in seconds. */
  retryDelaySeconds: number;
  /** The worker's own function name (the pipeline pause finds its mapping by it). */
  functionName: string;
  /** Table through which environments share solve times (SOLVE_TIMES_TABLE; unset: each learns alone). */
  solveTimesTable?: string;
  /**
   * The slot ledger's table (LEDGER_TABLE; ../pipeline/ledger.ts): every invocation takes its lanes
   * there, so the cap holds after a crash; it also holds the state item, the pipeline state and
   * the lane shape the worker reads (../pipeline/state-item.ts).
   */
  ledgerTable: string;
  /** The cap deployed (INITIAL_CAP): the slot ledger's until the cap adjuster has written one. */
  firstCap?: number;
  /** Days a row is kept after its last write (OUTCOME_RETENTION_DAYS; unset: for ever). */
  outcomeRetentionDays?: number;
  /** DNS servers that resolve target hosts (DNS_SERVERS, `ip[:port]` list; empty: the system resolver). */
  dnsServers: string[];
  /**
   * How long after its start an invocation keeps taking the next message itself (CHAIN_SECONDS,
   * real time; 0: one batch per invocation). See ./chain.ts.
   */
  chainMs: number;
  /** The stack's default `expect` block (FORM_EXPECT, JSON), for jobs without their own. */
  formExpect?: FormExpectation;
}

/**
 * Calls to CaptchaAI are real network round trips: time scaling (tests, the local stack) must not
 * shrink their timeout below this. A submit whose answer comes after the timeout holds its slot
 * for the task's deadline and is then tried again (a second task for the record), so the floor
 * must sit well above a loopback answer on a loaded machine (at 0.3 s, 3 of 200 did not make it).
 * Every HTTP call counts at least this in the function timeout (worker/worst-case.ts), so it is
 * also what makes the local stack's leases long: 2 s, not more.
 */
export const MIN_CAPTCHAAI_HTTP_TIMEOUT_MS = 2_000;

export function readWorkerConfig(env: Env = process.env): WorkerConfig {
  const timeScale = optionalNumber(env, 'TIME_SCALE', DEFAULTS.timeScale, { min: 0.0001, max: 100 });
  const captchaTimings = readTimingsFromEnv(env).timings;
  const httpTimeoutMs = captchaTimings.httpTimeoutMs ?? DEFAULT_TIMINGS.httpTimeoutMs;
  // The client multiplies every timing by the time scale; undo that for the floor.
  captchaTimings.httpTimeoutMs = Math.max(httpTimeoutMs, MIN_CAPTCHAAI_HTTP_TIMEOUT_MS / timeScale);
  const allowedHosts = optionalList(env, 'ALLOWED_HOSTS');
  if (allowedHosts.length === 0) {
    throw new ConfigError('ALLOWED_HOSTS', 'is required: a comma list of target hosts (exact or *.suffix)');
  }
  const firstCap = readFirstCap(env);
  return {
    tableName: requireString(env, 'TABLE_NAME'),
    queueUrl: requireString(env, 'QUEUE_URL'),
    queueArn: requireString(env, 'QUEUE_ARN'),
    dlqUrl: requireString(env, 'DLQ_URL'),
    captchaAiUrl: optionalString(env, 'CAPTCHAAI_URL', DEFAULTS.captchaaiUrl),
    captchaAiSecretName: requireString(env, 'CAPTCHAAI_SECRET_NAME'),
    timeScale,
    // TIME_SCALE, not CAPTCHAAI_TIME_SCALE, scales the worker: only the waits are read here.
    captchaTimings,
    pollSchedule: readPollScheduleFromEnv(env),
    allowlist: parseAllowlist(allowedHosts),
    leaseMs: optionalNumber(env, 'LEASE_SECONDS', DEFAULTS.leaseSeconds, { min: 1, max: 43_200 }) * 1000,
    ...(env.QUEUE_VISIBILITY_SECONDS === undefined
      ? {}
      : {
          queueVisibilitySeconds: optionalNumber(env, 'QUEUE_VISIBILITY_SECONDS', 43_200, {
            min: 1,
            max: 43_200,
          }),
        }),
    transientReceiveLimit: optionalNumber(env, 'TRANSIENT_RECEIVE_LIMIT', DEFAULTS.transientReceiveLimit, {
      min: 1,
      integer: true,
    }),
    targetTimeoutMs: optionalNumber(env, 'TARGET_TIMEOUT_MS', DEFAULTS.targetTimeoutMs, { min: 1 }),
    cooldownMs: optionalNumber(env, 'COOLDOWN_MS', DEFAULTS.cooldownMs, { min: 0 }),
    retryDelaySeconds: optionalNumber(
      env,
      'RETRY_DELAY_SECONDS',
      Math.max(1, Math.round(DEFAULTS.retryDelaySeconds * timeScale)),
      { min: 0, max: 43_200, integer: true },
    ),
    functionName: requireString(env, 'AWS_LAMBDA_FUNCTION_NAME'),
    solveTimesTable: env.SOLVE_TIMES_TABLE?.trim() || undefined,
    ledgerTable: requireString(env, 'LEDGER_TABLE'),
    ...(firstCap === undefined ? {} : { firstCap }),
    ...(env.OUTCOME_RETENTION_DAYS?.trim()
      ? {
          outcomeRetentionDays: optionalNumber(env, 'OUTCOME_RETENTION_DAYS', 0, {
            min: 1,
            max: 36_500,
            integer: true,
          }),
        }
      : {}),
    dnsServers: parseDnsServers(optionalList(env, 'DNS_SERVERS')),
    chainMs: optionalNumber(env, 'CHAIN_SECONDS', 0, { min: 0, max: 900 }) * 1000,
    formExpect: parseFormExpectation(env.FORM_EXPECT, 'FORM_EXPECT'),
    ...readLaneSettings(env),
  };
}

/** A CaptchaAI task's deadline as this worker's client applies it (scaled). */
export function taskDeadlineMs(config: Pick<WorkerConfig, 'captchaTimings' | 'timeScale'>): number {
  return resolveTimings(config.captchaTimings).deadlineMs * config.timeScale;
}
