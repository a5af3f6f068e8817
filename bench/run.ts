import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import seedrandom from 'seedrandom';
import { DEFAULT_POLL_SCHEDULE, type PollScheduleMode } from '../functions/captchaai/poll-schedule.js';
import { DEFAULT_TIMINGS } from '../functions/captchaai/timings.js';
import type { CaptchaTask, CaptchaType } from '../functions/captchaai/types.js';
import { checkLanes, laneShape } from '../functions/pipeline/lanes.js';
import { captchaTaskOf, captchaTypeOf, validateJobMessage } from '../functions/records/job-schema.js';
import { REPO_ROOT } from '../local/emulator/deploy.js';
import { type LocalStack, startLocalStack } from '../local/stack/local-stack.js';
import { deployedWorker, untilPollerLimit } from '../local/stack/observation.js';
import { generatedRecords, type RecordMix, withLargePages } from '../local/stack/records.js';
import { describeWorker } from '../local/stack/worker-shape.js';
import type { LatencyDistribution } from '../local/standins/captchaai/latency.js';
import { type BaselineResult, runUncappedBaseline } from './baseline.js';
import { type TemplateFacts, templateFacts } from './bill/template-facts.js';
import { cappedRun } from './capped-run.js';
import { type BenchReport, buildReport } from './report/build.js';
import { formatReport } from './report/format.js';
import type { LanesFacts } from './report/types.js';
import { modelFigures } from './simulate.js';
import { expectedPollWaitMs, mixMeanMs, round } from './stats.js';

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
  /** Solve-time distributions of the stand-in per CAPTCHA type (the rest keep DEFAULT_LATENCY). */
  latency?: Partial<Record<CaptchaType, LatencyDistribution>>;
  /** The worker's poll schedule (deploy-time setting pollSchedule). @default learned */
  pollSchedule?: PollScheduleMode;
  /** The worker's memory in MB (deploy-time setting workerMemoryMb). @default its default (which follows lanes) */
  workerMemoryMb?: number;
  /** The most lanes one worker invocation may run (deploy-time setting lanes). @default 1 */
  lanes?: number;
  /**
   * Share (0..1) of the records whose target page is padded to just under the worker's page-size
   * cap (MAX_PAGE_BYTES): the worst case for the worker's memory. @default 0
   */
  largePages?: number;
  /** Large pages come in runs of this many consecutive records (several lanes at once). @default 1 */
  largePageBurst?: number;
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

/** A UTC time for file and batch names: 20261201-135512. */
export function stamp(d: Date): string {
  return d.toISOString().slice(0, 19).replace(/[-:]/g, '').replace('T', '-');
}

/** The options with their defaults, checked. */
function benchSettings(options: BenchOptions) {
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
  const largePages = options.largePages ?? 0;
  if (!(largePages >= 0 && largePages <= 1))
    throw new RangeError(`large pages must be a share within [0, 1]`);
  const lanes = checkLanes(options.lanes ?? 1, 'lanes');
  const started = new Date();
  return {
    lanes,
    threads,
    reserve,
    records,
    timeScale,
    cap,
    maxQueued: options.maxQueued ?? Math.max(10, 2 * cap),
    sampleMs: options.sampleMs ?? 100,
    log: options.log ?? (() => undefined),
    started,
    name: options.name ?? `${stamp(started)}-t${threads}-n${records}`,
    outDir: options.outDir ?? join(REPO_ROOT, 'bench', 'results'),
    loadStart: loadavg()[0] ?? 0,
    t0: performance.now(),
    seed: options.seed ?? BENCH_DEFAULTS.seed,
    targetDelays: options.targetDelays ?? BENCH_DEFAULTS.targetDelays,
    largePages,
    largePageBurst: options.largePageBurst ?? 1,
    checkAborted: () => {
      if (options.signal?.aborted) throw new Error('the benchmark was interrupted');
    },
  };
}

export type BenchSettings = ReturnType<typeof benchSettings>;

