import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../../infra/config.js';
import {
  CONSTRUCT_REFERENCE_PATH,
  grantStatements,
  propDocs,
  renderConstructReference,
} from '../../../infra/reference.js';

/**
 * docs/construct.md is what `npm run docs:construct` renders from infra/threadgate.ts and the
 * template it synthesizes, and each prop's "Valid range" is the one resolveConfig enforces.
 */
describe('docs/construct.md', () => {
  it('is what `npm run docs:construct` renders from the code', () => {
    expect(
      readFileSync(CONSTRUCT_REFERENCE_PATH, 'utf8'),
      'docs/construct.md is stale: npm run docs:construct',
    ).toBe(renderConstructReference());
  }, 240_000);

  it('documents every prop with a description and a default', () => {
    for (const p of propDocs()) {
      expect(p.text, p.name).not.toBe('');
      expect(p.default, p.name).not.toBe('');
    }
  });

  /** Numeric props whose range starts with two numbers: `A–B`. */
  const numeric = propDocs().flatMap((p) => {
    const m = ['number', 'PerCaptchaTypeMs'].includes(p.type) ? /^([\d.]+)–([\d.]+)/.exec(p.range) : null;
    return m ? [[p.name, Number(m[1]), Number(m[2])] as const] : [];
  });

  it('finds the numeric ranges it checks', () => {
    expect(numeric.map(([n]) => n)).toEqual(
      expect.arrayContaining(['reserve', 'workerMemoryMb', 'timeScale']),
    );
  });

  it.each(numeric)(
    '%s: resolveConfig refuses a value just outside %s–%s, naming the bound',
    (name, low, high) => {
      const below = Number.isInteger(low) ? low - 1 : low / 2;
      const above = Number.isInteger(high) ? high + 1 : high * 2;
      for (const [value, bound] of [
        [below, low],
        [above, high],
      ] as const) {
        expect(() => resolveConfig({ [name]: value }), `${name}=${value}`).toThrow(String(bound));
        expect(() => resolveConfig({ [name]: value })).toThrow(new RegExp(`^${name}: `));
      }
    },
  );

  it('reads each grant from the synthesized policy: grantProduce covers grantSendJobs and grantReadOutcomes', () => {
    const actions = (m: string) => grantStatements(m).flatMap((s) => s.actions);
    expect(actions('grantProduce')).toEqual(
      expect.arrayContaining([...actions('grantSendJobs'), ...actions('grantReadOutcomes')]),
    );
    // The state item's read for wait(state_table=…), never its write.
    const state = grantStatements('grantProduce').filter((s) =>
      s.resources.some((r) => r.includes('SlotLedger')),
    );
    expect(state.map((s) => s.actions)).toEqual([['dynamodb:GetItem']]);
    expect(actions('grantProduce')).not.toContain('dynamodb:UpdateItem');
  }, 240_000);
});
