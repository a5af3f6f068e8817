import { lookup as dnsLookup } from 'node:dns/promises';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { ConfigError, TargetError } from './errors.js';

/**
 * Which target hosts the worker may contact (docs/design.md invariant 6).
 *
 * Rules:
 * - An entry is an exact host (`forms.example.com`, `127.0.0.1`, `[::1]`) or `*.suffix`
 *   (`*.example.com` matches `a.example.com` and `a.b.example.com`, not `example.com` itself).
 *   A `:port` on an entry is ignored; hosts compare case-insensitively.
 * - A host that is allowlisted must also resolve only to public addresses: loopback, private,
 *   link-local, unspecified, CGNAT, IPv6 ULA, multicast and other special ranges are refused,
 *   unless the EXACT host is on the list (a `*.suffix` never unlocks a private address, so a
 *   wildcard DNS name cannot be pointed at the VPC or the metadata service).
 * - The check runs on every redirect hop and again when a connection is opened (the guarded
 *   lookup), so DNS cannot change the answer between the check and the connect.
 */
export interface Allowlist {
  readonly exact: ReadonlySet<string>;
  /** Suffixes with their leading dot, e.g. `.example.com`. */
  readonly suffixes: readonly string[];
}

/** Resolves a host name to all its addresses (IPv4 and IPv6). Injected in tests. */
export type Resolver = (host: string) => Promise<string[]>;

export const systemResolver: Resolver = async (host) =>
  (await dnsLookup(host, { all: true, verbatim: true })).map((entry) => entry.address);

function normalizeHost(raw: string): string {
  let host = raw.trim().toLowerCase();
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    host = end === -1 ? host.slice(1) : host.slice(1, end);
  } else if (isIP(host) !== 6) {
    host = host.replace(/:\d+$/, ''); // optional :port, ignored
  }
  return host.replace(/\.$/, '');
}

/** Parses ALLOWED_HOSTS entries; a malformed entry is a ConfigError naming the variable. */
export function parseAllowlist(entries: readonly string[], setting = 'ALLOWED_HOSTS'): Allowlist {
  const exact = new Set<string>();
  const suffixes: string[] = [];
  for (const entry of entries) {
    const host = normalizeHost(entry);
    if (host.startsWith('*.')) {
      const suffix = host.slice(1);
      if (!/^(\.[a-z0-9-]+)+$/.test(suffix) || suffix.split('.').length < 3) {
        throw new ConfigError(setting, `"${entry}" is not a valid *.suffix entry (e.g. *.example.com)`);
      }
      suffixes.push(suffix);
    } else if (isIP(host) !== 0 || /^[a-z0-9-]+(\.[a-z0-9-]+)*$/.test(host)) {
      exact.add(host);
    } else {
      throw new ConfigError(setting, `"${entry}" is not a host name, an IP address or a *.suffix entry`);
    }
  }
  return { exact, suffixes };
}

export function isHostAllowlisted(host: string, allowlist: Allowlist): boolean {
  const h = normalizeHost(host);
  return allowlist.exact.has(h) || allowlist.suffixes.some((suffix) => h.endsWith(suffix));
}

const special = new BlockList();
const SPECIAL_V4: Array<[string, number, string]> = [
  ['0.0.0.0', 8, 'unspecified'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'shared (CGNAT)'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'IETF protocol assignments'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'],
];
const SPECIAL_V6: Array<[string, number, string]> = [
  ['::', 128, 'unspecified'],
  ['::1', 128, 'loopback'],
  ['fc00::', 7, 'unique local (ULA)'],
  ['fe80::', 10, 'link-local'],
  ['fec0::', 10, 'site-local'],
  ['ff00::', 8, 'multicast'],
  ['2001:db8::', 32, 'documentation'],
  ['100::', 64, 'discard'],
];
for (const [net, prefix] of SPECIAL_V4) special.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of SPECIAL_V6) special.addSubnet(net, prefix, 'ipv6');

function v4Of(ip: string): number {
  return ip.split('.').reduce((acc, part) => acc * 256 + Number(part), 0);
}

function inV4(ip: string, net: string, prefix: number): boolean {
  const size = 2 ** (32 - prefix);
  return Math.floor(v4Of(ip) / size) === Math.floor(v4Of(net) / size);
}

