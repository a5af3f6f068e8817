import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import seedrandom from 'seedrandom';
import { DEFAULT_TIMINGS } from '../functions/captchaai/timings.js';
import type { CaptchaTask } from '../functions/captchaai/types.js';
import { captchaTaskOf, captchaTypeOf, validateJobMessage } from '../functions/records/job-schema.js';
import { REPO_ROOT } from '../local/emulator/deploy.js';
import { type LocalStack, startLocalStack } from '../local/stack/local-stack.js';
import { queueDepth, untilPollerLimit, workerMapping } from '../local/stack/observation.js';
import { expectedOutcomes, generatedRecords, type RecordMix } from '../local/stack/records.js';
import { everyRecordFinished, feedQueue, progressOf, summarize as summarizeRun } from '../local/stack/run.js';
import { DEFAULT_LATENCY } from '../local/standins/captchaai/standin.js';
import { type BaselineResult, runUncappedBaseline } from './baseline.js';
import { type BenchReport, buildReport } from './report/build.js';
import { formatReport } from './report/format.js';
import { expectedPollWaitMs, mixMeanMs, round } from './stats.js';
import type { ChartPoint } from './svg.js';
import { parseFunctionLog } from './worker-log.js';

/**
 * `npm run bench`: the local stack (moto + the deployed CDK app + the local runtime + both
 * stand-ins, local/stack/local-stack.ts) with a plan of `threads` threads, fed `records` good records
 * of mixed CAPTCHA types the way an upstream job streams them (the queue kept shallow), while
 * the stand-in's threads in flight, the worker invocations in flight and the cap are sampled.
 * Then an uncapped baseline against the same stand-in (bench/baseline.ts). Writes
 * `<outDir>/<name>.json` and `<name>.svg` and returns the report.
 *
 * Units: "wall" values are what the clock on this machine measured while CaptchaAI's waits ran
 * `timeScale` times as fast; "unscaled" values are what those waits would take at time scale 1
 * (wall ÷ timeScale). AWS calls, target HTTP and start-up are never scaled: their wall
 * milliseconds are real milliseconds.
 */
export interface BenchOptions {
  /** Plan threads of the CaptchaAI stand-in. @default 20 */
  threads?: number;
  /** Threads kept free; the cap is threads − reserve. @default 0 */
  reserve?: number;
  /** Records to solve. @default 1000 */
  records?: number;
  /** CaptchaAI's latencies and the client's waits run this many times as long. @default 0.2 */
  timeScale?: number;
  /** The feeder keeps at most this many messages visible in the queue. @default 2 × cap, at least 10 */
  maxQueued?: number;
  /** Sampling period of in-flight counts, ms. @default 100 */
  sampleMs?: number;
  /** @default <repo>/bench/results */
  outDir?: string;
  /** File name without extension. @default <UTC time>-t<threads>-n<records> */
  name?: string;
  /** Weights of the CAPTCHA types of the records. @default every sample type in turn */
  mix?: RecordMix;
  /** The target form's page-load and POST delays at time scale 1, ms (scaled like CaptchaAI). @default 400 / 200 */
  targetDelays?: { pageMs: number; postMs: number };
  /** Run the uncapped baseline after the capped run. @default true */
  baseline?: boolean;
  /**
   * Seed of the stand-in's solve latencies. The same seed draws the same latencies in the same
   * order, so two runs (say, at two time scales) solve the same sample. @default 1
   */
  seed?: number;
  /** Give up on the capped run after this long (the report says complete: false). @default 3 × expected + 2 min */
  timeoutMs?: number;
  /** Progress lines (stderr in the CLI). */
  log?: (line: string) => void;
  /** Stops the run (the local stack is stopped, nothing is written). */
  signal?: AbortSignal;
}

export const BENCH_DEFAULTS = {
  threads: 20,
  reserve: 0,
  records: 1000,
  timeScale: 0.2,
  seed: 1,
  // A real form's server answers in hundreds of milliseconds; the page load overlaps the solve.
  targetDelays: { pageMs: 400, postMs: 200 },
} as const;

