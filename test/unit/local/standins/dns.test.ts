import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dnsServerResolver } from '../../../../functions/target/allowlist.js';
import { DnsStandin } from '../../../../local/standins/dns.js';

let dns: DnsStandin;
beforeAll(async () => {
  dns = await DnsStandin.start({ 'form.test': ['127.0.0.1', '127.0.0.2'] });
});
afterAll(async () => {
  await dns?.stop();
});

describe('DNS stand-in and the DNS-server resolver', () => {
  it('answers A from its table and AAAA with no data: the resolver returns the IPv4 addresses', async () => {
    const resolve = dnsServerResolver([dns.server]);
    expect((await resolve('form.test')).sort()).toEqual(['127.0.0.1', '127.0.0.2']);
    expect(
      dns
        .queries('form.test')
        .map((q) => `${q.type}:${q.answered}`)
        .sort(),
    ).toEqual(['A:address', 'AAAA:nodata']);
  });

  it('answers an unknown name with NXDOMAIN, which the resolver reports as ENOTFOUND', async () => {
    await expect(dnsServerResolver([dns.server])('nowhere.test')).rejects.toMatchObject({
      code: 'ENOTFOUND',
    });
  });

  it('fails a name with SERVFAIL (ESERVFAIL) or silence (ETIMEOUT) until cleared', async () => {
    const resolve = dnsServerResolver([dns.server]);
    dns.setFault('form.test', 'servfail');
    await expect(resolve('form.test')).rejects.toMatchObject({ code: 'ESERVFAIL' });
    dns.setFault('form.test', 'drop');
    // No answer at all: the resolver gives up after its timeout (short here).
    await expect(
      dnsServerResolver([dns.server], { timeoutMs: 200, tries: 1 })('form.test'),
    ).rejects.toMatchObject({
      code: 'ETIMEOUT',
    });
    dns.setFault('form.test', undefined);
    await expect(resolve('form.test')).resolves.toContain('127.0.0.1');
  });
});
