import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { eventLog, type Logged } from './event-log.js';
import { checkSchedule, type FaultDraw, type FaultSchedule, faultDraw } from './fault-draw.js';
import { HOSTILE_KINDS, type HostileKind, sendHostile } from './hostile-reply.js';

/**
 * A form site for tests and the local stack. Any path serves a page (so each record can
 * have its own pageurl, e.g. /form/<id>): the page sets a session cookie and shows a
 * CAPTCHA widget with the stand-in's sitekey. A POST to any path checks the session cookie
 * and verifies the token with the CaptchaAI stand-in (`POST {captchaUrl}/verify`, single
 * use, matching sitekey and pageurl), then answers 200 or 403.
 *
 * Failure variants, chosen by path prefix so one stand-in serves good and bad records:
 *   /fail-page/<status>/…   the page answers <status>
 *   /fail-post/<status>/…   the page loads; the POST answers <status> (after verifying nothing)
 *   /slow-page/<ms>/…       the page answers after <ms>
 *   /slow-post/<ms>/…       the POST answers after <ms>
 *   /redirect/<n>/…         302 to /redirect/<n-1>/…, at 0 to /… (the page)
 *   …?pad=<bytes>           the page carries that many bytes more (an HTML comment), up to 8 MiB:
 *                           large pages for the bench's memory runs
 *   /redirect-to/<encoded absolute URL>   302 to that URL
 *   /hostile-page/<kind>/…  the page is a broken peer's (local/standins/hostile-reply.ts: huge, endless,
 *                           hang-after-headers), with the session cookie
 *   /hostile-post/<kind>/…  the page loads; the POST is verified as usual, then answered that way
 *   /form-200/<shape>/…     a form that says no with a 200, as real ones do (FORM_SHAPES): a refused
 *                           POST (no session, no token, a token the verifier refuses) gets the form
 *                           page back with an error text and 200 (`redirect`: 303 to /error; `json`:
 *                           200 {"ok":false,…}); an accepted one gets a thank-you page (`page`), the
 *                           bare form again without any message (`silent`), a 303 to /thanks
 *                           (`redirect`) or 200 {"ok":true,…} (`json`). Every such answer carries
 *                           FORM_PAGE_SENTINEL, so a test can search logs and rows for page text.
 *                           With `?pad=<bytes>` on the POST's URL, the page answers (`page`, `silent`)
 *                           carry that much filler before their message: a failure marker past
 *                           the worker's 1 MiB read of the answer.
 *
 * A lost answer, drawn at run time (`faults.dropAfterPost`, a FaultSchedule: every Nth POST or
 * a seeded rate, optionally for some record keys): the POST is verified and counted as usual
 * (the form took it) and then the connection is closed without an answer.
 *
 * HTTP: GET /stats → TargetStandinStats; POST /stats/reset; GET /events?since=SEQ → the event
 * log (TargetEvent: every page load and POST with its record and what it was answered);
 * POST /faults {"dropAfterPost": FaultSchedule | null}.
 */
export interface TargetStandinOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  /** Interface to listen on; default 127.0.0.1. */
  host?: string;
  /**
   * Base URL of the CaptchaAI stand-in, whose POST /verify checks tokens. Without one (tokens
   * of a service whose answers cannot be checked here) every POST with a token answers 502
   * VERIFY_UNAVAILABLE.
   */
  captchaUrl: string | undefined;
  /** The widget's sitekey; default `threadgate-standin-sitekey`. */
  sitekey?: string;
  /** Fields a token is accepted from; default g-recaptcha-response, cf-turnstile-response. */
  tokenFields?: string[];
  /** Every page load answers after this long, like a real form's server time (real ms). @default 0 */
  pageDelayMs?: number;
  /** Every form POST answers after this long (real ms). @default 0 */
  postDelayMs?: number;
  /** Faults from the start (also settable while running: `setFaults`, `POST /faults`). */
  faults?: TargetFaults;
}

export interface TargetFaults {
  /** The POST is taken (verified, counted) and the connection closed before any answer. */
  dropAfterPost?: FaultSchedule | null;
}

/** Query parameter of a page URL: pad the page by this many bytes (bench `--large-pages`). */
export const PAD_PARAM = 'pad';
const MAX_PAD_BYTES = 8 * 1024 * 1024;

