/**
 * The options every AWS SDK client of the functions is built with. The worker's worst case
 * (functions/worker/worst-case.ts) allows a bounded time per AWS call, its retries included;
 * without a request timeout and a bounded number of attempts that allowance would be an
 * assumption, and a hung call would stall an invocation until Lambda kills it.
 */

/** Attempts per AWS call, the first included. */
export const AWS_MAX_ATTEMPTS = 3;
/** Each attempt's own timeout (ms): the socket is given up after this long without an answer. */
export const AWS_REQUEST_TIMEOUT_MS = 2_000;
/** Connecting to the endpoint (ms). */
export const AWS_CONNECTION_TIMEOUT_MS = 1_000;

export interface AwsClientOptions {
  maxAttempts: number;
  requestHandler: { requestTimeout: number; connectionTimeout: number };
}

/** Returns the options for `new XxxClient(awsClientOptions())`: attempts and timeouts bounded. */
export function awsClientOptions(): AwsClientOptions {
  return {
    maxAttempts: AWS_MAX_ATTEMPTS,
    requestHandler: { requestTimeout: AWS_REQUEST_TIMEOUT_MS, connectionTimeout: AWS_CONNECTION_TIMEOUT_MS },
  };
}
