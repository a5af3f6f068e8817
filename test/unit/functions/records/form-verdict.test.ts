import { describe, expect, it } from 'vitest';
import { decideTargetResponse } from '../../../../functions/records/decisions.js';
import {
  type FormAnswer,
  type FormExpectation,
  judgeFormAnswer,
  matchesLocationPattern,
  parseFormExpectation,
} from '../../../../functions/records/form-verdict.js';
import { validateJobMessage } from '../../../../functions/records/job-schema.js';
import { AnswerText } from '../../../../functions/target/answer-text.js';

const page = (text: string, complete = true) => AnswerText.of(new TextEncoder().encode(text), complete);
const THANKS = '<html><body><h1>Thank   you</h1> for your\nsubmission.</body></html>';
const REFUSED =
  '<html><body><form>…</form><p class="err">CAPTCHA Verification FAILED, please try again</p></body></html>';

describe('judgeFormAnswer: the form says yes or no', () => {
  it.each<[string, FormExpectation, FormAnswer, ReturnType<typeof judgeFormAnswer>]>([
    ['no rules: any 2xx/3xx', {}, { status: 200 }, { accepted: true }],
    [
      'a failure marker, any case and spacing',
      { body_excludes: ['nope', 'verification   failed'] },
      { status: 200, body: page(REFUSED) },
      { accepted: false, reason: 'FORM_REJECTED', rule: 'body_excludes[1]' },
    ],
    [
      'no failure marker',
      { body_excludes: ['verification failed'] },
      { status: 200, body: page(THANKS) },
      { accepted: true },
    ],
    [
      'the success marker, across a line break and runs of spaces',
      { body_includes: ['FOR YOUR   submission'] },
      { status: 200, body: page(THANKS) },
      { accepted: true },
    ],
    [
      'no success marker',
      { body_includes: ['thank you'] },
      { status: 200, body: page(REFUSED) },
      { accepted: false, reason: 'FORM_UNCONFIRMED', rule: 'body_includes[0]' },
    ],
    [
      'a failure marker outranks a success marker',
      { body_includes: ['thank you'], body_excludes: ['failed'] },
      { status: 200, body: page(`${THANKS} failed`) },
      { accepted: false, reason: 'FORM_REJECTED', rule: 'body_excludes[0]' },
    ],
    [
      'a status not listed',
      { status: [302] },
      { status: 200 },
      { accepted: false, reason: 'FORM_REJECTED', rule: 'status 200 not in [302]' },
    ],
    ['a status in a class or a range', { status: ['2xx', '300-301'] }, { status: 301 }, { accepted: true }],
    [
      'a status outside the range',
      { status: ['2xx', '300-301'] },
      { status: 303 },
      { accepted: false, reason: 'FORM_REJECTED', rule: 'status 303 not in [2xx, 300-301]' },
    ],
    [
      'a redirect to /thanks',
      { location: '/thanks' },
      { status: 303, location: 'https://f.example/thanks?id=1' },
      { accepted: true },
    ],
    [
      'a redirect to /error',
      { location: '/thanks' },
      { status: 303, location: 'https://f.example/error' },
      { accepted: false, reason: 'FORM_REJECTED', rule: 'location: redirect not to /thanks' },
    ],
    [
      'a Location that is no URL',
      { location: '/thanks' },
      { status: 302, location: 'http://[bad' },
      { accepted: false, reason: 'FORM_REJECTED', rule: 'location: redirect not to /thanks' },
    ],
    [
      'an absolute pattern with a wildcard',
      { location: 'https://f.example/*/done' },
      { status: 302, location: 'https://f.example/orders/17/done' },
      { accepted: true },
    ],
    [
      'no redirect where one is required',
      { location: '/thanks' },
      { status: 200 },
      { accepted: false, reason: 'FORM_UNCONFIRMED', rule: 'location: no redirect (expected /thanks)' },
    ],
    [
      'a body that could not be read',
      { body_excludes: ['failed'] },
      { status: 200, body: AnswerText.unreadable() },
      { accepted: false, reason: 'FORM_UNCONFIRMED', rule: 'body: the answer could not be read' },
    ],
    [
      'a marker missing from a cut-off answer says so',
      { body_includes: ['thank you'] },
      { status: 200, body: page('x'.repeat(10), false) },
      {
        accepted: false,
        reason: 'FORM_UNCONFIRMED',
        rule: 'body_includes[0] (only the first 10 bytes of the answer were read)',
      },
    ],
    [
      'a cut-off answer without the failure marker in its read part cannot rule one out',
      { body_excludes: ['failed'] },
      { status: 200, body: page('x'.repeat(10), false) },
      {
        accepted: false,
        reason: 'FORM_UNCONFIRMED',
        rule: 'body_excludes (only the first 10 bytes of the answer were read)',
      },
    ],
    [
      'a cut-off answer with the failure marker in its read part is refused',
      { body_excludes: ['failed'] },
      { status: 200, body: page('it failed', false) },
      { accepted: false, reason: 'FORM_REJECTED', rule: 'body_excludes[0]' },
    ],
  ])('%s', (_name, rules, answer, verdict) => {
    expect(judgeFormAnswer(rules, answer)).toEqual(verdict);
  });

  it('never puts text of the page into the rule', () => {
    const secret = 'Dear Ada Lovelace, token 03AFcWeA-secret';
    for (const rules of [
      { body_excludes: ['ada'] },
      { body_includes: ['nothing here'] },
      { status: [302] },
    ] as FormExpectation[]) {
      const verdict = judgeFormAnswer(rules, { status: 200, body: page(secret) });
      expect(JSON.stringify(verdict)).not.toMatch(/lovelace|secret/i);
    }
  });
});

