import { CookieJar } from 'tough-cookie';
import { Agent, type Dispatcher, fetch as undiciFetch } from 'undici';
import { drainAtMost, readAtMost } from '../common/bounded-read.js';
import { TargetError } from '../common/errors.js';
import { causeChain, failedBeforeSending, socketErrorCode } from '../common/network.js';
import { type Allowlist, checkTargetUrl, guardedLookup, type Resolver } from './allowlist.js';
import { AnswerText } from './answer-text.js';

/**
 * One HTTP session with a target form: its own cookie jar, so the page load and the POST
 * carrying the token share cookies (tokens are bound to the session that loaded the page).
 * Every URL, including every redirect hop, is checked against the allowlist before it is
 * contacted, and the shared agent re-checks when it opens a connection.
 *
 * Never logs or keeps the token: `submit` takes the fields, posts them and returns the status.
 */
export const DEFAULT_MAX_REDIRECTS = 5;
/**
 * A page longer than this fails the record PAGE_TOO_LARGE: no form page is that big, and
 * reading on would spend the invocation on a hostile or broken peer.
 */
export const MAX_PAGE_BYTES = 2 * 1024 * 1024;
/**
 * Of the target's answer to the POST at most this much is read; its status is the outcome,
 * so a longer answer, or one that does not end within the timeout, is cut off and the status kept.
 */
export const MAX_POST_ANSWER_BYTES = 64 * 1024;
/**
 * When the job's `expect` names body markers, this much of the answer is read and searched
 * (a thank-you or error page is rarely larger; a marker past it is not seen, and a missing
 * success marker then says so on the row).
 */
export const MAX_VERDICT_BYTES = 1024 * 1024;

export interface TargetSessionOptions {
  allowlist: Allowlist;
  resolver: Resolver;
  /**
   * Timeout of the page load (all its redirect hops together) and, separately, of the POST,
   * so the target takes at most 2 × timeoutMs of an invocation (the stack sizes the function
   * timeout on that).
   */
  timeoutMs: number;
  maxRedirects?: number;
  /** Shared connection pool; see createTargetAgent. A fresh one per session when omitted. */
  dispatcher?: Dispatcher;
  /** Aborts any request in progress (e.g. when the invocation runs out of time). */
  signal?: AbortSignal;
}

export interface PageLoad {
  /** Final status after redirects. */
  status: number;
  /** Final URL after redirects. */
  url: string;
  redirects: number;
}

/** The form's answer to the POST. */
export interface PostAnswer {
  status: number;
  /** With `verdict`: the Location header resolved against the submit URL (the raw header when it is no URL). */
  location?: string;
  /** With `verdict.body`: the answer's text, for the job's markers. */
  body?: AnswerText;
}

