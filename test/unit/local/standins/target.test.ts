import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { CaptchaStandin } from '../../../../local/standins/captchaai/standin.js';
import {
  FORM_PAGE_SENTINEL,
  FORM_PAGE_TEXTS,
  startTargetStandin,
  type TargetStandin,
} from '../../../../local/standins/target.js';
import { startFastCaptchaStandin, testClient } from '../../../fixtures/solve.js';

let captcha: CaptchaStandin;
let target: TargetStandin;

beforeAll(async () => {
  captcha = await startFastCaptchaStandin();
  target = await startTargetStandin({ captchaUrl: captcha.url });
});
afterAll(async () => {
  await target?.close();
  await captcha?.close();
});
beforeEach(() => target.resetStats());

/** Loads a page like a browser and returns its session cookie. */
async function loadPage(path: string): Promise<{ cookie: string; html: string; status: number }> {
  const res = await fetch(`${target.url}${path}`);
  const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  return { cookie, html: await res.text(), status: res.status };
}

async function post(path: string, cookie: string, fields: Record<string, string>): Promise<number> {
  const res = await fetch(`${target.url}${path}`, {
    method: 'POST',
    headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(fields),
  });
  await res.text();
  return res.status;
}

async function tokenFor(path: string): Promise<string> {
  const solved = await testClient(captcha).solve({
    type: 'recaptcha_v2',
    sitekey: target.sitekey,
    pageurl: `${target.url}${path}`,
  });
  return solved.token;
}

describe('target stand-in', () => {
  it('serves any path as a page with a session cookie and a widget carrying the sitekey', async () => {
    const page = await loadPage('/form/rec-1');
    expect(page.status).toBe(200);
    expect(page.cookie).toMatch(/^tg_session=[0-9a-f]{32}$/);
    expect(page.html).toContain(`class="g-recaptcha" data-sitekey="${target.sitekey}"`);
    const turnstile = await loadPage('/form/rec-2?widget=turnstile');
    expect(turnstile.html).toContain('class="cf-turnstile"');
  });

  it('pads a page by ?pad=<bytes> (the large pages of bench runs), the form unchanged', async () => {
    const plain = await loadPage('/form/rec-pad');
    const padded = await loadPage('/form/rec-pad?pad=100000');
    expect(padded.html.length - plain.html.length).toBe(100_000 + '<!---->'.length);
    expect(padded.html).toContain(`class="g-recaptcha" data-sitekey="${target.sitekey}"`);
  });

  it('accepts a token solved for that page in the session that loaded it, once, counting it per record', async () => {
    // Prepare
    const page = await loadPage('/form/rec-3');
    const token = await tokenFor('/form/rec-3');
    // Act
    const first = await post('/form/rec-3', page.cookie, { 'g-recaptcha-response': token, record: 'rec-3' });
    const again = await post('/form/rec-3', page.cookie, { 'g-recaptcha-response': token, record: 'rec-3' });
    // Assess
    expect(first).toBe(200);
    expect(again).toBe(403);
    const stats = target.stats();
    expect(stats.accepted).toEqual({ 'rec-3': 1 });
    expect(stats.rejections).toEqual({ TOKEN_USED: 1 });
  });

  it.each([
    ['page', 200, FORM_PAGE_TEXTS.thanks, 200, FORM_PAGE_TEXTS.refused],
    ['silent', 200, '<form', 200, FORM_PAGE_TEXTS.refused],
    ['json', 200, FORM_PAGE_TEXTS.jsonAccepted.slice(0, -1), 200, FORM_PAGE_TEXTS.jsonRefused.slice(0, -1)],
  ])(
    '/form-200/%s says no with a 200: the refused token gets the error text, the accepted one its answer',
    async (shape, okStatus, okText, noStatus, noText) => {
      // Prepare
      const path = `/form-200/${shape}/rec-${shape}`;
      const page = await loadPage(path);
      const token = await tokenFor(path);
      // Act: a token for another sitekey is refused by the form's own verification.
      const refused = await fetch(`${target.url}${path}`, {
        method: 'POST',
        headers: { cookie: page.cookie, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ 'g-recaptcha-response': 'never-issued', record: `no-${shape}` }),
      });
      const accepted = await fetch(`${target.url}${path}`, {
        method: 'POST',
        headers: { cookie: page.cookie, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ 'g-recaptcha-response': token, record: `ok-${shape}` }),
      });
      // Assess
      const [noBody, okBody] = [await refused.text(), await accepted.text()];
      expect([refused.status, accepted.status]).toEqual([noStatus, okStatus]);
      expect(noBody).toContain(noText);
      expect(okBody).toContain(okText);
      for (const body of [noBody, okBody]) expect(body).toContain(FORM_PAGE_SENTINEL);
      if (shape === 'silent') expect(okBody).not.toContain(FORM_PAGE_TEXTS.thanks);
      expect(target.stats().accepted).toEqual({ [`ok-${shape}`]: 1 });
      expect(target.stats().rejections).toEqual({ TOKEN_UNKNOWN: 1 });
    },
  );

  it('/form-200/redirect sends an accepted POST to /thanks and a refused one to /error', async () => {
    const path = '/form-200/redirect/rec-r';
    const page = await loadPage(path);
    const token = await tokenFor(path);
    const send = (t: string) =>
      fetch(`${target.url}${path}`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie: page.cookie, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ 'g-recaptcha-response': t, record: 'rec-r' }),
      });
    const refused = await send('never-issued');
    const accepted = await send(token);
    expect([refused.status, refused.headers.get('location')]).toEqual([303, '/error']);
    expect([accepted.status, accepted.headers.get('location')]).toEqual([303, '/thanks']);
  });

  it('rejects a post without the session cookie, without a token, or with a token for another page', async () => {
    const page = await loadPage('/form/rec-4');
    const wrongPageToken = await tokenFor('/form/other');
    expect(await post('/form/rec-4', '', { 'g-recaptcha-response': 'x' })).toBe(403);
    expect(await post('/form/rec-4', page.cookie, { name: 'Ada' })).toBe(403);
    expect(await post('/form/rec-4', page.cookie, { 'g-recaptcha-response': wrongPageToken })).toBe(403);
    expect(await post('/form/rec-4', page.cookie, { 'cf-turnstile-response': 'never-issued' })).toBe(403);
    expect(target.stats().rejections).toEqual({
      NO_SESSION: 1,
      MISSING_TOKEN: 1,
      PAGEURL_MISMATCH: 1,
      TOKEN_UNKNOWN: 1,
    });
    expect(target.stats().acceptedTotal).toBe(0);
  });

  it('counts accepted posts by path when there is no record field, and serves the stats over HTTP', async () => {
    const page = await loadPage('/form/rec-5');
    const token = await tokenFor('/form/rec-5');
    expect(await post('/form/rec-5', page.cookie, { 'g-recaptcha-response': token })).toBe(200);
    const stats = (await (await fetch(`${target.url}/stats`)).json()) as { accepted: Record<string, number> };
    expect(stats.accepted).toEqual({ '/form/rec-5': 1 });
  });

  it('answers forced failures and redirects chosen by the path', async () => {
    expect((await loadPage('/fail-page/503/form/x')).status).toBe(503);
    const page = await loadPage('/fail-post/500/form/y');
    expect(page.status).toBe(200);
    expect(await post('/fail-post/500/form/y', page.cookie, { 'g-recaptcha-response': 't' })).toBe(500);
    const hop = await fetch(`${target.url}/redirect/2/form/z`, { redirect: 'manual' });
    expect(hop.status).toBe(302);
    expect(hop.headers.get('location')).toBe('/redirect/1/form/z');
    expect(target.stats().rejections).toEqual({ FORCED_500: 1 });
  });
});

