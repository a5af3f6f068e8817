import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TargetError } from '../../../../functions/common/errors.js';
import { parseAllowlist, type Resolver } from '../../../../functions/target/allowlist.js';
import { TargetSession } from '../../../../functions/target/session.js';
import type { CaptchaStandin } from '../../../../local/standins/captchaai/standin.js';
import { startTargetStandin, type TargetStandin } from '../../../../local/standins/target.js';
import { startFastCaptchaStandin, testClient } from '../../../fixtures/solve.js';

let captcha: CaptchaStandin;
let target: TargetStandin;
/** Names resolve through this table; 127.0.0.1 is an IP literal and needs no lookup. */
const resolver: Resolver = async (host) => {
  const table: Record<string, string[]> = { 'app.corp.test': ['10.0.0.5'], localhost: ['127.0.0.1'] };
  const found = table[host];
  if (!found) throw new Error(`ENOTFOUND ${host}`);
  return found;
};
const allowlist = parseAllowlist(['127.0.0.1', '*.corp.test']);

beforeAll(async () => {
  captcha = await startFastCaptchaStandin();
  target = await startTargetStandin({ captchaUrl: captcha.url });
});
afterAll(async () => {
  await target?.close();
  await captcha?.close();
});

function session(timeoutMs = 5_000): TargetSession {
  return new TargetSession({ allowlist, resolver, timeoutMs, maxRedirects: 3 });
}

async function failureCode(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof TargetError) return err.code;
    throw err;
  }
  return 'NO_ERROR';
}

describe('target session', () => {
  it('posts the token in the same cookie session that loaded the page', async () => {
    // Prepare
    const pageurl = `${target.url}/form/s-1`;
    const s = session();
    await s.load(pageurl);
    const { token } = await testClient(captcha).solve({
      type: 'recaptcha_v2',
      sitekey: target.sitekey,
      pageurl,
    });
    // Act
    const posted = await s.submit(pageurl, { 'g-recaptcha-response': token, record: 's-1', name: 'Ada' });
    // Assess
    expect(posted.status).toBe(200);
    expect(target.stats().accepted['s-1']).toBe(1);
  });

  it('keeps cookies per session: another session cannot use the page load of the first', async () => {
    const pageurl = `${target.url}/form/s-2`;
    await session().load(pageurl);
    const posted = await session().submit(pageurl, { 'g-recaptcha-response': 'x' });
    expect(posted.status).toBe(403);
  });

  it('follows a bounded number of redirects and reports the final page', async () => {
    const loaded = await session().load(`${target.url}/redirect/2/form/s-3`);
    expect(loaded).toEqual({ status: 200, url: `${target.url}/form/s-3`, redirects: 3 });
    expect(await failureCode(session().load(`${target.url}/redirect/5/form/s-3`))).toBe('TOO_MANY_REDIRECTS');
  });

  it('re-checks every redirect hop against the allowlist', async () => {
    const offList = encodeURIComponent(`http://localhost:${target.port}/form/x`);
    const privateHop = encodeURIComponent(`http://app.corp.test:${target.port}/form/x`);
    expect(await failureCode(session().load(`${target.url}/redirect-to/${offList}`))).toBe(
      'HOST_NOT_ALLOWED',
    );
    expect(await failureCode(session().load(`${target.url}/redirect-to/${privateHop}`))).toBe(
      'ADDRESS_NOT_ALLOWED',
    );
  });

  it('turns error pages, slow answers and closed ports into target error codes', async () => {
    expect(await failureCode(session().load(`${target.url}/fail-page/404/form/x`))).toBe('PAGE_HTTP_404');
    expect(await failureCode(session(200).load(`${target.url}/slow-page/2000/form/x`))).toBe(
      'TARGET_TIMEOUT',
    );
    const closed = await startTargetStandin({ captchaUrl: captcha.url });
    const closedUrl = `${closed.url}/form/x`;
    await closed.close();
    expect(await failureCode(session().load(closedUrl))).toBe('TARGET_UNREACHABLE');
  });

  it('returns the POST status without following its redirect', async () => {
    const s = session();
    await s.load(`${target.url}/form/s-4`);
    expect(await s.submit(`${target.url}/redirect/0/form/s-4`, { a: 'b' })).toEqual({ status: 302 });
    expect(await s.submit(`${target.url}/fail-post/500/form/s-4`, { a: 'b' })).toEqual({ status: 500 });
  });
});

