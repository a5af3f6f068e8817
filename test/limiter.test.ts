import { afterEach, describe, expect, it } from 'vitest';
import { CaptchaAiClient } from '../functions/shared/captchaai/client.js';
import { Limiter } from '../functions/shared/limiter.js';
import { type CaptchaStandin, startCaptchaStandin } from '../local/captchaai-standin.js';

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets queued promise callbacks (the limiter's hand-over) run. */
const settle = () => new Promise((r) => setImmediate(r));

describe('Limiter', () => {
  it('never runs more than its size at once and starts waiting work in FIFO order', async () => {
    // Prepare
    const limiter = new Limiter(2);
    const gates = Array.from({ length: 5 }, () => deferred());
    const started: number[] = [];
    let active = 0;
    let maxActive = 0;

    // Act
    const runs = gates.map((gate, i) =>
      limiter.run(async () => {
        started.push(i);
        active += 1;
        maxActive = Math.max(maxActive, active);
        await gate.promise;
        active -= 1;
        return i;
      }),
    );
    await settle();
    const beforeRelease = { active: limiter.active, pending: limiter.pending, started: [...started] };
    for (const gate of gates) {
      gate.resolve();
      await settle();
    }
    const results = await Promise.all(runs);

    // Assess
    expect(beforeRelease).toEqual({ active: 2, pending: 3, started: [0, 1] });
    expect(started).toEqual([0, 1, 2, 3, 4]);
    expect(maxActive).toBe(2);
    expect(results).toEqual([0, 1, 2, 3, 4]);
  });

  it('starts waiting work at once when resized up, and holds back new starts when resized down', async () => {
    // Prepare
    const limiter = new Limiter(1);
    const gates = Array.from({ length: 4 }, () => deferred());
    const runs = gates.map((gate) => limiter.run(() => gate.promise));
    await settle();

    // Act
    limiter.resize(3);
    await settle();
    const afterGrow = limiter.active;
    limiter.resize(1);
    gates[0]?.resolve();
    await settle();
    const afterShrink = { active: limiter.active, pending: limiter.pending };
    for (const gate of gates) gate.resolve();
    await Promise.all(runs);

    // Assess
    expect(afterGrow).toBe(3);
    expect(afterShrink).toEqual({ active: 2, pending: 1 });
    expect(limiter.active).toBe(0);
  });

  it('size 0 pauses all starts until resized', async () => {
    // Prepare
    const limiter = new Limiter(0);
    let ran = false;

    // Act
    const run = limiter.run(async () => {
      ran = true;
    });
    await settle();
    const ranWhilePaused = ran;
    limiter.resize(1);
    await run;

    // Assess
    expect(ranWhilePaused).toBe(false);
    expect(ran).toBe(true);
  });

  it('a failing function rejects its caller and frees its slot', async () => {
    // Prepare
    const limiter = new Limiter(1);

    // Act
    const failed = limiter.run(async () => {
      throw new Error('boom');
    });
    const next = limiter.run(async () => 'next');

    // Assess
    await expect(failed).rejects.toThrow('boom');
    await expect(next).resolves.toBe('next');
    expect(limiter.active).toBe(0);
  });

  it('an abort while waiting rejects with the reason and never runs the function', async () => {
    // Prepare
    const limiter = new Limiter(1);
    const gate = deferred();
    const holder = limiter.run(() => gate.promise);
    const abort = new AbortController();
    let ran = false;

    // Act
    const waiting = limiter.run(
      async () => {
        ran = true;
      },
      { signal: abort.signal },
    );
    abort.abort(new Error('gave up'));
    gate.resolve();
    await holder;

    // Assess
    await expect(waiting).rejects.toThrow('gave up');
    expect(ran).toBe(false);
    expect(limiter.pending).toBe(0);
  });

  it('rejects sizes that are not whole numbers >= 0', () => {
    expect(() => new Limiter(-1)).toThrow(RangeError);
    expect(() => new Limiter(1.5)).toThrow(RangeError);
    expect(() => new Limiter(2).resize(Number.NaN)).toThrow(RangeError);
  });
});

describe('Limiter in front of the CaptchaAI stand-in', () => {
  const KEY = '00112233445566778899aabbccddeeff';
  const THREADS = 4;
  // Solves last 200-400 ms here: long enough that 3×T submits overlap even on a loaded machine.
  const LATENCY = { minMs: 20_000, maxMs: 40_000 };
  const standins: CaptchaStandin[] = [];
  afterEach(async () => {
    await Promise.all(standins.splice(0).map((s) => s.close()));
  });

  async function setup() {
    const s = await startCaptchaStandin({
      threads: THREADS,
      apiKey: KEY,
      timeScale: 0.01,
      latency: { recaptcha_v2: LATENCY, turnstile: LATENCY },
    });
    standins.push(s);
    const firstPollMs = { recaptcha_v2: 15_000, turnstile: 15_000 };
    const client = new CaptchaAiClient({
      apiKey: KEY,
      baseUrl: s.url,
      timeScale: 0.01,
      timings: { firstPollMs, pollIntervalMs: 2_000, submitBackoffMs: 3_000, httpTimeoutMs: 300_000 },
    });
    const tasks = Array.from({ length: 3 * THREADS }, (_, i) => ({
      type: i % 2 === 0 ? ('recaptcha_v2' as const) : ('turnstile' as const),
      sitekey: 'sk',
      pageurl: `https://staging.example.com/r/${i}`,
    }));
    return { s, client, tasks };
  }

  it('3×T parallel solves through a limiter of size T never exceed T in flight nor get ZERO_BALANCE', async () => {
    // Prepare
    const { s, client, tasks } = await setup();
    const limiter = new Limiter(THREADS);

    // Act
    const results = await Promise.all(tasks.map((task) => limiter.run(() => client.solve(task))));

    // Assess
    expect(results.every((r) => r.submits === 1)).toBe(true);
    const stats = s.stats();
    expect(stats.maxInFlight).toBeLessThanOrEqual(THREADS);
    expect(stats).toMatchObject({ zeroBalance: 0, submits: 3 * THREADS, solved: 3 * THREADS });
  });

  it('the same 3×T solves without the limiter make the stand-in answer ZERO_BALANCE (its limit is real)', async () => {
    // Prepare
    const { s, client, tasks } = await setup();

    // Act
    await Promise.allSettled(tasks.map((task) => client.solve(task)));

    // Assess
    const stats = s.stats();
    expect(stats.zeroBalance).toBeGreaterThan(0);
    expect(stats.maxInFlight).toBeLessThanOrEqual(THREADS);
  });
});
