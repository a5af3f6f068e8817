import { randomUUID } from 'node:crypto';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import type { Dispatcher } from 'undici';
import { checkTargetUrl, type Resolver, systemResolver } from './shared/allowlist.js';
import { CaptchaAiClient } from './shared/captchaai/client.js';
import { TOKEN_LIFETIME_MS } from './shared/captchaai/timings.js';
import type { CaptchaTask, SolveResult } from './shared/captchaai/types.js';
import { CaptchaError, InvalidJobError, TargetError } from './shared/errors.js';
import {
  captchaTaskOf,
  captchaTypeOf,
  type Job,
  tokenFieldOf,
  validateJobMessage,
} from './shared/job-schema.js';
import { decideOutcome, type RecordDecision } from './shared/outcome-mapping.js';
import { type OutcomeStatus, OutcomesStore } from './shared/outcomes-store.js';
import { PipelineControl, type PipelineState } from './shared/pipeline-control.js';
import { getApiKey } from './shared/secret.js';
import { createTargetAgent, TargetSession } from './shared/target-session.js';
import { readWorkerConfig, type WorkerConfig } from './worker-config.js';

/**
 * The worker: SQS batch in, partial batch response out. For each record, strictly one after
 * another (so an invocation never has more than one solve in flight):
 *   validate → pipeline paused? → allowlist/DNS → claim (lease) → GET page → solve →
 *   POST token in the same session → final outcome (conditional on still holding the claim).
 * Errors become outcomes in one place: functions/shared/outcome-mapping.ts.
 *
 * Never logs or stores a token or the API key.
 */

/** What the worker needs from a CaptchaAI client. */
export interface Solver {
  solve(task: CaptchaTask, options?: { signal?: AbortSignal }): Promise<SolveResult>;
}

export interface WorkerDeps {
  config: WorkerConfig;
  store: OutcomesStore;
  sqs: SQSClient;
  pipeline: Pick<PipelineControl, 'readState' | 'pause'>;
  /** The CaptchaAI client for the current key (the key is read lazily, on the first solve). */
  solver: () => Promise<Solver>;
  resolver: Resolver;
  /** Connection pool for target sites (allowlist-guarded). */
  dispatcher?: Dispatcher;
  /** Epoch ms; leases and token ages use it. */
  now: () => number;
  /** Waits; resolves early when the signal aborts. */
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  logger: Logger;
  metrics: Metrics;
  /** A unique lease owner per claim. */
  newOwner?: () => string;
}

export type RecordResult =
  /** The message is done (outcome written or already present, or sent to the DLQ): delete it. */
  | { kind: 'done'; status: OutcomeStatus | 'dlq' | 'duplicate' }
  /** Batch item failure: the message comes back later. */
  | { kind: 'retry'; reason: string }
  /** Stop-class error: the pipeline is paused; the rest of the batch must not be worked on. */
  | { kind: 'stopped'; code: string };

export interface ProcessOptions {
  /**
   * Aborted when the invocation must end (near the function timeout). An aborted record is
   * left exactly as a killed invocation would leave it: no final write, no release; its
   * lease keeps redeliveries from solving it again until the lease expires.
   */
  signal?: AbortSignal;
}

const HTTP_OK_MAX = 399;

function receiveCountOf(record: SQSRecord): number {
  const n = Number(record.attributes?.ApproximateReceiveCount);
  return Number.isFinite(n) && n > 0 ? n : 1;
}

type TimingField = 'claim_ms' | 'target_ms' | 'solve_ms' | 'finish_ms';

/**
 * Wall-clock time of a record's parts, for the final log line (the benchmark reads them to
 * tell the time outside the solve and the target's HTTP apart). A monotonic clock, not `now`,
 * so tests that fake the clock are unaffected. target_ms adds up the page load and the POST.
 */
class RecordTiming {
  private readonly started = performance.now();
  private readonly spent: Partial<Record<TimingField, number>> = {};

  async time<T>(field: TimingField, work: () => Promise<T>): Promise<T> {
    const start = performance.now();
    try {
      return await work();
    } finally {
      this.spent[field] = (this.spent[field] ?? 0) + (performance.now() - start);
    }
  }

