import { type Command, InvalidArgumentError, Option } from 'commander';
import {
  CaptchaAiClient,
  type CaptchaTask,
  readTimingsFromEnv,
  type SolveTimingsOverrides,
} from '../../functions/captchaai/client.js';
import {
  BadTaskError,
  CaptchaError,
  ConfigError,
  PollTimeoutError,
  StopClassError,
  TransientError,
  UnsolvableError,
} from '../../functions/common/errors.js';
import { DEFAULTS } from '../../functions/common/settings.js';
import { CliError, EXIT } from '../exit-codes.js';

const SOLVE_TYPES = ['recaptcha_v2', 'recaptcha_v3', 'recaptcha_enterprise', 'turnstile'] as const;
type SolveType = (typeof SOLVE_TYPES)[number];

interface SolveOptions {
  type: SolveType;
  sitekey: string;
  pageurl: string;
  action?: string;
  minScore?: number;
  invisible?: boolean;
  timeScale?: number;
  json?: boolean;
  showToken?: boolean;
}

/** `threadgate solve`: one solve through CaptchaAI, for checking a key, a plan or a site key by hand. */
export function registerSolveCommand(program: Command): void {
  program
    .command('solve')
    .description(
      'Solve one CAPTCHA through CaptchaAI (key from CAPTCHAAI_API_KEY, host from CAPTCHAAI_URL) and print the outcome, token length and timing. The token itself is printed only with --show-token.',
    )
    .addOption(new Option('--type <type>', 'CAPTCHA type').choices(SOLVE_TYPES).makeOptionMandatory())
    .requiredOption('--sitekey <key>', 'the site key of the widget on the page')
    .requiredOption('--pageurl <url>', 'the full URL of the page that shows the widget')
    .option('--action <action>', 'reCAPTCHA v3/Enterprise or Turnstile action')
    .option('--min-score <score>', 'reCAPTCHA v3/Enterprise min_score, 0.1-0.9', parseScore)
    .option('--invisible', 'invisible reCAPTCHA (v2 or Enterprise)')
    .option(
      '--time-scale <factor>',
      'multiply every wait, the deadline and the HTTP timeout (default: CAPTCHAAI_TIME_SCALE or 1)',
      parsePositive,
    )
    .option('--json', 'print one JSON object instead of text')
    .option('--show-token', 'also print the token (use it at once; never store it)')
    .addHelpText(
      'after',
      `
Example:
  CAPTCHAAI_API_KEY=... threadgate solve --type recaptcha_v2 \\
    --sitekey 6LeIxAcTAAAAAJcZVRqyHh71UMIEGNQ_MXjiZKhI --pageurl https://staging.example.com/signup

Exit codes: 0 solved; 2 bad task or unsolvable; 3 stop-class (bad key, IP ban, no active
plan); 4 transient error or poll timeout (trying later may work); 64 usage error.

Timings (ms at time scale 1, CaptchaAI's defaults when unset): CAPTCHAAI_FIRST_POLL_MS,
CAPTCHAAI_POLL_INTERVAL_MS, CAPTCHAAI_SERVER_ERROR_WAIT_MS, CAPTCHAAI_SUBMIT_BACKOFF_MS,
CAPTCHAAI_SUBMIT_RETRIES, CAPTCHAAI_DEADLINE_MS, CAPTCHAAI_HTTP_TIMEOUT_MS, CAPTCHAAI_TIME_SCALE.`,
    )
    .action(async (opts: SolveOptions) => {
      await runSolve(opts);
    });
}

async function runSolve(opts: SolveOptions): Promise<void> {
  const client = new CaptchaAiClient(clientOptions(opts.timeScale));
  const task = buildTask(opts);
  const abort = new AbortController();
  const onSignal = () => abort.abort(new Error('interrupted'));
  process.once('SIGINT', onSignal);
  const started = Date.now();
  try {
    const result = await client.solve(task, { signal: abort.signal });
    const report = {
      outcome: 'solved',
      type: opts.type,
      taskId: result.taskId,
      submits: result.submits,
      solveMs: result.solveMs,
      tokenLength: result.token.length,
      ...(opts.showToken ? { token: result.token } : {}),
    };
    if (opts.json) {
      process.stdout.write(`${JSON.stringify(report)}\n`);
    } else {
      process.stdout.write(
        `solved ${opts.type} in ${seconds(result.solveMs)} (task ${result.taskId}, ${plural(result.submits, 'submit')}), token length ${result.token.length}\n`,
      );
      if (opts.showToken) process.stdout.write(`token: ${result.token}\n`);
    }
    process.exitCode = EXIT.ok;
  } catch (err) {
    if (abort.signal.aborted) throw new CliError('interrupted', EXIT.interrupted);
    if (!(err instanceof CaptchaError)) throw err;
    reportCaptchaError(err, opts.json === true, { type: opts.type, elapsedMs: Date.now() - started });
  } finally {
    process.off('SIGINT', onSignal);
  }
}

