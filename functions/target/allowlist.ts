import { Resolver as DnsResolver, lookup as dnsLookup } from 'node:dns/promises';
import { isIP, type LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import { ConfigError, DnsUnavailableError, TargetError } from '../common/errors.js';

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

/**
 * DNS servers as `ip` or `ip:port` (`[v6]:port`), for {@link dnsServerResolver}; a ConfigError
 * naming `setting` when one is not.
 */
export function parseDnsServers(raw: readonly string[], setting = 'DNS_SERVERS'): string[] {
  return raw.map((entry) => {
    const s = entry.trim();
    const host = s.startsWith('[') ? s.slice(1, s.indexOf(']')) : s.replace(/:\d+$/, '');
    if (isIP(host) === 0) {
      throw new ConfigError(setting, `"${entry}" is not an IP address (with an optional :port)`);
    }
    return s;
  });
}

/**
 * Resolves through the named DNS servers (A and AAAA queries over UDP, c-ares) instead of the
 * system's getaddrinfo: for servers of the operator's choice (reachable from the internet: the
 * functions run outside any VPC), or a loopback DNS stand-in that injects faults.
 * No addresses of either family is the host's own answer (`ENOTFOUND`); a failure of the
 * servers (`ESERVFAIL`, `ETIMEOUT`, `ECONNREFUSED`) of either query is reported as such, so it
 * stays transient (TRANSIENT_DNS_CODES below).
 */
export function dnsServerResolver(
  servers: readonly string[],
  o: { timeoutMs?: number; tries?: number } = {},
): Resolver {
  const resolver = new DnsResolver({ timeout: o.timeoutMs ?? 2_000, tries: o.tries ?? 2 });
  resolver.setServers([...servers]);
  const noAddress = new Set(['ENODATA', 'ENOTFOUND']);
  return async (host) => {
    const answers = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
    const addresses = answers.flatMap((a) => (a.status === 'fulfilled' ? a.value : []));
    const failures = answers.flatMap((a) => (a.status === 'rejected' ? [a.reason as { code?: string }] : []));
    const serverFailure = failures.find((e) => !noAddress.has(String(e?.code)));
    if (serverFailure) throw serverFailure;
    if (addresses.length > 0) return addresses;
    throw Object.assign(new Error(`${host} has no A or AAAA record`), { code: 'ENOTFOUND' });
  };
}

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

/**
 * Why a special address is refused, by ipaddr.js's range name. Anything ipaddr.js does not
 * call `unicast` is refused; the names below only make the reason readable.
 */
const RANGE_NAMES: Record<string, string> = {
  unspecified: 'unspecified',
  broadcast: 'broadcast',
  multicast: 'multicast',
  linkLocal: 'link-local', // includes the cloud metadata address 169.254.169.254
  loopback: 'loopback',
  carrierGradeNat: 'shared (CGNAT)',
  private: 'private',
  reserved: 'reserved (documentation, benchmarking, protocol assignments or future use)',
  uniqueLocal: 'unique local (ULA)',
  deprecatedSiteLocal: 'site-local',
  discard: 'discard',
  benchmarking: 'benchmarking',
};

/**
 * The IPv4 addresses an IPv6 address carries, when it is one of the forms that reach an IPv4
 * host: IPv4-mapped `::ffff:a.b.c.d` and `::ffff:0:a.b.c.d` (RFC 6145), IPv4-compatible
 * `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, and Teredo `2001::/32` (both the
 * server and the obfuscated client address). ipaddr.js names these ranges but extracts only
 * the mapped form, so the bit positions of the others are read here (RFCs 3056, 4380, 6052).
 */
function embeddedV4(ip: ipaddr.IPv6): { kind: string; v4: ipaddr.IPv4[] } | undefined {
  const p = ip.parts;
  const v4 = (hi: number, lo: number) => new ipaddr.IPv4([hi >> 8, hi & 255, lo >> 8, lo & 255]);
  const range = ip.range();
  if (range === 'ipv4Mapped' || range === 'rfc6145') return { kind: 'IPv4-mapped', v4: [v4(p[6]!, p[7]!)] };
  if (range === '6to4') return { kind: '6to4', v4: [v4(p[1]!, p[2]!)] };
  if (range === 'teredo') {
    return { kind: 'Teredo', v4: [v4(p[2]!, p[3]!), v4(~p[6]! & 0xffff, ~p[7]! & 0xffff)] };
  }
  if (range === 'rfc6052' && p[2] === 0) return { kind: 'NAT64', v4: [v4(p[6]!, p[7]!)] };
  // IPv4-compatible (deprecated): the first 96 bits zero; :: and ::1 keep their own names.
  if (p.slice(0, 6).every((part) => part === 0) && (p[6] !== 0 || p[7]! > 1)) {
    return { kind: 'IPv4-compatible', v4: [v4(p[6]!, p[7]!)] };
  }
  return undefined;
}

function v4RangeOf(ip: ipaddr.IPv4): string | undefined {
  const range = ip.range();
  return range === 'unicast' ? undefined : (RANGE_NAMES[range] ?? range);
}

/** Names the special range an address is in (`loopback`, `private`, …), or undefined for a public one. */
export function specialRangeOf(address: string): string | undefined {
  const text = normalizeHost(address);
  // isIP first: ipaddr.js also accepts shorthands like `127.1` that DNS answers never contain.
  if (isIP(text) === 0) return 'not an IP address';
  const ip = ipaddr.parse(text);
  if (ip.kind() === 'ipv4') return v4RangeOf(ip as ipaddr.IPv4);
  const v6 = ip as ipaddr.IPv6;
  if (v6.zoneId) return 'scoped (zone id)';
  const embedded = embeddedV4(v6);
  if (embedded) {
    for (const v4 of embedded.v4) {
      const range = v4RangeOf(v4);
      if (range) return `${embedded.kind} form of ${v4.toString()}, ${range}`;
    }
    return undefined;
  }
  const range = v6.range();
  // Local-use NAT64 (RFC 8215) is network-specific by definition, whatever address it embeds.
  if (range === 'rfc6052') return 'local-use NAT64 (64:ff9b:1::/48)';
  if (range !== 'unicast') return RANGE_NAMES[range] ?? range;
  // Only global unicast (2000::/3) is public; ipaddr.js calls every unassigned block unicast.
  if (!v6.match(GLOBAL_UNICAST)) return 'not global unicast (outside 2000::/3)';
  return undefined;
}

const GLOBAL_UNICAST = ipaddr.parseCIDR('2000::/3');

/**
 * Checks that a URL may be contacted: http(s), no credentials, an allowlisted host, and
 * (unless the exact host is allowlisted) only public addresses. Returns the addresses the
 * host resolved to. Throws TargetError with code URL_NOT_ALLOWED, HOST_NOT_ALLOWED,
 * ADDRESS_NOT_ALLOWED or DNS_FAILED, or DnsUnavailableError (DNS_UNAVAILABLE) when the resolver
 * failed for now.
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

/**
 * Resolver failures that say nothing about the host (getaddrinfo's EAI_AGAIN, c-ares' ESERVFAIL,
 * ETIMEOUT, ECONNREFUSED): DnsUnavailableError, retried. Anything else (ENOTFOUND, ENODATA, …)
 * is DNS_FAILED: the host does not resolve.
 */
export const TRANSIENT_DNS_CODES: ReadonlySet<string> = new Set([
  'EAI_AGAIN',
  'ESERVFAIL',
  'ETIMEOUT',
  'ECONNREFUSED',
]);

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
      const code = (err as { code?: unknown }).code;
      if (typeof code === 'string' && TRANSIENT_DNS_CODES.has(code)) {
        throw new DnsUnavailableError(
          'DNS_UNAVAILABLE',
          `host "${host}" could not be resolved now (${code})`,
          {
            cause: err,
          },
        );
      }
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
