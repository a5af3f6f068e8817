import type { Command } from 'commander';
import { CaptchaAiClient } from '../../functions/captchaai/client.js';
import { CaptchaError } from '../../functions/common/errors.js';
import { EXIT } from '../exit-codes.js';
import { clientOptions, parseCount, parsePositive, reportCaptchaError } from './solve.js';

interface ThreadsOptions {
  reserve: number;
  timeScale?: number;
  json?: boolean;
}

/** `threadgate threads`: the plan's threads, how many are busy, and the cap they allow. */
export function registerThreadsCommand(program: Command): void {
  program
    .command('threads')
    .description(
      "Ask CaptchaAI (threadsinfo) for the plan's threads and working threads, and print the cap = threads - reserve.",
    )
    .option('--reserve <n>', 'threads kept free for other users of the key', parseCount, 0)
    .option(
      '--time-scale <factor>',
      'multiply the HTTP timeout (default: CAPTCHAAI_TIME_SCALE or 1)',
      parsePositive,
    )
    .option('--json', 'print one JSON object instead of text')
    .addHelpText(
      'after',
      `
Example:
  CAPTCHAAI_API_KEY=... threadgate threads --reserve 2
  plan threads 15, working 9, reserve 2, cap 13

Exit codes: 0 ok; 3 stop-class (bad key, IP ban); 4 transient error; 64 usage error.`,
    )
    .action(async (opts: ThreadsOptions) => {
      const client = new CaptchaAiClient(clientOptions(opts.timeScale));
      try {
        const info = await client.threadsInfo();
        const cap = Math.max(0, info.threads - opts.reserve);
        if (opts.json) {
          process.stdout.write(`${JSON.stringify({ ...info, reserve: opts.reserve, cap })}\n`);
        } else {
          process.stdout.write(
            `plan threads ${info.threads}, working ${info.workingThreads}, reserve ${opts.reserve}, cap ${cap}\n`,
          );
        }
        process.exitCode = EXIT.ok;
      } catch (err) {
        if (!(err instanceof CaptchaError)) throw err;
        reportCaptchaError(err, opts.json === true);
      }
    });
}
