import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type CaptchaStandin,
  type StandinOptions,
  startCaptchaStandin,
} from '../../../../local/standins/captchaai/standin.js';

const KEY = 'fedcba9876543210fedcba9876543210';
const PAGE = 'https://staging.example.com/form';
const INSTANT = { minMs: 0, maxMs: 0 };
const V2 = { method: 'userrecaptcha', googlekey: 'site-key', pageurl: PAGE };

const standins: CaptchaStandin[] = [];
afterEach(async () => {
  await Promise.all(standins.splice(0).map((s) => s.close()));
});

async function standin(o: Partial<StandinOptions> = {}): Promise<CaptchaStandin> {
  const s = await startCaptchaStandin({
    threads: 2,
    apiKey: KEY,
    latency: {
      recaptcha_v2: INSTANT,
      recaptcha_v3: INSTANT,
      recaptcha_enterprise: INSTANT,
      turnstile: INSTANT,
    },
    ...o,
  });
  standins.push(s);
  return s;
}

/** A form-encoded POST (the client's way), or a GET with query parameters when `query` is set. */
async function call(
  s: CaptchaStandin,
  path: string,
  params: Record<string, string>,
  o: { query?: boolean } = {},
) {
  const search = new URLSearchParams({ key: KEY, ...params });
  const res = o.query
    ? await fetch(`${s.url}/${path}?${search}`)
    : await fetch(`${s.url}/${path}`, { method: 'POST', body: search });
  return { status: res.status, type: res.headers.get('content-type') ?? '', text: await res.text() };
}

async function submit(s: CaptchaStandin, params: Record<string, string> = V2): Promise<string> {
  const r = await call(s, 'in.php', { ...params, json: '1' });
  const body = JSON.parse(r.text) as { status: number; request: string | number };
  expect(body.status).toBe(1);
  return String(body.request);
}

/** Polls res.php until the task leaves CAPCHA_NOT_READY; returns the final JSON answer. */
async function result(s: CaptchaStandin, id: string): Promise<{ status: number; request: string }> {
  for (let i = 0; i < 1_000; i += 1) {
    const r = await call(s, 'res.php', { action: 'get', id, json: '1' });
    const body = JSON.parse(r.text) as { status: number; request: string };
    if (body.request !== 'CAPCHA_NOT_READY') return body;
    await sleep(5);
  }
  throw new Error(`task ${id} never finished`);
}

async function verify(s: CaptchaStandin, body: Record<string, unknown>) {
  const res = await fetch(`${s.url}/verify`, { method: 'POST', body: JSON.stringify(body) });
  return (await res.json()) as { success: boolean; error?: string };
}

