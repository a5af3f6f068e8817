import { SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import type { PipelineState } from '../../functions/pipeline/control.js';
import { isFinalStatus } from '../../functions/records/store.js';
import { type RunEfficiency, runEfficiency, workerInvocations } from './efficiency.js';
import type { AnyLocalStack, LocalStack } from './local-stack.js';
import { currentCap, queueDepth, readDlq, readOutcomesOf, STATUS_FIELDS } from './observation.js';
import { expectedOutcomes } from './records.js';

/** A run on the local stack: feed records, watch progress until every record finished, summarize. */

/**
 * Sends bodies in batches of 10, keeping at most `maxQueued` visible in the queue: moto's
 * SQS gets slower as a queue grows, and real producers stream too.
 */
export async function feedQueue(
  stack: Pick<LocalStack, 'sqs'>,
  queueUrl: string,
  bodies: string[],
  options: {
    maxQueued?: number;
    /** How often a full queue's depth is read again, ms. @default 200 */
    pollMs?: number;
    signal?: AbortSignal;
    onSent?: (sent: number) => void;
  } = {},
): Promise<void> {
  const maxQueued = options.maxQueued ?? 50;
  const pollMs = options.pollMs ?? 200;
  let sent = 0;
  while (sent < bodies.length) {
    if (options.signal?.aborted) return;
    const depth = await queueDepth(stack, queueUrl);
    const room = Math.max(0, maxQueued - depth.visible);
    if (room === 0) {
      await new Promise((resolve) => setTimeout(resolve, pollMs));
      continue;
    }
    const end = Math.min(bodies.length, sent + room);
    for (let i = sent; i < end; i += 10) {
      const chunk = bodies.slice(i, Math.min(end, i + 10));
      const out = await stack.sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: chunk.map((body, n) => ({ Id: String(n), MessageBody: body })),
        }),
      );
      if (out.Failed?.length) {
        throw new Error(
          `SendMessageBatch failed for ${out.Failed.length} messages: ${out.Failed[0]?.Message}`,
        );
      }
      sent += chunk.length;
      options.onSent?.(sent);
    }
  }
}

export interface RunProgress {
  total: number;
  done: number;
  sent: number;
  inFlight: number;
  cap: number;
  planThreads: number;
  outcomes: Record<string, number>;
  dlq: number;
  elapsedS: number;
  paused: PipelineState | undefined;
}

export interface RunSummary {
  records: number;
  outcomes: Record<string, number>;
  dlq: number;
  /** in.php submits counted by the stand-in; null with an external server (not counted). */
  captcha_submits: number | null;
  /** Tasks in flight at the stand-in at most; with an external server, worker invocations in flight at most. */
  max_in_flight: number;
  max_in_flight_source: 'standin' | 'worker_invocations';
  cap: number;
  plan_threads: number;
  elapsed_s: number;
  /** ERROR_ZERO_BALANCE answers the stand-in gave; null with an external server (not counted). */
  zero_balance: number | null;
  invocations: number;
  /** Plan efficiency of the run (local/stack/efficiency.ts); null where the worker's log is not local (LocalStack). */
  efficiency: RunEfficiency | null;
  paused: PipelineState | undefined;
  complete: boolean;
  dlq_reasons: Record<string, number>;
  /** Form POSTs the target stand-in refused, by its reason (TOKEN_EXPIRED, NO_SESSION, …). */
  target_rejections: Record<string, number>;
  deploy_s: number | undefined;
  log_dir: string;
}

/**
 * "Every record finished", the one definition `threadgate local`, the benchmark and the e2e
 * suite share: each record with a usable record_key has a final outcome row (isFinalStatus:
 * submitted, failed or rejected), and each message without one is in the DLQ. progressOf
 * counts `done` that way; a run is finished when done reaches total.
 */
export function everyRecordFinished(p: Pick<RunProgress, 'done' | 'total'>): boolean {
  return p.done >= p.total;
}