  fields(): Record<string, number> {
    const out: Record<string, number> = { total_ms: Math.round(performance.now() - this.started) };
    for (const [field, ms] of Object.entries(this.spent)) out[field] = Math.round(ms);
    return out;
  }
}

function errorSummary(err: unknown): Record<string, unknown> {
  const e = err as { name?: string; message?: string; code?: unknown };
  return {
    errorName: e?.name ?? typeof err,
    errorCode: typeof e?.code === 'string' ? e.code : undefined,
    errorMessage: e?.message,
  };
}

function countOutcome(deps: WorkerDeps, status: string): void {
  const single = deps.metrics.singleMetric();
  single.addDimension('status', status);
  single.addMetric('Outcomes', MetricUnit.Count, 1);
}

/** Checks pageurl and submit_url against the allowlist (and DNS); a refusal is invalid input. */
async function checkJobHosts(job: Job, deps: WorkerDeps): Promise<void> {
  for (const field of ['pageurl', 'submit_url'] as const) {
    try {
      await checkTargetUrl(job[field], deps.config.allowlist, deps.resolver);
    } catch (err) {
      if (err instanceof TargetError) {
        throw new InvalidJobError(`${field}: ${err.message}`, job.record_key, { cause: err });
      }
      throw err;
    }
  }
}

/**
 * Works one SQS record to its end. Never throws for a record-level problem: every error
 * becomes a RecordResult through decideOutcome.
 */
export async function processRecord(
  record: SQSRecord,
  deps: WorkerDeps,
  options: ProcessOptions = {},
): Promise<RecordResult> {
  const { config, store, logger } = deps;
  const timing = new RecordTiming();
  const receiveCount = receiveCountOf(record);
  const log = logger.createChild({ persistentKeys: { messageId: record.messageId, receiveCount } });
  const validation = validateJobMessage(record.body);
  if (!validation.ok) {
    return applyDecision(
      decideOutcome(new InvalidJobError(validation.reason, validation.recordKey), {
        receiveCount,
        transientReceiveLimit: config.transientReceiveLimit,
        cooldownMs: config.cooldownMs,
      }),
      { record, deps, log },
    );
  }
  const job = validation.job;
  const captchaType = captchaTypeOf(job);
  log.appendKeys({ recordKey: job.record_key, captchaType });
  const ctx = {
    receiveCount,
    transientReceiveLimit: config.transientReceiveLimit,
    cooldownMs: config.cooldownMs,
  };

  try {
    await checkJobHosts(job, deps);
  } catch (err) {
    return applyDecision(decideOutcome(err, ctx), { record, deps, log });
  }

  const owner = deps.newOwner?.() ?? randomUUID();
  const claim = await timing.time('claim_ms', () =>
    store.claim(job.record_key, { owner, leaseMs: config.leaseMs, captchaType }),
  );
  if (!claim.claimed) {
    const conflict = deps.metrics.singleMetric();
    conflict.addDimension('reason', claim.why);
    conflict.addMetric('ClaimConflicts', MetricUnit.Count, 1);
    log.info('record already claimed; not solving', {
      claimConflict: claim.why,
      existingStatus: claim.row?.status,
    });
    // Finished: the message is a duplicate, delete it. Leased: someone is on it; retry later.
    return claim.why === 'finished'
      ? { kind: 'done', status: 'duplicate' }
      : { kind: 'retry', reason: 'LEASED_ELSEWHERE' };
  }

  let attempts = 0;
  try {
    const session = new TargetSession({
      allowlist: config.allowlist,
      resolver: deps.resolver,
      timeoutMs: config.targetTimeoutMs,
      dispatcher: deps.dispatcher,
      signal: options.signal,
    });
    await timing.time('target_ms', () => session.load(job.pageurl));
    const solver = await deps.solver();
    const solved = await timing.time('solve_ms', () =>
      solver.solve(captchaTaskOf(job), { signal: options.signal }),
    );
    attempts = solved.submits;
    deps.metrics.addMetric('Solves', MetricUnit.Count, 1);
    deps.metrics.addMetric('SolveTime', MetricUnit.Milliseconds, solved.solveMs);
    log.info('solved', { taskId: solved.taskId, submits: solved.submits, solveMs: solved.solveMs });

    const lifetimeMs = TOKEN_LIFETIME_MS[captchaType] * config.timeScale;
    if (deps.now() - solved.solvedAt > lifetimeMs) {
      throw new TargetError('TOKEN_EXPIRED', `the token is older than its ${lifetimeMs} ms lifetime`);
    }
    const fields: Record<string, string> = { ...job.form, [tokenFieldOf(job)]: solved.token };
    const posted = await timing.time('target_ms', () => session.submit(job.submit_url, fields));
    const ok = posted.status >= 200 && posted.status <= HTTP_OK_MAX;
    const status = ok ? 'submitted' : 'failed';
    const written = await timing.time('finish_ms', () =>
      store.finish(job.record_key, owner, {
        status,
        reason: ok ? 'OK' : `TARGET_HTTP_${posted.status}`,
        targetStatus: posted.status,
        attempts,
        solveMs: solved.solveMs,
      }),
    );
    return finished(written.written, status, deps, log, {
      targetStatus: posted.status,
      ...timing.fields(),
    });
  } catch (err) {
    if (err instanceof CaptchaError && err.submits !== undefined) attempts = err.submits;
    if (options.signal?.aborted) {
      log.warn(
        'invocation ending mid-record; the lease keeps the record until it expires',
        errorSummary(err),
      );
      return { kind: 'retry', reason: 'ABORTED' };
    }
    log.info('record failed', errorSummary(err));
    return applyDecision(decideOutcome(err, ctx), {
      record,
      deps,
      log,
      owner,
      recordKey: job.record_key,
      attempts,
    });
  }
}