/**
 * One entry of the target's event log, for one record: a page load, a POST as it arrives
 * (`post-received`, before the stand-in's delay) and the same POST once answered (`post`).
 */
export interface TargetEvent {
  kind: 'page' | 'post-received' | 'post';
  /** The `record` form field, or the path's last segment (forms live at /form/<record key>). */
  record: string;
  /** HTTP status answered; 0 when the connection was dropped instead. */
  status: number;
  /** Why a POST was refused, or `DROPPED_AFTER_POST`. */
  reason?: string;
  /** The POST's Idempotency-Key header, when it had one. */
  idempotencyKey?: string;
}

export interface TargetStandinStats {
  pageLoads: number;
  posts: number;
  /** Accepted posts per record: the `record` form field, or the path when there is none. */
  accepted: Record<string, number>;
  acceptedTotal: number;
  /** Rejected posts by reason: NO_SESSION, MISSING_TOKEN, VERIFY_UNAVAILABLE, FORCED_<status>, or the verifier's error. */
  rejections: Record<string, number>;
  /** Accepted posts whose connection was then dropped without an answer (`dropAfterPost`). */
  droppedAfterPost: number;
}

export interface TargetStandin {
  /** `http://127.0.0.1:PORT` (no trailing slash). */
  url: string;
  port: number;
  sitekey: string;
  stats(): TargetStandinStats;
  resetStats(): void;
  /** Sets (or, with null, clears) faults while running. */
  setFaults(faults: TargetFaults): void;
  /** The event log after `since` (0: all kept). */
  events(since?: number): { next: number; dropped: number; entries: Logged<TargetEvent>[] };
  /**
   * Tokens that reached the stand-in in a POST, kept in memory only so tests can prove that
   * no log line contains one. Not served over HTTP.
   */
  receivedTokens(): string[];
  close(): Promise<void>;
}

export const DEFAULT_STANDIN_SITEKEY = 'threadgate-standin-sitekey';

/** How a `/form-200/<shape>/…` form answers (see the header comment). */
export const FORM_SHAPES = ['page', 'silent', 'redirect', 'json'] as const;
export type FormShape = (typeof FORM_SHAPES)[number];
/** In every answer of a `/form-200/…` POST: text of the page that must never reach a row or a log. */
export const FORM_PAGE_SENTINEL = 'standin-form-page-7f3a';
/** The texts a `/form-200/…` form answers with; markers for `expect` in tests and samples. */
export const FORM_PAGE_TEXTS = {
  refused: 'CAPTCHA verification failed, please try again.',
  thanks: 'Thank you! Your submission was received.',
  jsonRefused: '{"ok":false,"error":"captcha_failed"}',
  jsonAccepted: '{"ok":true,"id":"standin-1"}',
} as const;
const SESSION_COOKIE = 'tg_session';
const MAX_POST_BYTES = 1024 * 1024;

function emptyStats(): TargetStandinStats {
  return { pageLoads: 0, posts: 0, accepted: {}, acceptedTotal: 0, rejections: {}, droppedAfterPost: 0 };
}

function hostileKind(arg: string): HostileKind {
  if (!(HOSTILE_KINDS as readonly string[]).includes(arg))
    throw new RangeError(`unknown hostile kind "${arg}"`);
  return arg as HostileKind;
}

function readCookie(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return v.join('=');
  }
  return undefined;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_POST_BYTES) throw new Error('body too large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function recordOf(url: URL, form?: URLSearchParams): string {
  return form?.get('record') ?? url.pathname.split('/').filter(Boolean).pop() ?? '';
}

