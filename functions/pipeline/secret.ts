import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { ConfigError, StopClassError } from '../common/errors.js';
import { clientOf, type LazyClient } from '../common/lazy-client.js';

/**
 * The CaptchaAI API key, read from Secrets Manager and kept for at most `maxAgeMs`, so a key
 * stored with `threadgate secret set` reaches warm execution environments without a redeploy.
 * The key is never logged or put in an error message. The secret may hold the bare key or
 * JSON `{"apiKey": "..."}`.
 *
 * Why not Powertools' `getSecret({ maxAge })`: @aws-lambda-powertools/parameters pins its own
 * exact version of @aws-lambda-powertools/commons, one release behind the logger and metrics
 * this project uses, so adding it would bundle two copies of commons. A read-through cache of
 * one value is a few lines on the SDK client the functions already have.
 */

/** How long a key read from the secret is used before it is read again. */
export const DEFAULT_KEY_MAX_AGE_MS = 5 * 60_000;

export interface ApiKeySourceOptions {
  /** The client, or a factory that makes it on the first read (the worker's: one read per environment). */
  client: LazyClient<SecretsManagerClient>;
  secretName: string;
  /** @default DEFAULT_KEY_MAX_AGE_MS */
  maxAgeMs?: number;
  /** @default Date.now */
  now?: () => number;
}

export class ApiKeySource {
  readonly secretName: string;
  readonly #client: LazyClient<SecretsManagerClient>;
  readonly #maxAgeMs: number;
  readonly #now: () => number;
  #cached: { key: Promise<string>; readAt: number } | undefined;

  constructor(o: ApiKeySourceOptions) {
    if (!(o.maxAgeMs === undefined || (Number.isFinite(o.maxAgeMs) && o.maxAgeMs >= 0))) {
      throw new ConfigError('maxAgeMs', `must be a number >= 0, got ${o.maxAgeMs}`);
    }
    this.secretName = o.secretName;
    this.#client = o.client;
    this.#maxAgeMs = o.maxAgeMs ?? DEFAULT_KEY_MAX_AGE_MS;
    this.#now = o.now ?? Date.now;
  }

  /** The key, read again when the cached one is older than maxAgeMs. */
  get(): Promise<string> {
    const cached = this.#cached;
    if (cached && this.#now() - cached.readAt < this.#maxAgeMs) return cached.key;
    return this.refresh();
  }

  /** Drops the cached key: the next `get()` reads the secret. */
  forget(): void {
    this.#cached = undefined;
  }

  /** Reads the secret now (the cache follows); concurrent callers share one read. */
  refresh(): Promise<string> {
    const entry = { key: readApiKey(this.#client, this.secretName), readAt: this.#now() };
    this.#cached = entry;
    // A failed read must not stick: the next call tries again.
    entry.key.catch(() => {
      if (this.#cached === entry) this.#cached = undefined;
    });
    return entry.key;
  }
}

/**
 * Runs `call` with the current key. On a stop-class answer the secret is read again before
 * the caller pauses anything: when an operator has stored a new key, the stop was the old
 * key's, so `call` runs once more with the new key. Without a change (or when the re-read
 * fails) the stop-class error stands. `retryable` lets a caller refuse the second run, e.g.
 * when the first one may have left a CaptchaAI task holding a thread.
 */
export async function withFreshKeyOnStop<T>(
  keys: ApiKeySource,
  call: (key: string) => Promise<T>,
  retryable: (err: StopClassError) => boolean = () => true,
): Promise<T> {
  const key = await keys.get();
  try {
    return await call(key);
  } catch (err) {
    if (!(err instanceof StopClassError) || !retryable(err)) throw err;
    let fresh: string;
    try {
      fresh = await keys.refresh();
    } catch {
      throw err;
    }
    if (fresh === key) throw err;
    return call(fresh);
  }
}

async function readApiKey(client: LazyClient<SecretsManagerClient>, secretName: string): Promise<string> {
  // Imported here, not at the top: a worker that has not read its key yet has not loaded the module.
  const { GetSecretValueCommand } = await import('@aws-sdk/client-secrets-manager');
  const out = await (await clientOf(client)).send(new GetSecretValueCommand({ SecretId: secretName }));
  const raw = out.SecretString?.trim();
  if (!raw) throw new ConfigError('CAPTCHAAI_SECRET_NAME', `secret "${secretName}" has no string value`);
  if (raw.startsWith('{')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      throw new ConfigError(
        'CAPTCHAAI_SECRET_NAME',
        `secret "${secretName}" looks like JSON but does not parse`,
      );
    }
    const key = (parsed as { apiKey?: unknown }).apiKey;
    if (typeof key !== 'string' || key === '') {
      throw new ConfigError(
        'CAPTCHAAI_SECRET_NAME',
        `secret "${secretName}" is JSON without a string "apiKey"`,
      );
    }
    return key;
  }
  return raw;
}
