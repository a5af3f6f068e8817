import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import seedrandom from 'seedrandom';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CaptchaAiClient,
  type CaptchaAiClientOptions,
  type CaptchaTask,
  type ClientEvent,
} from '../../../../functions/captchaai/client.js';
import {
  BadTaskError,
  PollTimeoutError,
  StopClassError,
  TaskMayExistError,
  TransientError,
  UnsolvableError,
} from '../../../../functions/common/errors.js';
import {
  type CaptchaStandin,
  type StandinOptions,
  startCaptchaStandin,
} from '../../../../local/standins/captchaai/standin.js';

/*
 * Every test talks real HTTP to the CaptchaAI stand-in on an ephemeral loopback port. Both
 * sides run at time scale 0.01 with short timings, so a solve takes tens of milliseconds.
 */

const KEY = '0123456789abcdef0123456789abcdef';
const SCALE = 0.01;
const FAST = { minMs: 1_000, maxMs: 3_000 };
const TIMINGS: CaptchaAiClientOptions['timings'] = {
  firstPollMs: {
    recaptcha_v2: 2_000,
    recaptcha_v3: 2_000,
    recaptcha_enterprise: 2_000,
    turnstile: 2_000,
    image: 2_000,
  },
  pollIntervalMs: 2_000,
  serverErrorWaitMs: 2_000,
  submitBackoffMs: 5_000,
  // Generous against a loaded machine (3 s and 5 s here); tests about the deadline or the
  // HTTP timeout set their own.
  deadlineMs: 300_000,
  httpTimeoutMs: 500_000,
};
const PAGE = 'https://staging.example.com/signup';
const V2: CaptchaTask = { type: 'recaptcha_v2', sitekey: 'site-key-v2', pageurl: PAGE };

const standins: CaptchaStandin[] = [];
afterEach(async () => {
  await Promise.all(standins.splice(0).map((s) => s.close()));
});

async function standin(o: Partial<StandinOptions> = {}): Promise<CaptchaStandin> {
  const s = await startCaptchaStandin({
    threads: 4,
    apiKey: KEY,
    timeScale: SCALE,
    latency: {
      recaptcha_v2: FAST,
      recaptcha_v3: FAST,
      recaptcha_enterprise: FAST,
      turnstile: FAST,
      image: FAST,
    },
    abandonAfterMs: 1e9,
    ...o,
  });
  standins.push(s);
  return s;
}

function client(s: CaptchaStandin, o: Partial<CaptchaAiClientOptions> = {}) {
  const events: ClientEvent[] = [];
  const c = new CaptchaAiClient({
    apiKey: KEY,
    baseUrl: s.url,
    timeScale: SCALE,
    timings: TIMINGS,
    onEvent: (e) => events.push(e),
    ...o,
  });
  return { c, events };
}

async function failure(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => new Error('expected the solve to fail, but it resolved'),
    (err: unknown) => err,
  );
}

/** Occupies one plan thread with a task that never finishes, then clears the stats. */
async function occupyThread(s: CaptchaStandin): Promise<void> {
  s.setFaults({ neverFinish: 1 });
  const res = await fetch(`${s.url}/in.php`, {
    method: 'POST',
    body: new URLSearchParams({
      key: KEY,
      method: 'turnstile',
      sitekey: 'x',
      pageurl: 'https://occupant.example/',
    }),
  });
  expect(await res.text()).toMatch(/^OK\|/);
  s.setFaults({ neverFinish: 0 });
  s.resetStats();
}

async function verify(s: CaptchaStandin, token: string, sitekey: string, pageurl: string) {
  const res = await fetch(`${s.url}/verify`, {
    method: 'POST',
    body: JSON.stringify({ token, sitekey, pageurl }),
  });
  return (await res.json()) as { success: boolean; error?: string };
}

const kinds = (events: ClientEvent[], kind: ClientEvent['kind']) => events.filter((e) => e.kind === kind);