describe('CaptchaAI stand-in: protocol', () => {
  it('speaks plain text (OK|…) to query-parameter requests without json=1', async () => {
    // Prepare
    const s = await standin();

    // Act
    const submitted = await call(s, 'in.php', V2, { query: true });
    const id = submitted.text.slice(3);
    await result(s, id);
    const answered = await call(s, 'res.php', { action: 'get', id }, { query: true });

    // Assess
    expect(submitted.text).toMatch(/^OK\|\d+$/);
    expect(answered.text).toMatch(/^OK\|03A/);
  });

  it('speaks JSON to form-encoded requests with json=1, and says CAPCHA_NOT_READY while solving', async () => {
    // Prepare
    const s = await standin({ latency: { recaptcha_v2: { minMs: 1_500, maxMs: 1_500 } } });

    // Act
    const id = await submit(s);
    const pending = await call(s, 'res.php', { action: 'get', id, json: '1' });
    const done = await result(s, id);

    // Assess
    expect(JSON.parse(pending.text)).toEqual({ status: 0, request: 'CAPCHA_NOT_READY' });
    expect(done.status).toBe(1);
    expect(done.request.length).toBeGreaterThan(100);
  });

  it.each<{ params: Record<string, string>; type: string }>([
    { params: { method: 'userrecaptcha', googlekey: 'k', pageurl: PAGE }, type: 'recaptcha_v2' },
    {
      params: {
        method: 'userrecaptcha',
        version: 'v3',
        googlekey: 'k',
        pageurl: PAGE,
        action: 'a',
        min_score: '0.3',
      },
      type: 'recaptcha_v3',
    },
    {
      params: { method: 'userrecaptcha', enterprise: '1', googlekey: 'k', pageurl: PAGE },
      type: 'recaptcha_enterprise',
    },
    { params: { method: 'turnstile', sitekey: 'k', pageurl: PAGE }, type: 'turnstile' },
    { params: { method: 'base64', body: Buffer.from('png').toString('base64') }, type: 'image' },
  ])('recognizes a $type task from its in.php parameters', async ({ params, type }) => {
    // Prepare
    const s = await standin();

    // Act
    await submit(s, params);

    // Assess
    expect(s.stats().submitsByType).toEqual({ [type]: 1 });
  });

  it.each<{ params: Record<string, string>; code: string }>([
    { params: { method: 'userrecaptcha', pageurl: PAGE }, code: 'ERROR_GOOGLEKEY' },
    { params: { method: 'userrecaptcha', googlekey: 'k', pageurl: 'nope' }, code: 'ERROR_PAGEURL' },
    { params: { method: 'nonsense' }, code: 'ERROR_BAD_PARAMETERS' },
    { params: { method: 'base64', body: '' }, code: 'ERROR_ZERO_CAPTCHA_FILESIZE' },
  ])('answers $code to a malformed task', async ({ params, code }) => {
    // Prepare
    const s = await standin();

    // Act
    const r = await call(s, 'in.php', { ...params, json: '1' });

    // Assess
    expect(JSON.parse(r.text)).toEqual({ status: 0, request: code });
    expect(s.stats().inFlight).toBe(0);
  });

  it('accepts the configured key, calls another 32-character key nonexistent and other lengths wrong', async () => {
    // Prepare
    const s = await standin();

    // Act
    const good = await call(s, 'in.php', V2);
    const unknown = await call(s, 'in.php', { ...V2, key: '0'.repeat(32) });
    const wrong = await call(s, 'in.php', { ...V2, key: 'abc' });

    // Assess
    expect(good.text).toMatch(/^OK\|/);
    expect(unknown.text).toBe('ERROR_KEY_DOES_NOT_EXIST');
    expect(wrong.text).toBe('ERROR_WRONG_USER_KEY');
    expect(s.stats().submits).toBe(3);
  });
});

