import { describe, expect, it } from 'vitest';
import { ConfigError, DnsUnavailableError, TargetError } from '../../../../functions/common/errors.js';
import {
  checkTargetUrl,
  isHostAllowlisted,
  parseAllowlist,
  type Resolver,
  specialRangeOf,
} from '../../../../functions/target/allowlist.js';

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

  // [address, the range it must be refused as]. Embedded IPv4 forms are judged by the IPv4 inside.
  const SPECIAL: Array<[string, RegExp]> = [
    ['127.0.0.1', /^loopback$/],
    ['127.255.255.254', /^loopback$/],
    ['10.1.2.3', /^private$/],
    ['172.16.0.1', /^private$/],
    ['172.31.255.255', /^private$/],
    ['192.168.1.1', /^private$/],
    ['100.64.0.1', /CGNAT/],
    ['100.127.255.254', /CGNAT/],
    ['169.254.169.254', /^link-local$/],
    ['169.254.0.1', /link-local/],
    ['0.0.0.0', /^unspecified$/],
    ['0.1.2.3', /^unspecified$/],
    ['192.0.0.8', /reserved/],
    ['192.0.2.10', /reserved/],
    ['198.51.100.7', /reserved/],
    ['203.0.113.9', /reserved/],
    ['198.18.0.1', /reserved/],
    ['198.19.255.254', /reserved/],
    ['240.0.0.1', /reserved/],
    ['250.1.2.3', /reserved/],
    ['255.255.255.255', /^broadcast$/],
    ['224.0.0.1', /^multicast$/],
    ['239.255.255.250', /^multicast$/],
    ['::', /^unspecified$/],
    ['::1', /^loopback$/],
    ['0:0:0:0:0:0:0:1', /^loopback$/],
    ['fd12:3456::1', /unique local/],
    ['fc00::1', /unique local/],
    ['fe80::1', /^link-local/],
    ['fe80::1%eth0', /zone id/],
    ['fec0::1', /site-local/],
    ['ff02::1', /^multicast$/],
    ['2001:db8::1', /reserved/],
    ['3fff::1', /reserved/],
    ['100::1', /discard/],
    ['::ffff:127.0.0.1', /IPv4-mapped form of 127\.0\.0\.1, loopback/],
    ['::ffff:7f00:1', /IPv4-mapped form of 127\.0\.0\.1, loopback/],
    ['0:0:0:0:0:ffff:7f00:1', /IPv4-mapped form of 127\.0\.0\.1, loopback/],
    ['0000:0000:0000:0000:0000:ffff:127.0.0.1', /IPv4-mapped form of 127\.0\.0\.1, loopback/],
    ['::ffff:a9fe:a9fe', /IPv4-mapped form of 169\.254\.169\.254, link-local/],
    ['::ffff:0:10.0.0.1', /IPv4-mapped form of 10\.0\.0\.1, private/],
    // ipaddr.js reads the dotted compatible form as mapped; either way the IPv4 inside decides.
    ['::127.0.0.1', /IPv4-(mapped|compatible) form of 127\.0\.0\.1, loopback/],
    ['::a9fe:a9fe', /IPv4-compatible form of 169\.254\.169\.254/],
    ['64:ff9b::127.0.0.1', /NAT64 form of 127\.0\.0\.1, loopback/],
    ['64:ff9b::a9fe:a9fe', /NAT64 form of 169\.254\.169\.254/],
    ['64:ff9b:1::a9fe:a9fe', /local-use NAT64/],
    ['64:ff9b:1::808:808', /local-use NAT64/],
    ['2002:7f00:1::', /6to4 form of 127\.0\.0\.1, loopback/],
    ['2002:a9fe:a9fe::', /6to4 form of 169\.254\.169\.254/],
    ['2002:c0a8:101::1', /6to4 form of 192\.168\.1\.1, private/],
    ['2001::1', /Teredo form of 0\.0\.0\.0, unspecified/],
    // Teredo: server 8.8.8.8, client ~(7f ff ff fe... ) = 127.0.0.1 after the XOR.
    ['2001:0:808:808::80ff:fffe', /Teredo form of 127\.0\.0\.1, loopback/],
    ['2001:2::1', /benchmarking/],
    ['4000::1', /not global unicast/],
  ];

  it.each(SPECIAL)('refuses %s as %s', (address, range) => {
    expect(specialRangeOf(address)).toMatch(range);
  });

  it('covers at least 40 special addresses', () => {
    expect(SPECIAL.length).toBeGreaterThanOrEqual(40);
  });

  it.each([
    '93.184.216.34',
    '8.8.8.8',
    '1.1.1.1',
    '100.63.255.255',
    '172.32.0.1',
    '2606:4700::6810:85e5',
    '::ffff:8.8.8.8',
    '64:ff9b::808:808',
    '2002:808:808::1',
    '2001:0:808:808::f7f7:f7f7',
  ])('treats %s as public', (address) => {
    expect(specialRangeOf(address)).toBeUndefined();
  });

  it.each(['example.com', '127.1', '1.2.3.4.5'])('calls %s not an IP address', (text) => {
    expect(specialRangeOf(text)).toBe('not an IP address');
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

describe('checkTargetUrl: resolver failures', () => {
  const list = parseAllowlist(['*.example.com']);
  it.each(['EAI_AGAIN', 'ESERVFAIL', 'ETIMEOUT', 'ECONNREFUSED'])(
    '%s is a resolver hiccup: DnsUnavailableError DNS_UNAVAILABLE, retried, not a bad host',
    async (code) => {
      const resolver: Resolver = async () => {
        throw Object.assign(new Error(`query ${code}`), { code });
      };
      const err = await checkTargetUrl('https://forms.example.com/', list, resolver).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DnsUnavailableError);
      expect(err).toMatchObject({ code: 'DNS_UNAVAILABLE' });
    },
  );

  it.each(['ENOTFOUND', 'ENODATA', undefined])(
    '%s says the host does not resolve: DNS_FAILED',
    async (code) => {
      const resolver: Resolver = async () => {
        throw Object.assign(new Error('no such host'), code === undefined ? {} : { code });
      };
      const err = await checkTargetUrl('https://forms.example.com/', list, resolver).catch((e: unknown) => e);
      expect(err).not.toBeInstanceOf(DnsUnavailableError);
      expect(err).toMatchObject({ code: 'DNS_FAILED' });
    },
  );
});