/** Times the emulator's own answers to the calls the worker and the feeder make, beside the run. */
class EmulatorProbe {
  readonly samples: Record<string, number[]> = {
    dynamodb_get_item: [],
    ssm_get_parameter: [],
    sqs_get_queue_attributes: [],
  };
  /** Per probe round: seconds since the run started, the slowest call's ms, the visible queue depth. */
  readonly rounds: { t: number; slowestMs: number; queued: number | undefined }[] = [];
  private stopped = false;
  private loop: Promise<void> | undefined;
  paused = false;

  constructor(
    private readonly stack: LocalStack,
    private readonly origin: number,
  ) {}

  /** Every 2 s: the probe's calls are part of the emulator's load, which is part of what is measured. */
  start(periodMs = 2000): void {
    let slowest = 0;
    const time = async <T>(name: string, call: () => Promise<T>): Promise<T | undefined> => {
      const t = performance.now();
      try {
        const out = await call();
        const ms = performance.now() - t;
        this.samples[name]?.push(ms);
        slowest = Math.max(slowest, ms);
        return out;
      } catch {
        // A failed probe says nothing about latency.
        return undefined;
      }
    };
    this.loop = (async () => {
      while (!this.stopped) {
        slowest = 0;
        const t = (performance.now() - this.origin) / 1000;
        await time('dynamodb_get_item', () =>
          this.stack.documents.send(
            new GetCommand({ TableName: this.stack.outputs.TableName, Key: { record_key: 'bench-probe' } }),
          ),
        );
        await time('ssm_get_parameter', async () => {
          this.paused = (await this.stack.control.readState()).paused;
        });
        const depth = await time('sqs_get_queue_attributes', () =>
          queueDepth(this.stack, this.stack.outputs.QueueUrl),
        );
        this.rounds.push({ t, slowestMs: slowest, queued: depth?.visible });
        await sleep(periodMs);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }
}

/** A UTC time for file and batch names: 20261201-135512. */
export function stamp(d: Date): string {
  return d.toISOString().slice(0, 19).replace(/[-:]/g, '').replace('T', '-');
}

export async function runBench(options: BenchOptions = {}): Promise<BenchReport> {
  const threads = options.threads ?? BENCH_DEFAULTS.threads;
  const reserve = options.reserve ?? BENCH_DEFAULTS.reserve;
  const records = options.records ?? BENCH_DEFAULTS.records;
  const timeScale = options.timeScale ?? BENCH_DEFAULTS.timeScale;
  const cap = threads - reserve;
  if (!Number.isInteger(threads) || threads < 1) throw new RangeError(`threads must be an integer >= 1`);
  if (!Number.isInteger(reserve) || reserve < 0 || cap < 1) {
    throw new RangeError(`reserve must be an integer >= 0 below threads (the cap must be >= 1)`);
  }
  if (!Number.isInteger(records) || records < 1) throw new RangeError(`records must be an integer >= 1`);
  if (!(timeScale > 0 && timeScale <= 1)) throw new RangeError(`time scale must be within (0, 1]`);
  const maxQueued = options.maxQueued ?? Math.max(10, 2 * cap);
  const sampleMs = options.sampleMs ?? 100;
  const log = options.log ?? (() => undefined);
  const started = new Date();
  const name = options.name ?? `${stamp(started)}-t${threads}-n${records}`;
  const outDir = options.outDir ?? join(REPO_ROOT, 'bench', 'results');
  const loadStart = loadavg()[0] ?? 0;
  const t0 = performance.now();

  const seed = options.seed ?? BENCH_DEFAULTS.seed;
  log(
    `bench: plan ${threads} threads, reserve ${reserve} (cap ${cap}), ${records} records, time scale ${timeScale}, seed ${seed}`,
  );
  const targetDelays = options.targetDelays ?? BENCH_DEFAULTS.targetDelays;
  const stack = await startLocalStack({
    threads,
    reserve,
    timeScale,
    targetDelays,
    random: seedrandom(String(seed)),
    onPhase: (m) => log(`bench: ${m}`),
  });
  let report: BenchReport;
  const checkAborted = () => {
    if (options.signal?.aborted) throw new Error('the benchmark was interrupted');
  };
  try {
    checkAborted();
    await untilPollerLimit(stack, cap);
    const memoryMb =
      (
        await stack.lambda.send(
          new GetFunctionConfigurationCommand({ FunctionName: stack.outputs.WorkerFunctionName }),
        )
      ).MemorySize ?? 128;

    const bodies = generatedRecords(
      stack.site.url,
      stack.site.sitekey,
      records,
      `bench-${stamp(started)}`,
      options.mix,
    );
    const mix: Record<string, number> = {};
    const tasks: CaptchaTask[] = [];
    for (const body of bodies) {
      const v = validateJobMessage(body);
      if (!v.ok) throw new Error(`generated record is invalid: ${v.reason}`);
      const type = captchaTypeOf(v.job);
      mix[type] = (mix[type] ?? 0) + 1;
      tasks.push(captchaTaskOf(v.job));
    }
    const modelledMeanMs = mixMeanMs(mix, DEFAULT_LATENCY);
    let predictedPollMs = 0;
    for (const [type, count] of Object.entries(mix)) {
      const t = type as keyof typeof DEFAULT_LATENCY;
      predictedPollMs +=
        count *
        expectedPollWaitMs(
          DEFAULT_LATENCY[t],
          DEFAULT_TIMINGS.firstPollMs[t],
          DEFAULT_TIMINGS.pollIntervalMs[t],
        );
    }
    predictedPollMs /= records;
    const startupS = (performance.now() - t0) / 1000;

    // ---- the capped run -------------------------------------------------------------------
    stack.captcha.resetStats();
    const deletedBefore = workerMapping(stack)?.deleted ?? 0;
    const receivedBefore = workerMapping(stack)?.received ?? 0;
    const invocationsBefore =
      stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName]?.invocations ?? 0;
    const runStartedAt = Date.now();
    const runT0 = performance.now();
    const series: ChartPoint[] = [];
    const busy: { t: number; ms: number }[] = [];
    const sampler = setInterval(() => {
      const s = stack.captcha.stats();
      busy.push({ t: (performance.now() - runT0) / 1000, ms: s.busyThreadMs });
      const mapping = workerMapping(stack);
      const fn = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName];
      series.push({
        t: (performance.now() - runT0) / 1000,
        inFlight: s.inFlight,
        invocations: fn?.inFlight ?? 0,
        cap: mapping ? (mapping.enabled ? mapping.limit : 0) : cap,
        planThreads: s.threads,
      });
    }, sampleMs);
    const probe = new EmulatorProbe(stack, runT0);
    probe.start();
    let sendCalls = 0;
    let lastSent = 0;
    let feedError: unknown;
    const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, {
      maxQueued,
      // The emulator's load is part of what is measured, and a producer does not poll its queue's
      // depth five times a second; the queue holds 2 × cap, more than a second of work.
      pollMs: 1000,
      onSent: (n) => {
        sendCalls += 1;
        lastSent = n;
      },
    }).catch((err: unknown) => {
      feedError = err;
    });
    const expectedMs = ((records * (modelledMeanMs + predictedPollMs) * timeScale) / cap) * 1.2;
    const timeoutMs = options.timeoutMs ?? 3 * expectedMs + 120_000;
    let lastLog = 0;
    let lastCheck = 0;
    let done = 0;
    let finished = false;
    const expected = expectedOutcomes(bodies);
    for (;;) {
      await sleep(250);
      const elapsed = performance.now() - runT0;
      // "Every record finished" as the local stack defines it (a table Scan, so every 5 s, not
      // every tick: the emulator's load is part of what the benchmark measures; the run's end is
      // the last answer, so a later check does not change a figure).
      if (elapsed - lastCheck >= 5000) {
        lastCheck = elapsed;
        const progress = await progressOf(stack, expected, runStartedAt, lastSent);
        done = progress.done;
        finished = everyRecordFinished(progress);
      }
      if (elapsed - lastLog >= 5000) {
        lastLog = elapsed;
        const s = stack.captcha.stats();
        log(
          `bench: capped run ${(elapsed / 1000).toFixed(0)} s: ${done}/${records} done, ${lastSent} sent, ` +
            `${s.inFlight} in flight (max ${s.maxInFlight}), cap ${workerMapping(stack)?.limit ?? '?'}, ZERO_BALANCE ${s.zeroBalance}`,
        );
      }
      if (feedError) throw feedError;
      checkAborted();
      if (finished) break;
      if (probe.paused) {
        log('bench: the pipeline paused itself; stopping the capped run');
        break;
      }
      if (elapsed > timeoutMs) {
        log(`bench: capped run timed out after ${(elapsed / 1000).toFixed(0)} s`);
        break;
      }
    }
    clearInterval(sampler);
    await probe.stop();
    await feeding;
    const cappedS = (performance.now() - runT0) / 1000;
    const standinStats = stack.captcha.stats();
    const progress = await progressOf(stack, expected, runStartedAt, lastSent);
    const runSummary = await summarizeRun(stack, progress, runStartedAt);
    const mappingAfter = workerMapping(stack);
    const fnStats = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName];
    // The runtime writes function logs through a stream; give the last lines a moment.
    await sleep(500);
    const logText = readFileSync(join(stack.logDir, `${stack.outputs.WorkerFunctionName}.log`), 'utf8');
    const invocations = parseFunctionLog(logText).filter((i) => (i.startedAt ?? 0) >= runStartedAt - 1000);

