import seedrandom from 'seedrandom';
import { describe, expect, it } from 'vitest';
import {
  checkLatency,
  formatLatency,
  latencyCdf,
  meanLatencyMs,
  normalQuantile,
  parseLatency,
  parseLatencyOptions,
  sampleLatencyMs,
} from '../../../../../local/standins/captchaai/latency.js';

function draws(spec: string, n: number, seed = '1'): number[] {
  const d = parseLatency(spec);
  const random = seedrandom(seed);
  return Array.from({ length: n }, () => sampleLatencyMs(d, random()));
}

const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)] as number;

describe('stand-in latency distributions', () => {
  it('a uniform sample is min + u × (max − min), the draw the stand-in always made', () => {
    expect(sampleLatencyMs({ minMs: 15_000, maxMs: 60_000 }, 0.5)).toBe(37_500);
    expect(sampleLatencyMs({ kind: 'uniform', minMs: 15_000, maxMs: 60_000 }, 0)).toBe(15_000);
  });

  it.each([
    [0.975, 1.959964],
    [0.5, 0],
    [0.01, -2.326348],
    [0.999, 3.090232],
  ])('the normal quantile of %s is %s', (p, z) => {
    expect(normalQuantile(p)).toBeCloseTo(z, 5);
  });

  it('a lognormal sample has the median and spread asked for', () => {
    // Act
    const v = draws('lognormal:12,0.4', 20_000);

    // Assess
    expect(median(v)).toBeGreaterThan(11_700);
    expect(median(v)).toBeLessThan(12_300);
    const logs = v.map((x) => Math.log(x));
    const m = logs.reduce((a, b) => a + b, 0) / logs.length;
    const sd = Math.sqrt(logs.reduce((a, b) => a + (b - m) ** 2, 0) / logs.length);
    expect(sd).toBeCloseTo(0.4, 1);
    expect(meanLatencyMs(parseLatency('lognormal:12,0.4'))).toBeCloseTo(12_000 * Math.exp(0.08), 6);
  });

  it('a mixture draws its modes in their shares', () => {
    const v = draws('mixture:0.3,uniform:1,2+uniform:30,40', 10_000);
    const fast = v.filter((x) => x <= 2_000).length;
    expect(v.every((x) => x <= 2_000 || (x >= 30_000 && x <= 40_000))).toBe(true);
    expect(fast / v.length).toBeCloseTo(0.3, 1);
    expect(meanLatencyMs(parseLatency('mixture:0.3,uniform:1,2+uniform:30,40'))).toBeCloseTo(
      0.3 * 1_500 + 0.7 * 35_000,
      6,
    );
  });

  it('the same seed gives the same samples', () => {
    expect(draws('lognormal:25,0.4', 5)).toEqual(draws('lognormal:25,0.4', 5));
    expect(draws('lognormal:25,0.4', 5, '2')).not.toEqual(draws('lognormal:25,0.4', 5));
  });

  it('its CDF agrees with its samples', () => {
    for (const spec of [
      'uniform:15,60',
      'lognormal:12,0.4',
      'mixture:0.6,lognormal:8,0.3+lognormal:35,0.3',
    ]) {
      const v = draws(spec, 5_000);
      const d = parseLatency(spec);
      for (const at of [10_000, 20_000, 40_000]) {
        expect(v.filter((x) => x <= at).length / v.length).toBeCloseTo(latencyCdf(d, at), 1);
      }
    }
  });

  it('formats what it parses', () => {
    for (const spec of ['uniform:15,60', 'lognormal:25,0.4', 'mixture:0.6,lognormal:8,0.3+uniform:30,60']) {
      expect(formatLatency(parseLatency(spec))).toBe(spec);
    }
  });

  it('reads --latency values per type or for all, later ones winning', () => {
    const out = parseLatencyOptions(['all=uniform:1,2', 'recaptcha_v2=lognormal:25,0.4']);
    expect(out.recaptcha_v2).toEqual({ kind: 'lognormal', medianMs: 25_000, sigma: 0.4 });
    expect(out.turnstile).toEqual({ minMs: 1_000, maxMs: 2_000 });
  });

  it.each([
    'recaptcha_v2',
    'hcaptcha=uniform:1,2',
    'recaptcha_v2=uniform:2,1',
    'recaptcha_v2=lognormal:0,0.4',
    'recaptcha_v2=lognormal:10',
    'recaptcha_v2=mixture:1.5,uniform:1,2+uniform:3,4',
    'recaptcha_v2=gamma:2,3',
  ])('refuses %s with an error that names it', (value) => {
    expect(() => parseLatencyOptions([value])).toThrow(value.split('=')[0] as string);
  });

  it('checks a distribution given over the control endpoint', () => {
    expect(checkLatency('latency.turnstile', { kind: 'lognormal', medianMs: 8_000, sigma: 0.3 })).toEqual({
      kind: 'lognormal',
      medianMs: 8_000,
      sigma: 0.3,
    });
    expect(() => checkLatency('latency.turnstile', { kind: 'lognormal', medianMs: -1, sigma: 0.3 })).toThrow(
      'latency.turnstile',
    );
    expect(() => checkLatency('latency.image', { minMs: 5, maxMs: 1 })).toThrow('latency.image');
  });
});