/** The records to send, their CAPTCHA mix and the solve and poll times the mix predicts. */
function benchRecords(
  stack: LocalStack,
  o: BenchSettings,
  mixOption: RecordMix | undefined,
  latency: Record<CaptchaType, LatencyDistribution>,
) {
  // One batch_id for the run, as `threadgate enqueue` users who wait on a batch send them:
  // such rows are written to the batch index too, which the bill counts.
  const batchId = `bench-${stamp(o.started)}`;
  const bodies = withLargePages(
    generatedRecords(stack.site.url, stack.site.sitekey, o.records, batchId, mixOption).map((body) =>
      JSON.stringify({ ...(JSON.parse(body) as object), batch_id: batchId }),
    ),
    o.largePages,
    o.largePageBurst,
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
  const modelledMeanMs = mixMeanMs(mix, latency);
  let predictedPollMs = 0;
  for (const [type, count] of Object.entries(mix)) {
    const t = type as CaptchaType;
    predictedPollMs +=
      count *
      expectedPollWaitMs(latency[t], DEFAULT_TIMINGS.firstPollMs[t], DEFAULT_TIMINGS.pollIntervalMs[t]);
  }
  predictedPollMs /= o.records;
  return { bodies, mix, tasks, modelledMeanMs, predictedPollMs };
}

export type BenchRecords = ReturnType<typeof benchRecords>;

export async function runBench(options: BenchOptions = {}): Promise<BenchReport> {
  const o = benchSettings(options);
  const { threads, reserve, records, timeScale, cap, log } = o;
  log(
    `bench: plan ${threads} threads, reserve ${reserve} (cap ${cap}), ${records} records, time scale ${timeScale}, seed ${o.seed}`,
  );
  const stack = await startLocalStack({
    threads,
    reserve,
    timeScale,
    targetDelays: o.targetDelays,
    random: seedrandom(String(o.seed)),
    // Only pinned settings are passed: the defaults keep the cached synth of a plain stack.
    ...(options.pollSchedule || options.workerMemoryMb || o.lanes > 1
      ? {
          settings: {
            ...(options.pollSchedule ? { pollSchedule: options.pollSchedule } : {}),
            ...(options.workerMemoryMb ? { workerMemoryMb: options.workerMemoryMb } : {}),
            ...(o.lanes > 1 ? { lanes: o.lanes } : {}),
          },
        }
      : {}),
    onPhase: (m) => log(`bench: ${m}`),
  });
  let report: BenchReport;
  try {
    o.checkAborted();
    // With lanes the knobs (and so the poller's limit) hold r, not the cap.
    await untilPollerLimit(stack, laneShape(cap, o.lanes).r);
    const deployed = await deployedWorker(stack);
    const lanes: LanesFacts = deployed.lanes;
    const memoryMb = deployed.worker_memory_mb;
    log(`bench: worker ${describeWorker(deployed)} (Lambda quota needed: ${lanes.lambda_quota_needed})`);
    // Set before any task exists, so the seeded draws are made with these distributions.
    if (options.latency) stack.captcha.setLatency(options.latency);
    const latency = stack.captcha.latency();
    const work = benchRecords(stack, o, options.mix, latency);
    const pollSchedule = {
      ...DEFAULT_POLL_SCHEDULE,
      mode: options.pollSchedule ?? DEFAULT_POLL_SCHEDULE.mode,
    };
    const model = modelFigures({
      types: work.tasks.map((t) => t.type),
      latency,
      seed: o.seed,
      slots: cap,
      threads,
      timings: DEFAULT_TIMINGS,
      settings: pollSchedule,
    });
    const startupS = (performance.now() - o.t0) / 1000;
    const run = await cappedRun(stack, o, work, options.timeoutMs);
    o.checkAborted();
    const base = options.baseline !== false ? await uncappedBaseline(stack, o, work, memoryMb) : undefined;
    report = buildReport({
      name: o.name,
      started: o.started,
      loadStart: o.loadStart,
      threads,
      reserve,
      cap,
      records,
      timeScale,
      seed: o.seed,
      maxQueued: o.maxQueued,
      mix: work.mix,
      memoryMb,
      lanes,
      modelledMeanMs: work.modelledMeanMs,
      predictedPollMs: work.predictedPollMs,
      latency,
      pollSchedule,
      model,
      targetDelays: o.targetDelays,
      ...run.measured,
      template: deployedTemplate(stack),
      workerName: stack.outputs.WorkerFunctionName,
      bareNodeRss: bareNodeRssBytes(),
      baseline: base?.result ?? null,
      phases: {
        startup: startupS,
        capped_run: run.cappedS,
        baseline: base?.seconds ?? null,
        total: (performance.now() - o.t0) / 1000,
      },
      logDir: stack.logDir,
      outDir: o.outDir,
    });
  } finally {
    log('bench: stopping the local stack');
    await stack.stop();
  }
  report.phases_s.total = round((performance.now() - o.t0) / 1000, 1) ?? 0;
  mkdirSync(o.outDir, { recursive: true });
  writeFileSync(report.files.json, `${JSON.stringify(report, null, 2)}\n`);
  return report;
}

/** The uncapped baseline against the same stand-in (bench/baseline.ts), and how long it took. */
async function uncappedBaseline(stack: LocalStack, o: BenchSettings, work: BenchRecords, memoryMb: number) {
  o.log(`bench: uncapped baseline: ${o.records} records straight to the stand-in, no limiter`);
  const b0 = performance.now();
  const result: BaselineResult = await runUncappedBaseline({
    url: stack.captcha.url,
    apiKey: stack.apiKey,
    timeScale: o.timeScale,
    tasks: work.tasks,
    standin: stack.captcha,
    memoryMb,
  });
  return { result, seconds: (performance.now() - b0) / 1000 };
}

export { formatReport };

/** The fixed charges of the template the local stack deployed (its per-run assembly), or null. */
function deployedTemplate(stack: LocalStack): TemplateFacts | null {
  const dir = stack.deploy?.assemblyDir;
  if (!dir || !existsSync(dir)) return null;
  const file =
    readdirSync(dir).find((f) => f === `${stack.stackName}.template.json`) ??
    readdirSync(dir).find((f) => f.endsWith('.template.json'));
  return file ? templateFacts(JSON.parse(readFileSync(join(dir, file), 'utf8'))) : null;
}

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
