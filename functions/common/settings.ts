import { DEFAULT_POLL_SCHEDULE } from '../captchaai/poll-schedule.js';
import { DEFAULT_TIMINGS } from '../captchaai/timings.js';

/**
 * Every name and default of threadgate's settings, each written once. The deploy-time settings
 * (infra/config.ts), the functions' environment readers (functions/worker/config.ts,
 * functions/pipeline/cap.ts), the CaptchaAI client, the CLI and the local stack import them from
 * here. CaptchaAI's waits (poll interval, first poll, budget) stay in ./captchaai/timings.ts,
 * next to the client that uses them; they are only referenced below.
 */
export const DEFAULTS = {
  /** CloudFormation stack name; the CLI's `--stack` default. */
  stackName: 'Threadgate',
  /** The Secrets Manager secret holding the API key. */
  secretName: 'threadgate/captchaai-api-key',
  /** CaptchaAI's base URL. */
  captchaaiUrl: 'https://ocr.captchaai.com',
  /** Powertools metrics namespace of both functions (the dashboard and alarms read it). */
  metricsNamespace: 'Threadgate',
  reserve: 1,
  initialCap: 4,
  minCap: 1,
  // maxCap has no fixed default: it is the ceiling the lanes allow, 1000 × lanes
  // (functions/pipeline/cap-policy.ts capCeiling), so a plan runs in full unless clamped on purpose.
  timeScale: 1,
  targetTimeoutMs: 15_000,
  cooldownMs: 60_000,
  pollIntervalMs: DEFAULT_TIMINGS.pollIntervalMs,
  firstPollMs: DEFAULT_TIMINGS.firstPollMs,
  pollBudget: DEFAULT_TIMINGS.pollBudget,
  pollSchedule: DEFAULT_POLL_SCHEDULE.mode,
  pollMeanBudget: DEFAULT_POLL_SCHEDULE.meanBudget,
  /** The worker's memory, MB: its peak RSS measured as Lambda runs it, with headroom (docs/benchmark-notes.md "Worker memory"). */
  workerMemoryMb: 168,
  maxReceiveCount: 5,
  transientReceiveLimit: 3,
  oldestMessageAlarmSeconds: 3600,
  logRetentionDays: 30,
  /** Powertools log level of every function (POWERTOOLS_LOG_LEVEL). */
  logLevel: 'INFO',
  /** Days an outcome row is kept after its last write; 0 keeps it for ever (no TTL). */
  outcomeRetentionDays: 0,
  /** The tables' encryption at rest: the AWS managed key `aws/dynamodb`, or an AWS owned key. */
  tableEncryption: 'aws-managed',
  /** How long the outcome stream's mapping gathers records before it invokes the publisher, seconds. */
  outcomeStreamBatchingSeconds: 0,
  outcomeStream: true,
  /**
   * How long after its start a worker invocation keeps taking the next message itself (the chain,
   * functions/worker/chain.ts), seconds × timeScale; the stack adds it to the function timeout.
   */
  chainSeconds: 120,
  /** The worker's lease when LEASE_SECONDS is unset (the stack always sets it from the timeout). */
  leaseSeconds: 900,
  /** Visibility of a message returned for a retry, × TIME_SCALE, at least 1 s. */
  retryDelaySeconds: 30,
} as const;

/**
 * The worker's default memory for a `lanes` setting, MB, from peaks measured with 8, 16, 32 and 64
 * lanes (docs/benchmark-notes.md "Worker memory with lanes"): the peak RSS within 3/4 of it, and,
 * Lambda giving CPU in proportion to memory, the lanes' CPU at time scale 1 within about 3/5 of
 * the share it buys (that decides 32 and 64 lanes: their peaks of 144 and 163 MB fit in less).
 */
export function workerMemoryMbFor(lanes: number): number {
  if (lanes <= 1) return DEFAULTS.workerMemoryMb;
  if (lanes <= 8) return 192;
  if (lanes <= 32) return 256;
  return 384;
}