function checkTargetFaults(f: unknown): TargetFaults {
  if (typeof f !== 'object' || f === null || Array.isArray(f))
    throw new RangeError('faults must be an object');
  for (const [name, value] of Object.entries(f)) {
    if (name !== 'dropAfterPost') throw new RangeError(`unknown target fault "${name}"`);
    if (value !== null) checkSchedule(name, value);
  }
  return f as TargetFaults;
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** The form site's state and its answers; startTargetStandin puts it behind an HTTP server. */
class TargetSite {
  readonly sitekey: string;
  private readonly tokenFields: string[];
  private readonly captchaUrl: string | undefined;
  /** session id → the page URL that session loaded last. */
  private readonly sessions = new Map<string, string>();
  stats = emptyStats();
  readonly tokens: string[] = [];
  private readonly pageDelayMs: number;
  private readonly postDelayMs: number;
  readonly events = eventLog<TargetEvent>();
  private dropAfterPost: FaultDraw | undefined;

  constructor(options: TargetStandinOptions) {
    this.sitekey = options.sitekey ?? DEFAULT_STANDIN_SITEKEY;
    this.tokenFields = options.tokenFields ?? ['g-recaptcha-response', 'cf-turnstile-response'];
    this.captchaUrl = options.captchaUrl?.replace(/\/+$/, '');
    this.pageDelayMs = options.pageDelayMs ?? 0;
    this.postDelayMs = options.postDelayMs ?? 0;
    if (options.faults) this.setFaults(options.faults);
    for (const [name, v] of [
      ['pageDelayMs', this.pageDelayMs],
      ['postDelayMs', this.postDelayMs],
    ] as const) {
      if (!(Number.isFinite(v) && v >= 0)) throw new RangeError(`${name} must be a number >= 0, got ${v}`);
    }
  }

  setFaults(f: TargetFaults): void {
    checkTargetFaults(f);
    if (f.dropAfterPost !== undefined)
      this.dropAfterPost = f.dropAfterPost === null ? undefined : faultDraw(f.dropAfterPost);
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`);
    if (await this.controlRoute(url, req, res)) return;
    const segments = url.pathname.split('/');
    const control = segments[1] ?? '';
    const arg = segments[2] ?? '';
    if (control === 'redirect' || control === 'redirect-to') return redirect(url, segments, res);
    const isPost = req.method === 'POST';
    // The moment a POST arrives, before any delay: a crash from here on may leave the form taken.
    if (isPost) this.events.push({ kind: 'post-received', record: recordOf(url), status: 0 });
    const delayMs = isPost ? this.postDelayMs : req.method === 'GET' ? this.pageDelayMs : 0;
    if (delayMs > 0) await sleep(delayMs);
    if (control === (isPost ? 'slow-post' : 'slow-page')) await sleep(Number(arg) || 0);
    if (control === (isPost ? 'fail-post' : 'fail-page')) return this.forcedFailure(url, arg, isPost, res);
    const hostile = control === (isPost ? 'hostile-post' : 'hostile-page') ? hostileKind(arg) : undefined;
    if (req.method === 'GET') return this.page(url, req, res, hostile);
    const shape = control === 'form-200' ? formShape(arg) : undefined;
    if (isPost) return this.post(url, req, res, hostile, shape);
    res.writeHead(405).end();
  }

  /** GET /stats, POST /stats/reset, GET /events, POST /faults; false for any other request. */
  private async controlRoute(url: URL, req: IncomingMessage, res: ServerResponse): Promise<boolean> {
    const route = `${req.method} ${url.pathname}`;
    if (route === 'GET /stats') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(this.stats));
    } else if (route === 'POST /stats/reset') {
      this.stats = emptyStats();
      res.writeHead(204).end();
    } else if (route === 'GET /events') {
      const since = Number(url.searchParams.get('since') ?? 0) || 0;
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify(this.events.since(since)));
    } else if (route === 'POST /faults') {
      try {
        this.setFaults(JSON.parse(await readBody(req)) as unknown as TargetFaults);
      } catch (err) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end(`${(err as Error).message}\n`);
        return true;
      }
      res.writeHead(204).end();
    } else {
      return false;
    }
    return true;
  }

  private reject(
    res: ServerResponse,
    status: number,
    reason: string,
    event?: TargetEvent,
    shape?: FormShape,
    pad = 0,
  ): void {
    this.stats.rejections[reason] = (this.stats.rejections[reason] ?? 0) + 1;
    if (shape) {
      const answer = formAnswer(shape, 'refused', event?.record ?? '', pad);
      if (event) this.events.push({ ...event, status: answer.status, reason });
      res.writeHead(answer.status, answer.headers).end(answer.body);
      return;
    }
    if (event) this.events.push({ ...event, status, reason });
    res.writeHead(status, { 'content-type': 'text/plain' }).end(`rejected: ${reason}\n`);
  }

  private forcedFailure(url: URL, arg: string, isPost: boolean, res: ServerResponse): void {
    const status = Number(arg) || 500;
    if (isPost) {
      this.stats.posts++;
      this.reject(res, status, `FORCED_${status}`, { kind: 'post', record: recordOf(url), status });
    } else {
      this.events.push({ kind: 'page', record: recordOf(url), status });
      res.writeHead(status, { 'content-type': 'text/plain' }).end(`forced ${status}\n`);
    }
  }

  private async page(
    url: URL,
    req: IncomingMessage,
    res: ServerResponse,
    hostile: HostileKind | undefined,
  ): Promise<void> {
    this.stats.pageLoads++;
    let session = readCookie(req, SESSION_COOKIE);
    const headers: Record<string, string> = { 'content-type': 'text/html; charset=utf-8' };
    if (!session || !this.sessions.has(session)) {
      session = randomBytes(16).toString('hex');
      headers['set-cookie'] = `${SESSION_COOKIE}=${session}; Path=/; HttpOnly; SameSite=Lax`;
    }
    this.sessions.set(session, url.href);
    this.events.push({ kind: 'page', record: recordOf(url), status: 200 });
    if (hostile) return sendHostile(req, res, hostile, headers);
    const turnstile = url.searchParams.get('widget') === 'turnstile';
    const sitekey = escapeHtml(this.sitekey);
    const widget = turnstile
      ? `<div class="cf-turnstile" data-sitekey="${sitekey}"></div>`
      : `<div class="g-recaptcha" data-sitekey="${sitekey}"></div>`;
    const pad = padOf(url);
    res
      .writeHead(200, headers)
      .end(
        `<!doctype html><html><body><form method="post" action="${escapeHtml(url.pathname)}">` +
          `${widget}<button type="submit">Submit</button></form>` +
          (pad > 0 ? `<!--${'x'.repeat(pad)}-->` : '') +
          `</body></html>\n`,
      );
  }

  private async post(
    url: URL,
    req: IncomingMessage,
    res: ServerResponse,
    hostile: HostileKind | undefined,
    shape?: FormShape,
  ): Promise<void> {
    this.stats.posts++;
    const form = new URLSearchParams(await readBody(req));
    const idempotencyKey = req.headers['idempotency-key'];
    const event: TargetEvent = {
      kind: 'post',
      record: recordOf(url, form),
      status: 0,
      ...(typeof idempotencyKey === 'string' ? { idempotencyKey } : {}),
    };
    const session = readCookie(req, SESSION_COOKIE);
    const pageurl = session ? this.sessions.get(session) : undefined;
    const pad = padOf(url);
    if (!pageurl) return this.reject(res, 403, 'NO_SESSION', event, shape, pad);
    const field = this.tokenFields.find((f) => form.has(f));
    const token = field ? form.get(field) : undefined;
    if (!token) return this.reject(res, 403, 'MISSING_TOKEN', event, shape, pad);
    this.tokens.push(token);
    const refusal = await this.verify(token, pageurl);
    if (refusal) return this.reject(res, refusal.status, refusal.reason, event, shape, pad);
    const record = form.get('record') ?? url.pathname;
    this.stats.accepted[record] = (this.stats.accepted[record] ?? 0) + 1;
    this.stats.acceptedTotal++;
    if (this.dropAfterPost?.hit(event.record)) {
      // The form took it; its answer is lost (a reset connection, a timed-out gateway).
      this.stats.droppedAfterPost++;
      this.events.push({ ...event, reason: 'DROPPED_AFTER_POST' });
      req.socket.destroy();
      return;
    }
    if (shape) {
      const answer = formAnswer(shape, 'accepted', event.record, pad);
      this.events.push({ ...event, status: answer.status });
      res.writeHead(answer.status, answer.headers).end(answer.body);
      return;
    }
    this.events.push({ ...event, status: 200 });
    if (hostile) return sendHostile(req, res, hostile);
    res.writeHead(200, { 'content-type': 'text/plain' }).end('accepted\n');
  }

  /** Checks a token with the CaptchaAI stand-in; the refusal, or undefined when it is good. */
  private async verify(
    token: string,
    pageurl: string,
  ): Promise<{ status: number; reason: string } | undefined> {
    if (this.captchaUrl === undefined) return { status: 502, reason: 'VERIFY_UNAVAILABLE' };
    let verdict: { success?: boolean; error?: string };
    try {
      const answer = await fetch(`${this.captchaUrl}/verify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ token, sitekey: this.sitekey, pageurl }),
      });
      verdict = (await answer.json()) as typeof verdict;
    } catch {
      return { status: 502, reason: 'VERIFY_UNAVAILABLE' };
    }
    return verdict.success === true ? undefined : { status: 403, reason: verdict.error ?? 'TOKEN_REJECTED' };
  }
}

