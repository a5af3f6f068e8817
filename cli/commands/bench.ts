import { type Command, InvalidArgumentError } from 'commander';
import { benchModel, formatModel } from '../../bench/model-only.js';
import { BENCH_DEFAULTS, formatReport, runBench } from '../../bench/run.js';
import { MAX_LANES } from '../../functions/pipeline/lanes.js';
import { LAMBDA_MAX_TIMEOUT_SECONDS } from '../../infra/config.js';
import { parseMix, type RecordMix } from '../../local/stack/records.js';
import { CliError, EXIT } from '../exit-codes.js';
import { runInterruptible } from '../interrupt.js';
import { parseCount, parsePositive } from './solve.js';
import { collectLatency, LATENCY_HELP, latencyFromOptions } from './standin.js';

interface BenchCommandOptions {
  threads: number;
  reserve: number;
  records: number;
  timeScale: number;
  maxQueued?: number;
  outDir?: string;
  name?: string;
  baseline: boolean;
  json?: boolean;
  mix?: RecordMix;
  seed: number;
  latency: string[];
  pollSchedule?: 'learned' | 'static';
  workerMemory?: number;
  lanes?: number;
  largePages: number;
  largePageBurst: number;
  modelOnly?: boolean;
  takeWindowSeconds?: number;
}

/** `--mix TYPE=WEIGHT,…` (shared with `threadgate local`). */
export function parseMixOption(raw: string): RecordMix {
  try {
    return parseMix(raw);
  } catch (err) {
    throw new InvalidArgumentError(err instanceof Error ? err.message : String(err));
  }
}

function parsePollSchedule(raw: string): 'learned' | 'static' {
  if (raw !== 'learned' && raw !== 'static') throw new InvalidArgumentError('must be learned or static');
  return raw;
}

export function parseAtLeastOne(raw: string): number {
  const n = parseCount(raw);
  if (n < 1) throw new InvalidArgumentError('must be an integer >= 1');
  return n;
}

export function parseScale(raw: string): number {
  const n = parsePositive(raw);
  if (n > 1) throw new InvalidArgumentError('must be within (0, 1]');
  return n;
}

export function parseLanes(raw: string): number {
  const n = parseAtLeastOne(raw);
  if (n > MAX_LANES) throw new InvalidArgumentError(`must be an integer from 1 to ${MAX_LANES}`);
  return n;
}

function parseTakeWindow(raw: string): number {
  const n = parsePositive(raw);
  if (n > LAMBDA_MAX_TIMEOUT_SECONDS) {
    throw new InvalidArgumentError(
      `must be within (0, ${LAMBDA_MAX_TIMEOUT_SECONDS}] (Lambda's longest timeout)`,
    );
  }
  return n;
}

function parseShare(raw: string): number {
  const n = Number(raw);
  if (raw.trim() === '' || !(n >= 0 && n <= 1))
    throw new InvalidArgumentError('must be a share within [0, 1]');
  return n;
}

const BENCH_EXAMPLES = `
A default run (20 threads, 1,000 records, time scale 0.2) takes about 8 minutes on a
2-core machine. Exit code 1 when the capped run breaks an invariant (in flight above the
cap, a ZERO_BALANCE answer) or does not finish.

Examples:
  npm run bench
  npx threadgate bench --threads 5 --records 200 --time-scale 0.1 --no-baseline
  npx threadgate bench --records 400 --mix recaptcha_v2=1 --latency recaptcha_v2=lognormal:12,0.4 --no-baseline`;

/** The plan and the run's size: threads, reserve, records, time scale, queue depth. */
function withPlanOptions(command: Command): Command {
  return command
    .option(
      '--threads <n>',
      'plan threads of the CaptchaAI stand-in',
      parseAtLeastOne,
      BENCH_DEFAULTS.threads,
    )
    .option(
      '--reserve <n>',
      'plan threads kept free (cap = threads − reserve)',
      parseCount,
      BENCH_DEFAULTS.reserve,
    )
    .option('--records <n>', 'records to solve', parseAtLeastOne, BENCH_DEFAULTS.records)
    .option(
      '--time-scale <factor>',
      "multiply CaptchaAI's latencies and the client's waits (0.2 = five times as fast)",
      parseScale,
      BENCH_DEFAULTS.timeScale,
    )
    .option(
      '--max-queued <n>',
      'messages the feeder keeps visible in the queue (default 2 × cap)',
      parseAtLeastOne,
    );
}