function finished(
  written: boolean,
  status: OutcomeStatus,
  deps: WorkerDeps,
  log: Logger,
  extra: Record<string, unknown> = {},
): RecordResult {
  if (!written) {
    // The lease expired and another invocation claimed the record: its outcome stands.
    log.warn('lost the claim before the final write; outcome not recorded', { status });
    countOutcome(deps, 'lost_claim');
    return { kind: 'done', status: 'duplicate' };
  }
  countOutcome(deps, status);
  log.info('outcome', { status, ...extra });
  return { kind: 'done', status };
}

interface ApplyContext {
  record: SQSRecord;
  deps: WorkerDeps;
  log: Logger;
  /** Set once the record is claimed. */
  owner?: string;
  recordKey?: string;
  attempts?: number;
  signal?: AbortSignal;
}

async function applyDecision(decision: RecordDecision, c: ApplyContext): Promise<RecordResult> {
  const { deps, log, record } = c;
  switch (decision.action) {
    case 'reject': {
      const written = await deps.store.reject(decision.recordKey, decision.reason);
      if (!written.written) {
        log.warn('invalid message for a record that already has an outcome; dropped', {
          reason: decision.reason,
          existingStatus: written.row?.status,
        });
        return { kind: 'done', status: 'duplicate' };
      }
      return finished(true, 'rejected', deps, log, { reason: decision.reason });
    }
    case 'dlq': {
      await sendToDlq(deps, record, { error_code: decision.errorCode, reason: decision.reason });
      countOutcome(deps, 'dlq');
      log.warn('invalid message without a usable record_key; sent to the DLQ', { reason: decision.reason });
      return { kind: 'done', status: 'dlq' };
    }
    case 'fail': {
      const written = await deps.store.finish(c.recordKey!, c.owner!, {
        status: 'failed',
        reason: decision.reason,
        attempts: c.attempts,
      });
      const result = finished(written.written, 'failed', deps, log, { reason: decision.reason });
      if (decision.cooldownMs) {
        // The abandoned CaptchaAI task may still hold a thread: keep this invocation's slot.
        log.info('holding the slot for the cool-down', { cooldownMs: decision.cooldownMs });
        await deps.sleep(decision.cooldownMs, c.signal);
      }
      return result;
    }
    case 'retry': {
      if (decision.release && c.owner && c.recordKey) {
        await deps.store.release(c.recordKey, c.owner, c.attempts ?? 0);
      }
      log.info('will retry', { reason: decision.reason, released: decision.release });
      return { kind: 'retry', reason: decision.reason };
    }
    case 'stop': {
      // 1. Stop new work everywhere first; 2. record; 3. keep the message in the DLQ; 4. delete it.
      deps.metrics.addMetric('StopEvents', MetricUnit.Count, 1);
      log.error('stop-class error: pausing the pipeline', {
        errorCode: decision.code,
        reason: decision.reason,
      });
      try {
        await deps.pipeline.pause(
          `CaptchaAI answered ${decision.code}: ${decision.reason}`,
          'worker',
          decision.code,
        );
      } catch (err) {
        log.error('could not pause the pipeline', errorSummary(err));
      }
      await deps.store.finish(c.recordKey!, c.owner!, {
        status: 'stopped',
        reason: decision.code,
        attempts: c.attempts,
      });
      countOutcome(deps, 'stopped');
      await sendToDlq(deps, record, {
        error_code: decision.code,
        reason: decision.reason,
        ...(c.recordKey ? { record_key: c.recordKey } : {}),
      });
      await deps.sqs.send(
        new DeleteMessageCommand({ QueueUrl: deps.config.queueUrl, ReceiptHandle: record.receiptHandle }),
      );
      return { kind: 'stopped', code: decision.code };
    }
  }
}

