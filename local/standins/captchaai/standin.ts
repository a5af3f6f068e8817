import { randomInt } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { MIN_SCALED_TOKEN_LIFETIME_MS, scaledTokenLifetimeMs } from '../../../functions/captchaai/timings.js';
import type { CaptchaType } from '../../../functions/captchaai/types.js';
import { HOSTILE_KINDS, sendHostile } from '../hostile-reply.js';
import {
  checkBool,
  checkCount,
  checkFaults,
  isRecord,
  keyFingerprint,
  makeToken,
  NO_FAULTS,
  normalizeUrl,
  parseTask,
  readBody,
  send,
  sendJson,
} from './http.js';
import {
  type CaptchaStandin,
  DEFAULT_LATENCY,
  type FaultRates,
  type InjectableEndpoint,
  type InjectedReply,
  type LatencyDistribution,
  type StandinOptions,
} from './types.js';

export { keyFingerprint } from './http.js';
export type {
  CaptchaStandin,
  ControlRequest,
  FaultRates,
  InjectableEndpoint,
  InjectedReply,
  LatencyDistribution,
  StandinOptions,
  StandinStats,
} from './types.js';
export { DEFAULT_LATENCY } from './types.js';

/**
 * A local stand-in for CaptchaAI's HTTP API with a real thread limit: every task holds one of
 * the plan's T threads from submit until it is solved or found unsolvable, and a submit beyond
 * T answers ERROR_ZERO_BALANCE. Latency, faults, the key and the plan can be changed while it
 * runs, from code or over HTTP (`POST /control`), so tests and other processes can drive it.
 *
 * Endpoints: `/in.php`, `/res.php` (`action=get`, `action=threadsinfo`) with form-encoded
 * bodies or query parameters, with or without `json=1`; `GET /stats`, `POST /stats/reset`,
 * `POST /control`, `POST /verify` (single-use token check for a target site), `GET /health`.
 */

const HTML_429 =
  '<html>\r\n<head><title>429 Too Many Requests</title></head>\r\n<body>\r\n<center><h1>429 Too Many Requests</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n';

const HTML_502 =
  '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n';

interface Task {
  id: string;
  type: CaptchaType;
  sitekey: string;
  pageurl: string;
  state: 'pending' | 'solved' | 'unsolvable';
  token?: string;
  holdsThread: boolean;
  timer?: NodeJS.Timeout;
  finishedAt?: number;
}

interface IssuedToken {
  sitekey: string;
  pageurl: string;
  expiresAt: number;
  used: boolean;
}

type Params = URLSearchParams;

