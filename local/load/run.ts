import { setTimeout as sleep } from 'node:timers/promises';
import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import { SQSClient } from '@aws-sdk/client-sqs';
import { bareNodeRssBytes, stamp } from '../../bench/run.js';
import { isFinalStatus } from '../../functions/records/store.js';
import { clientConfig } from '../emulator/deploy.js';
import { environmentPeakBytes } from '../runtime/types.js';
import { type LocalStack, startLocalStack } from '../stack/local-stack.js';
import { queueDepth, readOutcomes, untilPollerLimit } from '../stack/observation.js';
import { expectedOutcomes, generatedRecords } from '../stack/records.js';
import { everyRecordFinished, feedQueue, progressOf } from '../stack/run.js';
import { keyOf, type LoadSummary, planLoad } from './plan.js';

/**
 * `threadgate load` (`npm run load`): many records through the local stack (moto + the
 * deployed CDK app + the local runtime + both stand-ins, local/stack/local-stack.ts) at a given cap,
 * sent by several concurrent producers (SendMessageBatch streams, each with its own SQS
 * client), with a share of records sent twice. Waits until every record has a final outcome
 * and the jobs queue is empty, then summarizes what the invariants need (local/load/plan.ts):
 * outcomes, in.php per record, DLQ, in flight against the cap, ZERO_BALANCE, and the memory of
 * the runtime's execution environments and of its process. A run, not a timed test.
 */
export interface LoadOptions {
  /** Distinct records. @default 5000 */
  records?: number;
  /** The cap (plan threads − reserve). @default 50 */
  cap?: number;
  /** Plan threads kept free. @default 0 */
  reserve?: number;
  /** Concurrent producers. @default 4 */
  producers?: number;
  /** Share of records sent twice. @default 0.05 */
  duplicateRate?: number;
  /** CaptchaAI's latencies and the client's waits run this many times as long. @default 0.1 */
  timeScale?: number;
  /** Each producer keeps at most this many messages visible in the queue. @default 2 × cap */
  maxQueued?: number;
  /** Give up after this long (the summary says complete: false). @default 30 min */
  timeoutMs?: number;
  /** Progress lines (stderr in the CLI). */
  log?: (line: string) => void;
  signal?: AbortSignal;
}

export const LOAD_DEFAULTS = {
  records: 5000,
  cap: 50,
  reserve: 0,
  producers: 4,
  duplicateRate: 0.05,
  timeScale: 0.1,
} as const;

const MB = 1048576;
const round1 = (n: number) => Math.round(n * 10) / 10;

export async function runLoad(options: LoadOptions = {}): Promise<LoadSummary> {
  const records = options.records ?? LOAD_DEFAULTS.records;
  const cap = options.cap ?? LOAD_DEFAULTS.cap;
  const reserve = options.reserve ?? LOAD_DEFAULTS.reserve;
  const producers = options.producers ?? LOAD_DEFAULTS.producers;
  const duplicateRate = options.duplicateRate ?? LOAD_DEFAULTS.duplicateRate;
  const timeScale = options.timeScale ?? LOAD_DEFAULTS.timeScale;
  const log = options.log ?? (() => undefined);
  const checkAborted = () => {
    if (options.signal?.aborted) throw new Error('the load run was interrupted');
  };
  const t0 = performance.now();
  let peakRss = process.memoryUsage().rss;
  const rssSampler = setInterval(() => {
    peakRss = Math.max(peakRss, process.memoryUsage().rss);
  }, 1000);

  log(
    `load: ${records} records, cap ${cap}, ${producers} producers, ${duplicateRate * 100} % duplicates, time scale ${timeScale}`,
  );
  const stack = await startLocalStack({
    threads: cap + reserve,
    reserve,
    timeScale,
    onPhase: (m) => log(`load: ${m}`),
  });
  try {
    checkAborted();
    await untilPollerLimit(stack, cap);
    const conf = await stack.lambda.send(
      new GetFunctionConfigurationCommand({ FunctionName: stack.outputs.WorkerFunctionName }),
    );
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, records, `load-${stamp(new Date())}`);
    const plan = planLoad(bodies, producers, duplicateRate);
    const expected = expectedOutcomes(bodies);

    stack.captcha.resetStats();
    const runStartedAt = Date.now();
    const feed = startProducers(stack, plan, options.maxQueued ?? 2 * cap, options.signal);
    const run = { records, runStartedAt, timeoutMs: options.timeoutMs ?? 30 * 60_000, log, checkAborted };
    const finished = await waitForLoad(stack, run, plan, expected, feed);
    feed.stop.abort();
    await feed.feeding;
    const runS = (Date.now() - runStartedAt) / 1000;
    // Copies of records that were being worked wait out the other owner's lease before they
    // are dropped; wait for the queue to empty, up to one lease and a minute.
    const leaseS = Number(conf.Environment?.Variables?.LEASE_SECONDS ?? 900);
    const depth = finished
      ? await drainDuplicates(stack, leaseS, run)
      : await queueDepth(stack, stack.outputs.QueueUrl);
    const summary = await loadSummary(stack, {
      records,
      producers,
      cap,
      timeScale,
      plan,
      expected,
      finished,
      queueLeft: depth.visible + depth.inFlight,
    });
    const memory = memoryFigures(stack, conf.MemorySize ?? 128, peakRss);
    return {
      ...summary,
      wall_s: round1((performance.now() - t0) / 1000),
      run_s: round1(runS),
      records_per_s: round1(records / runS),
      memory,
      log_dir: stack.logDir,
    };
  } finally {
    clearInterval(rssSampler);
    log('load: stopping the local stack');
    await stack.stop();
  }
}