describe('CaptchaAiClient: solving', () => {
  it.each([
    { type: 'recaptcha_v2', sitekey: 'k-v2', pageurl: PAGE, invisible: true },
    { type: 'recaptcha_v3', sitekey: 'k-v3', pageurl: PAGE, action: 'login', minScore: 0.7 },
    { type: 'recaptcha_enterprise', sitekey: 'k-ent', pageurl: PAGE, action: 'pay', minScore: 0.3 },
    { type: 'turnstile', sitekey: '0x4AAAAAAA', pageurl: PAGE, action: 'signup' },
  ] satisfies CaptchaTask[])(
    'solves a $type task whose token verifies for its sitekey and pageurl',
    async (task) => {
      // Prepare
      const s = await standin();
      const { c } = client(s);

      // Act
      const result = await c.solve(task);

      // Assess
      expect(result.submits).toBe(1);
      expect(s.stats().submitsByType).toEqual({ [task.type]: 1 });
      expect(await verify(s, result.token, task.sitekey, task.pageurl)).toEqual({ success: true });
    },
  );

  it('solves an image task sent as base64', async () => {
    // Prepare
    const s = await standin();
    const { c } = client(s);

    // Act
    const result = await c.solve({ type: 'image', body: Buffer.from('fake png bytes').toString('base64') });

    // Assess
    expect(result.token).not.toBe('');
    expect(s.stats().submitsByType).toEqual({ image: 1 });
  });

  it.each(['number', 'string'] as const)('accepts the task id as a JSON %s', async (taskIdAs) => {
    // Prepare
    const s = await standin({ taskIdAs });
    const { c } = client(s);

    // Act
    const result = await c.solve(V2);

    // Assess
    expect(result.taskId).toMatch(/^\d+$/);
    expect(s.stats().solved).toBe(1);
  });

  it('gives concurrent solves on one client distinct tokens that each verify once', async () => {
    // Prepare
    const s = await standin({ threads: 6 });
    const { c } = client(s);

    // Act
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => c.solve({ ...V2, pageurl: `${PAGE}?n=${i}` })),
    );

    // Assess
    expect(new Set(results.map((r) => r.token)).size).toBe(6);
    expect(new Set(results.map((r) => r.taskId)).size).toBe(6);
    for (const [i, r] of results.entries()) {
      expect(await verify(s, r.token, V2.sitekey, `${PAGE}?n=${i}`)).toEqual({ success: true });
    }
  });
});

describe('CaptchaAiClient: stop-class answers', () => {
  it.each([
    { key: 'short-key', code: 'ERROR_WRONG_USER_KEY' },
    { key: 'ffffffffffffffffffffffffffffffff', code: 'ERROR_KEY_DOES_NOT_EXIST' },
  ])('a wrong key ($code) costs exactly one in.php request and ends stop-class', async ({ key, code }) => {
    // Prepare
    const s = await standin();
    const { c } = client(s, { apiKey: key });

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(StopClassError);
    expect(err).toMatchObject({ code, submits: 1 });
    expect(s.stats().submits).toBe(1);
  });

  it('a key revoked while polling ends stop-class at the next poll without another submit', async () => {
    // Prepare
    const s = await standin({ latency: { recaptcha_v2: { minMs: 30_000, maxMs: 30_000 } } });
    const { c } = client(s, {
      onEvent: (e) => {
        if (e.kind === 'submitted') s.setKeyRevoked(true);
      },
    });

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(StopClassError);
    expect(err).toMatchObject({ code: 'ERROR_KEY_DOES_NOT_EXIST', submits: 1 });
    expect((err as StopClassError).taskId).toMatch(/^\d+$/);
    expect(s.stats().submits).toBe(1);
  });

  it('IP_BANNED in plain text despite json=1 ends stop-class after one request', async () => {
    // Prepare
    const s = await standin({ faults: { ipBanned: 1 } });
    const { c } = client(s);

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(StopClassError);
    expect(err).toMatchObject({ code: 'IP_BANNED', submits: 1 });
    expect(s.stats().submits).toBe(1);
  });
});

