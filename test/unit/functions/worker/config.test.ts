import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../../../functions/common/errors.js';
import { MIN_CAPTCHAAI_HTTP_TIMEOUT_MS, readWorkerConfig } from '../../../../functions/worker/config.js';

const env = {
  TABLE_NAME: 'outcomes',
  QUEUE_URL: 'http://localhost:5000/123456789012/jobs',
  QUEUE_ARN: 'arn:aws:sqs:us-east-1:123456789012:jobs',
  DLQ_URL: 'http://localhost:5000/123456789012/jobs-dlq',
  LEDGER_TABLE: 'slot-ledger',
  CAPTCHAAI_SECRET_NAME: 'threadgate/captchaai-api-key',
  ALLOWED_HOSTS: 'forms.example.com, *.partner.org, 127.0.0.1:8080',
  AWS_LAMBDA_FUNCTION_NAME: 'threadgate-worker',
};

describe('worker config', () => {
  it('reads the contract variables with their defaults', () => {
    const config = readWorkerConfig(env);
    expect(config).toMatchObject({
      tableName: 'outcomes',
      captchaAiUrl: 'https://ocr.captchaai.com',
      timeScale: 1,
      leaseMs: 900_000,
      transientReceiveLimit: 3,
      targetTimeoutMs: 15_000,
      cooldownMs: 60_000,
      functionName: 'threadgate-worker',
    });
    expect([...config.allowlist.exact]).toEqual(['forms.example.com', '127.0.0.1']);
    expect(config.allowlist.suffixes).toEqual(['.partner.org']);
  });

  it('reads the tuning variables', () => {
    const config = readWorkerConfig({
      ...env,
      LEASE_SECONDS: '120',
      TRANSIENT_RECEIVE_LIMIT: '4',
      TARGET_TIMEOUT_MS: '2000',
      COOLDOWN_MS: '0',
      TIME_SCALE: '0.05',
      CAPTCHAAI_POLL_INTERVAL_MS: '1000',
      RETRY_DELAY_SECONDS: '7',
    });
    expect(config).toMatchObject({
      retryDelaySeconds: 7,
      captchaTimings: {
        pollIntervalMs: {
          recaptcha_v2: 1000,
          recaptcha_v3: 1000,
          recaptcha_enterprise: 1000,
          turnstile: 1000,
          image: 1000,
        },
      },
      leaseMs: 120_000,
      transientReceiveLimit: 4,
      targetTimeoutMs: 2000,
      cooldownMs: 0,
      timeScale: 0.05,
    });
  });

  it('keeps the CaptchaAI HTTP timeout at 2 s or more in real time however fast the time scale', () => {
    const scaled = readWorkerConfig({ ...env, TIME_SCALE: '0.01' });
    const unscaled = readWorkerConfig({ ...env, TIME_SCALE: '1', CAPTCHAAI_HTTP_TIMEOUT_MS: '20000' });
    expect((scaled.captchaTimings.httpTimeoutMs ?? 0) * scaled.timeScale).toBeCloseTo(
      MIN_CAPTCHAAI_HTTP_TIMEOUT_MS,
    );
    expect(MIN_CAPTCHAAI_HTTP_TIMEOUT_MS).toBe(2_000);
    expect(unscaled.captchaTimings.httpTimeoutMs).toBe(20_000);
  });

  it('reads DNS_SERVERS as IP addresses with optional ports, and names the variable when one is not', () => {
    expect(readWorkerConfig(env).dnsServers).toEqual([]);
    expect(readWorkerConfig({ ...env, DNS_SERVERS: '10.0.0.2, 127.0.0.1:5353,[::1]:53' }).dnsServers).toEqual(
      ['10.0.0.2', '127.0.0.1:5353', '[::1]:53'],
    );
    expect(() => readWorkerConfig({ ...env, DNS_SERVERS: 'dns.example.com' })).toThrow(
      /^DNS_SERVERS: "dns.example.com" is not an IP address/,
    );
  });

  it("reads FORM_EXPECT as the stack's default expect block: none when unset, refused by name when bad", () => {
    expect(readWorkerConfig(env).formExpect).toBeUndefined();
    expect(readWorkerConfig({ ...env, FORM_EXPECT: '{"body_excludes":["failed"]}' }).formExpect).toEqual({
      body_excludes: ['failed'],
    });
    expect(() => readWorkerConfig({ ...env, FORM_EXPECT: '{"body_regex":"x"}' })).toThrow(/^FORM_EXPECT: /);
  });

  it('reads QUEUE_VISIBILITY_SECONDS, none when unset, refused outside SQS’s 1–43,200 s', () => {
    expect(readWorkerConfig(env).queueVisibilitySeconds).toBeUndefined();
    expect(readWorkerConfig({ ...env, QUEUE_VISIBILITY_SECONDS: '5358' }).queueVisibilitySeconds).toBe(5358);
    expect(() => readWorkerConfig({ ...env, QUEUE_VISIBILITY_SECONDS: '0' })).toThrow(
      /^QUEUE_VISIBILITY_SECONDS/,
    );
  });

  it('reads CHAIN_SECONDS as the chain window in ms: none when unset, refused below 0 or above 900', () => {
    expect(readWorkerConfig(env).chainMs).toBe(0);
    expect(readWorkerConfig({ ...env, CHAIN_SECONDS: '1.2' }).chainMs).toBe(1200);
    expect(() => readWorkerConfig({ ...env, CHAIN_SECONDS: '-1' })).toThrow(/^CHAIN_SECONDS/);
    expect(() => readWorkerConfig({ ...env, CHAIN_SECONDS: '901' })).toThrow(/^CHAIN_SECONDS/);
  });

  it('reads OUTCOME_RETENTION_DAYS: rows kept for ever when unset, refused below 1 or when not whole', () => {
    expect(readWorkerConfig(env).outcomeRetentionDays).toBeUndefined();
    expect(readWorkerConfig({ ...env, OUTCOME_RETENTION_DAYS: '90' }).outcomeRetentionDays).toBe(90);
    expect(() => readWorkerConfig({ ...env, OUTCOME_RETENTION_DAYS: '0' })).toThrow(
      /^OUTCOME_RETENTION_DAYS/,
    );
    expect(() => readWorkerConfig({ ...env, OUTCOME_RETENTION_DAYS: '1.5' })).toThrow(
      /^OUTCOME_RETENTION_DAYS/,
    );
  });

  it('reads the ledger table, the cap deployed and, with lanes, the first shape (that of INITIAL_CAP)', () => {
    expect(readWorkerConfig(env)).toMatchObject({ ledgerTable: 'slot-ledger', lanes: 1 });
    expect(readWorkerConfig(env).firstShape).toBeUndefined();
    expect(readWorkerConfig({ ...env, LANES: '4', INITIAL_CAP: '12' })).toMatchObject({
      firstCap: 12,
      lanes: 4,
      firstShape: { cap: 12, r: 3, L: 4, since: 0 },
    });
  });

  it('gives a retried message a visibility of 30 s times the time scale, at least 1 s', () => {
    expect(readWorkerConfig({ ...env, TIME_SCALE: '1' }).retryDelaySeconds).toBe(30);
    expect(readWorkerConfig({ ...env, TIME_SCALE: '0.01' }).retryDelaySeconds).toBe(1);
  });

  it.each([
    ['TABLE_NAME', { TABLE_NAME: '' }],
    // The slot ledger's table also holds the state item: no worker runs without it.
    ['LEDGER_TABLE', { LEDGER_TABLE: undefined }],
    ['INITIAL_CAP', { LANES: '4' }],
    ['ALLOWED_HOSTS', { ALLOWED_HOSTS: ' , ' }],
    ['ALLOWED_HOSTS', { ALLOWED_HOSTS: 'http://x.com' }],
    ['LEASE_SECONDS', { LEASE_SECONDS: 'soon' }],
    ['TRANSIENT_RECEIVE_LIMIT', { TRANSIENT_RECEIVE_LIMIT: '0' }],
    ['CAPTCHAAI_POLL_INTERVAL_MS', { CAPTCHAAI_POLL_INTERVAL_MS: 'fast' }],
    ['AWS_LAMBDA_FUNCTION_NAME', { AWS_LAMBDA_FUNCTION_NAME: undefined }],
  ])('names %s when it is missing or malformed', (setting, patch) => {
    let error: unknown;
    try {
      readWorkerConfig({ ...env, ...patch });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).setting).toBe(setting);
  });
});