/** The IPv4 address embedded in an IPv4-mapped (::ffff:a.b.c.d), NAT64 or compatible IPv6 address. */
function embeddedV4(ip: string): string | undefined {
  const m = /^(?:::ffff:(?:0:)?|64:ff9b::|::)(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (m?.[1]) return m[1];
  const hex = /^(?:::ffff:(?:0:)?|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(ip);
  if (hex?.[1] && hex[2]) {
    const hi = Number.parseInt(hex[1], 16);
    const lo = Number.parseInt(hex[2], 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return undefined;
}

/** Names the special range an address is in (`loopback`, `private`, …), or undefined for a public one. */
export function specialRangeOf(address: string): string | undefined {
  const ip = normalizeHost(address);
  const version = isIP(ip);
  if (version === 4) {
    if (ip === '255.255.255.255') return 'broadcast';
    return SPECIAL_V4.find(([net, prefix]) => inV4(ip, net, prefix))?.[2];
  }
  if (version === 6) {
    const v4 = embeddedV4(ip);
    if (v4) return specialRangeOf(v4);
    if (!special.check(ip, 'ipv6')) return undefined;
    return SPECIAL_V6.find(([net, prefix]) => {
      const one = new BlockList();
      one.addSubnet(net, prefix, 'ipv6');
      return one.check(ip, 'ipv6');
    })?.[2];
  }
  return 'not an IP address';
}

/**
 * Checks that a URL may be contacted: http(s), no credentials, an allowlisted host, and
 * (unless the exact host is allowlisted) only public addresses. Returns the addresses the
 * host resolved to. Throws TargetError with code URL_NOT_ALLOWED, HOST_NOT_ALLOWED,
 * ADDRESS_NOT_ALLOWED or DNS_FAILED.
 */
export async function checkTargetUrl(
  url: string | URL,
  allowlist: Allowlist,
  resolver: Resolver,
): Promise<string[]> {
  let parsed: URL;
  try {
    parsed = typeof url === 'string' ? new URL(url) : url;
  } catch {
    throw new TargetError('URL_NOT_ALLOWED', 'not an absolute URL');
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new TargetError('URL_NOT_ALLOWED', `scheme ${parsed.protocol} is not http(s)`);
  }
  if (parsed.username || parsed.password) {
    throw new TargetError('URL_NOT_ALLOWED', 'URL carries credentials');
  }
  return checkHost(parsed.hostname, allowlist, resolver);
}

async function checkHost(hostname: string, allowlist: Allowlist, resolver: Resolver): Promise<string[]> {
  const host = normalizeHost(hostname);
  if (!isHostAllowlisted(host, allowlist)) {
    throw new TargetError('HOST_NOT_ALLOWED', `host "${host}" is not on the allowlist`);
  }
  let addresses: string[];
  if (isIP(host) !== 0) {
    addresses = [host];
  } else {
    try {
      addresses = await resolver(host);
    } catch (err) {
      throw new TargetError('DNS_FAILED', `host "${host}" does not resolve`, { cause: err });
    }
    if (addresses.length === 0) throw new TargetError('DNS_FAILED', `host "${host}" has no addresses`);
  }
  if (!allowlist.exact.has(host)) {
    for (const address of addresses) {
      const range = specialRangeOf(address);
      if (range) {
        throw new TargetError(
          'ADDRESS_NOT_ALLOWED',
          `host "${host}" resolves to ${address} (${range}); only an exact allowlist entry permits that`,
        );
      }
    }
  }
  return addresses;
}

/**
 * A `lookup` for sockets (undici's `connect.lookup`) that applies the same check when the
 * connection is opened, so a DNS answer that changed after checkTargetUrl cannot slip through.
 */
export function guardedLookup(allowlist: Allowlist, resolver: Resolver): LookupFunction {
  return ((hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    checkHost(hostname, allowlist, resolver).then(
      (addresses) => {
        const entries = addresses.map((address) => ({ address, family: isIP(address) === 6 ? 6 : 4 }));
        if (options?.all) callback(null, entries);
        else callback(null, entries[0]?.address, entries[0]?.family);
      },
      (err: unknown) => callback(err),
    );
  }) as LookupFunction;
}
