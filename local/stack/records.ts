import { readFileSync } from 'node:fs';
import type { CaptchaType } from '../../functions/captchaai/types.js';
import { MAX_PAGE_BYTES } from '../../functions/target/session.js';
import { PAD_PARAM } from '../standins/target.js';

/** The job messages a local run sends: generated samples, a JSONL file, and which outcomes to expect. */

const SAMPLE_TYPES = [
  'recaptcha_v2',
  'recaptcha_v2_invisible',
  'recaptcha_v3',
  'recaptcha_enterprise',
  'turnstile',
];

/** CAPTCHA types a generated record can have (the target stand-in verifies tokens, not image answers). */
export const MIX_TYPES: readonly CaptchaType[] = [
  'recaptcha_v2',
  'recaptcha_v3',
  'recaptcha_enterprise',
  'turnstile',
];

/** Relative weights of CAPTCHA types in generated records. */
export type RecordMix = Partial<Record<CaptchaType, number>>;

/** Reads `TYPE=WEIGHT,…` (e.g. `recaptcha_v2=3,turnstile=1`); throws a RangeError naming the bad part. */
export function parseMix(text: string): RecordMix {
  const mix: RecordMix = {};
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const [type, weight = '1'] = part.split('=').map((s) => s.trim());
    if (!MIX_TYPES.includes(type as CaptchaType)) {
      throw new RangeError(
        `mix: unknown or unsupported CAPTCHA type "${type}" (one of ${MIX_TYPES.join(', ')})`,
      );
    }
    const w = Number(weight);
    if (!(Number.isFinite(w) && w >= 0))
      throw new RangeError(`mix: weight of ${type} must be a number >= 0, got "${weight}"`);
    mix[type as CaptchaType] = w;
  }
  if (!Object.values(mix).some((w) => (w ?? 0) > 0))
    throw new RangeError('mix: needs at least one type with a weight above 0');
  return mix;
}

/**
 * `count` types spread by weight (smooth weighted round robin: every prefix of the list is as
 * close to the weights as whole records allow, so a partial run has the mix too).
 */
export function mixedTypes(count: number, mix: RecordMix): CaptchaType[] {
  const entries = Object.entries(mix).filter(([, w]) => (w ?? 0) > 0) as [CaptchaType, number][];
  const total = entries.reduce((n, [, w]) => n + w, 0);
  const current = new Map(entries.map(([t]) => [t, 0]));
  const out: CaptchaType[] = [];
  for (let i = 0; i < count; i++) {
    let best: CaptchaType | undefined;
    for (const [t, w] of entries) {
      current.set(t, (current.get(t) ?? 0) + w);
      if (best === undefined || (current.get(t) ?? 0) > (current.get(best) ?? 0)) best = t;
    }
    current.set(best as CaptchaType, (current.get(best as CaptchaType) ?? 0) - total);
    out.push(best as CaptchaType);
  }
  return out;
}

/** One good job message for the target stand-in, cycling through the CAPTCHA types by `index`. */
export function goodRecord(
  targetUrl: string,
  sitekey: string,
  recordKey: string,
  index = 0,
  type?: CaptchaType,
): string {
  const url = `${targetUrl}/form/${recordKey}`;
  const base = { record_key: recordKey, sitekey, pageurl: url, submit_url: url };
  switch (type ?? SAMPLE_TYPES[index % SAMPLE_TYPES.length]) {
    case 'recaptcha_v2_invisible':
      return JSON.stringify({ ...base, captcha: { type: 'recaptcha_v2', invisible: true } });
    case 'recaptcha_v3':
      return JSON.stringify({ ...base, captcha: { type: 'recaptcha_v3', action: 'submit', min_score: 0.7 } });
    case 'recaptcha_enterprise':
      return JSON.stringify({ ...base, captcha: { type: 'recaptcha_enterprise', action: 'login' } });
    case 'turnstile':
      return JSON.stringify({
        ...base,
        captcha: { type: 'turnstile' },
        form: { email: `${recordKey}@example.test` },
      });
    default:
      // The seed article's flat form: reCAPTCHA v2.
      return JSON.stringify(base);
  }
}

/** `count` good records of mixed types: every sample type in turn, or by the weights of `mix`. */
export function generatedRecords(
  targetUrl: string,
  sitekey: string,
  count: number,
  prefix: string,
  mix?: RecordMix,
): string[] {
  const types = mix ? mixedTypes(count, mix) : undefined;
  return Array.from({ length: count }, (_, i) =>
    goodRecord(targetUrl, sitekey, `${prefix}-${String(i + 1).padStart(5, '0')}`, i, types?.[i]),
  );
}