/** Counts toward "done": final outcome rows of the run's keys, plus DLQ messages. */
export async function progressOf(
  stack: AnyLocalStack,
  expected: { keys: Set<string>; unkeyed: number },
  startedAt: number,
  sent: number,
): Promise<RunProgress> {
  const [rows, dlq, state, cap] = await Promise.all([
    readOutcomesOf(stack, expected.keys, STATUS_FIELDS).then((byKey) => byKey.values()),
    queueDepth(stack, stack.outputs.DlqUrl),
    stack.control.readState(),
    currentCap(stack),
  ]);
  const outcomes: Record<string, number> = {};
  let final = 0;
  for (const row of rows) {
    if (!expected.keys.has(row.record_key)) continue;
    // moto's UpdateItem on a new key first stores the bare key, then applies the SET: a Scan in
    // between sees a row without a status (real DynamoDB never shows that). It is a claim under way.
    if (typeof row.status !== 'string') continue;
    outcomes[row.status] = (outcomes[row.status] ?? 0) + 1;
    if (isFinalStatus(row.status)) final++;
  }
  const standin = stack.captcha?.stats();
  const dlqCount = dlq.visible + dlq.inFlight;
  return {
    total: expected.keys.size + expected.unkeyed,
    done: Math.min(expected.keys.size + expected.unkeyed, final + dlqCount),
    sent,
    // An external server is not asked every tick: the worker's invocations in flight stand in.
    inFlight: standin?.inFlight ?? workerStats(stack)?.inFlight ?? 0,
    cap,
    planThreads: standin?.threads ?? stack.threads,
    outcomes,
    dlq: dlqCount,
    elapsedS: (Date.now() - startedAt) / 1000,
    paused: state.paused ? state : undefined,
  };
}

export interface RunOptions {
  /** Called about every `intervalMs` with fresh counts. */
  onProgress?: (p: RunProgress) => void;
  intervalMs?: number;
  /** Give up after this long (the summary says complete: false). @default 600000 */
  timeoutMs?: number;
  /** Stop waiting as soon as the pipeline is paused. @default true */
  stopWhenPaused?: boolean;
  signal?: AbortSignal;
  maxQueued?: number;
}

/** Feeds the bodies, waits until each has an outcome or a DLQ entry (or a pause, a timeout), summarizes. */
export async function runRecords(
  stack: AnyLocalStack,
  bodies: string[],
  options: RunOptions = {},
): Promise<RunSummary> {
  const startedAt = Date.now();
  const expected = expectedOutcomes(bodies);
  let sent = 0;
  const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, {
    maxQueued: options.maxQueued,
    signal: options.signal,
    onSent: (n) => {
      sent = n;
    },
  });
  let feedError: unknown;
  feeding.catch((err) => {
    feedError = err;
  });
  const timeoutMs = options.timeoutMs ?? 600_000;
  let last: RunProgress;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 500));
    if (feedError) throw feedError;
    last = await progressOf(stack, expected, startedAt, sent);
    options.onProgress?.(last);
    if (everyRecordFinished(last) && sent === bodies.length) break;
    if (last.paused && options.stopWhenPaused !== false) break;
    if (options.signal?.aborted || Date.now() - startedAt > timeoutMs) break;
  }
  return summarize(stack, last, startedAt);
}

function workerStats(stack: AnyLocalStack) {
  return stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName];
}

export async function summarize(
  stack: AnyLocalStack,
  last: RunProgress,
  startedAt: number,
): Promise<RunSummary> {
  const standin = stack.captcha?.stats();
  const dlqReasons: Record<string, number> = {};
  if (last.dlq > 0) {
    for (const entry of await readDlq(stack, 1)) {
      const reason = entry.errorCode ?? entry.reason ?? 'unknown';
      dlqReasons[reason] = (dlqReasons[reason] ?? 0) + 1;
    }
  }
  const worker = workerStats(stack);
  const finalRows = Object.entries(last.outcomes)
    .filter(([status]) => isFinalStatus(status))
    .reduce((n, [, count]) => n + count, 0);
  const planThreads = standin?.threads ?? stack.threads;
  const efficiency = stack.runtime
    ? runEfficiency(
        await workerInvocations(stack.logDir, stack.outputs.WorkerFunctionName, startedAt, finalRows),
        planThreads,
        standin?.busyThreadMs,
      )
    : null;
  return {
    records: last.total,
    outcomes: last.outcomes,
    dlq: last.dlq,
    captcha_submits: standin?.submits ?? null,
    max_in_flight: standin?.maxInFlight ?? worker?.maxInFlight ?? 0,
    max_in_flight_source: standin ? 'standin' : 'worker_invocations',
    cap: last.cap,
    plan_threads: planThreads,
    elapsed_s: Math.round((Date.now() - startedAt) / 100) / 10,
    zero_balance: standin?.zeroBalance ?? null,
    invocations: worker?.invocations ?? 0,
    efficiency,
    paused: last.paused,
    complete: everyRecordFinished(last),
    dlq_reasons: dlqReasons,
    target_rejections: stack.site.stats().rejections,
    deploy_s: stack.deploy ? Math.round(stack.deploy.timings.totalMs / 100) / 10 : undefined,
    log_dir: stack.logDir,
  };
}