type Stack = LocalStack;
type Plan = ReturnType<typeof planLoad>;
type Expected = ReturnType<typeof expectedOutcomes>;
interface RunContext {
  records: number;
  runStartedAt: number;
  timeoutMs: number;
  log: (line: string) => void;
  checkAborted: () => void;
}

/** One stream of SendMessageBatch calls per producer, each with its own client (connections). */
function startProducers(stack: Stack, plan: Plan, maxQueued: number, signal: AbortSignal | undefined) {
  const sentBy = new Array<number>(plan.streams.length).fill(0);
  const keysOf = plan.streams.map((stream) => stream.map((body) => keyOf(body)));
  const feed = {
    sent: () => sentBy.reduce((a, b) => a + b, 0),
    /** The record keys of the messages sent so far. */
    sentKeys: () => new Set(keysOf.flatMap((keys, p) => keys.slice(0, sentBy[p]))),
    error: undefined as unknown,
    // The producers stop when the run is interrupted, or when it ends without them (a pause, a timeout).
    stop: new AbortController(),
    feeding: Promise.resolve(),
  };
  const feedSignal = signal ? AbortSignal.any([signal, feed.stop.signal]) : feed.stop.signal;
  feed.feeding = Promise.all(
    plan.streams.map((stream, p) =>
      feedQueue({ sqs: new SQSClient(clientConfig(stack.awsEnv)) }, stack.outputs.QueueUrl, stream, {
        maxQueued,
        signal: feedSignal,
        onSent: (n) => {
          sentBy[p] = n;
        },
      }),
    ),
  )
    .then(() => undefined)
    .catch((err: unknown) => {
      feed.error = err;
    });
  return feed;
}

/** Waits until every record has finished and every message was sent, a pause, or the timeout. */
async function waitForLoad(
  stack: Stack,
  run: RunContext,
  plan: Plan,
  expected: Expected,
  feed: ReturnType<typeof startProducers>,
): Promise<boolean> {
  const { log } = run;
  for (;;) {
    // progressOf reads every unfinished key of the run (BatchGetItem): every 10 s, not more (the
    // emulator serves the run too).
    for (let i = 0; i < 5; i++) {
      await sleep(2000);
      if (feed.error) throw feed.error;
      run.checkAborted();
    }
    // Only the keys sent so far are read: the emulator that serves the run also serves these reads
    // (the keys not sent yet have no row to find).
    const sent = feed.sentKeys();
    const progress = await progressOf(stack, { keys: sent, unkeyed: 0 }, run.runStartedAt, feed.sent());
    const finished =
      everyRecordFinished(progress) && feed.sent() === plan.messages && sent.size === expected.keys.size;
    const elapsed = Date.now() - run.runStartedAt;
    const s = stack.captcha.stats();
    log(
      `load: ${(elapsed / 1000).toFixed(0)} s: ${progress.done}/${run.records} done, ${feed.sent()}/${plan.messages} sent, ` +
        `${s.inFlight} in flight (max ${s.maxInFlight}), cap ${progress.cap}, ZERO_BALANCE ${s.zeroBalance}, ` +
        `DLQ ${progress.dlq}, RSS ${Math.round(process.memoryUsage().rss / MB)} MB`,
    );
    if (finished) return true;
    if (progress.paused) {
      log(
        `load: the pipeline paused itself (${progress.paused.code ?? progress.paused.reason ?? ''}); stopping`,
      );
      return false;
    }
    if (elapsed > run.timeoutMs) {
      log(`load: timed out after ${(elapsed / 1000).toFixed(0)} s`);
      return false;
    }
  }
}