describe('target session: the form POST', () => {
  /** A loopback form that records what each POST carried, then answers as `reply` says. */
  async function form(reply: (req: IncomingMessage, res: ServerResponse) => void) {
    const posts: Array<{ headers: IncomingMessage['headers']; body: string }> = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => {
        body += chunk.toString();
      });
      req.on('end', () => {
        posts.push({ headers: req.headers, body });
        reply(req, res);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    return {
      url: `http://127.0.0.1:${port}/submit`,
      posts,
      close: async () => {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      },
    };
  }

  it('sends the record key as the Idempotency-Key header, a quoted string', async () => {
    const f = await form((_req, res) => res.writeHead(200).end('ok'));
    try {
      const answer = await session().submit(f.url, { a: '1' }, { idempotencyKey: 'order-"7"\\x' });
      expect(answer.status).toBe(200);
      expect(f.posts).toHaveLength(1);
      expect(f.posts[0]?.headers['idempotency-key']).toBe('"order-\\"7\\"\\\\x"');
      expect(f.posts[0]?.body).toBe('a=1');
    } finally {
      await f.close();
    }
  });

  it('a POST whose connection is dropped after the body arrived is OUTCOME_UNKNOWN (the form may have it)', async () => {
    const f = await form((req) => req.socket.destroy());
    try {
      expect(await failureCode(session().submit(f.url, { a: '1' }))).toBe('OUTCOME_UNKNOWN');
      expect(f.posts).toHaveLength(1);
    } finally {
      await f.close();
    }
  });

  it('a POST whose answer does not come within the timeout is OUTCOME_UNKNOWN', async () => {
    const f = await form(() => undefined);
    try {
      expect(await failureCode(session(300).submit(f.url, { a: '1' }))).toBe('OUTCOME_UNKNOWN');
      expect(f.posts).toHaveLength(1);
    } finally {
      await f.close();
    }
  });

  it('a POST to a port where nothing listens was never sent: TARGET_UNREACHABLE', async () => {
    const f = await form(() => undefined);
    const url = f.url;
    await f.close();
    expect(await failureCode(session().submit(url, { a: '1' }))).toBe('TARGET_UNREACHABLE');
  });

  it('with a verdict asked for, returns the resolved Location and the answer text (which never serializes)', async () => {
    const f = await form((req, res) =>
      req.url === '/submit'
        ? res.writeHead(303, { location: '/thanks?n=1' }).end('Thank you, Lovelace')
        : res.writeHead(200).end(),
    );
    try {
      const plain = await session().submit(f.url, { a: '1' });
      expect(plain).toEqual({ status: 303 });
      const judged = await session().submit(f.url, { a: '1' }, { verdict: { body: true } });
      expect(judged.status).toBe(303);
      expect(judged.location).toBe(f.url.replace('/submit', '/thanks?n=1'));
      expect(judged.body?.contains('thank you')).toBe(true);
      expect(JSON.stringify(judged).toLowerCase()).not.toContain('lovelace');
      const noBody = await session().submit(f.url, { a: '1' }, { verdict: { body: false } });
      expect(noBody.body).toBeUndefined();
    } finally {
      await f.close();
    }
  });

  it('an answer whose body breaks off after the status is unreadable, not OUTCOME_UNKNOWN: the status is in hand', async () => {
    const f = await form((_req, res) => {
      res.writeHead(200, { 'content-length': '1000' });
      res.write('half a page');
      setTimeout(() => res.socket?.destroy(), 20);
    });
    try {
      const judged = await session().submit(f.url, { a: '1' }, { verdict: { body: true } });
      expect(judged.status).toBe(200);
      expect(judged.body?.readable).toBe(false);
    } finally {
      await f.close();
    }
  });
});