describe('CaptchaAiClient: no free thread (decided by threadsinfo)', () => {
  it.each(['ERROR_ZERO_BALANCE', 'ERROR_NO_SLOT_AVAILABLE'])(
    '%s with every plan thread busy is transient: two more tries with doubling back-off',
    async (code) => {
      // Prepare
      const s = await standin({ threads: 1 });
      await occupyThread(s);
      const reply = { body: JSON.stringify({ status: 0, request: code }) };
      if (code === 'ERROR_NO_SLOT_AVAILABLE') s.inject('in.php', [reply, reply, reply]);
      const { c, events } = client(s);

      // Act
      const err = await failure(c.solve(V2));

      // Assess
      expect(err).toBeInstanceOf(TransientError);
      expect(err).not.toBeInstanceOf(PollTimeoutError);
      expect(err).toMatchObject({ code, submits: 3 });
      expect(kinds(events, 'retry').map((e) => (e as { delayMs: number }).delayMs)).toEqual([50, 100]);
      expect(kinds(events, 'threadsinfo')).toHaveLength(3);
      expect(s.stats().submits).toBe(3);
    },
  );

  it('a busy plan that frees a thread during the back-off solves on the retry', async () => {
    // Prepare
    const s = await standin({ threads: 1 });
    await occupyThread(s);
    const { c } = client(s, {
      onEvent: (e) => {
        if (e.kind === 'retry') s.setThreads(2);
      },
    });

    // Act
    const result = await c.solve(V2);

    // Assess
    expect(result.submits).toBe(2);
    expect(s.stats().zeroBalance).toBe(1);
  });

  it('ZERO_BALANCE after the plan was dropped (no plan threads) ends stop-class NO_ACTIVE_PLAN at once', async () => {
    // Prepare
    const s = await standin();
    s.setPlanActive(false);
    const { c, events } = client(s);

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(StopClassError);
    expect(err).toMatchObject({ code: 'NO_ACTIVE_PLAN', submits: 1 });
    expect(kinds(events, 'retry')).toHaveLength(0);
    expect(s.stats().submits).toBe(1);
  });

  it('NO_SLOT with idle plan threads is checked once more, then ends stop-class NO_ACTIVE_PLAN', async () => {
    // Prepare
    const s = await standin({ threads: 2 });
    const noSlot = { body: JSON.stringify({ status: 0, request: 'ERROR_NO_SLOT_AVAILABLE' }) };
    s.inject('in.php', [noSlot, noSlot]);
    const { c } = client(s);

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(StopClassError);
    expect(err).toMatchObject({ code: 'NO_ACTIVE_PLAN', submits: 2 });
    expect(s.stats().submits).toBe(2);
  });

  it('NO_SLOT with idle threads that clears on the re-check solves (a thread freed in between)', async () => {
    // Prepare
    const s = await standin({ threads: 2 });
    s.inject('in.php', [{ body: JSON.stringify({ status: 0, request: 'ERROR_ZERO_BALANCE' }) }]);
    const { c } = client(s);

    // Act
    const result = await c.solve(V2);

    // Assess
    expect(result.submits).toBe(2);
  });
});

