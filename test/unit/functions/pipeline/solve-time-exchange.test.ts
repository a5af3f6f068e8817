import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { describe, expect, it } from 'vitest';
import {
  CLOCK_SKEW_MS,
  exchangeEveryMs,
  MIN_EXCHANGE_EVERY_MS,
  readSharedItem,
  SOLVE_TIME_EXCHANGE_DEFAULTS,
} from '../../../../functions/pipeline/solve-time-exchange.js';

const NOW = 10_000_000;
const item = (
  o: { sk?: string; intervals?: string; updatedAt?: number } = {},
): Record<string, AttributeValue> => ({
  pk: { S: 'solve-times' },
  sk: { S: o.sk ?? 'recaptcha_v2#3' },
  environment: { S: 'env-b' },
  intervals: { S: o.intervals ?? '1000-2000,3000-3500' },
  updated_at: { N: String(o.updatedAt ?? NOW - 1_000) },
});
const read = (i: Record<string, AttributeValue>) => readSharedItem(i, NOW, SOLVE_TIME_EXCHANGE_DEFAULTS);

describe("exchangeEveryMs: the worker's period between two exchanges", () => {
  it('is 15 s at time scale 1, scaled below it, and never below the real-time floor', () => {
    expect(exchangeEveryMs(1)).toBe(SOLVE_TIME_EXCHANGE_DEFAULTS.everyMs);
    expect(exchangeEveryMs(0.5)).toBe(7_500);
    expect(exchangeEveryMs(0.01)).toBe(MIN_EXCHANGE_EVERY_MS);
    expect(exchangeEveryMs(0.2)).toBe(MIN_EXCHANGE_EVERY_MS);
  });
});

describe('readSharedItem: what one shared item may carry', () => {
  it('reads an item an environment of this stack wrote', () => {
    expect(read(item())).toEqual({
      type: 'recaptcha_v2',
      environment: 'env-b',
      intervals: [
        { lowMs: 1_000, highMs: 2_000 },
        { lowMs: 3_000, highMs: 3_500 },
      ],
    });
  });

  it.each([
    ['a slot beyond the configured ones', item({ sk: 'recaptcha_v2#32' })],
    ['an unknown type', item({ sk: 'hcaptcha#1' })],
    ['a date in the future', item({ updatedAt: NOW + CLOCK_SKEW_MS + 1 })],
    ['a date older than the age limit', item({ updatedAt: NOW - SOLVE_TIME_EXCHANGE_DEFAULTS.maxAgeMs - 1 })],
    ['no date', { ...item(), updated_at: { S: 'soon' } }],
    ['more answers than an environment shares', item({ intervals: Array(65).fill('1000-1000').join(',') })],
    ['a time beyond the task deadline', item({ intervals: '1000-2000,1000-120001' })],
  ])('refuses %s', (_, raw) => {
    expect(read(raw)).toBeUndefined();
  });
});