/** Waits for the duplicate messages left in the queue to be dropped, up to one lease and a minute. */
async function drainDuplicates(stack: Stack, leaseS: number, run: RunContext) {
  const drainUntil = Date.now() + (leaseS + 60) * 1000;
  let depth = await queueDepth(stack, stack.outputs.QueueUrl);
  if (depth.visible + depth.inFlight > 0) {
    run.log(
      `load: every record finished; waiting for ${depth.visible + depth.inFlight} duplicate messages to be dropped`,
    );
  }
  while (depth.visible + depth.inFlight > 0 && Date.now() < drainUntil) {
    run.checkAborted();
    await sleep(2000);
    depth = await queueDepth(stack, stack.outputs.QueueUrl);
  }
  return depth;
}

/** The outcomes, the stand-in's counters and the DLQ after the run. */
async function loadSummary(
  stack: Stack,
  r: {
    records: number;
    producers: number;
    cap: number;
    timeScale: number;
    plan: Plan;
    expected: Expected;
    finished: boolean;
    /** Messages left in the queue (visible or in flight). */
    queueLeft: number;
  },
) {
  const rows = (await readOutcomes(stack)).filter((row) => r.expected.keys.has(row.record_key));
  const outcomes: Record<string, number> = {};
  let final = 0;
  for (const row of rows) {
    if (!isFinalStatus(row.status)) continue;
    final++;
    outcomes[row.status] = (outcomes[row.status] ?? 0) + 1;
  }
  const dlq = await queueDepth(stack, stack.outputs.DlqUrl);
  const standin = stack.captcha.stats();
  return {
    records: r.records,
    messages: r.plan.messages,
    duplicates: r.plan.duplicatedKeys.length,
    producers: r.producers,
    cap: r.cap,
    plan_threads: standin.threads,
    time_scale: r.timeScale,
    complete: r.finished,
    outcomes,
    unfinished: r.records - final,
    in_php: standin.submits,
    records_solved_twice: Object.values(standin.submitsByPageurl).filter((n) => n > 1).length,
    dlq: dlq.visible + dlq.inFlight,
    queue_left: r.queueLeft,
    max_in_flight: standin.maxInFlight,
    zero_balance: standin.zeroBalance,
  };
}

/** The worker's memory: per environment (its peak heap and external memory on a bare Node) and the process's. */
function memoryFigures(stack: Stack, functionMemoryMb: number, peakRss: number): LoadSummary['memory'] {
  const memory = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName]?.memory ?? {
    environments: [],
    processPeakRss: 0,
  };
  const bareRss = bareNodeRssBytes();
  const envPeak = Math.max(0, ...memory.environments.map(environmentPeakBytes));
  const processPeak = Math.max(peakRss, memory.processPeakRss);
  const envCount = memory.environments.length;
  return {
    function_memory_mb: functionMemoryMb,
    environments: envCount,
    environment_peak_mb: round1((envPeak + (Number.isFinite(bareRss) ? bareRss : 0)) / MB),
    environment_peak_heap_used_mb: round1(
      Math.max(0, ...memory.environments.map((e) => e.peakHeapUsed)) / MB,
    ),
    process_peak_rss_mb: round1(processPeak / MB),
    process_rss_per_environment_mb: envCount ? round1(processPeak / MB / envCount) : 0,
  };
}