async function sendToDlq(
  deps: WorkerDeps,
  record: SQSRecord,
  attributes: Record<string, string>,
): Promise<void> {
  const MessageAttributes = Object.fromEntries(
    Object.entries(attributes).map(([k, v]) => [k, { DataType: 'String', StringValue: v.slice(0, 1024) }]),
  );
  await deps.sqs.send(
    new SendMessageCommand({
      QueueUrl: deps.config.dlqUrl,
      MessageBody: record.body || '(empty)',
      MessageAttributes,
    }),
  );
  if (attributes.error_code === 'INVALID_JOB') {
    // Deleted now rather than by the poller, so the copy and the original never both stay.
    await deps.sqs.send(
      new DeleteMessageCommand({ QueueUrl: deps.config.queueUrl, ReceiptHandle: record.receiptHandle }),
    );
  }
}

/**
 * Works a batch strictly in order and returns the partial batch response.
 *
 * Pause semantics (DESIGN.md invariant 4). Before each record the pipeline state is read;
 * once it says paused, or a record of this batch hit a stop-class error, every later record
 * is returned as a batch item failure without any work (no claim, no page load, no solve).
 * When THIS invocation paused the pipeline, those records' visibility is also reset to 0 so
 * they sit visible in the queue, ready for the resume; the mapping is disabled, so nothing
 * receives them meanwhile.
 *
 * About "receive counts unchanged": records already handed to this invocation were received
 * once by the poller, and that receive is already in their ApproximateReceiveCount; the
 * worker adds none, and after the pause no poller receives them again. With batch size 1
 * (the deployed setting) the other messages were never received at all, so their counts are
 * exactly as they were. test/worker.test.ts asserts both cases.
 */
