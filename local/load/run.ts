import { setTimeout as sleep } from 'node:timers/promises';
import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import { SQSClient } from '@aws-sdk/client-sqs';
import { bareNodeRssBytes, stamp } from '../../bench/run.js';
import { isFinalStatus } from '../../functions/records/store.js';
import { clientConfig } from '../emulator/deploy.js';
import { environmentPeakBytes } from '../runtime/types.js';
import { startLocalStack } from '../stack/local-stack.js';
import { queueDepth, readOutcomes, untilPollerLimit } from '../stack/observation.js';
import { expectedOutcomes, generatedRecords } from '../stack/records.js';
import { everyRecordFinished, feedQueue, progressOf } from '../stack/run.js';
import { type LoadSummary, planLoad } from './plan.js';

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
  const maxQueued = options.maxQueued ?? 2 * cap;
  const timeoutMs = options.timeoutMs ?? 30 * 60_000;
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
    const functionMemoryMb = conf.MemorySize ?? 128;
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, records, `load-${stamp(new Date())}`);
    const plan = planLoad(bodies, producers, duplicateRate);
    const expected = expectedOutcomes(bodies);

    stack.captcha.resetStats();
    const runStartedAt = Date.now();
    const sentBy = new Array<number>(producers).fill(0);
    const sent = () => sentBy.reduce((a, b) => a + b, 0);
    let feedError: unknown;
    // The producers stop when the run is interrupted, or when it ends without them (a pause, a timeout).
    const stopFeeding = new AbortController();
    const feedSignal = options.signal
      ? AbortSignal.any([options.signal, stopFeeding.signal])
      : stopFeeding.signal;
    // Each producer is its own stream of SendMessageBatch calls with its own client (connections).
    const feeding = Promise.all(
      plan.streams.map((stream, p) =>
        feedQueue({ sqs: new SQSClient(clientConfig(stack.awsEnv)) }, stack.outputs.QueueUrl, stream, {
          maxQueued,
          signal: feedSignal,
          onSent: (n) => {
            sentBy[p] = n;
          },
        }),
      ),
    ).catch((err: unknown) => {
      feedError = err;
    });

    let finished = false;
    for (;;) {
      // progressOf Scans the whole table: every 10 s, not more (the emulator serves the run too).
      for (let i = 0; i < 5; i++) {
        await sleep(2000);
        if (feedError) throw feedError;
        checkAborted();
      }
      const progress = await progressOf(stack, expected, runStartedAt, sent());
      finished = everyRecordFinished(progress) && sent() === plan.messages;
      const elapsed = Date.now() - runStartedAt;
      const s = stack.captcha.stats();
      log(
        `load: ${(elapsed / 1000).toFixed(0)} s: ${progress.done}/${records} done, ${sent()}/${plan.messages} sent, ` +
          `${s.inFlight} in flight (max ${s.maxInFlight}), cap ${progress.cap}, ZERO_BALANCE ${s.zeroBalance}, ` +
          `DLQ ${progress.dlq}, RSS ${Math.round(process.memoryUsage().rss / MB)} MB`,
      );
      if (finished) break;
      if (progress.paused) {
        log(
          `load: the pipeline paused itself (${progress.paused.code ?? progress.paused.reason ?? ''}); stopping`,
        );
        break;
      }
      if (elapsed > timeoutMs) {
        log(`load: timed out after ${(elapsed / 1000).toFixed(0)} s`);
        break;
      }
    }
    stopFeeding.abort();
    await feeding;
    const runS = (Date.now() - runStartedAt) / 1000;

    // Copies of records that were being worked wait out the other owner's lease before they
    // are dropped; wait for the queue to empty, up to one lease and a minute.
    const leaseS = Number(conf.Environment?.Variables?.LEASE_SECONDS ?? 900);
    const drainUntil = Date.now() + (leaseS + 60) * 1000;
    let depth = await queueDepth(stack, stack.outputs.QueueUrl);
    if (finished && depth.visible + depth.inFlight > 0) {
      log(
        `load: every record finished; waiting for ${depth.visible + depth.inFlight} duplicate messages to be dropped`,
      );
    }
    while (finished && depth.visible + depth.inFlight > 0 && Date.now() < drainUntil) {
      checkAborted();
      await sleep(2000);
      depth = await queueDepth(stack, stack.outputs.QueueUrl);
    }

    const rows = (await readOutcomes(stack)).filter((r) => expected.keys.has(r.record_key));
    const outcomes: Record<string, number> = {};
    let final = 0;
    for (const row of rows) {
      if (!isFinalStatus(row.status)) continue;
      final++;
      outcomes[row.status] = (outcomes[row.status] ?? 0) + 1;
    }
    const dlq = await queueDepth(stack, stack.outputs.DlqUrl);
    const standin = stack.captcha.stats();
    const memory = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName]?.memory ?? {
      environments: [],
      processPeakRss: 0,
    };
    const bareRss = bareNodeRssBytes();
    const envPeak = Math.max(0, ...memory.environments.map(environmentPeakBytes));
    const processPeak = Math.max(peakRss, memory.processPeakRss);
    const envCount = memory.environments.length;
    return {
      records,
      messages: plan.messages,
      duplicates: plan.duplicatedKeys.length,
      producers,
      cap,
      plan_threads: standin.threads,
      time_scale: timeScale,
      complete: finished,
      outcomes,
      unfinished: records - final,
      in_php: standin.submits,
      records_solved_twice: Object.values(standin.submitsByPageurl).filter((n) => n > 1).length,
      dlq: dlq.visible + dlq.inFlight,
      queue_left: depth.visible + depth.inFlight,
      max_in_flight: standin.maxInFlight,
      zero_balance: standin.zeroBalance,
      wall_s: round1((performance.now() - t0) / 1000),
      run_s: round1(runS),
      records_per_s: round1(records / runS),
      memory: {
        function_memory_mb: functionMemoryMb,
        environments: envCount,
        environment_peak_mb: round1((envPeak + (Number.isFinite(bareRss) ? bareRss : 0)) / MB),
        environment_peak_heap_used_mb: round1(
          Math.max(0, ...memory.environments.map((e) => e.peakHeapUsed)) / MB,
        ),
        process_peak_rss_mb: round1(processPeak / MB),
        process_rss_per_environment_mb: envCount ? round1(processPeak / MB / envCount) : 0,
      },
      log_dir: stack.logDir,
    };
  } finally {
    clearInterval(rssSampler);
    log('load: stopping the local stack');
    await stack.stop();
  }
}