describe('CaptchaAI stand-in: the plan', () => {
  it('a task holds a thread until solved; a submit beyond the plan threads gets ERROR_ZERO_BALANCE', async () => {
    // Prepare
    const s = await standin({ threads: 1, latency: { recaptcha_v2: { minMs: 1_500, maxMs: 1_500 } } });
    const first = await submit(s);

    // Act
    const refused = await call(s, 'in.php', { ...V2, json: '1' });
    await result(s, first);
    const accepted = await call(s, 'in.php', { ...V2, json: '1' });

    // Assess
    expect(JSON.parse(refused.text)).toEqual({ status: 0, request: 'ERROR_ZERO_BALANCE' });
    expect(JSON.parse(accepted.text)).toMatchObject({ status: 1 });
    expect(s.stats()).toMatchObject({ maxInFlight: 1, zeroBalance: 1, submits: 3, solved: 1 });
    expect(s.stats().submitsByPageurl).toEqual({ [PAGE]: 3 });
  });

  it('an UNSOLVABLE task gives its thread back', async () => {
    // Prepare
    const s = await standin({ threads: 1, faults: { unsolvable: 1 } });
    const id = await submit(s);

    // Act
    const answer = await result(s, id);

    // Assess
    expect(answer).toEqual({ status: 0, request: 'ERROR_CAPTCHA_UNSOLVABLE' });
    expect(s.stats().inFlight).toBe(0);
  });

  it('a never-finishing task holds its thread until abandonAfterMs, then reads as unsolvable', async () => {
    // Prepare
    const s = await standin({ threads: 1, faults: { neverFinish: 1 }, abandonAfterMs: 1_500 });
    const id = await submit(s);

    // Act
    const heldWhilePending = s.stats().inFlight;
    const answer = await result(s, id);

    // Assess
    expect(heldWhilePending).toBe(1);
    expect(answer.request).toBe('ERROR_CAPTCHA_UNSOLVABLE');
    expect(s.stats().inFlight).toBe(0);
  });

  it('follows thread changes made while running', async () => {
    // Prepare
    const s = await standin({ threads: 1 });

    // Act
    s.setThreads(0);
    const refused = await call(s, 'in.php', V2);
    s.setThreads(3);
    const accepted = await call(s, 'in.php', V2);

    // Assess
    expect(refused.text).toBe('ERROR_ZERO_BALANCE');
    expect(accepted.text).toMatch(/^OK\|/);
  });

  it('solves with the latency distribution set over POST /control, for tasks submitted after it', async () => {
    // Prepare: reCAPTCHA v2 instant at start.
    const s = await standin({ threads: 4 });
    const before = await submit(s);
    expect((await result(s, before)).status).toBe(1);

    // Act: a lognormal of median 400 ms, then a bad one.
    const set = await fetch(`${s.url}/control`, {
      method: 'POST',
      body: JSON.stringify({ latency: { recaptcha_v2: { kind: 'lognormal', medianMs: 400, sigma: 0.01 } } }),
    });
    const bad = await fetch(`${s.url}/control`, {
      method: 'POST',
      body: JSON.stringify({ latency: { recaptcha_v2: { kind: 'lognormal', medianMs: -1, sigma: 0.4 } } }),
    });
    const id = await submit(s);
    const early = await call(s, 'res.php', { action: 'get', id, json: '1' });
    await sleep(600);
    const late = await call(s, 'res.php', { action: 'get', id, json: '1' });

    // Assess
    expect(set.status).toBe(200);
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('latency.recaptcha_v2');
    expect(s.latency().recaptcha_v2).toEqual({ kind: 'lognormal', medianMs: 400, sigma: 0.01 });
    expect(JSON.parse(early.text).request).toBe('CAPCHA_NOT_READY');
    expect(JSON.parse(late.text).status).toBe(1);
  });

  it('reports threadsinfo like CaptchaAI: threads as a string, working threads as a number', async () => {
    // Prepare
    const s = await standin({ threads: 3, faults: { neverFinish: 1 } });
    await submit(s);

    // Act
    const r = await call(s, 'res.php', { action: 'threadsinfo' });

    // Assess
    expect(JSON.parse(r.text)).toEqual({ threads: '3', working_threads: 1 });
  });

  it('a dropped plan reports no plan threads and refuses every submit with ERROR_ZERO_BALANCE', async () => {
    // Prepare
    const s = await standin({ threads: 3 });

    // Act
    s.setPlanActive(false);
    const info = await call(s, 'res.php', { action: 'threadsinfo' });
    const refused = await call(s, 'in.php', V2);

    // Assess
    expect(JSON.parse(info.text)).toEqual({ threads: '0', working_threads: 0 });
    expect(refused.text).toBe('ERROR_ZERO_BALANCE');
    expect(s.stats()).toMatchObject({ planActive: false, zeroBalance: 1, inFlight: 0 });
  });

  it('a revoked key answers ERROR_KEY_DOES_NOT_EXIST on in.php, res.php and threadsinfo', async () => {
    // Prepare
    const s = await standin();
    const id = await submit(s);

    // Act
    s.setKeyRevoked(true);
    const answers = await Promise.all([
      call(s, 'in.php', V2),
      call(s, 'res.php', { action: 'get', id }),
      call(s, 'res.php', { action: 'threadsinfo' }),
    ]);

    // Assess
    expect(answers.map((a) => a.text)).toEqual(Array(3).fill('ERROR_KEY_DOES_NOT_EXIST'));
    expect(s.stats().keyRevoked).toBe(true);
  });
});

