import { createHash, randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CaptchaType } from '../../../functions/captchaai/types.js';
import type { FaultRates } from './types.js';

/** The CaptchaAI stand-in's request helpers: parsing tasks and control input, tokens, replies. */

type Params = URLSearchParams;

export const MAX_IMAGE_BYTES = 600 * 1024;

export const MAX_BODY_BYTES = 20 * 1024 * 1024;

export const NO_FAULTS: FaultRates = {
  unsolvable: 0,
  html502: 0,
  plainTextError: 0,
  slow: 0,
  drop: 0,
  neverFinish: 0,
  ipBanned: 0,
  http429: 0,
  tooManyRequests: 0,
};

/** A short, one-way name for a key in the stand-in's stats (the key itself is never reported). */
export function keyFingerprint(key: string): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 12);
}

/** Reads the in.php parameters into a task, or the error CaptchaAI would answer. */
export function parseTask(
  p: Params,
): { type: CaptchaType; sitekey: string; pageurl: string } | { error: string } {
  const method = p.get('method');
  if (method === 'base64') {
    const body = p.get('body') ?? '';
    if (body === '' || !/^[A-Za-z0-9+/=\s]+$/.test(body)) return { error: 'ERROR_ZERO_CAPTCHA_FILESIZE' };
    if (Buffer.byteLength(body) * 0.75 > MAX_IMAGE_BYTES) return { error: 'ERROR_TOO_BIG_CAPTCHA_FILESIZE' };
    return { type: 'image', sitekey: '', pageurl: '' };
  }
  if (method !== 'userrecaptcha' && method !== 'turnstile') return { error: 'ERROR_BAD_PARAMETERS' };
  const sitekey = (method === 'turnstile' ? p.get('sitekey') : p.get('googlekey')) ?? '';
  if (sitekey.trim() === '')
    return { error: method === 'turnstile' ? 'ERROR_BAD_PARAMETERS' : 'ERROR_GOOGLEKEY' };
  const pageurl = p.get('pageurl') ?? '';
  if (!/^https?:\/\/[^\s/]+/i.test(pageurl)) return { error: 'ERROR_PAGEURL' };
  const minScore = p.get('min_score');
  if (minScore !== null && !(Number(minScore) >= 0.1 && Number(minScore) <= 0.9)) {
    return { error: 'ERROR_BAD_PARAMETERS' };
  }
  if (method === 'turnstile') return { type: 'turnstile', sitekey, pageurl };
  if (p.get('enterprise') === '1') return { type: 'recaptcha_enterprise', sitekey, pageurl };
  if (p.get('version') === 'v3') return { type: 'recaptcha_v3', sitekey, pageurl };
  return { type: 'recaptcha_v2', sitekey, pageurl };
}

export function makeToken(type: CaptchaType): string {
  if (type === 'image') return randomBytes(4).toString('hex');
  if (type === 'turnstile') return `0.${randomBytes(240).toString('base64url')}`;
  return `03A${randomBytes(384).toString('base64url')}`;
}

export function normalizeUrl(u: string): string {
  try {
    return new URL(u).href;
  } catch {
    return u;
  }
}

export function send(res: ServerResponse, status: number, body: string, contentType: string): void {
  res.writeHead(status, {
    'content-type': `${contentType}; charset=utf-8`,
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

/** Answers in CaptchaAI's two formats: JSON with json=1, plain text (`OK|…` / `ERROR_…`) without. */
export function sendAnswer(res: ServerResponse, p: Params, ok: boolean, request: string | number): void {
  if (p.get('json') === '1') {
    send(res, 200, JSON.stringify({ status: ok ? 1 : 0, request }), 'application/json');
  } else {
    send(res, 200, ok ? `OK|${request}` : String(request), 'text/plain');
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, JSON.stringify(body), 'application/json');
}

export async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new RangeError('request body too large');
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function checkCount(name: string, n: unknown): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) {
    throw new RangeError(`${name} must be an integer >= 0, got ${String(n)}`);
  }
  return n;
}

export function checkBool(name: string, v: unknown): boolean {
  if (typeof v !== 'boolean') throw new RangeError(`${name} must be true or false`);
  return v;
}

export function checkFaults(f: FaultRates): FaultRates {
  for (const [name, rate] of Object.entries(f)) {
    if (!(name in NO_FAULTS)) throw new RangeError(`unknown fault "${name}"`);
    if (typeof rate !== 'number' || !(rate >= 0 && rate <= 1)) {
      throw new RangeError(`fault rate ${name} must be between 0 and 1, got ${String(rate)}`);
    }
  }
  return f;
}
