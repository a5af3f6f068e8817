/** Exit codes shared by every command (documented in docs/cli.md). */
export const EXIT = {
  ok: 0,
  failure: 1,
  /** Usage error, bad task or unsolvable CAPTCHA. */
  usage: 2,
  badTask: 2,
  /** Stop-class CaptchaAI error: bad key, IP ban, no active plan. */
  stop: 3,
  /** Transient error or poll timeout: trying again later may work. */
  transient: 4,
  /** `wait`: the batch was cancelled (`threadgate cancel`); its records did not all run. */
  cancelled: 5,
} as const;

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