describe('CaptchaAI stand-in: faults', () => {
  it('an HTML 502 fault answers a 502 HTML page', async () => {
    // Prepare
    const s = await standin({ faults: { html502: 1 } });

    // Act
    const r = await call(s, 'in.php', { ...V2, json: '1' });

    // Assess
    expect(r.status).toBe(502);
    expect(r.text).toContain('<html>');
    expect(s.stats().errors).toEqual({ HTML_502: 1 });
  });

  it.each([
    { fault: 'plainTextError', body: 'ERROR_SERVER_ERROR' },
    { fault: 'ipBanned', body: 'IP_BANNED' },
  ])('a $fault fault answers plain text despite json=1', async ({ fault, body }) => {
    // Prepare
    const s = await standin({ faults: { [fault]: 1 } });

    // Act
    const r = await call(s, 'in.php', { ...V2, json: '1' });

    // Assess
    expect(r.text).toBe(body);
    expect(r.type).toMatch(/^text\/plain/);
    expect(s.stats().errors).toEqual({ [body]: 1 });
  });

  it('a drop fault closes the connection without an answer', async () => {
    // Prepare
    const s = await standin({ faults: { drop: 1 } });

    // Act
    const outcome = await call(s, 'in.php', V2).then(
      () => 'answered',
      () => 'dropped',
    );

    // Assess
    expect(outcome).toBe('dropped');
    expect(s.stats().errors).toEqual({ DROPPED: 1 });
  });

  it('a slow answer the caller gave up on creates no task', async () => {
    // Prepare
    const s = await standin({ faults: { slow: 1 }, slowMs: 300 });
    const abort = new AbortController();
    const request = fetch(`${s.url}/in.php`, {
      method: 'POST',
      body: new URLSearchParams({ key: KEY, ...V2 }),
      signal: abort.signal,
    }).then(
      () => 'answered',
      () => 'gave up',
    );
    while (s.stats().submits === 0) await sleep(5);

    // Act: give up while the stand-in is still holding the answer back, then outwait it.
    abort.abort();
    const outcome = await request;
    await sleep(500);

    // Assess
    expect(outcome).toBe('gave up');
    expect(s.stats()).toMatchObject({ submits: 1, inFlight: 0, maxInFlight: 0 });
  });

  it('a slow answer still arrives when the caller waits', async () => {
    // Prepare
    const s = await standin({ faults: { slow: 1 }, slowMs: 50 });

    // Act
    const r = await call(s, 'in.php', V2);

    // Assess
    expect(r.text).toMatch(/^OK\|/);
  });
});