/** The `?pad=<bytes>` of a request, within 0 … MAX_PAD_BYTES. */
function padOf(url: URL): number {
  return Math.min(MAX_PAD_BYTES, Math.max(0, Math.floor(Number(url.searchParams.get(PAD_PARAM)) || 0)));
}

function formShape(arg: string): FormShape {
  if (!(FORM_SHAPES as readonly string[]).includes(arg))
    throw new RangeError(`unknown form shape "${arg}" (one of ${FORM_SHAPES.join(', ')})`);
  return arg as FormShape;
}

/**
 * A `/form-200/<shape>/…` form's answer to a refused or accepted POST: what real forms send.
 * The page names the record (as a real confirmation would name the person) and carries the sentinel.
 */
function formAnswer(
  shape: FormShape,
  verdict: 'refused' | 'accepted',
  record: string,
  pad = 0,
): { status: number; headers: Record<string, string>; body: string } {
  const html = (inner: string) => ({
    status: 200,
    headers: { 'content-type': 'text/html; charset=utf-8' },
    body:
      `<!doctype html><html><body><!-- ${FORM_PAGE_SENTINEL} -->` +
      (pad > 0 ? `<!--${'x'.repeat(pad)}-->` : '') +
      `<form method="post"><input name="record" value="${escapeHtml(record)}"><button>Submit</button></form>${inner}</body></html>\n`,
  });
  if (shape === 'redirect') {
    return {
      status: 303,
      headers: { location: verdict === 'accepted' ? '/thanks' : '/error', 'content-type': 'text/plain' },
      body: `${FORM_PAGE_SENTINEL} see other\n`,
    };
  }
  if (shape === 'json') {
    const text = verdict === 'accepted' ? FORM_PAGE_TEXTS.jsonAccepted : FORM_PAGE_TEXTS.jsonRefused;
    return {
      status: 200,
      headers: { 'content-type': 'application/json' },
      body: `${text.slice(0, -1)},"trace":"${FORM_PAGE_SENTINEL}"}`,
    };
  }
  if (verdict === 'refused') return html(`<p class="error">${FORM_PAGE_TEXTS.refused}</p>`);
  // `silent`: the form comes back bare, as some forms do after a submission they ignored.
  return shape === 'page'
    ? html(`<h1>${FORM_PAGE_TEXTS.thanks}</h1><p>Record ${escapeHtml(record)}.</p>`)
    : html('');
}

/** /redirect/<n>/… (302 to /redirect/<n-1>/…, at 0 to /…) and /redirect-to/<encoded URL>. */
function redirect(url: URL, segments: string[], res: ServerResponse): void {
  const arg = segments[2] ?? '';
  if (segments[1] === 'redirect-to') {
    res.writeHead(302, { location: decodeURIComponent(arg) }).end();
    return;
  }
  const n = Number(arg);
  const rest = `/${segments.slice(3).join('/')}`;
  const next = n > 0 ? `/redirect/${n - 1}${rest}` : rest;
  res.writeHead(302, { location: `${next}${url.search}` }).end();
}

export async function startTargetStandin(options: TargetStandinOptions): Promise<TargetStandin> {
  const site = new TargetSite(options);
  const server = createServer((req, res) => {
    site.handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
      else res.end();
    });
  });
  server.listen(options.port ?? 0, options.host ?? '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const host = options.host ?? '127.0.0.1';
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    port,
    sitekey: site.sitekey,
    stats: () => structuredClone(site.stats),
    resetStats: () => {
      site.stats = emptyStats();
    },
    setFaults: (f) => site.setFaults(f),
    events: (since = 0) => site.events.since(since),
    receivedTokens: () => [...site.tokens],
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
