import { describe, expect, it } from 'vitest';
import { optionalList, optionalNumber, requireString } from '../../../../functions/common/env.js';
import { ConfigError } from '../../../../functions/common/errors.js';

describe('env readers', () => {
  it('names the variable when a required one is missing', () => {
    expect(() => requireString({}, 'TABLE_NAME')).toThrow(
      new ConfigError('TABLE_NAME', 'is required but not set'),
    );
  });

  it('reads numbers with limits and falls back when unset', () => {
    expect(optionalNumber({ RESERVE: '3' }, 'RESERVE', 0, { min: 0, integer: true })).toBe(3);
    expect(optionalNumber({}, 'RESERVE', 2)).toBe(2);
    expect(() => optionalNumber({ RESERVE: '-1' }, 'RESERVE', 0, { min: 0 })).toThrow(
      /RESERVE: must be >= 0/,
    );
    expect(() => optionalNumber({ RESERVE: 'x' }, 'RESERVE', 0)).toThrow(/RESERVE: must be a number/);
    expect(() => optionalNumber({ RESERVE: '1.5' }, 'RESERVE', 0, { integer: true })).toThrow(/integer/);
  });

  it('splits comma lists and drops empty items', () => {
    expect(optionalList({ ALLOW: ' a.com, *.b.org ,,' }, 'ALLOW')).toEqual(['a.com', '*.b.org']);
    expect(optionalList({}, 'ALLOW')).toEqual([]);
  });
});