describe('CaptchaAI stand-in: tokens', () => {
  async function solveToken(s: CaptchaStandin, params: Record<string, string> = V2): Promise<string> {
    const answer = await result(s, await submit(s, params));
    expect(answer.status).toBe(1);
    return answer.request;
  }

  it('issues unique tokens that verify once for their own sitekey and pageurl', async () => {
    // Prepare
    const s = await standin({ threads: 5 });
    const tokens = await Promise.all(Array.from({ length: 5 }, () => solveToken(s)));

    // Act
    const first = await verify(s, { token: tokens[0], sitekey: 'site-key', pageurl: PAGE });
    const again = await verify(s, { token: tokens[0], sitekey: 'site-key', pageurl: PAGE });
    const otherSite = await verify(s, { token: tokens[1], sitekey: 'another-key', pageurl: PAGE });
    const otherPage = await verify(s, {
      token: tokens[2],
      sitekey: 'site-key',
      pageurl: 'https://elsewhere.example/',
    });
    const unknown = await verify(s, { token: 'made-up', sitekey: 'site-key', pageurl: PAGE });

    // Assess
    expect(new Set(tokens).size).toBe(5);
    expect(first).toEqual({ success: true });
    expect(again).toEqual({ success: false, error: 'TOKEN_USED' });
    expect(otherSite).toEqual({ success: false, error: 'SITEKEY_MISMATCH' });
    expect(otherPage).toEqual({ success: false, error: 'PAGEURL_MISMATCH' });
    expect(unknown).toEqual({ success: false, error: 'TOKEN_UNKNOWN' });
  });

  it("expires a token after its type's lifetime times the time scale when the floor is 0", async () => {
    // Prepare: 120 s × 0.0002 = 24 ms of reCAPTCHA token lifetime.
    const s = await standin({ timeScale: 0.0002, tokenLifetimeFloorMs: 0 });
    const token = await solveToken(s);
    await sleep(100);

    // Act
    const late = await verify(s, { token, sitekey: 'site-key', pageurl: PAGE });

    // Assess
    expect(late).toEqual({ success: false, error: 'TOKEN_EXPIRED' });
  });

  it('keeps a Turnstile token valid longer than a reCAPTCHA token at the same time scale', async () => {
    // Prepare: reCAPTCHA lives 120 s × 0.005 = 600 ms, Turnstile 1500 ms.
    const s = await standin({ timeScale: 0.005, tokenLifetimeFloorMs: 0 });
    const [recaptcha, turnstile] = await Promise.all([
      solveToken(s),
      solveToken(s, { method: 'turnstile', sitekey: 'ts-key', pageurl: PAGE }),
    ]);
    await sleep(900);

    // Act
    const r = await verify(s, { token: recaptcha, sitekey: 'site-key', pageurl: PAGE });
    const t = await verify(s, { token: turnstile, sitekey: 'ts-key', pageurl: PAGE });

    // Assess
    expect(r).toEqual({ success: false, error: 'TOKEN_EXPIRED' });
    expect(t).toEqual({ success: true });
  });

  it('keeps a token valid for the real-time floor however small the time scale', async () => {
    // Prepare: 120 s × 0.0002 = 24 ms scaled, but the floor is 2 s of real time.
    const s = await standin({ timeScale: 0.0002, tokenLifetimeFloorMs: 2_000 });
    const [kept, expired] = [await solveToken(s), await solveToken(s)];
    await sleep(100);

    // Act
    const early = await verify(s, { token: kept, sitekey: 'site-key', pageurl: PAGE });
    await sleep(2_100);
    const late = await verify(s, { token: expired, sitekey: 'site-key', pageurl: PAGE });

    // Assess
    expect(early).toEqual({ success: true });
    expect(late).toEqual({ success: false, error: 'TOKEN_EXPIRED' });
  });
});

describe('CaptchaAI stand-in: HTTP control for other processes', () => {
  it('POST /control changes the plan and faults, GET /stats reports, POST /stats/reset clears', async () => {
    // Prepare
    const s = await standin({ threads: 2 });
    const control = (body: unknown) =>
      fetch(`${s.url}/control`, { method: 'POST', body: JSON.stringify(body) });

    // Act
    const changed = await control({ threads: 0, faults: { unsolvable: 0.5 } });
    await call(s, 'in.php', V2);
    const stats = await (await fetch(`${s.url}/stats`)).json();
    const reset = await (await fetch(`${s.url}/stats/reset`, { method: 'POST' })).json();
    const rejected = await control({ threads: -1 });

    // Assess
    expect(changed.status).toBe(200);
    expect(stats).toMatchObject({
      threads: 0,
      submits: 1,
      zeroBalance: 1,
      errors: { ERROR_ZERO_BALANCE: 1 },
    });
    expect(reset).toMatchObject({ submits: 0, zeroBalance: 0, errors: {} });
    expect(rejected.status).toBe(400);
    expect(s.stats().threads).toBe(0);
  });

  it('POST /control can revoke the key, drop the plan and queue canned answers', async () => {
    // Prepare
    const s = await standin();
    const control = (body: unknown) =>
      fetch(`${s.url}/control`, { method: 'POST', body: JSON.stringify(body) });

    // Act
    await control({ inject: { 'in.php': [{ body: 'ERROR_BAD_TOKEN_OR_PAGEURL' }] } });
    const canned = await call(s, 'in.php', V2);
    await control({ keyRevoked: true, planActive: false });

    // Assess
    expect(canned.text).toBe('ERROR_BAD_TOKEN_OR_PAGEURL');
    expect(s.stats()).toMatchObject({ keyRevoked: true, planActive: false });
  });
});