/**
 * Client options from the environment (CAPTCHAAI_API_KEY, CAPTCHAAI_URL, the timing variables);
 * `--time-scale` wins over CAPTCHAAI_TIME_SCALE. Bad or missing configuration is a usage error.
 */
export function clientOptions(
  timeScale: number | undefined,
  env: NodeJS.ProcessEnv = process.env,
): { apiKey: string; baseUrl: string; timings: SolveTimingsOverrides; timeScale: number } {
  try {
    const fromEnv = readTimingsFromEnv(env);
    return {
      ...captchaAiConnection(env),
      timings: fromEnv.timings,
      timeScale: timeScale ?? fromEnv.timeScale,
    };
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, EXIT.usage);
    throw err;
  }
}

/** Reads CAPTCHAAI_API_KEY and CAPTCHAAI_URL; a missing key is a usage error. */
export function captchaAiConnection(env: NodeJS.ProcessEnv = process.env): {
  apiKey: string;
  baseUrl: string;
} {
  const apiKey = env.CAPTCHAAI_API_KEY?.trim() ?? '';
  if (apiKey === '') throw new CliError('CAPTCHAAI_API_KEY is not set', EXIT.usage);
  const baseUrl = env.CAPTCHAAI_URL?.trim() || DEFAULTS.captchaaiUrl;
  return { apiKey, baseUrl };
}

/** The outcome word and exit code of a CaptchaAI failure. */
export function classifyForCli(err: CaptchaError): { outcome: string; exitCode: number } {
  if (err instanceof StopClassError) return { outcome: 'stop', exitCode: EXIT.stop };
  if (err instanceof UnsolvableError) return { outcome: 'unsolvable', exitCode: EXIT.badTask };
  if (err instanceof BadTaskError) return { outcome: 'bad_task', exitCode: EXIT.badTask };
  if (err instanceof PollTimeoutError) return { outcome: 'poll_timeout', exitCode: EXIT.transient };
  if (err instanceof TransientError) return { outcome: 'transient', exitCode: EXIT.transient };
  return { outcome: 'failed', exitCode: EXIT.failure };
}

/** Prints a CaptchaAI failure (JSON on stdout, or a line on stderr) and sets the exit code. */
export function reportCaptchaError(
  err: CaptchaError,
  json: boolean,
  extra: Record<string, unknown> = {},
): void {
  const { outcome, exitCode } = classifyForCli(err);
  if (json) {
    const report = {
      outcome,
      ...extra,
      error: err.name,
      code: err.code,
      message: err.message,
      ...(err.submits === undefined ? {} : { submits: err.submits }),
      ...(err.taskId === undefined ? {} : { taskId: err.taskId }),
    };
    process.stdout.write(`${JSON.stringify(report)}\n`);
  } else {
    const submits = err.submits === undefined ? '' : ` after ${plural(err.submits, 'submit')}`;
    process.stderr.write(`${outcome}: ${err.code}${submits}: ${err.message}\n`);
  }
  process.exitCode = exitCode;
}

function buildTask(o: SolveOptions): CaptchaTask {
  const base = { sitekey: o.sitekey, pageurl: o.pageurl };
  const action = o.action === undefined ? {} : { action: o.action };
  const minScore = o.minScore === undefined ? {} : { minScore: o.minScore };
  if ((o.type === 'recaptcha_v2' || o.type === 'turnstile') && o.minScore !== undefined) {
    throw new CliError(
      `--min-score applies to recaptcha_v3 and recaptcha_enterprise, not ${o.type}`,
      EXIT.usage,
    );
  }
  switch (o.type) {
    case 'recaptcha_v2':
      if (o.action !== undefined) throw new CliError('--action does not apply to recaptcha_v2', EXIT.usage);
      return { type: 'recaptcha_v2', ...base, ...(o.invisible ? { invisible: true } : {}) };
    case 'recaptcha_v3':
      return { type: 'recaptcha_v3', ...base, ...action, ...minScore };
    case 'recaptcha_enterprise':
      return {
        type: 'recaptcha_enterprise',
        ...base,
        ...action,
        ...minScore,
        ...(o.invisible ? { invisible: true } : {}),
      };
    case 'turnstile':
      return { type: 'turnstile', ...base, ...action };
  }
}

function parseScore(raw: string): number {
  const n = Number(raw);
  if (!(n >= 0.1 && n <= 0.9)) throw new InvalidArgumentError('must be a number from 0.1 to 0.9');
  return n;
}

export function parsePositive(raw: string): number {
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('must be a number > 0');
  return n;
}

export function parseCount(raw: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('must be an integer >= 0');
  return n;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}
