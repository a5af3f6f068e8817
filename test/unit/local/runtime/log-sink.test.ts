import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LogSink, Redactions, secretNamesIn, secretValues } from '../../../../local/runtime/log-sink.js';

const dir = mkdtempSync(join(tmpdir(), 'threadgate-log-sink-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('local runtime log redaction', () => {
  it('redacts the keys it was given and a key added after the log was opened (a rotation)', async () => {
    // Prepare
    const keyA = `${'a'.repeat(8)}0123456789abcdef0123456789`;
    const keyB = `${'b'.repeat(8)}0123456789abcdef0123456789`;
    const redactions = new Redactions([keyA]);
    const file = join(dir, 'fn.log');
    const sink = new LogSink(file, redactions);
    // Act
    sink.line(`first key ${keyA}`);
    redactions.add(keyB);
    sink.line(`old ${keyA} new ${keyB}`);
    await sink.close();
    // Assess
    const text = readFileSync(file, 'utf8');
    expect(text).not.toContain(keyA);
    expect(text).not.toContain(keyB);
    expect(text).toContain('first key ***');
    expect(text).toContain('old *** new ***');
  });

  it('replaces a secret that contains another one whole', () => {
    const redactions = new Redactions(['secret-part', 'prefix-secret-part-suffix']);
    expect(redactions.apply('x prefix-secret-part-suffix y secret-part')).toBe('x *** y ***');
  });

  it("takes a secret's trimmed string and every string inside a JSON secret, but no short ones", () => {
    expect(secretValues('  0123456789abcdef0123456789abcdef\n')).toEqual([
      '0123456789abcdef0123456789abcdef',
    ]);
    expect(secretValues('{"apiKey": "0123456789abcdef0123456789abcdef", "note": "x"}')).toEqual([
      '{"apiKey": "0123456789abcdef0123456789abcdef", "note": "x"}',
      '0123456789abcdef0123456789abcdef',
    ]);
    expect(secretValues('short')).toEqual([]);
    expect(secretValues(undefined)).toEqual([]);
  });

  it('reads secret names from the variables that end in _SECRET_NAME', () => {
    expect(
      secretNamesIn({
        CAPTCHAAI_SECRET_NAME: 'threadgate/captchaai-api-key',
        TABLE_NAME: 't',
        X_SECRET_NAME: '',
      }),
    ).toEqual(['threadgate/captchaai-api-key']);
  });
});
