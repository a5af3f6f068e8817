/**
 * Exit codes shared by every command (docs/cli.md "Exit codes and environment", and the summary
 * in `threadgate --help`). A usage error has a code of its own (64, EX_USAGE of BSD's
 * sysexits.h) so that a script can tell a typo in its command line from records that failed (2).
 */
export const EXIT = {
  ok: 0,
  /** No stack, no credentials, AWS refused, anything else unexpected. */
  failure: 1,
  /** Records failed, were rejected or are missing; a bad task or an unsolvable CAPTCHA (`solve`). */
  badTask: 2,
  /** Stop-class CaptchaAI error: bad key, IP ban, no active plan; or the pipeline is paused (`wait`). */
  stop: 3,
  /** Transient error or poll timeout: trying again later may work. */
  transient: 4,
  /** `wait`: the batch was cancelled (`threadgate cancel`); its records did not all run. */
  cancelled: 5,
  /** Usage error: an unknown command or option, a bad option value, a missing file argument. */
  usage: 64,
  /** Interrupted (Ctrl-C, SIGINT): 128 + 2, as shells report it. */
  interrupted: 130,
} as const;

/** The exit codes and environment variables, for `threadgate --help` (docs/cli.md says the same). */
export const EXIT_AND_ENVIRONMENT_HELP = `
Exit codes (every command):
  0    ok
  1    failure: no stack, no credentials, AWS refused
  2    records failed, were rejected or are missing (enqueue, wait); bad task or unsolvable (solve)
  3    stop-class CaptchaAI answer (bad key, IP ban, no plan), or the pipeline is paused (wait, resume)
  4    transient: CaptchaAI or the endpoint unreachable, some sends failed, --timeout passed
  5    wait: the batch was cancelled
  64   usage error: unknown command or option, bad option value
  130  interrupted (Ctrl-C)

Environment:
  THREADGATE_STACK         stack name (default Threadgate; --stack overrides)
  AWS_PROFILE, AWS_REGION  the AWS SDK's profile and region (--profile, --region override)
  AWS_ENDPOINT_URL         endpoint of every service (AWS_ENDPOINT_URL_<SERVICE> for one; --endpoint-url)
  CAPTCHAAI_API_KEY        the key for solve and threads (secret set reads it from stdin instead)
  CAPTCHAAI_URL            CaptchaAI's address (default https://ocr.captchaai.com)
  THREADGATE_PYTHON        the Python with moto's server for local, bench, load and chaos
`;

/** An error whose message is meant for the operator, with the exit code to end on. */
export class CliError extends Error {
  override name = 'CliError';
  constructor(
    message: string,
    readonly exitCode: number = EXIT.failure,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
