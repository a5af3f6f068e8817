import { afterEach, describe, expect, it } from 'vitest';
import {
  type CaptchaStandin,
  type StandinOptions,
  startCaptchaStandin,
} from '../../../../../local/standins/captchaai/standin.js';

/**
 * Lost in.php answers and the wire log, over real HTTP: the task is created and holds its
 * thread, its answer is a 502 page, a closed connection or comes after the client gave up, and
 * the stand-in's own counters and log show the thread held.
 */
const KEY = 'fedcba9876543210fedcba9876543210';
const standins: CaptchaStandin[] = [];
afterEach(async () => {
  await Promise.all(standins.splice(0).map((s) => s.close()));
});

async function standin(o: Partial<StandinOptions> = {}, solveMs = 30_000): Promise<CaptchaStandin> {
  const slow = { minMs: solveMs, maxMs: solveMs };
  const s = await startCaptchaStandin({
    threads: 3,
    apiKey: KEY,
    latency: { recaptcha_v2: slow, recaptcha_v3: slow, recaptcha_enterprise: slow, turnstile: slow },
    ...o,
  });
  standins.push(s);
  return s;
}

async function submit(s: CaptchaStandin, record: string, timeoutMs = 2000): Promise<string> {
  const body = new URLSearchParams({
    key: KEY,
    method: 'userrecaptcha',
    googlekey: 'site',
    pageurl: `http://127.0.0.1:9/form/${record}`,
    json: '1',
  });
  try {
    const res = await fetch(`${s.url}/in.php`, {
      method: 'POST',
      body,
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    return res.status === 200
      ? `task ${(JSON.parse(text) as { request: string }).request}`
      : `http ${res.status}`;
  } catch (err) {
    return (err as Error).name === 'TimeoutError' ? 'timeout' : 'connection lost';
  }
}

describe('CaptchaAI stand-in: lost in.php answers', () => {
  it('every 2nd in.php: the task is created and holds a thread, the answer is a 502 page', async () => {
    const s = await standin({ lostAnswers: { html502: { every: 2 } } });
    const answers = [await submit(s, 'r1'), await submit(s, 'r2'), await submit(s, 'r3')];
    expect(answers[0]).toMatch(/^task /);
    expect(answers[1]).toBe('http 502');
    expect(answers[2]).toMatch(/^task /);
    // Three tasks hold threads, although the client saw only two.
    expect(s.stats()).toMatchObject({
      inFlight: 3,
      maxInFlight: 3,
      lostAnswers: { html502: 1, drop: 0, late: 0 },
    });
    const inPhp = s.events().entries.filter((e) => e.kind === 'in.php');
    expect(inPhp.map((e) => [e.record, e.taskId !== undefined, 'lost' in e ? e.lost : undefined])).toEqual([
      ['r1', true, undefined],
      ['r2', true, 'html502'],
      ['r3', true, undefined],
    ]);
  });

  it('drop closes the connection; late answers after the client timed out; both tasks hold threads until they end', async () => {
    const s = await standin({ timeScale: 0.01 });
    s.setLostAnswers({ drop: { every: 1, keys: ['d'] }, late: { every: 1, keys: ['l'] }, lateMs: 100_000 });
    expect(await submit(s, 'd')).toBe('connection lost');
    expect(await submit(s, 'l', 200)).toBe('timeout');
    expect(s.stats()).toMatchObject({ inFlight: 2, lostAnswers: { drop: 1, late: 1 } });
    // They end like any task (30 s × 0.01 here), and the log says so with the count after each.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const ends = s.events().entries.filter((e) => e.kind === 'task-end');
    expect(ends.map((e) => e.record).sort()).toEqual(['d', 'l']);
    expect(ends.at(-1)?.inFlight).toBe(0);
  });

  it('a seeded rate loses the same answers twice, set over POST /control; the log counts threads and res.php', async () => {
    const run = async () => {
      const s = await standin({ threads: 50 });
      const res = await fetch(`${s.url}/control`, {
        method: 'POST',
        body: JSON.stringify({ lostAnswers: { html502: { rate: 0.3, seed: 9 } } }),
      });
      expect(res.status).toBe(200);
      const out = [];
      for (let i = 0; i < 20; i++) out.push(await submit(s, `k${i}`));
      return { s, out };
    };
    const a = await run();
    const b = await run();
    expect(a.out.map((x) => x.startsWith('task'))).toEqual(b.out.map((x) => x.startsWith('task')));
    expect(a.out.filter((x) => x === 'http 502').length).toBeGreaterThan(0);
    expect(a.s.stats().inFlight).toBe(20);
    const id = a.out.find((x) => x.startsWith('task'))?.slice(5) ?? '';
    await fetch(`${a.s.url}/res.php`, {
      method: 'POST',
      body: new URLSearchParams({ key: KEY, action: 'get', id, json: '1' }),
    });
    const log = (await (await fetch(`${a.s.url}/events?since=20`)).json()) as ReturnType<
      CaptchaStandin['events']
    >;
    expect(log.entries).toEqual([
      expect.objectContaining({ kind: 'res.php', taskId: id, answer: 'CAPCHA_NOT_READY', inFlight: 20 }),
    ]);
  });

  it('refuses an unknown kind of lost answer', async () => {
    const s = await standin();
    const res = await fetch(`${s.url}/control`, {
      method: 'POST',
      body: JSON.stringify({ lostAnswers: { gone: { every: 1 } } }),
    });
    expect(res.status).toBe(400);
    expect(await res.text()).toContain('unknown lost answer');
  });
});
