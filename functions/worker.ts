import { randomUUID } from 'node:crypto';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { SQSClient } from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import {
  createPollSchedule,
  LearnedPollSchedule,
  type LearnedSchedule,
  type PollSchedule,
} from './captchaai/poll-schedule.js';
import { RotatingCaptchaAiClient } from './captchaai/rotating-client.js';
import { resolveTimings } from './captchaai/timings.js';
import { DEFAULTS } from './common/settings.js';
import { PipelineControl } from './pipeline/control.js';
import { ApiKeySource } from './pipeline/secret.js';
import { SOLVE_TIME_EXCHANGE_DEFAULTS, SolveTimeExchange } from './pipeline/solve-time-exchange.js';
import { BatchCancels } from './records/cancellations.js';
import { OutcomesStore } from './records/store.js';
import { dnsServerResolver, systemResolver } from './target/allowlist.js';
import { createTargetAgent } from './target/session.js';
import { processBatch } from './worker/batch-loop.js';
import { CancelWatch, cancelRefreshMs } from './worker/cancel-watch.js';
import { readWorkerConfig, type WorkerConfig } from './worker/config.js';
import type { WorkerDeps } from './worker/types.js';
import { DEADLINE_MARGIN_MS, worstCaseRecordMs } from './worker/worst-case.js';

/**
 * The worker Lambda: the handler and its composition root, nothing else. SQS batch in,
 * partial batch response out.
 *   - worker/batch-loop.ts   the batch, then the chain, one task after another, and the pause;
 *   - worker/chain.ts        the next message taken from the queue once an answer is in hand;
 *   - worker/record-flow.ts  one record: validate → allowlist → claim → page → solve → post;
 *   - records/decisions.ts   every decision that turns an error or a result into an outcome;
 *   - worker/effects.ts      what each decision does (row, DLQ copy, pause, cool-down).
 */

export interface WorkerClients {
  ddb?: DynamoDBClient;
  sqs?: SQSClient;
  lambda?: LambdaClient;
  ssm?: SSMClient;
  secrets?: SecretsManagerClient;
}

/** Builds the real dependencies from a config; tests pass their own clients and overrides. */
export function createWorkerDeps(
  config: WorkerConfig,
  clients: WorkerClients = {},
  overrides: Partial<WorkerDeps> = {},
): WorkerDeps {
  const now = overrides.now ?? Date.now;
  const ddb = clients.ddb ?? new DynamoDBClient({});
  const sqs = clients.sqs ?? new SQSClient({});
  const secrets = clients.secrets ?? new SecretsManagerClient({});
  const resolver =
    overrides.resolver ??
    (config.dnsServers.length > 0 ? dnsServerResolver(config.dnsServers) : systemResolver);
  const metrics =
    overrides.metrics ??
    new Metrics({
      namespace: process.env.POWERTOOLS_METRICS_NAMESPACE ?? DEFAULTS.metricsNamespace,
      serviceName: process.env.POWERTOOLS_SERVICE_NAME ?? 'threadgate-worker',
    });
  const logger =
    overrides.logger ??
    new Logger({ serviceName: process.env.POWERTOOLS_SERVICE_NAME ?? 'threadgate-worker' });
  const keys = new ApiKeySource({ client: secrets, secretName: config.captchaAiSecretName, now });
  // One schedule per execution environment: it learns from every solve this environment makes
  // and, through the solve-times table, from the other environments' recent ones.
  const pollSchedule = createPollSchedule(resolveTimings(config.captchaTimings), config.pollSchedule, (s) =>
    publishLearnedSchedule(s, logger, metrics),
  );
  const exchangeSolveTimes = solveTimeExchange(config, ddb, pollSchedule, logger, now);
  const captchaai = new RotatingCaptchaAiClient(keys, {
    baseUrl: config.captchaAiUrl,
    timeScale: config.timeScale,
    timings: config.captchaTimings,
    pollSchedule,
    now,
    onEvent: (e) => {
      if (e.kind !== 'rate_limited') return;
      // A rate limit is answered by backing off; the metric shows how often the key was told to slow down.
      const single = metrics.singleMetric();
      single.addDimension('endpoint', e.endpoint);
      single.addMetric('RateLimited', MetricUnit.Count, 1);
    },
  });
  const control = new PipelineControl({
    lambda: clients.lambda ?? new LambdaClient({}),
    ssm: clients.ssm ?? new SSMClient({}),
    stateParameterName: config.pipelineStateParam,
    workerFunctionName: config.functionName,
    queueArn: config.queueArn,
  });
  const store = new OutcomesStore({ client: ddb, tableName: config.tableName, now });
  const pipeline: WorkerDeps['pipeline'] = {
    // Every state read (one before each record) reaches the CaptchaAI client: a pause or a
    // resume since its key was read drops that key, so a rotated key is used from the resume on.
    readState: async () => {
      const state = await control.readState();
      captchaai.noteState(state);
      return state;
    },
    pause: (reason, by, code) => control.pause(reason, by, code),
  };
  const batchCancels = new BatchCancels({ client: ddb, tableName: config.tableName, now });
  const cancels = new CancelWatch({
    read: (batchId) => batchCancels.get(batchId),
    refreshMs: cancelRefreshMs(config.timeScale),
    now,
    onReadFailed: (batchId, err) =>
      logger.warn('could not read the batch cancel; the last answer stands', {
        batchId,
        error: err instanceof Error ? err.name : String(err),
      }),
  });
  return {
    config,
    store,
    sqs,
    pipeline,
    cancels,
    warmUp: async () => {
      // The state first: the first state the client sees drops any key read before it.
      await Promise.allSettled([
        pipeline.readState().then(() => keys.get()),
        store.get(WARM_UP_RECORD_KEY),
        exchangeSolveTimes?.(),
      ]);
    },
    exchangeSolveTimes,
    solver: async () => captchaai,
    resolver,
    dispatcher: createTargetAgent(config.allowlist, resolver, config.targetTimeoutMs),
    now,
    sleep: abortableSleep,
    logger,
    metrics,
    ...overrides,
  };
}