export async function startCaptchaStandin(o: StandinOptions): Promise<CaptchaStandin> {
  checkCount('threads', o.threads);
  if (typeof o.apiKey !== 'string' || o.apiKey === '') throw new RangeError('apiKey is required');
  const timeScale = o.timeScale ?? 1;
  if (!Number.isFinite(timeScale) || timeScale <= 0)
    throw new RangeError(`timeScale must be > 0, got ${timeScale}`);
  const random = o.random ?? Math.random;
  const latency: Record<CaptchaType, LatencyDistribution> = { ...DEFAULT_LATENCY, ...o.latency };
  const abandonAfterMs = (o.abandonAfterMs ?? 300_000) * timeScale;
  const slowMs = (o.slowMs ?? 20_000) * timeScale;
  const taskIdAs = o.taskIdAs ?? 'mixed';
  const tokenLifetimeFloorMs = o.tokenLifetimeFloorMs ?? MIN_SCALED_TOKEN_LIFETIME_MS;
  checkCount('tokenLifetimeFloorMs', tokenLifetimeFloorMs);

  let threads = o.threads;
  let apiKey = o.apiKey;
  let keyRevoked = false;
  let planActive = true;
  let faults: FaultRates = checkFaults({ ...NO_FAULTS, ...o.faults });
  const injected: Record<InjectableEndpoint, InjectedReply[]> = { 'in.php': [], 'res.php': [] };
  const tasks = new Map<string, Task>();
  const tokens = new Map<string, IssuedToken>();
  const timers = new Set<NodeJS.Timeout>();
  let nextTaskId = 70_000_000_000 + randomInt(1_000_000_000);
  let idCount = 0;
  let inFlight = 0;
  /** Busy thread-time: `busy.ms` up to `busy.at`, plus inFlight × the time since. */
  const busy = { ms: 0, at: Date.now() };
  function busyNow(): number {
    const now = Date.now();
    busy.ms += inFlight * (now - busy.at);
    busy.at = now;
    return busy.ms;
  }
  let counters = freshCounters();

  function freshCounters() {
    busyNow();
    busy.ms = 0;
    return {
      maxInFlight: inFlight,
      submits: 0,
      submitsByPageurl: {} as Record<string, number>,
      submitTimesByPageurl: new Map<string, number[]>(),
      submitsByType: {} as Record<string, number>,
      polls: 0,
      errors: {} as Record<string, number>,
      zeroBalance: 0,
      solved: 0,
      requestsByKey: {} as Record<string, number>,
    };
  }

  function later(ms: number, fn: () => void): NodeJS.Timeout {
    const t = setTimeout(() => {
      timers.delete(t);
      fn();
    }, ms);
    timers.add(t);
    return t;
  }

  function release(task: Task): void {
    if (!task.holdsThread) return;
    task.holdsThread = false;
    busyNow();
    inFlight -= 1;
  }

  function finish(task: Task, state: 'solved' | 'unsolvable'): void {
    task.state = state;
    task.finishedAt = Date.now();
    release(task);
    if (state === 'unsolvable') return;
    const token = makeToken(task.type);
    task.token = token;
    counters.solved += 1;
    if (task.type !== 'image') {
      tokens.set(token, {
        sitekey: task.sitekey,
        pageurl: normalizeUrl(task.pageurl),
        expiresAt: Date.now() + scaledTokenLifetimeMs(task.type, timeScale, tokenLifetimeFloorMs),
        used: false,
      });
    }
  }

  function countError(code: string): void {
    counters.errors[code] = (counters.errors[code] ?? 0) + 1;
    if (code === 'ERROR_ZERO_BALANCE') counters.zeroBalance += 1;
  }

  /** Answers in CaptchaAI's two formats: JSON with json=1, plain text (`OK|…` / `ERROR_…`) without. */
  function answer(res: ServerResponse, p: Params, ok: boolean, request: string | number): void {
    if (!ok) countError(String(request));
    if (p.get('json') === '1') {
      send(res, 200, JSON.stringify({ status: ok ? 1 : 0, request }), 'application/json');
    } else {
      send(res, 200, ok ? `OK|${request}` : String(request), 'text/plain');
    }
  }

  /** Infrastructure faults shared by in.php and res.php get. Returns true when it answered. */
  async function infraFaults(req: IncomingMessage, res: ServerResponse, p: Params): Promise<boolean> {
    if (hit(faults.drop)) {
      countError('DROPPED');
      req.socket.destroy();
      return true;
    }
    if (hit(faults.slow)) {
      await delay(slowMs);
      if (req.socket.destroyed) return true;
    }
    if (hit(faults.html502)) {
      countError('HTML_502');
      send(res, 502, HTML_502, 'text/html');
      return true;
    }
    if (hit(faults.ipBanned)) {
      countError('IP_BANNED');
      send(res, 200, 'IP_BANNED', 'text/plain');
      return true;
    }
    if (hit(faults.http429)) {
      countError('HTTP_429');
      send(res, 429, HTML_429, 'text/html');
      return true;
    }
    if (hit(faults.tooManyRequests)) {
      answer(res, p, false, 'ERROR_TOO_MUCH_REQUESTS');
      return true;
    }
    if (hit(faults.plainTextError)) {
      countError('ERROR_SERVER_ERROR');
      send(res, 200, 'ERROR_SERVER_ERROR', 'text/plain');
      return true;
    }
    return false;
  }

  async function injectedReply(endpoint: InjectableEndpoint, req: IncomingMessage, res: ServerResponse) {
    const reply = injected[endpoint].shift();
    if (!reply) return false;
    if (reply.delayMs) await delay(reply.delayMs * timeScale);
    if (req.socket.destroyed) return true;
    if (reply.drop) {
      countError('DROPPED');
      req.socket.destroy();
      return true;
    }
    if (reply.hostile) {
      if (!HOSTILE_KINDS.includes(reply.hostile))
        throw new RangeError(`unknown hostile reply "${reply.hostile}"`);
      countError(`HOSTILE_${reply.hostile.toUpperCase()}`);
      await sendHostile(req, res, reply.hostile);
      return true;
    }
    const status = reply.status ?? 200;
    const body = reply.body ?? '';
    const code = status >= 500 ? `HTTP_${status}` : /(ERROR_[A-Z_]+|IP_BANNED)/.exec(body)?.[1];
    if (code) countError(code);
    send(res, status, body, reply.contentType ?? 'text/plain');
    return true;
  }

  function countKey(p: Params): void {
    const print = keyFingerprint(p.get('key') ?? '');
    counters.requestsByKey[print] = (counters.requestsByKey[print] ?? 0) + 1;
  }

  function keyError(p: Params): string | undefined {
    const key = p.get('key') ?? '';
    if (key === apiKey) return keyRevoked ? 'ERROR_KEY_DOES_NOT_EXIST' : undefined;
    return key.length === 32 ? 'ERROR_KEY_DOES_NOT_EXIST' : 'ERROR_WRONG_USER_KEY';
  }

  async function inPhp(req: IncomingMessage, res: ServerResponse, p: Params): Promise<void> {
    counters.submits += 1;
    const pageurl = p.get('pageurl');
    if (pageurl) {
      counters.submitsByPageurl[pageurl] = (counters.submitsByPageurl[pageurl] ?? 0) + 1;
      const times = counters.submitTimesByPageurl.get(pageurl);
      if (times) times.push(Date.now());
      else counters.submitTimesByPageurl.set(pageurl, [Date.now()]);
    }
    const parsed = parseTask(p);
    if ('type' in parsed)
      counters.submitsByType[parsed.type] = (counters.submitsByType[parsed.type] ?? 0) + 1;
    if (await injectedReply('in.php', req, res)) return;
    if (await infraFaults(req, res, p)) return;
    const badKey = keyError(p);
    if (badKey) return answer(res, p, false, badKey);
    if ('error' in parsed) return answer(res, p, false, parsed.error);
    if (!planActive || inFlight >= threads) return answer(res, p, false, 'ERROR_ZERO_BALANCE');

    const id = String(nextTaskId++);
    const task: Task = {
      id,
      type: parsed.type,
      sitekey: parsed.sitekey,
      pageurl: parsed.pageurl,
      state: 'pending',
      holdsThread: true,
    };
    tasks.set(id, task);
    busyNow();
    inFlight += 1;
    counters.maxInFlight = Math.max(counters.maxInFlight, inFlight);
    if (hit(faults.neverFinish)) {
      // No answer ever; CaptchaAI eventually gives the thread back and reports the task unsolvable.
      task.timer = later(abandonAfterMs, () => finish(task, 'unsolvable'));
    } else {
      const outcome = hit(faults.unsolvable) ? 'unsolvable' : 'solved';
      const { minMs, maxMs } = latency[parsed.type];
      task.timer = later((minMs + random() * Math.max(0, maxMs - minMs)) * timeScale, () =>
        finish(task, outcome),
      );
    }
    prune();
    idCount += 1;
    const asNumber = taskIdAs === 'number' || (taskIdAs === 'mixed' && idCount % 2 === 0);
    answer(res, p, true, asNumber ? Number(id) : id);
  }

  async function resPhp(req: IncomingMessage, res: ServerResponse, p: Params): Promise<void> {
    const action = p.get('action');
    if (action === 'threadsinfo') {
      const badKey = keyError(p);
      if (badKey) return answer(res, p, false, badKey);
      // CaptchaAI's shape: threads as a string, working_threads as a number.
      send(
        res,
        200,
        JSON.stringify({ threads: String(planActive ? threads : 0), working_threads: inFlight }),
        'application/json',
      );
      return;
    }
    if (action !== 'get') return answer(res, p, false, 'ERROR_BAD_PARAMETERS');
    counters.polls += 1;
    if (await injectedReply('res.php', req, res)) return;
    if (await infraFaults(req, res, p)) return;
    const badKey = keyError(p);
    if (badKey) return answer(res, p, false, badKey);
    const task = tasks.get(p.get('id') ?? '');
    if (!task) return answer(res, p, false, 'ERROR_WRONG_CAPTCHA_ID');
    if (task.state === 'pending') {
      if (p.get('json') === '1')
        send(res, 200, JSON.stringify({ status: 0, request: 'CAPCHA_NOT_READY' }), 'application/json');
      else send(res, 200, 'CAPCHA_NOT_READY', 'text/plain');
      return;
    }
    if (task.state === 'unsolvable') return answer(res, p, false, 'ERROR_CAPTCHA_UNSOLVABLE');
    answer(res, p, true, task.token ?? '');
  }

  function verify(body: unknown): { success: true } | { success: false; error: string } {
    const b = isRecord(body) ? body : {};
    const token = typeof b.token === 'string' ? b.token : '';
    const issued = tokens.get(token);
    if (!issued) return { success: false, error: 'TOKEN_UNKNOWN' };
    if (issued.used) return { success: false, error: 'TOKEN_USED' };
    // Verifiable once, like reCAPTCHA's siteverify: even a failed check consumes the token.
    issued.used = true;
    if (Date.now() > issued.expiresAt) return { success: false, error: 'TOKEN_EXPIRED' };
    if (b.sitekey !== issued.sitekey) return { success: false, error: 'SITEKEY_MISMATCH' };
    if (typeof b.pageurl !== 'string' || normalizeUrl(b.pageurl) !== issued.pageurl) {
      return { success: false, error: 'PAGEURL_MISMATCH' };
    }
    return { success: true };
  }

  function control(c: unknown): void {
    if (!isRecord(c)) throw new RangeError('control body must be a JSON object');
    if (c.threads !== undefined) handle.setThreads(c.threads as number);
    if (c.apiKey !== undefined) handle.setApiKey(c.apiKey as string);
    if (c.keyRevoked !== undefined) handle.setKeyRevoked(checkBool('keyRevoked', c.keyRevoked));
    if (c.planActive !== undefined) handle.setPlanActive(checkBool('planActive', c.planActive));
    if (c.faults !== undefined) {
      if (!isRecord(c.faults)) throw new RangeError('faults must be an object');
      handle.setFaults(c.faults as Partial<FaultRates>);
    }
    if (c.inject !== undefined) {
      if (!isRecord(c.inject)) throw new RangeError('inject must be an object');
      for (const endpoint of ['in.php', 'res.php'] as const) {
        const replies = c.inject[endpoint];
        if (replies === undefined) continue;
        if (!Array.isArray(replies)) throw new RangeError(`inject.${endpoint} must be an array`);
        handle.inject(endpoint, replies as InjectedReply[]);
      }
    }
  }

  function prune(): void {
    // Keep memory bounded in long benchmarks; answers stay readable for 10 minutes.
    if (tasks.size + tokens.size < 50_000) return;
    const cutoff = Date.now() - 600_000;
    for (const [id, t] of tasks) if (t.finishedAt !== undefined && t.finishedAt < cutoff) tasks.delete(id);
    for (const [token, t] of tokens) if (t.expiresAt < cutoff) tokens.delete(token);
  }

  function hit(rate: number): boolean {
    return rate > 0 && random() < rate;
  }

  function delay(ms: number): Promise<void> {
    return new Promise((resolve) => later(ms, resolve));
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://standin');
    const raw = await readBody(req);
    const path = url.pathname;
    if (path === '/in.php' || path === '/res.php') {
      const p = new URLSearchParams(url.search);
      const type = req.headers['content-type'] ?? '';
      if (raw !== '' && !type.includes('json')) for (const [k, v] of new URLSearchParams(raw)) p.set(k, v);
      if (raw !== '' && type.includes('json')) {
        const body: unknown = JSON.parse(raw);
        if (isRecord(body)) for (const [k, v] of Object.entries(body)) p.set(k, String(v));
      }
      countKey(p);
      if (path === '/in.php') await inPhp(req, res, p);
      else await resPhp(req, res, p);
      return;
    }
    if (path === '/stats' && req.method === 'GET') return sendJson(res, 200, handle.stats());
    if (path === '/stats/reset' && req.method === 'POST') {
      handle.resetStats();
      return sendJson(res, 200, handle.stats());
    }
    if (path === '/control' && req.method === 'POST') {
      try {
        control(raw === '' ? {} : JSON.parse(raw));
      } catch (err) {
        return sendJson(res, 400, { error: err instanceof Error ? err.message : String(err) });
      }
      return sendJson(res, 200, handle.stats());
    }
    if (path === '/verify' && req.method === 'POST') {
      let body: unknown;
      try {
        body = JSON.parse(raw);
      } catch {
        return sendJson(res, 400, { success: false, error: 'BAD_REQUEST' });
      }
      return sendJson(res, 200, verify(body));
    }
    if (path === '/health') return sendJson(res, 200, { ok: true });
    sendJson(res, 404, { error: `no route ${req.method} ${path}` });
  }

  const server = createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      if (!res.headersSent && !req.socket.destroyed) {
        sendJson(res, 400, { error: err instanceof Error ? err.message : String(err) });
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, o.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  // Bound to every interface: callers on this machine reach it over loopback.
  const reachable =
    address.address === '0.0.0.0' ? '127.0.0.1' : address.address === '::' ? '::1' : address.address;
  const host = reachable.includes(':') ? `[${reachable}]` : reachable;

  const handle: CaptchaStandin = {
    url: `http://${host}:${address.port}`,
    port: address.port,
    setThreads(n) {
      threads = checkCount('threads', n);
    },
    setKeyRevoked(v) {
      keyRevoked = v;
    },
    setApiKey(key) {
      if (typeof key !== 'string' || !/^\S{32}$/.test(key)) {
        throw new RangeError('apiKey must be 32 characters without spaces');
      }
      apiKey = key;
      keyRevoked = false;
    },
    setPlanActive(v) {
      planActive = v;
    },
    setFaults(f) {
      faults = checkFaults({ ...faults, ...f });
    },
    inject(endpoint, replies) {
      injected[endpoint].push(...replies);
    },
    stats() {
      return {
        threads,
        inFlight,
        maxInFlight: counters.maxInFlight,
        submits: counters.submits,
        submitsByPageurl: { ...counters.submitsByPageurl },
        submitsByType: { ...counters.submitsByType },
        polls: counters.polls,
        errors: { ...counters.errors },
        zeroBalance: counters.zeroBalance,
        solved: counters.solved,
        busyThreadMs: busyNow(),
        keyRevoked,
        planActive,
        requestsByKey: { ...counters.requestsByKey },
      };
    },
    submitTimes(pageurl) {
      return [...(counters.submitTimesByPageurl.get(pageurl) ?? [])];
    },
    resetStats() {
      counters = freshCounters();
    },
    async close() {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
  return handle;
}