    // ---- the baseline -----------------------------------------------------------------------
    let baseline: BaselineResult | null = null;
    let baselineS: number | null = null;
    checkAborted();
    if (options.baseline !== false) {
      log(`bench: uncapped baseline: ${records} records straight to the stand-in, no limiter`);
      const b0 = performance.now();
      baseline = await runUncappedBaseline({
        url: stack.captcha.url,
        apiKey: stack.apiKey,
        timeScale,
        tasks,
        standin: stack.captcha,
        memoryMb,
      });
      baselineS = (performance.now() - b0) / 1000;
    }

    report = buildReport({
      name,
      started,
      loadStart,
      threads,
      reserve,
      cap,
      records,
      timeScale,
      seed,
      maxQueued,
      mix,
      memoryMb,
      modelledMeanMs,
      predictedPollMs,
      runStartedAt,
      series,
      busy,
      targetDelays,
      invocations,
      probe: probe.samples,
      probeRounds: probe.rounds,
      standin: {
        maxInFlight: standinStats.maxInFlight,
        zeroBalance: standinStats.zeroBalance,
        threads: standinStats.threads,
        submits: standinStats.submits,
        polls: standinStats.polls,
        solved: standinStats.solved,
        rateLimited: (standinStats.errors.ERROR_TOO_MUCH_REQUESTS ?? 0) + (standinStats.errors.HTTP_429 ?? 0),
      },
      runSummary,
      sqs: {
        sendCalls,
        received: (mappingAfter?.received ?? 0) - receivedBefore,
        deleted: (mappingAfter?.deleted ?? 0) - deletedBefore,
      },
      workerInvocations: (fnStats?.invocations ?? 0) - invocationsBefore,
      memory: fnStats?.memory ?? { environments: [], processPeakRss: 0 },
      bareNodeRss: bareNodeRssBytes(),
      timeouts: fnStats?.timeouts ?? 0,
      baseline,
      phases: {
        startup: startupS,
        capped_run: cappedS,
        baseline: baselineS,
        total: (performance.now() - t0) / 1000,
      },
      logDir: stack.logDir,
      outDir,
    });
  } finally {
    log('bench: stopping the local stack');
    await stack.stop();
  }
  report.phases_s.total = round((performance.now() - t0) / 1000, 1) ?? 0;
  mkdirSync(outDir, { recursive: true });
  writeFileSync(report.files.json, `${JSON.stringify(report, null, 2)}\n`);
  return report;
}

export { formatReport };

/** RSS of a bare Node process of this machine's Node (what every Lambda environment starts from). */
export function bareNodeRssBytes(): number {
  try {
    return Number(
      execFileSync(process.execPath, ['-e', 'process.stdout.write(String(process.memoryUsage().rss))'], {
        encoding: 'utf8',
      }),
    );
  } catch {
    return Number.NaN;
  }
}
