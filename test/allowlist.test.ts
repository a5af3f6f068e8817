import { describe, expect, it } from 'vitest';
import {
  checkTargetUrl,
  isHostAllowlisted,
  parseAllowlist,
  type Resolver,
  specialRangeOf,
} from '../functions/shared/allowlist.js';
import { ConfigError, TargetError } from '../functions/shared/errors.js';

/** A resolver from a fixed table; unknown names fail like ENOTFOUND. */
function fakeResolver(table: Record<string, string[]>): Resolver {
  return async (host) => {
    const found = table[host];
    if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return found;
  };
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'OK';
  } catch (err) {
    if (err instanceof TargetError) return err.code;
    throw err;
  }
}

describe('allowlist', () => {
  it('matches exact hosts and *.suffix subdomains, ignoring case and ports', () => {
    // Prepare
    const list = parseAllowlist(['Forms.Example.com:443', '*.partner.org', '[::1]', '127.0.0.1:8080']);
    // Act + Assess
    expect(isHostAllowlisted('forms.example.com', list)).toBe(true);
    expect(isHostAllowlisted('a.partner.org', list)).toBe(true);
    expect(isHostAllowlisted('a.b.partner.org', list)).toBe(true);
    expect(isHostAllowlisted('partner.org', list)).toBe(false);
    expect(isHostAllowlisted('evilpartner.org', list)).toBe(false);
    expect(isHostAllowlisted('other.example.com', list)).toBe(false);
    expect(isHostAllowlisted('::1', list)).toBe(true);
    expect(isHostAllowlisted('127.0.0.1', list)).toBe(true);
  });

  it.each(['*.com', 'http://x.com', 'a b', '*'])(
    'refuses the malformed entry %s naming ALLOWED_HOSTS',
    (entry) => {
      expect(() => parseAllowlist([entry])).toThrow(ConfigError);
      expect(() => parseAllowlist([entry])).toThrow(/ALLOWED_HOSTS/);
    },
  );

  it.each([
    ['127.0.0.1', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.20.0.1', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.169.254', 'link-local'],
    ['100.100.1.1', 'shared (CGNAT)'],
    ['0.0.0.0', 'unspecified'],
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['fd12:3456::1', 'unique local (ULA)'],
    ['fe80::1', 'link-local'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:a9fe:a9fe', 'link-local'],
    ['224.0.0.1', 'multicast'],
  ])('classifies %s as %s', (address, range) => {
    expect(specialRangeOf(address)).toBe(range);
  });

  it.each(['93.184.216.34', '2606:4700::6810:85e5', '8.8.8.8'])('treats %s as public', (address) => {
    expect(specialRangeOf(address)).toBeUndefined();
  });

  it('refuses a suffix-matched host that resolves to a private address, and allows a public one', async () => {
    // Prepare
    const list = parseAllowlist(['*.partner.org']);
    const resolver = fakeResolver({
      'ok.partner.org': ['93.184.216.34'],
      'vpc.partner.org': ['93.184.216.34', '10.0.0.5'],
    });
    // Act + Assess
    expect(await codeOf(checkTargetUrl('https://ok.partner.org/x', list, resolver))).toBe('OK');
    expect(await codeOf(checkTargetUrl('https://vpc.partner.org/x', list, resolver))).toBe(
      'ADDRESS_NOT_ALLOWED',
    );
  });

  it('allows a loopback address only when the exact host is allowlisted', async () => {
    const resolver = fakeResolver({ localhost: ['127.0.0.1'] });
    expect(
      await codeOf(checkTargetUrl('http://localhost:8080/', parseAllowlist(['localhost']), resolver)),
    ).toBe('OK');
    expect(
      await codeOf(checkTargetUrl('http://127.0.0.1:8080/', parseAllowlist(['127.0.0.1']), resolver)),
    ).toBe('OK');
    expect(
      await codeOf(checkTargetUrl('http://[::1]:8080/', parseAllowlist(['*.example.com']), resolver)),
    ).toBe('HOST_NOT_ALLOWED');
  });

  it('refuses hosts off the list, other schemes, credentials and unresolvable names', async () => {
    const list = parseAllowlist(['forms.example.com', 'gone.example.com']);
    const resolver = fakeResolver({ 'forms.example.com': ['93.184.216.34'] });
    expect(await codeOf(checkTargetUrl('https://evil.example.net/', list, resolver))).toBe(
      'HOST_NOT_ALLOWED',
    );
    expect(await codeOf(checkTargetUrl('file:///etc/passwd', list, resolver))).toBe('URL_NOT_ALLOWED');
    expect(await codeOf(checkTargetUrl('https://u:p@forms.example.com/', list, resolver))).toBe(
      'URL_NOT_ALLOWED',
    );
    expect(await codeOf(checkTargetUrl('https://gone.example.com/', list, resolver))).toBe('DNS_FAILED');
  });
});
