import { CaptchaAiClient } from '../../functions/captchaai/client.js';
import { ConfigError } from '../../functions/common/errors.js';
import { specialRangeOf } from '../../functions/target/allowlist.js';

/**
 * The CaptchaAI-compatible server a local stack uses instead of its own stand-in
 * (`threadgate local --captchaai-url URL`, key from CAPTCHAAI_API_KEY): another stand-in, a
 * team's own emulator, or, only when asked for explicitly, a remote service such as CaptchaAI
 * itself. The local stack only ever talks to loopback addresses on its own, so a URL whose
 * host is not loopback is refused unless `allowRemote` is set.
 */
export interface ExternalCaptchaai {
  /** Base URL without a trailing slash. */
  url: string;
  apiKey: string;
  /** The host is loopback (localhost, 127.0.0.0/8, ::1). */
  loopback: boolean;
}

/** localhost, or an address literal in a loopback range (IPv4 127/8, IPv6 ::1). */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/\.$/, '');
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  return specialRangeOf(host) === 'loopback';
}

/**
 * Validates `--captchaai-url` and CAPTCHAAI_API_KEY. Throws a ConfigError naming the setting:
 * a missing key, a URL that is not http(s) or carries credentials, a path, query or fragment,
 * or a host that is not loopback without `allowRemote`.
 */
export function externalCaptchaai(
  rawUrl: string,
  apiKey: string | undefined,
  options: { allowRemote?: boolean } = {},
): ExternalCaptchaai {
  const key = apiKey?.trim() ?? '';
  if (key === '') {
    throw new ConfigError('CAPTCHAAI_API_KEY', "not set; --captchaai-url needs that server's API key in it");
  }
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new ConfigError('--captchaai-url', `not a URL: "${rawUrl}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new ConfigError('--captchaai-url', `must be http:// or https://, got ${url.protocol}`);
  if (url.username || url.password)
    throw new ConfigError(
      '--captchaai-url',
      'must not carry credentials (the key goes in CAPTCHAAI_API_KEY)',
    );
  if (url.search || url.hash)
    throw new ConfigError('--captchaai-url', 'must be a base URL without a query or fragment');
  const loopback = isLoopbackHost(url.hostname);
  if (!loopback && options.allowRemote !== true) {
    throw new ConfigError(
      '--captchaai-url',
      `host ${url.hostname} is not a loopback address; the local stack only talks to loopback servers unless --allow-remote-captchaai says to send the key and the tasks there`,
    );
  }
  return { url: url.href.replace(/\/+$/, ''), apiKey: key, loopback };
}

/**
 * Asks the server for its plan (threadsinfo) before anything is deployed, so a wrong URL or
 * key fails at once with the server's answer, and the stack starts with the cap the plan allows.
 */
export async function planThreadsOf(server: ExternalCaptchaai): Promise<number> {
  // Time scale 1: one call, whose HTTP timeout must not shrink with the stack's time scale.
  const client = new CaptchaAiClient({ apiKey: server.apiKey, baseUrl: server.url });
  try {
    return (await client.threadsInfo()).threads;
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new ConfigError('--captchaai-url', `${server.url} did not tell its plan (threadsinfo): ${why}`, {
      cause: err,
    });
  }
}