describe('CaptchaAiClient: transient errors at submit', () => {
  it('a plain-text ERROR_SERVER_ERROR despite json=1 (a well-formed answer: no task) is retried twice with doubling back-off, then ends transient', async () => {
    // Prepare
    const s = await standin({ faults: { plainTextError: 1 } });
    const { c, events } = client(s);

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(TransientError);
    expect(err).not.toBeInstanceOf(PollTimeoutError);
    expect(err).toMatchObject({ code: 'ERROR_SERVER_ERROR', submits: 3 });
    expect(kinds(events, 'retry').map((e) => (e as { delayMs: number }).delayMs)).toEqual([50, 100]);
    expect(s.stats().submits).toBe(3);
  });

  it('JSON ERROR_INTERNAL_SERVER_ERROR is transient and the next try can solve', async () => {
    // Prepare
    const s = await standin();
    s.inject('in.php', [{ body: JSON.stringify({ status: 0, request: 'ERROR_INTERNAL_SERVER_ERROR' }) }]);
    const { c, events } = client(s);

    // Act
    const result = await c.solve(V2);

    // Assess
    expect(result.submits).toBe(2);
    expect(kinds(events, 'retry')).toMatchObject([{ code: 'ERROR_INTERNAL_SERVER_ERROR', retry: 1 }]);
  });

  it('a refused connection (nothing sent, so no task) is retried at once, twice, then ends transient', async () => {
    // Prepare: a port that was just free, so the connection is refused.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const { port } = probe.address() as AddressInfo;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const events: ClientEvent[] = [];
    const observed = new CaptchaAiClient({
      apiKey: KEY,
      baseUrl: `http://127.0.0.1:${port}`,
      timeScale: SCALE,
      timings: TIMINGS,
      onEvent: (e) => events.push(e),
    });

    // Act
    const err = await failure(observed.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(TransientError);
    expect(err).not.toBeInstanceOf(PollTimeoutError);
    expect(err).toMatchObject({ code: 'NETWORK_ERROR', submits: 3 });
    expect(kinds(events, 'answer_lost')).toHaveLength(0);
    expect(kinds(events, 'retry')).toHaveLength(2);
  });
});

describe('CaptchaAiClient: in.php answers that are lost (a task may exist)', () => {
  // A short deadline: the slot waits it out (3 s at scale 0.01 would slow the suite).
  const LOST: CaptchaAiClientOptions['timings'] = { ...TIMINGS, deadlineMs: 20_000 };

  it.each([
    { what: 'an HTML 502 page', cause: 'HTTP_502', faults: { html502: 1 } },
    { what: 'a dropped connection', cause: 'NETWORK_ERROR', faults: { drop: 1 } },
  ])(
    '$what ends the solve TaskMayExistError after one submit and a wait of the deadline, never a second task (it was 3 submits)',
    async ({ cause, faults }) => {
      // Prepare
      const s = await standin({ faults });
      const { c, events } = client(s, { timings: LOST });

      // Act
      const err = await failure(c.solve(V2));

      // Assess
      expect(err).toBeInstanceOf(TaskMayExistError);
      expect(err).toMatchObject({ code: 'SUBMIT_ANSWER_LOST', submits: 1 });
      expect(kinds(events, 'answer_lost')).toEqual([
        { kind: 'answer_lost', captchaType: 'recaptcha_v2', code: 'SUBMIT_ANSWER_LOST', cause, waitMs: 200 },
      ]);
      expect(kinds(events, 'retry')).toHaveLength(0);
      expect(s.stats().submits).toBe(1);
    },
  );

  it('an in.php call that outlasts the HTTP timeout is not submitted again (it was 3 submits)', async () => {
    // Prepare
    const s = await standin();
    const slow = { delayMs: 100_000, body: '{"status":1,"request":"1"}' };
    s.inject('in.php', [slow, slow, slow]);
    const { c, events } = client(s, { timings: { ...LOST, httpTimeoutMs: 20_000 } });

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(TaskMayExistError);
    expect(err).toMatchObject({ code: 'SUBMIT_ANSWER_LOST', submits: 1 });
    expect(kinds(events, 'answer_lost')).toMatchObject([{ cause: 'HTTP_TIMEOUT' }]);
    expect(s.stats().submits).toBe(1);
  });

  it.each([
    {
      what: 'a 502 page',
      reply: (res: ServerResponse) =>
        res
          .writeHead(502, { 'content-type': 'text/html' })
          .end('<html><title>502 Bad Gateway</title></html>'),
    },
    { what: 'a reset connection', reply: (res: ServerResponse) => res.socket?.destroy() },
  ])(
    'a gateway that creates the task and then answers with $what holds one task at the server, not three',
    async ({ reply }) => {
      // Prepare: a loopback CaptchaAI gateway that counts every task it creates before failing the answer.
      let tasks = 0;
      const gateway = createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          if (req.url?.startsWith('/in.php')) {
            tasks += 1;
            reply(res);
          } else res.end('{"status":0,"request":"CAPCHA_NOT_READY"}');
        });
      });
      await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
      const { port } = gateway.address() as AddressInfo;
      try {
        const c = new CaptchaAiClient({
          apiKey: KEY,
          baseUrl: `http://127.0.0.1:${port}`,
          timeScale: SCALE,
          timings: LOST,
        });

        // Act
        const err = await failure(c.solve(V2));

        // Assess
        expect(err).toBeInstanceOf(TaskMayExistError);
        expect(err).toMatchObject({ submits: 1 });
        expect(tasks).toBe(1);
      } finally {
        gateway.closeAllConnections();
        await new Promise<void>((resolve) => gateway.close(() => resolve()));
      }
    },
  );
});

