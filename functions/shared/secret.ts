import { GetSecretValueCommand, type SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { ConfigError } from './errors.js';

/**
 * Reads the CaptchaAI API key from Secrets Manager once per secret name and keeps it for the
 * life of the Lambda instance. The key is never logged or put in an error message.
 * The secret may hold the bare key or JSON `{"apiKey": "..."}`.
 */
const cache = new Map<string, Promise<string>>();

export function getApiKey(client: SecretsManagerClient, secretName: string): Promise<string> {
  let pending = cache.get(secretName);
  if (!pending) {
    pending = readApiKey(client, secretName);
    cache.set(secretName, pending);
    // A failed read must not stick: the next invocation tries again.
    pending.catch(() => cache.delete(secretName));
  }
  return pending;
}

/** Forget cached keys (after a rotation, or between tests). */
export function clearApiKeyCache(): void {
  cache.clear();
}

async function readApiKey(client: SecretsManagerClient, secretName: string): Promise<string> {
  const out = await client.send(new GetSecretValueCommand({ SecretId: secretName }));
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
