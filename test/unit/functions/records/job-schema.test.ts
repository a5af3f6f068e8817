import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  batchIdOf,
  captchaTaskOf,
  MAX_MESSAGE_BYTES,
  tokenFieldOf,
  validateJobMessage,
} from '../../../../functions/records/job-schema.js';
import { JOB_SCHEMA_PATH, renderJobSchema } from '../../../../functions/records/write-job-schema.js';

const flat = {
  record_key: 'order-17',
  sitekey: '6LeIxAcTAAAAAJcZVRqyHh71UMIEGNQ_MXjiZKhI',
  pageurl: 'https://forms.example.com/apply',
  submit_url: 'https://forms.example.com/apply/submit',
};

function check(job: unknown) {
  return validateJobMessage(JSON.stringify(job));
}

describe('job message schema', () => {
  it('keeps schema/job.schema.json identical to what the zod source generates (run npm run schema)', () => {
    // Prepare
    const committed = readFileSync(JOB_SCHEMA_PATH, 'utf8');
    // Act
    const generated = renderJobSchema();
    // Assess
    expect(committed).toBe(generated);
  });

  it('reads the flat form as reCAPTCHA v2 posted in g-recaptcha-response', () => {
    const result = check(flat);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(captchaTaskOf(result.job)).toEqual({
      type: 'recaptcha_v2',
      sitekey: flat.sitekey,
      pageurl: flat.pageurl,
    });
    expect(tokenFieldOf(result.job)).toBe('g-recaptcha-response');
  });

  it.each([
    [
      'invisible v2',
      { captcha: { type: 'recaptcha_v2', invisible: true } },
      { type: 'recaptcha_v2', sitekey: flat.sitekey, pageurl: flat.pageurl, invisible: true },
      'g-recaptcha-response',
    ],
    [
      'v3 with action and min_score',
      { captcha: { type: 'recaptcha_v3', action: 'login', min_score: 0.7 } },
      { type: 'recaptcha_v3', sitekey: flat.sitekey, pageurl: flat.pageurl, action: 'login', minScore: 0.7 },
      'g-recaptcha-response',
    ],
    [
      'enterprise',
      { captcha: { type: 'recaptcha_enterprise', action: 'submit' } },
      {
        type: 'recaptcha_enterprise',
        sitekey: flat.sitekey,
        pageurl: flat.pageurl,
        action: 'submit',
        minScore: undefined,
        invisible: undefined,
      },
      'g-recaptcha-response',
    ],
    [
      'turnstile with its sitekey inside captcha',
      { sitekey: undefined, captcha: { type: 'turnstile', sitekey: '0x4AAAAAAABkMYinukE8nzY' } },
      { type: 'turnstile', sitekey: '0x4AAAAAAABkMYinukE8nzY', pageurl: flat.pageurl, action: undefined },
      'cf-turnstile-response',
    ],
    [
      'image with its own token field',
      { sitekey: undefined, captcha: { type: 'image', body: 'aGVsbG8=' }, token_field: 'captcha_text' },
      { type: 'image', body: 'aGVsbG8=' },
      'captcha_text',
    ],
  ])('reads the full form: %s', (_name, extra, task, field) => {
    // Prepare
    const job = { ...flat, ...extra, form: { name: 'Ada', consent: 'yes' } };
    // Act
    const result = check(job);
    // Assess
    expect(result).toMatchObject({ ok: true });
    if (!result.ok) return;
    expect(captchaTaskOf(result.job)).toEqual(task);
    expect(tokenFieldOf(result.job)).toBe(field);
    expect(result.job.form).toEqual({ name: 'Ada', consent: 'yes' });
  });

  it('takes a token_field override for reCAPTCHA', () => {
    const result = check({ ...flat, token_field: 'recaptcha_token' });
    expect(result.ok && tokenFieldOf(result.job)).toBe('recaptcha_token');
  });

  it('names the field and keeps a usable record_key when the rest is wrong', () => {
    expect(check({ ...flat, pageurl: 'ftp://forms.example.com/x' })).toEqual({
      ok: false,
      reason: 'pageurl: must be an absolute http(s) URL',
      recordKey: 'order-17',
    });
  });

  it.each([
    [{ submitUrl: flat.submit_url }, 'submitUrl: unknown field (did you mean submit_url?)'],
    [{ pageURL: flat.pageurl }, 'pageURL: unknown field (did you mean pageurl?)'],
    [{ site_key: flat.sitekey }, 'site_key: unknown field (did you mean sitekey?)'],
    [{ recordkey: 'x' }, 'recordkey: unknown field (did you mean record_key?)'],
    [{ sitkey: flat.sitekey }, 'sitkey: unknown field (did you mean sitekey?)'],
    [{ colour: 'blue' }, 'colour: unknown field'],
  ])("reports a typo'd field as unknown with the field it likely meant (%o)", (typo, reason) => {
    // Prepare: the typo replaces the field it stands for.
    const job: Record<string, unknown> = { ...flat, ...typo };
    const meant = /did you mean (\w+)\?/.exec(reason)?.[1];
    if (meant && meant !== 'record_key') delete job[meant];

    // Act + Assess
    expect(check(job)).toMatchObject({ ok: false, reason });
  });

  it('suggests a field of the captcha object for a typo inside it', () => {
    expect(check({ ...flat, captcha: { type: 'recaptcha_v3', minScore: 0.5 } })).toMatchObject({
      ok: false,
      reason: 'captcha.minScore: unknown field (did you mean min_score?)',
    });
  });

  it('leaves recordKey out when the record_key itself is unusable', () => {
    expect(check({ ...flat, record_key: 'has space' })).toEqual({
      ok: false,
      reason: 'record_key: must be printable ASCII without spaces',
    });
  });

  it('takes an optional batch_id by the rules of record_key', () => {
    const result = check({ ...flat, batch_id: 'nightly-2026-12-01' });
    expect(result.ok && result.job.batch_id).toBe('nightly-2026-12-01');
    expect(check(flat).ok).toBe(true);
  });

  it.each([
    ['a space', 'night 1', 'batch_id: must be printable ASCII without spaces'],
    ['empty', '', 'batch_id: must not be empty'],
    ['a number', 7, 'batch_id: must be a string'],
    ['too long', 'b'.repeat(257), 'batch_id: must be at most 256 characters'],
  ])('rejects a batch_id with %s, naming it and keeping the record_key', (_name, batch, reason) => {
    expect(check({ ...flat, batch_id: batch })).toEqual({ ok: false, reason, recordKey: 'order-17' });
  });

  it('finds the usable batch_id of any body, valid or not', () => {
    expect(batchIdOf(JSON.stringify({ ...flat, pageurl: 'nope', batch_id: 'b-1' }))).toBe('b-1');
    expect(batchIdOf(JSON.stringify({ ...flat, batch_id: 'has space' }))).toBeUndefined();
    expect(batchIdOf('not json')).toBeUndefined();
    expect(batchIdOf('null')).toBeUndefined();
  });

  it('refuses a body larger than an SQS message before parsing it', () => {
    const huge = JSON.stringify({ ...flat, form: { big: 'x'.repeat(MAX_MESSAGE_BYTES) } });
    expect(validateJobMessage(huge)).toEqual({
      ok: false,
      reason: `message: larger than ${MAX_MESSAGE_BYTES} bytes`,
    });
  });
});