describe('decideTargetResponse with an expect block', () => {
  it('keeps 4xx/5xx as TARGET_HTTP_<status>, whatever expect says', () => {
    expect(decideTargetResponse(403, { expect: { body_excludes: ['x'] }, answer: { status: 403 } })).toEqual({
      status: 'failed',
      reason: 'TARGET_HTTP_403',
    });
  });

  it('fails a refused 200 FORM_REJECTED with its rule, and submits an accepted one', () => {
    const expectation = { body_excludes: ['verification failed'] };
    expect(
      decideTargetResponse(200, { expect: expectation, answer: { status: 200, body: page(REFUSED) } }),
    ).toEqual({
      status: 'failed',
      reason: 'FORM_REJECTED',
      rule: 'body_excludes[0]',
    });
    expect(
      decideTargetResponse(200, { expect: expectation, answer: { status: 200, body: page(THANKS) } }),
    ).toEqual({
      status: 'submitted',
      reason: 'OK',
    });
  });
});

describe('location patterns', () => {
  it.each([
    ['/thanks', '/thanks', true],
    ['/thanks/17', '/thanks', true],
    ['/Thanks', '/thanks', true],
    ['/error?next=/thanks', '/thanks', false],
    ['/a/b/c/done', '/a/*/done', true],
    ['/a/x/done/b', '/a/*/done', true],
    ['/a/b/c', '/a/*/done', false],
    [`/${'a'.repeat(5000)}`, '/*a*a*a*a*a*b', false],
  ])('%s against %s: %s', (target, pattern, matches) => {
    expect(matchesLocationPattern(target, pattern)).toBe(matches);
  });
});

describe('the expect block in the job schema and the stack setting', () => {
  const base = {
    record_key: 'k',
    sitekey: 'abc',
    pageurl: 'https://f.example/x',
    submit_url: 'https://f.example/x',
  };
  it.each([
    [{ status: [404] }, 'expect.status.0: must be between 200 and 399'],
    [{ status: ['299-200'] }, 'expect.status.0: range 299-200 ends before it starts'],
    [{ status: ['4xx'] }, 'expect.status.0: must be a status (200-399), "2xx", "3xx" or a range'],
    [{ body_excludes: [] }, 'expect.body_excludes: must name at least one marker'],
    [{ body_includes: ['  '] }, 'expect.body_includes.0: must not be empty or blank'],
    [{ body_include: ['x'] }, 'expect.body_include: unknown field (did you mean body_includes?)'],
    [{ location: '' }, 'expect.location: must not be empty'],
  ])('refuses %o: %s', (block, reason) => {
    const v = validateJobMessage(JSON.stringify({ ...base, expect: block }));
    expect(v.ok).toBe(false);
    expect(v.ok ? '' : v.reason).toContain(reason);
    expect(v.ok ? '' : v.recordKey).toBe('k');
  });

  it('accepts a full block, and {} (the opt-out)', () => {
    for (const block of [
      {
        status: [302, '2xx', '200-204'],
        body_includes: ['Thank you'],
        body_excludes: ['failed'],
        location: '/thanks',
      },
      {},
    ]) {
      expect(validateJobMessage(JSON.stringify({ ...base, expect: block })).ok).toBe(true);
    }
  });

  it('reads the stack default from JSON text or an object, naming the setting when it is bad', () => {
    expect(parseFormExpectation('{"body_excludes":["failed"]}', 'expect')).toEqual({
      body_excludes: ['failed'],
    });
    expect(parseFormExpectation({ location: '/thanks' }, 'expect')).toEqual({ location: '/thanks' });
    expect(parseFormExpectation(undefined, 'expect')).toBeUndefined();
    expect(() => parseFormExpectation('{nope', 'FORM_EXPECT')).toThrow(/^FORM_EXPECT: must be a JSON object/);
    expect(() => parseFormExpectation({ status: [500] }, 'expect')).toThrow(
      /^expect: status\.0: must be between 200 and 399/,
    );
  });
});