/** An undici agent whose connections only go to addresses the allowlist permits. Create once per module. */
export function createTargetAgent(allowlist: Allowlist, resolver: Resolver, timeoutMs: number): Agent {
  return new Agent({
    connect: { lookup: guardedLookup(allowlist, resolver), timeout: timeoutMs },
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
}

export class TargetSession {
  private readonly jar = new CookieJar();
  private readonly dispatcher: Dispatcher;
  private readonly maxRedirects: number;

  constructor(private readonly options: TargetSessionOptions) {
    this.dispatcher =
      options.dispatcher ?? createTargetAgent(options.allowlist, options.resolver, options.timeoutMs);
    this.maxRedirects = options.maxRedirects ?? DEFAULT_MAX_REDIRECTS;
  }

  /**
   * GETs the page, following at most maxRedirects redirects (each hop re-checked), and keeps
   * the cookies it sets. A final status >= 400 is a TargetError `PAGE_HTTP_<status>`.
   */
  async load(pageurl: string): Promise<PageLoad> {
    let url = new URL(pageurl);
    const deadline = AbortSignal.timeout(this.options.timeoutMs);
    for (let redirects = 0; ; redirects++) {
      const res = await this.exchange(url, { method: 'GET' }, deadline, 'page');
      const location = res.headers.get('location');
      if (res.status >= 300 && res.status < 400 && location) {
        if (redirects >= this.maxRedirects) {
          throw new TargetError(
            'TOO_MANY_REDIRECTS',
            `more than ${this.maxRedirects} redirects from the page`,
          );
        }
        try {
          url = new URL(location, url);
        } catch {
          throw new TargetError('BAD_REDIRECT', 'the page redirected to an invalid URL');
        }
        continue;
      }
      if (res.status >= 400) {
        throw new TargetError(`PAGE_HTTP_${res.status}`, `the page answered HTTP ${res.status}`);
      }
      return { status: res.status, url: url.href, redirects };
    }
  }

  /**
   * POSTs the fields form-encoded with the session's cookies. Redirects are not followed:
   * the POST's own status is the outcome (2xx/3xx = submitted, unless the job's `expect` says more). `idempotencyKey` is sent as the
   * `Idempotency-Key` header (IETF httpapi draft: a quoted string), so a target that honours it
   * can tell a repeated POST of the record. A POST whose answer is lost after it may have been
   * sent (reset, timeout) is a TargetError `OUTCOME_UNKNOWN`: the form may have taken it.
   * `verdict` (the job has an `expect` block): also return the answer's Location, and with
   * `body` up to MAX_VERDICT_BYTES of its text as an AnswerText (which never serializes).
   */
  async submit(
    submitUrl: string,
    fields: Record<string, string>,
    o: { idempotencyKey?: string; verdict?: { body: boolean } } = {},
  ): Promise<PostAnswer> {
    const url = new URL(submitUrl);
    const res = await this.exchange(
      url,
      {
        method: 'POST',
        body: new URLSearchParams(fields).toString(),
        contentType: 'application/x-www-form-urlencoded',
        ...(o.idempotencyKey === undefined ? {} : { idempotencyKey: o.idempotencyKey }),
      },
      AbortSignal.timeout(this.options.timeoutMs),
      o.verdict?.body ? 'verdict' : 'answer',
    );
    const location = res.headers.get('location');
    if (!o.verdict) return { status: res.status };
    return {
      status: res.status,
      ...(location === null ? {} : { location: resolvedLocation(location, url) }),
      ...(res.answer ? { body: res.answer } : {}),
    };
  }

  private async exchange(
    url: URL,
    request: { method: 'GET' | 'POST'; body?: string; contentType?: string; idempotencyKey?: string },
    deadline: AbortSignal,
    body: 'page' | 'answer' | 'verdict',
  ): Promise<{ status: number; headers: Headers; answer?: AnswerText }> {
    await checkTargetUrl(url, this.options.allowlist, this.options.resolver);
    const headers: Record<string, string> = { accept: 'text/html,*/*;q=0.8' };
    const cookie = await this.jar.getCookieString(url.href);
    if (cookie) headers.cookie = cookie;
    if (request.contentType) headers['content-type'] = request.contentType;
    if (request.idempotencyKey !== undefined)
      headers['idempotency-key'] = quotedString(request.idempotencyKey);
    const signals = [deadline];
    if (this.options.signal) signals.push(this.options.signal);
    try {
      const res = await undiciFetch(url, {
        method: request.method,
        headers,
        body: request.body,
        redirect: 'manual',
        dispatcher: this.dispatcher,
        signal: AbortSignal.any(signals),
      });
      for (const setCookie of res.headers.getSetCookie()) {
        await this.jar.setCookie(setCookie, url.href, { ignoreError: true });
      }
      const reply = { status: res.status, headers: res.headers as unknown as Headers };
      if (body === 'answer') {
        // The status decides; the answer's body is read (bounded) only so the connection can be reused.
        await readAtMost(res.body, MAX_POST_ANSWER_BYTES).catch(() => undefined);
        return reply;
      }
      if (body === 'verdict') {
        // The status is in hand, so a body that fails now does not make the outcome unknown:
        // the markers simply cannot be confirmed (form-verdict.ts reads `readable`).
        const read = await readAtMost(res.body, MAX_VERDICT_BYTES).catch(() => undefined);
        return {
          ...reply,
          answer: read ? AnswerText.of(read.bytes, read.complete) : AnswerText.unreadable(),
        };
      }
      const page = await drainAtMost(res.body, MAX_PAGE_BYTES);
      if (!page.complete) {
        throw new TargetError('PAGE_TOO_LARGE', `${url.host} sent a page over ${MAX_PAGE_BYTES} bytes`);
      }
      return reply;
    } catch (err) {
      const failure = toTargetError(err, url);
      if (request.method === 'POST' && mayHaveBeenSent(err)) {
        throw new TargetError(
          'OUTCOME_UNKNOWN',
          `the form POST to ${url.host} may have been taken, but its answer was lost (${failure.code})`,
          { cause: err },
        );
      }
      throw failure;
    }
  }
}

/** A redirect's target as an absolute URL; the header as sent when it is not a URL. */
function resolvedLocation(location: string, base: URL): string {
  try {
    return new URL(location, base).href;
  } catch {
    return location;
  }
}

/** An RFC 8941 sf-string, the form the Idempotency-Key draft gives the header's value. */
export function quotedString(value: string): string {
  return `"${value.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/**
 * Whether a failed request may have reached the target: not when the allowlist guard refused its
 * address or the socket failed before anything was written (refused, DNS, TLS, connect timeout).
 */
function mayHaveBeenSent(err: unknown): boolean {
  return guardRefusal(err) === undefined && !failedBeforeSending(socketErrorCode(err));
}

/** The allowlist guard's refusal, which the guarded lookup's fetch error wraps as its cause. */
function guardRefusal(err: unknown): TargetError | undefined {
  for (const cause of causeChain(err)) if (cause instanceof TargetError) return cause;
  return undefined;
}

function toTargetError(err: unknown, url: URL): TargetError {
  const refusal = guardRefusal(err);
  if (refusal) return refusal;
  const name = (err as { name?: string }).name;
  if (name === 'TimeoutError') {
    return new TargetError('TARGET_TIMEOUT', `${url.host} did not answer in time`, { cause: err });
  }
  if (name === 'AbortError') {
    return new TargetError('TARGET_ABORTED', `request to ${url.host} was aborted`, { cause: err });
  }
  const code = (err as { cause?: { code?: string } }).cause?.code;
  if (
    code === 'UND_ERR_HEADERS_TIMEOUT' ||
    code === 'UND_ERR_BODY_TIMEOUT' ||
    code === 'UND_ERR_CONNECT_TIMEOUT'
  ) {
    return new TargetError('TARGET_TIMEOUT', `${url.host} did not answer in time`, { cause: err });
  }
  return new TargetError(
    'TARGET_UNREACHABLE',
    `${url.host} could not be reached${code ? ` (${code})` : ''}`,
    {
      cause: err,
    },
  );
}
