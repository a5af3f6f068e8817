import {
  BadTaskError,
  type CaptchaError,
  RateLimitError,
  StopClassError,
  TransientError,
  UnsolvableError,
} from '../common/errors.js';
import type { CaptchaTask, ThreadsInfo } from './types.js';

/**
 * CaptchaAI's side of the protocol, without I/O: the in.php parameters of a task, how an HTTP
 * reply is read into an answer, and which error class each answer code belongs to. The client
 * (./client.ts) does the calls, the waits and the retry budget.
 */

/** Headers arrived but the body was too large, stalled or cut off. */
export class AnswerUnreadableError extends TransientError {
  override name = 'AnswerUnreadableError';
}

/**
 * The request never reached CaptchaAI: the connection was refused, the name did not resolve, or
 * TLS failed before anything was sent. No task can exist, so in.php may be tried again at once.
 */
export class RequestNotSentError extends TransientError {
  override name = 'RequestNotSentError';
}

/** Codes that would fail every record the same way: halt all workers. */
export const STOP_CODES = new Set([
  'ERROR_WRONG_USER_KEY',
  'ERROR_KEY_DOES_NOT_EXIST',
  'IP_BANNED',
  'ERROR_IP_BANNED',
]);
/** "No free threads": decided by a threadsinfo call (all busy → transient, idle → no active plan). */
export const NO_SLOT_CODES = new Set(['ERROR_ZERO_BALANCE', 'ERROR_NO_SLOT_AVAILABLE']);
export const SERVER_ERROR_CODES = new Set(['ERROR_SERVER_ERROR', 'ERROR_INTERNAL_SERVER_ERROR']);
export const UNSOLVABLE_CODE = 'ERROR_CAPTCHA_UNSOLVABLE';
/** CaptchaAI's spelling has no T; accept the corrected one too. */
export const NOT_READY_CODES = new Set(['CAPCHA_NOT_READY', 'CAPTCHA_NOT_READY']);
/** "Slow down": CaptchaAI's ERROR_TOO_MUCH_REQUESTS, 2captcha's MAX_USER_TURN (too many in.php calls at once). */
export const RATE_LIMIT_CODES = new Set(['ERROR_TOO_MUCH_REQUESTS', 'MAX_USER_TURN']);
/** The rate-limit back-off doubles per answer in a row, up to this many times its first wait. */
export const RATE_LIMIT_BACKOFF_MAX_FACTOR = 8;

export const STOP_REASONS: Record<string, string> = {
  ERROR_WRONG_USER_KEY: 'the API key is malformed',
  ERROR_KEY_DOES_NOT_EXIST: 'the API key does not exist or was revoked',
  IP_BANNED: 'this IP address is banned (CaptchaAI lifts it after about 5 minutes)',
  ERROR_IP_BANNED: 'this IP address is banned (CaptchaAI lifts it after about 5 minutes)',
};

/** What a json=1 endpoint answered once HTML, 5xx and unreadable bodies are ruled out. */
export type Answer = { ok: true; value: string } | { ok: false; code: string };

export interface HttpReply {
  status: number;
  text: string;
}

/** The in.php parameters of a task (without key). */
export function taskParams(task: CaptchaTask): Record<string, string> {
  const p: Record<string, string> = { json: '1' };
  switch (task.type) {
    case 'recaptcha_v2':
      Object.assign(p, { method: 'userrecaptcha', googlekey: task.sitekey, pageurl: task.pageurl });
      if (task.invisible) p.invisible = '1';
      break;
    case 'recaptcha_v3':
      Object.assign(p, {
        method: 'userrecaptcha',
        version: 'v3',
        googlekey: task.sitekey,
        pageurl: task.pageurl,
      });
      if (task.action !== undefined) p.action = task.action;
      if (task.minScore !== undefined) p.min_score = String(task.minScore);
      break;
    case 'recaptcha_enterprise':
      Object.assign(p, {
        method: 'userrecaptcha',
        enterprise: '1',
        googlekey: task.sitekey,
        pageurl: task.pageurl,
      });
      // Enterprise with an action or a score threshold is the score-based (v3) flavour.
      if (task.action !== undefined || task.minScore !== undefined) p.version = 'v3';
      if (task.action !== undefined) p.action = task.action;
      if (task.minScore !== undefined) p.min_score = String(task.minScore);
      if (task.invisible) p.invisible = '1';
      break;
    case 'turnstile':
      Object.assign(p, { method: 'turnstile', sitekey: task.sitekey, pageurl: task.pageurl });
      if (task.action !== undefined) p.action = task.action;
      break;
    case 'image':
      Object.assign(p, { method: 'base64', body: task.body });
      break;
    default: {
      const unknown: never = task;
      throw new BadTaskError(
        'UNKNOWN_TYPE',
        `unknown CAPTCHA type ${JSON.stringify((unknown as { type?: unknown }).type)}`,
      );
    }
  }
  return p;
}