export async function processBatch(
  event: SQSEvent,
  deps: WorkerDeps,
  options: ProcessOptions = {},
): Promise<SQSBatchResponse> {
  const failures: string[] = [];
  const untouched: SQSRecord[] = [];
  const retried: SQSRecord[] = [];
  let paused: 'none' | 'observed' | 'by-us' = 'none';
  try {
    for (const record of event.Records) {
      if (paused === 'none' && !options.signal?.aborted) {
        const state = await readStateSafely(deps);
        if (state.paused) {
          paused = 'observed';
          deps.logger.info('pipeline is paused; leaving the rest of the batch in the queue', {
            pauseReason: state.reason,
          });
        }
      }
      if (paused !== 'none' || options.signal?.aborted) {
        failures.push(record.messageId);
        untouched.push(record);
        continue;
      }
      let result: RecordResult;
      try {
        result = await processRecord(record, deps, options);
      } catch (err) {
        // An AWS call failed outside the mapping (claim, DLQ, delete): retry the message later.
        deps.logger.error('record crashed; it will be retried', {
          messageId: record.messageId,
          ...errorSummary(err),
        });
        result = { kind: 'retry', reason: 'INTERNAL_ERROR' };
      }
      if (result.kind === 'retry') {
        failures.push(record.messageId);
        retried.push(record);
      }
      if (result.kind === 'stopped') paused = 'by-us';
    }
    if (paused === 'by-us' && untouched.length > 0) await setVisibility(deps, untouched, 0);
    // Without this a retried message would wait out the queue's whole visibility timeout
    // (6 x the function timeout, 43 min at the defaults) before its next try.
    if (retried.length > 0) await setVisibility(deps, retried, deps.config.retryDelaySeconds);
  } finally {
    // Per-record metrics (outcomes, conflicts) are single metrics, already published.
    if (deps.metrics.hasStoredMetrics()) deps.metrics.publishStoredMetrics();
  }
  return { batchItemFailures: failures.map((itemIdentifier) => ({ itemIdentifier })) };
}

async function readStateSafely(deps: WorkerDeps): Promise<PipelineState> {
  try {
    return await deps.pipeline.readState();
  } catch (err) {
    // The disabled mapping is what really stops work; an unreadable state must not stop it alone.
    deps.logger.warn('could not read the pipeline state; continuing', errorSummary(err));
    return { paused: false };
  }
}

async function setVisibility(deps: WorkerDeps, records: SQSRecord[], seconds: number): Promise<void> {
  for (let i = 0; i < records.length; i += 10) {
    const chunk = records.slice(i, i + 10);
    try {
      await deps.sqs.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: deps.config.queueUrl,
          Entries: chunk.map((r, j) => ({
            Id: String(j),
            ReceiptHandle: r.receiptHandle,
            VisibilityTimeout: seconds,
          })),
        }),
      );
    } catch (err) {
      // Not fatal: they come back after their visibility timeout instead.
      deps.logger.warn('could not change the visibility of records to retry', errorSummary(err));
    }
  }
}

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
  const resolver = overrides.resolver ?? systemResolver;
  let client: { key: string; client: CaptchaAiClient } | undefined;
  return {
    config,
    store: new OutcomesStore({ client: ddb, tableName: config.tableName, now }),
    sqs,
    pipeline: new PipelineControl({
      lambda: clients.lambda ?? new LambdaClient({}),
      ssm: clients.ssm ?? new SSMClient({}),
      stateParameterName: config.pipelineStateParam,
      workerFunctionName: config.functionName,
      queueArn: config.queueArn,
    }),
    solver: async () => {
      const key = await getApiKey(secrets, config.captchaAiSecretName);
      if (client?.key !== key) {
        client = {
          key,
          client: new CaptchaAiClient({
            apiKey: key,
            baseUrl: config.captchaAiUrl,
            timeScale: config.timeScale,
            timings: config.captchaTimings,
            now,
          }),
        };
      }
      return client.client;
    },
    resolver,
    dispatcher: createTargetAgent(config.allowlist, resolver, config.targetTimeoutMs),
    now,
    sleep: abortableSleep,
    logger: new Logger({ serviceName: process.env.POWERTOOLS_SERVICE_NAME ?? 'threadgate-worker' }),
    metrics: new Metrics({
      namespace: process.env.POWERTOOLS_METRICS_NAMESPACE ?? 'threadgate',
      serviceName: process.env.POWERTOOLS_SERVICE_NAME ?? 'threadgate-worker',
    }),
    ...overrides,
  };
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

/** Time kept back before the function timeout to leave the record cleanly. */
const DEADLINE_MARGIN_MS = 3_000;

let moduleDeps: WorkerDeps | undefined;

/** Lambda entry point: config read and clients created once per instance. */
export const handler = async (event: SQSEvent, context?: Context): Promise<SQSBatchResponse> => {
  moduleDeps ??= createWorkerDeps(readWorkerConfig(process.env));
  const deps = moduleDeps;
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
    return await processBatch(event, deps, { signal: controller.signal });
  } finally {
    if (timer) clearTimeout(timer);
  }
};
