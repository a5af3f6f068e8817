import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CaptchaAiClient, MAX_ANSWER_BYTES } from '../../../../functions/captchaai/client.js';
import { PollTimeoutError, TargetError, TransientError } from '../../../../functions/common/errors.js';
import { decideOutcome } from '../../../../functions/records/decisions.js';
import { parseAllowlist, type Resolver } from '../../../../functions/target/allowlist.js';
import { MAX_PAGE_BYTES, TargetSession } from '../../../../functions/target/session.js';
import type { CaptchaStandin } from '../../../../local/standins/captchaai/standin.js';
import { HOSTILE_KINDS } from '../../../../local/standins/hostile-reply.js';
import { startTargetStandin, type TargetStandin } from '../../../../local/standins/target.js';
import {
  startFastCaptchaStandin,
  TEST_API_KEY,
  TEST_TIME_SCALE,
  testClient,
} from '../../../fixtures/solve.js';

/**
 * Broken or hostile peers over real HTTP: every read threadgate makes is bounded in bytes and
 * time, and ends with a clear reason. The stand-ins play the peers (local/standins/hostile-reply.ts):
 * a 50 MiB body, a body that never ends, headers followed by nothing.
 */
let captcha: CaptchaStandin;
let target: TargetStandin;
const resolver: Resolver = async () => {
  throw new Error('no DNS in this test');
};
const allowlist = parseAllowlist(['127.0.0.1']);

beforeAll(async () => {
  captcha = await startFastCaptchaStandin(5);
  target = await startTargetStandin({ captchaUrl: captcha.url });
});
afterAll(async () => {
  await target?.close();
  await captcha?.close();
});

const TASK = { type: 'recaptcha_v2', sitekey: 'k', pageurl: 'https://forms.example.com/' } as const;
const CTX = { receiveCount: 1, transientReceiveLimit: 3, cooldownMs: 1_000 };

/** A client at the test time scale that records the waits it asks for. */
function recordingClient() {
  const waits: number[] = [];
  const client = new CaptchaAiClient({
    apiKey: TEST_API_KEY,
    baseUrl: captcha.url,
    timeScale: TEST_TIME_SCALE,
    sleep: async (ms, signal) => {
      waits.push(ms);
      await sleep(Math.min(ms, 50), undefined, { signal });
    },
  });
  return { client, waits };
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'OK';
  } catch (err) {
    if (err instanceof TargetError || err instanceof TransientError) return err.code;
    throw err;
  }
}

describe('CaptchaAI answers from a hostile peer', () => {
  it.each(HOSTILE_KINDS)(
    'res.php answering %s: the same task is asked about again, and solves',
    async (kind) => {
      // Prepare
      const before = captcha.stats();
      captcha.inject('res.php', [{ hostile: kind }]);
      // Act
      const solved = await testClient(captcha).solve(TASK);
      // Assess: one task, at least two polls (the hostile one and the answer), a token.
      const after = captcha.stats();
      expect(solved.token.length).toBeGreaterThan(0);
      expect(after.submits - before.submits).toBe(1);
      expect(after.polls - before.polls).toBeGreaterThanOrEqual(2);
      expect(after.errors[`HOSTILE_${kind.toUpperCase()}`]).toBeGreaterThanOrEqual(1);
    },
  );

  it.each(HOSTILE_KINDS)(
    'in.php answering %s: no second task, the slot waits out the deadline and the cool-down, then the record is retried (failed SUBMIT_ANSWER_UNREADABLE at the receive limit)',
    async (kind) => {
      // Prepare
      const { client, waits } = recordingClient();
      const before = captcha.stats().submits;
      captcha.inject('in.php', [{ hostile: kind }]);
      // Act
      const failure = await client.solve(TASK).catch((err: unknown) => err);
      // Assess
      expect(failure).toBeInstanceOf(PollTimeoutError);
      expect((failure as PollTimeoutError).code).toBe('SUBMIT_ANSWER_UNREADABLE');
      expect(captcha.stats().submits - before).toBe(1);
      expect(waits).toContain(client.timings.deadlineMs * TEST_TIME_SCALE);
      expect(decideOutcome(failure, CTX)).toEqual({
        action: 'retry',
        release: true,
        reason: 'SUBMIT_ANSWER_UNREADABLE',
        cooldownMs: CTX.cooldownMs,
      });
      expect(decideOutcome(failure, { ...CTX, receiveCount: CTX.transientReceiveLimit })).toEqual({
        action: 'fail',
        reason: 'SUBMIT_ANSWER_UNREADABLE',
        cooldownMs: CTX.cooldownMs,
      });
    },
  );

  it('threadsinfo answering a huge body is a transient error (the adjuster keeps the last cap)', async () => {
    // threadsinfo is not injectable: a raw server plays CaptchaAI here.
    const { createServer } = await import('node:http');
    const { sendHostile } = await import('../../../../local/standins/hostile-reply.js');
    const server = createServer((req, res) => void sendHostile(req, res, 'huge'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    try {
      const client = new CaptchaAiClient({ apiKey: TEST_API_KEY, baseUrl: `http://127.0.0.1:${port}` });
      expect(await codeOf(client.threadsInfo())).toBe('ANSWER_TOO_LARGE');
    } finally {
      server.closeAllConnections();
      server.close();
    }
    expect(MAX_ANSWER_BYTES).toBeLessThan(1024 * 1024);
  });
});

describe('target pages and POST answers from a hostile peer', () => {
  const session = (timeoutMs = 2_000) => new TargetSession({ allowlist, resolver, timeoutMs });

  it('fails a 50 MiB page PAGE_TOO_LARGE', async () => {
    expect(await codeOf(session().load(`${target.url}/hostile-page/huge/r1`))).toBe('PAGE_TOO_LARGE');
    expect(MAX_PAGE_BYTES).toBeLessThan(50 * 1024 * 1024);
  });

  it('fails a page whose body never ends PAGE_TOO_LARGE once it passes the bound', async () => {
    expect(await codeOf(session(10_000).load(`${target.url}/hostile-page/endless/r2`))).toBe(
      'PAGE_TOO_LARGE',
    );
  });

  it('fails a page that sends its headers and then nothing TARGET_TIMEOUT', async () => {
    expect(await codeOf(session(500).load(`${target.url}/hostile-page/hang-after-headers/r3`))).toBe(
      'TARGET_TIMEOUT',
    );
  });

  it.each(HOSTILE_KINDS)(
    'keeps the status of a POST whose answer is %s, and stops reading it',
    async (kind) => {
      // Prepare: a real token, posted in the page's session.
      const pageurl = `${target.url}/hostile-post/${kind}/r-${kind}`;
      const s = session(1_000);
      await s.load(pageurl);
      const { token } = await testClient(captcha).solve({
        type: 'recaptcha_v2',
        sitekey: target.sitekey,
        pageurl,
      });
      const accepted = target.stats().acceptedTotal;
      // Act
      const posted = await s.submit(pageurl, { 'g-recaptcha-response': token });
      // Assess: the target accepted the token; its status is the outcome.
      expect(posted.status).toBe(200);
      expect(target.stats().acceptedTotal - accepted).toBe(1);
    },
  );
});
