import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { REPO_ROOT } from '../../local/emulator/deploy.js';
import type { AnyLocalStack } from '../../local/stack/local-stack.js';
import { CliError, EXIT } from '../exit-codes.js';

/**
 * What a shell needs to use a `threadgate local --keep` stack: the AWS endpoint and stack for
 * the stack-backed commands, CAPTCHAAI_URL, CAPTCHAAI_API_KEY and CAPTCHAAI_TIME_SCALE for
 * `solve` and `threads` against the stand-in, and the target stand-in's URL and sitekey for
 * records (THREADGATE_LOCAL_TARGET_URL, THREADGATE_LOCAL_SITEKEY). Written to a file only its owner can read (the
 * key is the stand-in's, but a key is never shown on a terminal), removed when the stack stops;
 * `threadgate local env` prints it for `eval "$(npx threadgate local env)"`.
 */
export const KEEP_ENV_FILE = join(REPO_ROOT, '.local-stack', 'keep.env');

const SECRET_NAMES = new Set(['CAPTCHAAI_API_KEY', 'AWS_SECRET_ACCESS_KEY']);

export function keepEnvironment(stack: AnyLocalStack): Record<string, string> {
  return {
    ...stack.awsEnv,
    THREADGATE_STACK: stack.stackName,
    CAPTCHAAI_URL: stack.captchaaiUrl,
    CAPTCHAAI_API_KEY: stack.apiKey,
    CAPTCHAAI_TIME_SCALE: String(stack.timeScale),
    // Where records for this stack point (forms at <url>/form/<record key>), for recipes and scripts.
    THREADGATE_LOCAL_TARGET_URL: stack.site.url,
    THREADGATE_LOCAL_SITEKEY: stack.site.sitekey,
  };
}

const shellQuote = (v: string) => `'${v.replaceAll("'", `'\\''`)}'`;

export function writeKeepEnv(stack: AnyLocalStack, file = KEEP_ENV_FILE): void {
  const lines = Object.entries(keepEnvironment(stack)).map(([k, v]) => `export ${k}=${shellQuote(v)}`);
  writeFileSync(file, `# threadgate local --keep, pid ${process.pid}\n${lines.join('\n')}\n`, {
    mode: 0o600,
  });
}

export function removeKeepEnv(file = KEEP_ENV_FILE): void {
  // Only our own: a second kept stack started later owns the file now.
  if (
    existsSync(file) &&
    readFileSync(file, 'utf8').startsWith(`# threadgate local --keep, pid ${process.pid}\n`)
  )
    rmSync(file, { force: true });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The exports for a shell; on a terminal (not `eval "$(…)"`) secrets are masked unless asked for. */
export function renderKeepEnv(text: string, showSecrets: boolean): string {
  if (showSecrets) return text;
  return text.replace(/^export (\w+)=(.*)$/gm, (line, name: string) =>
    SECRET_NAMES.has(name)
      ? `export ${name}=… # hidden on a terminal; eval "$(npx threadgate local env)" sets it`
      : line,
  );
}

export function registerLocalEnv(local: Command): void {
  local
    .command('env')
    .description(
      'Print the exports for a running `threadgate local --keep` (AWS endpoint, stack, CaptchaAI stand-in URL, key and time scale) for eval',
    )
    .option('--show-key', 'print the API key even when standard output is a terminal')
    .addHelpText(
      'after',
      '\nExample:\n  $ eval "$(npx threadgate local env)" && npx threadgate solve --type turnstile …\n',
    )
    .action((options: { showKey?: boolean }) => {
      const text = existsSync(KEEP_ENV_FILE) ? readFileSync(KEEP_ENV_FILE, 'utf8') : '';
      const pid = Number(/pid (\d+)/.exec(text)?.[1]);
      if (!text || !alive(pid)) {
        throw new CliError(
          'no `threadgate local --keep` is running; start one with `npx threadgate local --keep`',
          EXIT.failure,
        );
      }
      process.stdout.write(renderKeepEnv(text, options.showKey === true || process.stdout.isTTY !== true));
    });
}