describe('target stand-in faults and event log', () => {
  it('dropAfterPost: every 2nd POST is verified and counted, then its connection closes without an answer', async () => {
    // Prepare
    const { next } = target.events();
    const res = await fetch(`${target.url}/faults`, {
      method: 'POST',
      body: JSON.stringify({ dropAfterPost: { every: 2 } }),
    });
    expect(res.status).toBe(204);
    const outcomes: string[] = [];
    // Act
    for (const key of ['drop-1', 'drop-2', 'drop-3']) {
      const page = await loadPage(`/form/${key}`);
      const token = await tokenFor(`/form/${key}`);
      outcomes.push(
        await post(`/form/${key}`, page.cookie, { 'g-recaptcha-response': token, record: key }).then(
          String,
          (err: Error) => `lost: ${(err.cause as { code?: string } | undefined)?.code ?? err.message}`,
        ),
      );
    }
    target.setFaults({ dropAfterPost: null });
    // Assess: the dropped POST was accepted (the form took it), and the log says so.
    expect(outcomes[0]).toBe('200');
    expect(outcomes[1]).toMatch(/^lost/);
    expect(outcomes[2]).toBe('200');
    expect(target.stats()).toMatchObject({ acceptedTotal: 3, droppedAfterPost: 1 });
    const posts = target.events(next).entries.filter((e) => e.kind === 'post');
    expect(posts.map((e) => [e.record, e.status, e.reason])).toEqual([
      ['drop-1', 200, undefined],
      ['drop-2', 0, 'DROPPED_AFTER_POST'],
      ['drop-3', 200, undefined],
    ]);
  });

  it('dropAfterPost for chosen record keys only, and the Idempotency-Key header in the log', async () => {
    target.setFaults({ dropAfterPost: { every: 1, keys: ['only-this'] } });
    const { next } = target.events();
    for (const key of ['not-this', 'only-this']) {
      const page = await loadPage(`/form/${key}`);
      const token = await tokenFor(`/form/${key}`);
      await fetch(`${target.url}/form/${key}`, {
        method: 'POST',
        headers: {
          cookie: page.cookie,
          'content-type': 'application/x-www-form-urlencoded',
          'idempotency-key': `"${key}"`,
        },
        body: new URLSearchParams({ 'g-recaptcha-response': token }),
      }).then(
        (r) => r.text(),
        () => undefined,
      );
    }
    target.setFaults({ dropAfterPost: null });
    const res = await fetch(`${target.url}/events?since=${next}`);
    const { entries } = (await res.json()) as ReturnType<TargetStandin['events']>;
    expect(entries.map((e) => [e.kind, e.record, e.status, e.idempotencyKey])).toEqual([
      ['page', 'not-this', 200, undefined],
      ['post-received', 'not-this', 0, undefined],
      ['post', 'not-this', 200, '"not-this"'],
      ['page', 'only-this', 200, undefined],
      ['post-received', 'only-this', 0, undefined],
      ['post', 'only-this', 0, '"only-this"'],
    ]);
  });

  it('refuses a malformed fault with a message naming it', async () => {
    const res = await fetch(`${target.url}/faults`, {
      method: 'POST',
      body: JSON.stringify({ dropAfterPost: { every: 0 } }),
    });
    expect(res.status).toBe(400);
    expect(await res.text()).toContain('dropAfterPost.every');
    expect(() => target.setFaults({ bogus: {} } as never)).toThrow(/bogus/);
  });
});