describe('CaptchaAiClient: bad tasks', () => {
  it.each([
    'ERROR_PAGEURL',
    'ERROR_GOOGLEKEY',
    'ERROR_BAD_PARAMETERS',
    'ERROR_BAD_TOKEN_OR_PAGEURL',
    'ERROR_TOO_BIG_CAPTCHA_FILESIZE',
    'ERROR_WRONG_FILE_EXTENSION',
    'ERROR_NOT_IN_THE_TABLE',
  ])('%s fails the record after one submit and is never resent', async (code) => {
    // Prepare
    const s = await standin();
    s.inject('in.php', [{ body: JSON.stringify({ status: 0, request: code }) }]);
    const { c } = client(s);

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(BadTaskError);
    expect(err).not.toBeInstanceOf(UnsolvableError);
    expect(err).toMatchObject({ code, submits: 1 });
    expect(s.stats().submits).toBe(1);
  });

  it('a malformed pageurl is rejected by the stand-in as ERROR_PAGEURL after one submit', async () => {
    // Prepare
    const s = await standin();
    const { c } = client(s);

    // Act
    const err = await failure(c.solve({ ...V2, pageurl: 'not a url' }));

    // Assess
    expect(err).toBeInstanceOf(BadTaskError);
    expect(err).toMatchObject({ code: 'ERROR_PAGEURL', submits: 1 });
  });

  it('an unknown task id while polling is a bad task carrying the id', async () => {
    // Prepare
    const s = await standin();
    s.inject('res.php', [{ body: JSON.stringify({ status: 0, request: 'ERROR_WRONG_CAPTCHA_ID' }) }]);
    const { c } = client(s);

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(BadTaskError);
    expect(err).toMatchObject({ code: 'ERROR_WRONG_CAPTCHA_ID', submits: 1 });
    expect((err as BadTaskError).taskId).toMatch(/^\d+$/);
  });
});

describe('CaptchaAiClient: UNSOLVABLE and the poll deadline', () => {
  it('UNSOLVABLE is resubmitted exactly once as a fresh task, then fails the record', async () => {
    // Prepare
    const s = await standin({ faults: { unsolvable: 1 } });
    const { c, events } = client(s);

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(UnsolvableError);
    expect(err).toMatchObject({ code: 'ERROR_CAPTCHA_UNSOLVABLE', submits: 2 });
    expect(kinds(events, 'resubmit')).toHaveLength(1);
    const ids = kinds(events, 'submitted').map((e) => (e as { taskId: string }).taskId);
    expect(new Set(ids).size).toBe(2);
    expect(s.stats().submits).toBe(2);
  });

  it('an UNSOLVABLE task whose resubmission is solvable ends solved with two submits', async () => {
    // Prepare
    const s = await standin({ faults: { unsolvable: 1 } });
    const { c } = client(s, {
      onEvent: (e) => {
        if (e.kind === 'resubmit') s.setFaults({ unsolvable: 0 });
      },
    });

    // Act
    const result = await c.solve(V2);

    // Assess
    expect(result.submits).toBe(2);
    expect(s.stats().errors.ERROR_CAPTCHA_UNSOLVABLE).toBe(1);
  });

  it('a task that never finishes raises PollTimeoutError at the deadline and is not resubmitted', async () => {
    // Prepare
    const s = await standin({ faults: { neverFinish: 1 } });
    const { c, events } = client(s, { timings: { ...TIMINGS, deadlineMs: 30_000 } });

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(PollTimeoutError);
    expect(err).toBeInstanceOf(TransientError);
    expect(err).toMatchObject({ code: 'POLL_TIMEOUT', submits: 1 });
    expect(kinds(events, 'not_ready').length).toBeGreaterThan(0);
    expect(s.stats()).toMatchObject({ submits: 1, inFlight: 1 });
  });
});

describe('CaptchaAiClient: transient errors while polling', () => {
  it.each([
    {
      what: 'an HTML 502 page',
      reply: { status: 502, body: '<html><body>502 Bad Gateway</body></html>' },
      code: 'HTTP_502',
    },
    {
      what: 'a plain-text ERROR_SERVER_ERROR',
      reply: { body: 'ERROR_SERVER_ERROR' },
      code: 'ERROR_SERVER_ERROR',
    },
    { what: 'a dropped connection', reply: { drop: true }, code: 'NETWORK_ERROR' },
    { what: 'a poll that outlasts the HTTP timeout', reply: { delayMs: 100_000 }, code: 'HTTP_TIMEOUT' },
  ])('$what re-asks about the same task id and the solve succeeds', async ({ reply, code }) => {
    // Prepare
    const s = await standin();
    s.inject('res.php', [reply]);
    const { c, events } = client(s, { timings: { ...TIMINGS, httpTimeoutMs: 50_000 } });

    // Act
    const result = await c.solve(V2);

    // Assess
    expect(result.submits).toBe(1);
    expect(kinds(events, 'poll_error')).toMatchObject([{ code, taskId: result.taskId, delayMs: 20 }]);
    const polled = new Set(kinds(events, 'poll').map((e) => (e as { taskId: string }).taskId));
    expect(polled).toEqual(new Set([result.taskId]));
    expect(kinds(events, 'poll').length).toBeGreaterThanOrEqual(2);
    expect(s.stats().submits).toBe(1);
  });
});

