import { readFileSync } from 'node:fs';

/** The job messages a local run sends: generated samples, a JSONL file, and which outcomes to expect. */

const SAMPLE_TYPES = [
  'recaptcha_v2',
  'recaptcha_v2_invisible',
  'recaptcha_v3',
  'recaptcha_enterprise',
  'turnstile',
];

/** One good job message for the target stand-in, cycling through the CAPTCHA types by `index`. */
export function goodRecord(targetUrl: string, sitekey: string, recordKey: string, index = 0): string {
  const url = `${targetUrl}/form/${recordKey}`;
  const base = { record_key: recordKey, sitekey, pageurl: url, submit_url: url };
  switch (SAMPLE_TYPES[index % SAMPLE_TYPES.length]) {
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

/** `count` good records of mixed types. */
export function generatedRecords(
  targetUrl: string,
  sitekey: string,
  count: number,
  prefix: string,
): string[] {
  return Array.from({ length: count }, (_, i) =>
    goodRecord(targetUrl, sitekey, `${prefix}-${String(i + 1).padStart(5, '0')}`, i),
  );
}

/** The default sample: good records of every kind plus a few bad ones that must get clear reasons. */
export function sampleRecords(targetUrl: string, sitekey: string, prefix: string, good = 37): string[] {
  const records = generatedRecords(targetUrl, sitekey, good, prefix);
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
