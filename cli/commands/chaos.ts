import { type Command, InvalidArgumentError } from 'commander';
import { CHAOS_DEFAULTS, CHAOS_RATE_NAMES, formatChaos, parseRates } from '../../local/chaos/plan.js';
import { runChaos } from '../../local/chaos/run.js';
import { EXIT } from '../exit-codes.js';
import { runInterruptible } from '../interrupt.js';
import { parseAtLeastOne, parseLanes, parseScale } from './bench.js';
import { parseCount } from './solve.js';

interface ChaosCommandOptions {
  records: number;
  seed: number;
  timeScale: number;
  threads: number;
  reserve: number;
  rates: string;
  killEvery: number;
  maxKills: number;
  maxSeconds: number;
  lanes?: number;
  workerMemory?: number;
  json?: boolean;
}

function parseSeconds(raw: string): number {
  const n = Number(raw);
  if (!(Number.isFinite(n) && n >= 0)) throw new InvalidArgumentError('must be a number of seconds >= 0');
  return n;
}

function checkRates(raw: string): string {
  try {
    parseRates(raw);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
  return raw;
}

/** `threadgate chaos` (`npm run chaos`): the chaos run on the local stack, see local/chaos/run.ts. */
export function registerChaos(program: Command): void {
  program
    .command('chaos')
    .description(
      'Chaos run on the local stack: records go through while faults are drawn at random on the wire (lost in.php answers, dropped POST answers, failing DynamoDB writes, tasks never answered whose failed write then fails, throttled state reads, a key rotation mid-run, crafted SolveTimes items, one of two batches cancelled mid-run while reads of its cancel fail, DNS outages of the target’s name, failing DLQ sends) and the runtime is killed and restarted now and then; a checker reads the stand-ins’ own logs: threads held <= cap, in.php and POSTs per record, no in.php or POST of the cancelled batch after its bound, every record ended, DLQ and queue empty, no key or token in a log.',
    )
    .option('--records <n>', 'distinct records', parseAtLeastOne, CHAOS_DEFAULTS.records)
    .option('--seed <n>', 'seed of every fault draw and the kills', parseCount, CHAOS_DEFAULTS.seed)
    .option(
      '--time-scale <factor>',
      "CaptchaAI's latencies and the client's waits",
      parseScale,
      CHAOS_DEFAULTS.timeScale,
    )
    .option(
      '--threads <n>',
      'plan threads of the CaptchaAI stand-in',
      parseAtLeastOne,
      CHAOS_DEFAULTS.threads,
    )
    .option(
      '--reserve <n>',
      'plan threads kept free (cap = threads - reserve)',
      parseCount,
      CHAOS_DEFAULTS.reserve,
    )
    .option('--rates <list>', `fault rates, name=rate,… (${CHAOS_RATE_NAMES.join(', ')})`, checkRates, '')
    .option(
      '--kill-every <s>',
      'mean seconds between runtime kills (0: none)',
      parseSeconds,
      CHAOS_DEFAULTS.killMeanS,
    )
    .option('--max-kills <n>', 'at most this many kills', parseCount, CHAOS_DEFAULTS.maxKills)
    .option(
      '--max-seconds <s>',
      'time bound of the run after deploy',
      parseSeconds,
      CHAOS_DEFAULTS.maxSeconds,
    )
    .option(
      '--lanes <k>',
      'the most lanes one worker invocation may run (deploy-time setting lanes; default 1): the cap is carried by r invocations of L lanes, named in the result',
      parseLanes,
    )
    .option(
      '--worker-memory <mb>',
      "the worker's memory (deploy-time setting workerMemoryMb; default its default, which follows --lanes)",
      parseAtLeastOne,
    )
    .option(
      '--json',
      'print the result as JSON (with the worker deployed: its memory, the lanes setting, r and L)',
    )
    .addHelpText(
      'after',
      `
Default rates: ${Object.entries(CHAOS_DEFAULTS.rates)
        .map(([k, v]) => `${k}=${v}`)
        .join(',')}
Exit code 1 when an invariant is broken or the run does not end in time (docs/chaos.md).

Examples:
  npm run chaos
  npx threadgate chaos --records 1000 --seed 7 --rates lostHtml502=0.05,postDropped=0.05
  npx threadgate chaos --records 1000 --seed 21 --threads 14 --lanes 4`,
    )
    .action(async (opts: ChaosCommandOptions) => {
      const result = await runInterruptible('chaos', (signal) =>
        runChaos({
          records: opts.records,
          seed: opts.seed,
          timeScale: opts.timeScale,
          threads: opts.threads,
          reserve: opts.reserve,
          rates: parseRates(opts.rates),
          killMeanS: opts.killEvery,
          maxKills: opts.maxKills,
          maxSeconds: opts.maxSeconds,
          ...(opts.lanes === undefined ? {} : { lanes: opts.lanes }),
          ...(opts.workerMemory === undefined ? {} : { workerMemoryMb: opts.workerMemory }),
          log: (line) => process.stderr.write(`${line}\n`),
          signal,
        }),
      );
      process.stdout.write(opts.json ? `${JSON.stringify(result, null, 2)}\n` : formatChaos(result));
      process.exitCode = result.violations.length ? EXIT.failure : EXIT.ok;
    });
}