const HTML_429 = '<html><head><title>429 Too Many Requests</title></head><body>slow down</body></html>';

describe('CaptchaAiClient: rate limits (HTTP 429, ERROR_TOO_MUCH_REQUESTS)', () => {
  it.each([
    {
      what: 'HTTP 429 with an HTML page',
      reply: { status: 429, body: HTML_429, contentType: 'text/html' },
      code: 'HTTP_429',
    },
    {
      what: 'HTTP 429 with a plain body',
      reply: { status: 429, body: 'Too Many Requests' },
      code: 'HTTP_429',
    },
    {
      what: 'JSON ERROR_TOO_MUCH_REQUESTS',
      reply: { body: '{"status":0,"request":"ERROR_TOO_MUCH_REQUESTS"}', contentType: 'application/json' },
      code: 'ERROR_TOO_MUCH_REQUESTS',
    },
    {
      what: 'plain-text ERROR_TOO_MUCH_REQUESTS',
      reply: { body: 'ERROR_TOO_MUCH_REQUESTS' },
      code: 'ERROR_TOO_MUCH_REQUESTS',
    },
  ])('$what at submit backs off and submits again: one task, solved', async ({ reply, code }) => {
    // Prepare
    const s = await standin();
    s.inject('in.php', [reply]);
    const { c, events } = client(s);

    // Act
    const result = await c.solve(V2);

    // Assess: two in.php calls, the first created no task, so the plan saw one task
    expect(result.submits).toBe(2);
    expect(kinds(events, 'rate_limited')).toMatchObject([{ endpoint: 'in.php', code, delayMs: 50 }]);
    expect(s.stats()).toMatchObject({ submits: 2, solved: 1, maxInFlight: 1 });
  });

  it.each([
    {
      what: 'HTTP 429 with an HTML page',
      reply: { status: 429, body: HTML_429, contentType: 'text/html' },
      code: 'HTTP_429',
    },
    {
      what: 'JSON ERROR_TOO_MUCH_REQUESTS',
      reply: { body: '{"status":0,"request":"ERROR_TOO_MUCH_REQUESTS"}', contentType: 'application/json' },
      code: 'ERROR_TOO_MUCH_REQUESTS',
    },
  ])(
    '$what at poll re-asks the same id after a doubling back-off and never submits again',
    async ({ reply, code }) => {
      // Prepare
      const s = await standin();
      s.inject('res.php', [reply, reply]);
      const { c, events } = client(s);

      // Act
      const result = await c.solve(V2);

      // Assess
      expect(result.submits).toBe(1);
      expect(s.stats().submits).toBe(1);
      expect(kinds(events, 'rate_limited')).toMatchObject([
        { endpoint: 'res.php', code, taskId: result.taskId, delayMs: 50 },
        { endpoint: 'res.php', code, taskId: result.taskId, delayMs: 100 },
      ]);
      const polled = new Set(kinds(events, 'poll').map((e) => (e as { taskId: string }).taskId));
      expect(polled).toEqual(new Set([result.taskId]));
      expect(result.polls).toBe(kinds(events, 'poll').length);
    },
  );

  it('rate limits from the stand-in fault rates never create a second task for a solve', async () => {
    // Prepare: a third of all in.php and res.php answers are rate limits of either kind, over 24
    // solves, drawn from a seeded sequence (8 solves made about 20 calls, and a run now and then
    // drew no HTTP 429 at all)
    const s = await standin({
      threads: 24,
      faults: { tooManyRequests: 0.2, http429: 0.15 },
      random: seedrandom('rate-limits'),
    });
    const { c, events } = client(s, { timings: { ...TIMINGS, submitRetries: 6 } });

    // Act
    const results = await Promise.all(Array.from({ length: 24 }, () => c.solve(V2)));

    // Assess
    const stats = s.stats();
    expect(stats.solved).toBe(24);
    expect(kinds(events, 'rate_limited').length).toBeGreaterThan(0);
    expect(stats.errors.ERROR_TOO_MUCH_REQUESTS ?? 0).toBeGreaterThan(0);
    expect(stats.errors.HTTP_429 ?? 0).toBeGreaterThan(0);
    // Every extra in.php call was a rate-limited one: it made no task.
    expect(results.reduce((n, r) => n + r.submits, 0)).toBe(stats.submits);
    expect(kinds(events, 'submitted')).toHaveLength(24);
  });

  it('a task rate-limited at every poll ends with PollTimeoutError when its res.php budget is spent, after one submit', async () => {
    // Prepare
    const s = await standin({ faults: { neverFinish: 1 } });
    const limited = { body: 'ERROR_TOO_MUCH_REQUESTS' };
    s.inject('res.php', [limited, limited, limited, limited]);
    const { c } = client(s, { timings: { ...TIMINGS, pollBudget: 4, deadlineMs: 50_000 } });

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(PollTimeoutError);
    expect(s.stats()).toMatchObject({ submits: 1, polls: 4 });
    expect(s.stats().errors.ERROR_TOO_MUCH_REQUESTS).toBe(4);
  });
});

