import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateJobMessage } from '../../../../functions/records/job-schema.js';
import {
  expectedOutcomes,
  generatedRecords,
  LARGE_PAGE_BYTES,
  mixedTypes,
  parseMix,
  readRecordsFile,
  sampleRecords,
  withLargePages,
} from '../../../../local/stack/records.js';

const TARGET = 'http://127.0.0.1:8932';

describe('local stack records', () => {
  it('gives a share of the records, spread evenly, a page padded to just under the page cap', () => {
    const bodies = withLargePages(generatedRecords(TARGET, 'site-key', 40, 'large'), 0.1);
    const large = bodies.flatMap((b, i) =>
      new URL((JSON.parse(b) as { pageurl: string }).pageurl).searchParams.get('pad') ? [i] : [],
    );
    expect(large).toEqual([9, 19, 29, 39]);
    const padded = new URL((JSON.parse(bodies[9] ?? '{}') as { pageurl: string }).pageurl);
    expect(padded.searchParams.get('pad')).toBe(String(LARGE_PAGE_BYTES));
    for (const b of bodies) expect(validateJobMessage(b).ok).toBe(true);
  });

  it('puts the large pages in runs of consecutive records when asked (several lanes at once), the same share', () => {
    const bodies = withLargePages(generatedRecords(TARGET, 'site-key', 80, 'burst'), 0.1, 4);
    const large = bodies.flatMap((b, i) =>
      new URL((JSON.parse(b) as { pageurl: string }).pageurl).searchParams.get('pad') ? [i] : [],
    );
    expect(large).toEqual([36, 37, 38, 39, 76, 77, 78, 79]);
  });

  it('generates valid job messages of every sample type, one record key each', () => {
    // Act
    const bodies = generatedRecords(TARGET, 'site-key', 10, 'gen');
    const results = bodies.map((b) => validateJobMessage(b));
    // Assess
    expect(results.every((r) => r.ok)).toBe(true);
    const types = results.map((r) => (r.ok ? (r.job.captcha?.type ?? 'recaptcha_v2') : 'invalid'));
    expect(new Set(types)).toEqual(
      new Set(['recaptcha_v2', 'recaptcha_v3', 'recaptcha_enterprise', 'turnstile']),
    );
    expect(expectedOutcomes(bodies)).toEqual({
      keys: new Set(bodies.map((b) => JSON.parse(b).record_key)),
      unkeyed: 0,
    });
  });

  it('mixes three bad records into the default sample: one without a usable key, two with reasons to reject', () => {
    // Act
    const bodies = sampleRecords(TARGET, 'site-key', 'smp');
    const invalid = bodies.filter((b) => !validateJobMessage(b).ok);
    // Assess
    expect(bodies).toHaveLength(40);
    expect(invalid).toHaveLength(2);
    expect(invalid.map((b) => validateJobMessage(b)).map((r) => (r.ok ? '' : r.reason))).toEqual([
      'message: not valid JSON',
      expect.stringContaining('sitekey'),
    ]);
    expect(bodies.some((b) => b.includes('http://10.0.0.1/form'))).toBe(true);
    expect(expectedOutcomes(bodies).unkeyed).toBe(1);
    expect(expectedOutcomes(bodies).keys.size).toBe(39);
  });

  it('includes three valid records with an expect block, one of them for another sitekey (the form refuses it)', () => {
    const bodies = sampleRecords(TARGET, 'site-key', 'smp');
    const judged = bodies.filter((b) => b.includes('"expect"'));
    expect(judged).toHaveLength(3);
    expect(judged.every((b) => validateJobMessage(b).ok)).toBe(true);
    expect(judged.filter((b) => b.includes('site-key-other'))).toHaveLength(1);
    expect(judged.every((b) => b.includes(`${TARGET}/form-200/`))).toBe(true);
  });

  it('reads a records file verbatim, skipping only blank lines', () => {
    // Prepare
    const dir = mkdtempSync(join(tmpdir(), 'threadgate-records-'));
    const file = join(dir, 'jobs.jsonl');
    writeFileSync(file, '{"record_key":"a"}\r\n\n  {not json\n{"record_key":"a"}\n');
    // Act
    const lines = readRecordsFile(file);
    rmSync(dir, { recursive: true });
    // Assess
    expect(lines).toEqual(['{"record_key":"a"}', '  {not json', '{"record_key":"a"}']);
    expect(expectedOutcomes(lines)).toEqual({ keys: new Set(['a']), unkeyed: 1 });
  });

  it('generates records by the weights of a mix, spread through the run', () => {
    const mix = parseMix('recaptcha_v2=3, turnstile=1');
    expect(mix).toEqual({ recaptcha_v2: 3, turnstile: 1 });
    const types = mixedTypes(8, mix);
    expect(types.filter((t) => t === 'turnstile')).toHaveLength(2);
    expect(types.slice(0, 4).filter((t) => t === 'turnstile')).toHaveLength(1);
    const bodies = generatedRecords(TARGET, 'site-key', 4, 'mix', { recaptcha_v2: 1 });
    const results = bodies.map((b) => validateJobMessage(b));
    expect(results.map((r) => (r.ok ? (r.job.captcha?.type ?? 'recaptcha_v2') : 'invalid'))).toEqual(
      Array(4).fill('recaptcha_v2'),
    );
  });

  it.each([
    ['hcaptcha=1', /unknown or unsupported CAPTCHA type "hcaptcha"/],
    ['image=1', /unsupported CAPTCHA type "image"/],
    ['recaptcha_v2=x', /weight of recaptcha_v2/],
    ['turnstile=0', /at least one type/],
  ])('refuses the mix %s with a message naming the problem', (text, message) => {
    expect(() => parseMix(text)).toThrow(message);
  });
});
