import { randomBytes } from 'node:crypto';
import { type Command, InvalidArgumentError } from 'commander';
import type { CaptchaType } from '../../functions/captchaai/types.js';
import { type LatencyDistribution, parseLatencyOptions } from '../../local/standins/captchaai/latency.js';
import { type FaultRates, startCaptchaStandin } from '../../local/standins/captchaai/standin.js';
import { CliError, EXIT } from '../exit-codes.js';
import { parseCount, parsePositive } from './solve.js';

interface StandinCommandOptions {
  port: number;
  host: string;
  threads: number;
  key?: string;
  timeScale: number;
  faults?: Partial<FaultRates>;
  latency: string[];
}

/** `--latency TYPE=SPEC` may be given several times (shared with `threadgate local` and `bench`). */
export function collectLatency(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** The distributions `--latency` values name; a bad value is a usage error that names it. */
export function latencyFromOptions(
  values: readonly string[],
): Partial<Record<CaptchaType, LatencyDistribution>> {
  try {
    return parseLatencyOptions(values);
  } catch (err) {
    throw new CliError(err instanceof Error ? err.message : String(err), EXIT.usage);
  }
}

/** The help line of `--latency`, the same in every command that takes it. */
export const LATENCY_HELP =
  'solve-time distribution of one CAPTCHA type (or all), seconds: uniform:MIN,MAX | lognormal:MEDIAN,SIGMA | mixture:WEIGHT,<a>+<b>; repeatable, e.g. recaptcha_v2=lognormal:25,0.4 (default: uniform, reCAPTCHA v2 15-60 s)';

/** `threadgate standin`: the local CaptchaAI stand-in as a process of its own. */
export function registerStandinCommand(program: Command): void {
  program
    .command('standin')
    .description(
      'Run the local CaptchaAI stand-in (in.php/res.php with a real thread limit, plus /stats, /control and /verify) until Ctrl-C. Prints its URL on the first line of stdout.',
    )
    .option('--port <port>', 'port to listen on (0 = any free port)', parseCount, 0)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--threads <n>', 'plan threads', parseCount, 5)
    .option(
      '--key <key>',
      'the valid API key (default: CAPTCHAAI_API_KEY, else a random one that is printed)',
    )
    .option('--time-scale <factor>', 'multiply every latency, delay and token lifetime', parsePositive, 1)
    .option('--faults <json>', 'fault rates, e.g. \'{"unsolvable":0.05,"html502":0.01}\'', parseFaults)
    .option('--latency <TYPE=SPEC>', LATENCY_HELP, collectLatency, [])
    .addHelpText(
      'after',
      `
Example:
  threadgate standin --port 8089 --threads 5 --key 0123456789abcdef0123456789abcdef --time-scale 0.1
  CAPTCHAAI_URL=http://127.0.0.1:8089 CAPTCHAAI_API_KEY=0123456789abcdef0123456789abcdef \\
    threadgate solve --type turnstile --sitekey sk --pageurl https://staging.example.com/ --time-scale 0.1
  curl http://127.0.0.1:8089/stats`,
    )
    .action(async (opts: StandinCommandOptions) => {
      const fromEnv = process.env.CAPTCHAAI_API_KEY?.trim();
      const generated = opts.key === undefined && !fromEnv;
      const apiKey = opts.key ?? (fromEnv || randomBytes(16).toString('hex'));
      let standin: Awaited<ReturnType<typeof startCaptchaStandin>>;
      try {
        standin = await startCaptchaStandin({
          port: opts.port,
          host: opts.host,
          threads: opts.threads,
          apiKey,
          timeScale: opts.timeScale,
          ...(opts.faults ? { faults: opts.faults } : {}),
          latency: latencyFromOptions(opts.latency),
        });
      } catch (err) {
        throw new CliError(
          `cannot start the stand-in: ${err instanceof Error ? err.message : String(err)}`,
          EXIT.usage,
        );
      }
      process.stdout.write(`${standin.url}\n`);
      process.stderr.write(
        `CaptchaAI stand-in: ${opts.threads} threads, time scale ${opts.timeScale}; ` +
          `${generated ? `generated key ${apiKey}` : 'key from --key / CAPTCHAAI_API_KEY'}; ` +
          `stats at ${standin.url}/stats; Ctrl-C to stop\n`,
      );
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      await standin.close();
      process.exitCode = EXIT.ok;
    });
}

function parseFaults(raw: string): Partial<FaultRates> {
  try {
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
      throw new Error('not an object');
    return parsed as Partial<FaultRates>;
  } catch {
    throw new InvalidArgumentError('must be a JSON object of fault rates');
  }
}