/**
 * The environment's solve-time exchange (a learned schedule with the stack's solve-times table),
 * as a function that exchanges when due and logs a failure instead of throwing.
 */
function solveTimeExchange(
  config: WorkerConfig,
  ddb: DynamoDBClient,
  pollSchedule: PollSchedule,
  logger: Logger,
  now: () => number,
): (() => Promise<unknown>) | undefined {
  if (!config.solveTimesTable || !(pollSchedule instanceof LearnedPollSchedule)) return undefined;
  const exchange = new SolveTimeExchange({
    client: ddb,
    tableName: config.solveTimesTable,
    environment: randomUUID(),
    schedule: pollSchedule,
    everyMs: SOLVE_TIME_EXCHANGE_DEFAULTS.everyMs * config.timeScale,
    now,
  });
  return () =>
    exchange.maybeExchange().catch((err: unknown) => {
      logger.warn('solve times not exchanged; this environment learns from its own until the next try', {
        error: err instanceof Error ? err.name : String(err),
      });
    });
}

/** A recomputed poll schedule: one log line and three metrics per CAPTCHA type (unscaled ms). */
function publishLearnedSchedule(s: LearnedSchedule, logger: Logger, metrics: Metrics): void {
  logger.info('poll schedule learned', {
    captchaType: s.captchaType,
    observations: s.observations,
    sharedObservations: s.sharedObservations,
    pollsMs: s.pollsMs.map(Math.round),
    expectedCalls: Math.round(s.expectedCalls * 100) / 100,
    expectedWaitMs: Math.round(s.expectedWaitMs),
  });
  const single = metrics.singleMetric();
  single.addDimension('captchaType', s.captchaType);
  single.addMetric('PollScheduleFirstPoll', MetricUnit.Milliseconds, s.firstPollMs);
  single.addMetric('PollScheduleExpectedCalls', MetricUnit.Count, s.expectedCalls);
  single.addMetric('PollScheduleExpectedWait', MetricUnit.Milliseconds, s.expectedWaitMs);
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * Until when this invocation may take messages itself (worker/chain.ts): CHAIN_SECONDS from now,
 * and never while less than one record's worst case is left before the function timeout.
 */
function chainUntil(config: WorkerConfig, remainingMs: number | undefined): number | undefined {
  if (config.chainMs <= 0) return undefined;
  const worstMs = worstCaseRecordMs({
    timings: config.captchaTimings,
    timeScale: config.timeScale,
    targetTimeoutMs: config.targetTimeoutMs,
    cooldownMs: config.cooldownMs,
  });
  const windowMs =
    remainingMs === undefined
      ? config.chainMs
      : Math.min(config.chainMs, remainingMs - DEADLINE_MARGIN_MS - worstMs);
  return windowMs > 0 ? performance.now() + windowMs : undefined;
}

/** A record key no job uses: the warm-up reads it to open the table's connection. */
const WARM_UP_RECORD_KEY = 'threadgate-warm-up (not a record)';
/** The first invocation waits at most this long for a warm-up still under way. */
const WARM_UP_WAIT_MS = 3_000;

let moduleDeps: WorkerDeps | undefined;

function instanceDeps(): WorkerDeps {
  moduleDeps ??= createWorkerDeps(readWorkerConfig(process.env));
  return moduleDeps;
}

/**
 * Lambda's init phase. Without it an environment's first record pays, in series and while its
 * slot holds no CaptchaAI task, for every client's first call (the SDK's lazy set-up, the first
 * connection) and the secret read: about 1.4 s per environment on the local stack. So the module
 * starts the pipeline-state read, the key and a read of the outcome table when it loads; an
 * environment started ahead of traffic (provisioned concurrency, the local stack's prewarm) has
 * them done before its first record. Nothing here is fatal: each read is made again where it is
 * needed, and a bad configuration is the first invocation's error, as before. A Lambda
 * environment sets AWS_LAMBDA_FUNCTION_NAME; a test importing this module does not.
 */
let warming: Promise<void> | undefined;
if (process.env.AWS_LAMBDA_FUNCTION_NAME) {
  try {
    warming = instanceDeps().warmUp?.();
  } catch {
    warming = undefined;
  }
}

/** Lambda entry point: config read and clients created once per instance. */
export const handler = async (event: SQSEvent, context?: Context): Promise<SQSBatchResponse> => {
  const deps = instanceDeps();
  if (warming) {
    const pending = warming;
    warming = undefined;
    await Promise.race([pending, new Promise((resolve) => setTimeout(resolve, WARM_UP_WAIT_MS).unref())]);
  }
  if (!Array.isArray(event?.Records)) {
    // Not an SQS event: a wiring mistake, not a record problem. Fail loudly.
    throw new TypeError('the worker expects an SQS event with a Records array');
  }
  if (context) deps.logger.addContext(context);
  const controller = new AbortController();
  const remaining = context?.getRemainingTimeInMillis?.();
  const timer =
    remaining !== undefined
      ? setTimeout(
          () => controller.abort(new Error('invocation deadline')),
          Math.max(0, remaining - DEADLINE_MARGIN_MS),
        )
      : undefined;
  try {
    return await processBatch(event, deps, {
      signal: controller.signal,
      chainUntil: chainUntil(deps.config, remaining),
    });
  } finally {
    if (timer) clearTimeout(timer);
  }
};