/** Where the results go, what is solved and how, and what is printed. */
function withRunOptions(command: Command): Command {
  return command
    .option('--out-dir <dir>', 'where the JSON and SVG go (default bench/results)')
    .option('--name <name>', 'file name without extension (default <UTC time>-t<threads>-n<records>)')
    .option(
      '--mix <TYPE=WEIGHT,…>',
      `CAPTCHA types of the records by weight, e.g. recaptcha_v2=1 (default: every type in turn)`,
      parseMixOption,
    )
    .option(
      '--seed <n>',
      "seed of the stand-in's solve latencies: the same seed solves the same sample, so runs compare",
      parseCount,
      BENCH_DEFAULTS.seed,
    )
    .option('--latency <TYPE=SPEC>', LATENCY_HELP, collectLatency, [])
    .option(
      '--poll-schedule <learned|static>',
      "the worker's poll schedule (deploy-time setting pollSchedule; default learned)",
      parsePollSchedule,
    )
    .option(
      '--worker-memory <mb>',
      "the worker's memory (deploy-time setting workerMemoryMb; default its default)",
      parseAtLeastOne,
    )
    .option(
      '--lanes <k>',
      'the most lanes one worker invocation may run (deploy-time setting lanes; default 1): the cap is carried by r invocations of L lanes, named in the JSON',
      parseLanes,
    )
    .option(
      '--large-pages <share>',
      "share (0..1) of the records whose target page is just under the worker's page-size cap (worst case for memory)",
      parseShare,
      0,
    )
    .option(
      '--large-page-burst <n>',
      'large pages come in runs of n consecutive records, which several lanes take at once (the same share)',
      parseAtLeastOne,
      1,
    )
    .option(
      '--model-only',
      "print only the limit and both poll schedules simulated on the draws of this run (nothing is started); with --lanes, also lanes 1 and lanes K with the invocations' tail at today's take window",
    )
    .option(
      '--take-window-seconds <s>',
      "with --model-only: also model the lanes at this take window (how long after its start an invocation's lanes may take a record)",
      parseTakeWindow,
    )
    .option('--no-baseline', 'skip the uncapped baseline')
    .option('--json', 'print the JSON report instead of the table');
}

/** `threadgate bench` (`npm run bench`): the benchmark on the local stack, see bench/run.ts. */
export function registerBench(program: Command): void {
  const command = program
    .command('bench')
    .description(
      'Benchmark the local stack: plan-thread efficiency and utilization under the cap, per-record overhead, Lambda GB-s and AWS vs CaptchaAI cost per 1,000 solves, then an uncapped baseline. Writes bench/results/<name>.json and .svg; prints a table (progress on stderr).',
    );
  withRunOptions(withPlanOptions(command)).addHelpText('after', BENCH_EXAMPLES).action(benchAction);
}

/** The bench command's action: the model alone, or the full run. */
async function benchAction(opts: BenchCommandOptions): Promise<void> {
  if (opts.reserve >= opts.threads) {
    throw new CliError('--reserve must be below --threads (the cap must be at least 1)', EXIT.usage);
  }
  if (opts.takeWindowSeconds !== undefined && !opts.modelOnly) {
    throw new CliError(
      '--take-window-seconds is a model setting: use it with --model-only (a run uses the deployed window)',
      EXIT.usage,
    );
  }
  if (opts.modelOnly) {
    const model = benchModel({
      threads: opts.threads,
      cap: opts.threads - opts.reserve,
      records: opts.records,
      seed: opts.seed,
      ...(opts.mix ? { mix: opts.mix } : {}),
      latency: latencyFromOptions(opts.latency),
      ...(opts.lanes ? { lanes: opts.lanes } : {}),
      ...(opts.takeWindowSeconds === undefined ? {} : { takeWindowSeconds: opts.takeWindowSeconds }),
    });
    process.stdout.write(opts.json ? `${JSON.stringify(model, null, 2)}\n` : formatModel(model));
    return;
  }
  const report = await runInterruptible('bench', (signal) =>
    runBench({
      threads: opts.threads,
      reserve: opts.reserve,
      records: opts.records,
      timeScale: opts.timeScale,
      maxQueued: opts.maxQueued,
      outDir: opts.outDir,
      name: opts.name,
      baseline: opts.baseline,
      mix: opts.mix,
      seed: opts.seed,
      latency: latencyFromOptions(opts.latency),
      ...(opts.pollSchedule ? { pollSchedule: opts.pollSchedule } : {}),
      ...(opts.workerMemory ? { workerMemoryMb: opts.workerMemory } : {}),
      ...(opts.lanes ? { lanes: opts.lanes } : {}),
      largePages: opts.largePages,
      largePageBurst: opts.largePageBurst,
      log: (line) => process.stderr.write(`${line}\n`),
      signal,
    }),
  );
  process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
  const broken = report.max_in_flight > report.cap || report.zero_balance > 0 || !report.complete;
  process.exitCode = broken ? EXIT.failure : EXIT.ok;
}
