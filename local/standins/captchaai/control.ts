import { CAPTCHA_TYPES, type CaptchaType } from '../../../functions/captchaai/types.js';
import type { Faults } from './faults.js';
import { checkBool, checkCount, isRecord } from './http.js';
import { checkLatency, type LatencyDistribution } from './latency.js';
import type { StandinModel } from './model.js';
import type { CaptchaStandin, FaultRates, InjectedReply } from './types.js';
import { checkLostAnswerFaults, type LostAnswers } from './wire.js';

/**
 * The stand-in's control API: what tests and other processes may change while it runs (the
 * plan's threads, the key, the plan's state, fault rates, canned replies, lost answers) and the
 * stats and wire log they read, from code (`StandinControl`, part of the handle) or over HTTP (`POST /control` with a
 * ControlRequest, `GET /stats`, `POST /stats/reset`; routed by router.ts).
 */

export type StandinControl = Omit<CaptchaStandin, 'url' | 'port' | 'close'>;

export function createControl(
  model: StandinModel,
  faults: Faults,
  lost: LostAnswers,
  latency: Record<CaptchaType, LatencyDistribution>,
): StandinControl {
  return {
    setLatency(l) {
      for (const [type, d] of Object.entries(l)) {
        if (!CAPTCHA_TYPES.includes(type as CaptchaType))
          throw new RangeError(`latency: unknown CAPTCHA type "${type}"`);
        latency[type as CaptchaType] = checkLatency(`latency.${type}`, d);
      }
    },
    latency: () => structuredClone(latency),
    setThreads(n) {
      model.threads = checkCount('threads', n);
    },
    setKeyRevoked(v) {
      model.keyRevoked = v;
    },
    setApiKey(key) {
      if (typeof key !== 'string' || !/^\S{32}$/.test(key)) {
        throw new RangeError('apiKey must be 32 characters without spaces');
      }
      model.apiKey = key;
      model.keyRevoked = false;
    },
    setPlanActive(v) {
      model.planActive = v;
    },
    setFaults(f) {
      faults.setRates(f);
    },
    inject(endpoint, replies) {
      faults.inject(endpoint, replies);
    },
    setLostAnswers(f) {
      lost.set(f);
    },
    events: (since = 0) => model.wire.since(since),
    stats: () => ({ ...model.stats(), lostAnswers: lost.counts() }),
    submitTimes: (pageurl) => model.submitTimes(pageurl),
    resetStats() {
      model.resetCounters();
    },
  };
}

/** Applies a `POST /control` body (a ControlRequest), checking each field's type. */
export function applyControl(control: StandinControl, c: unknown): void {
  if (!isRecord(c)) throw new RangeError('control body must be a JSON object');
  if (c.threads !== undefined) control.setThreads(c.threads as number);
  if (c.apiKey !== undefined) control.setApiKey(c.apiKey as string);
  if (c.keyRevoked !== undefined) control.setKeyRevoked(checkBool('keyRevoked', c.keyRevoked));
  if (c.planActive !== undefined) control.setPlanActive(checkBool('planActive', c.planActive));
  if (c.latency !== undefined) {
    if (!isRecord(c.latency)) throw new RangeError('latency must be an object');
    control.setLatency(c.latency as Partial<Record<CaptchaType, LatencyDistribution>>);
  }
  if (c.faults !== undefined) {
    if (!isRecord(c.faults)) throw new RangeError('faults must be an object');
    control.setFaults(c.faults as Partial<FaultRates>);
  }
  if (c.lostAnswers !== undefined) control.setLostAnswers(checkLostAnswerFaults(c.lostAnswers));
  if (c.inject !== undefined) {
    if (!isRecord(c.inject)) throw new RangeError('inject must be an object');
    for (const endpoint of ['in.php', 'res.php'] as const) {
      const replies = c.inject[endpoint];
      if (replies === undefined) continue;
      if (!Array.isArray(replies)) throw new RangeError(`inject.${endpoint} must be an array`);
      control.inject(endpoint, replies as InjectedReply[]);
    }
  }
}
