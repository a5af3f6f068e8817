import { readAtMost } from '../common/bounded-read.js';
import { TransientError } from '../common/errors.js';
import { failedBeforeSending } from '../common/network.js';
import { AnswerUnreadableError, type HttpReply, networkReason, RequestNotSentError } from './answers.js';

/**
 * CaptchaAI's answers are a status and a task id or a token (a few KiB at most); a longer body
 * is a broken or hostile peer, and is not read further.
 */
export const MAX_ANSWER_BYTES = 64 * 1024;

export interface PostFormOptions {
  fetch: typeof fetch;
  url: string;
  /** in.php or res.php, for error messages. */
  path: string;
  /** The form fields, the API key among them: it travels only in the body, never in the URL. */
  form: Record<string, string>;
  timeoutMs: number;
  signal?: AbortSignal;
}

/**
 * One form POST with its own timeout and a bounded body. A network failure that proves nothing
 * was sent (refused, DNS, TLS) becomes RequestNotSentError; other network failures and timeouts
 * before the headers become TransientError; a body that is too large, stalls or is cut off after the headers
 * becomes AnswerUnreadableError; an abort by the caller's signal rejects with the signal's reason.
 * The key is never in the URL, so it cannot leak into error messages or proxy logs.
 */
export async function postForm(o: PostFormOptions): Promise<HttpReply> {
  const { path, signal, timeoutMs } = o;
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, timeoutMs);
  const onAbort = () => controller.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  let headersIn = false;
  try {
    const response = await o.fetch(o.url, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(o.form).toString(),
      signal: controller.signal,
    });
    headersIn = true;
    const body = await readAtMost(response.body, MAX_ANSWER_BYTES);
    if (!body.complete) {
      throw new AnswerUnreadableError(
        'ANSWER_TOO_LARGE',
        `CaptchaAI's answer to ${path} is over ${MAX_ANSWER_BYTES} bytes`,
      );
    }
    return { status: response.status, text: new TextDecoder().decode(body.bytes) };
  } catch (err) {
    if (signal?.aborted) throw signal.reason;
    if (err instanceof AnswerUnreadableError) throw err;
    if (headersIn) {
      // The headers came, the body did not (it stalled or the connection broke).
      throw new AnswerUnreadableError(
        timedOut ? 'ANSWER_TIMEOUT' : 'ANSWER_CUT',
        `CaptchaAI's answer to ${path} ${timedOut ? `did not end within ${timeoutMs} ms` : 'was cut off'}`,
        { cause: err },
      );
    }
    if (timedOut) {
      throw new TransientError('HTTP_TIMEOUT', `CaptchaAI did not answer ${path} within ${timeoutMs} ms`, {
        cause: err,
      });
    }
    const reason = networkReason(err);
    // A refused connection, a DNS or TLS failure: nothing was sent, so no task can exist.
    const NotSent = failedBeforeSending(reason) ? RequestNotSentError : TransientError;
    throw new NotSent('NETWORK_ERROR', `network error calling CaptchaAI ${path}: ${reason}`, { cause: err });
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

/** setTimeout as a promise that rejects with `signal.reason` when the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
