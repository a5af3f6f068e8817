import { describe, expect, it } from 'vitest';
import { DEFAULT_TIMINGS } from '../../../../functions/captchaai/timings.js';
import { DEFAULTS } from '../../../../functions/common/settings.js';
import { worstCaseRecordMs } from '../../../../functions/worker/worst-case.js';
import { resolveConfig } from '../../../../infra/config.js';
import {
  LEASE_MARGIN_SECONDS,
  LOCAL_ABANDON_AFTER_MS,
  localCooldownMs,
  localSettings,
} from '../../../../local/stack/local-stack.js';

const BASE = { threads: 8, reserve: 2, timeScale: 0.01, captchaaiUrl: 'http://127.0.0.1:9' };

describe('the local stack settings', () => {
  it("deploy a worker timeout that is the worker's worst case plus the chain, and a visibility timeout just beyond the lease", () => {
    const settings = localSettings(BASE);
    const config = resolveConfig(settings);
    expect(config.workerTimeoutSeconds).toBe(
      // The chain's 120 s × 0.01, rounded up.
      Math.ceil(worstCaseRecordMs({ timeScale: 0.01, targetTimeoutMs: 5000, cooldownMs: 600 }) / 1000) + 2,
    );
    expect(config.chainSeconds).toBe(1.2);
    expect(config.visibilityTimeoutSeconds).toBe(config.leaseSeconds + LEASE_MARGIN_SECONDS);
    expect(config.leaseSeconds).toBeGreaterThan(config.workerTimeoutSeconds);
  });

  it("keep the slot after a deadline until the local stand-in has released the abandoned task's thread", () => {
    // A task that never finishes holds its thread until LOCAL_ABANDON_AFTER_MS after in.php; the
    // worker gives it up at its deadline and then keeps the slot for the cool-down.
    const { cooldownMs } = resolveConfig(localSettings(BASE));
    expect(DEFAULT_TIMINGS.deadlineMs + cooldownMs / BASE.timeScale).toBeGreaterThanOrEqual(
      LOCAL_ABANDON_AFTER_MS,
    );
    expect(localCooldownMs(1)).toBe(DEFAULTS.cooldownMs);
  });

  it('fit the worst case at time scale 1 within Lambda’s limit', () => {
    expect(resolveConfig(localSettings({ ...BASE, timeScale: 1 })).workerTimeoutSeconds).toBeLessThanOrEqual(
      900,
    );
  });

  it('keep a visibility timeout given explicitly', () => {
    expect(
      localSettings({ ...BASE, extra: { visibilityTimeoutSeconds: 500 } }).visibilityTimeoutSeconds,
    ).toBe(500);
  });
});