describe('CaptchaAiClient: the poll budget', () => {
  it('a task that never finishes gets exactly pollBudget res.php calls, the last at the deadline, then PollTimeoutError', async () => {
    // Prepare
    const s = await standin({ faults: { neverFinish: 1 } });
    const { c, events } = client(s, { timings: { ...TIMINGS, pollBudget: 5, deadlineMs: 100_000 } });

    // Act
    const err = await failure(c.solve(V2));

    // Assess
    expect(err).toBeInstanceOf(PollTimeoutError);
    expect((err as PollTimeoutError).polls).toBe(5);
    expect(s.stats()).toMatchObject({ submits: 1, polls: 5 });
    expect(kinds(events, 'poll')).toHaveLength(5);
  });

  it('reports the res.php calls of a solve and the plan busy thread-time', async () => {
    const s = await standin();
    const { c, events } = client(s);
    const result = await c.solve(V2);
    expect(result.polls).toBe(s.stats().polls);
    expect(result.polls).toBe(kinds(events, 'poll').length);
    expect(s.stats().busyThreadMs).toBeGreaterThan(0);
  });
});

describe('CaptchaAiClient: cancellation and secrecy', () => {
  it('an abort while polling rejects with the signal reason and submits nothing more', async () => {
    // Prepare
    const s = await standin({ faults: { neverFinish: 1 } });
    const abort = new AbortController();
    const reason = new Error('shutting down');
    const { c } = client(s, {
      onEvent: (e) => {
        if (e.kind === 'not_ready') abort.abort(reason);
      },
    });

    // Act
    const err = await failure(c.solve(V2, { signal: abort.signal }));

    // Assess
    expect(err).toBe(reason);
    expect(s.stats().submits).toBe(1);
  });

  it('an already aborted signal makes no request at all', async () => {
    // Prepare
    const s = await standin();
    const { c } = client(s);

    // Act
    const err = await failure(c.solve(V2, { signal: AbortSignal.abort(new Error('cancelled')) }));

    // Assess
    expect(err).toMatchObject({ message: 'cancelled' });
    expect(s.stats().submits).toBe(0);
  });

  it('never puts the key or the token into errors or events', async () => {
    // Prepare
    const s = await standin();
    const { c, events } = client(s);
    s.setKeyRevoked(true);
    const revoked = await failure(c.solve(V2));
    s.setKeyRevoked(false);
    s.inject('res.php', [{ status: 502, body: '<html>502</html>' }]);

    // Act
    const solved = await c.solve(V2);

    // Assess
    const err = revoked as StopClassError;
    const seen = [err.message, String(err.stack), JSON.stringify(err), JSON.stringify(events)].join('\n');
    expect(seen).not.toContain(KEY);
    expect(seen).not.toContain(solved.token);
  });
});

