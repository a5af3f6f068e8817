import { type Command, InvalidArgumentError } from 'commander';
import { formatLoadSummary, loadFailures } from '../../local/load/plan.js';
import { LOAD_DEFAULTS, runLoad } from '../../local/load/run.js';
import { EXIT } from '../exit-codes.js';
import { runInterruptible } from '../interrupt.js';
import { parseAtLeastOne, parseScale } from './bench.js';
import { parseCount } from './solve.js';

interface LoadCommandOptions {
  records: number;
  cap: number;
  reserve: number;
  producers: number;
  duplicates: number;
  timeScale: number;
  maxQueued?: number;
  json?: boolean;
}

function parseShare(raw: string): number {
  const n = Number(raw);
  if (!(Number.isFinite(n) && n >= 0 && n <= 1))
    throw new InvalidArgumentError('must be a number within [0, 1]');
  return n;
}

/** `threadgate load` (`npm run load`): the load run on the local stack, see local/load/run.ts. */
export function registerLoad(program: Command): void {
  program
    .command('load')
    .description(
      'Load run on the local stack: many records at a cap from several concurrent producers, some sent twice; checks nothing is lost, one in.php per record, DLQ empty, in flight <= cap, no ZERO_BALANCE, and reports the runtime’s memory. Prints a summary (progress on stderr).',
    )
    .option('--records <n>', 'distinct records', parseAtLeastOne, LOAD_DEFAULTS.records)
    .option('--cap <n>', 'the cap (plan threads = cap + reserve)', parseAtLeastOne, LOAD_DEFAULTS.cap)
    .option('--reserve <n>', 'plan threads kept free', parseCount, LOAD_DEFAULTS.reserve)
    .option(
      '--producers <n>',
      'concurrent producers (SendMessageBatch streams)',
      parseAtLeastOne,
      LOAD_DEFAULTS.producers,
    )
    .option(
      '--duplicates <share>',
      'share of records sent twice, 0..1',
      parseShare,
      LOAD_DEFAULTS.duplicateRate,
    )
    .option(
      '--time-scale <factor>',
      "multiply CaptchaAI's latencies and the client's waits (0.1 = ten times as fast)",
      parseScale,
      LOAD_DEFAULTS.timeScale,
    )
    .option(
      '--max-queued <n>',
      'messages each producer keeps visible in the queue (default 2 × cap)',
      parseAtLeastOne,
    )
    .option('--json', 'print the summary as JSON')
    .addHelpText(
      'after',
      `
On the project's 2-core machine 2,000 records at cap 50 took 289.8 s (12.6 records/s, docs/load.md);
the default 5,000 take proportionally longer. It needs several GB of memory (one worker thread
per environment). Exit code 1 when an invariant fails or the run does not finish.

Examples:
  npm run load
  npx threadgate load --records 500 --cap 10 --producers 2`,
    )
    .action(async (opts: LoadCommandOptions) => {
      const summary = await runInterruptible('load', (signal) =>
        runLoad({
          records: opts.records,
          cap: opts.cap,
          reserve: opts.reserve,
          producers: opts.producers,
          duplicateRate: opts.duplicates,
          timeScale: opts.timeScale,
          maxQueued: opts.maxQueued,
          log: (line) => process.stderr.write(`${line}\n`),
          signal,
        }),
      );
      const failures = loadFailures(summary);
      process.stdout.write(
        opts.json
          ? `${JSON.stringify({ ...summary, failures }, null, 2)}\n`
          : formatLoadSummary(summary, failures),
      );
      process.exitCode = failures.length ? EXIT.failure : EXIT.ok;
    });
}
