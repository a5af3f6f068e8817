import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CaptchaApi } from './api.js';
import { applyControl, type StandinControl } from './control.js';
import { isRecord, readBody, sendJson } from './http.js';
import type { VerifyResult } from './model.js';

/**
 * The stand-in's request router (like a moto `urls` module): CaptchaAI's endpoints `/in.php` and
 * `/res.php` (form-encoded bodies, JSON bodies or query parameters) go to the API; `/stats`,
 * `/stats/reset`, `/control` and `/events` (the wire log) to the control API; `/verify` to the model's token check;
 * `/health` answers itself. A route's handler throwing answers 400 with its message.
 */

export interface RouterParts {
  api: CaptchaApi;
  control: StandinControl;
  verify(body: unknown): VerifyResult;
  /** Counts a CaptchaAI request under its key (in.php and res.php, whatever their answer). */
  countKey(key: string): void;
}

/** in.php / res.php parameters: the query string, overlaid with a form or JSON body. */
function captchaParams(req: IncomingMessage, url: URL, raw: string): URLSearchParams {
  const p = new URLSearchParams(url.search);
  const type = req.headers['content-type'] ?? '';
  if (raw !== '' && !type.includes('json')) for (const [k, v] of new URLSearchParams(raw)) p.set(k, v);
  if (raw !== '' && type.includes('json')) {
    const body: unknown = JSON.parse(raw);
    if (isRecord(body)) for (const [k, v] of Object.entries(body)) p.set(k, String(v));
  }
  return p;
}

function controlRoute(parts: RouterParts, res: ServerResponse, raw: string): void {
  try {
    applyControl(parts.control, raw === '' ? {} : JSON.parse(raw));
  } catch (err) {
    sendJson(res, 400, { error: err instanceof Error ? err.message : String(err) });
    return;
  }
  sendJson(res, 200, parts.control.stats());
}

function verifyRoute(parts: RouterParts, res: ServerResponse, raw: string): void {
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch {
    sendJson(res, 400, { success: false, error: 'BAD_REQUEST' });
    return;
  }
  sendJson(res, 200, parts.verify(body));
}

export async function route(parts: RouterParts, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://standin');
  const raw = await readBody(req);
  const path = url.pathname;
  if (path === '/in.php' || path === '/res.php') {
    const p = captchaParams(req, url, raw);
    parts.countKey(p.get('key') ?? '');
    if (path === '/in.php') await parts.api.inPhp(req, res, p);
    else await parts.api.resPhp(req, res, p);
    return;
  }
  if (path === '/stats' && req.method === 'GET') return sendJson(res, 200, parts.control.stats());
  if (path === '/stats/reset' && req.method === 'POST') {
    parts.control.resetStats();
    return sendJson(res, 200, parts.control.stats());
  }
  if (path === '/control' && req.method === 'POST') return controlRoute(parts, res, raw);
  if (path === '/events' && req.method === 'GET')
    return sendJson(res, 200, parts.control.events(Number(url.searchParams.get('since')) || 0));
  if (path === '/verify' && req.method === 'POST') return verifyRoute(parts, res, raw);
  if (path === '/health') return sendJson(res, 200, { ok: true });
  sendJson(res, 404, { error: `no route ${req.method} ${path}` });
}

/** The server's request listener: routes, and answers 400 for an error no route answered. */
export function listener(parts: RouterParts) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    route(parts, req, res).catch((err: unknown) => {
      if (!res.headersSent && !req.socket.destroyed) {
        sendJson(res, 400, { error: err instanceof Error ? err.message : String(err) });
      }
    });
  };
}
