import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { MIN_SCALED_TOKEN_LIFETIME_MS } from '../../../functions/captchaai/timings.js';
import type { CaptchaType } from '../../../functions/captchaai/types.js';
import { CaptchaApi } from './api.js';
import { createControl } from './control.js';
import { Faults } from './faults.js';
import { checkCount } from './http.js';
import { checkLatency } from './latency.js';
import { StandinModel } from './model.js';
import { listener } from './router.js';
import { Timers } from './timers.js';
import { type CaptchaStandin, DEFAULT_LATENCY, type StandinOptions } from './types.js';
import { lostAnswers } from './wire.js';

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
 * `POST /control`, `GET /events` (the wire log), `POST /verify` (single-use token check for a
 * target site), `GET /health`.
 *
 * This folder is the stand-in's parts, each importing only those below it:
 * standin.ts (this file: options, server, handle) → router.ts (paths) → api.ts (in.php,
 * res.php) and control.ts (the control API) → faults.ts (injected faults), wire.ts (the wire log,
 * lost in.php answers), latency.ts (solve times), model.ts (plan, tasks, tokens, counters) → timers.ts, http.ts (wire helpers),
 * types.ts (the contract). It may import functions/captchaai/ (CaptchaAI's types and timings)
 * and ../hostile-reply.ts.
 */
/**
 * How long after its in.php a task that never finishes keeps its thread at the stand-in (ms at
 * time scale 1), unless a test sets `abandonAfterMs`. CaptchaAI publishes no such figure (it has
 * no cancel call, and a task given up on "may still hold a thread for a while"); the local stack
 * sets its own (local/stack/local-stack.ts LOCAL_ABANDON_AFTER_MS).
 */
export const ABANDON_AFTER_MS = 300_000;

export async function startCaptchaStandin(o: StandinOptions): Promise<CaptchaStandin> {
  checkCount('threads', o.threads);
  if (typeof o.apiKey !== 'string' || o.apiKey === '') throw new RangeError('apiKey is required');
  const timeScale = o.timeScale ?? 1;
  if (!Number.isFinite(timeScale) || timeScale <= 0)
    throw new RangeError(`timeScale must be > 0, got ${timeScale}`);
  const random = o.random ?? Math.random;
  const tokenLifetimeFloorMs = o.tokenLifetimeFloorMs ?? MIN_SCALED_TOKEN_LIFETIME_MS;
  checkCount('tokenLifetimeFloorMs', tokenLifetimeFloorMs);

  const timers = new Timers();
  const model = new StandinModel(
    { threads: o.threads, apiKey: o.apiKey, timeScale, tokenLifetimeFloorMs },
    timers,
  );
  const faults = new Faults({
    faults: o.faults,
    random,
    timers,
    timeScale,
    slowMs: (o.slowMs ?? 20_000) * timeScale,
    countError: (code) => model.countError(code),
  });
  const lost = lostAnswers(timeScale, (ms) => timers.delay(ms), o.lostAnswers);
  // One record of distributions, shared by the API and the control (setLatency changes it in place).
  const latency = { ...DEFAULT_LATENCY };
  for (const [type, d] of Object.entries(o.latency ?? {})) {
    latency[type as CaptchaType] = checkLatency(`latency.${type}`, d);
  }
  const api = new CaptchaApi({
    model,
    faults,
    lost,
    random,
    timeScale,
    latency,
    abandonAfterMs: (o.abandonAfterMs ?? ABANDON_AFTER_MS) * timeScale,
    taskIdAs: o.taskIdAs ?? 'mixed',
  });
  const control = createControl(model, faults, lost, latency);
  const server = createServer(
    listener({ api, control, verify: (body) => model.verify(body), countKey: (key) => model.countKey(key) }),
  );
  const { url, port } = await listen(server, o.port ?? 0, o.host ?? '127.0.0.1');
  return {
    url,
    port,
    ...control,
    async close() {
      timers.clear();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}

async function listen(server: Server, port: number, bind: string): Promise<{ url: string; port: number }> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, bind, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  // Bound to every interface: callers on this machine reach it over loopback.
  const reachable =
    address.address === '0.0.0.0' ? '127.0.0.1' : address.address === '::' ? '::1' : address.address;
  const host = reachable.includes(':') ? `[${reachable}]` : reachable;
  return { url: `http://${host}:${address.port}`, port: address.port };
}