/** Bytes of a large page: just under the cap, so the worker reads it all (an over-cap page fails fast). */
export const LARGE_PAGE_BYTES = MAX_PAGE_BYTES - 16 * 1024;

/**
 * Spreads `share` of the records evenly through the run with a page padded to LARGE_PAGE_BYTES,
 * in runs of `burst` consecutive records (the same share): with lanes, consecutive records are
 * taken by several lanes of an invocation at about the same time, so a burst puts near-cap pages
 * in several lanes at once.
 */
export function withLargePages(bodies: string[], share: number, burst = 1): string[] {
  if (share <= 0) return bodies;
  return bodies.map((body, i) => {
    // Record i is large when the running count of large groups steps up at its group.
    const g = Math.floor(i / Math.max(1, burst));
    if (Math.floor((g + 1) * share) === Math.floor(g * share)) return body;
    const job = JSON.parse(body) as { pageurl: string };
    const url = new URL(job.pageurl);
    url.searchParams.set(PAD_PARAM, String(LARGE_PAGE_BYTES));
    return JSON.stringify({ ...job, pageurl: url.href });
  });
}

/**
 * Records with an `expect` block against the target stand-in's forms that say no with a 200
 * (local/standins/target.ts `/form-200/…`): a thank-you page (submitted), the same form refusing
 * a token solved for another sitekey (failed FORM_REJECTED, `body_excludes[0]`), a redirect to
 * /thanks (submitted).
 */
export function expectRecords(targetUrl: string, sitekey: string, prefix: string): string[] {
  const form = (shape: string, key: string) => `${targetUrl}/form-200/${shape}/${key}`;
  const page = { body_includes: ['thank you'], body_excludes: ['verification failed'] };
  return [
    { key: `${prefix}-expect-page`, shape: 'page', sitekey, expect: page },
    { key: `${prefix}-expect-refused`, shape: 'page', sitekey: `${sitekey}-other`, expect: page },
    {
      key: `${prefix}-expect-redirect`,
      shape: 'redirect',
      sitekey,
      expect: { status: [303], location: '/thanks' },
    },
  ].map((r) =>
    JSON.stringify({
      record_key: r.key,
      sitekey: r.sitekey,
      pageurl: form(r.shape, r.key),
      submit_url: form(r.shape, r.key),
      expect: r.expect,
    }),
  );
}

/**
 * The default sample: good records of every kind (or of the types of `mix`), three with an
 * `expect` block (one of which the form refuses), plus a few bad ones that must get clear reasons.
 */
export function sampleRecords(
  targetUrl: string,
  sitekey: string,
  prefix: string,
  good = 37,
  mix?: RecordMix,
): string[] {
  const judged = expectRecords(targetUrl, sitekey, prefix);
  const records = generatedRecords(targetUrl, sitekey, Math.max(0, good - judged.length), prefix, mix);
  records.splice(Math.min(10, records.length), 0, ...judged);
  const bad = [
    // Not JSON: no record key to file it under, so it goes to the DLQ with its reason.
    '{"record_key": "broken',
    // A record key but no sitekey: a `rejected` outcome naming the field.
    JSON.stringify({
      record_key: `${prefix}-bad-nositekey`,
      pageurl: `${targetUrl}/form/x`,
      submit_url: `${targetUrl}/form/x`,
    }),
    // A private address that is not allowlisted: refused before any solve.
    JSON.stringify({
      record_key: `${prefix}-bad-host`,
      sitekey,
      pageurl: 'http://10.0.0.1/form',
      submit_url: 'http://10.0.0.1/form',
    }),
  ];
  // Spread the bad ones through the run.
  records.splice(5, 0, bad[0]!);
  records.splice(20, 0, bad[1]!);
  records.splice(31, 0, bad[2]!);
  return records;
}

/** Lines of a JSONL file, verbatim (blank lines skipped): bad input must reach the worker. */
export function readRecordsFile(path: string): string[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .map((l) => l.replace(/\r$/, ''))
    .filter((l) => l.trim() !== '');
}

/** Record keys the worker can file an outcome under, and how many bodies have none. */
export function expectedOutcomes(bodies: string[]): { keys: Set<string>; unkeyed: number } {
  const keys = new Set<string>();
  let unkeyed = 0;
  for (const body of bodies) {
    let key: unknown;
    try {
      key = (JSON.parse(body) as { record_key?: unknown })?.record_key;
    } catch {
      key = undefined;
    }
    if (typeof key === 'string' && key.trim() !== '' && key.length <= 512) keys.add(key);
    else unkeyed++;
  }
  return { keys, unkeyed };
}