/** Sorts a CaptchaAI error code into the hierarchy (no-slot codes are decided by the caller). */
export function classify(code: string, taskId: string | undefined): CaptchaError {
  const o = { taskId };
  if (STOP_CODES.has(code)) {
    return new StopClassError(
      code,
      `CaptchaAI answered ${code}: ${STOP_REASONS[code] ?? 'stop all workers'}`,
      o,
    );
  }
  if (SERVER_ERROR_CODES.has(code)) return new TransientError(code, `CaptchaAI answered ${code}`, o);
  if (RATE_LIMIT_CODES.has(code))
    return new RateLimitError(code, `CaptchaAI answered ${code}: too many requests`, o);
  if (code === UNSOLVABLE_CODE) {
    return new UnsolvableError(code, `CaptchaAI could not solve task ${taskId ?? '(none)'} (${code})`, o);
  }
  if (NO_SLOT_CODES.has(code)) return new TransientError(code, `CaptchaAI answered ${code}`, o);
  return new BadTaskError(code, `CaptchaAI rejected the task: ${code}`, o);
}

/**
 * HTML pages and 5xx answers are CaptchaAI's (or its proxy's) trouble, never the task's; HTTP 429
 * (or an HTML "429 Too Many Requests" page) is a rate limit, whatever the body says.
 */
export function rejectServerFailure(reply: HttpReply, what: string): void {
  const body = reply.text.trimStart();
  const html = body.startsWith('<');
  if (reply.status === 429 || (html && /<title>[^<]*\b429\b/i.test(body))) {
    throw new RateLimitError(
      'HTTP_429',
      `CaptchaAI answered ${what} with HTTP ${reply.status}: too many requests`,
    );
  }
  if (reply.status >= 500 || html) {
    throw new TransientError(
      reply.status >= 500 ? `HTTP_${reply.status}` : 'HTML_RESPONSE',
      `CaptchaAI answered ${what} with HTTP ${reply.status}${html ? ' and an HTML page' : ''}`,
    );
  }
}

/**
 * Reads a json=1 answer. CaptchaAI sometimes answers in plain text despite json=1
 * (`ERROR_…`, `IP_BANNED`, `OK|…`), so both forms are understood; anything else is transient.
 * Error messages never quote the body: a success body carries a token.
 */
export function parseAnswer(reply: HttpReply, what: string, preParsed?: unknown): Answer {
  rejectServerFailure(reply, what);
  const body = reply.text.trim();
  let parsed = preParsed;
  if (parsed === undefined && body.startsWith('{')) {
    try {
      parsed = JSON.parse(body);
    } catch {
      parsed = undefined;
    }
  }
  if (isRecord(parsed) && 'status' in parsed) {
    const request = parsed.request;
    const value =
      typeof request === 'number' ? String(request) : typeof request === 'string' ? request.trim() : '';
    if (Number(parsed.status) === 1 && value !== '') return { ok: true, value };
    if (Number(parsed.status) !== 1 && /^[A-Z][A-Z0-9_]*$/.test(value)) return { ok: false, code: value };
  } else if (body.startsWith('OK|') && body.length > 3) {
    return { ok: true, value: body.slice(3) };
  } else if (/^[A-Z][A-Z0-9_]*$/.test(body)) {
    return { ok: false, code: body };
  }
  throw new TransientError(
    'BAD_RESPONSE',
    `CaptchaAI answered ${what} with HTTP ${reply.status} and an unreadable body`,
  );
}

export function networkReason(err: unknown): string {
  const cause =
    err instanceof Error ? (err.cause as { code?: unknown; message?: unknown } | undefined) : undefined;
  if (cause && typeof cause.code === 'string') return cause.code;
  const nested = (cause as { cause?: { code?: unknown } } | undefined)?.cause;
  if (nested && typeof nested.code === 'string') return nested.code;
  if (cause && typeof cause.message === 'string') return cause.message;
  return err instanceof Error ? err.message : String(err);
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * A thread count as CaptchaAI sends it: a non-negative integer, as a number or a string of
 * digits. Anything else (null, "", a boolean, "abc", -1, 1.5) is undefined: not a count.
 */
export function countOf(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isInteger(v) && v >= 0 ? v : undefined;
  if (typeof v === 'string' && /^\s*\d+\s*$/.test(v)) return Number(v);
  return undefined;
}

/** Reads a threadsinfo answer: the counts, or the error class of what CaptchaAI answered instead. */
export function readThreadsInfo(reply: HttpReply): ThreadsInfo {
  rejectServerFailure(reply, 'threadsinfo');
  const body = reply.text.trim();
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    parsed = undefined;
  }
  if (isRecord(parsed) && 'threads' in parsed) {
    // null, "", true or "abc" are an unreadable answer, never a count of 0 (which would pause NO_ACTIVE_PLAN).
    const threads = countOf(parsed.threads);
    const workingThreads = countOf(parsed.working_threads ?? parsed.workingThreads);
    if (threads !== undefined && workingThreads !== undefined) return { threads, workingThreads };
    throw new TransientError('BAD_RESPONSE', 'threadsinfo answered without usable thread counts');
  }
  const answer = parseAnswer(reply, 'threadsinfo', parsed);
  if (answer.ok) throw new TransientError('BAD_RESPONSE', 'threadsinfo answered without thread counts');
  const err = classify(answer.code, undefined);
  // A no-slot code makes no sense here; anything but a stop-class answer is worth asking again later.
  if (err instanceof StopClassError || err instanceof TransientError) throw err;
  throw new TransientError(answer.code, `threadsinfo answered ${answer.code}`);
}
