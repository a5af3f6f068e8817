import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { sleep as captchaSleep } from './captchaai/client.js';
import { RotatingCaptchaAiClient } from './captchaai/rotating-client.js';
import { DEFAULTS } from './common/settings.js';
import { PipelineControl, type PipelineState } from './pipeline/control.js';
import { SlotLedger } from './pipeline/ledger.js';
import { ApiKeySource } from './pipeline/secret.js';
import { environmentView } from './pipeline/state-view.js';
import { BatchCancels } from './records/cancellations.js';
import { OutcomesStore } from './records/store.js';
import { dnsServerResolver, systemResolver } from './target/allowlist.js';
import { createTargetAgent } from './target/session.js';
import { CancelWatch, cancelRefreshMs } from './worker/cancel-watch.js';
import { type WorkerClients, workerClients } from './worker/clients.js';
import { readWorkerConfig, type WorkerConfig } from './worker/config.js';
import { abortableSleep, collectingWhileIdle, idleCollector } from './worker/idle-wait.js';
import { runInvocation } from './worker/invocation/run.js';
import { pollLearning } from './worker/poll-learning.js';
import type { WorkerDeps } from './worker/types.js';

/**
 * The worker Lambda: the handler and its composition root, nothing else. SQS batch in,
 * partial batch response out.
 *   - worker/batch-loop.ts   the batch, then the chain, one task after another, and the pause;
 *   - worker/chain.ts        the next message taken from the queue once an answer is in hand;
 *   - worker/record-flow.ts  one record: validate → allowlist → claim → page → solve → post;
 *   - records/decisions.ts   every decision that turns an error or a result into an outcome;
 *   - worker/effects.ts      what each decision does (row, DLQ copy, pause, cool-down);
 *   - worker/clients.ts      the AWS clients (rare-path ones made on first use);
 *   - worker/poll-learning.ts the poll schedule, its metrics and the solve-time exchange;
 *   - worker/idle-wait.ts    the waits, with a garbage collection while the worker waits anyway.
 */

export type { WorkerClients } from './worker/clients.js';

/** Builds the real dependencies from a config; tests pass their own clients and overrides. */
export function createWorkerDeps(
  config: WorkerConfig,
  given: WorkerClients = {},
  overrides: Partial<WorkerDeps> = {},
): WorkerDeps {
  const now = overrides.now ?? Date.now;
  const clients = workerClients(given);
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
  const keys = new ApiKeySource({ client: clients.secrets, secretName: config.captchaAiSecretName, now });
  // One schedule per execution environment (worker/poll-learning.ts).
  const { pollSchedule, exchangeSolveTimes } = pollLearning(config, clients.ddb, logger, metrics, now);
  // Garbage is collected while the worker waits anyway, most often before a poll (worker/idle-wait.ts).
  const collect = idleCollector();
  const captchaai = new RotatingCaptchaAiClient(keys, {
    baseUrl: config.captchaAiUrl,
    timeScale: config.timeScale,
    timings: config.captchaTimings,
    pollSchedule,
    now,
    sleep: collectingWhileIdle(captchaSleep, collect),
    onEvent: (e) => {
      if (e.kind !== 'rate_limited') return;
      // A rate limit is answered by backing off; the metric shows how often the key was told to slow down.
      const single = metrics.singleMetric();
      single.addDimension('endpoint', e.endpoint);
      single.addMetric('RateLimited', MetricUnit.Count, 1);
    },
  });
  const control = new PipelineControl({
    lambda: clients.lambda,
    dynamodb: clients.ddb,
    ledgerTable: config.ledgerTable,
    workerFunctionName: config.functionName,
    queueArn: config.queueArn,
    timeScale: config.timeScale,
    ...(config.firstShape ? { firstShape: config.firstShape } : {}),
  });
  const onState = (state: PipelineState) => captchaai.noteState(state);
  const view = environmentView(control, { ...config, onState, clock: overrides.monotonic });
  const store = new OutcomesStore({
    client: clients.ddb,
    tableName: config.tableName,
    now,
    timeScale: config.timeScale,
    ...(config.outcomeRetentionDays ? { retentionMs: config.outcomeRetentionDays * 86_400_000 } : {}),
  });
  const pipeline: WorkerDeps['pipeline'] = {
    readState: async () => (await view.read()).state,
    readShape: async () => (await view.read()).shape,
    pause: (reason, by, code) => control.pause(reason, by, code),
  };
  const batchCancels = new BatchCancels({ client: clients.ddb, tableName: config.tableName, now });
  const cancels = new CancelWatch({
    read: (batchId) => batchCancels.get(batchId),
    refreshMs: cancelRefreshMs(config.timeScale),
    now,
    onReadFailed: (batchId, err) =>
      logger.warn('could not read the batch cancel; unknown past the bound: nothing is sent for the batch', {
        batchId,
        error: err instanceof Error ? err.name : String(err),
      }),
  });
  return {
    config,
    store,
    sqs: clients.sqs,
    ledger: new SlotLedger({ client: clients.ddb, tableName: config.ledgerTable, now }),
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
    idle: collect,
    solver: async () => captchaai,
    resolver,
    dispatcher: createTargetAgent(config.allowlist, resolver, config.targetTimeoutMs),
    now,
    sleep: collectingWhileIdle(abortableSleep, collect),
    logger,
    metrics,
    ...overrides,
  };
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
  // Before any wait: the drain counts an invocation as old or new by this (../pipeline/lanes.ts).
  const startedAt = Date.now();
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
  return runInvocation(event, deps, context?.getRemainingTimeInMillis?.(), startedAt);
};
