/**
 * The options every AWS SDK client of the functions is built with. The worker's worst case
 * (functions/worker/worst-case.ts) allows AWS_CALL_MS per AWS call, its retries included; the
 * request timeout and the bounded attempts are what make that allowance hold, so a hung call
 * fails in bounded time instead of stalling an invocation until Lambda kills it.
 */

/**
 * Attempts per AWS call, the first included: one. Every caller that must get past a failed call
 * already tries again itself, where the worst case counts it: the outcome store's writes
 * (WRITE_TRIES), the pause's tries, the chain (it ends, and the mapping delivers the message),
 * the outcome stream's retries, the cap adjuster's next minute. SDK retries beneath them would
 * only multiply the worst case and with it the function timeout, the lease and the chain's window.
 */
export const AWS_MAX_ATTEMPTS = 1;
/**
 * Each attempt's own timeout (ms), from the start of the request (the connection included) to its
 * answer, at every time scale. Regional endpoints answer in tens of ms; moto on a busy 2-core
 * machine was seen at 300+ ms, and beyond 1 s while two e2e stacks ran side by side (a 1 s timeout
 * there crashed and retried records), so 2 s fires only on a call that hangs. Not scaled: the
 * emulator's latency does not shrink with the local stack's time scale.
 */
export const AWS_REQUEST_TIMEOUT_MS = 2_000;
/** Connecting to the endpoint (ms), within the request timeout. */
export const AWS_CONNECTION_TIMEOUT_MS = 1_000;
/**
 * The SDK's longest wait before its retry (ms): the standard strategy waits a random part of its
 * base delay, 500 ms after a throttle (100 ms otherwise), doubling per retry.
 */
export const AWS_RETRY_WAIT_MS = 500;
/** The least wait between the functions' own tries of an AWS call at any time scale (ms). */
export const MIN_AWS_WAIT_MS = 50;

/**
 * A wait between two tries of an AWS call (the outcome store's writes, the mapping's
 * ResourceInUse retries, the pause's tries) at a time scale: `ms` at scale 1 and above, scaled
 * down with it, never below MIN_AWS_WAIT_MS (nor above `ms`).
 */
export function awsWaitMs(ms: number, timeScale = 1): number {
  return Math.max(Math.min(ms, MIN_AWS_WAIT_MS), Math.round(ms * Math.min(1, timeScale)));
}

/** The longest one AWS call can take at these options: every attempt at its timeout, the waits between. */
export function awsCallMs(): number {
  let waits = 0;
  for (let retry = 0; retry < AWS_MAX_ATTEMPTS - 1; retry++) waits += AWS_RETRY_WAIT_MS * 2 ** retry;
  return AWS_MAX_ATTEMPTS * AWS_REQUEST_TIMEOUT_MS + waits;
}

export interface AwsClientOptions {
  maxAttempts: number;
  requestHandler: {
    requestTimeout: number;
    connectionTimeout: number;
    /** Without it the SDK's node handler only logs a warning when requestTimeout passes. */
    throwOnRequestTimeout: true;
  };
}

/** Returns the options for `new XxxClient(awsClientOptions())`: attempts and timeouts bounded. */
export function awsClientOptions(): AwsClientOptions {
  return {
    maxAttempts: AWS_MAX_ATTEMPTS,
    requestHandler: {
      requestTimeout: AWS_REQUEST_TIMEOUT_MS,
      connectionTimeout: AWS_CONNECTION_TIMEOUT_MS,
      throwOnRequestTimeout: true,
    },
  };
}
