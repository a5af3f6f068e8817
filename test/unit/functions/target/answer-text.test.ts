import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { AnswerText } from '../../../../functions/target/answer-text.js';

describe('AnswerText', () => {
  it('finds markers case-insensitively, whitespace runs read as one space', () => {
    const text = AnswerText.of(new TextEncoder().encode('<p>Thank\n\t You</p>'), true);
    expect(text.contains('thank you')).toBe(true);
    expect(text.contains('THANK  YOU')).toBe(true);
    expect(text.contains('thanks')).toBe(false);
    expect(text.contains('   ')).toBe(false);
  });

  it('never shows its text: not in JSON (the logger), util.inspect or a template string', () => {
    const text = AnswerText.of(new TextEncoder().encode('Dear Lovelace, your token 03AF-secret'), true);
    const shown = [
      JSON.stringify({ answer: text }),
      inspect(text),
      inspect({ deep: { text } }),
      `${String(JSON.stringify(text))}`,
    ];
    for (const s of shown) expect(s).not.toMatch(/lovelace|secret/i);
    expect(JSON.parse(JSON.stringify(text))).toEqual({ bytes: 37, complete: true, readable: true });
  });

  it('decodes broken UTF-8 without throwing', () => {
    const text = AnswerText.of(new Uint8Array([0xff, 0x41, 0x42]), true);
    expect(text.contains('ab')).toBe(true);
  });
});
