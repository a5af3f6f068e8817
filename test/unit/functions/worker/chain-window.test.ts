import { describe, expect, it } from 'vitest';
import { takeWindow } from '../../../../functions/worker/chain-window.js';
import { readWorkerConfig } from '../../../../functions/worker/config.js';
import {
  DEADLINE_MARGIN_MS,
  shortestRecordMs,
  submitFitsMs,
  worstCaseRecordMs,
} from '../../../../functions/worker/worst-case.js';

const ENV = {
  TABLE_NAME: 'outcomes',
  QUEUE_URL: 'http://127.0.0.1:5000/123456789012/jobs',
  QUEUE_ARN: 'arn:aws:sqs:us-east-1:123456789012:jobs',
  DLQ_URL: 'http://127.0.0.1:5000/123456789012/jobs-dlq',
  LEDGER_TABLE: 'slot-ledger',
  CAPTCHAAI_SECRET_NAME: 'threadgate/captchaai-api-key',
  ALLOWED_HOSTS: '127.0.0.1',
  AWS_LAMBDA_FUNCTION_NAME: 'threadgate-worker',
};
const WORST = { timeScale: 1, targetTimeoutMs: 15_000, cooldownMs: 60_000 };
const worst = worstCaseRecordMs(WORST);
const shortest = shortestRecordMs(WORST);

/** The window's length from now, in ms (takeWindow returns performance.now() times). */
function windowMs(env: Record<string, string>, remainingMs: number | undefined): number | undefined {
  const before = performance.now();
  const { chainUntil } = takeWindow(readWorkerConfig({ ...ENV, ...env }), remainingMs);
  return chainUntil === undefined ? undefined : Math.round(chainUntil - before);
}

describe('takeWindow: how long the lanes of an invocation take records', () => {
  it('with one lane is the chain: CHAIN_SECONDS, never while less than a whole worst case is left, and asks nothing before an in.php', () => {
    const config = readWorkerConfig({ ...ENV, CHAIN_SECONDS: '120' });
    expect(takeWindow(config, 900_000).submitFits).toBeUndefined();
    expect(windowMs({ CHAIN_SECONDS: '120' }, 900_000)).toBeCloseTo(
      Math.min(120_000, 900_000 - DEADLINE_MARGIN_MS - worst),
      -2,
    );
    expect(windowMs({ CHAIN_SECONDS: '120' }, worst + DEADLINE_MARGIN_MS - 1)).toBeUndefined();
  });

  it('with lanes runs on while the shortest work fits: the chain plus what it saves on the worst case, never past the timeout less the shortest work', () => {
    // At the stack's defaults the function timeout is the worst case plus the chain (900 s).
    const chain = 900_000 - worst;
    const env = { CHAIN_SECONDS: String(chain / 1000), LANES: '4', INITIAL_CAP: '12' };
    expect(windowMs(env, 900_000)).toBeCloseTo(900_000 - DEADLINE_MARGIN_MS - shortest, -2);
    expect(windowMs(env, 900_000)).toBeGreaterThan(3 * chain);
    // A longer timeout than the chain needs: the chain plus the saving bounds it.
    expect(windowMs(env, 2_000_000)).toBeCloseTo(chain + worst - shortest, -2);
    // Less than the shortest work left: no take at all.
    expect(windowMs(env, shortest + DEADLINE_MARGIN_MS - 1)).toBeUndefined();
  });

  it('with lanes asks before each in.php whether the shortest work from there still fits', () => {
    const config = readWorkerConfig({ ...ENV, CHAIN_SECONDS: '100', LANES: '4', INITIAL_CAP: '12' });
    const fits = submitFitsMs(WORST) + DEADLINE_MARGIN_MS;
    expect(takeWindow(config, fits + 60_000).submitFits?.()).toBe(true);
    expect(takeWindow(config, fits - 1).submitFits?.()).toBe(false);
  });
});