describe('CaptchaAiClient: resuming a recorded task', () => {
  it('polls a task an earlier attempt submitted, submits nothing, and returns its token', async () => {
    // Prepare: the earlier attempt's task, made at the stand-in directly.
    const s = await standin();
    const res = await fetch(`${s.url}/in.php`, {
      method: 'POST',
      body: new URLSearchParams({
        key: KEY,
        method: 'userrecaptcha',
        googlekey: V2.sitekey,
        pageurl: PAGE,
        json: '1',
      }),
    });
    const taskId = String(((await res.json()) as { request: string | number }).request);
    const { c, events } = client(s);

    // Act
    const result = await c.solve(V2, { resume: { taskId, submittedAt: Date.now() } });

    // Assess
    expect(result).toMatchObject({ taskId, submits: 0 });
    expect(s.stats().submits).toBe(1);
    expect(kinds(events, 'resumed')).toEqual([{ kind: 'resumed', captchaType: 'recaptcha_v2', taskId }]);
    expect((await verify(s, result.token, V2.sitekey, PAGE)).success).toBe(true);
  });
});

describe('CaptchaAiClient: threadsInfo', () => {
  it('reads threads sent as a string and working threads sent as a number', async () => {
    // Prepare
    const s = await standin({ threads: 3 });
    await occupyThread(s);
    const { c } = client(s);

    // Act
    const info = await c.threadsInfo();

    // Assess
    expect(info).toEqual({ threads: 3, workingThreads: 1 });
  });

  it('a revoked key makes threadsinfo stop-class', async () => {
    // Prepare
    const s = await standin();
    s.setKeyRevoked(true);
    const { c } = client(s);

    // Act
    const err = await failure(c.threadsInfo());

    // Assess
    expect(err).toBeInstanceOf(StopClassError);
    expect(err).toMatchObject({ code: 'ERROR_KEY_DOES_NOT_EXIST' });
  });

  it.each([
    '{"threads": null, "working_threads": 0}',
    '{"threads": "", "working_threads": 0}',
    '{"threads": "abc", "working_threads": 0}',
    '{"threads": true, "working_threads": 0}',
    '{"threads": 20, "working_threads": null}',
    '{"threads": -1, "working_threads": 0}',
    '{"threads": 2.5, "working_threads": 0}',
  ])(
    'threadsinfo answering %s is an unreadable (transient) answer, never a plan of 0 threads',
    async (body) => {
      // Prepare: a loopback CaptchaAI whose threadsinfo answers this body.
      const server = createServer((req, res) => {
        req.resume();
        req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(body));
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address() as AddressInfo;
      try {
        const c = new CaptchaAiClient({ apiKey: KEY, baseUrl: `http://127.0.0.1:${port}` });
        // Act
        const err = await failure(c.threadsInfo());
        // Assess
        expect(err).toBeInstanceOf(TransientError);
        expect(err).not.toBeInstanceOf(StopClassError);
        expect(err).toMatchObject({ code: 'BAD_RESPONSE' });
      } finally {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
    },
  );
});

describe('CaptchaAiClient: beforeSubmit asks before every in.php', () => {
  it('is awaited before the first in.php, each transient retry and the UNSOLVABLE resubmission', async () => {
    // Prepare: one in.php refused (a 429, nothing created), then tasks that end UNSOLVABLE.
    const s = await standin({ faults: { unsolvable: 1 } });
    s.inject('in.php', [{ status: 429, body: '<html>slow down</html>', contentType: 'text/html' }]);
    const asked: number[] = [];
    const { c } = client(s);
    // Act
    const err = await failure(
      c.solve(V2, {
        beforeSubmit: async () => {
          asked.push(s.stats().submits);
        },
      }),
    );
    // Assess: each in.php at the stand-in came right after an ask (the 429, the task, its resubmission).
    expect(err).toBeInstanceOf(UnsolvableError);
    expect(s.stats().submits).toBe(3);
    expect(asked).toEqual([0, 1, 2]);
  });

  it('a rejection ends the solve with its error before the in.php: the UNSOLVABLE task is not resubmitted', async () => {
    // Prepare
    const s = await standin({ faults: { unsolvable: 1 } });
    const cancelled = new Error('the batch is cancelled');
    let asks = 0;
    const { c, events } = client(s);
    // Act
    const budget = { submits: 0, retriesUsed: 0, resubmitted: false, idleRechecked: false };
    const err = await failure(
      c.solve(V2, {
        budget,
        beforeSubmit: async () => {
          asks += 1;
          if (asks > 1) throw cancelled;
        },
      }),
    );
    // Assess: one task at the stand-in, the caller's error, the submit counted in the budget.
    expect(err).toBe(cancelled);
    expect(s.stats().submits).toBe(1);
    expect(kinds(events, 'resubmit')).toHaveLength(1);
    expect(budget.submits).toBe(1);
  });
});
